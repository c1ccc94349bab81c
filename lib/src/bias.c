/* bias.c: the attention-bias families -- none, ALiBi, T5 buckets, FIRE and
 * Kerple -- as full tables (ab_bias_table, ab_bias_table_job) and as the
 * resolved form fused attention evaluates row by row (bias-internal.h).
 * Formulas and sources: docs/methods.md#attention-biases. */
#include "bias-internal.h"
#include "kernels/kernels.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

/* Positions and the query offset stay within +-2^61 (lengths too), so
 * p_q = q_offset + r, rel = j - p_q and every sum below fit in int64. */
#define POS_LIMIT ((int64_t)1 << 61)

/* A T5 bucket count above 2^24 could not be represented exactly in the
 * float32 arithmetic Hugging Face uses; nobody trains such a table. */
#define T5_MAX_BUCKETS ((int64_t)1 << 24)

/* Largest T5 lookup table (distances) built by ab__bias_resolve; beyond it
 * buckets are saturated or computed directly (see bias-internal.h). */
#define T5_LUT_MAX ((int64_t)1 << 16)

/* Rows per job piece are chosen so a piece writes about this many bytes:
 * large enough to amortise the per-piece work, small enough to balance
 * two threads on a 4096-row table. */
#define PIECE_BYTES ((int64_t)1 << 20)

/* ==== names and defaults ================================================= */

static const char *const g_method_names[AB_BIAS_METHOD_LAST_] = {
    "none", "alibi", "t5", "fire", "kerple"};

int ab_bias_method_parse(const char *name)
{
  int i;

  if (!name)
    return -1;
  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++)
    if (strcmp(name, g_method_names[i]) == 0)
      return i;
  return -1;
}

const char *ab_bias_method_name(enum ab_bias_method m)
{
  if ((int)m < 0 || m >= AB_BIAS_METHOD_LAST_)
    return "unknown";
  return g_method_names[m];
}

void ab_bias_params_init(struct ab_bias_params *p)
{
  if (!p)
    return;
  memset(p, 0, sizeof *p); /* method none; every pointer NULL, eps 0 */
  p->max_bias = 8.0;
  p->bidirectional = 1;
  p->max_distance = 128;
  /* FIRE's c and L have no default (the client passes them): NaN marks
   * them absent so that forgetting one is an error, not a silent value. */
  p->c = NAN;
  p->L = NAN;
}

void ab_geometry_init(struct ab_geometry *g, int64_t q_len, int64_t k_len)
{
  if (!g)
    return;
  g->q_len = q_len;
  g->k_len = k_len;
  g->q_offset = k_len - q_len; /* bottom-right: queries are the last rows */
  g->causal = 0;
  g->window_left = -1;
  g->window_right = -1;
}

/* ==== ALiBi slopes ======================================================= */

enum ab_status ab_alibi_slopes(int64_t num_heads, double max_bias,
                               float *slopes)
{
  int64_t h, p2 = 1;

  if (num_heads < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "num_heads",
                    "num_heads %lld must be >= 1", (long long)num_heads);
  if (!(max_bias >= 0.0) || !isfinite(max_bias))
    return ab__fail(AB_STATUS_INVALID_ARG, "max_bias",
                    "max_bias %g must be a finite number >= 0", max_bias);
  if (!slopes)
    return ab__fail(AB_STATUS_INVALID_ARG, "slopes", "slopes is NULL");
  /* ggml: n_head_log2 = 2^floor(log2 n); m0 = 2^(-max_bias/n_head_log2)
   * for the first n_head_log2 heads (powers 1, 2, ...), m1 =
   * 2^(-max_bias/2/n_head_log2) at odd powers 1, 3, 5, ... for the rest
   * (the even-indexed slopes of the 2*n_head_log2 series of the paper).
   * Exponents are formed exactly and raised once, in double. */
  while (p2 <= num_heads / 2)
    p2 *= 2;
  for (h = 0; h < num_heads; h++) {
    double e;
    if (h < p2)
      e = -max_bias * (double)(h + 1) / (double)p2;
    else
      e = -(max_bias / 2.0) * (double)(2 * (h - p2) + 1) / (double)p2;
    slopes[h] = (float)exp2(e);
  }
  return AB_STATUS_OK;
}

/* ==== T5 buckets ========================================================= */

/* ab_t5_check, naming `nb_arg` for a bad bucket count: the table, whose
 * rows it is, or relative_attention_num_buckets when there is no table. */
static enum ab_status t5_check(int64_t num_buckets, int bidirectional,
                               int64_t max_distance, const char *nb_arg)
{
  int64_t nbd, max_exact;

  if (num_buckets < 1 || num_buckets > T5_MAX_BUCKETS)
    return ab__fail(AB_STATUS_INVALID_ARG, nb_arg,
                    "num_buckets %lld is not in 1..%lld",
                    (long long)num_buckets, (long long)T5_MAX_BUCKETS);
  nbd = bidirectional ? num_buckets / 2 : num_buckets;
  max_exact = nbd / 2;
  /* HF divides by max_exact: zero exact buckets would be log(n/0). */
  if (max_exact < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, nb_arg,
                    "num_buckets %lld leaves no exact bucket (%s needs at "
                    "least %d)",
                    (long long)num_buckets,
                    bidirectional ? "bidirectional" : "causal",
                    bidirectional ? 4 : 2);
  if (max_distance <= max_exact)
    return ab__fail(AB_STATUS_INVALID_ARG, "relative_attention_max_distance",
                    "relative_attention_max_distance %lld must exceed "
                    "max_exact %lld (half of the %lld buckets of one "
                    "direction)",
                    (long long)max_distance, (long long)max_exact,
                    (long long)nbd);
  return AB_STATUS_OK;
}

