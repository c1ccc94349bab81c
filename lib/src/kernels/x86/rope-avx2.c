/* rope-avx2.c: AVX2+FMA kernels of the RoPE family -- 8 floats per step
 * for the rotation (streaming stores for large outputs) and 4 doubles per
 * step for cos/sin of the table angles; scalar tails. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "build this file with -mavx2 -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

/* ==== cos / sin ========================================================= */

/* Same algorithm as the AVX-512 file (constants in rope.h). */
static void sincos_avx2(float *c, float *s, const double *theta, int64_t n)
{
  const __m256d two_over_pi = _mm256_set1_pd(AB__ROPE_2_OVER_PI);
  const __m256d limit = _mm256_set1_pd(AB__ROPE_SINCOS_LIMIT);
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
  int64_t k = 0, i;

  for (; k + 4 <= n; k += 4) {
    __m256d t = _mm256_loadu_pd(theta + k), q, r, r2, ps, pc, sv, cv, swap;
    __m256i qi;

    /* |t| < limit for every lane (NaN compares false): else libm. */
    if (_mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, t), limit,
                                         _CMP_LT_OQ)) != 0xf) {
      for (i = k; i < k + 4; i++)
        ab__rope_sincos1(&c[i], &s[i], theta[i]);
      continue;
    }
    q = _mm256_round_pd(_mm256_mul_pd(t, two_over_pi),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_pd(q, _mm256_set1_pd(AB__ROPE_PIO2_1), t);
    r = _mm256_fnmadd_pd(q, _mm256_set1_pd(AB__ROPE_PIO2_2), r);
    r = _mm256_fnmadd_pd(q, _mm256_set1_pd(AB__ROPE_PIO2_3), r);
    r2 = _mm256_mul_pd(r, r);
    ps = _mm256_fmadd_pd(r2, _mm256_set1_pd(AB__ROPE_S11),
                         _mm256_set1_pd(AB__ROPE_S9));
    ps = _mm256_fmadd_pd(r2, ps, _mm256_set1_pd(AB__ROPE_S7));
    ps = _mm256_fmadd_pd(r2, ps, _mm256_set1_pd(AB__ROPE_S5));
    ps = _mm256_fmadd_pd(r2, ps, _mm256_set1_pd(AB__ROPE_S3));
    ps = _mm256_fmadd_pd(_mm256_mul_pd(r2, r), ps, r);
    pc = _mm256_fmadd_pd(r2, _mm256_set1_pd(AB__ROPE_C12),
                         _mm256_set1_pd(AB__ROPE_C10));
    pc = _mm256_fmadd_pd(r2, pc, _mm256_set1_pd(AB__ROPE_C8));
    pc = _mm256_fmadd_pd(r2, pc, _mm256_set1_pd(AB__ROPE_C6));
    pc = _mm256_fmadd_pd(r2, pc, _mm256_set1_pd(AB__ROPE_C4));
    pc = _mm256_fmadd_pd(r2, pc, _mm256_set1_pd(AB__ROPE_C2));
    pc = _mm256_fmadd_pd(r2, pc, _mm256_set1_pd(1.0));
    /* Quadrant q mod 4 as 64-bit lane masks: odd swaps sin and cos; sin is
     * negated for 2, 3 and cos for 1, 2. */
    qi = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(q));
    swap = _mm256_castsi256_pd(
        _mm256_cmpeq_epi64(_mm256_and_si256(qi, one), one));
    sv = _mm256_blendv_pd(ps, pc, swap);
    cv = _mm256_blendv_pd(pc, ps, swap);
    sv = _mm256_xor_pd(
        sv, _mm256_and_pd(sign, _mm256_castsi256_pd(_mm256_cmpeq_epi64(
                                    _mm256_and_si256(qi, two), two))));
    cv = _mm256_xor_pd(
        cv, _mm256_and_pd(sign, _mm256_castsi256_pd(_mm256_cmpeq_epi64(
                                    _mm256_and_si256(_mm256_add_epi64(qi, one),
                                                     two),
                                    two))));
    _mm_storeu_ps(c + k, _mm256_cvtpd_ps(cv));
    _mm_storeu_ps(s + k, _mm256_cvtpd_ps(sv));
  }
  for (; k < n; k++)
    ab__rope_sincos1(&c[k], &s[k], theta[k]);
}

/* ==== rotation =========================================================== */

static inline void store8(float *p, __m256 v, int nt)
{
  if (nt)
    _mm256_stream_ps(p, v);
  else
    _mm256_storeu_ps(p, v);
}

/* rotate-half: pairs (k, k+h); 8 pairs per step. */
static void row_half(float *o, const float *x, const float *cp,
                     const float *sp, int64_t h, int nt)
{
  int64_t k = 0;
  /* Both halves stream only if both are 32-byte aligned. */
  int st = nt && ((uintptr_t)o & 31) == 0 && (h & 7) == 0;

  for (; k + 8 <= h; k += 8) {
    __m256 a = _mm256_loadu_ps(x + k), b = _mm256_loadu_ps(x + k + h);
    __m256 c = _mm256_loadu_ps(cp + k), s = _mm256_loadu_ps(sp + k);
    store8(o + k, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)), st);
    store8(o + k + h, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)), st);
  }
  for (; k < h; k++)
    ab__rope_pair(&o[k], &o[k + h], x[k], x[k + h], cp[k], sp[k]);
}

/* interleaved: pairs (2k, 2k+1); 4 pairs per step, out = X*C -+ X'*S with
 * C = [c0 c0 c1 c1 ..] and X' the pair-swapped X (fmaddsub). */
static void row_interleaved(float *o, const float *x, const float *cp,
                            const float *sp, int64_t h, int nt)
{
  const __m256i dup = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
  int64_t k = 0;
  int st = nt && ((uintptr_t)o & 31) == 0;

  for (; k + 4 <= h; k += 4) {
    __m256 xv = _mm256_loadu_ps(x + 2 * k);
    __m256 c = _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(_mm_loadu_ps(cp + k)), dup);
    __m256 s = _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(_mm_loadu_ps(sp + k)), dup);
    __m256 xs = _mm256_permute_ps(xv, 0xB1);
    store8(o + 2 * k, _mm256_fmaddsub_ps(xv, c, _mm256_mul_ps(xs, s)), st);
  }
  for (; k < h; k++)
    ab__rope_pair(&o[2 * k], &o[2 * k + 1], x[2 * k], x[2 * k + 1], cp[k],
                  sp[k]);
}

/* The channels past rotary_dim are short or absent: a plain copy. */
static void copy_tail(float *o, const float *x, int64_t from, int64_t dim,
                      int nt)
{
  (void)nt;
  memcpy(o + from, x + from, (size_t)(dim - from) * sizeof *o);
}

static void rotate_rows_avx2(float *out, int64_t ldo, const float *x,
                             int64_t ldx, const float *cs, int64_t ldcs,
                             int64_t rows, int64_t h, int64_t dim,
                             int interleaved, int nt)
{
  ab__rope_rows_drive(out, ldo, x, ldx, cs, ldcs, rows, h, dim, nt,
                      interleaved ? row_interleaved : row_half, copy_tail);
  if (nt) /* streaming stores are weakly ordered: publish them */
    _mm_sfence();
}

void ab__rope_kernels_avx2(struct ab__rope_kernels *k)
{
  k->sincos = sincos_avx2;
  k->rotate_rows = rotate_rows_avx2;
}
