/* test-attn.c: fused attention against a float64 reference written here
 * (naive softmax over the full score matrix) and against the worked
 * examples of docs/methods.md#example-12-attention; options, layouts, dtypes,
 * strides, GQA, masks, biases, RoPE, errors and memory growth.  Kernel
 * parity between ISAs is in test-attn-kernels.c. */
#include "attn-internal.h"
#include "attnbias.h"
#include "test-util.h"
#include "test.h"

/* ==== float64 reference ================================================ */

/* A problem in canonical order: q [B][Hq][Nq][D], k [B][Hkv][Nk][D],
 * v [B][Hkv][Nk][Dv], holding exactly the values the tensors store. */
struct prob {
  int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  double *q, *k, *v;
};

struct ref_opts {
  double scale, softcap;
  int64_t q_offset, wl, wr;
  int causal;
  const int32_t *kv_lens;
  const double *bias;      /* position bias [Hq][Nq][Nk] or NULL */
  const double *attn_bias; /* expanded [B][Hq][Nq][Nk] or NULL */
};

static void ref_opts_init(struct ref_opts *o, const struct prob *P)
{
  memset(o, 0, sizeof *o);
  o->scale = 1.0 / sqrt((double)P->D);
  o->q_offset = P->Nk - P->Nq;
  o->wl = o->wr = -1;
}

/* out [B][Hq][Nq][Dv], lse [B][Hq][Nq], w [B][Hq][Nq][Nk] (any may be NULL)
 * straight from the definition: scores, softcap, biases, masks, softmax. */
static void ref_attention(const struct prob *P, const struct ref_opts *o,
                          double *out, double *lse, double *w)
{
  int64_t b, h, r, j, c, G = P->Hq / P->Hkv;
  double *s = malloc((size_t)P->Nk * sizeof *s);

  for (b = 0; b < P->B; b++)
    for (h = 0; h < P->Hq; h++)
      for (r = 0; r < P->Nq; r++) {
        const double *q = P->q + ((b * P->Hq + h) * P->Nq + r) * P->D;
        int64_t kvh = h / G, pq = o->q_offset + r;
        int64_t kvlen = o->kv_lens ? o->kv_lens[b] : P->Nk;
        int64_t row = (b * P->Hq + h) * P->Nq + r;
        double mx = -INFINITY, sum = 0.0;
        for (j = 0; j < P->Nk; j++) {
          const double *k = P->k + ((b * P->Hkv + kvh) * P->Nk + j) * P->D;
          double x = 0.0;
          int vis = 1;
          for (c = 0; c < P->D; c++)
            x += q[c] * k[c];
          x *= o->scale;
          if (o->softcap > 0)
            x = o->softcap * tanh(x / o->softcap);
          if (o->bias)
            x += o->bias[(h * P->Nq + r) * P->Nk + j];
          if (o->attn_bias)
            x += o->attn_bias[row * P->Nk + j];
          if (o->causal && j > pq)
            vis = 0;
          if (o->wl >= 0 && j < pq - o->wl)
            vis = 0;
          if (o->wr >= 0 && j > pq + o->wr)
            vis = 0;
          if (j >= kvlen)
            vis = 0;
          s[j] = vis ? x : -INFINITY;
          if (s[j] > mx)
            mx = s[j];
        }
        for (j = 0; j < P->Nk; j++) {
          s[j] = mx == -INFINITY ? 0.0 : exp(s[j] - mx);
          sum += s[j];
        }
        if (lse)
          lse[row] = sum > 0 ? mx + log(sum) : -INFINITY;
        if (w)
          for (j = 0; j < P->Nk; j++)
            w[row * P->Nk + j] = sum > 0 ? s[j] / sum : 0.0;
        if (out)
          for (c = 0; c < P->Dv; c++) {
            double acc = 0.0;
            for (j = 0; j < P->Nk && sum > 0; j++)
              acc += s[j] *
                     P->v[((b * P->Hkv + kvh) * P->Nk + j) * P->Dv + c];
            out[row * P->Dv + c] = sum > 0 ? acc / sum : 0.0;
          }
      }
  free(s);
}

/* ==== tensors in any layout, rank, dtype and strides ==================== */

struct tbuf {
  struct ab_tensor t;
  void *mem;
};

static void store(void *mem, int dtype, int64_t off, double x)
{
  switch (dtype) {
  case AB_DTYPE_F32: ((float *)mem)[off] = (float)x; break;
  case AB_DTYPE_F64: ((double *)mem)[off] = x; break;
  case AB_DTYPE_F16: ((uint16_t *)mem)[off] = ab_f32_to_f16((float)x); break;
  default: ((uint16_t *)mem)[off] = ab_f32_to_bf16((float)x); break;
  }
}

static double fetch(const void *mem, int dtype, int64_t off)
{
  switch (dtype) {
  case AB_DTYPE_F32: return ((const float *)mem)[off];
  case AB_DTYPE_F64: return ((const double *)mem)[off];
  case AB_DTYPE_F16: return ab_f16_to_f32(((const uint16_t *)mem)[off]);
  default: return ab_bf16_to_f32(((const uint16_t *)mem)[off]);
  }
}

/* Offset in `t` of canonical element (b, h, n, c). */
static int64_t t_off(const struct ab_tensor *t, int layout, int64_t b,
                     int64_t h, int64_t n, int64_t c)
{
  int64_t idx[4];
  int r = t->ndim, i;
  int64_t off = 0;

  if (r == 4) {
    idx[0] = b;
    idx[1] = layout == AB_LAYOUT_BHSD ? h : n;
    idx[2] = layout == AB_LAYOUT_BHSD ? n : h;
    idx[3] = c;
  } else if (r == 3) {
    idx[0] = layout == AB_LAYOUT_BHSD ? h : n;
    idx[1] = layout == AB_LAYOUT_BHSD ? n : h;
    idx[2] = c;
  } else {
    idx[0] = n;
    idx[1] = c;
  }
  for (i = 0; i < r; i++)
    off += idx[i] * t->stride[i];
  return off;
}

/* Build a tensor holding canon [B][H][N][C] (rank 4, or 3 with B = 1, or 2
 * with B = H = 1); strided: inner stride 2 and padded rows.  canon is
 * rewritten with the values actually stored (f16/bf16 rounding). */
static int make_tensor(struct tbuf *tb, double *canon, int64_t B, int64_t H,
                       int64_t N, int64_t C, int layout, int rank, int dtype,
                       int strided)
{
  struct ab_tensor *t = &tb->t;
  int64_t b, h, n, c, extent = 1;
  int i;

  memset(tb, 0, sizeof *tb);
  t->dtype = dtype;
  t->ndim = rank;
  if (rank == 4) {
    t->shape[0] = B;
    t->shape[1] = layout == AB_LAYOUT_BHSD ? H : N;
    t->shape[2] = layout == AB_LAYOUT_BHSD ? N : H;
    t->shape[3] = C;
  } else if (rank == 3) {
    t->shape[0] = layout == AB_LAYOUT_BHSD ? H : N;
    t->shape[1] = layout == AB_LAYOUT_BHSD ? N : H;
    t->shape[2] = C;
  } else {
    t->shape[0] = N;
    t->shape[1] = C;
  }
  t->stride[rank - 1] = strided ? 2 : 1;
  for (i = rank - 2; i >= 0; i--)
    t->stride[i] = t->stride[i + 1] * t->shape[i + 1] + (strided ? 3 : 0);
  for (i = 0; i < rank; i++)
    extent += (t->shape[i] - 1) * t->stride[i];
  tb->mem = calloc((size_t)extent, ab_dtype_size(dtype));
  if (!tb->mem)
    return -1;
  t->data = tb->mem;
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++)
      for (n = 0; n < N; n++)
        for (c = 0; c < C; c++) {
          int64_t ci = ((b * H + h) * N + n) * C + c;
          int64_t off = t_off(t, layout, b, h, n, c);
          store(tb->mem, dtype, off, canon[ci]);
          canon[ci] = fetch(tb->mem, dtype, off);
        }
  return 0;
}

/* Canonical [B][H][N][C] float copy of an output written in `layout`. */
static void out_canon(const float *got, int layout, int64_t B, int64_t H,
                      int64_t N, int64_t C, float *canon)
{
  int64_t b, h, n, c;

  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++)
      for (n = 0; n < N; n++)
        for (c = 0; c < C; c++) {
          int64_t src = layout == AB_LAYOUT_BHSD
                            ? ((b * H + h) * N + n) * C + c
                            : ((b * N + n) * H + h) * C + c;
          canon[((b * H + h) * N + n) * C + c] = got[src];
        }
}

static double *rand_array(int64_t n, double lo, double hi)
{
  double *a = malloc((size_t)n * sizeof *a);
  int64_t i;

  for (i = 0; i < n; i++)
    a[i] = test_uniform(lo, hi);
  return a;
}

/* n uniform values in [-1, 1) that are floats: as doubles (returned, for
 * the reference) and as floats in f (the library's input). */
static double *rand_floats(int64_t n, float *f)
{
  double *a = rand_array(n, -1, 1);
  int64_t i;

  for (i = 0; a && i < n; i++)
    f[i] = (float)(a[i] = (float)a[i]);
  return a;
}

/* ==== one randomised case =============================================== */

struct rcase {
  int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  int layout, rank, dq, dk, dv, strided;
  int krank, vrank;  /* 0: rank (each tensor's rank is its own) */
  int has_scale;
  double scale, softcap;
  int has_q_offset;
  int64_t q_offset;
  int causal;
  int64_t wl, wr;
  int kv_lens;       /* random kv_lens (0 .. Nk, including 0); 2: and the
                        first batch entry's is 0 */
  int ab_rank;       /* attn_bias rank 0 (none) .. 4 */
  int ab_ones;       /* bit f set: attn_bias dim f (of B,H,Nq,Nk) is 1 */
  int ab_dtype;
  double ab_ninf;    /* probability of a -inf attn_bias entry */
  int want_lse, want_w;
  int64_t max_rows, key_tile;
  /* ab__attn_tuning's (0: the job's choice) */
  int64_t rows_max, splits, q_group;
  int bf16_dot;
  const struct ab__kernels *kern;
};

static void rcase_init(struct rcase *c)
{
  memset(c, 0, sizeof *c);
  c->B = c->Hq = c->Hkv = 1;
  c->Nq = c->Nk = 8;
  c->D = c->Dv = 16;
  c->rank = 4;
  c->wl = c->wr = -1;
  c->want_lse = c->want_w = 1;
}

