/* kerple.c: Kerple -- the logarithmic kernel -r1 ln(1 + r2 d) and the
 * power kernel -r1 d^r2 of the distance d = |p_q - j|, evaluated in double
 * (docs/methods.md#kerple). */
#include "family.h"

struct kerple {
  double *r1, *r2; /* [H] */
  int power;       /* 0: log, 1: power */
};

static enum ab_status kerple_check(const struct ab_bias_params *p, int64_t H)
{
  enum ab_status st;

  if (p->kerple_power != 0 && p->kerple_power != 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "variant",
                    "kerple variant %d is not log (0) or power (1)",
                    p->kerple_power);
  if ((st = ab__bias_check_heads(p->r1, p->r1_f64, H, "r1", 0.0, 0, INFINITY,
                                 "finite and > 0")) != AB_STATUS_OK)
    return st;
  return ab__bias_check_heads(p->r2, p->r2_f64, H, "r2", 0.0, 0,
                              p->kerple_power ? 2.0 : INFINITY,
                              p->kerple_power ? "in (0, 2] (power variant)"
                                              : "finite and > 0");
}

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

static enum ab_status kerple_resolve(const struct ab_bias_params *p,
                                     struct ab__bias *b)
{
  struct kerple *kp = ab__calloc(1, sizeof *kp);

  b->state = kp;
  if (kp) {
    kp->power = p->kerple_power;
    kp->r1 = heads_f64(p->r1, p->r1_f64, b->num_heads);
    kp->r2 = heads_f64(p->r2, p->r2_f64, b->num_heads);
  }
  if (!kp || !kp->r1 || !kp->r2)
    return ab__fail(AB_STATUS_NO_MEMORY, "r1",
                    "cannot allocate Kerple's parameters");
  return AB_STATUS_OK;
}

static void kerple_release(void *state)
{
  struct kerple *kp = state;

  if (kp) {
    ab__free(kp->r1);
    ab__free(kp->r2);
  }
  ab__free(kp);
}

/* Head h at rel = j - p_q, distance d = |rel|, in double: log
 * -r1 ln(1 + r2 d), power -r1 d^r2. */
static float kerple_value(const struct ab__bias *b, int64_t h, int64_t rel)
{
  const struct kerple *kp = b->state;
  const double r1 = kp->r1[h], r2 = kp->r2[h];
  const double d = (double)(rel < 0 ? -rel : rel);

  if (kp->power)
    return (float)(-r1 * pow(d, r2));
  return (float)(-r1 * log1p(r2 * d));
}

static enum ab_status kerple_prepare(struct ab__bias *b,
                                     const struct ab_geometry *g)
{
  return ab__bias_prepare_rel(b, g, kerple_value);
}

static void kerple_span(const struct ab__bias *b,
                        const struct ab__bias_kernels *k, int64_t h,
                        int64_t pq, int64_t j0, int64_t n, float *out,
                        int stream)
{
  ab__bias_span_rel(b, k, h, pq, j0, n, out, stream, kerple_value);
}

const struct ab__bias_family ab__bias_kerple = {
    .name = "kerple",
    .kind = AB__BIAS_DISTANCE,
    .check = kerple_check,
    .resolve = kerple_resolve,
    .release = kerple_release,
    .prepare = kerple_prepare,
    .span = kerple_span,
};
