/* test-bias.c: the bias families (none, ALiBi, T5, FIRE, Kerple) against
 * docs/methods.md worked examples 3, 4, 5 and 11 and against float64 (T5:
 * float32, as Hugging Face computes it) references written here; the
 * resolved row form attention uses; jobs; the table-writer kernels of
 * every ISA this CPU runs against the reference. */
#include "attnbias.h"
#include "bias/family.h"
#include "kernels/kernels.h"
#include "test-util.h"
#include "test.h"

#define RTOL 1e-5
#define ATOL 1e-6

/* ======================================================================
 * Independent references
 * ====================================================================== */

/* Mask predicate written from docs/methods.md#masks (not ab__visible_keys). */
static int ref_visible(int64_t pq, int64_t j, int causal, int64_t wl,
                       int64_t wr)
{
  int ok = 1;
  if (causal)
    ok = ok && j <= pq;
  if (wl != -1)
    ok = ok && pq - wl <= j;
  if (wr != -1)
    ok = ok && j <= pq + wr;
  return ok;
}

/* ofirpress/attention_with_linear_biases get_slopes, recursively. */
static void ofir_slopes(int n, double *out)
{
  double lg = log2((double)n);
  int i;

  if (lg == floor(lg)) {
    double start = pow(2.0, -pow(2.0, -(lg - 3.0)));
    for (i = 0; i < n; i++)
      out[i] = start * pow(start, i);
  } else {
    int p = 1 << (int)floor(lg);
    double *twice = malloc(sizeof(double) * 2 * (size_t)p);
    ofir_slopes(p, out);
    ofir_slopes(2 * p, twice);
    for (i = 0; i < n - p; i++)
      out[p + i] = twice[2 * i]; /* [0::2][:n-p] */
    free(twice);
  }
}

/* HF _relative_position_bucket in float32, written from modeling_t5.py:
 * both branches computed, torch.where picks (log(0) = -inf discarded). */
static int64_t hf_bucket(int64_t rel, int64_t nb, int bidir, int64_t md)
{
  int64_t ret = 0, n, me, large;
  int small;
  float lg, v;

  if (bidir) {
    nb /= 2;
    ret += rel > 0 ? nb : 0;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  me = nb / 2;
  small = n < me;
  lg = logf((float)n / (float)me);
  v = lg / (float)log((double)md / (double)me) * (float)(nb - me);
  large = small ? 0 : me + (int64_t)v;
  if (large > nb - 1)
    large = nb - 1;
  return ret + (small ? n : large);
}

/* FIRE in float64 from the README definition. */
struct fire_def {
  int n_layers;
  int dims[4];
  const double *W[3], *b[3];
  double c, L, eps;
};

static void ref_fire_mlp(const struct fire_def *f, double x, double *out)
{
  double a[64], nx[64];
  int l, o, i;

  a[0] = x;
  for (l = 0; l < f->n_layers; l++) {
    for (o = 0; o < f->dims[l + 1]; o++) {
      double s = f->b[l] ? f->b[l][o] : 0.0;
      for (i = 0; i < f->dims[l]; i++)
        s += f->W[l][o * f->dims[l] + i] * a[i];
      nx[o] = (l < f->n_layers - 1 && s < 0) ? 0 : s;
    }
    memcpy(a, nx, sizeof(double) * (size_t)f->dims[l + 1]);
  }
  memcpy(out, a, sizeof(double) * (size_t)f->dims[f->n_layers]);
}

static double ref_fire(const struct fire_def *f, int64_t h, int64_t pq,
                       int64_t j)
{
  double out[64], x = 0.0;
  const int64_t t = pq - j > 0 ? pq - j : 0;
  const double m = (double)pq > f->L ? (double)pq : f->L;

  if (t > 0)
    x = log(f->c * (double)t + 1.0) / (log(f->c * m + 1.0) + f->eps);
  ref_fire_mlp(f, x, out);
  return f->dims[f->n_layers] == 1 ? out[0] : out[h];
}

/* Tensor views over a fire_def's float64 arrays (storage in *store). */
struct fire_store {
  struct ab_tensor w[3], b[3];
  struct ab_fire_layer layers[3];
};

static void fire_params(const struct fire_def *f, struct fire_store *s,
                        struct ab_bias_params *p, int64_t H)
{
  int l;

  ab_bias_params_init(p);
  p->method = AB_BIAS_FIRE;
  p->num_heads = H;
  p->c = f->c;
  p->L = f->L;
  p->eps = f->eps;
  p->n_layers = f->n_layers;
  for (l = 0; l < f->n_layers; l++) {
    int64_t ws[2] = {f->dims[l + 1], f->dims[l]}, bs[1] = {f->dims[l + 1]};
    ab_tensor_init(&s->w[l], (void *)f->W[l], AB_DTYPE_F64, 2, ws);
    ab_tensor_init(&s->b[l], (void *)f->b[l], AB_DTYPE_F64, 1, bs);
    s->layers[l].weight = &s->w[l];
    s->layers[l].bias = f->b[l] ? &s->b[l] : NULL;
  }
  p->layers = s->layers;
}

/* docs/methods.md#example-5-fire */
static const double fire_W1[3] = {1.0, -0.5, 2.0}, fire_b1[3] = {0, 0.5, -0.2};
static const double fire_W2[6] = {0.3, -0.7, 0.1, -0.2, 0.4, 0.5};
static const double fire_b2[2] = {0.05, -0.1};
static const double fire_W2b[3] = {0.3, -0.7, 0.1}, fire_b2b[1] = {0.05};

/* FIRE with an MLP 1 -> hidden -> out (eps 0). */
static struct fire_def fire_two_layers(int hidden, int out, const double *W1,
                                       const double *b1, const double *W2,
                                       const double *b2, double c, double L)
{
  struct fire_def f;
  memset(&f, 0, sizeof f);
  f.n_layers = 2;
  f.dims[0] = 1;
  f.dims[1] = hidden;
  f.dims[2] = out;
  f.W[0] = W1;
  f.b[0] = b1;
  f.W[1] = W2;
  f.b[1] = b2;
  f.c = c;
  f.L = L;
  return f;
}

static struct fire_def fire_worked(void)
{
  return fire_two_layers(3, 2, fire_W1, fire_b1, fire_W2, fire_b2, 0.1, 4);
}

/* A reference table of any family: value(h, pq, j) or -inf when masked. */
typedef double (*ref_fn)(const void *ctx, int64_t h, int64_t pq, int64_t j);

static double *ref_table(const struct ab_geometry *g, int64_t H, ref_fn fn,
                         const void *ctx)
{
  double *t = malloc(sizeof(double) * (size_t)(H * g->q_len * g->k_len));
  int64_t h, r, j;

  for (h = 0; h < H; h++)
    for (r = 0; r < g->q_len; r++)
      for (j = 0; j < g->k_len; j++) {
        const int64_t pq = g->q_offset + r;
        t[(h * g->q_len + r) * g->k_len + j] =
            ref_visible(pq, j, g->causal, g->window_left, g->window_right)
                ? fn(ctx, h, pq, j)
                : -INFINITY;
      }
  return t;
}

static double alibi_fn(const void *ctx, int64_t h, int64_t pq, int64_t j)
{
  const float *m = ctx;
  return -(double)m[h] * fabs((double)(pq - j));
}

struct t5_ref {
  const double *table; /* [nb, H] */
  int64_t nb, H, md;
  int bidir;
};
static double t5_fn(const void *ctx, int64_t h, int64_t pq, int64_t j)
{
  const struct t5_ref *t = ctx;
  return t->table[hf_bucket(j - pq, t->nb, t->bidir, t->md) * t->H + h];
}

static double fire_fn(const void *ctx, int64_t h, int64_t pq, int64_t j)
{
  return ref_fire(ctx, h, pq, j);
}

/* Kerple in float64 (float32 parameters are passed widened). */
struct kerple_ref {
  const double *r1, *r2;
  int power;
};
static double kerple_fn(const void *ctx, int64_t h, int64_t pq, int64_t j)
{
  const struct kerple_ref *k = ctx;
  const double d = fabs((double)(pq - j));
  return k->power ? -k->r1[h] * pow(d, k->r2[h])
                  : -k->r1[h] * log(1.0 + k->r2[h] * d);
}

static double zero_fn(const void *ctx, int64_t h, int64_t pq, int64_t j)
{
  (void)ctx;
  (void)h;
  (void)pq;
  (void)j;
  return 0.0;
}

/* Build a table with the library and compare it with a reference. */
static int table_vs_ref(const struct ab_bias_params *p,
                        const struct ab_geometry *g, ref_fn fn,
                        const void *ctx, double rtol, double atol)
{
  const int64_t n = p->num_heads * g->q_len * g->k_len;
  float *got = malloc(sizeof(float) * (size_t)n);
  double *want = ref_table(g, p->num_heads, fn, ctx);
  int ok;

  if (ab_bias_table(p, g, got, NULL) != AB_STATUS_OK) {
    fprintf(stderr, "  ab_bias_table: %s: %s\n", ab_last_error()->arg,
            ab_last_error()->msg);
    free(got);
    free(want);
    return 1;
  }
  ok = test_array_close(__FILE__, __LINE__, "table", got, want, n, rtol,
                        atol);
  free(got);
  free(want);
  return ok ? 0 : 1;
}

/* ======================================================================
 * Names, defaults, geometry
 * ====================================================================== */

TEST(bias_method_names)
{
  int m;
  for (m = 0; m < AB_BIAS_METHOD_LAST_; m++)
    CHECK_EQ_I64(ab_bias_method_parse(
                     ab_bias_method_name((enum ab_bias_method)m)),
                 m);
  CHECK_EQ_I64(ab_bias_method_parse("t5"), AB_BIAS_T5);
  CHECK_EQ_I64(ab_bias_method_parse("kerple"), AB_BIAS_KERPLE);
  CHECK_EQ_I64(ab_bias_method_parse("rope"), -1);
  CHECK_EQ_I64(ab_bias_method_parse(NULL), -1);
  CHECK_STR(ab_bias_method_name((enum ab_bias_method)42), "unknown");
  return 0;
}

TEST(bias_defaults_and_geometry)
{
  struct ab_bias_params p;
  struct ab_geometry g;

  ab_bias_params_init(&p);
  CHECK_EQ_I64(p.method, AB_BIAS_NONE);
  CHECK(p.max_bias == 8.0);
  CHECK_EQ_I64(p.bidirectional, 1);
  CHECK_EQ_I64(p.max_distance, 128);
  CHECK(p.eps == 0.0);
  CHECK(p.slopes == NULL && p.table == NULL && p.layers == NULL);
  ab_geometry_init(&g, 3, 7);
  CHECK_EQ_I64(g.q_offset, 4); /* bottom-right */
  CHECK_EQ_I64(g.causal, 0);
  CHECK_EQ_I64(g.window_left, -1);
  CHECK_EQ_I64(g.window_right, -1);
  return 0;
}

/* ======================================================================
 * ALiBi
 * ====================================================================== */

TEST(alibi_slopes_worked_4)
{
  static const double w1[1] = {0.00390625}, w2[2] = {0.0625, 0.00390625},
                      w3[3] = {0.0625, 0.00390625, 0.25},
                      w5[5] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5},
                      w6[6] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125},
                      w12[12] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625,
                                 0.0078125, 0.00390625, 0.7071068, 0.3535534,
                                 0.1767767, 0.08838835},
                      w16[16] = {0.7071068, 0.5, 0.3535534, 0.25, 0.1767767,
                                 0.125, 0.08838835, 0.0625, 0.04419417,
                                 0.03125, 0.02209709, 0.015625, 0.01104854,
                                 0.0078125, 0.005524272, 0.00390625},
                      w6_16[6] = {0.0625, 0.00390625, 0.0002441406,
                                  1.525879e-05, 0.25, 0.015625},
                      w6_4[6] = {0.5, 0.25, 0.125, 0.0625, 0.7071068,
                                 0.3535534};
  float s[16];

  CHECK_OK(ab_alibi_slopes(1, 8, s));
  CHECK_ARRAY(s, w1, 1, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(2, 8, s));
  CHECK_ARRAY(s, w2, 2, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(3, 8, s));
  CHECK_ARRAY(s, w3, 3, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(5, 8, s));
  CHECK_ARRAY(s, w5, 5, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(6, 8, s));
  CHECK_ARRAY(s, w6, 6, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(12, 8, s));
  CHECK_ARRAY(s, w12, 12, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(16, 8, s));
  CHECK_ARRAY(s, w16, 16, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(6, 16, s));
  CHECK_ARRAY(s, w6_16, 6, 1e-6, 0);
  CHECK_OK(ab_alibi_slopes(6, 4, s));
  CHECK_ARRAY(s, w6_4, 6, 1e-6, 0);
  return 0;
}

