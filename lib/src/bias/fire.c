/* fire.c: FIRE -- an MLP of the log-normalised distance
 * psi(p_q - j) / (psi(max(L, p_q)) + eps), psi(t) = ln(c t + 1), evaluated
 * in double (docs/methods.md#fire).  Because the normaliser reads p_q, the
 * bias depends on the query position too: attention evaluates it per row,
 * tables write each row for every head at once (one MLP evaluation per
 * distance). */
#include "family.h"

#include <float.h>
#include <stdio.h>

/* fire.dims has room for this many layers, and a span keeps two
 * activation vectors of this width on the stack (it may not allocate).
 * FIRE's MLP in the paper is 32 wide. */
#define FIRE_MAX_LAYERS 16
#define FIRE_MAX_WIDTH 1024

/* The MLP's layers in double, each W [out, in] then b [out]. */
struct fire {
  int layers;
  int64_t dims[FIRE_MAX_LAYERS + 1]; /* dims[0] = 1 ... H or 1 */
  double *params;
  double c, L, eps;
  float *zero; /* [dims[layers]]: the MLP at x = 0 (distance 0) */
};

static enum ab_status fire_check(const struct ab_bias_params *p, int64_t H)
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
  if (p->n_layers < 1 || p->n_layers > FIRE_MAX_LAYERS)
    return ab__fail(AB_STATUS_INVALID_ARG, "layers",
                    "%d layers given; FIRE needs 1..%d", p->n_layers,
                    FIRE_MAX_LAYERS);
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
    if (out > FIRE_MAX_WIDTH)
      return ab__fail(AB_STATUS_BAD_SHAPE, arg,
                      "layer %d has %lld outputs; at most %d are supported",
                      l, (long long)out, FIRE_MAX_WIDTH);
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

/* FIRE's MLP at input x, in double over the parameters as given.  only >= 0
 * computes just that output of the last layer (out[0]); only < 0 all of
 * them.  The accumulation order is the same either way, so one output is
 * bit-identical to the same entry of the full evaluation. */
