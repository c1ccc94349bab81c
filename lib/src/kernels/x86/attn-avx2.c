/* attn-avx2.c: AVX2+FMA kernels of the attention family -- the AVX-512
 * design (attn-avx512.c) with 8-float vectors and 16 registers:
 * register-blocked score and output tiles and a vectorised online softmax,
 * all vectorised over query rows (see kernels/attn.h). */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "build this file with -mavx2 -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <math.h>

#include "../kernels.h"

#define AI static inline __attribute__((always_inline))

/* ==== register-blocked tile product ===================================== *
 * C[r][i] (+)= sum_{t<kc} A(r, t) * Bm[t*ldb + i] for r < MR, i < 8*NV with
 * A(r, t) = a[r*ars + t*aks] broadcast (see attn-avx512.c).  6 x 2 = 12
 * accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm registers:
 * 12 FMAs per 2 vector loads and 6 broadcasts. */
#define MR_MAX 6
#define NV_MAX 2

AI void micro(const int MR, const int NV, float *c, int64_t ldc,
              const float *a, int64_t ars, int64_t aks, const float *b,
              int64_t ldb, int64_t kc, int load_c, const float *scale)
{
  __m256 acc[MR_MAX][NV_MAX];
  int64_t t;
  int r, v;

#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
#pragma GCC unroll 2
    for (v = 0; v < NV; v++) {
      if (load_c) {
        acc[r][v] = _mm256_load_ps(c + r * ldc + 8 * v);
        if (scale)
          acc[r][v] = _mm256_mul_ps(acc[r][v], _mm256_load_ps(scale + 8 * v));
      } else {
        acc[r][v] = _mm256_setzero_ps();
      }
    }
  for (t = 0; t < kc; t++) {
    __m256 bv[NV_MAX];
#pragma GCC unroll 2
    for (v = 0; v < NV; v++)
      bv[v] = _mm256_load_ps(b + 8 * v);
#pragma GCC unroll 8
    for (r = 0; r < MR; r++) {
      __m256 av = _mm256_broadcast_ss(a + r * ars);
#pragma GCC unroll 2
      for (v = 0; v < NV; v++)
        acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += aks;
    b += ldb;
  }
#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
#pragma GCC unroll 2
    for (v = 0; v < NV; v++)
      _mm256_store_ps(c + r * ldc + 8 * v, acc[r][v]);
}

#define MICRO_CASE(MR, NV)                                                     \
  case (MR - 1) * NV_MAX + (NV - 1):                                           \
    micro(MR, NV, c, ldc, a, ars, aks, b, ldb, kc, load_c, scale);             \
    break;
#define MICRO_ROW(MR) MICRO_CASE(MR, 1) MICRO_CASE(MR, 2)

static void micro_any(int mr, int nv, float *c, int64_t ldc, const float *a,
                      int64_t ars, int64_t aks, const float *b, int64_t ldb,
                      int64_t kc, int load_c, const float *scale)
{
  switch ((mr - 1) * NV_MAX + (nv - 1)) {
    MICRO_ROW(1) MICRO_ROW(2) MICRO_ROW(3) MICRO_ROW(4) MICRO_ROW(5)
    MICRO_ROW(6)
  default:
    break;
  }
}

/* C [n][ld]: 16 query rows at a time, MR rows of A within them.  Rows are
 * padded to 16 (kernels/attn.h), so every group has both vectors. */
static void tile_product(float *c, int64_t ldc, const float *a, int64_t ars,
                         int64_t aks, const float *b, int64_t ldb, int64_t kc,
                         int64_t n, int64_t m, int load_c, const float *scale)
{
  int64_t nvec = (m + 7) / 8, i0, r0;

  for (i0 = 0; i0 < nvec * 8; i0 += 8 * NV_MAX) {
    int nv = (int)(nvec - i0 / 8 < NV_MAX ? nvec - i0 / 8 : NV_MAX);
    for (r0 = 0; r0 < n; r0 += MR_MAX) {
      int mr = (int)(n - r0 < MR_MAX ? n - r0 : MR_MAX);
      if (mr == MR_MAX && nv == NV_MAX)
        micro(MR_MAX, NV_MAX, c + r0 * ldc + i0, ldc, a + r0 * ars, ars, aks,
              b + i0, ldb, kc, load_c, scale ? scale + i0 : NULL);
      else
        micro_any(mr, nv, c + r0 * ldc + i0, ldc, a + r0 * ars, ars, aks,
                  b + i0, ldb, kc, load_c, scale ? scale + i0 : NULL);
    }
  }
}

static void qk_tile_avx2(float *s, int64_t lds, const float *k, int64_t ldk,
                         const float *qt, int64_t ldq, int64_t nk, int64_t d,
                         int64_t m)
{
  tile_product(s, lds, k, ldk, 1, qt, ldq, d, nk, m, 0, NULL);
}

static void pv_tile_avx2(float *ot, int64_t ldo, const float *alpha,
                         const float *v, int64_t ldv, const float *p,
                         int64_t ldp, int64_t nk, int64_t dv, int64_t m)
{
  tile_product(ot, ldo, v, 1, ldv, p, ldp, nk, dv, m, 1, alpha);
}

/* ==== exp and tanh ====================================================== */

/* exp(x) as in attn-avx512.c; 2^n is built in the exponent field (n stays
 * in -126..127 after the clamp, so it is always a normal number). */
AI __m256 exp256(__m256 x)
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

/* tanh(x) as in attn-avx512.c. */
AI __m256 tanh256(__m256 x)
{
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 ax = _mm256_andnot_ps(sign, x), z = _mm256_mul_ps(ax, ax), p, big,
         e;

  p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, z), ax, ax);
  e = exp256(_mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_add_ps(ax, ax)));
  big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                      _mm256_div_ps(_mm256_set1_ps(2.0f),
                                    _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  p = _mm256_blendv_ps(
      big, p, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
  return _mm256_or_ps(p, _mm256_and_ps(x, sign));
}

/* ==== softmax of a tile ================================================= */

AI __m256 finish_scores(const struct ab__attn_tile *t, int64_t i0, int64_t j,
                        int has_cap, int has_bptr, int has_tb, int has_mask,
                        const float *bcontig, __m256i lo, __m256i hi)
{
  __m256 x = _mm256_load_ps(t->s + j * t->ld + i0);

  if (has_cap)
    x = _mm256_mul_ps(_mm256_set1_ps(t->softcap), tanh256(x));
  if (has_bptr) {
    if (bcontig) {
      x = _mm256_add_ps(x, _mm256_loadu_ps(bcontig - j));
    } else {
      float g[8];
      int u;
      for (u = 0; u < 8; u++)
        g[u] = t->bptr[i0 + u][-j];
      x = _mm256_add_ps(x, _mm256_loadu_ps(g));
    }
  }
  if (has_tb)
    x = _mm256_add_ps(x, _mm256_load_ps(t->tb + j * t->ld + i0));
  if (has_mask) {
    __m256i jv = _mm256_set1_epi32((int)j);
    /* visible iff lo <= j < hi, i.e. !(lo > j) && (hi > j) */
    __m256i vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(lo, jv),
                                      _mm256_cmpgt_epi32(hi, jv));
    x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x,
                         _mm256_castsi256_ps(vis));
  }
  return x;
}

