/* simd-avx2.h: the vector vocabulary of the AVX2+FMA kernels -- 8 floats or
 * 4 doubles per vector, lane masks as all-ones lanes of a vector.  The same
 * names as simd-avx512.h (which says how the templates use them).
 *
 * Included only by the kernels/x86 files named *-avx2.c, which the Makefile
 * builds with -mavx2 -mfma -mf16c. */
#ifndef AB_SIMD_AVX2_H
#define AB_SIMD_AVX2_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "build this file with -mavx2 -mfma -mf16c (see Makefile)"
#endif
#include <immintrin.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))
#define V_FN(name) name##_avx2

/* ---- float vectors --------------------------------------------------- */
#define V __m256
#define VI __m256i
#define VM __m256 /* all-ones lanes */
#define V_W 8

#define V_LOAD(p) _mm256_load_ps(p)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_store_ps(p, x)
#define V_STOREU(p, x) _mm256_storeu_ps(p, x)
#define V_STREAM(p, x) _mm256_stream_ps(p, x) /* p 32-byte aligned */
#define V_STORE_NT(p, x, nt) ((nt) ? V_STREAM(p, x) : V_STOREU(p, x))
#define V_SET1(f) _mm256_set1_ps(f)
#define V_ZERO() _mm256_setzero_ps()
#define V_BCAST(p) _mm256_broadcast_ss(p)
#define V_IOTA() _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_DIV(a, b) _mm256_div_ps(a, b)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FMSUB(a, b, c) _mm256_fmsub_ps(a, b, c)
#define V_FNMADD(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_FMADDSUB(a, b, c) _mm256_fmaddsub_ps(a, b, c)
#define V_AND(a, b) _mm256_and_ps(a, b)
#define V_ANDNOT(a, b) _mm256_andnot_ps(a, b)
#define V_OR(a, b) _mm256_or_ps(a, b)
#define V_ABS(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a)
#define V_ROUND(a)                                                             \
  _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* a * 2^n for n integral in [-126, 127]: 2^n is built in the exponent
 * field (a normal number), so the product is exact like scalef's. */
#define V_SCALE2N(a, n)                                                        \
  _mm256_mul_ps(a, _mm256_castsi256_ps(_mm256_slli_epi32(                      \
                       _mm256_add_epi32(_mm256_cvtps_epi32(n),                 \
                                        _mm256_set1_epi32(127)),               \
                       23)))
/* y, or x where x is NaN (the integer path of V_SCALE2N loses NaN). */
#define V_KEEP_NAN(y, x)                                                       \
  _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
#define V_CMP(a, b, pred) _mm256_cmp_ps(a, b, pred)
#define V_SEL(m, f, t) _mm256_blendv_ps(f, t, m)
#define V_MASKZ(m, x) _mm256_and_ps(x, m)
/* 0 where m is set, else x */
#define V_ZERO_WHERE(m, x) _mm256_andnot_ps(m, x)
#define V_SWAP_PAIRS(x) _mm256_permute_ps(x, 0xB1)
#define V_LOAD_DUP2(p)                                                         \
  _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),           \
                           _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))
#define V_LOAD_DUP2_PART(p, k)                                                 \
  _mm256_permutevar8x32_ps(                                                    \
      _mm256_castps128_ps256(_mm_maskload_ps(                                  \
          p, _mm256_castsi256_si128(v_first(k)))),                             \
      _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))

/* The first k lanes (0 <= k <= V_W) of a load or a store (vmaskmov: the
 * other lanes are neither read nor written, and cannot fault). */
#define V_LOAD_PART(p, k) _mm256_maskload_ps(p, v_first(k))
#define V_STORE_PART(p, k, x) _mm256_maskstore_ps(p, v_first(k), x)