static void describe(const struct rcase *c)
{
  fprintf(stderr,
          "  case: B%lld Hq%lld Hkv%lld Nq%lld Nk%lld D%lld Dv%lld layout %d "
          "rank %d/%d/%d dtypes %d/%d/%d strided %d scale %d:%g softcap %g "
          "q_offset %d:%lld causal %d window [%lld,%lld] kv_lens %d "
          "attn_bias rank %d ones %x dtype %d ninf %g tiles %lldx%lld "
          "rows_max %lld splits %lld q_group %lld bf16_dot %d isa %s\n",
          (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
          (long long)c->Nq, (long long)c->Nk, (long long)c->D,
          (long long)c->Dv, c->layout, c->rank, c->krank, c->vrank, c->dq,
          c->dk, c->dv,
          c->strided, c->has_scale, c->scale, c->softcap, c->has_q_offset,
          (long long)c->q_offset, c->causal, (long long)c->wl,
          (long long)c->wr, c->kv_lens, c->ab_rank, c->ab_ones, c->ab_dtype,
          c->ab_ninf, (long long)c->max_rows, (long long)c->key_tile,
          (long long)c->rows_max, (long long)c->splits,
          (long long)c->q_group, c->bf16_dot,
          c->kern ? c->kern->isa : "default");
}

/* Build the tensors, run the attention (as a job, pieces in reverse order
 * with one shared scratch) and compare out, lse and weights with the
 * reference.  Returns 0 when everything matches. */
static int run_case(const struct rcase *c, double rtol, double atol)
{
  struct prob P = {c->B, c->Hq, c->Hkv, c->Nq, c->Nk, c->D, c->Dv,
                   NULL, NULL, NULL};
  struct tbuf tq, tk, tv, tab;
  struct ab_attn_params p;
  struct ref_opts o;
  struct ab__attn_tuning tune = {c->kern,   c->max_rows, c->key_tile,
                                 c->rows_max, c->splits, c->bf16_dot,
                                 c->q_group};
  int64_t nout = c->B * c->Hq * c->Nq * c->Dv, nrow = c->B * c->Hq * c->Nq;
  int64_t nw = nrow * c->Nk, i, b, h, r, j;
  int32_t *kvl = NULL;
  double *ab_full = NULL, *want_out, *want_lse, *want_w;
  float *out, *lse, *w, *canon;
  ab_job_t *job = NULL;
  void *scratch = NULL;
  int bad = 0, st;

  memset(&tab, 0, sizeof tab);
  P.q = rand_array(c->B * c->Hq * c->Nq * c->D, -1, 1);
  P.k = rand_array(c->B * c->Hkv * c->Nk * c->D, -1, 1);
  P.v = rand_array(c->B * c->Hkv * c->Nk * c->Dv, -1, 1);
  if (make_tensor(&tq, P.q, c->B, c->Hq, c->Nq, c->D, c->layout, c->rank,
                  c->dq, c->strided) ||
      make_tensor(&tk, P.k, c->B, c->Hkv, c->Nk, c->D, c->layout,
                  c->krank ? c->krank : c->rank, c->dk, c->strided) ||
      make_tensor(&tv, P.v, c->B, c->Hkv, c->Nk, c->Dv, c->layout,
                  c->vrank ? c->vrank : c->rank, c->dv, c->strided))
    FAIL_AT("out of memory");
  ab_attn_params_init(&p);
  ref_opts_init(&o, &P);
  p.q = &tq.t, p.k = &tk.t, p.v = &tv.t;
  p.layout = c->layout;
  if (c->has_scale)
    p.has_scale = 1, p.scale = o.scale = c->scale;
  p.softcap = o.softcap = c->softcap;
  if (c->has_q_offset)
    p.has_q_offset = 1, p.q_offset = o.q_offset = c->q_offset;
  p.causal = o.causal = c->causal;
  p.window_left = o.wl = c->wl;
  p.window_right = o.wr = c->wr;
  if (c->kv_lens) {
    kvl = malloc((size_t)c->B * sizeof *kvl);
    for (b = 0; b < c->B; b++)
      kvl[b] = (int32_t)test_randint(0, c->Nk);
    if (c->kv_lens == 2)
      kvl[0] = 0;
    p.kv_lens = o.kv_lens = kvl;
  }
  if (c->ab_rank) {
    /* attn_bias of rank ab_rank, right-aligned to [B, Hq, Nq, Nk], dims in
     * ab_ones of size 1; the reference gets it expanded. */
    const int64_t full[4] = {c->B, c->Hq, c->Nq, c->Nk};
    int64_t sh[4], idx[4], n = 1, k;
    double *vals;
    struct ab_tensor *t = &tab.t;
    for (i = 0; i < 4; i++)
      sh[i] = (i < 4 - c->ab_rank || (c->ab_ones >> i) & 1) ? 1 : full[i];
    for (i = 0; i < 4; i++)
      n *= sh[i];
    vals = malloc((size_t)n * sizeof *vals);
    for (k = 0; k < n; k++)
      vals[k] = test_uniform(0, 1) < c->ab_ninf ? -INFINITY
                                                : test_uniform(-2, 2);
    memset(t, 0, sizeof *t);
    t->dtype = c->ab_dtype;
    t->ndim = c->ab_rank;
    for (i = 0; i < c->ab_rank; i++)
      t->shape[i] = sh[4 - c->ab_rank + i];
    /* Transposed strides over the last two axes when there are two, to
     * exercise arbitrary strides. */
    {
      int64_t s = 1;
      for (i = c->ab_rank - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
      }
      if (c->ab_rank >= 2 && c->strided) {
        int a = c->ab_rank - 2, z = c->ab_rank - 1;
        t->stride[z] = t->shape[a];
        t->stride[a] = 1;
      }
    }
    tab.mem = calloc((size_t)n, ab_dtype_size(c->ab_dtype));
    t->data = tab.mem;
    ab_full = malloc((size_t)nw * sizeof *ab_full);
    for (k = 0; k < n; k++) {
      int64_t rem = k, off = 0;
      for (i = 3; i >= 0; i--) {
        idx[i] = rem % sh[i];
        rem /= sh[i];
      }
      for (i = 0; i < c->ab_rank; i++)
        off += idx[4 - c->ab_rank + i] * t->stride[i];
      store(tab.mem, c->ab_dtype, off, vals[k]);
      vals[k] = fetch(tab.mem, c->ab_dtype, off);
    }
    for (b = 0; b < c->B; b++)
      for (h = 0; h < c->Hq; h++)
        for (r = 0; r < c->Nq; r++)
          for (j = 0; j < c->Nk; j++) {
            int64_t at[4] = {b, h, r, j}, k2 = 0;
            for (i = 0; i < 4; i++)
              k2 = k2 * sh[i] + (sh[i] == 1 ? 0 : at[i]);
            ab_full[((b * c->Hq + h) * c->Nq + r) * c->Nk + j] = vals[k2];
          }
    free(vals);
    p.attn_bias = t;
    o.attn_bias = ab_full;
  }
  out = malloc((size_t)nout * sizeof *out);
  lse = malloc((size_t)nrow * sizeof *lse);
  w = malloc((size_t)nw * sizeof *w);
  canon = malloc((size_t)(nout > nw ? nout : nw) * sizeof *canon);
  want_out = malloc((size_t)nout * sizeof *want_out);
  want_lse = malloc((size_t)nrow * sizeof *want_lse);
  want_w = malloc((size_t)nw * sizeof *want_w);
  for (i = 0; i < nout; i++)
    out[i] = NAN;
  for (i = 0; i < nw; i++)
    w[i] = NAN;
  p.out = out;
  p.lse = c->want_lse ? lse : NULL;
  p.weights = c->want_w ? w : NULL;
  ref_attention(&P, &o, want_out, want_lse, want_w);

  st = (int)ab__attention_job_tuned(&p, &tune, &job);
  if (st != AB_STATUS_OK) {
    describe(c);
    fprintf(stderr, "  job: %d %s: %s\n", st, ab_last_error()->arg,
            ab_last_error()->msg);
    bad = 1;
  } else {
    scratch = malloc(ab_job_scratch_size(job) + 64);
    for (i = ab_job_pieces(job) - 1; i >= 0 && !bad; i--) {
      void *al = (void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
      if (ab_job_run(job, i, al) != AB_STATUS_OK)
        bad = 1;
    }
    out_canon(out, c->layout, c->B, c->Hq, c->Nq, c->Dv, canon);
    if (!bad && !test_array_close(__FILE__, __LINE__, "out", canon, want_out,
                                  nout, rtol, atol))
      bad = 1;
    if (!bad && c->want_lse &&
        !test_array_close(__FILE__, __LINE__, "lse", lse, want_lse, nrow,
                          rtol, atol))
      bad = 1;
    if (!bad && c->want_w &&
        !test_array_close(__FILE__, __LINE__, "weights", w, want_w, nw, rtol,
                          atol))
      bad = 1;
    /* Weights are normalised exactly: each live row sums to 1. */
    for (r = 0; r < nrow && !bad && c->want_w; r++) {
      double sum = 0;
      for (j = 0; j < c->Nk; j++)
        sum += w[r * c->Nk + j];
      if (want_lse[r] != -INFINITY && fabs(sum - 1.0) > 1e-5) {
        fprintf(stderr, "  weights row %lld sums to %.9g\n", (long long)r,
                sum);
        bad = 1;
      }
    }
    if (bad)
      describe(c);
  }
  ab_job_free(job);
  free(scratch);
  free(P.q), free(P.k), free(P.v);
  free(tq.mem), free(tk.mem), free(tv.mem), free(tab.mem);
  free(kvl), free(ab_full);
  free(out), free(lse), free(w), free(canon);
  free(want_out), free(want_lse), free(want_w);
  return bad;
}

#define RTOL 1e-5
#define ATOL 1e-6

/* ==== worked examples (docs/methods.md#example-12-attention) ========== */

/* q [1,3,2,4], k [1,4,1,4], v [1,4,1,4] in BSHD, filled by flat index. */
struct worked {
  float q[24], k[16], v[16];
  struct ab_tensor tq, tk, tv;
  float out[24], w[24], lse[6];
};

static void worked_init(struct worked *x, struct ab_attn_params *p)
{
  const int64_t qs[4] = {1, 3, 2, 4}, ks[4] = {1, 4, 1, 4};
  int i;

  for (i = 0; i < 24; i++)
    x->q[i] = (float)((i % 7) - 3) / 4.0f;
  for (i = 0; i < 16; i++) {
    x->k[i] = (float)((i % 5) - 2) / 3.0f;
    x->v[i] = (float)(((3 * i) % 11) - 5) / 5.0f;
  }
  ab_tensor_init(&x->tq, x->q, AB_DTYPE_F32, 4, qs);
  ab_tensor_init(&x->tk, x->k, AB_DTYPE_F32, 4, ks);
  ab_tensor_init(&x->tv, x->v, AB_DTYPE_F32, 4, ks);
  ab_attn_params_init(p);
  p->q = &x->tq, p->k = &x->tk, p->v = &x->tv;
  p->layout = AB_LAYOUT_BSHD;
  p->out = x->out, p->weights = x->w, p->lse = x->lse;
}

/* want_out: [head][row][4] as printed; want_w0: head 0 weights [3][4]. */
static int worked_check(struct worked *x, const double *want_out,
                        const double *want_w0)
{
  float got[24];
  int h, r, c;

  for (h = 0; h < 2; h++)
    for (r = 0; r < 3; r++)
      for (c = 0; c < 4; c++)
        got[(h * 3 + r) * 4 + c] = x->out[(r * 2 + h) * 4 + c];
  /* The printed values have 7 significant digits. */
  CHECK_ARRAY(got, want_out, 24, 2e-6, 1e-6);
  CHECK_ARRAY(x->w, want_w0, 12, 2e-6, 1e-6);
  return 0;
}

TEST(attn_worked_12a_default)
{
  struct worked x;
  struct ab_attn_params p;
  const double out[24] = {
      -0.7447183, -0.1447183, 0.4552817,  0.1461564,  -0.7336717,
      -0.1336717, 0.4663283,  0.1101271,  -0.7225117, -0.1225117,
      0.4774883,  0.07366314, -0.6231629, -0.02316295, 0.5768371,
      -0.2503358, -0.6582434, -0.05824341, 0.5417566, -0.2519838,
      -0.717824,  -0.117824,  0.482176,   0.1614904};
  const double w0[12] = {0.3477538, 0.2390074, 0.2023154, 0.2109233,
                         0.3293637, 0.2359994, 0.2082687, 0.2263681,
                         0.3112252, 0.2324907, 0.2139017, 0.2423824};
  worked_init(&x, &p);
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out, w0);
}

TEST(attn_worked_12b_causal_bottom_right)
{
  struct worked x;
  struct ab_attn_params p;
  const double out[24] = {
      -0.9185333, -0.3185333, 0.2814667,  0.8814667,  -0.8313056,
      -0.2313056, 0.3686944,  0.3764344,  -0.7225117, -0.1225117,
      0.4774883,  0.07366314, -0.8958357, -0.2958357, 0.3041643,
      0.9041643,  -0.7314523, -0.1314523, 0.4685477,  -0.09662785,
      -0.717824,  -0.117824,  0.482176,   0.1614904};
  const double w0[12] = {0.5926666, 0.4073334, 0, 0, 0.425737, 0.3050539,
                         0.2692091, 0,         0.3112252, 0.2324907,
                         0.2139017, 0.2423824};
  worked_init(&x, &p);
  p.causal = 1;
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out, w0);
}

TEST(attn_worked_12b_top_left_q_offset_0)
{
  struct worked x;
  struct ab_attn_params p;
  const double w0[12] = {1, 0, 0, 0, 0.5825702, 0.4174298, 0, 0,
                         0.4107946, 0.3068707, 0.2823347, 0};
  const double out0[12] = {-1,        -0.4,      0.2,      0.8,
                           -0.916514, -0.316514, 0.283486, 0.883486,
                           -0.825692, -0.225692, 0.374308, 0.3531717};
  float got[12];
  int r, c;

  worked_init(&x, &p);
  p.causal = 1;
  p.has_q_offset = 1;
  p.q_offset = 0;
  CHECK_OK(ab_attention(&p));
  for (r = 0; r < 3; r++)
    for (c = 0; c < 4; c++)
      got[r * 4 + c] = x.out[(r * 2 + 0) * 4 + c];
  CHECK_ARRAY(got, out0, 12, 2e-6, 1e-6);
  CHECK_ARRAY(x.w, w0, 12, 2e-6, 1e-6);
  return 0;
}

static const double out_12c[24] = {
    -0.9154991, -0.3154991, 0.2845009,  0.8845009,  -0.8228671, -0.2228671,
    0.3771329,  0.3413144,  -0.70564,   -0.10564,   0.49436,    0.01846205,
    -0.8956408, -0.2956408, 0.3043592,  0.9043592,  -0.7309848, -0.1309848,
    0.4690152,  -0.09915034, -0.7170635, -0.1170635, 0.4829365, 0.1585922};
static const double w0_12c[12] = {0.5774954, 0.4225046, 0,         0,
                                  0.4033437, 0.3076479, 0.2890084, 0,
                                  0.2846238, 0.2263317, 0.2216652,
                                  0.2673793};

/* 12c with the ALiBi table written by hand as attn_bias [Hq, Nq, Nk]. */
TEST(attn_worked_12c_alibi_as_attn_bias)
{
  struct worked x;
  struct ab_attn_params p;
  struct ab_tensor tb;
  const int64_t sh[3] = {2, 3, 4};
  const double slopes[2] = {0.0625, 0.00390625};
  float bias[24];
  int h, r, j;

  worked_init(&x, &p);
  for (h = 0; h < 2; h++)
    for (r = 0; r < 3; r++)
      for (j = 0; j < 4; j++)
        bias[(h * 3 + r) * 4 + j] = (float)(-slopes[h] * abs(r + 1 - j));
  CHECK_OK(ab_tensor_init(&tb, bias, AB_DTYPE_F32, 3, sh));
  p.causal = 1;
  p.attn_bias = &tb;
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out_12c, w0_12c);
}

/* 12c with the fused ALiBi (default max_bias 8: slopes 2^-4, 2^-8). */
TEST(attn_worked_12c_alibi_fused)
{
  struct worked x;
  struct ab_attn_params p;
  struct ab_bias_params bp;

  worked_init(&x, &p);
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  bp.num_heads = 2;
  p.causal = 1;
  p.bias = &bp;
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out_12c, w0_12c);
}

