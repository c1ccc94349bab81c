/* test-attn-kernels.c: the attention kernels of every ISA this CPU runs
 * against the scalar reference (kernels/ref/attn-ref.c) on edge shapes,
 * the accuracy of their exp and tanh against libm in double, and whole
 * attentions computed with each ISA's table against the reference table.
 *
 * Tolerances, per kernel:
 *   qk_tile, pv_tile, qk_rows, pv_rows (k, v of each element type):
 *     |got - ref| <= 4 * n * 2^-24 * sum |a_t * b_t| (+1e-30),
 *     the bound of two differently rounded length-n float sums (FMA vs
 *     multiply-then-add, n the reduction length);
 *   softmax_tile: probabilities within 4e-6 relative (exp to a few ulp,
 *     tanh-capped scores to a few ulp of softcap), max and sum likewise;
 *   softmax_rows4 (every table, the reference's too): against the online
 *     step in double, probabilities and alpha within 4e-6 relative, the
 *     max exact, the sum within 4e-6 + nk * 2^-24;
 *   widen: exact;
 *   exp alone: at most 2 ulp from the double result on [-87.3, 0];
 *   whole attention: rtol 2e-5, atol 2e-6 between ISAs. */
#include "attn-internal.h"
#include "attnbias.h"
#include "test.h"

#define PAD AB__ATTN_ROW_PAD

static int64_t rup(int64_t x) { return (x + PAD - 1) / PAD * PAD; }

static float *falloc(int64_t n)
{
  float *p = aligned_alloc(64, (size_t)((n + 15) / 16 * 16 + 16) * 4);
  int64_t i;

  for (i = 0; i < (n + 15) / 16 * 16 + 16; i++)
    p[i] = NAN; /* padding the kernels may compute must not matter */
  return p;
}

static void fill(float *p, int64_t n, double lo, double hi)
{
  int64_t i;

  for (i = 0; i < n; i++)
    p[i] = (float)test_uniform(lo, hi);
}

/* ==== tile products ===================================================== */

/* Whether two ISAs' score tiles s1, s2 ([nk][ld], m rows) differ by more
 * than the bound above for k rows kf[j*ldk + c] and queries q(i, c) =
 * q[i*qi + c*qc], sums scaled by `scale`; the first difference is
 * printed. */
static int scores_differ(const char *what, const struct ab__kernels *k,
                         const float *s1, const float *s2, int64_t ld,
                         const float *kf, int64_t ldk, const float *q,
                         int64_t qi, int64_t qc, double scale, int64_t nk,
                         int64_t d, int64_t m)
{
  int64_t i, j, c;

  for (j = 0; j < nk; j++)
    for (i = 0; i < m; i++) {
      double mag = 0;
      for (c = 0; c < d; c++)
        mag += fabs((double)kf[j * ldk + c] * q[i * qi + c * qc]) * scale;
      if (fabs((double)s1[j * ld + i] - s2[j * ld + i]) >
          4.0 * (double)d * 0x1p-24 * mag + 1e-30) {
        fprintf(stderr, "  %s %s nk %lld d %lld m %lld at (%lld,%lld): %.9g "
                        "vs %.9g\n",
                what, k->isa, (long long)nk, (long long)d, (long long)m,
                (long long)j, (long long)i, (double)s2[j * ld + i],
                (double)s1[j * ld + i]);
        return 1;
      }
    }
  return 0;
}

static int qk_case(const struct ab__kernels *ref, const struct ab__kernels *k,
                   int64_t nk, int64_t d, int64_t m)
{
  int64_t ld = rup(m), ldk = d + 3;
  float *kk = falloc(nk * ldk), *qt = falloc(d * ld), *s1 = falloc(nk * ld),
        *s2 = falloc(nk * ld);
  int bad;

  fill(kk, nk * ldk, -2, 2);
  fill(qt, d * ld, -2, 2);
  ref->attn.qk_tile(s1, ld, kk, ldk, qt, ld, nk, d, m);
  k->attn.qk_tile(s2, ld, kk, ldk, qt, ld, nk, d, m);
  bad = scores_differ("qk", k, s1, s2, ld, kk, ldk, qt, 1, ld, 1.0, nk, d, m);
  free(kk), free(qt), free(s1), free(s2);
  return bad;
}

