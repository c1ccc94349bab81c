/* attn-avx2.c: AVX2+FMA kernels of the attention family -- the body in
 * attn-simd.c.h with 8-float vectors: a 6 x 2 register block (12
 * accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm registers,
 * 12 FMAs per 2 vector loads and 6 broadcasts) and the exp below. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "build this file with -mavx2 -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <math.h>

#include "../kernels.h"

#define V __m256
#define VI __m256i
#define VM __m256 /* all-ones lanes */
#define V_W 8
#define MR_MAX 6
#define NV_MAX 2
#define V_FN(name) name##_avx2

#define V_LOAD(p) _mm256_load_ps(p)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_store_ps(p, x)
#define V_SET1(f) _mm256_set1_ps(f)
#define V_ZERO() _mm256_setzero_ps()
#define V_BCAST(p) _mm256_broadcast_ss(p)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_DIV(a, b) _mm256_div_ps(a, b)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_AND(a, b) _mm256_and_ps(a, b)
#define V_ANDNOT(a, b) _mm256_andnot_ps(a, b)
#define V_OR(a, b) _mm256_or_ps(a, b)
#define V_CMP(a, b, pred) _mm256_cmp_ps(a, b, pred)
#define V_SEL(m, f, t) _mm256_blendv_ps(f, t, m)
#define V_MASKZ(m, x) _mm256_and_ps(x, m)
#define VI_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define VI_SET1(i) _mm256_set1_epi32(i)
#define VI_ZERO() _mm256_setzero_si256()
/* lo <= j < hi as !(lo > j) && (hi > j): AVX2 compares only for > */
#define V_VISIBLE(lo, hi, j)                                                   \
  _mm256_castsi256_ps(                                                         \
      _mm256_andnot_si256(_mm256_cmpgt_epi32(lo, j), _mm256_cmpgt_epi32(hi, j)))
#define V_EXP(x) exp256(x)

/* exp(x) to about 1 ulp for x in [-87.3, 88] (Cody-Waite reduction by ln 2
 * in two parts, the Cephes expf polynomial, then times 2^n built in the
 * exponent field: n stays in -126..127 after the clamp, a normal number);
 * 0 below -87.3 (where the true value is under 1.3e-38) and so exactly 0
 * for -inf; NaN stays NaN. */
static inline __attribute__((always_inline)) __m256 exp256(__m256 x)
{
  const __m256 lo = _mm256_set1_ps(-87.3f);
  __m256 xc = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x));
  __m256 n = _mm256_round_ps(
      _mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  __m256 p, y, two_n;

  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  two_n = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  y = _mm256_mul_ps(_mm256_add_ps(p, _mm256_set1_ps(1.0f)), two_n);
  /* NaN input: the clamps kept it, but the integer path lost it. */
  y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);
}

#include "attn-simd.c.h"

void ab__attn_kernels_avx2(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx2;
  k->pv_tile = pv_tile_avx2;
  k->softmax_tile = softmax_tile_avx2;
}