TEST(attn_worked_12d_softcap)
{
  struct worked x;
  struct ab_attn_params p;
  const double out[24] = {
      -0.916496,  -0.316496,  0.283504,   0.883504,   -0.829235,
      -0.229235,  0.370765,   0.3689597,  -0.721693,  -0.121693,
      0.478307,   0.07011825, -0.896727,  -0.296727,  0.303273,
      0.903273,   -0.7507085, -0.1507085, 0.4492915,  0.02405943,
      -0.7120486, -0.1120486, 0.4879514,  0.1048378};
  const double w0[12] = {0.5824799, 0.4175201, 0,         0,
                         0.4197228, 0.3067293, 0.2735479, 0,
                         0.3089686, 0.2327638, 0.2160315, 0.2422362};
  worked_init(&x, &p);
  p.causal = 1;
  p.softcap = 0.5;
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out, w0);
}

TEST(attn_worked_12e_sliding_window)
{
  struct worked x;
  struct ab_attn_params p;
  const double out[24] = {
      -0.9185333, -0.3185333, 0.2814667,  0.8814667,  -0.7062419,
      -0.1062419, 0.4937581,  0.06241875, -0.4937581, 0.1062419,
      0.7062419,  -0.8937581, -0.8958357, -0.2958357, 0.3041643,
      0.9041643,  -0.669729,  -0.06972903, 0.530271,  -0.3027097,
      -0.5144808, 0.08551918, 0.6855192,  -0.9144808};
  const double w0[12] = {0.5926666, 0.4073334, 0, 0, 0, 0.5312094,
                         0.4687906, 0,         0, 0, 0.4687906, 0.5312094};
  worked_init(&x, &p);
  p.window_left = 1;
  p.window_right = 0;
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out, w0);
}

/* 12f: key 2 padded (attn_bias -inf on that key, broadcast [Nk]), scale 1. */
TEST(attn_worked_12f_key_padding_scale_1)
{
  struct worked x;
  struct ab_attn_params p;
  struct ab_tensor tb;
  const int64_t sh[1] = {4};
  float mask[4] = {0, 0, -INFINITY, 0};
  const double out[24] = {
      -0.828718,  -0.228718,  0.371282,   0.5314849,  -0.8055663,
      -0.2055663, 0.3944337,  0.4711107,  -0.7803137, -0.1803137,
      0.4196863,  0.4032266,  -0.5351498, 0.06485016, 0.6648502,
      -0.3304352, -0.6714037, -0.07140368, 0.5285963, 0.2249564,
      -0.7737543, -0.1737543, 0.4262457,  0.710066};
  const double w0[12] = {0.5434056, 0.2566866, 0, 0.1999078,
                         0.5035795, 0.2585463, 0, 0.2378741,
                         0.4619864, 0.2578047, 0, 0.2802089};
  worked_init(&x, &p);
  CHECK_OK(ab_tensor_init(&tb, mask, AB_DTYPE_F32, 1, sh));
  p.attn_bias = &tb;
  p.has_scale = 1;
  p.scale = 1.0;
  CHECK_OK(ab_attention(&p));
  return worked_check(&x, out, w0);
}

/* 12g: keys 0..2 padded + causal: rows 0 and 1 see nothing. */
TEST(attn_worked_12g_fully_masked_rows)
{
  struct worked x;
  struct ab_attn_params p;
  struct ab_tensor tb;
  const int64_t sh[1] = {4};
  float mask[4] = {-INFINITY, -INFINITY, -INFINITY, 0};
  const double out[24] = {0,    0,   0,   0,    0,    0,   0,   0,
                          -0.4, 0.2, 0.8, -0.8, 0,    0,   0,   0,
                          0,    0,   0,   0,    -0.4, 0.2, 0.8, -0.8};
  const double w0[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  int i;

  worked_init(&x, &p);
  CHECK_OK(ab_tensor_init(&tb, mask, AB_DTYPE_F32, 1, sh));
  p.attn_bias = &tb;
  p.causal = 1;
  CHECK_OK(ab_attention(&p));
  for (i = 0; i < 24; i++)
    CHECK(!isnan(x.out[i]) && !isnan(x.w[i]));
  /* lse [B=1, H=2, Nq=3]: -inf for the masked rows, finite for row 2. */
  CHECK(x.lse[0] == -INFINITY && x.lse[1] == -INFINITY);
  CHECK(x.lse[3] == -INFINITY && x.lse[4] == -INFINITY);
  CHECK(isfinite(x.lse[2]) && isfinite(x.lse[5]));
  return worked_check(&x, out, w0);
}

/* ==== options, one at a time and combined =============================== */

TEST(attn_params_init_defaults)
{
  struct ab_attn_params p;

  memset(&p, 0x5a, sizeof p);
  ab_attn_params_init(&p);
  CHECK(p.q == NULL && p.k == NULL && p.v == NULL && p.out == NULL);
  CHECK_EQ_I64(p.layout, AB_LAYOUT_BHSD);
  CHECK_EQ_I64(p.has_scale, 0);
  CHECK_EQ_I64(p.has_q_offset, 0);
  CHECK_EQ_I64(p.causal, 0);
  CHECK_EQ_I64(p.window_left, -1);
  CHECK_EQ_I64(p.window_right, -1);
  CHECK(p.softcap == 0.0);
  CHECK(p.kv_lens == NULL && p.rope == NULL && p.bias == NULL);
  CHECK(p.attn_bias == NULL && p.lse == NULL && p.weights == NULL);
  return 0;
}

/* Shapes crossing the 64-row / 64-key blocks and the 16-row padding. */
TEST(attn_shapes_cross_tile_edges)
{
  static const int64_t n[] = {1, 3, 17, 65, 129};
  struct rcase c;
  int a, b;

  for (a = 0; a < 5; a++)
    for (b = 0; b < 5; b++) {
      rcase_init(&c);
      c.Nq = n[a];
      c.Nk = n[b];
      c.D = n[(a + b) % 5] % 64 + 1;
      c.Dv = n[(a + 2 * b + 1) % 5] % 80 + 1;
      c.Hq = 2;
      c.Hkv = (a + b) % 2 ? 1 : 2;
      c.causal = (a + b) % 3 == 0;
      if (run_case(&c, RTOL, ATOL))
        return 1;
    }
  return 0;
}

TEST(attn_gqa_mqa_groups)
{
  static const int64_t hkv[] = {1, 2, 6};
  struct rcase c;
  int i, caus;

  for (i = 0; i < 3; i++)
    for (caus = 0; caus < 2; caus++) {
      rcase_init(&c);
      c.B = 2;
      c.Hq = 6;
      c.Hkv = hkv[i];
      c.Nq = caus ? 1 : 5; /* decode step: Nq = 1 groups the heads */
      c.Nk = 37;
      c.D = 8;
      c.Dv = 12;
      c.causal = caus;
      if (run_case(&c, RTOL, ATOL))
        return 1;
      c.max_rows = 4; /* head chunks smaller than the group */
      c.key_tile = 7;
      if (run_case(&c, RTOL, ATOL))
        return 1;
    }
  return 0;
}

TEST(attn_masks_causal_window_kv_lens)
{
  struct rcase c;
  int i;

  for (i = 0; i < 24; i++) {
    rcase_init(&c);
    c.B = 2;
    c.Hq = 2;
    c.Nq = test_randint(1, 70);
    c.Nk = test_randint(1, 90);
    c.D = 5;
    c.Dv = 7;
    c.causal = i % 2;
    c.wl = test_randint(-1, 20);
    c.wr = i % 3 == 0 ? -1 : test_randint(0, 12); /* right > 0 */
    c.kv_lens = i % 4 == 1;
    c.has_q_offset = i % 5 == 2;
    c.q_offset = test_randint(-10, 100);
    c.key_tile = i % 2 ? 16 : 0;
    c.max_rows = i % 3 ? 16 : 0;
    c.q_group = i % 4; /* blocks of one piece with different key ranges */
    if (run_case(&c, RTOL, ATOL))
      return 1;
  }
  return 0;
}

/* kv_lens 0 masks a whole batch entry: zeros, lse -inf, weights 0. */
TEST(attn_kv_lens_zero_masks_batch)
{
  float q[2 * 3 * 4], k[2 * 5 * 4], v[2 * 5 * 4], out[2 * 3 * 4], w[2 * 3 * 5],
      lse[6];
  const int64_t qs[3] = {2, 3, 4}, ks[3] = {2, 5, 4};
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  int32_t kvl[2] = {0, 5};
  int i;

  for (i = 0; i < 24; i++)
    q[i] = (float)test_uniform(-1, 1);
  for (i = 0; i < 40; i++)
    k[i] = (float)test_uniform(-1, 1), v[i] = (float)test_uniform(-1, 1);
  /* Rank 3 BSHD would mean [S, H, D]; use rank 4 with B = 2, H = 1. */
  {
    const int64_t q4[4] = {2, 1, 3, 4}, k4[4] = {2, 1, 5, 4};
    (void)qs, (void)ks;
    CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, q4));
    CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, k4));
    CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, k4));
  }
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv;
  p.kv_lens = kvl;
  p.out = out, p.weights = w, p.lse = lse;
  CHECK_OK(ab_attention(&p));
  for (i = 0; i < 12; i++)
    CHECK(out[i] == 0.0f);
  for (i = 0; i < 15; i++)
    CHECK(w[i] == 0.0f);
  for (i = 0; i < 3; i++)
    CHECK(lse[i] == -INFINITY && isfinite(lse[3 + i]));
  for (i = 15; i < 30; i++)
    CHECK(w[i] > 0.0f);
  return 0;
}

/* Nq > Nk bottom-right: the first Nq - Nk rows are fully masked. */
TEST(attn_fully_masked_rows_nq_gt_nk)
{
  struct rcase c;

  rcase_init(&c);
  c.Nq = 40;
  c.Nk = 9;
  c.causal = 1;
  c.Hq = 3;
  c.Hkv = 1;
  if (run_case(&c, RTOL, ATOL))
    return 1;
  c.kv_lens = 1;
  c.B = 2;
  c.wl = 2;
  return run_case(&c, RTOL, ATOL);
}

TEST(attn_softcap_and_scale)
{
  struct rcase c;
  int i;

  for (i = 0; i < 8; i++) {
    rcase_init(&c);
    c.Nq = 19;
    c.Nk = 33;
    c.D = 24;
    c.has_scale = i % 2;
    c.scale = i < 4 ? 1.0 : 0.37; /* T5-style scale 1 and an odd one */
    c.softcap = i % 4 >= 2 ? 0.0 : (i < 4 ? 0.8 : 30.0);
    c.causal = i % 3 == 0;
    /* With a bias the order matters: softcap applies before it. */
    c.ab_rank = 2;
    c.ab_ones = 0;
    if (run_case(&c, RTOL, ATOL))
      return 1;
  }
  return 0;
}

/* Softcap caps q.k only, never the bias: a large bias must survive. */
TEST(attn_softcap_before_bias)
{
  float q[4] = {1, 0, 0, 0}, k[8] = {1, 0, 0, 0, -1, 0, 0, 0},
        v[8] = {1, 0, 0, 0, 0, 1, 0, 0}, out[4], w[2], bias[2] = {0, 5};
  const int64_t qs[2] = {1, 4}, ks[2] = {2, 4}, bs[1] = {2};
  struct ab_tensor tq, tk, tv, tb;
  struct ab_attn_params p;
  double s0 = 0.5 * tanh(0.5 / 0.5), s1 = 0.5 * tanh(-0.5 / 0.5) + 5.0;
  double w1 = 1.0 / (1.0 + exp(s0 - s1));

  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 2, qs));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 2, ks));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 2, ks));
  CHECK_OK(ab_tensor_init(&tb, bias, AB_DTYPE_F32, 1, bs));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.attn_bias = &tb;
  p.softcap = 0.5;
  p.out = out, p.weights = w;
  CHECK_OK(ab_attention(&p));
  CHECK_CLOSE(w[1], w1, 1e-6, 1e-7);
  CHECK_CLOSE(out[1], w1, 1e-6, 1e-7);
  return 0;
}

TEST(attn_attn_bias_broadcast_shapes)
{
  struct rcase c;
  int rank, ones;

  for (rank = 1; rank <= 4; rank++)
    for (ones = 0; ones < 16; ones++) {
      rcase_init(&c);
      c.B = 2;
      c.Hq = 2;
      c.Hkv = 1;
      c.Nq = 5;
      c.Nk = 21;
      c.D = 4;
      c.Dv = 3;
      c.ab_rank = rank;
      c.ab_ones = ones;
      c.ab_ninf = 0.1; /* user masks, sometimes whole rows */
      c.ab_dtype = (rank + ones) % 4 == 0 ? AB_DTYPE_F32
                   : (rank + ones) % 4 == 1 ? AB_DTYPE_F64
                   : (rank + ones) % 4 == 2 ? AB_DTYPE_F16
                                            : AB_DTYPE_BF16;
      c.strided = ones & 1;
      c.key_tile = 8;
      c.causal = ones % 3 == 0;
      if (run_case(&c, RTOL, ATOL))
        return 1;
    }
  return 0;
}

TEST(attn_layouts_ranks_dtypes_strides)
{
  static const int dts[4] = {AB_DTYPE_F32, AB_DTYPE_F64, AB_DTYPE_F16,
                             AB_DTYPE_BF16};
  struct rcase c;
  int layout, rank, i;

  for (layout = 0; layout < 2; layout++)
    for (rank = 2; rank <= 4; rank++)
      for (i = 0; i < 8; i++) {
        rcase_init(&c);
        c.layout = layout;
        c.rank = rank;
        c.B = rank == 4 ? 2 : 1;
        c.Hq = rank >= 3 ? 4 : 1;
        c.Hkv = rank >= 3 ? (i % 2 ? 2 : 4) : 1;
        c.Nq = 13 + i;
        c.Nk = 29 - i;
        c.D = 9;
        c.Dv = 18;
        c.dq = dts[i % 4];
        c.dk = dts[(i + 1) % 4];
        c.dv = dts[(i + 2) % 4];
        c.strided = i >= 4;
        c.causal = i % 3 == 1;
        if (run_case(&c, RTOL, ATOL))
          return 1;
      }
  return 0;
}