static int pv_case(const struct ab__kernels *ref, const struct ab__kernels *k,
                   int64_t nk, int64_t dv, int64_t m, int with_alpha)
{
  int64_t ld = rup(m), ldv = dv + 5, c, i, j;
  float *v = falloc(nk * ldv), *p = falloc(nk * ld), *o1 = falloc(dv * ld),
        *o2 = falloc(dv * ld), *alpha = falloc(ld);
  int bad = 0;

  fill(v, nk * ldv, -2, 2);
  fill(p, nk * ld, 0, 1);
  fill(o1, dv * ld, -3, 3);
  fill(alpha, ld, 0, 1);
  memcpy(o2, o1, (size_t)(dv * ld) * 4);
  ref->attn.pv_tile(o1, ld, with_alpha ? alpha : NULL, v, ldv, p, ld, nk, dv,
                    m);
  k->attn.pv_tile(o2, ld, with_alpha ? alpha : NULL, v, ldv, p, ld, nk, dv, m);
  for (c = 0; c < dv && !bad; c++)
    for (i = 0; i < m && !bad; i++) {
      double mag = 0;
      for (j = 0; j < nk; j++)
        mag += fabs((double)v[j * ldv + c] * p[j * ld + i]);
      /* o2 started equal to o1: recompute the start from the reference's
       * inputs is not possible after the call, so bound by |result| too. */
      mag += fabs((double)o1[c * ld + i]);
      if (fabs((double)o1[c * ld + i] - o2[c * ld + i]) >
          4.0 * (double)(nk + 2) * 0x1p-24 * mag + 1e-30) {
        fprintf(stderr, "  pv %s nk %lld dv %lld m %lld alpha %d at (%lld,"
                        "%lld): %.9g vs %.9g\n",
                k->isa, (long long)nk, (long long)dv, (long long)m,
                with_alpha, (long long)c, (long long)i,
                (double)o2[c * ld + i], (double)o1[c * ld + i]);
        bad = 1;
      }
    }
  free(v), free(p), free(o1), free(o2), free(alpha);
  return bad;
}

TEST(attn_kernels_qk_pv_parity)
{
  static const int64_t nks[] = {1, 5, 6, 7, 13, 64, 70};
  static const int64_t ds[] = {1, 3, 64, 129};
  static const int64_t ms[] = {1, 15, 16, 17, 48, 64, 100};
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const char *const *isa;
  int tested = 0;
  size_t a, b, c;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    if (!k || k == ref) {
      if (!k)
        fprintf(stderr, "  %s: not supported by this CPU, skipped\n", *isa);
      continue;
    }
    tested++;
    for (a = 0; a < sizeof nks / sizeof *nks; a++)
      for (b = 0; b < sizeof ds / sizeof *ds; b++)
        for (c = 0; c < sizeof ms / sizeof *ms; c++) {
          if (qk_case(ref, k, nks[a], ds[b], ms[c]))
            return 1;
          if (pv_case(ref, k, nks[a], ds[b] + 1, ms[c], (int)(a + c) % 2))
            return 1;
        }
  }
  fprintf(stderr, "  %d ISA(s) besides ref tested\n", tested);
  return 0;
}

/* ==== few-row kernels and widening ====================================== */

/* n random elements of type e (float32 or the 16-bit bits of one) and the
 * float each stands for. */
static void *elem_array(int64_t n, enum ab__elem e, float *as_float)
{
  void *p = malloc((size_t)(n + 16) * 4);
  int64_t i;

  for (i = 0; i < n; i++) {
    float x = (float)test_uniform(-2, 2);
    if (e == AB__ELEM_BF16) {
      ((uint16_t *)p)[i] = ab_f32_to_bf16(x);
      as_float[i] = ab_bf16_to_f32(((uint16_t *)p)[i]);
    } else if (e == AB__ELEM_F16) {
      ((uint16_t *)p)[i] = ab_f32_to_f16(x);
      as_float[i] = ab_f16_to_f32(((uint16_t *)p)[i]);
    } else {
      ((float *)p)[i] = as_float[i] = x;
    }
  }
  return p;
}