static void fire_mlp(const struct fire *f, double x, int64_t only,
                     double *out)
{
  double buf[2][FIRE_MAX_WIDTH];
  const double *a = &x;
  const double *prm = f->params;
  int l;

  for (l = 0; l < f->layers; l++) {
    const int64_t in = f->dims[l], nout = f->dims[l + 1];
    const double *W = prm, *bias = prm + nout * in;
    const int last = l == f->layers - 1;
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

/* Rows of the MLP's output: dims[n] (num_heads or 1). */
static int64_t fire_out(const struct fire *f) { return f->dims[f->layers]; }

/* FIRE's normaliser psi(max(L, p_q)) + eps with psi(t) = ln(c t + 1). */
static double fire_denom(const struct fire *f, int64_t pq)
{
  const double m = (double)pq > f->L ? (double)pq : f->L;
  return log1p(f->c * m) + f->eps;
}

/* FIRE's input for distance t = p_q - j (t <= 0: a key at or after the
 * query, distance 0, so x = 0 whatever the normaliser -- which is also the
 * only case where the normaliser can be 0, at p_q <= 0 with L = eps = 0). */
static double fire_x(const struct fire *f, int64_t t, double denom)
{
  if (t <= 0)
    return 0.0;
  return log1p(f->c * (double)t) / denom;
}

static enum ab_status fire_resolve(const struct ab_bias_params *p,
                                   struct ab__bias *b)
{
  struct fire *f = ab__calloc(1, sizeof *f);
  int64_t total = 0, in = 1, nout;
  double f0[FIRE_MAX_WIDTH], *dst;
  int l;

  b->state = f;
  if (!f)
    return ab__fail(AB_STATUS_NO_MEMORY, "layers",
                    "cannot allocate FIRE's parameters");
  f->layers = p->n_layers;
  f->dims[0] = 1;
  for (l = 0; l < p->n_layers; l++) {
    nout = p->layers[l].weight->shape[0];
    f->dims[l + 1] = nout;
    total += nout * in + nout;
    in = nout;
  }
  f->params = ab__malloc((size_t)total * sizeof(double));
  f->zero = ab__malloc((size_t)in * sizeof(float));
  if (!f->params || !f->zero)
    return ab__fail(AB_STATUS_NO_MEMORY, "layers",
                    "cannot allocate FIRE's %lld parameters",
                    (long long)total);
  dst = f->params;
  for (l = 0; l < p->n_layers; l++) {
    const int64_t ni = f->dims[l], no = f->dims[l + 1];
    /* Checked already: neither conversion can fail. */
    (void)ab_tensor_to_f64(p->layers[l].weight, dst);
    if (p->layers[l].bias)
      (void)ab_tensor_to_f64(p->layers[l].bias, dst + no * ni);
    else
      memset(dst + no * ni, 0, (size_t)no * sizeof(double));
    dst += no * ni + no;
  }
  f->c = p->c;
  f->L = p->L;
  f->eps = p->eps;
  fire_mlp(f, 0.0, -1, f0);
  for (l = 0; l < in; l++)
    f->zero[l] = (float)f0[l];
  return AB_STATUS_OK;
}

static void fire_release(void *state)
{
  struct fire *f = state;

  if (f) {
    ab__free(f->params);
    ab__free(f->zero);
  }
  ab__free(f);
}

/* Only rows with p_q <= L share the normaliser psi(L) + eps; their
 * distances are at most min(p_q max, L), so nothing further back is
 * evaluated.  The prepared rows are the MLP's outputs (num_heads or 1). */
static enum ab_status fire_prepare(struct ab__bias *b,
                                   const struct ab_geometry *g)
{
  const struct fire *f = b->state;
  const int64_t pq_max = g->q_offset + g->q_len - 1, heads = fire_out(f);
  double T = (double)pq_max < f->L ? (double)pq_max : floor(f->L);
  double v[FIRE_MAX_WIDTH], denom;
  int64_t rel_min, rel_max, i, h;
  enum ab_status st;

  if ((double)g->q_offset > f->L)
    return AB_STATUS_OK; /* no row uses the constant normaliser */
  ab__bias_rel_range(g, &rel_min, &rel_max);
  if (T < 0.0)
    T = 0.0;
  if (rel_min < -(int64_t)T)
    rel_min = -(int64_t)T;
  if ((st = ab__bias_rel_reserve(b, heads, rel_min, rel_max, 1, 0)) !=
      AB_STATUS_OK)
    return st;
  /* q_offset <= L here, so this is the constant psi(L) + eps. */
  denom = fire_denom(f, g->q_offset);
  for (i = 0; i < b->rel_n; i++) {
    const int64_t t = -(rel_min + i);
    if (t <= 0) {
      for (h = 0; h < heads; h++)
        b->rel_vals[h * b->rel_n + i] = f->zero[h];
      continue;
    }
    fire_mlp(f, fire_x(f, t, denom), -1, v);
    for (h = 0; h < heads; h++)
      b->rel_vals[h * b->rel_n + i] = (float)v[h];
  }
  return AB_STATUS_OK;
}

static void fire_span(const struct ab__bias *b,
                      const struct ab__bias_kernels *k, int64_t h, int64_t pq,
                      int64_t j0, int64_t n, float *out, int stream)
{
  const struct fire *f = b->state;
  const int64_t hr = fire_out(f) == 1 ? 0 : h;
  const float *src;
  double denom, v;
  int64_t t;

  if ((double)pq <= f->L &&
      (src = ab__bias_prepared(b, hr, j0 - pq, n)) != NULL) {
    k->table_copy(out, src, n, stream);
    return;
  }
  denom = fire_denom(f, pq);
  for (t = 0; t < n; t++) {
    const int64_t dist = pq - (j0 + t);
    if (dist <= 0) {
      out[t] = f->zero[hr];
      continue;
    }
    fire_mlp(f, fire_x(f, dist, denom), hr, &v);
    out[t] = (float)v;
  }
}

/* Every head's row r of a FIRE table.  Rows with p_q <= L copy the
 * prepared per-distance values; the others evaluate the MLP once per
 * visible distance (each distinct within the row) for all heads at once.
 * FIRE is compute-bound, so these rows use ordinary stores. */
static void fire_table_rows(const struct ab__bias *b,
                            const struct ab__bias_kernels *k, float *bias,
                            const struct ab_geometry *g, int64_t r,
                            int64_t pq, int64_t lo, int64_t hi)
{
  const struct fire *f = b->state;
  const int64_t H = b->num_heads, kl = g->k_len, q = g->q_len;
  const int64_t nout = fire_out(f);
  const int cached = lo <= hi && (double)pq <= f->L &&
                     ab__bias_prepared(b, 0, lo - pq, hi - lo + 1) != NULL;
  /* keys after the query (distance 0, x = 0): [after, hi] */
  const int64_t after = pq + 1 > lo ? pq + 1 : lo;
  double v[FIRE_MAX_WIDTH], denom;
  int64_t h, j;

  for (h = 0; h < H; h++) {
    float *o = bias + (h * q + r) * kl;
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
      k->table_copy(o + lo, ab__bias_prepared(b, hr, lo - pq, hi - lo + 1),
                    hi - lo + 1, 0);
    else if (after <= hi)
      k->table_fill(o + after, hi - after + 1, f->zero[hr], 0);
  }
  if (lo > hi || cached)
    return;
  denom = fire_denom(f, pq);
  for (j = lo; j <= hi && j <= pq; j++) {
    const int64_t dist = pq - j;
    if (dist == 0) {
      for (h = 0; h < H; h++)
        bias[(h * q + r) * kl + j] = f->zero[nout == 1 ? 0 : h];
      continue;
    }
    fire_mlp(f, fire_x(f, dist, denom), -1, v);
    for (h = 0; h < H; h++)
      bias[(h * q + r) * kl + j] = (float)v[nout == 1 ? 0 : h];
  }
}

/* About one MLP evaluation per visible cell of rows past L. */
static double fire_cell_flops(const struct ab__bias *b)
{
  const struct fire *f = b->state;
  double mlp = 0.0;
  int l;

  for (l = 0; l < f->layers; l++)
    mlp += 2.0 * (double)f->dims[l] * (double)f->dims[l + 1];
  return mlp;
}

const struct ab__bias_family ab__bias_fire = {
    .name = "fire",
    .kind = AB__BIAS_POSITION,
    .check = fire_check,
    .resolve = fire_resolve,
    .release = fire_release,
    .prepare = fire_prepare,
    .span = fire_span,
    .table_rows = fire_table_rows,
    .cell_flops = fire_cell_flops,
};