/* max_bias 8 equals the paper's get_slopes for every head count. */
TEST(alibi_slopes_match_ofirpress_1_to_40)
{
  double want[64];
  float s[64];
  int n;

  for (n = 1; n <= 40; n++) {
    ofir_slopes(n, want);
    CHECK_OK(ab_alibi_slopes(n, 8.0, s));
    CHECK_ARRAY(s, want, n, 2e-7, 0);
  }
  return 0;
}

/* Other max_bias values: ggml's m0^(h+1), m1^(2(h-p)+1), written with pow
 * of the bases (the library forms the exponents directly). */
TEST(alibi_slopes_ggml_max_bias)
{
  const double mbs[4] = {0.0, 4.0, 16.0, 2.5};
  double want[64];
  float s[64];
  int n, i, h;

  for (i = 0; i < 4; i++)
    for (n = 1; n <= 40; n++) {
      int p = 1;
      while (2 * p <= n)
        p *= 2;
      {
        const double m0 = pow(2.0, -mbs[i] / p), m1 = pow(2.0, -mbs[i] / 2 / p);
        for (h = 0; h < n; h++)
          want[h] = h < p ? pow(m0, h + 1) : pow(m1, 2 * (h - p) + 1);
      }
      CHECK_OK(ab_alibi_slopes(n, mbs[i], s));
      CHECK_ARRAY(s, want, n, 1e-6, 0);
    }
  return 0;
}

TEST(alibi_slopes_errors)
{
  float s[4];
  CHECK_EQ_I64(ab_alibi_slopes(0, 8, s), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "num_heads");
  CHECK_EQ_I64(ab_alibi_slopes(4, -1, s), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "max_bias");
  CHECK(strstr(ab_last_error()->msg, "-1") != NULL);
  CHECK_EQ_I64(ab_alibi_slopes(4, NAN, s), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "max_bias");
  CHECK_EQ_I64(ab_alibi_slopes(4, 8, NULL), AB_STATUS_INVALID_ARG);
  return 0;
}

TEST(alibi_tables_worked_4)
{
  static const double sym_h0[16] = {-0.0,  -0.25, -0.5,  -0.75, -0.25, -0.0,
                                    -0.25, -0.5,  -0.5,  -0.25, -0.0,  -0.25,
                                    -0.75, -0.5,  -0.25, -0.0};
  static const double causal_h3[16] = {
      -0.0,       -INFINITY,   -INFINITY,  -INFINITY,
      -0.00390625, -0.0,       -INFINITY,  -INFINITY,
      -0.0078125, -0.00390625, -0.0,       -INFINITY,
      -0.01171875, -0.0078125, -0.00390625, -0.0};
  struct ab_bias_params p;
  struct ab_geometry g;
  float t[4 * 16];

  ab_bias_params_init(&p);
  p.method = AB_BIAS_ALIBI;
  p.num_heads = 4;
  ab_geometry_init(&g, 4, 4);
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  CHECK_ARRAY(t, sym_h0, 16, RTOL, ATOL);
  g.causal = 1;
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  CHECK_ARRAY(t + 3 * 16, causal_h3, 16, RTOL, ATOL);
  return 0;
}

/* q_len != k_len: bottom-right by default, explicit offsets (top-left 0,
 * beyond the keys), causal or not, explicit slopes. */
TEST(alibi_tables_offsets_vs_reference)
{
  const int64_t offs[4] = {-1000, 0, 9, 123456789012LL}; /* -1000: default */
  const float explicit_slopes[3] = {0.5f, -0.125f, 3.0f};
  struct ab_bias_params p;
  struct ab_geometry g;
  float slopes[3];
  int i, causal, ex;

  for (ex = 0; ex < 2; ex++)
    for (i = 0; i < 4; i++)
      for (causal = 0; causal < 2; causal++) {
        ab_bias_params_init(&p);
        p.method = AB_BIAS_ALIBI;
        p.num_heads = 3;
        p.max_bias = 5.0;
        if (ex)
          p.slopes = explicit_slopes;
        ab_geometry_init(&g, 3, 7);
        if (offs[i] != -1000)
          g.q_offset = offs[i];
        g.causal = causal;
        if (ex)
          memcpy(slopes, explicit_slopes, sizeof slopes);
        else
          CHECK_OK(ab_alibi_slopes(3, 5.0, slopes));
        if (table_vs_ref(&p, &g, alibi_fn, slopes, RTOL, ATOL))
          FAIL_AT("explicit=%d q_offset=%lld causal=%d", ex,
                  (long long)g.q_offset, causal);
      }
  return 0;
}

static double alibi64_fn(const void *ctx, int64_t h, int64_t pq, int64_t j)
{
  const double *m = ctx;
  return -m[h] * fabs((double)(pq - j));
}

/* Double slopes: the table is a float32 product, so each slope is rounded
 * once and the result is within two float32 roundings of the float64
 * value; both forms at once, or one beyond float32, are refused. */
TEST(alibi_slopes_f64)
{
  const double m[3] = {0.3, 1.0 / 3.0, 0x1p-8 + 0x1p-40};
  const float mf[3] = {0.3f, 0.25f, 1.0f};
  double huge[3] = {0.5, 1e39, 0.5};
  struct ab_bias_params p;
  struct ab_geometry g;
  float t[3 * 3 * 7];

  ab_bias_params_init(&p);
  p.method = AB_BIAS_ALIBI;
  p.num_heads = 3;
  p.slopes_f64 = m;
  ab_geometry_init(&g, 3, 7);
  CHECK(!table_vs_ref(&p, &g, alibi64_fn, m, 2.5e-7, 0));
  g.q_offset = 123456789012LL;
  CHECK(!table_vs_ref(&p, &g, alibi64_fn, m, 2.5e-7, 0));
  p.slopes = mf;
  CHECK_FAILS(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG,
              "slopes");
  p.slopes = NULL;
  p.slopes_f64 = huge;
  CHECK_FAILS(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG,
              "slopes.1");
  return 0;
}

