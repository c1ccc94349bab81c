/* attn-avx512.c: AVX-512 kernels of the attention family -- register-
 * blocked score and output tiles and a vectorised online softmax, all
 * vectorised over query rows (see kernels/attn.h for the transposed
 * layout). */
#if !defined(__AVX512F__) || !defined(__FMA__)
#error "build this file with -mavx512f -mavx512bw -mavx512vl -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <math.h>

#include "../kernels.h"

#define AI static inline __attribute__((always_inline))

/* ==== register-blocked tile product ===================================== *
 * C[r][i] (+)= sum_{t<kc} A(r, t) * Bm[t*ldb + i] for r < MR, i < 16*NV,
 * where A(r, t) = a[r*ars + t*aks] is broadcast and Bm's rows are vector
 * loads.  Scores: A = k (ars = ldk, aks = 1), Bm = qt.  Output: A = v^T
 * (ars = 1, aks = ldv), Bm = p, and C starts from ot * alpha.
 * MR x NV accumulators stay in registers for the whole reduction: 6 x 4 =
 * 24 of the 32 zmm registers, 4 more for the B row, 1 for the broadcast --
 * 24 FMAs per 4 vector loads and 6 broadcasts, so the FMA pipes, not the
 * loads, set the pace. */
#define MR_MAX 6
#define NV_MAX 4

AI void micro(const int MR, const int NV, float *c, int64_t ldc,
              const float *a, int64_t ars, int64_t aks, const float *b,
              int64_t ldb, int64_t kc, int load_c, const float *scale)
{
  __m512 acc[MR_MAX][NV_MAX];
  int64_t t;
  int r, v;

#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (v = 0; v < NV; v++) {
      if (load_c) {
        acc[r][v] = _mm512_load_ps(c + r * ldc + 16 * v);
        if (scale)
          acc[r][v] = _mm512_mul_ps(acc[r][v], _mm512_load_ps(scale + 16 * v));
      } else {
        acc[r][v] = _mm512_setzero_ps();
      }
    }
  for (t = 0; t < kc; t++) {
    __m512 bv[NV_MAX];
#pragma GCC unroll 4
    for (v = 0; v < NV; v++)
      bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 8
    for (r = 0; r < MR; r++) {
      __m512 av = _mm512_set1_ps(a[r * ars]);
#pragma GCC unroll 4
      for (v = 0; v < NV; v++)
        acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += aks;
    b += ldb;
  }
#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (v = 0; v < NV; v++)
      _mm512_store_ps(c + r * ldc + 16 * v, acc[r][v]);
}

/* One instantiation per (MR, NV), picked at run time for the edges. */
#define MICRO_CASE(MR, NV)                                                     \
  case (MR - 1) * NV_MAX + (NV - 1):                                           \
    micro(MR, NV, c, ldc, a, ars, aks, b, ldb, kc, load_c, scale);             \
    break;
#define MICRO_ROW(MR)                                                          \
  MICRO_CASE(MR, 1) MICRO_CASE(MR, 2) MICRO_CASE(MR, 3) MICRO_CASE(MR, 4)

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

/* C [n][ld] over rows of A, vectors of Bm: the blocking loop shared by both
 * products (64 query rows, then MR rows of A at a time). */
static void tile_product(float *c, int64_t ldc, const float *a, int64_t ars,
                         int64_t aks, const float *b, int64_t ldb, int64_t kc,
                         int64_t n, int64_t m, int load_c, const float *scale)
{
  int64_t nvec = (m + 15) / 16, i0, r0;

  for (i0 = 0; i0 < nvec * 16; i0 += 16 * NV_MAX) {
    int nv = (int)(nvec - i0 / 16 < NV_MAX ? nvec - i0 / 16 : NV_MAX);
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

static void qk_tile_avx512(float *s, int64_t lds, const float *k, int64_t ldk,
                           const float *qt, int64_t ldq, int64_t nk, int64_t d,
                           int64_t m)
{
  tile_product(s, lds, k, ldk, 1, qt, ldq, d, nk, m, 0, NULL);
}

static void pv_tile_avx512(float *ot, int64_t ldo, const float *alpha,
                           const float *v, int64_t ldv, const float *p,
                           int64_t ldp, int64_t nk, int64_t dv, int64_t m)
{
  tile_product(ot, ldo, v, 1, ldv, p, ldp, nk, dv, m, 1, alpha);
}

/* ==== exp and tanh ====================================================== */

/* exp(x) to about 1 ulp for x in [-87.3, 88] (Cody-Waite reduction by ln 2
 * in two parts, the Cephes expf polynomial, then scalef by 2^n); 0 below
 * -87.3 (where the true value is under 1.3e-38) and so exactly 0 for -inf;
 * NaN stays NaN. */
AI __m512 exp512(__m512 x)
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

/* tanh(x) to a few ulp: x + x^3 P(x^2) below 0.625 (Cephes tanhf), else
 * 1 - 2 / (exp(2|x|) + 1), sign restored. */
AI __m512 tanh512(__m512 x)
{
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 ax = _mm512_andnot_ps(sign, x), z = _mm512_mul_ps(ax, ax), p, big,
         e;

  p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, z), ax, ax);
  e = exp512(_mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_add_ps(ax, ax)));
  big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                      _mm512_div_ps(_mm512_set1_ps(2.0f),
                                    _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  p = _mm512_mask_mov_ps(
      big, _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ), p);
  return _mm512_or_ps(p, _mm512_and_ps(x, sign));
}

/* ==== softmax of a tile ================================================= */

