/* alibi.c: ALiBi -- bias -m_h * |p_q - j| with the ggml slopes or the
 * caller's (docs/methods.md#alibi).  The kernels write its rows. */
#include "family.h"

#include <float.h>

struct alibi {
  float *slopes; /* [H] (the kernels multiply in float32) */
};

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

static enum ab_status alibi_check(const struct ab_bias_params *p, int64_t H)
{
  /* The table is a float32 product: slopes must be finite as float32. */
  if (p->slopes || p->slopes_f64)
    return ab__bias_check_heads(p->slopes, p->slopes_f64, H, "slopes",
                                -(double)FLT_MAX, 1, (double)FLT_MAX,
                                "finite in float32");
  if (!(p->max_bias >= 0.0) || !isfinite(p->max_bias))
    return ab__fail(AB_STATUS_INVALID_ARG, "max_bias",
                    "max_bias %g must be a finite number >= 0", p->max_bias);
  return AB_STATUS_OK;
}

static enum ab_status alibi_resolve(const struct ab_bias_params *p,
                                    struct ab__bias *b)
{
  const int64_t H = b->num_heads;
  struct alibi *a = ab__calloc(1, sizeof *a);
  int64_t h;

  b->state = a;
  if (a)
    a->slopes = ab__malloc((size_t)H * sizeof(float));
  if (!a || !a->slopes)
    return ab__fail(AB_STATUS_NO_MEMORY, "slopes",
                    "cannot allocate %lld slopes", (long long)H);
  if (p->slopes)
    memcpy(a->slopes, p->slopes, (size_t)H * sizeof(float));
  else if (p->slopes_f64)
    for (h = 0; h < H; h++) /* rounded once, as ab_alibi_slopes' are */
      a->slopes[h] = (float)p->slopes_f64[h];
  else
    return ab_alibi_slopes(H, p->max_bias, a->slopes);
  return AB_STATUS_OK;
}

static void alibi_release(void *state)
{
  struct alibi *a = state;

  if (a)
    ab__free(a->slopes);
  ab__free(a);
}

static void alibi_span(const struct ab__bias *b,
                       const struct ab__bias_kernels *k, int64_t h,
                       int64_t pq, int64_t j0, int64_t n, float *out,
                       int stream)
{
  const struct alibi *a = b->state;

  k->table_alibi(out, n, pq - j0, a->slopes[h], stream);
}

const struct ab__bias_family ab__bias_alibi = {
    .name = "alibi",
    .kind = AB__BIAS_DISTANCE,
    .check = alibi_check,
    .resolve = alibi_resolve,
    .release = alibi_release,
    .span = alibi_span,
};