/* ======================================================================
 * T5
 * ====================================================================== */

TEST(t5_buckets_worked_3)
{
  static const int64_t rel[25] = {-200, -128, -127, -64, -32, -20, -16,
                                  -9,   -8,   -7,   -1,  0,   1,   2,
                                  7,    8,    9,    15,  16,  20,  32,
                                  64,   127,  128,  200};
  static const int bi[25] = {15, 15, 15, 14, 12, 10, 10, 8,  8,  7,  1,  0, 17,
                             18, 23, 24, 24, 25, 26, 26, 28, 30, 31, 31, 31};
  static const int ca[25] = {31, 31, 31, 26, 21, 17, 16, 9, 8, 7, 1, 0, 0,
                             0,  0,  0,  0,  0,  0,  0,  0, 0, 0, 0, 0};
  int i;

  for (i = 0; i < 25; i++) {
    if (ab_t5_bucket(rel[i], 32, 1, 128) != bi[i])
      FAIL_AT("bidirectional rel %lld: %d vs %d", (long long)rel[i],
              ab_t5_bucket(rel[i], 32, 1, 128), bi[i]);
    if (ab_t5_bucket(rel[i], 32, 0, 128) != ca[i])
      FAIL_AT("causal rel %lld: %d vs %d", (long long)rel[i],
              ab_t5_bucket(rel[i], 32, 0, 128), ca[i]);
  }
  CHECK_EQ_I64(ab_t5_bucket(-1000, 32, 1, 128), 15);
  CHECK_EQ_I64(ab_t5_bucket(1000, 32, 1, 128), 31);
  CHECK_EQ_I64(ab_t5_bucket(-1000, 32, 0, 128), 31);
  CHECK_EQ_I64(ab_t5_bucket(1000, 32, 0, 128), 0);
  return 0;
}

/* Where each bucket begins, against a scan of HF's bucket function over
 * every distance (the first distance of each bucket, -1 for skipped ones). */
TEST(t5_bucket_starts_match_a_scan)
{
  static const int64_t cases[][3] = {{32, 1, 128}, {32, 0, 128}, {8, 1, 16},
                                     {20, 1, 160}, {10, 0, 160}, {32, 1, 9},
                                     {64, 0, 1000}, {4, 1, 3}};
  int64_t first[64], want[64];
  size_t c;

  for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t nb = cases[c][0], md = cases[c][2], n, b;
    int bi = (int)cases[c][1];
    int64_t nbd = bi ? nb / 2 : nb;
    for (b = 0; b < nbd; b++)
      want[b] = -1;
    for (n = 0; n <= 4 * md; n++) {
      int64_t bk = hf_bucket(-n, nb, bi, md);
      if (want[bk] < 0)
        want[bk] = n;
    }
    CHECK_OK(ab_t5_bucket_starts(nb, bi, md, first));
    for (b = 0; b < nbd; b++)
      if (first[b] != want[b])
        FAIL_AT("nb %lld bidirectional %d md %lld: bucket %lld starts at "
                "%lld, the scan says %lld",
                (long long)nb, bi, (long long)md, (long long)b,
                (long long)first[b], (long long)want[b]);
  }
  /* T5's defaults: 8 exact buckets, then log buckets; the last begins
   * where ln(n/8)/ln(16)*8 reaches 7, at n = 8*16^(7/8) = 90.5, so 91. */
  CHECK_OK(ab_t5_bucket_starts(32, 1, 128, first));
  CHECK_EQ_I64(first[7], 7);
  CHECK_EQ_I64(first[8], 8);
  CHECK_EQ_I64(first[15], 91);
  CHECK(hf_bucket(-91, 32, 1, 128) == 15 && hf_bucket(-90, 32, 1, 128) == 14);
  /* md 9 with 16 buckets a side: the log step jumps from 8 to the top. */
  CHECK_OK(ab_t5_bucket_starts(32, 1, 9, first));
  CHECK(first[8] == 8 && first[9] == -1 && first[14] == -1 && first[15] == 9);
  CHECK_FAILS(ab_t5_bucket_starts(2, 1, 128, first), AB_STATUS_INVALID_ARG,
              "table");
  CHECK_FAILS(ab_t5_bucket_starts(32, 1, 128, NULL), AB_STATUS_INVALID_ARG,
              "first");
  return 0;
}

/* Edges of docs/methods.md#t5-buckets: 0, +-(max_exact-1), +-max_exact,
 * +-max_distance and beyond, for both directions. */
TEST(t5_bucket_edges)
{
  /* bidirectional nb 32: max_exact 8, 16 buckets per direction */
  CHECK_EQ_I64(ab_t5_bucket(0, 32, 1, 128), 0);
  CHECK_EQ_I64(ab_t5_bucket(7, 32, 1, 128), 16 + 7);
  CHECK_EQ_I64(ab_t5_bucket(-7, 32, 1, 128), 7);
  CHECK_EQ_I64(ab_t5_bucket(8, 32, 1, 128), 16 + 8);  /* first log bucket */
  CHECK_EQ_I64(ab_t5_bucket(-8, 32, 1, 128), 8);
  CHECK_EQ_I64(ab_t5_bucket(128, 32, 1, 128), 31);    /* top */
  CHECK_EQ_I64(ab_t5_bucket(-128, 32, 1, 128), 15);
  CHECK_EQ_I64(ab_t5_bucket(127, 32, 1, 128), 31);
  /* causal nb 32: max_exact 16 */
  CHECK_EQ_I64(ab_t5_bucket(-15, 32, 0, 128), 15);
  CHECK_EQ_I64(ab_t5_bucket(-16, 32, 0, 128), 16);
  CHECK_EQ_I64(ab_t5_bucket(-128, 32, 0, 128), 31);
  CHECK_EQ_I64(ab_t5_bucket(15, 32, 0, 128), 0);
  /* positions beyond int32 */
  CHECK_EQ_I64(ab_t5_bucket(-(1LL << 40), 32, 1, 128), 15);
  CHECK_EQ_I64(ab_t5_bucket(1LL << 40, 32, 1, 128), 31);
  CHECK_EQ_I64(ab_t5_bucket(-(1LL << 40), 32, 0, 128), 31);
  /* the float32 subtlety: log(8)/log(16)*8 is 6 exactly in float32, so
   * rel -64 is bucket 8 + 6 = 14 (a double rounding could give 13) */
  CHECK_EQ_I64(ab_t5_bucket(-64, 32, 1, 128), 14);
  /* nb 20 bidirectional, md 160: max_exact 5, and for n = 10, 20, 80 the
   * exact value of ln(n/5)/ln(32)*5 is the integer 1, 2, 4.  float32
   * lands on it (buckets 6, 7, 9 as in HF); double rounds just below and
   * truncates to 5, 6, 8. */
  CHECK_EQ_I64(ab_t5_bucket(-10, 20, 1, 160), 6);
  CHECK_EQ_I64(ab_t5_bucket(10, 20, 1, 160), 10 + 6);
  CHECK_EQ_I64(ab_t5_bucket(-20, 20, 1, 160), 7);
  CHECK_EQ_I64(ab_t5_bucket(-80, 20, 1, 160), 9);
  CHECK_EQ_I64(ab_t5_bucket(-10, 10, 0, 160), 6);
  return 0;
}

/* The library against the float32 HF formula written above over a range
 * of rel, for several bucket counts and distances (odd counts included). */
TEST(t5_bucket_bruteforce_float32)
{
  static const int64_t cfg[][2] = {{32, 128}, {8, 16},  {33, 128}, {9, 20},
                                   {64, 512}, {4, 3},   {2, 2},    {100, 51},
                                   {32, 17},  {6, 1000}, {1000, 1001}, {20, 160},
                                   {10, 160}};
  int i, bidir;
  int64_t rel;

  for (i = 0; i < (int)(sizeof cfg / sizeof cfg[0]); i++)
    for (bidir = 0; bidir < 2; bidir++) {
      const int64_t nb = cfg[i][0], md = cfg[i][1];
      if (ab_t5_check(nb, bidir, md) != AB_STATUS_OK)
        continue; /* e.g. bidirectional nb 2 */
      for (rel = -5000; rel <= 5000; rel++)
        if (ab_t5_bucket(rel, nb, bidir, md) !=
            hf_bucket(rel, nb, bidir, md))
          FAIL_AT("nb %lld md %lld bidir %d rel %lld: %d vs %lld",
                  (long long)nb, (long long)md, bidir, (long long)rel,
                  ab_t5_bucket(rel, nb, bidir, md),
                  (long long)hf_bucket(rel, nb, bidir, md));
      for (rel = 5000; rel < (1LL << 50); rel = rel * 3 + 1) {
        CHECK_EQ_I64(ab_t5_bucket(rel, nb, bidir, md),
                     hf_bucket(rel, nb, bidir, md));
        CHECK_EQ_I64(ab_t5_bucket(-rel, nb, bidir, md),
                     hf_bucket(-rel, nb, bidir, md));
      }
    }
  return 0;
}

/* Odd bucket counts: HF floors the half, so bidirectional 33 buckets give
 * the 32-bucket answer and bucket 32 is never used. */