static int rows_case(const struct ab__kernels *ref, const struct ab__kernels *k,
                     enum ab__elem e, int64_t nk, int64_t d, int64_t m)
{
  const int64_t ld = rup(m), ldk = d + 3, ldq = d + 1, ldo = d + 2;
  float *kf = falloc(nk * ldk), *q = falloc(m * ldq), *s1 = falloc(nk * ld);
  float *s2 = falloc(nk * ld), *p = falloc(nk * ld), *alpha = falloc(ld);
  float *o1 = falloc(m * ldo), *o2 = falloc(m * ldo), *w1 = falloc(nk * d);
  float *w2 = falloc(nk * d);
  void *kv = elem_array(nk * ldk, e, kf);
  int64_t i, j, c;
  int bad = 0;

  fill(q, m * ldq, -2, 2);
  fill(p, nk * ld, 0, 1);
  fill(alpha, ld, 0, 1);
  fill(o1, m * ldo, -3, 3);
  memcpy(o2, o1, (size_t)(m * ldo) * 4);
  /* Scores: k rows of type e (the reference reads them the same way). */
  ref->attn.qk_rows(s1, ld, kv, ldk, e, q, ldq, nk, d, m);
  k->attn.qk_rows(s2, ld, kv, ldk, e, q, ldq, nk, d, m);
  bad = scores_differ(e == AB__ELEM_F32    ? "qk_rows f32"
                      : e == AB__ELEM_BF16 ? "qk_rows bf16"
                                           : "qk_rows f16",
                      k, s1, s2, ld, kf, ldk, q, ldq, 1, 1.0, nk, d, m);
  /* Output: the same array as values (rows ldk apart, d columns). */
  ref->attn.pv_rows(o1, ldo, (nk & 1) ? alpha : NULL, kv, ldk, e, p, ld, nk,
                    d, m);
  k->attn.pv_rows(o2, ldo, (nk & 1) ? alpha : NULL, kv, ldk, e, p, ld, nk, d,
                  m);
  for (i = 0; i < m && !bad; i++)
    for (c = 0; c < d && !bad; c++) {
      double mag = fabs((double)o1[i * ldo + c]);
      for (j = 0; j < nk; j++)
        mag += fabs((double)kf[j * ldk + c] * p[j * ld + i]);
      if (fabs((double)o1[i * ldo + c] - o2[i * ldo + c]) >
          4.0 * (double)(nk + 2) * 0x1p-24 * mag + 1e-30) {
        fprintf(stderr, "  pv_rows %s elem %d nk %lld d %lld m %lld at "
                        "(%lld,%lld): %.9g vs %.9g\n",
                k->isa, (int)e, (long long)nk, (long long)d, (long long)m,
                (long long)i, (long long)c, (double)o2[i * ldo + c],
                (double)o1[i * ldo + c]);
        bad = 1;
      }
    }
  /* Widening is exact. */
  ref->attn.widen(w1, d, kv, ldk, e, nk, d);
  k->attn.widen(w2, d, kv, ldk, e, nk, d);
  for (j = 0; j < nk && !bad; j++)
    for (c = 0; c < d && !bad; c++)
      if (w2[j * d + c] != kf[j * ldk + c] || w1[j * d + c] != kf[j * ldk + c]) {
        fprintf(stderr, "  widen %s elem %d at (%lld,%lld): %.9g / %.9g vs "
                        "%.9g\n",
                k->isa, (int)e, (long long)j, (long long)c,
                (double)w2[j * d + c], (double)w1[j * d + c],
                (double)kf[j * ldk + c]);
        bad = 1;
      }
  free(kf), free(q), free(s1), free(s2), free(p), free(alpha), free(o1);
  free(o2), free(w1), free(w2), free(kv);
  return bad;
}

/* qk_tile_bf16 of every ISA that has it against the reference: keys and
 * query pairs of bfloat16 values, odd and even d, edge tiles. */