/* Many random combinations of every option. */
TEST(attn_random_combinations)
{
  static const int dts[4] = {AB_DTYPE_F32, AB_DTYPE_F64, AB_DTYPE_F16,
                             AB_DTYPE_BF16};
  struct rcase c;
  int i;

  test_seed(12345);
  for (i = 0; i < 120; i++) {
    int64_t g;
    rcase_init(&c);
    c.B = test_randint(1, 2);
    c.Hkv = test_randint(1, 3);
    g = test_randint(1, 3);
    c.Hq = c.Hkv * g;
    c.Nq = test_randint(1, 80);
    c.Nk = test_randint(1, 80);
    c.D = test_randint(1, 40);
    c.Dv = test_randint(1, 40);
    c.layout = (int)test_randint(0, 1);
    c.dq = dts[test_randint(0, 3)];
    c.dk = dts[test_randint(0, 3)];
    c.dv = dts[test_randint(0, 3)];
    c.strided = (int)test_randint(0, 1);
    c.has_scale = (int)test_randint(0, 1);
    c.scale = test_uniform(0.05, 1.5);
    c.softcap = test_randint(0, 2) == 0 ? test_uniform(0.3, 20) : 0;
    c.has_q_offset = test_randint(0, 3) == 0;
    c.q_offset = test_randint(-5, 90);
    c.causal = (int)test_randint(0, 1);
    c.wl = test_randint(-1, 3) == 0 ? test_randint(0, 30) : -1;
    c.wr = test_randint(-1, 3) == 0 ? test_randint(0, 30) : -1;
    c.kv_lens = test_randint(0, 3) == 0;
    c.ab_rank = test_randint(0, 2) == 0 ? (int)test_randint(1, 4) : 0;
    c.ab_ones = (int)test_randint(0, 15);
    c.ab_dtype = dts[test_randint(0, 3)];
    c.ab_ninf = test_randint(0, 1) ? 0.05 : 0;
    c.want_lse = (int)test_randint(0, 1);
    c.want_w = (int)test_randint(0, 1);
    c.max_rows = test_randint(0, 2) == 0 ? test_randint(1, 40) : 0;
    c.key_tile = test_randint(0, 2) == 0 ? test_randint(1, 40) : 0;
    /* several query blocks per piece, walking their tiles side by side */
    c.q_group = test_randint(0, 2) == 0 ? test_randint(1, 8) : 0;
    /* Ranks of their own where the shapes allow one: batch 1 drops the
     * batch axis, one head the head axis too. */
    if (c.B == 1) {
      int lo_q = c.Hq == 1 ? 2 : 3, lo_kv = c.Hkv == 1 ? 2 : 3;
      c.rank = (int)test_randint(lo_q, 4);
      c.krank = (int)test_randint(lo_kv, 4);
      c.vrank = (int)test_randint(lo_kv, 4);
    }
    if (run_case(&c, RTOL, ATOL))
      return 1;
  }
  return 0;
}

/* Moderate sizes with the default blocks: d = 128 as in real models. */
TEST(attn_moderate_d128)
{
  struct rcase c;

  rcase_init(&c);
  c.B = 1;
  c.Hq = 4;
  c.Hkv = 2;
  c.Nq = 150;
  c.Nk = 200;
  c.D = 128;
  c.Dv = 128;
  c.causal = 1;
  c.want_w = 0;
  if (run_case(&c, RTOL, ATOL))
    return 1;
  c.layout = AB_LAYOUT_BSHD;
  c.causal = 0;
  c.want_w = 1;
  c.D = 64;
  c.Dv = 96;
  return run_case(&c, RTOL, ATOL);
}

/* Decoding shapes: a few query rows per head (GQA groups of 4) against
 * many keys, on the few-row kernels (and, for comparison, without them),
 * with the keys split into chunks whose partial softmaxes are merged --
 * causal, windows, kv_lens with a batch entry that sees no key at all
 * (out 0, lse -inf), softcap and attn_bias; k and v float32, bfloat16 and
 * float16; every ISA. */
/* Blocks grouped in one piece walk their key tiles side by side but each
 * computes exactly what it computes alone: out and lse bit for bit the
 * same with 1, 3 or 8 query blocks per piece (13 blocks of 16 rows; dense,
 * causal with a window, and a bias). */
TEST(attn_query_groups_bit_identical)
{
  enum { H = 2, N = 200, D = 16 };
  static const int64_t groups[] = {1, 3, 8};
  const int64_t sh[4] = {1, H, N, D};
  float *q = malloc(sizeof(float) * H * N * D);
  float *k = malloc(sizeof(float) * H * N * D);
  float *v = malloc(sizeof(float) * H * N * D);
  float *out[3], *lse[3];
  struct ab_tensor tq, tk, tv;
  struct ab_bias_params bp;
  int g, variant, fails = 0;
  int64_t i;

  for (i = 0; i < H * N * D; i++) {
    q[i] = (float)test_uniform(-2, 2);
    k[i] = (float)test_uniform(-2, 2);
    v[i] = (float)test_uniform(-1, 1);
  }
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, sh));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, sh));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, sh));
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  bp.num_heads = H;
  for (g = 0; g < 3; g++) {
    out[g] = malloc(sizeof(float) * H * N * D);
    lse[g] = malloc(sizeof(float) * H * N);
  }
  for (variant = 0; variant < 3; variant++) {
    for (g = 0; g < 3; g++) {
      struct ab__attn_tuning tune = {NULL, 16, 16, 0, 0, 0, groups[g]};
      struct ab_attn_params p;
      ab_job_t *job;
      int64_t piece;

      ab_attn_params_init(&p);
      p.q = &tq, p.k = &tk, p.v = &tv, p.out = out[g], p.lse = lse[g];
      p.causal = variant == 1;
      p.window_left = variant == 1 ? 37 : -1;
      p.bias = variant == 2 ? &bp : NULL;
      CHECK_OK(ab__attention_job_tuned(&p, &tune, &job));
      CHECK_EQ_I64(ab_job_pieces(job), 2 * ((13 + groups[g] - 1) / groups[g]));
      for (piece = ab_job_pieces(job) - 1; piece >= 0; piece--)
        CHECK_OK(ab_job_run(job, piece, NULL));
      ab_job_free(job);
    }
    for (g = 1; g < 3; g++)
      if (memcmp(out[g], out[0], sizeof(float) * H * N * D) != 0 ||
          memcmp(lse[g], lse[0], sizeof(float) * H * N) != 0) {
        fprintf(stderr, "  variant %d: %lld blocks per piece differ from 1\n",
                variant, (long long)groups[g]);
        fails++;
      }
  }
  for (g = 0; g < 3; g++)
    free(out[g]), free(lse[g]);
  free(q), free(k), free(v);
  CHECK_EQ_I64(fails, 0);
  return 0;
}

TEST(attn_decode_few_rows_split_keys)
{
  static const int64_t nqs[] = {1, 2, 3};
  static const int64_t splits[] = {1, 3, 8};
  static const int dts[] = {AB_DTYPE_F32, AB_DTYPE_BF16, AB_DTYPE_F16};
  const char *const *isa;
  struct rcase c;
  size_t a, b, e;
  int n = 0;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *kn = ab__kernels_for(*isa);
    if (!kn)
      continue;
    for (a = 0; a < sizeof nqs / sizeof *nqs; a++)
      for (b = 0; b < sizeof splits / sizeof *splits; b++)
        for (e = 0; e < sizeof dts / sizeof *dts; e++, n++) {
          rcase_init(&c);
          c.kern = kn;
          c.B = 2;
          c.Hq = 8;
          c.Hkv = 2;
          c.Nq = nqs[a];
          c.Nk = 301 + 37 * (int64_t)a;
          c.D = n % 2 ? 40 : 64;  /* a head dim that ends in a part vector */
          c.Dv = n % 3 ? 24 : 72;
          c.key_tile = 16 + 8 * (int64_t)(n % 3); /* few-row tiles of 64.. */
          c.splits = splits[b];
          c.rows_max = n % 4 == 3 ? -1 : 0; /* sometimes the tile kernels */
          c.dk = c.dv = dts[e];
          c.want_w = 0;
          c.causal = n % 2;
          c.kv_lens = 2;
          if (n % 5 == 1)
            c.wl = 90, c.wr = 7;
          if (n % 5 == 2) {
            c.softcap = 5.0;
            c.ab_rank = 2;
            c.ab_dtype = AB_DTYPE_F32;
          }
          if (run_case(&c, RTOL, ATOL))
            return 1;
        }
  }
  /* Weights asked for: the keys are not split (the weights need each
   * row's final max and sum), whatever the tuning says. */
  rcase_init(&c);
  c.B = 1, c.Hq = 4, c.Hkv = 1, c.Nq = 1, c.Nk = 500, c.D = 32, c.Dv = 32;
  c.splits = 5;
  return run_case(&c, RTOL, ATOL);
}

/* Decoding with 1-4 query rows per kv head: tiles where every row sees
 * every key take the packed softmax (kernels/attn.h, softmax_rows4), the
 * others the row-vectorised one, in the same block -- Nq = 2 with a group
 * of 2 masks the last key of one row; a window or short kv_lens cut
 * others; a bias or softcap keeps the whole block on the general path. */
TEST(attn_decode_packed_rows)
{
  static const int64_t groups[] = {1, 2, 3, 4};
  const char *const *isa;
  struct rcase c;
  size_t g;
  int n = 0, nq;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *kn = ab__kernels_for(*isa);
    if (!kn)
      continue;
    for (g = 0; g < sizeof groups / sizeof *groups; g++)
      for (nq = 1; nq <= 2; nq++, n++) {
        if (nq * groups[g] > 4)
          continue;
        rcase_init(&c);
        c.kern = kn;
        c.B = 2;
        c.Hkv = 2;
        c.Hq = 2 * groups[g];
        c.Nq = nq;
        c.Nk = 400 + 13 * (int64_t)g;
        c.D = n % 2 ? 40 : 128;
        c.Dv = n % 3 ? 24 : 128;
        c.key_tile = 8 + 8 * (int64_t)(n % 3); /* tiles of 32 .. 96 keys */
        c.splits = n % 3;
        c.dk = c.dv = n % 2 ? AB_DTYPE_BF16 : AB_DTYPE_F32;
        c.causal = 1;
        c.want_w = n % 4 == 0;
        if (n % 5 == 1)
          c.kv_lens = 2;
        if (n % 5 == 2)
          c.wl = 150, c.wr = 0;
        if (n % 5 == 3)
          c.softcap = 4.0;
        if (n % 5 == 4) {
          c.ab_rank = 2;
          c.ab_dtype = AB_DTYPE_F32;
        }
        if (run_case(&c, RTOL, ATOL))
          return 1;
      }
  }
  return 0;
}

/* bfloat16 and float16 k and v are read as they are, widened tile by tile:
 * the results equal those of float32 tensors holding the same values
 * (every product of 16-bit values is exact in float32), within the
 * tolerance of two float32 summation orders -- dense, causal and decoding
 * shapes, default blocking. */
TEST(attn_16bit_kv_equals_float32)
{
  static const int64_t shapes[][4] = {
      /* Hq, Hkv, Nq, Nk */
      {4, 4, 150, 150}, {8, 2, 1, 3000}, {8, 2, 4, 700}, {2, 1, 70, 260}};
  const int dts[2] = {AB_DTYPE_BF16, AB_DTYPE_F16};
  size_t si;
  int d, causal;

  for (si = 0; si < sizeof shapes / sizeof *shapes; si++)
    for (d = 0; d < 2; d++)
      for (causal = 0; causal < 2; causal++) {
        const int64_t Hq = shapes[si][0], Hkv = shapes[si][1];
        const int64_t Nq = shapes[si][2], Nk = shapes[si][3], D = 64;
        const int64_t qs[4] = {1, Hq, Nq, D}, ks[4] = {1, Hkv, Nk, D};
        const int64_t nq = Hq * Nq * D, nk = Hkv * Nk * D;
        int64_t i;
        float *q = malloc(sizeof(float) * nq), *kf = malloc(sizeof(float) * nk);
        float *vf = malloc(sizeof(float) * nk);
        uint16_t *kh = malloc(2 * nk), *vh = malloc(2 * nk);
        float *o32 = malloc(sizeof(float) * nq), *o16 = malloc(sizeof(float) * nq);
        double *want = malloc(sizeof(double) * nq);
        struct ab_tensor tq, tk, tv;
        struct ab_attn_params p;

        for (i = 0; i < nq; i++)
          q[i] = (float)test_uniform(-1, 1);
        for (i = 0; i < nk; i++) {
          /* 16-bit values, and the same values as float32 */
          float x = (float)test_uniform(-1, 1), y = (float)test_uniform(-1, 1);
          kh[i] = dts[d] == AB_DTYPE_BF16 ? ab_f32_to_bf16(x) : ab_f32_to_f16(x);
          vh[i] = dts[d] == AB_DTYPE_BF16 ? ab_f32_to_bf16(y) : ab_f32_to_f16(y);
          kf[i] = dts[d] == AB_DTYPE_BF16 ? ab_bf16_to_f32(kh[i])
                                          : ab_f16_to_f32(kh[i]);
          vf[i] = dts[d] == AB_DTYPE_BF16 ? ab_bf16_to_f32(vh[i])
                                          : ab_f16_to_f32(vh[i]);
        }
        CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qs));
        ab_attn_params_init(&p);
        p.q = &tq, p.k = &tk, p.v = &tv, p.causal = causal;
        CHECK_OK(ab_tensor_init(&tk, kf, AB_DTYPE_F32, 4, ks));
        CHECK_OK(ab_tensor_init(&tv, vf, AB_DTYPE_F32, 4, ks));
        p.out = o32;
        CHECK_OK(ab_attention(&p));
        CHECK_OK(ab_tensor_init(&tk, kh, (enum ab_dtype)dts[d], 4, ks));
        CHECK_OK(ab_tensor_init(&tv, vh, (enum ab_dtype)dts[d], 4, ks));
        p.out = o16;
        CHECK_OK(ab_attention(&p));
        for (i = 0; i < nq; i++)
          want[i] = o32[i];
        if (!test_array_close(__FILE__, __LINE__, "16-bit k, v", o16, want,
                              nq, 2e-5, 2e-6)) {
          fprintf(stderr, "  shape %zu dtype %d causal %d\n", si, dts[d],
                  causal);
          return 1;
        }
        free(q), free(kf), free(vf), free(kh), free(vh), free(o32), free(o16);
        free(want);
      }
  return 0;
}