enum ab_status ab_t5_check(int64_t num_buckets, int bidirectional,
                           int64_t max_distance)
{
  return t5_check(num_buckets, bidirectional, max_distance, "table");
}

/* Bucket within one direction of the distance n >= 0, with nbd buckets
 * per direction: Hugging Face's _relative_position_bucket step by step in
 * float32 --
 *   max_exact + (log(n.float() / max_exact) / math.log(md / max_exact)
 *                * (nbd - max_exact)).to(long), then min(., nbd - 1)
 * where the tensor op with a Python scalar rounds the scalar to float32
 * first, math.log runs in double, and .to(long) truncates.  log(0) is
 * never evaluated (HF computes it and discards it through torch.where). */
static int64_t t5_mag_bucket(int64_t n, int64_t nbd, int64_t md)
{
  const int64_t max_exact = nbd / 2;
  float ratio, r;

  if (n < max_exact)
    return n;
  ratio = (float)n / (float)max_exact;
  r = logf(ratio) / (float)log((double)md / (double)max_exact) *
      (float)(nbd - max_exact);
  /* Compare before converting: r may be far beyond int64 for absurd
   * parameters; the clamp decides the same either way. */
  if (r >= (float)(nbd - 1 - max_exact))
    return nbd - 1;
  return max_exact + (int64_t)r;
}

/* T5's split of rel = key - query into a bucket offset (0, or nbd for keys
 * after the query of a bidirectional table) and the distance n >= 0 bucketed
 * within that direction's *nbd buckets; causal tables put every key after
 * the query at distance 0.  rel > INT64_MIN (negating it cannot overflow). */
static int64_t t5_split(int64_t rel, int64_t num_buckets, int bidirectional,
                        int64_t *nbd, int64_t *n)
{
  if (!bidirectional) {
    *nbd = num_buckets;
    *n = rel < 0 ? -rel : 0;
    return 0;
  }
  *nbd = num_buckets / 2;
  *n = rel < 0 ? -rel : rel;
  return rel > 0 ? *nbd : 0;
}

int32_t ab_t5_bucket(int64_t rel, int64_t num_buckets, int bidirectional,
                     int64_t max_distance)
{
  int64_t nbd, n, ret;

  if (ab_t5_check(num_buckets, bidirectional, max_distance) != AB_STATUS_OK)
    return -1;
  if (rel < -INT64_MAX) {
    ab__fail(AB_STATUS_OUT_OF_RANGE, "rel", "rel %lld has no distance in "
             "int64", (long long)rel);
    return -1;
  }
  ret = t5_split(rel, num_buckets, bidirectional, &nbd, &n);
  return (int32_t)(ret + t5_mag_bucket(n, nbd, max_distance));
}

int32_t ab__t5_bucket_of(const struct ab__bias *b, int64_t rel)
{
  int64_t nbd, n, mb;
  const int64_t ret = t5_split(rel, b->t5_buckets, b->t5_bidirectional, &nbd,
                               &n);

  if (n < b->t5_lut_n)
    mb = b->t5_lut[n];
  else if (b->t5_saturated)
    mb = nbd - 1;
  else
    mb = t5_mag_bucket(n, nbd, b->t5_max_distance);
  return (int32_t)(ret + mb);
}

/* ==== validation ========================================================= */

static enum ab_status check_geometry(const struct ab_geometry *g)
{
  if (!g)
    return ab__fail(AB_STATUS_INVALID_ARG, "geometry", "geometry is NULL");
  if (g->q_len < 1)
    return ab__fail(AB_STATUS_BAD_SHAPE, "q_len", "q_len %lld must be >= 1",
                    (long long)g->q_len);
  if (g->k_len < 1)
    return ab__fail(AB_STATUS_BAD_SHAPE, "k_len", "k_len %lld must be >= 1",
                    (long long)g->k_len);
  if (g->q_len > POS_LIMIT)
    return ab__fail(AB_STATUS_OVERFLOW, "q_len", "q_len %lld exceeds 2^61",
                    (long long)g->q_len);
  if (g->k_len > POS_LIMIT)
    return ab__fail(AB_STATUS_OVERFLOW, "k_len", "k_len %lld exceeds 2^61",
                    (long long)g->k_len);
  if (g->q_offset < -POS_LIMIT || g->q_offset > POS_LIMIT)
    return ab__fail(AB_STATUS_OUT_OF_RANGE, "q_offset",
                    "q_offset %lld is outside +-2^61",
                    (long long)g->q_offset);
  if (g->window_left < -1 || g->window_right < -1)
    return ab__fail(AB_STATUS_INVALID_ARG, "window",
                    "window [%lld, %lld] must hold values >= 0 or -1 "
                    "(unbounded)",
                    (long long)g->window_left, (long long)g->window_right);
  return AB_STATUS_OK;
}

/* A per-head array, given in one of its two forms (float f or double d):
 * present, finite, lo < v (or lo <= v when lo_inclusive) and v <= hi. */
static enum ab_status check_head_array(const float *f, const double *d,
                                       int64_t H, const char *name, double lo,
                                       int lo_inclusive, double hi,
                                       const char *range)
{
  char arg[48];
  int64_t h;

  if (f && d)
    return ab__fail(AB_STATUS_INVALID_ARG, name,
                    "%s is given twice (float and double forms); give one",
                    name);
  if (!f && !d)
    return ab__fail(AB_STATUS_INVALID_ARG, name,
                    "%s [%lld] is required", name, (long long)H);
  for (h = 0; h < H; h++) {
    const double v = d ? d[h] : (double)f[h];
    if (!isfinite(v) || (lo_inclusive ? v < lo : v <= lo) || v > hi) {
      snprintf(arg, sizeof arg, "%s.%lld", name, (long long)h);
      return ab__fail(AB_STATUS_INVALID_ARG, arg, "%s[%lld] = %g must be %s",
                      name, (long long)h, v, range);
    }
  }
  return AB_STATUS_OK;
}

