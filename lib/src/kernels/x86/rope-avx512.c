/* rope-avx512.c: AVX-512 kernels of the RoPE family -- 16 floats per step
 * for the rotation (masked tails, streaming stores for large outputs) and
 * 8 doubles per step for cos/sin of the table angles. */
#if !defined(__AVX512F__) || !defined(__AVX512DQ__) ||                        \
    !defined(__AVX512VL__) || !defined(__FMA__)
#error "build this file with -mavx512f -mavx512dq -mavx512vl -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

/* ==== cos / sin ========================================================= */

static void sincos_avx512(float *c, float *s, const double *theta, int64_t n)
{
  const __m512d two_over_pi = _mm512_set1_pd(AB__ROPE_2_OVER_PI);
  const __m512d limit = _mm512_set1_pd(AB__ROPE_SINCOS_LIMIT);
  const __m512d zero = _mm512_setzero_pd();
  int64_t k = 0, i;

  /* theta - q*pi/2 in three FMAs, q = round(theta*2/pi); lanes too large
   * for an int32 quadrant (or NaN) take libm like the reference. */
  for (; k + 8 <= n; k += 8) {
    __m512d t = _mm512_loadu_pd(theta + k), q, r, r2, ps, pc, sv, cv;
    __m256i qi;
    __mmask8 swap, neg_s, neg_c;

    /* NaN compares false, so it takes the libm lane path too. */
    if (_mm512_cmp_pd_mask(_mm512_abs_pd(t), limit, _CMP_LT_OQ) != 0xff) {
      for (i = k; i < k + 8; i++)
        ab__rope_sincos1(&c[i], &s[i], theta[i]);
      continue;
    }
    q = _mm512_roundscale_pd(_mm512_mul_pd(t, two_over_pi),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_pd(q, _mm512_set1_pd(AB__ROPE_PIO2_1), t);
    r = _mm512_fnmadd_pd(q, _mm512_set1_pd(AB__ROPE_PIO2_2), r);
    r = _mm512_fnmadd_pd(q, _mm512_set1_pd(AB__ROPE_PIO2_3), r);
    r2 = _mm512_mul_pd(r, r);
    /* Taylor series on |r| <= pi/4 (constants in rope.h). */
    ps = _mm512_fmadd_pd(r2, _mm512_set1_pd(AB__ROPE_S11),
                         _mm512_set1_pd(AB__ROPE_S9));
    ps = _mm512_fmadd_pd(r2, ps, _mm512_set1_pd(AB__ROPE_S7));
    ps = _mm512_fmadd_pd(r2, ps, _mm512_set1_pd(AB__ROPE_S5));
    ps = _mm512_fmadd_pd(r2, ps, _mm512_set1_pd(AB__ROPE_S3));
    ps = _mm512_fmadd_pd(_mm512_mul_pd(r2, r), ps, r);
    pc = _mm512_fmadd_pd(r2, _mm512_set1_pd(AB__ROPE_C12),
                         _mm512_set1_pd(AB__ROPE_C10));
    pc = _mm512_fmadd_pd(r2, pc, _mm512_set1_pd(AB__ROPE_C8));
    pc = _mm512_fmadd_pd(r2, pc, _mm512_set1_pd(AB__ROPE_C6));
    pc = _mm512_fmadd_pd(r2, pc, _mm512_set1_pd(AB__ROPE_C4));
    pc = _mm512_fmadd_pd(r2, pc, _mm512_set1_pd(AB__ROPE_C2));
    pc = _mm512_fmadd_pd(r2, pc, _mm512_set1_pd(1.0));
    /* Quadrant q mod 4: odd swaps sin and cos; sin is negated for 2, 3 and
     * cos for 1, 2. */
    qi = _mm512_cvtpd_epi32(q);
    swap = _mm256_test_epi32_mask(qi, _mm256_set1_epi32(1));
    neg_s = _mm256_test_epi32_mask(qi, _mm256_set1_epi32(2));
    neg_c = _mm256_test_epi32_mask(_mm256_add_epi32(qi, _mm256_set1_epi32(1)),
                                   _mm256_set1_epi32(2));
    sv = _mm512_mask_blend_pd(swap, ps, pc);
    cv = _mm512_mask_blend_pd(swap, pc, ps);
    sv = _mm512_mask_sub_pd(sv, neg_s, zero, sv);
    cv = _mm512_mask_sub_pd(cv, neg_c, zero, cv);
    _mm256_storeu_ps(c + k, _mm512_cvtpd_ps(cv));
    _mm256_storeu_ps(s + k, _mm512_cvtpd_ps(sv));
  }
  for (; k < n; k++)
    ab__rope_sincos1(&c[k], &s[k], theta[k]);
}

/* ==== rotation =========================================================== */

static inline __mmask16 tail_mask(int64_t rem)
{
  return (__mmask16)((1u << rem) - 1u);
}

/* Stores 16 floats; streaming when asked and the address allows it. */
static inline void store16(float *p, __m512 v, int nt)
{
  if (nt)
    _mm512_stream_ps(p, v);
  else
    _mm512_storeu_ps(p, v);
}

/* Copy channels [from, dim) of a row (the part past rotary_dim). */
static inline void copy_tail(float *o, const float *x, int64_t from,
                             int64_t dim, int nt)
{
  int64_t c = from;

  for (; c + 16 <= dim; c += 16)
    store16(o + c, _mm512_loadu_ps(x + c),
            nt && ((uintptr_t)(o + c) & 63) == 0);
  if (c < dim) {
    __mmask16 m = tail_mask(dim - c);
    _mm512_mask_storeu_ps(o + c, m, _mm512_maskz_loadu_ps(m, x + c));
  }
}

/* rotate-half: pairs (k, k+h); 16 pairs per step. */
static void row_half(float *o, const float *x, const float *cp,
                     const float *sp, int64_t h, int nt)
{
  int64_t k = 0;
  /* Both halves stream only if both are 64-byte aligned. */
  int st = nt && ((uintptr_t)o & 63) == 0 && (h & 15) == 0;

  for (; k + 16 <= h; k += 16) {
    __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + h);
    __m512 c = _mm512_loadu_ps(cp + k), s = _mm512_loadu_ps(sp + k);
    store16(o + k, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)), st);
    store16(o + k + h, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)), st);
  }
  if (k < h) {
    __mmask16 m = tail_mask(h - k);
    __m512 a = _mm512_maskz_loadu_ps(m, x + k);
    __m512 b = _mm512_maskz_loadu_ps(m, x + k + h);
    __m512 c = _mm512_maskz_loadu_ps(m, cp + k);
    __m512 s = _mm512_maskz_loadu_ps(m, sp + k);
    _mm512_mask_storeu_ps(o + k, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
    _mm512_mask_storeu_ps(o + k + h, m,
                          _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
  }
}

/* interleaved: pairs (2k, 2k+1); 8 pairs (16 channels) per step.  With
 * C = [c0 c0 c1 c1 ..], S likewise and X' = X with each pair swapped,
 * out = X*C -+ X'*S (subtract on even lanes, add on odd: fmaddsub). */
static void row_interleaved(float *o, const float *x, const float *cp,
                            const float *sp, int64_t h, int nt)
{
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1,
                                       1, 0, 0);
  int64_t k = 0;
  int st = nt && ((uintptr_t)o & 63) == 0;

  for (; k + 8 <= h; k += 8) {
    __m512 xv = _mm512_loadu_ps(x + 2 * k);
    __m512 c = _mm512_permutexvar_ps(
        dup, _mm512_castps256_ps512(_mm256_loadu_ps(cp + k)));
    __m512 s = _mm512_permutexvar_ps(
        dup, _mm512_castps256_ps512(_mm256_loadu_ps(sp + k)));
    __m512 xs = _mm512_permute_ps(xv, 0xB1);
    store16(o + 2 * k, _mm512_fmaddsub_ps(xv, c, _mm512_mul_ps(xs, s)), st);
  }
  if (k < h) {
    __mmask8 m8 = (__mmask8)((1u << (h - k)) - 1u);
    __mmask16 m = tail_mask(2 * (h - k));
    __m512 xv = _mm512_maskz_loadu_ps(m, x + 2 * k);
    __m512 c = _mm512_permutexvar_ps(
        dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m8, cp + k)));
    __m512 s = _mm512_permutexvar_ps(
        dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(m8, sp + k)));
    __m512 xs = _mm512_permute_ps(xv, 0xB1);
    _mm512_mask_storeu_ps(o + 2 * k, m,
                          _mm512_fmaddsub_ps(xv, c, _mm512_mul_ps(xs, s)));
  }
}

static void rotate_rows_avx512(float *out, int64_t ldo, const float *x,
                               int64_t ldx, const float *cs, int64_t ldcs,
                               int64_t rows, int64_t h, int64_t dim,
                               int interleaved, int nt)
{
  ab__rope_rows_drive(out, ldo, x, ldx, cs, ldcs, rows, h, dim, nt,
                      interleaved ? row_interleaved : row_half, copy_tail);
  if (nt) /* streaming stores are weakly ordered: publish them */
    _mm_sfence();
}

void ab__rope_kernels_avx512(struct ab__rope_kernels *k)
{
  k->sincos = sincos_avx512;
  k->rotate_rows = rotate_rows_avx512;
}