/* bfloat16 q and k by bfloat16 dot products (qk_tile_bf16: vdpbf16ps
 * where the CPU has it, the scalar reference otherwise), forced on and
 * off, against the float64 reference: odd and even head dims, tile edges,
 * GQA, masks, softcap, weights; every ISA table that has the slot. */
TEST(attn_bf16_dot_products)
{
  const char *const *isa;
  struct rcase c;
  int n = 0, dot;

  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *kn = ab__kernels_for(*isa);
    if (!kn || !kn->attn.qk_tile_bf16)
      continue;
    for (dot = -1; dot <= 1; dot += 2)
      for (n = 0; n < 6; n++) {
        rcase_init(&c);
        c.kern = kn;
        c.bf16_dot = dot;
        c.B = 1 + n % 2;
        c.Hq = 4;
        c.Hkv = n % 3 ? 2 : 4;
        c.Nq = 40 + 29 * n;
        c.Nk = 70 + 23 * n;
        c.D = n % 2 ? 37 : 64;
        c.Dv = 24;
        c.key_tile = 16 + 8 * n;
        c.dq = c.dk = AB_DTYPE_BF16;
        c.dv = n % 2 ? AB_DTYPE_BF16 : AB_DTYPE_F32;
        c.causal = n % 2;
        c.softcap = n == 4 ? 4.0 : 0.0;
        c.want_w = n < 3;
        if (run_case(&c, RTOL, ATOL))
          return 1;
      }
  }
  return 0;
}

/* An output of 16 MiB or more is written with non-temporal stores: one
 * 4 bytes off a cache line (the rows of 32 floats start at two offsets of
 * a line), against the float64 reference, by one job and by a job that
 * splits the keys. */
TEST(attn_large_output_streams)
{
  enum { H = 16, NQ = 8200, NK = 9, D = 16, DV = 32 };
  struct prob P = {1, H, H, NQ, NK, D, DV, NULL, NULL, NULL};
  const int64_t qs[4] = {1, H, NQ, D}, ks[4] = {1, H, NK, D},
                vs[4] = {1, H, NK, DV};
  const int64_t nout = (int64_t)H * NQ * DV;
  float *q = malloc(sizeof(float) * H * NQ * D), *k = malloc(sizeof(float) * H * NK * D);
  float *v = malloc(sizeof(float) * H * NK * DV);
  float *buf = aligned_alloc(64, sizeof(float) * (size_t)(nout + 16));
  float *canon = malloc(sizeof(float) * (size_t)nout);
  double *want = malloc(sizeof(double) * (size_t)nout);
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct ref_opts o;
  struct ab__attn_tuning tune = {NULL, 0, 0, 0, 3, 0, 0};
  float *out = buf + 1;
  ab_job_t *job;
  int split;

  CHECK(q && k && v && buf && canon && want);
  CHECK((size_t)nout * sizeof(float) >= ((size_t)16 << 20));
  P.q = rand_floats(H * NQ * D, q);
  P.k = rand_floats(H * NK * D, k);
  P.v = rand_floats(H * NK * DV, v);
  ref_opts_init(&o, &P);
  ref_attention(&P, &o, want, NULL, NULL);
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qs));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, ks));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, vs));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out;
  for (split = 0; split < 2; split++) {
    memset(buf, 0, sizeof(float) * (size_t)(nout + 16));
    CHECK_OK(ab__attention_job_tuned(&p, split ? &tune : NULL, &job));
    CHECK_OK(ab_job_run_all(job));
    ab_job_free(job);
    out_canon(out, AB_LAYOUT_BHSD, 1, H, NQ, DV, canon);
    if (!test_array_close(__FILE__, __LINE__, split ? "split keys" : "out",
                          canon, want, nout, RTOL, ATOL))
      return 1;
  }
  free(q), free(k), free(v), free(buf), free(canon), free(want);
  free(P.q), free(P.k), free(P.v);
  return 0;
}

/* ab_attn_params.threads: a decoding job (one block per kv head) is cut
 * into about AB__ATTN_SPLIT_PER_THREAD pieces per thread, or for a large
 * machine when the count is not given; every cut gives the float64
 * answer, and a negative count is refused by name. */
TEST(attn_threads_hint_cuts_decoding)
{
  enum { HQ = 8, HKV = 4, NQ = 1, NK = 4096, D = 16 };
  static const int threads[] = {0, 1, 2, 3, 100};
  struct prob P = {1, HQ, HKV, NQ, NK, D, D, NULL, NULL, NULL};
  const int64_t qs[4] = {1, HQ, NQ, D}, ks[4] = {1, HKV, NK, D};
  float *q = malloc(sizeof(float) * HQ * NQ * D);
  float *k = malloc(sizeof(float) * HKV * NK * D);
  float *v = malloc(sizeof(float) * HKV * NK * D);
  float *out = malloc(sizeof(float) * HQ * NQ * D);
  double *want = malloc(sizeof(double) * HQ * NQ * D);
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct ref_opts o;
  ab_job_t *job;
  size_t t;

  CHECK(q && k && v && out && want);
  P.q = rand_floats(HQ * NQ * D, q);
  P.k = rand_floats(HKV * NK * D, k);
  P.v = rand_floats(HKV * NK * D, v);
  ref_opts_init(&o, &P);
  ref_attention(&P, &o, want, NULL, NULL);
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qs));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, ks));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, ks));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out;
  for (t = 0; t < sizeof threads / sizeof *threads; t++) {
    /* HKV blocks; chunks of at least AB__ATTN_SPLIT_MIN_KEYS keys */
    int64_t target = threads[t]
                         ? (int64_t)threads[t] * AB__ATTN_SPLIT_PER_THREAD
                         : AB__ATTN_SPLIT_PIECES;
    int64_t splits = target > AB__ATTN_SPLIT_PIECES ? AB__ATTN_SPLIT_PIECES
                                                    : target;
    splits = (splits + HKV - 1) / HKV;
    if (splits > NK / AB__ATTN_SPLIT_MIN_KEYS)
      splits = NK / AB__ATTN_SPLIT_MIN_KEYS;
    if (splits < 1)
      splits = 1;
    p.threads = threads[t];
    memset(out, 0, sizeof(float) * HQ * NQ * D);
    CHECK_OK(ab_attention_job(&p, &job));
    CHECK_EQ_I64(ab_job_pieces(job), HKV * splits);
    CHECK_OK(ab_job_run_all(job));
    ab_job_free(job);
    if (!test_array_close(__FILE__, __LINE__, "out", out, want, HQ * NQ * D,
                          RTOL, ATOL))
      return 1;
  }
  p.threads = -1;
  CHECK_FAILS(ab_attention_job(&p, &job), AB_STATUS_INVALID_ARG, "threads");
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "threads");
  CHECK(ab_attention_flops(&p) < 0);
  free(q), free(k), free(v), free(out), free(want);
  free(P.q), free(P.k), free(P.v);
  return 0;
}

/* Pieces are independent: any order, on several threads' scratch. */
TEST(attn_job_pieces_any_order)
{
  enum { B = 1, H = 4, N = 150, D = 32 };
  float *q = malloc(sizeof(float) * B * H * N * D);
  float *k = malloc(sizeof(float) * B * H * N * D);
  float *v = malloc(sizeof(float) * B * H * N * D);
  float *o1 = malloc(sizeof(float) * B * H * N * D);
  float *o2 = malloc(sizeof(float) * B * H * N * D);
  const int64_t sh[4] = {B, H, N, D};
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  ab_job_t *job;
  int64_t i, np;
  void *scr;

  for (i = 0; i < B * H * N * D; i++) {
    q[i] = (float)test_uniform(-1, 1);
    k[i] = (float)test_uniform(-1, 1);
    v[i] = (float)test_uniform(-1, 1);
  }
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, sh));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, sh));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, sh));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = o1, p.causal = 1;
  CHECK_OK(ab_attention(&p));
  p.out = o2;
  CHECK_OK(ab_attention_job(&p, &job));
  np = ab_job_pieces(job);
  CHECK(np >= H * 3); /* 3 blocks of 50 rows per head */
  CHECK(ab_job_flops(job) == ab_attention_flops(&p));
  scr = aligned_alloc(64, (ab_job_scratch_size(job) + 63) / 64 * 64);
  CHECK(scr != NULL);
  /* Last piece first; odd pieces with caller scratch, even ones with NULL
   * (the piece allocates its own). */
  for (i = np - 1; i >= 0; i--)
    CHECK_OK(ab_job_run(job, i, i % 2 ? scr : NULL));
  CHECK_EQ_I64(ab_job_run(job, np, scr), AB_STATUS_OUT_OF_RANGE);
  ab_job_free(job);
  free(scr);
  CHECK(memcmp(o1, o2, sizeof(float) * B * H * N * D) == 0);
  free(q), free(k), free(v), free(o1), free(o2);
  return 0;
}

/* One piece at a time on outputs filled with a sentinel: the lowest element
 * each piece changes must be what ab_job_piece_first says, and after every
 * piece ran no sentinel may remain (the pieces write all of each output).
 * Covers GQA, a decode step (head groups in one block), causal with
 * several blocks per head, both layouts (bshd out is strided by head) and
 * lse + weights. */
static int piece_first_case(int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq,
                            int64_t Nk, int64_t D, int layout, int causal,
                            int64_t q_group)
{
  struct ab__attn_tuning tune = {NULL, 0, 0, 0, 0, 0, q_group};
  const int64_t nout = B * Hq * Nq * D, nl = B * Hq * Nq, nw = nl * Nk;
  const int64_t qsh[4] = {B, layout == AB_LAYOUT_BHSD ? Hq : Nq,
                          layout == AB_LAYOUT_BHSD ? Nq : Hq, D};
  const int64_t ksh[4] = {B, layout == AB_LAYOUT_BHSD ? Hkv : Nk,
                          layout == AB_LAYOUT_BHSD ? Nk : Hkv, D};
  float *q = malloc(sizeof(float) * (size_t)nout);
  float *k = malloc(sizeof(float) * (size_t)(B * Hkv * Nk * D));
  float *v = malloc(sizeof(float) * (size_t)(B * Hkv * Nk * D));
  float *out = malloc(sizeof(float) * (size_t)nout);
  float *lse = malloc(sizeof(float) * (size_t)nl);
  float *w = malloc(sizeof(float) * (size_t)nw);
  float *outs[3] = {out, lse, w};
  const int64_t n[3] = {nout, nl, nw};
  const float sentinel = 1234.5f;
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  ab_job_t *job;
  int64_t i, piece, first, o;
  int fails = 0;

  for (i = 0; i < nout; i++)
    q[i] = (float)test_uniform(-1, 1);
  for (i = 0; i < B * Hkv * Nk * D; i++) {
    k[i] = (float)test_uniform(-1, 1);
    v[i] = (float)test_uniform(-1, 1);
  }
  for (o = 0; o < 3; o++)
    for (i = 0; i < n[o]; i++)
      outs[o][i] = sentinel;
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qsh));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, ksh));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, ksh));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.layout = (enum ab_layout)layout;
  p.causal = causal, p.out = out, p.lse = lse, p.weights = w;
  CHECK_OK(ab__attention_job_tuned(&p, &tune, &job));
  for (piece = 0; piece < ab_job_pieces(job); piece++) {
    int64_t lowest[3] = {INT64_MAX, INT64_MAX, INT64_MAX};
    float *before[3];

    for (o = 0; o < 3; o++) {
      before[o] = malloc(sizeof(float) * (size_t)n[o]);
      memcpy(before[o], outs[o], sizeof(float) * (size_t)n[o]);
    }
    CHECK_OK(ab_job_run(job, piece, NULL));
    for (o = 0; o < 3; o++) {
      for (i = 0; i < n[o] && lowest[o] == INT64_MAX; i++)
        if (memcmp(&before[o][i], &outs[o][i], sizeof(float)) != 0)
          lowest[o] = i;
      free(before[o]);
      CHECK_OK(ab_job_piece_first(job, piece, outs[o], &first));
      if (first != lowest[o]) {
        fprintf(stderr, "  piece %lld output %lld: first %lld, lowest "
                "written %lld (B=%lld Hq=%lld Hkv=%lld Nq=%lld layout=%d)\n",
                (long long)piece, (long long)o, (long long)first,
                (long long)lowest[o], (long long)B, (long long)Hq,
                (long long)Hkv, (long long)Nq, layout);
        fails++;
      }
    }
  }
  for (o = 0; o < 3; o++)
    for (i = 0; i < n[o]; i++)
      if (outs[o][i] == sentinel) {
        fprintf(stderr, "  output %lld element %lld never written\n",
                (long long)o, (long long)i);
        fails++;
        break;
      }
  /* Not an output of the job; and out of range. */
  CHECK_FAILS(ab_job_piece_first(job, 0, q, &first), AB_STATUS_INVALID_ARG,
              "output");
  CHECK_FAILS(ab_job_piece_first(job, ab_job_pieces(job), out, &first),
              AB_STATUS_OUT_OF_RANGE, "piece");
  ab_job_free(job);
  free(q), free(k), free(v), free(out), free(lse), free(w);
  return fails;
}