static enum ab_status check_fire(const struct ab_bias_params *p, int64_t H)
{
  char arg[48];
  enum ab_status st;
  int64_t in = 1;
  int l;

  /* The model's learned float32 scalars: within float32's range, c * L and
   * c * distance stay finite in double (psi = log1p(c x) would be inf, and
   * inf / inf a NaN). */
  if (!(p->c > 0.0) || !(p->c <= FLT_MAX))
    return ab__fail(AB_STATUS_INVALID_ARG, "c",
                    "c %g must be given, > 0 and a finite float32 (<= %g)",
                    p->c, (double)FLT_MAX);
  if (!(p->L >= 0.0) || !(p->L <= FLT_MAX))
    return ab__fail(AB_STATUS_INVALID_ARG, "L",
                    "L %g must be given, >= 0 and a finite float32 (<= %g)",
                    p->L, (double)FLT_MAX);
  if (!(p->eps >= 0.0) || !(p->eps <= FLT_MAX))
    return ab__fail(AB_STATUS_INVALID_ARG, "eps",
                    "eps %g must be >= 0 and a finite float32 (<= %g)",
                    p->eps, (double)FLT_MAX);
  if (p->n_layers < 1 || p->n_layers > AB__FIRE_MAX_LAYERS)
    return ab__fail(AB_STATUS_INVALID_ARG, "layers",
                    "%d layers given; FIRE needs 1..%d", p->n_layers,
                    AB__FIRE_MAX_LAYERS);
  if (!p->layers)
    return ab__fail(AB_STATUS_INVALID_ARG, "layers", "layers is NULL");
  for (l = 0; l < p->n_layers; l++) {
    const struct ab_tensor *w = p->layers[l].weight, *bb = p->layers[l].bias;
    int64_t out;
    snprintf(arg, sizeof arg, "layers.%d.weight", l);
    if ((st = ab__check_tensor(w, arg, 0)) != AB_STATUS_OK)
      return st;
    if (w->ndim != 2)
      return ab__fail(AB_STATUS_BAD_SHAPE, arg,
                      "layer %d weight has rank %d; it must be [out, in]", l,
                      (int)w->ndim);
    out = w->shape[0];
    if (w->shape[1] != in)
      return ab__fail(AB_STATUS_BAD_SHAPE, arg,
                      "layer %d weight is [%lld, %lld] but its input has "
                      "%lld features (%s)",
                      l, (long long)w->shape[0], (long long)w->shape[1],
                      (long long)in,
                      l == 0 ? "FIRE's input is the scalar distance"
                             : "the previous layer's output size");
    if (out > AB__FIRE_MAX_WIDTH)
      return ab__fail(AB_STATUS_BAD_SHAPE, arg,
                      "layer %d has %lld outputs; at most %d are supported",
                      l, (long long)out, AB__FIRE_MAX_WIDTH);
    if (bb) {
      snprintf(arg, sizeof arg, "layers.%d.bias", l);
      if ((st = ab__check_tensor(bb, arg, 0)) != AB_STATUS_OK)
        return st;
      if (bb->ndim != 1 || bb->shape[0] != out)
        return ab__fail(AB_STATUS_BAD_SHAPE, arg,
                        "layer %d bias must be [%lld] (the weight's rows)", l,
                        (long long)out);
    }
    in = out;
  }
  if (in != H && in != 1) {
    snprintf(arg, sizeof arg, "layers.%d.weight", p->n_layers - 1);
    return ab__fail(AB_STATUS_BAD_SHAPE, arg,
                    "the last layer has %lld outputs; it must have num_heads "
                    "(%lld) or 1",
                    (long long)in, (long long)H);
  }
  return AB_STATUS_OK;
}

/* T5: the table [num_buckets, num_heads], or (for buckets alone) no table
 * and num_buckets.  A num_buckets given with a table must be its rows. */
static enum ab_status check_t5(const struct ab_bias_params *p, int64_t H)
{
  const struct ab_tensor *t = p->table;
  enum ab_status st;

  if (p->num_buckets < 0)
    return ab__fail(AB_STATUS_INVALID_ARG, "relative_attention_num_buckets",
                    "relative_attention_num_buckets %lld must be >= 1 (or "
                    "0: the table's rows)",
                    (long long)p->num_buckets);
  if (!t) {
    if (p->num_buckets == 0)
      return ab__fail(AB_STATUS_INVALID_ARG, "table",
                      "t5 needs table [num_buckets, num_heads] (buckets "
                      "alone need only num_buckets)");
    return t5_check(p->num_buckets, p->bidirectional, p->max_distance,
                    "relative_attention_num_buckets");
  }
  if ((st = ab__check_tensor(t, "table", 0)) != AB_STATUS_OK)
    return st;
  if (t->ndim != 2 || t->shape[1] != H)
    return ab__fail(AB_STATUS_BAD_SHAPE, "table",
                    "table must be [num_buckets, num_heads = %lld]; got "
                    "rank %d with %lld columns",
                    (long long)H, (int)t->ndim,
                    (long long)t->shape[t->ndim - 1]);
  if (p->num_buckets != 0 && p->num_buckets != t->shape[0])
    return ab__fail(AB_STATUS_INVALID_ARG, "relative_attention_num_buckets",
                    "relative_attention_num_buckets %lld disagrees with the "
                    "table's %lld rows",
                    (long long)p->num_buckets, (long long)t->shape[0]);
  return ab_t5_check(t->shape[0], p->bidirectional, p->max_distance);
}

