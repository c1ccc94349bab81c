/* simd-avx512.h: the vector vocabulary of the AVX-512 kernels -- 16 floats
 * or 8 doubles per vector, lane masks in k registers.  The templates
 * (attn-simd.c.h, vmath.c.h, rope-simd.c.h, table-simd.c.h) are written
 * over these names only; simd-avx2.h defines the same names for 256-bit
 * vectors.  Each name maps to one intrinsic or a fixed short sequence, so
 * a template compiles to what a hand-written copy per ISA would.
 *
 * Included only by the kernels/x86 files named *-avx512.c, which the Makefile
 * builds with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma. */
#ifndef AB_SIMD_AVX512_H
#define AB_SIMD_AVX512_H

#if !defined(__AVX512F__) || !defined(__AVX512BW__) ||                        \
    !defined(__AVX512VL__) || !defined(__AVX512DQ__) || !defined(__FMA__)
#error "build this file with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))
#define V_FN(name) name##_avx512

/* ---- float vectors --------------------------------------------------- */
#define V __m512
#define VI __m512i
#define VM __mmask16
#define V_W 16

#define V_LOAD(p) _mm512_load_ps(p)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_store_ps(p, x)
#define V_STOREU(p, x) _mm512_storeu_ps(p, x)
#define V_STREAM(p, x) _mm512_stream_ps(p, x) /* p 64-byte aligned */
/* V_STREAM when nt, else V_STOREU */
#define V_STORE_NT(p, x, nt) ((nt) ? V_STREAM(p, x) : V_STOREU(p, x))
#define V_SET1(f) _mm512_set1_ps(f)
#define V_ZERO() _mm512_setzero_ps()
#define V_BCAST(p) _mm512_set1_ps(*(p))
#define V_IOTA()                                                               \
  _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_MIN(a, b) _mm512_min_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)    /* a*b + c */
#define V_FMSUB(a, b, c) _mm512_fmsub_ps(a, b, c)    /* a*b - c */
#define V_FNMADD(a, b, c) _mm512_fnmadd_ps(a, b, c)  /* c - a*b */
#define V_FMADDSUB(a, b, c) _mm512_fmaddsub_ps(a, b, c) /* even -, odd + */
#define V_AND(a, b) _mm512_and_ps(a, b)       /* AVX512DQ */
#define V_ANDNOT(a, b) _mm512_andnot_ps(a, b) /* AVX512DQ */
#define V_OR(a, b) _mm512_or_ps(a, b)         /* AVX512DQ */
#define V_ABS(a) _mm512_abs_ps(a)
#define V_ROUND(a)                                                             \
  _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* a * 2^n for n integral in [-126, 127] (an exact scaling). */
#define V_SCALE2N(a, n) _mm512_scalef_ps(a, n)
/* y, or x where x is NaN: scalef already carries NaN through. */
#define V_KEEP_NAN(y, x) (y)
#define V_CMP(a, b, pred) _mm512_cmp_ps_mask(a, b, pred)
#define V_SEL(m, f, t) _mm512_mask_mov_ps(f, m, t) /* t where m, else f */
#define V_MASKZ(m, x) _mm512_maskz_mov_ps(m, x)    /* x where m, else 0 */
/* 0 where m is set, else x */
#define V_ZERO_WHERE(m, x) _mm512_mask_mov_ps(x, m, _mm512_setzero_ps())
/* Pairs (2k, 2k+1) swapped; V_W/2 floats at p, each twice. */
#define V_SWAP_PAIRS(x) _mm512_permute_ps(x, 0xB1)
#define V_LOAD_DUP2(p)                                                         \
  _mm512_permutexvar_ps(v_dup2_idx(),                                          \
                        _mm512_castps256_ps512(_mm256_loadu_ps(p)))
#define V_LOAD_DUP2_PART(p, k)                                                 \
  _mm512_permutexvar_ps(                                                       \
      v_dup2_idx(),                                                            \
      _mm512_castps256_ps512(_mm256_maskz_loadu_ps(v_first8(k), p)))

/* The first k lanes (0 <= k <= V_W) of a load or a store; the others are
 * neither read nor written (no fault past the end of an array). */
#define V_LOAD_PART(p, k) _mm512_maskz_loadu_ps(v_first(k), p)
#define V_STORE_PART(p, k, x) _mm512_mask_storeu_ps(p, v_first(k), x)

AI __mmask16 v_first(int64_t k) { return (__mmask16)((1u << k) - 1u); }
AI __mmask8 v_first8(int64_t k) { return (__mmask8)((1u << k) - 1u); }
AI __m512i v_dup2_idx(void)
{
  return _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
}

/* V_W 16-bit values widened to float (exactly): bfloat16 is the high half
 * of a float, IEEE half goes through vcvtph2ps.  Sum of the lanes. */
#define V_LOADU_BF16(p) v_loadu_bf16((const uint16_t *)(p))
#define V_LOADU_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))

/* One vpermw: word i goes to the high half of lane i, the low halves are
 * zeroed by the mask.  (A zero-extension and a shift took two instructions:
 * decoding bfloat16 K and V ran about 5 % slower on Zen 5.) */