TEST(t5_odd_num_buckets)
{
  int64_t rel;
  for (rel = -400; rel <= 400; rel++) {
    CHECK_EQ_I64(ab_t5_bucket(rel, 33, 1, 128), ab_t5_bucket(rel, 32, 1, 128));
    CHECK(ab_t5_bucket(rel, 33, 1, 128) < 32);
    CHECK(ab_t5_bucket(rel, 9, 0, 20) < 9);
  }
  CHECK_EQ_I64(ab_t5_bucket(-1000, 9, 0, 20), 8);
  return 0;
}

TEST(t5_check_errors)
{
  CHECK_OK(ab_t5_check(32, 1, 128));
  CHECK_OK(ab_t5_check(32, 1, 9));
  /* max_exact is 8: a max distance of 8 leaves log(1) = 0 */
  CHECK_EQ_I64(ab_t5_check(32, 1, 8), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "relative_attention_max_distance");
  CHECK(strstr(ab_last_error()->msg, "8") != NULL);
  CHECK_EQ_I64(ab_t5_check(32, 0, 16), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "relative_attention_max_distance");
  CHECK_EQ_I64(ab_t5_check(3, 1, 128), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "table");
  CHECK_EQ_I64(ab_t5_check(0, 0, 128), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "table");
  /* outside the contract the bucket function refuses */
  CHECK_EQ_I64(ab_t5_bucket(5, 32, 1, 8), -1);
  CHECK_EQ_I64(ab_t5_bucket(5, 3, 1, 128), -1);
  return 0;
}

TEST(t5_bucket_matrices_and_bias_row_worked_3)
{
  static const int bi[36] = {0, 5, 6, 6, 6, 6, 1, 0, 5, 6, 6, 6,
                             2, 1, 0, 5, 6, 6, 2, 2, 1, 0, 5, 6,
                             2, 2, 2, 1, 0, 5, 2, 2, 2, 2, 1, 0};
  static const int ca[36] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
                             2, 1, 0, 0, 0, 0, 3, 2, 1, 0, 0, 0,
                             4, 3, 2, 1, 0, 0, 4, 4, 3, 2, 1, 0};
  static const double row_h1_i5[6] = {-0.8, -0.8, -0.8, -0.8, -0.9, -1};
  float table[8 * 2], bias[2 * 36];
  int32_t buckets[36];
  const int64_t shape[2] = {8, 2};
  struct ab_tensor tb;
  struct ab_bias_params p;
  struct ab_geometry g;
  int b, h, i;

  for (b = 0; b < 8; b++)
    for (h = 0; h < 2; h++)
      table[b * 2 + h] = (float)(0.1 * b - h);
  CHECK_OK(ab_tensor_init(&tb, table, AB_DTYPE_F32, 2, shape));
  ab_bias_params_init(&p);
  p.method = AB_BIAS_T5;
  p.num_heads = 2;
  p.table = &tb;
  p.max_distance = 16;
  ab_geometry_init(&g, 6, 6);
  CHECK_OK(ab_bias_table(&p, &g, bias, buckets));
  for (i = 0; i < 36; i++)
    CHECK_EQ_I64(buckets[i], bi[i]);
  CHECK_ARRAY(bias + 36 + 5 * 6, row_h1_i5, 6, RTOL, ATOL);
  /* buckets alone */
  memset(buckets, 0xff, sizeof buckets);
  p.bidirectional = 0;
  CHECK_OK(ab_bias_table(&p, &g, NULL, buckets));
  for (i = 0; i < 36; i++)
    CHECK_EQ_I64(buckets[i], ca[i]);
  /* causal masking leaves buckets alone but masks the bias */
  g.causal = 1;
  CHECK_OK(ab_bias_table(&p, &g, bias, buckets));
  for (i = 0; i < 36; i++)
    CHECK_EQ_I64(buckets[i], ca[i]);
  CHECK(bias[0 * 6 + 1] == -INFINITY);
  CHECK_CLOSE(bias[36 + 5 * 6 + 1], 0.1 * 4 - 1, RTOL, ATOL);
  return 0;
}

/* A random float64 table seen through strides, distances past
 * max_distance, q_len != k_len, both directions, causal or not. */
TEST(t5_tables_vs_reference)
{
  const int64_t nb = 32, H = 3;
  double store[3 * 32]; /* storage [H][nb]; the view is [nb, H] */
  struct ab_tensor tb;
  struct t5_ref ref;
  struct ab_bias_params p;
  struct ab_geometry g;
  double table[32 * 3];
  int64_t b, h;
  int bidir, causal;

  test_seed(5);
  for (h = 0; h < H; h++)
    for (b = 0; b < nb; b++) {
      store[h * nb + b] = test_uniform(-2, 2);
      table[b * H + h] = (double)(float)store[h * nb + b];
    }
  memset(&tb, 0, sizeof tb);
  tb.data = store;
  tb.dtype = AB_DTYPE_F64;
  tb.ndim = 2;
  tb.shape[0] = nb;
  tb.shape[1] = H;
  tb.stride[0] = 1;
  tb.stride[1] = nb;
  ref.table = table;
  ref.nb = nb;
  ref.H = H;
  ref.md = 100;
  for (bidir = 0; bidir < 2; bidir++)
    for (causal = 0; causal < 2; causal++) {
      ab_bias_params_init(&p);
      p.method = AB_BIAS_T5;
      p.num_heads = H;
      p.table = &tb;
      p.max_distance = 100;
      p.bidirectional = bidir;
      ref.bidir = bidir;
      ab_geometry_init(&g, 5, 300);
      g.causal = causal;
      if (table_vs_ref(&p, &g, t5_fn, &ref, 0, 0))
        FAIL_AT("bidir %d causal %d", bidir, causal);
      g.q_offset = -3; /* keys all after the first queries */
      if (table_vs_ref(&p, &g, t5_fn, &ref, 0, 0))
        FAIL_AT("bidir %d causal %d q_offset -3", bidir, causal);
    }
  return 0;
}