/* Validate p for H heads; nothing is allocated. */
static enum ab_status check_params(const struct ab_bias_params *p, int64_t H)
{
  enum ab_status st;

  if (H < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "num_heads",
                    "num_heads %lld must be >= 1", (long long)H);
  switch (p->method) {
  case AB_BIAS_NONE:
    return AB_STATUS_OK;
  case AB_BIAS_ALIBI:
    /* The table is a float32 product: slopes must be finite as float32. */
    if (p->slopes || p->slopes_f64)
      return check_head_array(p->slopes, p->slopes_f64, H, "slopes",
                              -(double)FLT_MAX, 1, (double)FLT_MAX,
                              "finite in float32");
    if (!(p->max_bias >= 0.0) || !isfinite(p->max_bias))
      return ab__fail(AB_STATUS_INVALID_ARG, "max_bias",
                      "max_bias %g must be a finite number >= 0",
                      p->max_bias);
    return AB_STATUS_OK;
  case AB_BIAS_T5:
    return check_t5(p, H);
  case AB_BIAS_FIRE:
    return check_fire(p, H);
  case AB_BIAS_KERPLE:
    if (p->kerple_power != 0 && p->kerple_power != 1)
      return ab__fail(AB_STATUS_INVALID_ARG, "variant",
                      "kerple variant %d is not log (0) or power (1)",
                      p->kerple_power);
    if ((st = check_head_array(p->r1, p->r1_f64, H, "r1", 0.0, 0, INFINITY,
                               "finite and > 0")) != AB_STATUS_OK)
      return st;
    return check_head_array(p->r2, p->r2_f64, H, "r2", 0.0, 0,
                            p->kerple_power ? 2.0 : INFINITY,
                            p->kerple_power ? "in (0, 2] (power variant)"
                                            : "finite and > 0");
  default:
    return ab__fail(AB_STATUS_INVALID_ARG, "method",
                    "bias method %d is not none, alibi, t5, fire or kerple",
                    (int)p->method);
  }
}

enum ab_status ab_bias_check(const struct ab_bias_params *p)
{
  if (!p)
    return ab__fail(AB_STATUS_INVALID_ARG, "params", "params is NULL");
  return check_params(p, p->num_heads);
}

/* After check_params, for callers that evaluate the bias itself (tables
 * with bias values, attention): T5 without its table gives buckets only. */
static enum ab_status check_values(const struct ab_bias_params *p)
{
  if (p->method == AB_BIAS_T5 && !p->table)
    return ab__fail(AB_STATUS_INVALID_ARG, "table",
                    "t5 bias values need table [num_buckets, num_heads]; "
                    "without it only the buckets can be computed");
  return AB_STATUS_OK;
}

/* ==== resolving ========================================================== */

/* A per-head array in double from whichever form p gives (NULL when out of
 * memory). */
static double *heads_f64(const float *f, const double *d, int64_t H)
{
  double *out = ab__malloc((size_t)H * sizeof *out);
  int64_t h;

  if (out)
    for (h = 0; h < H; h++)
      out[h] = d ? d[h] : (double)f[h];
  return out;
}

/* FIRE's MLP at input x, in double over the parameters as given.  only >= 0
 * computes just that output of the last layer (out[0]); only < 0 all of
 * them.  The accumulation order is the same either way, so one output is
 * bit-identical to the same entry of the full evaluation. */
static void fire_mlp(const struct ab__bias *b, double x, int64_t only,
                     double *out)
{
  double buf[2][AB__FIRE_MAX_WIDTH];
  const double *a = &x;
  const double *prm = b->fire_params;
  int l;

  for (l = 0; l < b->fire_layers; l++) {
    const int64_t in = b->fire_dims[l], nout = b->fire_dims[l + 1];
    const double *W = prm, *bias = prm + nout * in;
    const int last = l == b->fire_layers - 1;
    double *dst = last ? out : buf[l & 1];
    int64_t o0 = 0, o1 = nout, o, i;
    if (last && only >= 0) {
      o0 = only;
      o1 = only + 1;
    }
    for (o = o0; o < o1; o++) {
      double acc = bias[o];
      for (i = 0; i < in; i++)
        acc += W[o * in + i] * a[i];
      if (!last && acc < 0.0) /* ReLU between layers, none after the last */
        acc = 0.0;
      dst[o - o0] = acc;
    }
    a = dst;
    prm += nout * in + nout;
  }
}

/* FIRE's normaliser psi(max(L, p_q)) + eps with psi(t) = ln(c t + 1). */
static double fire_denom(const struct ab__bias *b, int64_t pq)
{
  const double m = (double)pq > b->fire_L ? (double)pq : b->fire_L;
  return log1p(b->fire_c * m) + b->fire_eps;
}

/* FIRE's input for distance t = p_q - j (t <= 0: a key at or after the
 * query, distance 0, so x = 0 whatever the normaliser -- which is also the
 * only case where the normaliser can be 0, at p_q <= 0 with L = eps = 0). */
static double fire_x(const struct ab__bias *b, int64_t t, double denom)
{
  if (t <= 0)
    return 0.0;
  return log1p(b->fire_c * (double)t) / denom;
}

static enum ab_status resolve_fire(const struct ab_bias_params *p,
                                   struct ab__bias *b)
{
  int64_t total = 0, in = 1, nout;
  double f0[AB__FIRE_MAX_WIDTH], *dst;
  int l;