AI __m512 v_loadu_bf16(const uint16_t *p)
{
  const __m512i spread = _mm512_set_epi16(
      15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6,
      5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);

  return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(
      (__mmask32)0xAAAAAAAAu, spread,
      _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p))));
}
/* Lane sums by folding (attn-simd.c.h's sum_lanes): V_SWAP exchanges lanes
 * l and l ^ h, V_BLEND_BIT takes b where lane bit h is set, else a
 * (h = 1, 2, 4, 8).  V_STORE4 stores the 4 lanes of group g (0..3) at p. */
#define V_SWAP(x, h) v_swap(x, h)
#define V_BLEND_BIT(a, b, h) v_blend_bit(a, b, h)
#define V_STORE4(p, x, g) v_store4(p, x, g)
/* The 4 floats at p, repeated in every group of 4 lanes. */
#define V_LOAD4(p) _mm512_broadcast_f32x4(_mm_loadu_ps(p))
#define V_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

AI __m512 v_swap(__m512 x, const int h)
{
  if (h == 1)
    return _mm512_permute_ps(x, 0xB1);
  if (h == 2)
    return _mm512_permute_ps(x, 0x4E);
  if (h == 4)
    return _mm512_shuffle_f32x4(x, x, 0xB1);
  return _mm512_shuffle_f32x4(x, x, 0x4E);
}

AI __m512 v_blend_bit(__m512 a, __m512 b, const int h)
{
  return _mm512_mask_mov_ps(a,
                            h == 1   ? (__mmask16)0xAAAA
                            : h == 2 ? (__mmask16)0xCCCC
                            : h == 4 ? (__mmask16)0xF0F0
                                     : (__mmask16)0xFF00,
                            b);
}

AI void v_store4(float *p, __m512 x, const int g)
{
  switch (g) {
  case 0: _mm_storeu_ps(p, _mm512_castps512_ps128(x)); break;
  case 1: _mm_storeu_ps(p, _mm512_extractf32x4_ps(x, 1)); break;
  case 2: _mm_storeu_ps(p, _mm512_extractf32x4_ps(x, 2)); break;
  default: _mm_storeu_ps(p, _mm512_extractf32x4_ps(x, 3)); break;
  }
}

#define VI_LOADU(p) _mm512_loadu_si512(p)
#define VI_SET1(i) _mm512_set1_epi32(i)
#define VI_ZERO() _mm512_setzero_si512()
/* lo <= j < hi, int32 lanes */
#define V_VISIBLE(lo, hi, j)                                                   \
  (_mm512_cmple_epi32_mask(lo, j) & _mm512_cmplt_epi32_mask(j, hi))

#define V_SFENCE() _mm_sfence()

/* ---- double vectors -------------------------------------------------- */
#define VD __m512d
#define VDM __mmask8
#define VD_W 8

#define VD_LOADU(p) _mm512_loadu_pd(p)
#define VD_STOREU(p, x) _mm512_storeu_pd(p, x)
#define VD_SET1(f) _mm512_set1_pd(f)
#define VD_ZERO() _mm512_setzero_pd()
#define VD_ADD(a, b) _mm512_add_pd(a, b)
#define VD_SUB(a, b) _mm512_sub_pd(a, b)
#define VD_MUL(a, b) _mm512_mul_pd(a, b)
#define VD_FMADD(a, b, c) _mm512_fmadd_pd(a, b, c)
#define VD_FNMADD(a, b, c) _mm512_fnmadd_pd(a, b, c)
#define VD_FMSUB(a, b, c) _mm512_fmsub_pd(a, b, c)
#define VD_ABS(a) _mm512_abs_pd(a)
#define VD_ROUND(a)                                                            \
  _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VD_CMP(a, b, pred) _mm512_cmp_pd_mask(a, b, pred)
#define VD_SEL(m, f, t) _mm512_mask_mov_pd(f, m, t)
#define VDM_ALL(m) ((m) == 0xff)
/* Lanes whose bit pattern has bit `bit` (a power of 2) set. */
#define VDM_BIT(x, bit)                                                        \
  _mm512_test_epi64_mask(_mm512_castpd_si512(x), _mm512_set1_epi64(bit))
/* VD_W floats from a double vector (rounded once). */
#define VD_STOREU_F32(p, x) _mm256_storeu_ps(p, _mm512_cvtpd_ps(x))
/* Two double vectors as one float vector: a in the low lanes. */
/* Two double vectors as one float vector of alternate lanes: a0 b0 a1 b1 */
#define VD_INTERLEAVE_F32(a, b)                                                \
  _mm512_permutex2var_ps(                                                      \
      _mm512_castps256_ps512(_mm512_cvtpd_ps(a)),                              \
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,    \
                        23),                                                   \
      _mm512_castps256_ps512(_mm512_cvtpd_ps(b)))
#define VD_PACK_F32(a, b)                                                      \
  _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a)),               \
                     _mm512_cvtpd_ps(b), 1)

#endif /* AB_SIMD_AVX512_H */
