/* attn-simd.c.h: the body of the x86 attention kernels, written once over
 * the vector vocabulary of simd-avx2.h / simd-avx512.h and the vector math
 * of vmath.c.h, and included by attn-avx2.c (8 floats, 16 registers) and
 * attn-avx512.c (16 floats, 32 registers) -- register-blocked score and
 * output tiles and a vectorised online softmax, all vectorised over query
 * rows (see kernels/attn.h for the transposed layout).
 *
 * The including file defines, before the #include, the register blocks:
 *   MR_MAX, NV_MAX     tile products: rows of A x vectors of B
 *   QKR_KB, QKR_RB     few rows, scores: keys x rows
 *   PVR_RB, PVR_CB     few rows, output: rows x vectors of columns
 * Everything else (V, V_W, V_LOAD, V_FMADD, exp_v, tanh_v, ...) comes from
 * the vocabulary it included first. */

#define V_PRAGMA_(x) _Pragma(#x)
/* #pragma GCC unroll does not expand macros; _Pragma of a string does. */
#define V_UNROLL(n) V_PRAGMA_(GCC unroll n)

/* ==== register-blocked tile product ===================================== *
 * C[r][i] (+)= sum_{t<kc} A(r, t) * Bm[t*ldb + i] for r < MR, i < V_W*NV,
 * where A(r, t) = a[r*ars + t*aks] is broadcast and Bm's rows are vector
 * loads.  Scores: A = k (ars = ldk, aks = 1), Bm = qt.  Output: A = v^T
 * (ars = 1, aks = ldv), Bm = p, and C starts from ot * alpha.
 * MR x NV accumulators stay in registers for the whole reduction, with NV
 * more for the B row and one for the broadcast, so the FMA pipes, not the
 * loads, set the pace (register budgets in the including files). */
AI void micro(const int MR, const int NV, float *c, int64_t ldc,
              const float *a, int64_t ars, int64_t aks, const float *b,
              int64_t ldb, int64_t kc, int load_c, const float *scale)
{
  V acc[MR_MAX][NV_MAX];
  int64_t t;
  int r, v;

#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
    V_UNROLL(NV_MAX)
    for (v = 0; v < NV; v++) {
      if (load_c) {
        acc[r][v] = V_LOAD(c + r * ldc + V_W * v);
        if (scale)
          acc[r][v] = V_MUL(acc[r][v], V_LOAD(scale + V_W * v));
      } else {
        acc[r][v] = V_ZERO();
      }
    }
  for (t = 0; t < kc; t++) {
    V bv[NV_MAX];
    V_UNROLL(NV_MAX)
    for (v = 0; v < NV; v++)
      bv[v] = V_LOAD(b + V_W * v);
#pragma GCC unroll 8
    for (r = 0; r < MR; r++) {
      V av = V_BCAST(a + r * ars);
      V_UNROLL(NV_MAX)
      for (v = 0; v < NV; v++)
        acc[r][v] = V_FMADD(av, bv[v], acc[r][v]);
    }
    a += aks;
    b += ldb;
  }
#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
    V_UNROLL(NV_MAX)
    for (v = 0; v < NV; v++)
      V_STORE(c + r * ldc + V_W * v, acc[r][v]);
}

/* One instantiation per (MR, NV), picked at run time for the edges. */
#define MICRO_CASE(MR, NV)                                                     \
  case (MR - 1) * NV_MAX + (NV - 1):                                           \
    micro(MR, NV, c, ldc, a, ars, aks, b, ldb, kc, load_c, scale);             \
    break;
#if NV_MAX == 2
#define MICRO_ROW(MR) MICRO_CASE(MR, 1) MICRO_CASE(MR, 2)
#elif NV_MAX == 4
#define MICRO_ROW(MR)                                                          \
  MICRO_CASE(MR, 1) MICRO_CASE(MR, 2) MICRO_CASE(MR, 3) MICRO_CASE(MR, 4)
#else
#error "attn-simd.c.h: NV_MAX must be 2 or 4"
#endif
#if MR_MAX != 6
#error "attn-simd.c.h: micro_any instantiates MR 1..6"
#endif

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
 * products (V_W*NV_MAX query rows, then MR rows of A at a time).  Rows are
 * padded to AB__ATTN_ROW_PAD, a multiple of V_W, so vectors are whole. */