TEST(t5_table_errors)
{
  float table[32 * 2] = {0}, out[64];
  int32_t bk[16];
  const int64_t shape[2] = {32, 2}, shape3[2] = {32, 3};
  struct ab_tensor tb;
  struct ab_bias_params p;
  struct ab_geometry g;

  ab_geometry_init(&g, 4, 4);
  ab_bias_params_init(&p);
  p.method = AB_BIAS_T5;
  p.num_heads = 2;
  CHECK_EQ_I64(ab_bias_table(&p, &g, out, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "table");
  CHECK_OK(ab_tensor_init(&tb, table, AB_DTYPE_F32, 2, shape3));
  p.table = &tb;
  CHECK_EQ_I64(ab_bias_table(&p, &g, out, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "table");
  CHECK_OK(ab_tensor_init(&tb, table, AB_DTYPE_F32, 2, shape));
  p.max_distance = 4;
  CHECK_EQ_I64(ab_bias_table(&p, &g, out, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "relative_attention_max_distance");
  p.max_distance = 128;
  CHECK_OK(ab_bias_table(&p, &g, out, bk));
  p.method = AB_BIAS_ALIBI;
  CHECK_EQ_I64(ab_bias_table(&p, &g, out, bk), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "return");
  return 0;
}

/* Buckets alone need no table: the bucket count is num_buckets (HF's
 * default 32 is the caller's to pass).  Against HF's function, and equal
 * to what the same count gives with a table. */
TEST(t5_buckets_without_a_table)
{
  static const int64_t offs[3] = {-1000, 0, 250}; /* -1000: default */
  static float table[32 * 2];
  static int32_t got[7 * 300], with[7 * 300];
  static float out[2 * 7 * 300];
  const int64_t shape[2] = {32, 2};
  struct ab_tensor tb;
  struct ab_bias_params p;
  struct ab_geometry g;
  int64_t r, j, want;
  int bidir, i, nb;

  for (bidir = 0; bidir < 2; bidir++)
    for (nb = 16; nb <= 32; nb += 16)
      for (i = 0; i < 3; i++) {
        ab_bias_params_init(&p);
        p.method = AB_BIAS_T5;
        p.num_heads = 2;
        p.num_buckets = nb;
        p.bidirectional = bidir;
        p.max_distance = 100;
        ab_geometry_init(&g, 7, 300);
        if (offs[i] != -1000)
          g.q_offset = offs[i];
        CHECK_OK(ab_bias_table(&p, &g, NULL, got));
        for (r = 0; r < 7; r++)
          for (j = 0; j < 300; j++) {
            want = hf_bucket(j - (g.q_offset + r), nb, bidir, 100);
            if (got[r * 300 + j] != want)
              FAIL_AT("nb %d bidir %d q_offset %lld: bucket [%lld, %lld] "
                      "is %d, HF %lld",
                      nb, bidir, (long long)g.q_offset, (long long)r,
                      (long long)j, (int)got[r * 300 + j], (long long)want);
          }
        /* A table of nb rows gives the same buckets. */
        CHECK_OK(ab_tensor_init(&tb, table, AB_DTYPE_F32, 2,
                                (int64_t[]){nb, 2}));
        p.table = &tb;
        CHECK_OK(ab_bias_table(&p, &g, NULL, with));
        CHECK(memcmp(got, with, sizeof got) == 0);
      }

  /* Bias values need the table; a count that contradicts it, or none at
   * all, is refused naming the field that carries it. */
  ab_bias_params_init(&p);
  p.method = AB_BIAS_T5;
  p.num_heads = 2;
  p.num_buckets = 32;
  ab_geometry_init(&g, 7, 300);
  CHECK_OK(ab_bias_check(&p));
  CHECK_FAILS(ab_bias_table(&p, &g, out, got), AB_STATUS_INVALID_ARG,
              "table");
  CHECK_FAILS(ab_bias_table(&p, &g, out, NULL), AB_STATUS_INVALID_ARG,
              "table");
  p.num_buckets = 0;
  CHECK_FAILS(ab_bias_table(&p, &g, NULL, got), AB_STATUS_INVALID_ARG,
              "table");
  p.num_buckets = -1;
  CHECK_FAILS(ab_bias_check(&p), AB_STATUS_INVALID_ARG,
              "relative_attention_num_buckets");
  p.num_buckets = 2; /* no exact bucket per direction */
  CHECK_FAILS(ab_bias_table(&p, &g, NULL, got), AB_STATUS_INVALID_ARG,
              "relative_attention_num_buckets");
  CHECK_OK(ab_tensor_init(&tb, table, AB_DTYPE_F32, 2, shape));
  p.table = &tb;
  p.num_buckets = 16;
  CHECK_FAILS(ab_bias_table(&p, &g, out, got), AB_STATUS_INVALID_ARG,
              "relative_attention_num_buckets");
  p.num_buckets = 32;
  CHECK_OK(ab_bias_table(&p, &g, out, got));
  return 0;
}

/* Attention evaluates the bias, so T5 there needs its table. */
TEST(t5_attention_needs_the_table)
{
  static float qkv[3 * 4], out[2 * 4];
  struct ab_tensor q, k;
  struct ab_bias_params bp;
  struct ab_attn_params ap;

  CHECK_OK(ab_tensor_init(&q, qkv, AB_DTYPE_F32, 2, (int64_t[]){2, 4}));
  CHECK_OK(ab_tensor_init(&k, qkv, AB_DTYPE_F32, 2, (int64_t[]){3, 4}));
  ab_bias_params_init(&bp);
  bp.method = AB_BIAS_T5;
  bp.num_buckets = 32;
  ab_attn_params_init(&ap);
  ap.q = &q;
  ap.k = &k;
  ap.v = &k;
  ap.out = out;
  ap.bias = &bp;
  CHECK_FAILS(ab_attention(&ap), AB_STATUS_INVALID_ARG, "bias.table");
  return 0;
}

/* ======================================================================
 * FIRE
 * ====================================================================== */

TEST(fire_worked_5_both_heads)
{
  static const double h0[25] = {
      -0.3,       -0.3,        -0.3,        -0.3,        -0.3,
      -0.07922634, -0.3,       -0.3,        -0.3,        -0.3,
      0.1405828,  -0.07922634, -0.3,        -0.3,        -0.3,
      0.3427876,  0.1405828,   -0.07922634, -0.3,        -0.3,
      0.53,       0.3427876,   0.1405828,   -0.07922634, -0.3};
  static const double h1[25] = {
      0.1,       0.1,       0.1,       0.1,       0.1,
      0.1699579, 0.1,       0.1,       0.1,       0.1,
      0.3251173, 0.1699579, 0.1,       0.1,       0.1,
      0.4678501, 0.3251173, 0.1699579, 0.1,       0.1,
      0.6,       0.4678501, 0.3251173, 0.1699579, 0.1};
  struct fire_def f = fire_worked();
  struct fire_store s;
  struct ab_bias_params p;
  struct ab_geometry g;
  double masked[25];
  float t[50];
  int i, j;

  fire_params(&f, &s, &p, 2);
  ab_geometry_init(&g, 5, 5);
  /* not causal: keys after the query use distance 0, as printed */
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  CHECK_ARRAY(t, h0, 25, RTOL, ATOL);
  CHECK_ARRAY(t + 25, h1, 25, RTOL, ATOL);
  g.causal = 1;
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  for (i = 0; i < 5; i++)
    for (j = 0; j < 5; j++)
      masked[i * 5 + j] = j > i ? -INFINITY : h1[i * 5 + j];
  CHECK_ARRAY(t + 25, masked, 25, RTOL, ATOL);
  return 0;
}

/* Output size 1 broadcast to every head, eps, rows past L (their own
 * normaliser), rows before any key, both paths mixed, against float64. */
TEST(fire_broadcast_eps_and_long_rows)
{
  struct fire_def f = fire_worked();
  struct fire_store s;
  struct ab_bias_params p;
  struct ab_geometry g;
  const int64_t offs[4] = {-1000, 0, -2, 40};
  int i, causal, bc;

  for (bc = 0; bc < 2; bc++)
    for (i = 0; i < 4; i++)
      for (causal = 0; causal < 2; causal++) {
        f = fire_worked();
        f.eps = 0.5;
        f.L = 6.5;
        if (bc) { /* 1 -> 3 -> 1, broadcast to 3 heads */
          f.dims[2] = 1;
          f.W[1] = fire_W2b;
          f.b[1] = fire_b2b;
        }
        fire_params(&f, &s, &p, bc ? 3 : 2);
        ab_geometry_init(&g, 6, 20);
        if (offs[i] != -1000)
          g.q_offset = offs[i];
        g.causal = causal;
        if (table_vs_ref(&p, &g, fire_fn, &f, RTOL, ATOL))
          FAIL_AT("broadcast %d q_offset %lld causal %d", bc,
                  (long long)g.q_offset, causal);
      }
  /* L = 0, eps = 0: the normaliser of p_q = 0 is 0, and x must be 0 */
  f = fire_worked();
  f.L = 0;
  fire_params(&f, &s, &p, 2);
  ab_geometry_init(&g, 4, 4);
  if (table_vs_ref(&p, &g, fire_fn, &f, RTOL, ATOL))
    return 1;
  return 0;
}

/* A deeper random MLP (1 -> 8 -> 5 -> 4 heads), float16 weights. */
TEST(fire_three_layers_f16)
{
  double W[3][40], B[3][8];
  uint16_t Wh[3][40], Bh[3][8];
  const int dims[4] = {1, 8, 5, 4};
  struct ab_tensor wt[3], bt[3];
  struct ab_fire_layer layers[3];
  struct ab_bias_params p;
  struct ab_geometry g;
  struct fire_def f;
  int l, i;

  test_seed(77);
  memset(&f, 0, sizeof f);
  for (l = 0; l < 3; l++) {
    int64_t ws[2] = {dims[l + 1], dims[l]}, bs[1] = {dims[l + 1]};
    for (i = 0; i < dims[l] * dims[l + 1]; i++) {
      Wh[l][i] = ab_f32_to_f16((float)test_uniform(-1, 1));
      W[l][i] = ab_f16_to_f32(Wh[l][i]);
    }
    for (i = 0; i < dims[l + 1]; i++) {
      Bh[l][i] = ab_f32_to_f16((float)test_uniform(-0.5, 0.5));
      B[l][i] = ab_f16_to_f32(Bh[l][i]);
    }
    CHECK_OK(ab_tensor_init(&wt[l], Wh[l], AB_DTYPE_F16, 2, ws));
    CHECK_OK(ab_tensor_init(&bt[l], Bh[l], AB_DTYPE_F16, 1, bs));
    layers[l].weight = &wt[l];
    layers[l].bias = &bt[l];
    f.W[l] = W[l];
    f.b[l] = B[l];
    f.dims[l] = dims[l];
  }
  f.dims[3] = 4;
  f.n_layers = 3;
  f.c = 0.7;
  f.L = 10;
  f.eps = 1e-3;
  ab_bias_params_init(&p);
  p.method = AB_BIAS_FIRE;
  p.num_heads = 4;
  p.c = f.c;
  p.L = f.L;
  p.eps = f.eps;
  p.n_layers = 3;
  p.layers = layers;
  ab_geometry_init(&g, 16, 24);
  g.causal = 1;
  if (table_vs_ref(&p, &g, fire_fn, &f, RTOL, ATOL))
    return 1;
  return 0;
}

TEST(fire_errors)
{
  struct fire_def f = fire_worked();
  struct fire_store s;
  struct ab_bias_params p;
  struct ab_geometry g;
  struct ab_tensor wrong;
  float t[3 * 16];
  const int64_t ws[2] = {2, 2};

  ab_geometry_init(&g, 4, 4);
  fire_params(&f, &s, &p, 3); /* output 2 is neither 3 heads nor 1 */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "layers.1.weight");
  fire_params(&f, &s, &p, 2);
  CHECK_OK(ab_tensor_init(&wrong, (void *)fire_W2, AB_DTYPE_F64, 2, ws));
  s.layers[1].weight = &wrong; /* [2, 2] after a 3-wide layer */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "layers.1.weight");
  fire_params(&f, &s, &p, 2);
  s.layers[0].bias = &s.b[1]; /* [2] where [3] is needed */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "layers.0.bias");
  fire_params(&f, &s, &p, 2);
  s.layers[0].weight = &s.w[1]; /* input 3, but FIRE's input is 1 */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "layers.0.weight");
  fire_params(&f, &s, &p, 2);
  p.c = NAN; /* absent */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "c");
  p.c = 1e308; /* finite, but c * distance overflows: psi would be inf */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "c");
  p.c = 0.1;
  p.L = -1;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "L");
  p.L = 1e300;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "L");
  p.L = 4;
  p.eps = -0.1;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "eps");
  p.eps = 0;
  p.n_layers = 0;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "layers");
  /* the default params leave c and L absent */
  ab_bias_params_init(&p);
  p.method = AB_BIAS_FIRE;
  p.num_heads = 2;
  CHECK_EQ_I64(ab_bias_check(&p), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "c");
  return 0;
}