  b->fire_layers = p->n_layers;
  b->fire_dims[0] = 1;
  for (l = 0; l < p->n_layers; l++) {
    nout = p->layers[l].weight->shape[0];
    b->fire_dims[l + 1] = nout;
    total += nout * in + nout;
    in = nout;
  }
  b->fire_params = ab__malloc((size_t)total * sizeof(double));
  b->fire_zero = ab__malloc((size_t)in * sizeof(float));
  if (!b->fire_params || !b->fire_zero)
    return ab__fail(AB_STATUS_NO_MEMORY, "layers",
                    "cannot allocate FIRE's %lld parameters",
                    (long long)total);
  dst = b->fire_params;
  for (l = 0; l < p->n_layers; l++) {
    const int64_t ni = b->fire_dims[l], no = b->fire_dims[l + 1];
    /* Checked already: neither conversion can fail. */
    (void)ab_tensor_to_f64(p->layers[l].weight, dst);
    if (p->layers[l].bias)
      (void)ab_tensor_to_f64(p->layers[l].bias, dst + no * ni);
    else
      memset(dst + no * ni, 0, (size_t)no * sizeof(double));
    dst += no * ni + no;
  }
  b->fire_c = p->c;
  b->fire_L = p->L;
  b->fire_eps = p->eps;
  fire_mlp(b, 0.0, -1, f0);
  for (l = 0; l < in; l++)
    b->fire_zero[l] = (float)f0[l];
  return AB_STATUS_OK;
}

static enum ab_status resolve_t5(const struct ab_bias_params *p,
                                 struct ab__bias *b)
{
  const int64_t nb = p->table ? p->table->shape[0] : p->num_buckets;
  const int64_t nbd = p->bidirectional ? nb / 2 : nb, H = b->num_heads;
  int64_t n;

  b->t5_buckets = nb;
  b->t5_max_distance = p->max_distance;
  b->t5_bidirectional = p->bidirectional != 0;
  if (p->table) { /* else buckets alone */
    b->t5_table = ab__malloc((size_t)(nb * H) * sizeof(float));
    if (!b->t5_table)
      return ab__fail(AB_STATUS_NO_MEMORY, "table",
                      "cannot allocate the T5 table of %lld buckets",
                      (long long)nb);
    (void)ab_tensor_to_f32(p->table, b->t5_table); /* checked: cannot fail */
  }
  /* Buckets up to the first distance that reaches the top bucket; from
   * there on the formula (a chain of monotone roundings) stays at the top.
   * The first pass only finds that distance, so the table is sized to it
   * (about max_distance entries). */
  b->t5_saturated = 0;
  for (n = 0; n < T5_LUT_MAX; n++)
    if (t5_mag_bucket(n, nbd, p->max_distance) == nbd - 1) {
      b->t5_saturated = 1;
      n++;
      break;
    }
  b->t5_lut_n = n;
  b->t5_lut = ab__malloc((size_t)n * sizeof(int32_t));
  if (!b->t5_lut)
    return ab__fail(AB_STATUS_NO_MEMORY, "table",
                    "cannot allocate the T5 bucket table");
  for (n = 0; n < b->t5_lut_n; n++)
    b->t5_lut[n] = (int32_t)t5_mag_bucket(n, nbd, p->max_distance);
  return AB_STATUS_OK;
}

/* ab__bias_resolve after validation: p is valid for H heads and out is
 * zeroed.  Allocates; out owns everything it points to. */
static enum ab_status resolve_checked(const struct ab_bias_params *p,
                                      int64_t H, struct ab__bias *out)
{
  enum ab_status st;
  int64_t h;

  out->method = p->method;
  out->num_heads = H;
  switch (p->method) {
  case AB_BIAS_NONE:
    break;
  case AB_BIAS_ALIBI:
    out->slopes = ab__malloc((size_t)H * sizeof(float));
    if (!out->slopes)
      return ab__fail(AB_STATUS_NO_MEMORY, "slopes",
                      "cannot allocate %lld slopes", (long long)H);
    if (p->slopes)
      memcpy(out->slopes, p->slopes, (size_t)H * sizeof(float));
    else if (p->slopes_f64)
      for (h = 0; h < H; h++) /* rounded once, as ab_alibi_slopes' are */
        out->slopes[h] = (float)p->slopes_f64[h];
    else if ((st = ab_alibi_slopes(H, p->max_bias, out->slopes)) !=
             AB_STATUS_OK)
      return st;
    break;
  case AB_BIAS_T5:
    return resolve_t5(p, out);
  case AB_BIAS_FIRE:
    return resolve_fire(p, out);
  case AB_BIAS_KERPLE:
    out->kerple_power = p->kerple_power;
    out->r1 = heads_f64(p->r1, p->r1_f64, H);
    out->r2 = heads_f64(p->r2, p->r2_f64, H);
    if (!out->r1 || !out->r2)
      return ab__fail(AB_STATUS_NO_MEMORY, "r1",
                      "cannot allocate Kerple's parameters");
    break;
  default:
    break;
  }
  return AB_STATUS_OK;
}

enum ab_status ab__bias_resolve(const struct ab_bias_params *p,
                                int64_t num_heads, struct ab__bias *out)
{
  struct ab_bias_params none;
  enum ab_status st;

  if (!out)
    return ab__fail(AB_STATUS_INVALID_ARG, "bias", "output struct is NULL");
  memset(out, 0, sizeof *out);
  if (!p) {
    ab_bias_params_init(&none);
    p = &none;
  }
  if (p->num_heads != 0 && p->num_heads != num_heads)
    return ab__fail(AB_STATUS_INVALID_ARG, "num_heads",
                    "num_heads %lld differs from the %lld query heads",
                    (long long)p->num_heads, (long long)num_heads);
  if ((st = check_params(p, num_heads)) != AB_STATUS_OK ||
      (st = check_values(p)) != AB_STATUS_OK)
    return st;
  return resolve_checked(p, num_heads, out);
}