AI void softmax_body(const struct ab__attn_tile *t, int has_cap, int has_bptr,
                     int has_tb, int has_mask)
{
  const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
  int64_t i0, j, nk = t->nk, ld = t->ld;

  for (i0 = 0; i0 < t->m; i0 += 8) {
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    const float *bcontig = NULL;
    __m256 vmax = ninf, mold, mnew, mu, sum = zero, l;

    if (has_mask) {
      lo = _mm256_loadu_si256((const __m256i *)(t->lo + i0));
      hi = _mm256_loadu_si256((const __m256i *)(t->hi + i0));
    }
    if (has_bptr) {
      int u, ok = 1;
      for (u = 1; u < 8; u++)
        ok &= t->bptr[i0 + u] == t->bptr[i0] + u;
      bcontig = ok ? t->bptr[i0] : NULL;
    }
    if (t->mode == AB__ATTN_FINAL) {
      __m256 m = _mm256_load_ps(t->mx + i0), den, live;
      l = _mm256_load_ps(t->l + i0);
      live = _mm256_cmp_ps(l, zero, _CMP_GT_OQ);
      mu = _mm256_and_ps(m, _mm256_cmp_ps(m, ninf, _CMP_NEQ_OQ));
      den = _mm256_blendv_ps(_mm256_set1_ps(1.0f), l, live);
      for (j = 0; j < nk; j++) {
        __m256 x = finish_scores(t, i0, j, has_cap, has_bptr, has_tb,
                                 has_mask, bcontig, lo, hi);
        __m256 p = _mm256_div_ps(exp256(_mm256_sub_ps(x, mu)), den);
        _mm256_store_ps(t->s + j * ld + i0, _mm256_and_ps(p, live));
      }
      continue;
    }
    if (!has_cap && !has_bptr && !has_tb && !has_mask) {
      for (j = 0; j < nk; j++)
        vmax = _mm256_max_ps(vmax, _mm256_load_ps(t->s + j * ld + i0));
    } else {
      for (j = 0; j < nk; j++) {
        __m256 x = finish_scores(t, i0, j, has_cap, has_bptr, has_tb,
                                 has_mask, bcontig, lo, hi);
        _mm256_store_ps(t->s + j * ld + i0, x);
        vmax = _mm256_max_ps(vmax, x);
      }
    }
    mold = _mm256_load_ps(t->mx + i0);
    mnew = _mm256_max_ps(mold, vmax);
    /* 0 instead of -inf for rows that have seen only -inf (see ref). */
    mu = _mm256_and_ps(mnew, _mm256_cmp_ps(mnew, ninf, _CMP_NEQ_OQ));
    for (j = 0; j < nk; j++) {
      __m256 p = exp256(_mm256_sub_ps(_mm256_load_ps(t->s + j * ld + i0), mu));
      _mm256_store_ps(t->s + j * ld + i0, p);
      sum = _mm256_add_ps(sum, p);
    }
    {
      __m256 alpha = exp256(_mm256_sub_ps(mold, mu));
      l = _mm256_fmadd_ps(_mm256_load_ps(t->l + i0), alpha, sum);
      _mm256_store_ps(t->alpha + i0, alpha);
      _mm256_store_ps(t->l + i0, l);
      _mm256_store_ps(t->mx + i0, mnew);
    }
  }
}

#define SOFTMAX_CASE(F)                                                        \
  case F:                                                                      \
    softmax_body(t, (F)&1, ((F) >> 1) & 1, ((F) >> 2) & 1, ((F) >> 3) & 1);   \
    break;

static void softmax_tile_avx2(const struct ab__attn_tile *t)
{
  int f = (t->softcap > 0.0f) | (t->bptr != NULL) << 1 | (t->tb != NULL) << 2 |
          (t->lo != NULL) << 3;

  switch (f) {
    SOFTMAX_CASE(0) SOFTMAX_CASE(1) SOFTMAX_CASE(2) SOFTMAX_CASE(3)
    SOFTMAX_CASE(4) SOFTMAX_CASE(5) SOFTMAX_CASE(6) SOFTMAX_CASE(7)
    SOFTMAX_CASE(8) SOFTMAX_CASE(9) SOFTMAX_CASE(10) SOFTMAX_CASE(11)
    SOFTMAX_CASE(12) SOFTMAX_CASE(13) SOFTMAX_CASE(14) SOFTMAX_CASE(15)
  default:
    break;
  }
}

void ab__attn_kernels_avx2(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx2;
  k->pv_tile = pv_tile_avx2;
  k->softmax_tile = softmax_tile_avx2;
}