static int bf16_dot_case(const struct ab__kernels *ref,
                         const struct ab__kernels *k, int64_t nk, int64_t d,
                         int64_t m)
{
  const int64_t ld = rup(m), ldk = d + 5, np = (d + 1) / 2;
  uint16_t *kb = malloc(sizeof(uint16_t) * (size_t)(nk * ldk + 2));
  uint32_t *q2 = aligned_alloc(64, sizeof(uint32_t) * (size_t)(np * ld + 16));
  float *s1 = falloc(nk * ld), *s2 = falloc(nk * ld);
  float *kf = falloc(nk * ldk), *qf = falloc(d * ld);
  const float scale = 0.125f;
  int64_t i, c;
  int bad;

  for (i = 0; i < nk * ldk; i++) {
    kb[i] = ab_f32_to_bf16((float)test_uniform(-2, 2));
    kf[i] = ab_bf16_to_f32(kb[i]);
  }
  for (c = 0; c < np; c++)
    for (i = 0; i < ld; i++) {
      uint16_t lo = ab_f32_to_bf16((float)test_uniform(-2, 2));
      uint16_t hi = 2 * c + 1 < d ? ab_f32_to_bf16((float)test_uniform(-2, 2))
                                  : 0;
      q2[c * ld + i] = (uint32_t)lo | (uint32_t)hi << 16;
      qf[2 * c * ld + i] = ab_bf16_to_f32(lo);
      if (2 * c + 1 < d)
        qf[(2 * c + 1) * ld + i] = ab_bf16_to_f32(hi);
    }
  ref->attn.qk_tile_bf16(s1, ld, kb, ldk, q2, ld, nk, d, m, scale);
  k->attn.qk_tile_bf16(s2, ld, kb, ldk, q2, ld, nk, d, m, scale);
  bad = scores_differ("qk_tile_bf16", k, s1, s2, ld, kf, ldk, qf, 1, ld,
                      scale, nk, d, m);
  free(kb), free(q2), free(s1), free(s2), free(kf), free(qf);
  return bad;
}

TEST(attn_kernels_bf16_dot_parity)
{
  static const int64_t nks[] = {1, 5, 6, 7, 64};
  static const int64_t ds[] = {1, 2, 3, 64, 129};
  static const int64_t ms[] = {1, 16, 17, 64, 100};
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const char *const *isa;
  size_t a, b, c;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    if (!k || k == ref || k->attn.qk_tile_bf16 == ref->attn.qk_tile_bf16)
      continue;
    fprintf(stderr, "  %s: bfloat16 dot products, %s by default\n", k->isa,
            k->attn.bf16_dot_fast ? "used" : "not used");
    for (a = 0; a < sizeof nks / sizeof *nks; a++)
      for (b = 0; b < sizeof ds / sizeof *ds; b++)
        for (c = 0; c < sizeof ms / sizeof *ms; c++)
          if (bf16_dot_case(ref, k, nks[a], ds[b], ms[c]))
            return 1;
  }
  return 0;
}

TEST(attn_kernels_rows_parity)
{
  static const int64_t nks[] = {1, 3, 4, 5, 9, 64, 67};
  static const int64_t ds[] = {1, 7, 16, 40, 128, 131};
  static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 16};
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const char *const *isa;
  size_t a, b, c;
  int e;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    if (!k || k == ref)
      continue;
    for (e = 0; e < 3; e++)
      for (a = 0; a < sizeof nks / sizeof *nks; a++)
        for (b = 0; b < sizeof ds / sizeof *ds; b++)
          for (c = 0; c < sizeof ms / sizeof *ms; c++)
            if (rows_case(ref, k, (enum ab__elem)e, nks[a], ds[b], ms[c]))
              return 1;
  }
  return 0;
}

/* ==== softmax tile ====================================================== */

struct tile_buf {
  float *s, *tb, *mx, *l, *alpha, *rel;
  int32_t *lo, *hi;
  const float **bptr;
};

/* A tile of scores with every option the flags ask for; rows with all
 * keys masked, and (ONLINE) rows whose running max is still -inf. */