/* FIRE's MLP runs in double over the layers as given: a float64 MLP whose
 * output cancels (1000 * (h0 - h1)) keeps its digits, where float32
 * weights would be off by about 1e-4 (checked here, so the comparison can
 * fail). */
TEST(fire_float64_layers_keep_their_digits)
{
  static const double W1[2] = {1.0, 1.0000001}, b1[2] = {0.1, 0.1000001};
  static const double W2[2] = {1000.0, -1000.0}, b2[1] = {0.25};
  double W1f[2], b1f[2], a, b, worst = 0;
  struct fire_def f = fire_two_layers(2, 1, W1, b1, W2, b2, 0.5, 8), ff;
  struct fire_store s;
  struct ab_bias_params p;
  struct ab_geometry g;
  int64_t pq, t;
  int i;

  fire_params(&f, &s, &p, 3);
  ab_geometry_init(&g, 20, 20);
  g.causal = 1;
  CHECK(!table_vs_ref(&p, &g, fire_fn, &f, 1e-6, 0));
  /* The same MLP with float32 weights is further away than that. */
  for (i = 0; i < 2; i++) {
    W1f[i] = (double)(float)W1[i];
    b1f[i] = (double)(float)b1[i];
  }
  ff = fire_two_layers(2, 1, W1f, b1f, W2, b2, 0.5, 8);
  for (pq = 1; pq < 20; pq++)
    for (t = 1; t <= pq; t++) {
      a = ref_fire(&f, 0, pq, pq - t);
      b = ref_fire(&ff, 0, pq, pq - t);
      worst = fmax(worst, fabs(a - b) / fabs(a));
    }
  CHECK(worst > 1e-5);
  return 0;
}

/* ======================================================================
 * Kerple and none
 * ====================================================================== */

TEST(kerple_worked_11)
{
  static const double logw[25] = {
      -0.0,      -INFINITY, -INFINITY, -INFINITY, -INFINITY,
      -0.8109302, -0.0,     -INFINITY, -INFINITY, -INFINITY,
      -1.386294, -0.8109302, -0.0,     -INFINITY, -INFINITY,
      -1.832581, -1.386294, -0.8109302, -0.0,     -INFINITY,
      -2.197225, -1.832581, -1.386294, -0.8109302, -0.0};
  static const double poww[5] = {-8, -5.196152, -2.828427, -1, -0};
  const float r1 = 2.0f, r2 = 0.5f, p1 = 1.0f, p2 = 1.5f;
  struct ab_bias_params p;
  struct ab_geometry g;
  float t[25];

  ab_bias_params_init(&p);
  p.method = AB_BIAS_KERPLE;
  p.num_heads = 1;
  p.r1 = &r1;
  p.r2 = &r2;
  ab_geometry_init(&g, 5, 5);
  g.causal = 1;
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  CHECK_ARRAY(t, logw, 25, RTOL, ATOL);
  p.kerple_power = 1;
  p.r1 = &p1;
  p.r2 = &p2;
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  CHECK_ARRAY(t + 4 * 5, poww, 5, RTOL, ATOL);
  return 0;
}

TEST(kerple_heads_vs_reference_and_errors)
{
  const float r1[3] = {0.5f, 2.0f, 1.25f}, r2[3] = {0.1f, 2.0f, 1.0f};
  const double r1d[3] = {0.5, 2.0, 1.25}, r2d[3] = {(double)0.1f, 2.0, 1.0};
  float bad[3] = {1.0f, 2.5f, 1.0f}, t[3 * 4 * 4];
  struct kerple_ref ref = {r1d, r2d, 0};
  struct ab_bias_params p;
  struct ab_geometry g;
  int power;

  for (power = 0; power < 2; power++) {
    ab_bias_params_init(&p);
    p.method = AB_BIAS_KERPLE;
    p.num_heads = 3;
    p.kerple_power = power;
    p.r1 = r1;
    p.r2 = r2;
    ref.power = power;
    ab_geometry_init(&g, 7, 50);
    if (table_vs_ref(&p, &g, kerple_fn, &ref, RTOL, ATOL))
      FAIL_AT("power %d", power);
    g.q_offset = 60; /* every key before the queries */
    if (table_vs_ref(&p, &g, kerple_fn, &ref, RTOL, ATOL))
      FAIL_AT("power %d, q_offset 60", power);
  }
  ab_geometry_init(&g, 4, 4);
  p.kerple_power = 1;
  p.r2 = bad; /* power variant needs 0 < r2 <= 2 */
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "r2.1");
  CHECK(strstr(ab_last_error()->msg, "2.5") != NULL);
  p.kerple_power = 0; /* log variant accepts it */
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  bad[1] = 0.0f;
  p.r1 = bad;
  p.r2 = r2;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "r1.1");
  p.r1 = NULL;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "r1");
  p.r1 = r1;
  p.kerple_power = 3;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "variant");
  return 0;
}

/* Kerple runs in double: r1_f64, r2_f64 keep their digits.  At distances
 * near 2^40 the power variant's d^r2 turns a float32 rounding of r2 into a
 * relative error of about 1.3e-6 (checked here, so the comparison can
 * fail); from the double forms only the output's rounding remains. */
TEST(kerple_f64_parameters)
{
  const double r1[2] = {0.7, 1.1}, r2[2] = {1.3, 1.7};
  const double r2f[2] = {(double)(float)1.3, (double)(float)1.7};
  const float r1f[2] = {0.7f, 1.1f};
  struct kerple_ref ref = {r1, r2, 1}, narrow = {r1, r2f, 1};
  struct ab_bias_params p;
  struct ab_geometry g;
  double a, worst = 0;
  float t[2 * 2 * 3];
  int h;

  ab_bias_params_init(&p);
  p.method = AB_BIAS_KERPLE;
  p.num_heads = 2;
  p.kerple_power = 1;
  p.r1_f64 = r1;
  p.r2_f64 = r2;
  ab_geometry_init(&g, 2, 3);
  g.q_offset = (int64_t)1 << 40;
  CHECK(!table_vs_ref(&p, &g, kerple_fn, &ref, 3e-7, 0));
  for (h = 0; h < 2; h++) {
    a = kerple_fn(&ref, h, g.q_offset, 0);
    worst = fmax(worst, fabs(kerple_fn(&narrow, h, g.q_offset, 0) - a) /
                            fabs(a));
  }
  CHECK(worst > 1e-6);
  p.kerple_power = 0;
  ref.power = 0;
  CHECK(!table_vs_ref(&p, &g, kerple_fn, &ref, 3e-7, 0));
  p.r1 = r1f; /* both forms of one array */
  CHECK_FAILS(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG, "r1");
  return 0;
}

TEST(none_is_zero_with_masks)
{
  struct ab_bias_params p;
  struct ab_geometry g;

  ab_bias_params_init(&p);
  p.num_heads = 2;
  ab_geometry_init(&g, 3, 9);
  if (table_vs_ref(&p, &g, zero_fn, NULL, 0, 0))
    return 1;
  g.causal = 1;
  if (table_vs_ref(&p, &g, zero_fn, NULL, 0, 0))
    return 1;
  return 0;
}

/* ======================================================================
 * Windows and geometry
 * ====================================================================== */

TEST(windows_all_methods)
{
  const int64_t win[][2] = {{-1, -1}, {2, -1}, {-1, 1}, {1, 0},
                            {0, 0},   {3, 2},  {0, -1}, {100, 100}};
  const int64_t offs[3] = {-1000, -6, 20};
  const float r1[2] = {1.0f, 0.5f}, r2[2] = {0.5f, 1.5f};
  const double r1d[2] = {1.0, 0.5}, r2d[2] = {0.5, 1.5};
  struct kerple_ref kref = {r1d, r2d, 1};
  float slopes[2], t5tab[16 * 2];
  double t5d[16 * 2];
  const int64_t shape[2] = {16, 2};
  struct ab_tensor tb;
  struct t5_ref tref;
  struct ab_bias_params p;
  struct ab_geometry g;
  int w, o, causal, m, i;

  for (i = 0; i < 32; i++) {
    t5tab[i] = (float)(i * 0.25 - 3);
    t5d[i] = t5tab[i];
  }
  CHECK_OK(ab_tensor_init(&tb, t5tab, AB_DTYPE_F32, 2, shape));
  tref.table = t5d;
  tref.nb = 16;
  tref.H = 2;
  tref.md = 20;
  tref.bidir = 1;
  CHECK_OK(ab_alibi_slopes(2, 8, slopes));
  for (m = 0; m < 4; m++)
    for (w = 0; w < 8; w++)
      for (o = 0; o < 3; o++)
        for (causal = 0; causal < 2; causal++) {
          ref_fn fn = zero_fn;
          const void *ctx = NULL;
          ab_bias_params_init(&p);
          p.num_heads = 2;
          if (m == 1) {
            p.method = AB_BIAS_ALIBI;
            fn = alibi_fn;
            ctx = slopes;
          } else if (m == 2) {
            p.method = AB_BIAS_T5;
            p.table = &tb;
            p.max_distance = 20;
            fn = t5_fn;
            ctx = &tref;
          } else if (m == 3) {
            p.method = AB_BIAS_KERPLE;
            p.kerple_power = 1;
            p.r1 = r1;
            p.r2 = r2;
            fn = kerple_fn;
            ctx = &kref;
          }
          ab_geometry_init(&g, 9, 14);
          if (offs[o] != -1000)
            g.q_offset = offs[o];
          g.causal = causal;
          g.window_left = win[w][0];
          g.window_right = win[w][1];
          if (table_vs_ref(&p, &g, fn, ctx, RTOL, ATOL))
            FAIL_AT("method %d window [%lld, %lld] q_offset %lld causal %d",
                    m, (long long)win[w][0], (long long)win[w][1],
                    (long long)g.q_offset, causal);
        }
  return 0;
}

