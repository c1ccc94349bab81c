/* analysis.c: what a position encoding does with distance, from its
 * parameters alone (docs/methods.md#analysis) -- RoPE's long-term decay and
 * mean cosine against the relative distance, as a call and as a job of
 * distance blocks.  The per-pair frequencies it is given come from
 * ab_rope_pairs / ab_rope_inv_freq (rope.c); T5's bucket starts live with
 * the bucket function in bias.c. */
#include "ab-internal.h"

/* Distances per piece: each costs n_freq sincos pairs, so a few hundred
 * distances of a 64-pair head are about 0.1 ms -- far above the cost of
 * handing a piece out. */
#define DECAY_PIECE_COST ((int64_t)1 << 15)
/* A sincos pair counted as this many flops for budgets. */
#define DECAY_FLOPS_PER_TERM 40.0

/* RoFormer section 3.4.3 and the mean cosine at one distance r: the
 * partial sums S_j = sum_{k<j} e^{i r theta_k} are accumulated in order,
 * so the bound costs no more than the mean. */
static void decay_at(const double *inv_freq, int64_t p, double r,
                     double *bound, double *mean_cos)
{
  double re = 0.0, im = 0.0, sum_abs = 0.0;
  int64_t k;

  for (k = 0; k < p; k++) {
    double a = r * inv_freq[k];
    re += cos(a);
    im += sin(a);
    sum_abs += hypot(re, im); /* |S_{k+1}| */
  }
  if (bound)
    *bound = sum_abs / (double)p;
  if (mean_cos)
    *mean_cos = re / (double)p;
}

static enum ab_status decay_check(const double *inv_freq, int64_t n_freq,
                                  const double *r, int64_t n, double *bound,
                                  double *mean_cos)
{
  int64_t i;

  if (!inv_freq || n_freq < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "inv_freq",
                    "inv_freq needs at least one frequency (got %lld)",
                    (long long)n_freq);
  if (!r || n < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "r",
                    "the decay needs at least one distance (got %lld)",
                    (long long)n);
  if (!bound && !mean_cos)
    return ab__fail(AB_STATUS_INVALID_ARG, "bound",
                    "bound and mean_cos are both NULL: nothing to compute");
  for (i = 0; i < n_freq; i++)
    if (!isfinite(inv_freq[i]))
      return ab__fail(AB_STATUS_INVALID_ARG, "inv_freq",
                      "inv_freq[%lld] is %g, not a finite number",
                      (long long)i, inv_freq[i]);
  for (i = 0; i < n; i++)
    if (!isfinite(r[i]))
      return ab__fail(AB_STATUS_INVALID_ARG, "r",
                      "distance %lld is %g, not a finite number",
                      (long long)i, r[i]);
  return AB_STATUS_OK;
}

enum ab_status ab_rope_decay(const double *inv_freq, int64_t n_freq,
                             const double *r, int64_t n, double *bound,
                             double *mean_cos)
{
  enum ab_status st = decay_check(inv_freq, n_freq, r, n, bound, mean_cos);
  int64_t i;

  if (st)
    return st;
  for (i = 0; i < n; i++)
    decay_at(inv_freq, n_freq, r[i], bound ? &bound[i] : NULL,
             mean_cos ? &mean_cos[i] : NULL);
  return AB_STATUS_OK;
}

/* ==== the job ============================================================ */

struct decay_job {
  const double *inv_freq, *r;
  int64_t n_freq, n, per_piece;
  double *bound, *mean_cos;
};

static enum ab_status decay_run(const struct ab_job *job, int64_t piece,
                                void *scratch)
{
  const struct decay_job *dj = job->ctx;
  int64_t i0 = piece * dj->per_piece, i1 = ab__min64(dj->n, i0 + dj->per_piece);
  int64_t i;

  (void)scratch;
  for (i = i0; i < i1; i++)
    decay_at(dj->inv_freq, dj->n_freq, dj->r[i],
             dj->bound ? &dj->bound[i] : NULL,
             dj->mean_cos ? &dj->mean_cos[i] : NULL);
  return AB_STATUS_OK;
}

enum ab_status ab_rope_decay_job(const double *inv_freq, int64_t n_freq,
                                 const double *r, int64_t n, double *bound,
                                 double *mean_cos, ab_job_t **job)
{
  enum ab_status st;
  struct decay_job *dj;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job is NULL");
  *job = NULL;
  if ((st = decay_check(inv_freq, n_freq, r, n, bound, mean_cos)) !=
      AB_STATUS_OK)
    return st;
  if ((st = ab__job_new(sizeof *dj, job)) != AB_STATUS_OK)
    return st;
  dj = (*job)->ctx;
  dj->inv_freq = inv_freq;
  dj->n_freq = n_freq;
  dj->r = r;
  dj->n = n;
  dj->bound = bound;
  dj->mean_cos = mean_cos;
  dj->per_piece = ab__max64(1, DECAY_PIECE_COST / n_freq);
  (*job)->pieces = (n + dj->per_piece - 1) / dj->per_piece;
  (*job)->flops = DECAY_FLOPS_PER_TERM * (double)n * (double)n_freq;
  (*job)->run = decay_run;
  return AB_STATUS_OK;
}