static void tile_make(struct tile_buf *b, struct ab__attn_tile *t, int64_t nk,
                      int64_t m, int flags, int mode, int contiguous)
{
  int64_t ld = rup(m), i, j, reln = ld + nk + 64;

  memset(t, 0, sizeof *t);
  b->s = falloc(nk * ld);
  b->tb = falloc(nk * ld);
  b->mx = falloc(ld);
  b->l = falloc(ld);
  b->alpha = falloc(ld);
  b->rel = falloc(reln);
  b->lo = aligned_alloc(64, (size_t)ld * 4 + 64);
  b->hi = aligned_alloc(64, (size_t)ld * 4 + 64);
  b->bptr = aligned_alloc(64, (size_t)ld * sizeof *b->bptr + 64);
  fill(b->s, nk * ld, -4, 4);
  fill(b->tb, nk * ld, -1, 1);
  fill(b->rel, reln, -2, 2);
  for (i = 0; i < ld; i++) {
    int64_t lo = test_randint(0, nk), hi = test_randint(lo, nk);
    if (i % 5 == 3)
      hi = lo; /* fully masked row */
    b->lo[i] = (int32_t)lo;
    b->hi[i] = (int32_t)hi;
    /* Consecutive rows: one distance table; otherwise jumps every 3 rows. */
    b->bptr[i] = b->rel + nk + (contiguous ? i : (i % 3) * 7 + i / 3);
    if (mode == AB__ATTN_ONLINE) {
      b->mx[i] = i % 4 == 0 ? -INFINITY : (float)test_uniform(-3, 3);
      b->l[i] = b->mx[i] == -INFINITY ? 0.0f : (float)test_uniform(0.5, 9);
    } else {
      /* Final max and sum of the finished row, as pass 1 leaves them. */
      b->mx[i] = 0;
      b->l[i] = 0;
    }
  }
  t->s = b->s;
  t->ld = ld;
  t->nk = nk;
  t->m = m;
  t->softcap = (flags & 1) ? 2.5f : 0.0f;
  t->bptr = (flags & 2) ? b->bptr : NULL;
  t->tb = (flags & 4) ? b->tb : NULL;
  t->lo = (flags & 8) ? b->lo : NULL;
  t->hi = (flags & 8) ? b->hi : NULL;
  t->mx = b->mx;
  t->l = b->l;
  t->alpha = b->alpha;
  t->mode = (enum ab__attn_mode)mode;
  if (mode == AB__ATTN_FINAL) {
    /* Max and sum in double of the finished scores (same formula as the
     * reference kernel, which the comparison then checks). */
    for (i = 0; i < m; i++) {
      double mx = -INFINITY, sum = 0;
      for (j = 0; j < nk; j++) {
        double x = b->s[j * ld + i];
        if (t->softcap > 0)
          x = t->softcap * tanh(x);
        if (t->bptr)
          x += t->bptr[i][-j];
        if (t->tb)
          x += t->tb[j * ld + i];
        if (t->lo && (j < t->lo[i] || j >= t->hi[i]))
          x = -INFINITY;
        if (x > mx)
          mx = x;
        b->alpha[i] = 0; /* unused by FINAL */
        sum += x == -INFINITY ? 0 : exp(x);
      }
      b->mx[i] = (float)mx;
      b->l[i] = mx == -INFINITY ? 0.0f : (float)(sum / exp(mx));
    }
  }
}

static void tile_free(struct tile_buf *b)
{
  free(b->s), free(b->tb), free(b->mx), free(b->l), free(b->alpha);
  free(b->rel), free(b->lo), free(b->hi), free(b->bptr);
}

static int close_f(float got, float want, double rtol)
{
  if (isinf(want) || want == 0.0f)
    return got == want;
  return fabs((double)got - want) <= rtol * fabs((double)want) + 1e-37;
}

static int softmax_case(const struct ab__kernels *ref,
                        const struct ab__kernels *k, int64_t nk, int64_t m,
                        int flags, int mode, int contiguous)
{
  struct tile_buf b1, b2;
  struct ab__attn_tile t1, t2;
  int64_t i, j, ld = rup(m);
  uint64_t seed = (uint64_t)(nk * 1000 + m * 10 + flags + 1);
  const double rtol = 4e-6;

  test_seed(seed);
  tile_make(&b1, &t1, nk, m, flags, mode, contiguous);
  test_seed(seed);
  tile_make(&b2, &t2, nk, m, flags, mode, contiguous);
  ref->attn.softmax_tile(&t1);
  k->attn.softmax_tile(&t2);
  for (i = 0; i < m; i++) {
    int ok = close_f(b2.mx[i], b1.mx[i], rtol) &&
             close_f(b2.l[i], b1.l[i], rtol) &&
             (mode == AB__ATTN_FINAL || close_f(b2.alpha[i], b1.alpha[i], rtol));
    for (j = 0; j < nk && ok; j++)
      ok = close_f(b2.s[j * ld + i], b1.s[j * ld + i], rtol) &&
           !isnan(b2.s[j * ld + i]);
    if (!ok) {
      fprintf(stderr,
              "  softmax %s nk %lld m %lld flags %d mode %d contiguous %d row "
              "%lld: mx %.9g/%.9g l %.9g/%.9g alpha %.9g/%.9g\n",
              k->isa, (long long)nk, (long long)m, flags, mode, contiguous,
              (long long)i, (double)b2.mx[i], (double)b1.mx[i],
              (double)b2.l[i], (double)b1.l[i], (double)b2.alpha[i],
              (double)b1.alpha[i]);
      for (j = 0; j < nk; j++)
        if (!close_f(b2.s[j * ld + i], b1.s[j * ld + i], rtol)) {
          fprintf(stderr, "    key %lld: %.9g vs %.9g\n", (long long)j,
                  (double)b2.s[j * ld + i], (double)b1.s[j * ld + i]);
          break;
        }
      tile_free(&b1), tile_free(&b2);
      return 1;
    }
  }
  tile_free(&b1), tile_free(&b2);
  return 0;
}