/* ab__visible_keys (the mask of tables and attention) agrees with the
 * written-out rule for every key. */
TEST(visible_predicate)
{
  int64_t pq, j, wl, wr, kl, lo, hi;
  int causal;

  for (causal = 0; causal < 2; causal++)
    for (wl = -1; wl < 4; wl++)
      for (wr = -1; wr < 4; wr++)
        for (pq = -3; pq < 10; pq++)
          for (kl = 1; kl < 9; kl++) {
            ab__visible_keys(pq, kl, causal, wl, wr, &lo, &hi);
            /* an empty run may sit past the keys (lo == hi > k_len) */
            CHECK(0 <= lo && lo <= hi && (hi <= kl || lo == hi));
            for (j = 0; j < kl; j++)
              CHECK_EQ_I64(lo <= j && j < hi,
                           ref_visible(pq, j, causal, wl, wr));
          }
  /* huge windows and positions cannot overflow */
  ab__visible_keys(-((int64_t)1 << 62), 8, 0, INT64_MAX, INT64_MAX, &lo, &hi);
  CHECK(lo == 0 && hi == 8);
  ab__visible_keys((int64_t)1 << 62, 8, 0, INT64_MAX, INT64_MAX, &lo, &hi);
  CHECK(lo == 0 && hi == 8);
  ab__visible_keys((int64_t)1 << 62, 8, 1, 4, INT64_MAX, &lo, &hi);
  CHECK(lo == hi);
  return 0;
}

TEST(table_argument_errors)
{
  struct ab_bias_params p;
  struct ab_geometry g;
  float t[64];
  ab_job_t *job = (ab_job_t *)&job;

  ab_bias_params_init(&p);
  p.method = AB_BIAS_ALIBI;
  p.num_heads = 2;
  ab_geometry_init(&g, 0, 4);
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "q_len");
  ab_geometry_init(&g, 4, -1);
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "k_len");
  ab_geometry_init(&g, 4, 4);
  g.q_offset = (int64_t)1 << 62;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_OUT_OF_RANGE);
  CHECK_STR(ab_last_error()->arg, "q_offset");
  g.q_offset = 0;
  g.window_left = -2;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "window");
  g.window_left = -1;
  CHECK_EQ_I64(ab_bias_table(&p, &g, NULL, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "return");
  CHECK_EQ_I64(ab_bias_table(&p, NULL, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_EQ_I64(ab_bias_table(NULL, &g, t, NULL), AB_STATUS_INVALID_ARG);
  p.num_heads = 0;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "num_heads");
  p.num_heads = 2;
  p.method = (enum ab_bias_method)11;
  CHECK_EQ_I64(ab_bias_table(&p, &g, t, NULL), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "method");
  p.method = AB_BIAS_ALIBI;
  p.max_bias = -3;
  CHECK_EQ_I64(ab_bias_check(&p), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "max_bias");
  {
    const float bad[2] = {0.5f, INFINITY};
    p.max_bias = 8;
    p.slopes = bad;
    CHECK_EQ_I64(ab_bias_check(&p), AB_STATUS_INVALID_ARG);
    CHECK_STR(ab_last_error()->arg, "slopes.1");
    p.slopes = NULL;
  }
  /* H x q x k overflows */
  ab_geometry_init(&g, (int64_t)1 << 40, (int64_t)1 << 30);
  CHECK_EQ_I64(ab_bias_table_job(&p, &g, t, NULL, &job), AB_STATUS_OVERFLOW);
  CHECK(job == NULL);
  return 0;
}

/* ======================================================================
 * The resolved row form (fused attention) and jobs
 * ====================================================================== */

/* Build params of each method for H heads (storage static). */
static void method_params(int m, int64_t H, struct ab_bias_params *p)
{
  static float t5tab[32 * 4], r1[4] = {1.0f, 0.5f, 2.0f, 0.25f},
                              r2[4] = {0.5f, 1.5f, 0.75f, 2.0f};
  static struct ab_tensor tb;
  static struct fire_store fs;
  static struct fire_def f;
  const int64_t shape[2] = {32, H};
  int i;

  ab_bias_params_init(p);
  p->num_heads = H;
  switch (m) {
  case 1:
    p->method = AB_BIAS_ALIBI;
    break;
  case 2:
    for (i = 0; i < 32 * H; i++)
      t5tab[i] = (float)(((i * 37) % 23) * 0.1 - 1);
    ab_tensor_init(&tb, t5tab, AB_DTYPE_F32, 2, shape);
    p->method = AB_BIAS_T5;
    p->table = &tb;
    p->max_distance = 64;
    break;
  case 3:
    f = fire_worked();
    f.L = 37.5;
    f.eps = 0.01;
    if (H != 2) { /* broadcast */
      f.dims[2] = 1;
      f.W[1] = fire_W2b;
      f.b[1] = fire_b2b;
    }
    fire_params(&f, &fs, p, H);
    break;
  case 4:
    p->method = AB_BIAS_KERPLE;
    p->kerple_power = H % 2;
    p->r1 = r1;
    p->r2 = r2;
    break;
  default:
    break;
  }
}

/* ab__bias_row, with and without ab__bias_prepare, gives exactly the
 * table's visible values, for runs starting anywhere. */
TEST(bias_row_matches_table)
{
  const int64_t Hs[2] = {2, 3};
  int m, hi, prep;

  for (m = 0; m < 5; m++)
    for (hi = 0; hi < 2; hi++) {
      const int64_t H = Hs[hi];
      struct ab_bias_params p;
      struct ab_geometry g;
      float *t, row[160];
      int64_t h, r, j0;

      method_params(m, H, &p);
      ab_geometry_init(&g, 50, 150);
      g.q_offset = 10; /* rows 10..59: FIRE rows on both sides of L */
      g.causal = 1;
      t = malloc(sizeof(float) * (size_t)(H * 50 * 150));
      CHECK_OK(ab_bias_table(&p, &g, t, NULL));
      for (prep = 0; prep < 2; prep++) {
        struct ab__bias b;
        p.num_heads = 0; /* as attention passes it */
        CHECK_OK(ab__bias_resolve(&p, H, &b));
        p.num_heads = H;
        if (prep)
          CHECK_OK(ab__bias_prepare(&b, &g));
        for (h = 0; h < H; h++)
          for (r = 0; r < 50; r += 7)
            for (j0 = 0; j0 < 150; j0 += 41) {
              const int64_t pq = g.q_offset + r, n = 150 - j0;
              int64_t j;
              ab__bias_row(&b, h, pq, j0, n, row);
              for (j = j0; j < 150 && j <= pq; j++)
                if (memcmp(&row[j - j0], &t[(h * 50 + r) * 150 + j], 4))
                  FAIL_AT("method %d H %lld prep %d h %lld row %lld j %lld: "
                          "%.9g vs %.9g",
                          m, (long long)H, prep, (long long)h, (long long)r,
                          (long long)j, (double)row[j - j0],
                          (double)t[(h * 50 + r) * 150 + j]);
            }
        ab__bias_release(&b);
      }
      free(t);
    }
  return 0;
}

/* FIRE keys after the query use distance 0 in the row form too. */
TEST(bias_row_fire_after_query)
{
  struct fire_def f = fire_worked();
  struct fire_store s;
  struct ab_bias_params p;
  struct ab__bias b;
  float row[6];
  double want[6];
  int j;

  fire_params(&f, &s, &p, 2);
  CHECK_OK(ab__bias_resolve(&p, 2, &b));
  ab__bias_row(&b, 1, 2, 0, 6, row);
  for (j = 0; j < 6; j++)
    want[j] = ref_fire(&f, 1, 2, j);
  ab__bias_release(&b);
  CHECK_ARRAY(row, want, 6, RTOL, ATOL);
  CHECK_CLOSE(row[5], 0.1, RTOL, ATOL);
  p.num_heads = 3;
  CHECK_EQ_I64(ab__bias_resolve(&p, 2, &b), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "num_heads");
  ab__bias_release(&b);
  CHECK_OK(ab__bias_resolve(NULL, 4, &b)); /* none */
  ab__bias_row(&b, 3, 7, 0, 6, row);
  ab__bias_release(&b);
  for (j = 0; j < 6; j++)
    CHECK(row[j] == 0.0f);
  return 0;
}

/* Pieces in a shuffled order write exactly the one-shot table, every cell
 * once (the destination starts as NaN). */
TEST(job_pieces_shuffled_equal_one_shot)
{
  int m, causal;

  test_seed(99);
  for (m = 0; m < 5; m++)
    for (causal = 0; causal < 2; causal++) {
      const int64_t H = 3, q = 300, k = 1000, n = H * q * k;
      struct ab_bias_params p;
      struct ab_geometry g;
      float *a = malloc(sizeof(float) * (size_t)n);
      float *b = malloc(sizeof(float) * (size_t)n);
      int32_t *ba = malloc(sizeof(int32_t) * (size_t)(q * k));
      int32_t *bb = malloc(sizeof(int32_t) * (size_t)(q * k));
      int32_t *want_b = m == 2 ? ba : NULL, *got_b = m == 2 ? bb : NULL;
      int64_t *order, np, i;
      ab_job_t *job;

      method_params(m, H, &p);
      ab_geometry_init(&g, q, k);
      g.q_offset = 20;
      g.causal = causal;
      CHECK_OK(ab_bias_table(&p, &g, a, want_b));
      for (i = 0; i < n; i++)
        b[i] = NAN;
      memset(bb, 0xff, sizeof(int32_t) * (size_t)(q * k));
      CHECK_OK(ab_bias_table_job(&p, &g, b, got_b, &job));
      np = ab_job_pieces(job);
      CHECK(np >= 2);
      CHECK(ab_job_flops(job) > 0);
      order = malloc(sizeof(int64_t) * (size_t)np);
      for (i = 0; i < np; i++)
        order[i] = i;
      for (i = np - 1; i > 0; i--) {
        int64_t s = test_randint(0, i), tmp = order[i];
        order[i] = order[s];
        order[s] = tmp;
      }
      for (i = 0; i < np; i++)
        CHECK_OK(ab_job_run(job, order[i], NULL));
      ab_job_free(job);
      free(order);
      CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
      if (m == 2)
        CHECK(memcmp(ba, bb, sizeof(int32_t) * (size_t)(q * k)) == 0);
      free(a);
      free(b);
      free(ba);
      free(bb);
    }
  return 0;
}

/* A table past the streaming threshold (16 MiB): ALiBi and T5 with
 * buckets, against the references. */
TEST(large_streamed_tables)
{
  const int64_t H = 4, q = 1024, k = 1100, n = H * q * k;
  float *t = malloc(sizeof(float) * (size_t)n), slopes[4];
  int32_t *bk = malloc(sizeof(int32_t) * (size_t)(q * k));
  double t5d[32 * 4];
  struct t5_ref tref;
  struct ab_bias_params p;
  struct ab_geometry g;
  int64_t h, r, j, bad = 0;

  CHECK(t && bk);
  method_params(1, H, &p);
  ab_geometry_init(&g, q, k);
  g.causal = 1;
  CHECK_OK(ab_alibi_slopes(H, 8, slopes));
  CHECK_OK(ab_bias_table(&p, &g, t, NULL));
  for (h = 0; h < H; h++)
    for (r = 0; r < q; r++)
      for (j = 0; j < k; j++) {
        const int64_t pq = g.q_offset + r;
        const double w = j > pq ? -INFINITY : alibi_fn(slopes, h, pq, j);
        bad += !test_close(t[(h * q + r) * k + j], w, RTOL, ATOL);
      }
  CHECK_EQ_I64(bad, 0);
  method_params(2, H, &p);
  for (j = 0; j < 32 * H; j++)
    t5d[j] = ((const float *)p.table->data)[j];
  tref.table = t5d;
  tref.nb = 32;
  tref.H = H;
  tref.md = 64;
  tref.bidir = 1;
  g.causal = 0;
  CHECK_OK(ab_bias_table(&p, &g, t, bk));
  for (r = 0; r < q; r++)
    for (j = 0; j < k; j++) {
      const int64_t pq = g.q_offset + r;
      bad += bk[r * k + j] != hf_bucket(j - pq, 32, 1, 64);
      for (h = 0; h < H; h++)
        bad += t[(h * q + r) * k + j] != (float)t5_fn(&tref, h, pq, j);
    }
  CHECK_EQ_I64(bad, 0);
  free(t);
  free(bk);
  return 0;
}

/* ======================================================================
 * Kernel parity: every ISA this CPU runs against the reference
 * ====================================================================== */

TEST(bias_kernels_parity)
{
  static const int64_t ns[] = {0, 1, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1000};
  static const int64_t pqs[] = {-5,         0,        7,       500,
                                16777200,   16777216, 16777300, -16777300,
                                3000000000LL};
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const char *const *isa;
  float *buf_a = NULL, *buf_b = NULL, *src = NULL;
  int checked = 0;

  CHECK(ref != NULL);
  CHECK(posix_memalign((void **)&buf_a, 64, 1200 * sizeof(float)) == 0);
  CHECK(posix_memalign((void **)&buf_b, 64, 1200 * sizeof(float)) == 0);
  CHECK(posix_memalign((void **)&src, 64, 1200 * sizeof(float)) == 0);
  for (int i = 0; i < 1200; i++)
    src[i] = (float)(i * 0.37 - 100);
  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    size_t a, b, c;
    int stream, mis;
    if (!k) {
      fprintf(stderr, "  # %s: not supported by this CPU, skipped\n", *isa);
      continue;
    }
    checked++;
    for (a = 0; a < sizeof ns / sizeof ns[0]; a++)
      for (mis = 0; mis < 17; mis += 3)
        for (stream = 0; stream < 2; stream++) {
          const int64_t n = ns[a];
          float *oa = buf_a + mis, *ob = buf_b + mis;
          for (b = 0; b < sizeof pqs / sizeof pqs[0]; b++)
            for (c = 0; c < 3; c++) {
              const float slope = c == 0 ? 0.5f : c == 1 ? 0.0078125f
                                                         : -1.3f;
              memset(buf_a, 0x5a, 1200 * sizeof(float));
              memset(buf_b, 0x5a, 1200 * sizeof(float));
              ref->bias.table_alibi(oa, n, pqs[b], slope, 0);
              k->bias.table_alibi(ob, n, pqs[b], slope, stream);
              k->bias.store_fence();
              if (memcmp(buf_a, buf_b, 1200 * sizeof(float)))
                FAIL_AT("%s table_alibi n %lld mis %d pq %lld stream %d",
                        *isa, (long long)n, mis, (long long)pqs[b], stream);
            }
          memset(buf_a, 0x5a, 1200 * sizeof(float));
          memset(buf_b, 0x5a, 1200 * sizeof(float));
          ref->bias.table_fill(oa, n, -INFINITY, 0);
          k->bias.table_fill(ob, n, -INFINITY, stream);
          k->bias.store_fence();
          if (memcmp(buf_a, buf_b, 1200 * sizeof(float)))
            FAIL_AT("%s table_fill n %lld mis %d", *isa, (long long)n, mis);
          for (b = 0; b < 17; b += 5) {
            memset(buf_a, 0x5a, 1200 * sizeof(float));
            memset(buf_b, 0x5a, 1200 * sizeof(float));
            ref->bias.table_copy(oa, src + b, n, 0);
            k->bias.table_copy(ob, src + b, n, stream);
            k->bias.store_fence();
            if (memcmp(buf_a, buf_b, 1200 * sizeof(float)))
              FAIL_AT("%s table_copy n %lld mis %d src+%zu", *isa,
                      (long long)n, mis, b);
          }
        }
  }
  free(buf_a);
  free(buf_b);
  free(src);
  CHECK(checked >= 1);
  return 0;
}