void ab__bias_release(struct ab__bias *b)
{
  if (!b)
    return;
  ab__free(b->slopes);
  ab__free(b->r1);
  ab__free(b->r2);
  ab__free(b->t5_table);
  ab__free(b->t5_lut);
  ab__free(b->fire_params);
  ab__free(b->fire_zero);
  ab__free(b->rel_vals);
  ab__free(b->rel_buckets);
  memset(b, 0, sizeof *b);
}

/* ==== evaluation ========================================================= */

/* Kerple at distance d = |p_q - j| in double: log -r1 ln(1 + r2 d), power
 * -r1 d^r2. */
static float kerple_value(const struct ab__bias *b, int64_t h, int64_t d)
{
  const double r1 = b->r1[h], r2 = b->r2[h], dd = (double)d;

  if (b->kerple_power)
    return (float)(-r1 * pow(dd, r2));
  return (float)(-r1 * log1p(r2 * dd));
}

/* Bias of head h at rel = j - p_q for the methods that depend on rel only
 * (T5, Kerple). */
static float rel_value(const struct ab__bias *b, int64_t h, int64_t rel)
{
  if (b->method == AB_BIAS_T5)
    return b->t5_table[(int64_t)ab__t5_bucket_of(b, rel) * b->num_heads + h];
  return kerple_value(b, h, rel < 0 ? -rel : rel);
}

/* Rows of the FIRE table output: dims[n] (num_heads or 1). */
static int64_t fire_out(const struct ab__bias *b)
{
  return b->fire_dims[b->fire_layers];
}

enum ab_status ab__bias_prepare(struct ab__bias *b,
                                const struct ab_geometry *g)
{
  enum ab_status st;
  int64_t heads, pq_max, rel_min, rel_max, i, h;
  int vals = 1; /* per-distance values: all but table-less T5 (buckets) */

  if (!b)
    return ab__fail(AB_STATUS_INVALID_ARG, "bias", "bias is NULL");
  if ((st = check_geometry(g)) != AB_STATUS_OK)
    return st;
  if (b->method != AB_BIAS_T5 && b->method != AB_BIAS_KERPLE &&
      b->method != AB_BIAS_FIRE)
    return AB_STATUS_OK;
  ab__free(b->rel_vals);
  ab__free(b->rel_buckets);
  b->rel_vals = NULL;
  b->rel_buckets = NULL;
  b->rel_n = 0;
  pq_max = g->q_offset + g->q_len - 1;
  rel_min = -pq_max;
  rel_max = g->k_len - 1 - g->q_offset;
  heads = b->num_heads;
  if (b->method == AB_BIAS_T5 && !b->t5_table)
    vals = 0;
  if (b->method == AB_BIAS_FIRE) {
    /* Only rows with p_q <= L share the normaliser psi(L) + eps; their
     * distances are at most min(p_q max, L), so nothing further back is
     * evaluated. */
    double T = (double)pq_max < b->fire_L ? (double)pq_max : floor(b->fire_L);
    if ((double)g->q_offset > b->fire_L)
      return AB_STATUS_OK; /* no row uses the constant normaliser */
    if (T < 0.0)
      T = 0.0;
    if (rel_min < -(int64_t)T)
      rel_min = -(int64_t)T;
    heads = fire_out(b);
  }
  if (rel_min > rel_max)
    return AB_STATUS_OK;
  if (ab_mul_overflow(heads, rel_max - rel_min + 1, &i) ||
      (uint64_t)i > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "bias",
                    "the per-distance bias of %lld heads x %lld distances "
                    "overflows",
                    (long long)heads, (long long)(rel_max - rel_min + 1));
  b->rel_n = rel_max - rel_min + 1;
  b->rel_min = rel_min;
  if (vals)
    b->rel_vals = ab__malloc((size_t)i * sizeof(float));
  if (b->method == AB_BIAS_T5)
    b->rel_buckets = ab__malloc((size_t)b->rel_n * sizeof(int32_t));
  if ((vals && !b->rel_vals) ||
      (b->method == AB_BIAS_T5 && !b->rel_buckets)) {
    ab__free(b->rel_vals);
    ab__free(b->rel_buckets);
    b->rel_vals = NULL;
    b->rel_buckets = NULL;
    b->rel_n = 0;
    return ab__fail(AB_STATUS_NO_MEMORY, "bias",
                    "cannot allocate the per-distance bias of %lld heads x "
                    "%lld distances",
                    (long long)heads, (long long)(rel_max - rel_min + 1));
  }
  if (b->method == AB_BIAS_FIRE) {
    /* q_offset <= L here, so this is the constant psi(L) + eps. */
    const double denom = fire_denom(b, g->q_offset);
    double v[AB__FIRE_MAX_WIDTH];
    for (i = 0; i < b->rel_n; i++) {
      const int64_t t = -(rel_min + i);
      if (t <= 0) {
        for (h = 0; h < heads; h++)
          b->rel_vals[h * b->rel_n + i] = b->fire_zero[h];
        continue;
      }
      fire_mlp(b, fire_x(b, t, denom), -1, v);
      for (h = 0; h < heads; h++)
        b->rel_vals[h * b->rel_n + i] = (float)v[h];
    }
    return AB_STATUS_OK;
  }
  for (i = 0; i < b->rel_n; i++) {
    const int64_t rel = rel_min + i;
    if (b->method == AB_BIAS_T5) {
      const int32_t bk = ab__t5_bucket_of(b, rel);
      b->rel_buckets[i] = bk;
      for (h = 0; vals && h < heads; h++)
        b->rel_vals[h * b->rel_n + i] = b->t5_table[bk * heads + h];
    } else {
      for (h = 0; h < heads; h++)
        b->rel_vals[h * b->rel_n + i] = kerple_value(b, h, rel < 0 ? -rel
                                                                   : rel);
    }
  }
  return AB_STATUS_OK;
}