AI __m256i v_first(int64_t k)
{
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define V_LOADU_BF16(p)                                                        \
  _mm256_castsi256_ps(_mm256_slli_epi32(                                       \
      _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define V_LOADU_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
/* Lane sums by folding (attn-simd.c.h's sum_lanes): V_SWAP exchanges lanes
 * l and l ^ h, V_BLEND_BIT takes b where lane bit h is set, else a
 * (h = 1, 2, 4).  V_STORE4 stores the 4 lanes of group g (0, 1) at p. */
#define V_SWAP(x, h) v_swap(x, h)
#define V_BLEND_BIT(a, b, h) v_blend_bit(a, b, h)
#define V_STORE4(p, x, g) v_store4(p, x, g)
/* The 4 floats at p, repeated in every group of 4 lanes. */
#define V_LOAD4(p) _mm256_broadcast_ps((const __m128 *)(p))
#define V_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

AI __m256 v_swap(__m256 x, const int h)
{
  if (h == 1)
    return _mm256_permute_ps(x, 0xB1);
  if (h == 2)
    return _mm256_permute_ps(x, 0x4E);
  return _mm256_permute2f128_ps(x, x, 0x01);
}

AI __m256 v_blend_bit(__m256 a, __m256 b, const int h)
{
  if (h == 1)
    return _mm256_blend_ps(a, b, 0xAA);
  if (h == 2)
    return _mm256_blend_ps(a, b, 0xCC);
  return _mm256_blend_ps(a, b, 0xF0);
}

AI void v_store4(float *p, __m256 x, const int g)
{
  _mm_storeu_ps(p, g == 0 ? _mm256_castps256_ps128(x)
                          : _mm256_extractf128_ps(x, 1));
}

#define VI_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define VI_SET1(i) _mm256_set1_epi32(i)
#define VI_ZERO() _mm256_setzero_si256()
/* lo <= j < hi as !(lo > j) && (hi > j): AVX2 compares only for > */
#define V_VISIBLE(lo, hi, j)                                                   \
  _mm256_castsi256_ps(                                                         \
      _mm256_andnot_si256(_mm256_cmpgt_epi32(lo, j), _mm256_cmpgt_epi32(hi, j)))

#define V_SFENCE() _mm_sfence()

/* ---- double vectors -------------------------------------------------- */
#define VD __m256d
#define VDM __m256d /* all-ones lanes */
#define VD_W 4

#define VD_LOADU(p) _mm256_loadu_pd(p)
#define VD_STOREU(p, x) _mm256_storeu_pd(p, x)
#define VD_SET1(f) _mm256_set1_pd(f)
#define VD_ZERO() _mm256_setzero_pd()
#define VD_ADD(a, b) _mm256_add_pd(a, b)
#define VD_SUB(a, b) _mm256_sub_pd(a, b)
#define VD_MUL(a, b) _mm256_mul_pd(a, b)
#define VD_FMADD(a, b, c) _mm256_fmadd_pd(a, b, c)
#define VD_FNMADD(a, b, c) _mm256_fnmadd_pd(a, b, c)
#define VD_FMSUB(a, b, c) _mm256_fmsub_pd(a, b, c)
#define VD_ABS(a) _mm256_andnot_pd(_mm256_set1_pd(-0.0), a)
#define VD_ROUND(a)                                                            \
  _mm256_round_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VD_CMP(a, b, pred) _mm256_cmp_pd(a, b, pred)
#define VD_SEL(m, f, t) _mm256_blendv_pd(f, t, m)
#define VDM_ALL(m) (_mm256_movemask_pd(m) == 0xf)
#define VDM_BIT(x, bit)                                                        \
  _mm256_castsi256_pd(_mm256_cmpeq_epi64(                                      \
      _mm256_and_si256(_mm256_castpd_si256(x), _mm256_set1_epi64x(bit)),       \
      _mm256_set1_epi64x(bit)))
#define VD_STOREU_F32(p, x) _mm_storeu_ps(p, _mm256_cvtpd_ps(x))
#define VD_INTERLEAVE_F32(a, b)                                                \
  _mm256_set_m128(_mm_unpackhi_ps(_mm256_cvtpd_ps(a), _mm256_cvtpd_ps(b)),    \
                  _mm_unpacklo_ps(_mm256_cvtpd_ps(a), _mm256_cvtpd_ps(b)))
#define VD_PACK_F32(a, b)                                                      \
  _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(a)),             \
                       _mm256_cvtpd_ps(b), 1)

#endif /* AB_SIMD_AVX2_H */