/* ======================================================================
 * Allocation failure: every allocation of a table job may fail; each run
 * returns NO_MEMORY cleanly and nothing leaks.
 * ====================================================================== */

TEST(bias_table_allocation_failures)
{
  int m;

  for (m = 1; m < 5; m++) {
    struct ab_bias_params p;
    struct ab_geometry g;
    float t[2 * 6 * 9];
    int32_t bk[6 * 9];
    enum ab_status st;
    int k;

    method_params(m, 2, &p);
    ab_geometry_init(&g, 6, 9);
    for (k = 0;; k++) {
      test_alloc_install(k, 0); /* only allocation k fails */
      st = ab_bias_table(&p, &g, t, m == 2 ? bk : NULL);
      if (test_alloc.live != 0) {
        test_alloc_remove();
        FAIL_AT("method %d, failing allocation %d: %lld blocks leaked", m, k,
                (long long)test_alloc.live);
      }
      if (st == AB_STATUS_OK)
        break;
      if (st != AB_STATUS_NO_MEMORY) {
        test_alloc_remove();
        FAIL_AT("method %d, failing allocation %d: status %d", m, k, st);
      }
    }
    test_alloc_remove();
    CHECK(k >= 2);
  }
  return 0;
}

/* The family table (lib/src/bias/families.def) against the public names:
 * every enumerator has its family, at its own index, with the operations
 * every family must have (the compiler checks only the table's size). */
TEST(bias_families_table)
{
  int n = 0;

#define AB_BIAS_FAMILY(e, f)                                                   \
  do {                                                                         \
    const struct ab__bias_family *fam = &ab__bias_##f;                         \
    CHECK_STR(fam->name, #f);                                                  \
    CHECK_STR(ab_bias_method_name(e), #f);                                     \
    CHECK_EQ_I64(ab_bias_method_parse(#f), e);                                 \
    CHECK(fam->check != NULL && fam->span != NULL);                            \
    CHECK((fam->resolve == NULL) == (fam->release == NULL));                   \
    CHECK(!fam->buckets || fam->prepare != NULL);                              \
    n++;                                                                       \
  } while (0);
#include "bias/families.def"
#undef AB_BIAS_FAMILY
  CHECK_EQ_I64(n, AB_BIAS_METHOD_LAST_);
  CHECK_STR(ab_bias_method_name(AB_BIAS_METHOD_LAST_), "unknown");
  CHECK_EQ_I64(ab_bias_method_parse("sandwich"), -1);
  return 0;
}