/* The prepared values for head row hr at rel0 .. rel0 + n - 1, or NULL when
 * that run is not covered. */
static const float *prepared_run(const struct ab__bias *b, int64_t hr,
                                 int64_t rel0, int64_t n)
{
  if (!b->rel_vals || rel0 < b->rel_min ||
      rel0 - b->rel_min + n > b->rel_n)
    return NULL;
  return b->rel_vals + hr * b->rel_n + (rel0 - b->rel_min);
}

void ab__bias_row(const struct ab__bias *b, int64_t h, int64_t pq, int64_t j0,
                  int64_t n, float *out)
{
  const float *src;
  int64_t t;

  if (n <= 0)
    return;
  switch (b->method) {
  case AB_BIAS_ALIBI:
    ab__kernels()->bias.table_alibi(out, n, pq - j0, b->slopes[h], 0);
    return;
  case AB_BIAS_T5:
  case AB_BIAS_KERPLE:
    if ((src = prepared_run(b, h, j0 - pq, n)) != NULL) {
      memcpy(out, src, (size_t)n * sizeof *out);
      return;
    }
    for (t = 0; t < n; t++)
      out[t] = rel_value(b, h, j0 + t - pq);
    return;
  case AB_BIAS_FIRE: {
    const int64_t hr = fire_out(b) == 1 ? 0 : h;
    double denom, v;
    if ((double)pq <= b->fire_L &&
        (src = prepared_run(b, hr, j0 - pq, n)) != NULL) {
      memcpy(out, src, (size_t)n * sizeof *out);
      return;
    }
    denom = fire_denom(b, pq);
    for (t = 0; t < n; t++) {
      const int64_t dist = pq - (j0 + t);
      if (dist <= 0) {
        out[t] = b->fire_zero[hr];
        continue;
      }
      fire_mlp(b, fire_x(b, dist, denom), hr, &v);
      out[t] = (float)v;
    }
    return;
  }
  case AB_BIAS_NONE:
  default:
    memset(out, 0, (size_t)n * sizeof *out);
    return;
  }
}

/* ==== tables ============================================================= */

struct table_ctx {
  struct ab__bias b;
  struct ab_geometry g;
  float *bias;
  int32_t *buckets;
  const struct ab__bias_kernels *k;
  int64_t rows_per_block, nblocks;
  int per_head; /* pieces are (head, block); FIRE: (block), all heads */
  int stream;
};

/* Visible keys of p_q as the inclusive run [*lo, *hi] (empty when
 * lo > hi), the form the row writers use. */
static void visible_run(const struct ab_geometry *g, int64_t pq, int64_t *lo,
                        int64_t *hi)
{
  ab__visible_keys(pq, g->k_len, g->causal, g->window_left, g->window_right,
                   lo, hi);
  *hi -= 1;
}

/* One head's row for every method but FIRE: -inf outside the visible run,
 * the bias inside it. */
static void write_row(const struct table_ctx *c, int64_t h, int64_t pq,
                      int64_t lo, int64_t hi, float *o)
{
  const struct ab__bias_kernels *k = c->k;
  const int64_t kl = c->g.k_len;
  const int s = c->stream;

  if (lo > hi) {
    k->table_fill(o, kl, -INFINITY, s);
    return;
  }
  if (lo > 0)
    k->table_fill(o, lo, -INFINITY, s);
  switch (c->b.method) {
  case AB_BIAS_ALIBI:
    k->table_alibi(o + lo, hi - lo + 1, pq - lo, c->b.slopes[h], s);
    break;
  case AB_BIAS_T5:
  case AB_BIAS_KERPLE:
    /* prepared over the whole rel range of the geometry */
    k->table_copy(o + lo, prepared_run(&c->b, h, lo - pq, hi - lo + 1),
                  hi - lo + 1, s);
    break;
  default:
    k->table_fill(o + lo, hi - lo + 1, 0.0f, s);
    break;
  }
  if (hi < kl - 1)
    k->table_fill(o + hi + 1, kl - 1 - hi, -INFINITY, s);
}

/* Every head's row r of a FIRE table.  Rows with p_q <= L copy the
 * prepared per-distance values; the others evaluate the MLP once per
 * visible distance (each distinct within the row) for all heads at once.
 * FIRE is compute-bound, so these rows use ordinary stores. */
static void write_fire_rows(const struct table_ctx *c, int64_t r, int64_t pq,
                            int64_t lo, int64_t hi)
{
  const struct ab__bias *b = &c->b;
  const struct ab__bias_kernels *k = c->k;
  const int64_t H = b->num_heads, kl = c->g.k_len, q = c->g.q_len;
  const int64_t nout = fire_out(b);
  const int cached = lo <= hi && (double)pq <= b->fire_L &&
                     prepared_run(b, 0, lo - pq, hi - lo + 1) != NULL;
  /* keys after the query (distance 0, x = 0): [after, hi] */
  const int64_t after = pq + 1 > lo ? pq + 1 : lo;
  double v[AB__FIRE_MAX_WIDTH], denom;
  int64_t h, j;

  for (h = 0; h < H; h++) {
    float *o = c->bias + (h * q + r) * kl;
    const int64_t hr = nout == 1 ? 0 : h;
    if (lo > hi) {
      k->table_fill(o, kl, -INFINITY, 0);
      continue;
    }
    if (lo > 0)
      k->table_fill(o, lo, -INFINITY, 0);
    if (hi < kl - 1)
      k->table_fill(o + hi + 1, kl - 1 - hi, -INFINITY, 0);
    if (cached)
      k->table_copy(o + lo, prepared_run(b, hr, lo - pq, hi - lo + 1),
                    hi - lo + 1, 0);
    else if (after <= hi)
      k->table_fill(o + after, hi - after + 1, b->fire_zero[hr], 0);
  }
  if (lo > hi || cached)
    return;
  denom = fire_denom(b, pq);
  for (j = lo; j <= hi && j <= pq; j++) {
    const int64_t dist = pq - j;
    if (dist == 0) {
      for (h = 0; h < H; h++)
        c->bias[(h * q + r) * kl + j] = b->fire_zero[nout == 1 ? 0 : h];
      continue;
    }
    fire_mlp(b, fire_x(b, dist, denom), -1, v);
    for (h = 0; h < H; h++)
      c->bias[(h * q + r) * kl + j] = (float)v[nout == 1 ? 0 : h];
  }
}