TEST(attn_kernels_softmax_parity)
{
  static const int64_t nks[] = {1, 7, 64};
  static const int64_t ms[] = {1, 9, 16, 33, 64};
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const char *const *isa;
  size_t a, b;
  int flags, mode, contiguous;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    if (!k || k == ref)
      continue;
    for (a = 0; a < sizeof nks / sizeof *nks; a++)
      for (b = 0; b < sizeof ms / sizeof *ms; b++)
        for (flags = 0; flags < 16; flags++)
          for (mode = 0; mode < 2; mode++)
            for (contiguous = 0; contiguous < 2; contiguous++)
              if (softmax_case(ref, k, nks[a], ms[b], flags, mode,
                               contiguous))
                return 1;
  }
  return 0;
}

/* ==== few rows packed 4 to a key ======================================== */

/* softmax_rows4 of every table (the reference's too) against the online
 * step computed here in double: scores in [-9, 9] for 4 rows, a running
 * state that is empty (max -inf, sum 0), below or above the tile's scores;
 * tiles of 1 .. 257 keys, so the last vector is whole or part.  Tolerances
 * as softmax_tile's, and l, a float sum of nk terms, also within
 * nk * 2^-24 relative. */
static int rows4_case(const struct ab__kernels *k, int64_t nk, int state)
{
  const int64_t cap = (4 * nk + 15) / 16 * 16;
  float *s = falloc(cap), mx[4], l[4], alpha[4];
  double ws[4 * 257], wmx[4], wl[4], walpha[4];
  int64_t i, j;
  int bad = 0;

  test_seed((uint64_t)(nk * 10 + state + 7));
  fill(s, 4 * nk, -9, 9);
  for (i = 0; i < 4; i++) {
    double m = state == 0 ? -INFINITY : state == 1 ? -12.0 + (double)i : 12.0,
           mu, sum = 0;
    mx[i] = (float)m;
    l[i] = state == 0 ? 0.0f : 1.5f + (float)i;
    for (j = 0; j < nk; j++)
      m = fmax(m, (double)s[4 * j + i]);
    mu = isinf(m) ? 0.0 : m;
    for (j = 0; j < nk; j++) {
      ws[4 * j + i] = exp((double)s[4 * j + i] - mu);
      sum += ws[4 * j + i];
    }
    walpha[i] = exp((double)mx[i] - mu);
    wl[i] = (double)l[i] * walpha[i] + sum;
    wmx[i] = m;
  }
  k->attn.softmax_rows4(s, nk, mx, l, alpha);
  for (i = 0; i < 4 && !bad; i++) {
    bad = !close_f(mx[i], (float)wmx[i], 0) ||
          !close_f(alpha[i], (float)walpha[i], 4e-6) ||
          !close_f(l[i], (float)wl[i], 4e-6 + (double)nk * 0x1p-24);
    for (j = 0; j < nk && !bad; j++)
      bad = !close_f(s[4 * j + i], (float)ws[4 * j + i], 4e-6);
    if (bad)
      fprintf(stderr,
              "  softmax_rows4 %s nk %lld state %d row %lld: mx %.9g/%.9g "
              "l %.9g/%.9g alpha %.9g/%.9g\n",
              k->isa, (long long)nk, state, (long long)i, (double)mx[i], wmx[i],
              (double)l[i], wl[i], (double)alpha[i], walpha[i]);
  }
  free(s);
  return bad;
}