/* Score vector (rows i0..i0+15, tile key j) after softcap, biases, masks. */
AI __m512 finish_scores(const struct ab__attn_tile *t, int64_t i0, int64_t j,
                        int has_cap, int has_bptr, int has_tb, int has_mask,
                        const float *bcontig, __m512i lo, __m512i hi)
{
  __m512 x = _mm512_load_ps(t->s + j * t->ld + i0);

  if (has_cap)
    x = _mm512_mul_ps(_mm512_set1_ps(t->softcap), tanh512(x));
  if (has_bptr) {
    if (bcontig) {
      x = _mm512_add_ps(x, _mm512_loadu_ps(bcontig - j));
    } else {
      float g[16];
      int u;
      for (u = 0; u < 16; u++)
        g[u] = t->bptr[i0 + u][-j];
      x = _mm512_add_ps(x, _mm512_loadu_ps(g));
    }
  }
  if (has_tb)
    x = _mm512_add_ps(x, _mm512_load_ps(t->tb + j * t->ld + i0));
  if (has_mask) {
    __m512i jv = _mm512_set1_epi32((int)j);
    __mmask16 vis = _mm512_cmple_epi32_mask(lo, jv) &
                    _mm512_cmplt_epi32_mask(jv, hi);
    x = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, x);
  }
  return x;
}

AI void softmax_body(const struct ab__attn_tile *t, int has_cap, int has_bptr,
                     int has_tb, int has_mask)
{
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  int64_t i0, j, nk = t->nk, ld = t->ld;

  for (i0 = 0; i0 < t->m; i0 += 16) {
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    const float *bcontig = NULL;
    __m512 vmax = ninf, mold, mnew, mu, sum = _mm512_setzero_ps(), l;

    if (has_mask) {
      lo = _mm512_loadu_si512(t->lo + i0);
      hi = _mm512_loadu_si512(t->hi + i0);
    }
    if (has_bptr) {
      /* One load per key when the 16 rows' tables are consecutive. */
      int u, ok = 1;
      for (u = 1; u < 16; u++)
        ok &= t->bptr[i0 + u] == t->bptr[i0] + u;
      bcontig = ok ? t->bptr[i0] : NULL;
    }
    if (t->mode == AB__ATTN_FINAL) {
      /* exp(x - max) / sum with the final max and sum; 0 when sum is 0. */
      __m512 m = _mm512_load_ps(t->mx + i0), den;
      __mmask16 live;
      l = _mm512_load_ps(t->l + i0);
      live = _mm512_cmp_ps_mask(l, _mm512_setzero_ps(), _CMP_GT_OQ);
      mu = _mm512_mask_mov_ps(_mm512_setzero_ps(),
                              _mm512_cmp_ps_mask(m, ninf, _CMP_NEQ_OQ), m);
      den = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), live, l);
      for (j = 0; j < nk; j++) {
        __m512 x = finish_scores(t, i0, j, has_cap, has_bptr, has_tb,
                                 has_mask, bcontig, lo, hi);
        __m512 p = _mm512_div_ps(exp512(_mm512_sub_ps(x, mu)), den);
        _mm512_store_ps(t->s + j * ld + i0, _mm512_maskz_mov_ps(live, p));
      }
      continue;
    }
    /* Pass 1: finished scores and their row max. */
    if (!has_cap && !has_bptr && !has_tb && !has_mask) {
      for (j = 0; j < nk; j++)
        vmax = _mm512_max_ps(vmax, _mm512_load_ps(t->s + j * ld + i0));
    } else {
      for (j = 0; j < nk; j++) {
        __m512 x = finish_scores(t, i0, j, has_cap, has_bptr, has_tb,
                                 has_mask, bcontig, lo, hi);
        _mm512_store_ps(t->s + j * ld + i0, x);
        vmax = _mm512_max_ps(vmax, x);
      }
    }
    /* Pass 2: exponentials against the new running max.  A row that has
     * seen only -inf subtracts 0, so exp(-inf - 0) = 0, never NaN. */
    mold = _mm512_load_ps(t->mx + i0);
    mnew = _mm512_max_ps(mold, vmax);
    mu = _mm512_mask_mov_ps(_mm512_setzero_ps(),
                            _mm512_cmp_ps_mask(mnew, ninf, _CMP_NEQ_OQ), mnew);
    for (j = 0; j < nk; j++) {
      __m512 p = exp512(_mm512_sub_ps(_mm512_load_ps(t->s + j * ld + i0), mu));
      _mm512_store_ps(t->s + j * ld + i0, p);
      sum = _mm512_add_ps(sum, p);
    }
    {
      __m512 alpha = exp512(_mm512_sub_ps(mold, mu));
      l = _mm512_fmadd_ps(_mm512_load_ps(t->l + i0), alpha, sum);
      _mm512_store_ps(t->alpha + i0, alpha);
      _mm512_store_ps(t->l + i0, l);
      _mm512_store_ps(t->mx + i0, mnew);
    }
  }
}

#define SOFTMAX_CASE(F)                                                        \
  case F:                                                                      \
    softmax_body(t, (F)&1, ((F) >> 1) & 1, ((F) >> 2) & 1, ((F) >> 3) & 1);   \
    break;

/* The four options select one of 16 specialised loops, so the common
 * cases (no option; a distance-table bias; a mask on the diagonal tiles)
 * run without tests in the inner loop. */
static void softmax_tile_avx512(const struct ab__attn_tile *t)
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

void ab__attn_kernels_avx512(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx512;
  k->pv_tile = pv_tile_avx512;
  k->softmax_tile = softmax_tile_avx512;
}