static enum ab_status table_run(const struct ab_job *job, int64_t piece,
                                void *scratch)
{
  const struct table_ctx *c = job->ctx;
  const struct ab_geometry *g = &c->g;
  int64_t h = 0, blk, r, r0, r1, lo, hi;

  (void)scratch;
  if (c->per_head) {
    h = piece / c->nblocks;
    blk = piece % c->nblocks;
  } else {
    blk = c->nblocks - 1 - piece; /* later rows see more keys: first */
  }
  r0 = blk * c->rows_per_block;
  r1 = ab__min64(g->q_len, r0 + c->rows_per_block);
  for (r = r0; r < r1; r++) {
    const int64_t pq = g->q_offset + r;
    visible_run(g, pq, &lo, &hi);
    if (c->bias) {
      if (c->b.method == AB_BIAS_FIRE)
        write_fire_rows(c, r, pq, lo, hi);
      else
        write_row(c, h, pq, lo, hi, c->bias + (h * g->q_len + r) * g->k_len);
    }
    /* Buckets ignore the mask; head 0's pieces write them. */
    if (c->buckets && h == 0)
      c->k->table_copy(c->buckets + r * g->k_len,
                       c->b.rel_buckets + (0 - pq - c->b.rel_min), g->k_len,
                       c->stream);
  }
  if (c->stream)
    c->k->store_fence();
  return AB_STATUS_OK;
}

static void table_destroy(struct ab_job *job)
{
  struct table_ctx *c = job->ctx;

  if (c)
    ab__bias_release(&c->b);
}

enum ab_status ab_bias_table_job(const struct ab_bias_params *p,
                                 const struct ab_geometry *g, float *bias,
                                 int32_t *buckets, ab_job_t **job)
{
  struct table_ctx *c;
  struct ab_job *jb;
  enum ab_status st;
  int64_t H, cells, total, bytes, row_bytes;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job is NULL");
  *job = NULL;
  if ((st = ab_bias_check(p)) != AB_STATUS_OK)
    return st;
  if ((st = check_geometry(g)) != AB_STATUS_OK)
    return st;
  if (!bias && !buckets)
    return ab__fail(AB_STATUS_INVALID_ARG, "return",
                    "neither bias nor buckets was requested");
  if (buckets && p->method != AB_BIAS_T5)
    return ab__fail(AB_STATUS_INVALID_ARG, "return",
                    "buckets exist only for method t5, not %s",
                    ab_bias_method_name(p->method));
  if (bias && (st = check_values(p)) != AB_STATUS_OK)
    return st;
  H = p->num_heads;
  if (ab_mul_overflow(g->q_len, g->k_len, &cells) ||
      ab_mul_overflow(cells, H, &total) ||
      (uint64_t)total > SIZE_MAX / sizeof(float) ||
      total > INT64_MAX / (int64_t)sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "k_len",
                    "a table of %lld heads x %lld x %lld overflows",
                    (long long)H, (long long)g->q_len, (long long)g->k_len);
  if ((st = ab__job_new(sizeof *c, &jb)) != AB_STATUS_OK)
    return st;
  jb->run = table_run;
  jb->destroy = table_destroy;
  c = jb->ctx; /* zeroed, as resolve_checked wants it */
  if ((st = resolve_checked(p, H, &c->b)) != AB_STATUS_OK ||
      (st = ab__bias_prepare(&c->b, g)) != AB_STATUS_OK) {
    ab_job_free(jb);
    return st;
  }
  c->g = *g;
  c->bias = bias;
  c->buckets = buckets;
  c->k = &ab__kernels()->bias;
  bytes = (bias ? total : 0) * 4 + (buckets ? cells : 0) * 4;
  c->stream = bytes >= AB__STREAM_BYTES;
  c->per_head = p->method != AB_BIAS_FIRE;
  row_bytes = g->k_len * 4 * (c->per_head ? 1 : H);
  c->rows_per_block = ab__max64(1, PIECE_BYTES / row_bytes);
  c->nblocks = (g->q_len + c->rows_per_block - 1) / c->rows_per_block;
  jb->pieces = c->nblocks * (c->per_head && bias ? H : 1);
  jb->scratch_size = 0;
  jb->flops = (double)(bias ? total : cells);
  if (p->method == AB_BIAS_FIRE) {
    /* about one MLP evaluation per visible cell of rows past L */
    double mlp = 0.0;
    int l;
    for (l = 0; l < c->b.fire_layers; l++)
      mlp += 2.0 * (double)c->b.fire_dims[l] * (double)c->b.fire_dims[l + 1];
    jb->flops += (double)cells * mlp;
  }
  *job = jb;
  return AB_STATUS_OK;
}

enum ab_status ab_bias_table(const struct ab_bias_params *p,
                             const struct ab_geometry *g, float *bias,
                             int32_t *buckets)
{
  ab_job_t *job;
  enum ab_status st;

  if ((st = ab_bias_table_job(p, g, bias, buckets, &job)) != AB_STATUS_OK)
    return st;
  st = ab_job_run_all(job);
  ab_job_free(job);
  return st;
}