TEST(attn_kernels_softmax_rows4_vs_double)
{
  static const int64_t nks[] = {1, 3, 4, 5, 17, 64, 257};
  const char *const *isa;
  size_t a;
  int state;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    if (!k)
      continue;
    for (a = 0; a < sizeof nks / sizeof *nks; a++)
      for (state = 0; state < 3; state++)
        if (rows4_case(k, nks[a], state))
          return 1;
  }
  return 0;
}

/* ==== exp and tanh accuracy ============================================= */

static double ulp_of(double x)
{
  int e;

  frexp(x, &e);
  return ldexp(1.0, e - 24);
}

/* With running max 0 and sum 0, an ONLINE tile of scores x <= 0 becomes
 * exp(x): check it against exp in double, in ulps. */
TEST(attn_kernels_exp_accuracy)
{
  enum { NK = 512, M = 16 };
  const char *const *isa;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    float *s = falloc(NK * M), *mx = falloc(M), *l = falloc(M),
          *alpha = falloc(M);
    struct ab__attn_tile t;
    double worst = 0;
    int64_t i, j;

    if (!k) {
      free(s), free(mx), free(l), free(alpha);
      continue;
    }
    for (j = 0; j < NK; j++)
      for (i = 0; i < M; i++)
        s[j * M + i] = j == 0 ? 0.0f
                              : -(float)((j * M + i) * (87.3 / (NK * M)));
    s[(NK - 1) * M + 1] = -INFINITY;
    s[(NK - 1) * M + 2] = -100.0f;
    for (i = 0; i < M; i++)
      mx[i] = 0.0f, l[i] = 0.0f;
    memset(&t, 0, sizeof t);
    t.s = s, t.ld = M, t.nk = NK, t.m = M;
    t.mx = mx, t.l = l, t.alpha = alpha;
    t.mode = AB__ATTN_ONLINE;
    {
      /* Keep the inputs: the kernel overwrites s. */
      float *x = falloc(NK * M);
      memcpy(x, s, sizeof(float) * NK * M);
      k->attn.softmax_tile(&t);
      for (j = 0; j < NK * M; j++) {
        double want = exp((double)x[j]), e;
        if (x[j] < -87.3f) {
          CHECK(s[j] == 0.0f || fabs(s[j]) < 1.3e-38);
          continue;
        }
        e = fabs((double)s[j] - want) / ulp_of(want);
        if (e > worst)
          worst = e;
      }
      CHECK(s[(NK - 1) * M + 1] == 0.0f); /* exp(-inf) is exactly 0 */
      for (i = 0; i < M; i++)
        CHECK(alpha[i] == 1.0f && mx[i] == 0.0f); /* max stayed 0 */
      free(x);
    }
    fprintf(stderr, "  %s: exp max error %.2f ulp\n", k->isa, worst);
    CHECK(worst <= 2.0);
    free(s), free(mx), free(l), free(alpha);
  }
  return 0;
}

/* Softcap 1 with a running max of 2 (above any capped score): the tile
 * becomes exp(tanh(x) - 2); its error is tanh's absolute error. */
TEST(attn_kernels_tanh_accuracy)
{
  enum { NK = 400, M = 16 };
  const char *const *isa;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    float *s = falloc(NK * M), *x = falloc(NK * M), *mx = falloc(M),
          *l = falloc(M), *alpha = falloc(M);
    struct ab__attn_tile t;
    double worst = 0;
    int64_t i, j;

    if (!k) {
      free(s), free(x), free(mx), free(l), free(alpha);
      continue;
    }
    for (j = 0; j < NK * M; j++)
      x[j] = s[j] = (float)(((double)j / (NK * M) - 0.5) * 12.0);
    for (i = 0; i < M; i++)
      mx[i] = 2.0f, l[i] = 1.0f;
    memset(&t, 0, sizeof t);
    t.s = s, t.ld = M, t.nk = NK, t.m = M;
    t.softcap = 1.0f;
    t.mx = mx, t.l = l, t.alpha = alpha;
    t.mode = AB__ATTN_ONLINE;
    k->attn.softmax_tile(&t);
    for (j = 0; j < NK * M; j++) {
      double want = exp(tanh((double)x[j]) - 2.0);
      double e = fabs((double)s[j] - want) / want;
      if (e > worst)
        worst = e;
    }
    fprintf(stderr, "  %s: exp(tanh(x) - 2) max relative error %.3g\n",
            k->isa, worst);
    CHECK(worst <= 5e-7);
    free(s), free(x), free(mx), free(l), free(alpha);
  }
  return 0;
}

