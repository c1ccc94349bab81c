/* attn-avx512.c: AVX-512 kernels of the attention family -- the body in
 * attn-simd.c.h with 16-float vectors and mask registers: a 6 x 4 register
 * block (24 accumulators of the 32 zmm registers, 4 more for the B row, 1
 * for the broadcast: 24 FMAs per 4 vector loads and 6 broadcasts) and the
 * exp below. */
#if !defined(__AVX512F__) || !defined(__AVX512DQ__) || !defined(__FMA__)
#error "build this file with -mavx512f -mavx512dq -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <math.h>

#include "../kernels.h"

#define V __m512
#define VI __m512i
#define VM __mmask16
#define V_W 16
#define MR_MAX 6
#define NV_MAX 4
#define V_FN(name) name##_avx512

#define V_LOAD(p) _mm512_load_ps(p)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_store_ps(p, x)
#define V_SET1(f) _mm512_set1_ps(f)
#define V_ZERO() _mm512_setzero_ps()
#define V_BCAST(p) _mm512_set1_ps(*(p))
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_MIN(a, b) _mm512_min_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_AND(a, b) _mm512_and_ps(a, b)       /* AVX512DQ */
#define V_ANDNOT(a, b) _mm512_andnot_ps(a, b) /* AVX512DQ */
#define V_OR(a, b) _mm512_or_ps(a, b)         /* AVX512DQ */
#define V_CMP(a, b, pred) _mm512_cmp_ps_mask(a, b, pred)
#define V_SEL(m, f, t) _mm512_mask_mov_ps(f, m, t)
#define V_MASKZ(m, x) _mm512_maskz_mov_ps(m, x)
#define VI_LOADU(p) _mm512_loadu_si512(p)
#define VI_SET1(i) _mm512_set1_epi32(i)
#define VI_ZERO() _mm512_setzero_si512()
#define V_VISIBLE(lo, hi, j)                                                   \
  (_mm512_cmple_epi32_mask(lo, j) & _mm512_cmplt_epi32_mask(j, hi))
#define V_EXP(x) exp512(x)

/* exp(x) to about 1 ulp for x in [-87.3, 88] (Cody-Waite reduction by ln 2
 * in two parts, the Cephes expf polynomial, then scalef by 2^n); 0 below
 * -87.3 (where the true value is under 1.3e-38) and so exactly 0 for -inf;
 * NaN stays NaN. */
static inline __attribute__((always_inline)) __m512 exp512(__m512 x)
{
  const __m512 lo = _mm512_set1_ps(-87.3f);
  __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
  __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  __m512 p, y;

  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  y = _mm512_scalef_ps(_mm512_add_ps(p, _mm512_set1_ps(1.0f)), n);
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ),
                            _mm512_setzero_ps());
}

#include "attn-simd.c.h"

void ab__attn_kernels_avx512(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx512;
  k->pv_tile = pv_tile_avx512;
  k->softmax_tile = softmax_tile_avx512;
}