TEST(attn_job_piece_first_is_lowest_written)
{
  struct ab_bias_params bp;
  struct ab_geometry g;
  float table[4 * 2 * 3];
  ab_job_t *job;
  int64_t first;

  CHECK_EQ_I64(piece_first_case(2, 4, 2, 300, 70, 16, AB_LAYOUT_BHSD, 1, 0), 0);
  CHECK_EQ_I64(piece_first_case(1, 8, 2, 1, 50, 8, AB_LAYOUT_BHSD, 0, 0), 0);
  CHECK_EQ_I64(piece_first_case(2, 4, 4, 200, 40, 8, AB_LAYOUT_BSHD, 0, 0), 0);
  CHECK_EQ_I64(piece_first_case(1, 6, 3, 3, 9, 4, AB_LAYOUT_BSHD, 1, 0), 0);
  /* Pieces of 3 query blocks (5 blocks of 60 rows: the last piece has 2). */
  CHECK_EQ_I64(piece_first_case(2, 4, 2, 300, 70, 16, AB_LAYOUT_BHSD, 1, 3),
               0);
  CHECK_EQ_I64(piece_first_case(1, 4, 4, 300, 40, 8, AB_LAYOUT_BSHD, 0, 3),
               0);
  /* A job kind that does not describe its pieces says so. */
  ab_geometry_init(&g, 2, 3);
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  bp.num_heads = 4;
  CHECK_OK(ab_bias_table_job(&bp, &g, table, NULL, &job));
  CHECK_FAILS(ab_job_piece_first(job, 0, table, &first),
              AB_STATUS_INVALID_ARG, "job");
  ab_job_free(job);
  return 0;
}

/* inputs_later: a job built on inputs that are all NaN, then run one piece
 * at a time with each input holding its true values only in the first
 * `end` elements that ab_job_piece_reads gives for that piece (NaN after
 * them, as if the rest had not arrived): every output must match the
 * float64 reference, so no piece read past what it said, and building the
 * job read nothing.  q is float16 here when q16 (read in place, any
 * dtype); attn_bias [1, Hq, Nq, Nk] broadcasts over the batch. */
/* t [B, H, N, D] in bhsd (else [B, N, H, D]) with uniform(-1, 1) values,
 * rounded through float16 when h16 (which receives the halves), and the
 * same values in canon [B][H][N][D]. */
static void later_fill(float *t, uint16_t *h16, double *canon, int64_t B,
                       int64_t H, int64_t N, int64_t D, int bhsd)
{
  int64_t b, h, r, c;

  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++)
      for (r = 0; r < N; r++)
        for (c = 0; c < D; c++) {
          int64_t at = bhsd ? ((b * H + h) * N + r) * D + c
                            : ((b * N + r) * H + h) * D + c;
          t[at] = (float)test_uniform(-1, 1);
          if (h16) {
            h16[at] = ab_f32_to_f16(t[at]);
            t[at] = ab_f16_to_f32(h16[at]);
          }
          canon[((b * H + h) * N + r) * D + c] = t[at];
        }
}

static int later_case(int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq,
                      int64_t Nk, int64_t D, int layout, int causal, int q16,
                      int with_bias, int64_t q_group)
{
  struct ab__attn_tuning tune = {NULL, 0, 0, 0, 0, 0, q_group};
  const int bhsd = layout == AB_LAYOUT_BHSD;
  const int64_t nq = B * Hq * Nq * D, nk = B * Hkv * Nk * D,
                nb = Hq * Nq * Nk, nout = nq;
  const int64_t qsh[4] = {B, bhsd ? Hq : Nq, bhsd ? Nq : Hq, D};
  const int64_t ksh[4] = {B, bhsd ? Hkv : Nk, bhsd ? Nk : Hkv, D};
  const int64_t bsh[4] = {1, Hq, Nq, Nk};
  struct prob P = {B, Hq, Hkv, Nq, Nk, D, D, NULL, NULL, NULL};
  struct ref_opts o;
  float *qf = malloc(sizeof(float) * (size_t)nq), *kf, *vf, *bf, *out;
  uint16_t *qh = malloc(sizeof(uint16_t) * (size_t)nq);
  double *want = malloc(sizeof(double) * (size_t)nout), *abx;
  /* the buffers the job reads, and where the true values live */
  void *xin[4];
  const void *truth[4];
  int64_t n[4], es[4];
  struct ab_tensor tq, tk, tv, tb;
  struct ab_attn_params p;
  ab_job_t *job;
  int64_t b, h, r, c, i, piece, x;
  int fails = 0;

  kf = malloc(sizeof(float) * (size_t)nk);
  vf = malloc(sizeof(float) * (size_t)nk);
  bf = malloc(sizeof(float) * (size_t)nb);
  out = malloc(sizeof(float) * (size_t)nout);
  abx = malloc(sizeof(double) * (size_t)(B * nb));
  P.q = malloc(sizeof(double) * (size_t)nq);
  P.k = malloc(sizeof(double) * (size_t)nk);
  P.v = malloc(sizeof(double) * (size_t)nk);
  /* Stored values in the tensors' layout; canonical [B][H][N][D] copies. */
  later_fill(qf, q16 ? qh : NULL, P.q, B, Hq, Nq, D, bhsd);
  later_fill(kf, NULL, P.k, B, Hkv, Nk, D, bhsd);
  later_fill(vf, NULL, P.v, B, Hkv, Nk, D, bhsd);
  for (i = 0; i < nb; i++)
    bf[i] = (float)test_uniform(-2, 2);
  for (b = 0; b < B; b++)
    for (i = 0; i < nb; i++)
      abx[b * nb + i] = bf[i];
  ref_opts_init(&o, &P);
  o.causal = causal;
  o.attn_bias = with_bias ? abx : NULL;
  ref_attention(&P, &o, want, NULL, NULL);

  truth[0] = q16 ? (const void *)qh : qf, es[0] = q16 ? 2 : 4, n[0] = nq;
  truth[1] = kf, es[1] = 4, n[1] = nk;
  truth[2] = vf, es[2] = 4, n[2] = nk;
  truth[3] = bf, es[3] = 4, n[3] = nb;
  for (x = 0; x < 4; x++) {
    xin[x] = malloc((size_t)(n[x] * es[x]));
    memset(xin[x], 0xff, (size_t)(n[x] * es[x])); /* NaN in f16 and f32 */
  }
  CHECK_OK(ab_tensor_init(&tq, xin[0], q16 ? AB_DTYPE_F16 : AB_DTYPE_F32, 4,
                          qsh));
  CHECK_OK(ab_tensor_init(&tk, xin[1], AB_DTYPE_F32, 4, ksh));
  CHECK_OK(ab_tensor_init(&tv, xin[2], AB_DTYPE_F32, 4, ksh));
  CHECK_OK(ab_tensor_init(&tb, xin[3], AB_DTYPE_F32, 4, bsh));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.layout = (enum ab_layout)layout;
  p.causal = causal, p.out = out;
  p.attn_bias = with_bias ? &tb : NULL;
  p.inputs_later = 1;
  CHECK_OK(ab__attention_job_tuned(&p, &tune, &job));
  for (piece = 0; piece < ab_job_pieces(job); piece++) {
    for (x = 0; x < (with_bias ? 4 : 3); x++) {
      int64_t end;
      CHECK_OK(ab_job_piece_reads(job, piece, xin[x], &end));
      CHECK(end >= 0 && end <= n[x]);
      memcpy(xin[x], truth[x], (size_t)(end * es[x]));
      memset((char *)xin[x] + end * es[x], 0xff,
             (size_t)((n[x] - end) * es[x]));
    }
    CHECK_OK(ab_job_run(job, piece, NULL));
  }
  for (b = 0; b < B; b++)
    for (h = 0; h < Hq; h++)
      for (r = 0; r < Nq; r++)
        for (c = 0; c < D; c++) {
          int64_t at = bhsd ? ((b * Hq + h) * Nq + r) * D + c
                            : ((b * Nq + r) * Hq + h) * D + c;
          double w = want[((b * Hq + h) * Nq + r) * D + c];
          if (!(fabs(out[at] - w) <= 1e-5 + 1e-4 * fabs(w))) {
            if (fails++ < 3)
              fprintf(stderr, "  out[%lld,%lld,%lld,%lld] = %g, want %g\n",
                      (long long)b, (long long)h, (long long)r, (long long)c,
                      (double)out[at], w);
          }
        }
  /* Not an input of the job; the output is not one either. */
  {
    int64_t end;
    CHECK_FAILS(ab_job_piece_reads(job, 0, out, &end), AB_STATUS_INVALID_ARG,
                "input");
    CHECK_FAILS(ab_job_piece_reads(job, -1, xin[0], &end),
                AB_STATUS_OUT_OF_RANGE, "piece");
  }
  ab_job_free(job);
  for (x = 0; x < 4; x++)
    free(xin[x]);
  free(qf), free(qh), free(kf), free(vf), free(bf), free(out), free(want);
  free(abx), free(P.q), free(P.k), free(P.v);
  return fails;
}

TEST(attn_job_inputs_later_reads_only_what_it_says)
{
  CHECK_EQ_I64(later_case(2, 4, 2, 150, 70, 16, AB_LAYOUT_BHSD, 1, 0, 1, 0), 0);
  CHECK_EQ_I64(later_case(1, 8, 2, 1, 50, 8, AB_LAYOUT_BHSD, 0, 1, 0, 0), 0);
  CHECK_EQ_I64(later_case(2, 4, 4, 200, 40, 8, AB_LAYOUT_BSHD, 0, 0, 1, 0), 0);
  CHECK_EQ_I64(later_case(1, 6, 3, 3, 9, 4, AB_LAYOUT_BSHD, 1, 1, 0, 0), 0);
  /* Pieces of several query blocks: what a piece reads is its blocks'. */
  CHECK_EQ_I64(later_case(2, 4, 2, 300, 70, 16, AB_LAYOUT_BHSD, 1, 0, 1, 3),
               0);
  CHECK_EQ_I64(later_case(1, 4, 4, 200, 40, 8, AB_LAYOUT_BSHD, 0, 1, 0, 2),
               0);
  return 0;
}

/* Where building the job would read its inputs, inputs_later is refused;
 * job kinds that do not describe their reads say so. */
TEST(attn_job_inputs_later_refusals)
{
  float qf[2 * 3 * 4], kf[2 * 3 * 4];
  uint16_t kh[2 * 3 * 4];
  double kd[2 * 3 * 4];
  const int64_t sh[3] = {2, 3, 4}, tsh[3] = {2, 4, 3};
  struct ab_tensor tq, tk, tv, tk16, tk64, tvt;
  struct ab_attn_params p;
  struct ab_rope_params rp;
  struct ab_bias_params bp;
  struct ab_geometry g;
  float table[4 * 2 * 3];
  ab_job_t *job;
  int64_t end;

  memset(qf, 0, sizeof qf), memset(kf, 0, sizeof kf), memset(kh, 0, sizeof kh);
  memset(kd, 0, sizeof kd);
  CHECK_OK(ab_tensor_init(&tq, qf, AB_DTYPE_F32, 3, sh));
  CHECK_OK(ab_tensor_init(&tk, kf, AB_DTYPE_F32, 3, sh));
  CHECK_OK(ab_tensor_init(&tv, kf, AB_DTYPE_F32, 3, sh));
  CHECK_OK(ab_tensor_init(&tk16, kh, AB_DTYPE_F16, 3, sh));
  CHECK_OK(ab_tensor_init(&tk64, kd, AB_DTYPE_F64, 3, sh));
  /* v as the transpose of a [2, 4, 3] array: inner stride 3 */
  CHECK_OK(ab_tensor_init(&tvt, kf, AB_DTYPE_F32, 3, tsh));
  tvt.shape[1] = 3, tvt.shape[2] = 4, tvt.stride[1] = 1, tvt.stride[2] = 3;
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk64, p.v = &tv, p.out = qf, p.inputs_later = 1;
  CHECK_FAILS(ab_attention_job(&p, &job), AB_STATUS_INVALID_ARG,
              "inputs_later");
  CHECK(strstr(ab_last_error()->msg, "float64") != NULL);
  /* 16-bit k is read in place, so it may come later too. */
  p.k = &tk16;
  CHECK_OK(ab_attention_job(&p, &job));
  CHECK_OK(ab_job_piece_reads(job, 0, kh, &end));
  CHECK_EQ_I64(end, 3 * 4);
  ab_job_free(job);
  p.k = &tk, p.v = &tvt;
  CHECK_FAILS(ab_attention_job(&p, &job), AB_STATUS_INVALID_ARG,
              "inputs_later");
  CHECK(strstr(ab_last_error()->msg, "inner stride 3") != NULL);
  p.v = &tv;
  ab_rope_params_init(&rp);
  rp.head_dim = 4;
  p.rope = &rp;
  CHECK_FAILS(ab_attention_job(&p, &job), AB_STATUS_INVALID_ARG,
              "inputs_later");
  /* Without inputs_later the job is built, copying float64 k: its pieces
   * read nothing of k, and all of v (one kv head). */
  p.inputs_later = 0;
  p.rope = NULL;
  p.k = &tk64;
  CHECK_OK(ab_attention_job(&p, &job));
  CHECK_OK(ab_job_piece_reads(job, 0, kd, &end));
  CHECK_EQ_I64(end, 0);
  CHECK_OK(ab_job_piece_reads(job, 0, kf, &end));
  CHECK_EQ_I64(end, 3 * 4);
  ab_job_free(job);
  p.k = &tk;
  /* k = v, one buffer: read as both. */
  CHECK_OK(ab_attention_job(&p, &job));
  CHECK_OK(ab_job_piece_reads(job, 0, kf, &end));
  CHECK(end > 0);
  ab_job_free(job);

  ab_geometry_init(&g, 2, 3);
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  bp.num_heads = 4;
  CHECK_OK(ab_bias_table_job(&bp, &g, table, NULL, &job));
  CHECK_FAILS(ab_job_piece_reads(job, 0, table, &end), AB_STATUS_INVALID_ARG,
              "job");
  ab_job_free(job);
  return 0;
}