static void tile_product(float *c, int64_t ldc, const float *a, int64_t ars,
                         int64_t aks, const float *b, int64_t ldb, int64_t kc,
                         int64_t n, int64_t m, int load_c, const float *scale)
{
  int64_t nvec = (m + V_W - 1) / V_W, i0, r0;

  for (i0 = 0; i0 < nvec * V_W; i0 += V_W * NV_MAX) {
    int nv = (int)(nvec - i0 / V_W < NV_MAX ? nvec - i0 / V_W : NV_MAX);
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

static void V_FN(qk_tile)(float *s, int64_t lds, const float *k, int64_t ldk,
                          const float *qt, int64_t ldq, int64_t nk, int64_t d,
                          int64_t m)
{
  tile_product(s, lds, k, ldk, 1, qt, ldq, d, nk, m, 0, NULL);
}

static void V_FN(pv_tile)(float *ot, int64_t ldo, const float *alpha,
                          const float *v, int64_t ldv, const float *p,
                          int64_t ldp, int64_t nk, int64_t dv, int64_t m)
{
  tile_product(ot, ldo, v, 1, ldv, p, ldp, nk, dv, m, 1, alpha);
}

/* ==== softmax of a tile ================================================= */

/* Score vector (rows i0 .. i0+V_W-1, tile key j) after softcap, biases and
 * masks. */
AI V finish_scores(const struct ab__attn_tile *t, int64_t i0, int64_t j,
                   int has_cap, int has_bptr, int has_tb, int has_mask,
                   const float *bcontig, VI lo, VI hi)
{
  V x = V_LOAD(t->s + j * t->ld + i0);

  if (has_cap)
    x = V_MUL(V_SET1(t->softcap), tanh_v(x));
  if (has_bptr) {
    if (bcontig) {
      x = V_ADD(x, V_LOADU(bcontig - j));
    } else {
      float g[V_W];
      int u;
      for (u = 0; u < V_W; u++)
        g[u] = t->bptr[i0 + u][-j];
      x = V_ADD(x, V_LOADU(g));
    }
  }
  if (has_tb)
    x = V_ADD(x, V_LOAD(t->tb + j * t->ld + i0));
  if (has_mask)
    x = V_SEL(V_VISIBLE(lo, hi, VI_SET1((int)j)), V_SET1(-INFINITY), x);
  return x;
}

AI void softmax_body(const struct ab__attn_tile *t, int has_cap, int has_bptr,
                     int has_tb, int has_mask)
{
  const V ninf = V_SET1(-INFINITY);
  int64_t i0, j, nk = t->nk, ld = t->ld;

  for (i0 = 0; i0 < t->m; i0 += V_W) {
    VI lo = VI_ZERO(), hi = VI_ZERO();
    const float *bcontig = NULL;
    V vmax = ninf, mold, mnew, mu, sum = V_ZERO(), l;

    if (has_mask) {
      lo = VI_LOADU(t->lo + i0);
      hi = VI_LOADU(t->hi + i0);
    }
    if (has_bptr) {
      /* One load per key when the rows' tables are consecutive. */
      int u, ok = 1;
      for (u = 1; u < V_W; u++)
        ok &= t->bptr[i0 + u] == t->bptr[i0] + u;
      bcontig = ok ? t->bptr[i0] : NULL;
    }
    if (t->mode == AB__ATTN_FINAL) {
      /* exp(x - max) / sum with the final max and sum; 0 when sum is 0. */
      V m = V_LOAD(t->mx + i0), den;
      VM live;
      l = V_LOAD(t->l + i0);
      live = V_CMP(l, V_ZERO(), _CMP_GT_OQ);
      mu = V_MASKZ(V_CMP(m, ninf, _CMP_NEQ_OQ), m);
      den = V_SEL(live, V_SET1(1.0f), l);
      for (j = 0; j < nk; j++) {
        V x = finish_scores(t, i0, j, has_cap, has_bptr, has_tb, has_mask,
                            bcontig, lo, hi);
        V p = V_DIV(exp_v(V_SUB(x, mu)), den);
        V_STORE(t->s + j * ld + i0, V_MASKZ(live, p));
      }
      continue;
    }
    /* Pass 1: finished scores and their row max. */
    if (!has_cap && !has_bptr && !has_tb && !has_mask) {
      for (j = 0; j < nk; j++)
        vmax = V_MAX(vmax, V_LOAD(t->s + j * ld + i0));
    } else {
      for (j = 0; j < nk; j++) {
        V x = finish_scores(t, i0, j, has_cap, has_bptr, has_tb, has_mask,
                            bcontig, lo, hi);
        V_STORE(t->s + j * ld + i0, x);
        vmax = V_MAX(vmax, x);
      }
    }
    /* Pass 2: exponentials against the new running max.  A row that has
     * seen only -inf subtracts 0, so exp(-inf - 0) = 0, never NaN. */
    mold = V_LOAD(t->mx + i0);
    mnew = V_MAX(mold, vmax);
    mu = V_MASKZ(V_CMP(mnew, ninf, _CMP_NEQ_OQ), mnew);
    for (j = 0; j < nk; j++) {
      V p = exp_v(V_SUB(V_LOAD(t->s + j * ld + i0), mu));
      V_STORE(t->s + j * ld + i0, p);
      sum = V_ADD(sum, p);
    }
    {
      V alpha = exp_v(V_SUB(mold, mu));
      l = V_FMADD(V_LOAD(t->l + i0), alpha, sum);
      V_STORE(t->alpha + i0, alpha);
      V_STORE(t->l + i0, l);
      V_STORE(t->mx + i0, mnew);
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
static void V_FN(softmax_tile)(const struct ab__attn_tile *t)
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

/* ==== few rows packed 4 to a key (kernels/attn.h, softmax_rows4) ======== *
 * A vector holds V_W/4 keys of 4 rows: lane x is row x % 4.  Row maxima and
 * sums gather their lanes by folding lanes x and x ^ h (h = 4, 8, ...);
 * the lanes past the last key are -inf, so they add exp(-inf) = 0. */
AI V fold_rows4(V x, const int is_max)
{
  int h;

  V_UNROLL(4)
  for (h = 4; h < V_W; h *= 2)
    x = is_max ? V_MAX(x, V_SWAP(x, h)) : V_ADD(x, V_SWAP(x, h));
  return x;
}

static void V_FN(softmax_rows4)(float *s, int64_t nk, float *mx, float *l,
                                float *alpha)
{
  const V ninf = V_SET1(-INFINITY);
  const int64_t n = 4 * nk, nv = (n + V_W - 1) / V_W * V_W;
  V vmax = ninf, sum = V_ZERO(), mold, mnew, mu, a;
  int64_t x;

  for (x = n; x < nv; x++)
    s[x] = -INFINITY;
  for (x = 0; x < nv; x += V_W)
    vmax = V_MAX(vmax, V_LOAD(s + x));
  mold = V_LOAD4(mx);
  mnew = V_MAX(mold, fold_rows4(vmax, 1));
  /* As softmax_tile: a row that has seen only -inf subtracts 0. */
  mu = V_MASKZ(V_CMP(mnew, ninf, _CMP_NEQ_OQ), mnew);
  for (x = 0; x < nv; x += V_W) {
    V p = exp_v(V_SUB(V_LOAD(s + x), mu));
    V_STORE(s + x, p);
    sum = V_ADD(sum, p);
  }
  a = exp_v(V_SUB(mold, mu));
  V_STORE4(l, V_FMADD(V_LOAD4(l), a, fold_rows4(sum, 0)), 0);
  V_STORE4(alpha, a, 0);
  V_STORE4(mx, mnew, 0);
}

/* ==== few rows: vectorised over the head dimension ====================== *
 * qk_rows and pv_rows (see kernels/attn.h) for the blocks of a handful of
 * rows that decoding makes.  Register blocks, from the including file:
 *   QKR_KB x QKR_RB    keys x rows of q.k dot products, each accumulated
 *                      over the head dimension in one vector; the block's
 *                      V_W vectors are then reduced together (sum_lanes);
 *   PVR_RB x PVR_CB    rows x vectors of output columns, each key's value
 *                      row loaded once per block and used for every row.
 * The element type `e` is a constant in every inlined body, so each type
 * gets its own loops with the widening folded into the loads. */

/* V_W elements of type e at p + off, as floats. */
AI V load_elem(const void *p, int64_t off, const int e)
{
  if (e == AB__ELEM_BF16)
    return V_LOADU_BF16((const uint16_t *)p + off);
  if (e == AB__ELEM_F16)
    return V_LOADU_F16((const uint16_t *)p + off);
  return V_LOADU((const float *)p + off);
}

/* The first n (< V_W) of them; the other lanes are 0 and nothing past
 * p + off + n is read. */
AI V load_elem_part(const void *p, int64_t off, int64_t n, const int e)
{
  uint16_t h[V_W];

  if (e == AB__ELEM_F32)
    return V_LOAD_PART((const float *)p + off, n);
  memset(h, 0, sizeof h);
  memcpy(h, (const uint16_t *)p + off, (size_t)n * sizeof h[0]);
  return load_elem(h, 0, e);
}

/* Lane sums of n vectors (n a power of 2, at most V_W; x is overwritten):
 * lane l of the result is the sum of the lanes of x[l % n].  Level h folds
 * pairs of vectors into one, adding lanes l and l ^ h of the first where
 * lane bit h is clear and of the second where it is set; past n the vector
 * folds onto itself.  V_W sums cost V_W - 1 folds (two blends, a swap and
 * an add each) instead of V_W full horizontal reductions, and come out as
 * one vector. */
AI V sum_lanes(V *x, const int n)
{
  int h, i, w = n;

  V_UNROLL(4)
  for (h = 1; h < n; h *= 2) {
    V_UNROLL(8)
    for (i = 0; i < w / 2; i++) {
      V a = x[2 * i], b = x[2 * i + 1];
      x[i] = V_ADD(V_BLEND_BIT(a, b, h), V_SWAP(V_BLEND_BIT(b, a, h), h));
    }
    w /= 2;
  }
  V_UNROLL(4)
  for (; h < V_W; h *= 2)
    x[0] = V_ADD(x[0], V_SWAP(x[0], h));
  return x[0];
}

#if QKR_KB * QKR_RB != V_W || QKR_RB != 4
#error "attn-simd.c.h: QKR_KB x QKR_RB must be one vector of 4-row groups"
#endif

/* Keys ahead of the one being read that qk_rows prefetches.  It reads
 * QKR_KB key rows side by side, which the hardware's prefetcher follows
 * badly: without this, decoding from memory took 1.3-1.6x as long (Zen 5,
 * one thread).  pv_rows reads its value rows one after another and leaves
 * them to the hardware (but for page_kick below): prefetching them line by
 * line too cost 10-15 % with float32 values (47 against 41 ns per key and
 * kv head) and nothing measurable with bfloat16. */
#define ROWS_PREFETCH_KEYS 8

/* Pages ahead that the few-row kernels touch (page_kick): the keys 2, the
 * values 1 (1-4 pages for either measured the same). */
#define ROWS_KICK_PAGES_K 2
#define ROWS_KICK_PAGES_V 1

/* Prefetch the n bytes at p into L1 (n a multiple of 64 or not). */
AI void prefetch_bytes(const void *p, int64_t n)
{
  int64_t o;

  for (o = 0; o < n; o += 64)
    V_PREFETCH((const char *)p + o);
}

/* The hardware prefetchers follow a stream within a 4 KiB page and learn
 * each new page from its first misses, which a kernel with this much
 * arithmetic per byte then waits for.  So when a row (of ld bytes) is the
 * first to start in its page, this touches the row `pages` pages ahead
 * (the next row when rows are a page or more apart): one prefetch per
 * page, and the stream is already going when the kernel gets there.
 * Decoding from memory, one thread, ns per key and kv head (Zen 5, the
 * bench's "what limits Nq=1", 4 runs each): float32 39-46 -> 30-39,
 * bfloat16 27-35 -> 21-27. */
AI void page_kick(const char *row, int64_t ld, int pages)
{
  if ((uintptr_t)row % 4096 < (uintptr_t)ld)
    V_PREFETCH(row + (ld < 4096 ? pages * 4096 / ld : 1) * ld);
}

/* s[a*lds + b] = k_a . q_b for KB keys and RB rows, written as groups of
 * QKR_RB rows (rows RB .. QKR_RB - 1 get 0: they are padding, see
 * kernels/attn.h).  The KB x QKR_RB dot products fill one vector, reduced
 * at once by sum_lanes with key a's rows in lane group a. */
AI void qk_rows_block(const int KB, const int RB, const int e, float *s,
                      int64_t lds, const void *k, int64_t ldk, const float *q,
                      int64_t ldq, int64_t d)
{
  V acc[QKR_KB][QKR_RB];
  int64_t c;
  int a, b;

  V_UNROLL(QKR_KB)
  for (a = 0; a < KB; a++)
    V_UNROLL(QKR_RB)
    for (b = 0; b < RB; b++)
      acc[a][b] = V_ZERO();
  for (c = 0; c + V_W <= d; c += V_W) {
    V kv[QKR_KB];
    V_UNROLL(QKR_KB)
    for (a = 0; a < KB; a++)
      kv[a] = load_elem(k, a * ldk + c, e);
    V_UNROLL(QKR_RB)
    for (b = 0; b < RB; b++) {
      V qv = V_LOADU(q + b * ldq + c);
      V_UNROLL(QKR_KB)
      for (a = 0; a < KB; a++)
        acc[a][b] = V_FMADD(kv[a], qv, acc[a][b]);
    }
  }
  if (c < d) {
    V kv[QKR_KB];
    V_UNROLL(QKR_KB)
    for (a = 0; a < KB; a++)
      kv[a] = load_elem_part(k, a * ldk + c, d - c, e);
    V_UNROLL(QKR_RB)
    for (b = 0; b < RB; b++) {
      V qv = V_LOAD_PART(q + b * ldq + c, d - c);
      V_UNROLL(QKR_KB)
      for (a = 0; a < KB; a++)
        acc[a][b] = V_FMADD(kv[a], qv, acc[a][b]);
    }
  }
  {
    V x[QKR_KB * QKR_RB], r;
    V_UNROLL(QKR_KB)
    for (a = 0; a < QKR_KB; a++)
      V_UNROLL(QKR_RB)
      for (b = 0; b < QKR_RB; b++)
        x[a * QKR_RB + b] = a < KB && b < RB ? acc[a][b] : V_ZERO();
    r = sum_lanes(x, QKR_KB * QKR_RB);
    V_UNROLL(QKR_KB)
    for (a = 0; a < KB; a++)
      V_STORE4(s + a * lds, r, a);
  }
}

#define QKR_CASE(KB, RB)                                                       \
  case (KB - 1) * QKR_RB + (RB - 1):                                           \
    qk_rows_block(KB, RB, e, s + j0 * lds + i0, lds, (const char *)k +         \
                  (size_t)(j0 * ldk) * esz, ldk, q + i0 * ldq, ldq, d);        \
    break;
#if QKR_KB == 4 && QKR_RB == 4
#define QKR_CASES(RB) QKR_CASE(1, RB) QKR_CASE(2, RB) QKR_CASE(3, RB) QKR_CASE(4, RB)
#define QKR_SWITCH QKR_CASES(1) QKR_CASES(2) QKR_CASES(3) QKR_CASES(4)
#elif QKR_KB == 2 && QKR_RB == 4
#define QKR_CASES(RB) QKR_CASE(1, RB) QKR_CASE(2, RB)
#define QKR_SWITCH QKR_CASES(1) QKR_CASES(2) QKR_CASES(3) QKR_CASES(4)
#else
#error "attn-simd.c.h: QKR_KB x QKR_RB must be 4 x 4 or 2 x 4"
#endif

/* Keys outer, rows inner: each key row is read once, the few rows of q
 * stay in L1. */
AI void qk_rows_e(const int e, float *s, int64_t lds, const void *k,
                  int64_t ldk, const float *q, int64_t ldq, int64_t nk,
                  int64_t d, int64_t m)
{
  const size_t esz = e == AB__ELEM_F32 ? 4 : 2;
  int64_t j0, i0;

  for (j0 = 0; j0 < nk; j0 += QKR_KB) {
    int kb = (int)(nk - j0 < QKR_KB ? nk - j0 : QKR_KB), r;
    for (r = 0; r < kb; r++)
      page_kick((const char *)k + (size_t)((j0 + r) * ldk) * esz,
                ldk * (int64_t)esz, ROWS_KICK_PAGES_K);
    if (j0 + ROWS_PREFETCH_KEYS + kb <= nk)
      prefetch_bytes((const char *)k + (size_t)((j0 + ROWS_PREFETCH_KEYS) *
                                                ldk) * esz,
                     (int64_t)((size_t)(kb - 1) * (size_t)ldk * esz) +
                         d * (int64_t)esz);
    for (i0 = 0; i0 < m; i0 += QKR_RB) {
      int rb = (int)(m - i0 < QKR_RB ? m - i0 : QKR_RB);
      switch ((kb - 1) * QKR_RB + (rb - 1)) {
        QKR_SWITCH
      default:
        break;
      }
    }
  }
}

static void V_FN(qk_rows)(float *s, int64_t lds, const void *k, int64_t ldk,
                          enum ab__elem ke, const float *q, int64_t ldq,
                          int64_t nk, int64_t d, int64_t m)
{
  switch (ke) {
  case AB__ELEM_BF16: qk_rows_e(AB__ELEM_BF16, s, lds, k, ldk, q, ldq, nk, d, m); break;
  case AB__ELEM_F16: qk_rows_e(AB__ELEM_F16, s, lds, k, ldk, q, ldq, nk, d, m); break;
  case AB__ELEM_F32: qk_rows_e(AB__ELEM_F32, s, lds, k, ldk, q, ldq, nk, d, m); break;
  }
}

/* Rows b < RB, columns [0, CB*V_W) of o: o = o*alpha + sum_j p_j v_j;
 * with `kick`, the value rows' pages ahead are touched (page_kick). */
AI void pv_rows_block(const int RB, const int CB, const int e, float *o,
                      int64_t ldo, const float *alpha, const void *v,
                      int64_t ldv, const float *p, int64_t ldp, int64_t nk,
                      int kick)
{
  const int64_t ldb = ldv * (e == AB__ELEM_F32 ? 4 : 2);
  V acc[PVR_RB][PVR_CB];
  int64_t j;
  int a, b;

  V_UNROLL(PVR_RB)
  for (b = 0; b < RB; b++)
    V_UNROLL(PVR_CB)
    for (a = 0; a < CB; a++) {
      acc[b][a] = V_LOADU(o + b * ldo + a * V_W);
      if (alpha)
        acc[b][a] = V_MUL(acc[b][a], V_SET1(alpha[b]));
    }
  for (j = 0; j < nk; j++) {
    V vv[PVR_CB];
    if (kick)
      page_kick((const char *)v + j * ldb, ldb, ROWS_KICK_PAGES_V);
    V_UNROLL(PVR_CB)
    for (a = 0; a < CB; a++)
      vv[a] = load_elem(v, j * ldv + a * V_W, e);
    V_UNROLL(PVR_RB)
    for (b = 0; b < RB; b++) {
      V pb = V_BCAST(p + j * ldp + b);
      V_UNROLL(PVR_CB)
      for (a = 0; a < CB; a++)
        acc[b][a] = V_FMADD(pb, vv[a], acc[b][a]);
    }
  }
  V_UNROLL(PVR_RB)
  for (b = 0; b < RB; b++)
    V_UNROLL(PVR_CB)
    for (a = 0; a < CB; a++)
      V_STOREU(o + b * ldo + a * V_W, acc[b][a]);
}

/* The last n (< V_W) columns of rows b < m, one partial vector each. */
AI void pv_rows_part(const int e, float *o, int64_t ldo, const float *alpha,
                     const void *v, int64_t ldv, const float *p, int64_t ldp,
                     int64_t nk, int64_t n, int64_t m)
{
  int64_t b, j;

  for (b = 0; b < m; b++) {
    V acc = V_LOAD_PART(o + b * ldo, n);
    if (alpha)
      acc = V_MUL(acc, V_SET1(alpha[b]));
    for (j = 0; j < nk; j++)
      acc = V_FMADD(V_BCAST(p + j * ldp + b), load_elem_part(v, j * ldv, n, e),
                    acc);
    V_STORE_PART(o + b * ldo, n, acc);
  }
}

#define PVR_CASE(RB, CB)                                                       \
  case (RB - 1) * PVR_CB + (CB - 1):                                           \
    pv_rows_block(RB, CB, e, o + i0 * ldo + c0, ldo, alpha ? alpha + i0 : NULL, \
                  (const char *)v + (size_t)c0 * esz, ldv, p + i0, ldp,      \
                  nk, i0 == 0 && c0 == 0);                                     \
    break;
#if PVR_RB == 2 && PVR_CB == 8
#define PVR_CASES(RB)                                                          \
  PVR_CASE(RB, 1) PVR_CASE(RB, 2) PVR_CASE(RB, 3) PVR_CASE(RB, 4)              \
  PVR_CASE(RB, 5) PVR_CASE(RB, 6) PVR_CASE(RB, 7) PVR_CASE(RB, 8)
#elif PVR_RB == 2 && PVR_CB == 4
#define PVR_CASES(RB)                                                          \
  PVR_CASE(RB, 1) PVR_CASE(RB, 2) PVR_CASE(RB, 3) PVR_CASE(RB, 4)
#else
#error "attn-simd.c.h: PVR_RB x PVR_CB must be 2 x 8 or 2 x 4"
#endif

AI void pv_rows_e(const int e, float *o, int64_t ldo, const float *alpha,
                  const void *v, int64_t ldv, const float *p, int64_t ldp,
                  int64_t nk, int64_t dv, int64_t m)
{
  const size_t esz = e == AB__ELEM_F32 ? 4 : 2;
  const int64_t full = dv / V_W * V_W;
  int64_t i0, c0;

  for (i0 = 0; i0 < m; i0 += PVR_RB) {
    int rb = (int)(m - i0 < PVR_RB ? m - i0 : PVR_RB);
    for (c0 = 0; c0 < full; c0 += PVR_CB * V_W) {
      int cb = (int)((full - c0) / V_W < PVR_CB ? (full - c0) / V_W : PVR_CB);
      switch ((rb - 1) * PVR_CB + (cb - 1)) {
        PVR_CASES(1) PVR_CASES(2)
      default:
        break;
      }
    }
  }
  if (full < dv)
    pv_rows_part(e, o + full, ldo, alpha, (const char *)v + (size_t)full * esz,
                 ldv, p, ldp, nk, dv - full, m);
}

static void V_FN(pv_rows)(float *o, int64_t ldo, const float *alpha,
                          const void *v, int64_t ldv, enum ab__elem ve,
                          const float *p, int64_t ldp, int64_t nk, int64_t dv,
                          int64_t m)
{
  switch (ve) {
  case AB__ELEM_BF16: pv_rows_e(AB__ELEM_BF16, o, ldo, alpha, v, ldv, p, ldp, nk, dv, m); break;
  case AB__ELEM_F16: pv_rows_e(AB__ELEM_F16, o, ldo, alpha, v, ldv, p, ldp, nk, dv, m); break;
  case AB__ELEM_F32: pv_rows_e(AB__ELEM_F32, o, ldo, alpha, v, ldv, p, ldp, nk, dv, m); break;
  }
}

/* ==== widening a tile of 16-bit rows ==================================== */

AI void widen_e(const int e, float *dst, int64_t ldd, const void *src,
                int64_t lds, int64_t rows, int64_t cols)
{
  int64_t r, c;

  for (r = 0; r < rows; r++) {
    float *d = dst + r * ldd;
    for (c = 0; c + V_W <= cols; c += V_W)
      V_STOREU(d + c, load_elem(src, r * lds + c, e));
    if (c < cols)
      V_STORE_PART(d + c, cols - c, load_elem_part(src, r * lds + c, cols - c, e));
  }
}

static void V_FN(widen)(float *dst, int64_t ldd, const void *src, int64_t lds,
                        enum ab__elem e, int64_t rows, int64_t cols)
{
  switch (e) {
  case AB__ELEM_BF16: widen_e(AB__ELEM_BF16, dst, ldd, src, lds, rows, cols); break;
  case AB__ELEM_F16: widen_e(AB__ELEM_F16, dst, ldd, src, lds, rows, cols); break;
  case AB__ELEM_F32: widen_e(AB__ELEM_F32, dst, ldd, src, lds, rows, cols); break;
  }
}