/* ==== whole attentions per ISA ========================================= */

TEST(attn_kernels_whole_attention_parity)
{
  enum { B = 2, HQ = 4, HKV = 2, NQ = 150, NK = 203, D = 72, DV = 40 };
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const int64_t qs[4] = {B, HQ, NQ, D}, ks[4] = {B, HKV, NK, D},
                vs[4] = {B, HKV, NK, DV}, bs[2] = {NQ, NK};
  float *q = malloc(sizeof(float) * B * HQ * NQ * D);
  float *k = malloc(sizeof(float) * B * HKV * NK * D);
  float *v = malloc(sizeof(float) * B * HKV * NK * DV);
  float *ab = malloc(sizeof(float) * NQ * NK);
  float *o[2], *w[2], *lse[2];
  struct ab_tensor tq, tk, tv, tb;
  struct ab_attn_params p;
  struct ab_bias_params bp;
  const char *const *isa;
  int32_t kvl[B] = {NK, 111};
  int variant, x;

  for (x = 0; x < 2; x++) {
    o[x] = malloc(sizeof(float) * B * HQ * NQ * DV);
    w[x] = malloc(sizeof(float) * B * HQ * NQ * NK);
    lse[x] = malloc(sizeof(float) * B * HQ * NQ);
  }
  fill(q, B * HQ * NQ * D, -1, 1);
  fill(k, B * HKV * NK * D, -1, 1);
  fill(v, B * HKV * NK * DV, -1, 1);
  fill(ab, NQ * NK, -1, 1);
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qs));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, ks));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, vs));
  CHECK_OK(ab_tensor_init(&tb, ab, AB_DTYPE_F32, 2, bs));
  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *kn = ab__kernels_for(*isa);
    if (!kn || kn == ref)
      continue;
    for (variant = 0; variant < 4; variant++) {
      ab_attn_params_init(&p);
      ab_bias_params_init(&bp);
      p.q = &tq, p.k = &tk, p.v = &tv;
      p.causal = variant != 1;
      if (variant == 1) {
        p.attn_bias = &tb;
        p.softcap = 3.0;
      }
      if (variant == 2) {
        bp.method = AB_BIAS_ALIBI;
        p.bias = &bp;
        p.kv_lens = kvl;
      }
      if (variant == 3) {
        p.window_left = 20;
        p.window_right = 5;
        p.has_q_offset = 1;
        p.q_offset = 10;
      }
      for (x = 0; x < 2; x++) {
        struct ab__attn_tuning tune = {x ? kn : ref, 0, 0, 0, 0, 0, 0};
        ab_job_t *job;
        p.out = o[x], p.weights = w[x], p.lse = lse[x];
        CHECK_OK(ab__attention_job_tuned(&p, &tune, &job));
        CHECK_OK(ab_job_run_all(job));
        ab_job_free(job);
      }
      {
        double *want = malloc(sizeof(double) * B * HQ * NQ * NK);
        int64_t i, n[3] = {B * HQ * NQ * DV, B * HQ * NQ * NK, B * HQ * NQ};
        float *got[3] = {o[1], w[1], lse[1]}, *base[3] = {o[0], w[0], lse[0]};
        for (x = 0; x < 3; x++) {
          for (i = 0; i < n[x]; i++)
            want[i] = base[x][i];
          if (!test_array_close(__FILE__, __LINE__, *isa, got[x], want, n[x],
                                2e-5, 2e-6)) {
            fprintf(stderr, "  variant %d output %d\n", variant, x);
            free(want);
            return 1;
          }
        }
        free(want);
      }
    }
  }
  for (x = 0; x < 2; x++)
    free(o[x]), free(w[x]), free(lse[x]);
  free(q), free(k), free(v), free(ab);
  return 0;
}