TEST(attn_flops_visible_part)
{
  float dummy[1];
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  const int64_t qs[4] = {2, 4, 100, 64}, ks[4] = {2, 2, 100, 64},
                vs[4] = {2, 2, 100, 32};

  CHECK_OK(ab_tensor_init(&tq, dummy, AB_DTYPE_F32, 4, qs));
  CHECK_OK(ab_tensor_init(&tk, dummy, AB_DTYPE_F32, 4, ks));
  CHECK_OK(ab_tensor_init(&tv, dummy, AB_DTYPE_F32, 4, vs));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv;
  /* Dense: 2*B*Hq*Nq*Nk*(D + Dv). */
  CHECK(ab_attention_flops(&p) == 2.0 * 2 * 4 * 100 * 100 * (64 + 32));
  p.causal = 1; /* N(N+1)/2 pairs */
  CHECK(ab_attention_flops(&p) == 2.0 * 2 * 4 * 5050 * (64 + 32));
  p.window_left = 9; /* each row sees min(r+1, 10) keys */
  CHECK(ab_attention_flops(&p) == 2.0 * 2 * 4 * (55 + 90 * 10) * (64 + 32));
  p.window_left = 0;
  p.causal = 0;
  p.q = &tk; /* Hq 2 < ... still valid, D matches */
  tv.shape[1] = 3;
  CHECK(ab_attention_flops(&p) == -1.0);
  CHECK_STR(ab_last_error()->arg, "v");
  return 0;
}

/* ==== RoPE inside attention ============================================ */

/* ab_rope_apply by hand on q and k (positions q_offset + r and j), then the
 * float64 reference on the rotated values, against rope inside attention.
 * type 0: default, 1: xPos (k decays the other way), 2: dynamic NTK, whose
 * frequencies depend on the default rope_seq_len (max position + 1).
 * With explicit positions, attention is given them plus `shift` while the
 * reference rotates the unshifted ones: logits depend on distances only
 * (types 0 and 1), even where xPos's factors alone overflow float32. */
static int rope_case_shift(int layout, int type, int64_t q_offset,
                           int explicit_pos, int64_t shift)
{
  enum { B = 2, HQ = 4, HKV = 2, NQ = 7, NK = 23, D = 16 };
  struct prob P = {B, HQ, HKV, NQ, NK, D, D, NULL, NULL, NULL};
  struct tbuf tq, tk, tv;
  struct ab_rope_params rp;
  struct ab_attn_params p;
  struct ref_opts o;
  int64_t qpos[NQ], kpos[NK], qpos_s[NQ], kpos_s[NK], i, seq_len;
  float *rq = malloc(sizeof(float) * B * HQ * NQ * D);
  float *rk = malloc(sizeof(float) * B * HKV * NK * D);
  float out[B * HQ * NQ * D], canon[B * HQ * NQ * D];
  double want[B * HQ * NQ * D];
  int bad = 0;

  P.q = rand_array(B * HQ * NQ * D, -1, 1);
  P.k = rand_array(B * HKV * NK * D, -1, 1);
  P.v = rand_array(B * HKV * NK * D, -1, 1);
  make_tensor(&tq, P.q, B, HQ, NQ, D, layout, 4, AB_DTYPE_F16, 1);
  make_tensor(&tk, P.k, B, HKV, NK, D, layout, 4, AB_DTYPE_F32, 0);
  make_tensor(&tv, P.v, B, HKV, NK, D, layout, 4, AB_DTYPE_F32, 0);
  ab_rope_params_init(&rp);
  rp.head_dim = D;
  rp.rope_theta = 500.0;
  if (type == 1)
    rp.rope_type = AB_ROPE_XPOS;
  if (type == 2) {
    rp.rope_type = AB_ROPE_DYNAMIC;
    rp.factor = 2.0;
    rp.original_max_position_embeddings = 8;
  }
  for (i = 0; i < NQ; i++)
    qpos[i] = explicit_pos ? 3 * i + 1 : q_offset + i;
  for (i = 0; i < NK; i++)
    kpos[i] = explicit_pos ? 2 * i : i;
  /* Attention's default rope_seq_len: max position + 1 over q and k. */
  seq_len = 1;
  for (i = 0; i < NQ; i++)
    seq_len = qpos[i] + 1 > seq_len ? qpos[i] + 1 : seq_len;
  for (i = 0; i < NK; i++)
    seq_len = kpos[i] + 1 > seq_len ? kpos[i] + 1 : seq_len;
  if (ab_rope_apply(&rp, seq_len, &tq.t, layout, qpos, 0, rq) ||
      ab_rope_apply(&rp, seq_len, &tk.t, layout, kpos, 1, rk)) {
    fprintf(stderr, "  rope: %s: %s\n", ab_last_error()->arg,
            ab_last_error()->msg);
    return 1;
  }
  /* The reference takes the rotated float32 values in canonical order. */
  out_canon(rq, layout, B, HQ, NQ, D, canon);
  for (i = 0; i < B * HQ * NQ * D; i++)
    P.q[i] = canon[i];
  {
    float kc[B * HKV * NK * D];
    out_canon(rk, layout, B, HKV, NK, D, kc);
    for (i = 0; i < B * HKV * NK * D; i++)
      P.k[i] = kc[i];
  }
  ab_attn_params_init(&p);
  ref_opts_init(&o, &P);
  p.q = &tq.t, p.k = &tk.t, p.v = &tv.t;
  p.layout = layout;
  p.causal = o.causal = 1;
  p.has_q_offset = 1;
  p.q_offset = o.q_offset = q_offset;
  p.rope = &rp;
  if (explicit_pos) {
    for (i = 0; i < NQ; i++)
      qpos_s[i] = qpos[i] + shift;
    for (i = 0; i < NK; i++)
      kpos_s[i] = kpos[i] + shift;
    p.q_positions = qpos_s;
    p.k_positions = kpos_s;
  }
  p.out = out;
  ref_attention(&P, &o, want, NULL, NULL);
  if (ab_attention(&p) != AB_STATUS_OK) {
    fprintf(stderr, "  attention: %s: %s\n", ab_last_error()->arg,
            ab_last_error()->msg);
    bad = 1;
  } else {
    out_canon(out, layout, B, HQ, NQ, D, canon);
    if (!test_array_close(__FILE__, __LINE__, "out", canon, want,
                          B * HQ * NQ * D, RTOL, ATOL)) {
      fprintf(stderr,
              "  layout %d type %d q_offset %lld explicit %d shift %lld\n",
              layout, type, (long long)q_offset, explicit_pos,
              (long long)shift);
      bad = 1;
    }
  }
  free(rq), free(rk), free(P.q), free(P.k), free(P.v);
  free(tq.mem), free(tk.mem), free(tv.mem);
  return bad;
}

static int rope_case(int layout, int type, int64_t q_offset, int explicit_pos)
{
  return rope_case_shift(layout, type, q_offset, explicit_pos, 0);
}

TEST(attn_rope_inside_vs_by_hand)
{
  int layout;

  for (layout = 0; layout < 2; layout++) {
    if (rope_case(layout, 0, 16, 0) || rope_case(layout, 0, 3, 0) ||
        rope_case(layout, 1, 16, 0) || rope_case(layout, 0, 16, 1) ||
        rope_case(layout, 2, 16, 0) || rope_case(layout, 2, 5, 1))
      return 1;
  }
  return 0;
}

TEST(attn_xpos_far_positions)
{
  /* At |p| > ~36k zeta^(p/512) alone overflows float32 (docs/methods.md#xpos:
   * centring is for range only); attention must still see the logits of
   * the distances.  Plain RoPE alike. */
  static const int64_t shifts[] = {40000, 1000000, -1000000, 123456789};
  size_t i;
  int layout;

  for (i = 0; i < sizeof shifts / sizeof shifts[0]; i++)
    for (layout = 0; layout < 2; layout++)
      if (rope_case_shift(layout, 1, 0, 1, shifts[i]) ||
          rope_case_shift(layout, 0, 0, 1, shifts[i]))
        return 1;
  return 0;
}

/* ==== position-bias families inside attention ========================== */

/* The family fused in the key loop against its own table (ab_bias_table,
 * no mask) given as attn_bias [Hq, Nq, Nk] to the float64 reference. */
static int bias_case(const struct ab_bias_params *bp, int64_t Hq, int64_t Nq,
                     int64_t Nk, int causal, int64_t key_tile)
{
  struct prob P = {1, Hq, 1, Nq, Nk, 8, 8, NULL, NULL, NULL};
  struct tbuf tq, tk, tv;
  struct ab_attn_params p;
  struct ab__attn_tuning tune = {NULL, 0, key_tile, 0, 0, 0, 0};
  struct ab_geometry g;
  struct ref_opts o;
  float *table = malloc(sizeof(float) * Hq * Nq * Nk);
  double *bias = malloc(sizeof(double) * Hq * Nq * Nk);
  float *out = malloc(sizeof(float) * Hq * Nq * 8);
  double *want = malloc(sizeof(double) * Hq * Nq * 8);
  ab_job_t *job;
  int64_t i;
  int bad = 0;

  P.q = rand_array(Hq * Nq * 8, -1, 1);
  P.k = rand_array(Nk * 8, -1, 1);
  P.v = rand_array(Nk * 8, -1, 1);
  make_tensor(&tq, P.q, 1, Hq, Nq, 8, 0, 4, AB_DTYPE_F32, 0);
  make_tensor(&tk, P.k, 1, 1, Nk, 8, 0, 4, AB_DTYPE_F32, 0);
  make_tensor(&tv, P.v, 1, 1, Nk, 8, 0, 4, AB_DTYPE_F32, 0);
  ab_geometry_init(&g, Nq, Nk);
  if (ab_bias_table(bp, &g, table, NULL) != AB_STATUS_OK) {
    fprintf(stderr, "  table: %s: %s\n", ab_last_error()->arg,
            ab_last_error()->msg);
    bad = 1;
    goto done;
  }
  for (i = 0; i < Hq * Nq * Nk; i++)
    bias[i] = table[i];
  ab_attn_params_init(&p);
  ref_opts_init(&o, &P);
  p.q = &tq.t, p.k = &tk.t, p.v = &tv.t;
  p.causal = o.causal = causal;
  p.bias = bp;
  o.bias = bias;
  p.out = out;
  ref_attention(&P, &o, want, NULL, NULL);
  if (ab__attention_job_tuned(&p, &tune, &job) != AB_STATUS_OK ||
      ab_job_run_all(job) != AB_STATUS_OK) {
    fprintf(stderr, "  attention: %s: %s\n", ab_last_error()->arg,
            ab_last_error()->msg);
    bad = 1;
  } else if (!test_array_close(__FILE__, __LINE__, "out", out, want,
                               Hq * Nq * 8, RTOL, ATOL)) {
    fprintf(stderr, "  method %d Hq %lld Nq %lld Nk %lld causal %d\n",
            (int)bp->method, (long long)Hq, (long long)Nq, (long long)Nk,
            causal);
    bad = 1;
  }
  ab_job_free(job);
done:
  free(table), free(bias), free(out), free(want);
  free(P.q), free(P.k), free(P.v), free(tq.mem), free(tk.mem), free(tv.mem);
  return bad;
}

TEST(attn_bias_alibi_fused_vs_table)
{
  struct ab_bias_params bp;
  float slopes[3] = {0.5f, 0.125f, 0.03f};

  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  bp.num_heads = 5;
  if (bias_case(&bp, 5, 37, 70, 1, 16) || bias_case(&bp, 5, 70, 37, 0, 0))
    return 1;
  bp.num_heads = 3;
  bp.slopes = slopes;
  return bias_case(&bp, 3, 1, 90, 1, 0) || bias_case(&bp, 3, 20, 20, 0, 7);
}

TEST(attn_bias_t5_fused_vs_table)
{
  struct ab_bias_params bp;
  float tab[32 * 4];
  const int64_t sh[2] = {32, 4};
  struct ab_tensor tt;
  int i;

  for (i = 0; i < 32 * 4; i++)
    tab[i] = (float)test_uniform(-2, 2);
  CHECK_OK(ab_tensor_init(&tt, tab, AB_DTYPE_F32, 2, sh));
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_T5;
  bp.num_heads = 4;
  bp.table = &tt;
  bp.max_distance = 20;
  if (bias_case(&bp, 4, 30, 75, 0, 16) || bias_case(&bp, 4, 75, 30, 1, 0))
    return 1;
  bp.bidirectional = 0;
  return bias_case(&bp, 4, 45, 45, 1, 0);
}

TEST(attn_bias_kerple_fused_vs_table)
{
  struct ab_bias_params bp;
  float r1[2] = {0.7f, 1.5f}, r2[2] = {0.3f, 1.2f};

  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_KERPLE;
  bp.num_heads = 2;
  bp.r1 = r1;
  bp.r2 = r2;
  if (bias_case(&bp, 2, 33, 50, 0, 16))
    return 1;
  bp.kerple_power = 1;
  return bias_case(&bp, 2, 50, 33, 1, 0);
}

TEST(attn_bias_fire_fused_vs_table)
{
  /* FIRE MLP 1 -> 4 -> 2 (two heads) with fixed weights. */
  float w1[4] = {0.8f, -1.1f, 0.5f, 1.7f}, b1[4] = {0.1f, 0.2f, -0.3f, 0.0f};
  float w2[8] = {0.3f, -0.2f, 0.9f, 0.4f, -0.6f, 0.5f, 0.2f, 0.1f},
        b2[2] = {0.05f, -0.1f};
  const int64_t s1[2] = {4, 1}, sb1[1] = {4}, s2[2] = {2, 4}, sb2[1] = {2};
  struct ab_tensor tw1, tb1, tw2, tb2;
  struct ab_fire_layer layers[2];
  struct ab_bias_params bp;

  CHECK_OK(ab_tensor_init(&tw1, w1, AB_DTYPE_F32, 2, s1));
  CHECK_OK(ab_tensor_init(&tb1, b1, AB_DTYPE_F32, 1, sb1));
  CHECK_OK(ab_tensor_init(&tw2, w2, AB_DTYPE_F32, 2, s2));
  CHECK_OK(ab_tensor_init(&tb2, b2, AB_DTYPE_F32, 1, sb2));
  layers[0].weight = &tw1, layers[0].bias = &tb1;
  layers[1].weight = &tw2, layers[1].bias = &tb2;
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_FIRE;
  bp.num_heads = 2;
  bp.c = 1.0;
  bp.L = 8.0;
  bp.n_layers = 2;
  bp.layers = layers;
  return bias_case(&bp, 2, 30, 41, 1, 16) || bias_case(&bp, 2, 41, 30, 0, 0);
}

/* ==== errors =========================================================== */

TEST(attn_errors_name_the_argument)
{
  float q[2 * 3 * 4 * 8], k[2 * 2 * 5 * 8], v[2 * 2 * 5 * 8], out[2 * 3 * 4 * 8];
  const int64_t qs[4] = {2, 3, 4, 8}, ks[4] = {2, 2, 5, 8};
  struct ab_tensor tq, tk, tv, t2, tb;
  struct ab_attn_params p;
  int32_t kvl[2] = {5, 6};
  float bias[4 * 5];
  const int64_t bs[2] = {4, 5}, bad_bs[2] = {3, 5};
  int64_t s2[4];

  memset(q, 0, sizeof q), memset(k, 0, sizeof k), memset(v, 0, sizeof v);
  memset(bias, 0, sizeof bias);
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qs));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, ks));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, ks));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out;

  /* Hq 3 is not a multiple of Hkv 2: the message names both. */
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "k");
  CHECK(strstr(ab_last_error()->msg, "3") && strstr(ab_last_error()->msg, "2"));
  tq.shape[1] = 2; /* now Hq = 2 with the same strides: valid */
  CHECK_OK(ab_attention(&p));

  CHECK_EQ_I64(ab_attention(NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "p");
  p.q = NULL;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "q");
  p.q = &tq;
  p.out = NULL;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "out");
  p.out = out;
  p.layout = (enum ab_layout)7;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "layout");
  p.layout = AB_LAYOUT_BHSD;

  /* Shape disagreements. */
  t2 = tk;
  t2.shape[3] = 7;
  p.k = &t2;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "k"); /* head_dim 7 vs 8 */
  CHECK(strstr(ab_last_error()->msg, "7") && strstr(ab_last_error()->msg, "8"));
  t2 = tk;
  t2.shape[0] = 1;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "k"); /* batch */
  p.k = &tk;
  t2 = tv;
  t2.shape[2] = 4;
  p.v = &t2;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "v"); /* keys 4 vs 5 */
  t2 = tv;
  t2.shape[1] = 1;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "v"); /* heads */
  t2 = tv;
  t2.ndim = 3; /* its own rank: [Hkv, Nk, Dv] with batch 1, but q has 2 */
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "v");
  CHECK(strstr(ab_last_error()->msg, "batch") != NULL);
  t2 = tv;
  t2.ndim = 1;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "v"); /* rank */
  CHECK(strstr(ab_last_error()->msg, "rank 1") != NULL);
  t2 = tv;
  t2.dtype = AB_DTYPE_I32;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_DTYPE, "v");
  t2 = tv;
  t2.shape[2] = 0;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "v");
  p.v = &tv;
  t2 = tq;
  t2.ndim = 1;
  p.q = &t2;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "q");
  p.q = &tq;

  /* Parameters. */
  p.has_scale = 1;
  p.scale = NAN;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "scale");
  p.scale = INFINITY;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "scale");
  p.scale = 1e308; /* finite, but not in float32 */
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "scale");
  p.has_scale = 0;
  p.softcap = -1;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "softcap");
  p.softcap = NAN;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "softcap");
  p.softcap = 1e-320; /* rounds to 0 in float32 */
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "softcap");
  p.has_scale = 1;
  p.scale = 1e30;
  p.softcap = 1e-30; /* each is a float32, scale / softcap is not */
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "softcap");
  p.has_scale = 0;
  p.softcap = 0;
  p.window_left = -2;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "window");
  CHECK(strstr(ab_last_error()->msg, "-2") != NULL);
  p.window_left = -1;
  p.window_right = -5;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "window");
  p.window_right = -1;
  p.kv_lens = kvl; /* kv_lens[1] = 6 > Nk = 5 */
  CHECK_FAILS(ab_attention(&p), AB_STATUS_OUT_OF_RANGE, "kv_lens.1");
  CHECK(strstr(ab_last_error()->msg, "6") != NULL);
  kvl[1] = -1;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_OUT_OF_RANGE, "kv_lens.1");
  kvl[1] = 0;
  CHECK_OK(ab_attention(&p));
  p.kv_lens = NULL;
  p.has_q_offset = 1;
  p.q_offset = (int64_t)1 << 50;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_OUT_OF_RANGE, "q_offset");
  p.has_q_offset = 0;

  /* attn_bias must broadcast to [B, Hq, Nq, Nk] = [2, 2, 4, 5]. */
  CHECK_OK(ab_tensor_init(&tb, bias, AB_DTYPE_F32, 2, bad_bs));
  p.attn_bias = &tb;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "attn_bias");
  CHECK(strstr(ab_last_error()->msg, "3") != NULL);
  CHECK_OK(ab_tensor_init(&tb, bias, AB_DTYPE_F32, 2, bs));
  CHECK_OK(ab_attention(&p));
  s2[0] = 3, s2[1] = 1, s2[2] = 4, s2[3] = 5; /* batch 3 vs 2 */
  CHECK_OK(ab_tensor_init(&tb, bias, AB_DTYPE_F32, 4, s2));
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "attn_bias");
  tb.data = NULL;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "attn_bias");
  p.attn_bias = NULL;
  return 0;
}

TEST(attn_errors_rope_and_bias_parameters)
{
  float q[4 * 8], k[5 * 8], v[5 * 8], out[4 * 8];
  const int64_t qs[2] = {4, 8}, ks[2] = {5, 8};
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct ab_rope_params rp;
  struct ab_bias_params bp;

  memset(q, 0, sizeof q), memset(k, 0, sizeof k), memset(v, 0, sizeof v);
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 2, qs));
  CHECK_OK(ab_tensor_init(&tk, k, AB_DTYPE_F32, 2, ks));
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 2, ks));
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out;
  ab_rope_params_init(&rp);
  rp.head_dim = 16; /* q and k have 8 */
  p.rope = &rp;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_BAD_SHAPE, "rope.head_dim");
  rp.head_dim = 8;
  rp.rotary_dim = 3; /* odd: the rope check's own error, under rope. */
  CHECK(ab_attention(&p) != AB_STATUS_OK);
  CHECK(strncmp(ab_last_error()->arg, "rope", 4) == 0);
  rp.rotary_dim = 0;
  p.rope_seq_len = -1;
  CHECK_FAILS(ab_attention(&p), AB_STATUS_INVALID_ARG, "rope_seq_len");
  p.rope_seq_len = 0;
  CHECK_OK(ab_attention(&p));
  p.rope = NULL;

  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  bp.max_bias = -1; /* invalid: named under bias. */
  p.bias = &bp;
  CHECK(ab_attention(&p) != AB_STATUS_OK);
  CHECK(strncmp(ab_last_error()->arg, "bias", 4) == 0);
  bp.max_bias = 8;
  CHECK_OK(ab_attention(&p));
  return 0;
}

/* Allocation failure at every step of job creation: a clean NO_MEMORY. */
TEST(attn_allocation_failures_are_clean)
{
  enum { N = 20, D = 8 };
  float q[2 * N * D], k[N * D], v[N * D], out[2 * N * D], w[2 * N * N];
  uint16_t kh[N * D];
  const int64_t qs[3] = {2, N, D}, ks[3] = {1, N, D};
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct ab_bias_params bp;
  int64_t i, fail;
  int st = 1;

  for (i = 0; i < 2 * N * D; i++)
    q[i] = (float)test_uniform(-1, 1);
  for (i = 0; i < N * D; i++) {
    k[i] = (float)test_uniform(-1, 1), v[i] = (float)test_uniform(-1, 1);
    kh[i] = ab_f32_to_f16(k[i]);
  }
  CHECK_OK(ab_tensor_init(&tq, q, AB_DTYPE_F32, 3, qs));
  CHECK_OK(ab_tensor_init(&tk, kh, AB_DTYPE_F16, 3, ks)); /* forces a copy */
  CHECK_OK(ab_tensor_init(&tv, v, AB_DTYPE_F32, 3, ks));
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out, p.weights = w;
  p.bias = &bp;
  p.causal = 1;
  for (fail = 0; fail < 100; fail++) {
    /* allocation `fail` and every later one fail */
    test_alloc_install(fail, 1);
    st = ab_attention(&p);
    if (st == AB_STATUS_OK)
      break;
    if (st != AB_STATUS_NO_MEMORY) {
      test_alloc_remove();
      FAIL_AT("allocation %lld failing gave status %d (%s: %s)",
              (long long)fail, st, ab_last_error()->arg, ab_last_error()->msg);
    }
  }
  test_alloc_remove();
  CHECK_EQ_I64(st, AB_STATUS_OK);
  CHECK(test_alloc.calls >= 3);
  return 0;
}

/* Bytes allocated by ab_attention_job grow linearly with N: at N = 8192
 * (H = 8, d = 64) at most 8x those at N = 1024 plus a small constant, and
 * nowhere near one Nq x Nk float matrix per head. */
static size_t job_bytes(int64_t N, int dtype, int64_t *pieces)
{
  const int64_t sh[4] = {1, 8, N, 64};
  size_t esz = ab_dtype_size((enum ab_dtype)dtype);
  void *q = calloc((size_t)(8 * N * 64), esz);
  void *k = calloc((size_t)(8 * N * 64), esz);
  void *v = calloc((size_t)(8 * N * 64), esz);
  float *out = malloc(sizeof(float) * 8 * (size_t)N * 64);
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct ab_bias_params bp;
  ab_job_t *job = NULL;
  size_t bytes = 0;

  ab_tensor_init(&tq, q, (enum ab_dtype)dtype, 4, sh);
  ab_tensor_init(&tk, k, (enum ab_dtype)dtype, 4, sh);
  ab_tensor_init(&tv, v, (enum ab_dtype)dtype, 4, sh);
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_ALIBI;
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out;
  p.causal = 1;
  p.bias = &bp;
  test_alloc_install(-1, 0);
  if (ab_attention_job(&p, &job) == AB_STATUS_OK) {
    bytes = test_alloc.bytes;
    *pieces = ab_job_pieces(job);
    /* One piece (the costliest) runs, not the whole job. */
    if (ab_job_run(job, 0, NULL) != AB_STATUS_OK)
      bytes = 0;
  }
  ab_job_free(job);
  test_alloc_remove();
  free(q), free(k), free(v), free(out);
  return bytes;
}

TEST(attn_job_memory_linear_in_n)
{
  static const int dts[2] = {AB_DTYPE_F32, AB_DTYPE_F16};
  int i;

  for (i = 0; i < 2; i++) {
    int64_t p1 = 0, p8 = 0;
    size_t small = job_bytes(1024, dts[i], &p1);
    size_t big = job_bytes(8192, dts[i], &p8);
    double nxn = 4.0 * 8192 * 8192; /* one head's score matrix */
    fprintf(stderr, "  %s: N=1024 %zu bytes, N=8192 %zu bytes\n",
            ab_dtype_name((enum ab_dtype)dts[i]), small, big);
    CHECK(small > 0 && big > 0);
    /* 8x the query blocks, in pieces of one or more of them */
    CHECK(p8 >= p1 && p8 <= 8 * p1);
    CHECK((double)big <= 8.0 * (double)small + 65536.0);
    CHECK((double)big < nxn / 4.0);
  }
  return 0;
}
