/* family.h: the operations of one attention-bias family, and the helpers
 * the family files share.  Each family is one file, bias/<family>.c,
 * defining one `struct ab__bias_family`; bias.c dispatches through the
 * table of them (families.def) and owns everything the families share:
 * validation of the geometry, the mask, the table job.  Adding a family:
 * docs/internals/bias-families.md. */
#ifndef AB_BIAS_FAMILY_H
#define AB_BIAS_FAMILY_H

#include "../bias-internal.h"
#include "../kernels/bias.h"

#include <string.h>

struct ab__bias_family {
  const char *name; /* the method's name in the API ("alibi") */
  /* How the resolved bias varies (attention's evaluation follows it). */
  enum ab__bias_kind kind;
  /* Whether the family has buckets: ab_bias_table's buckets output, which
   * prepare leaves in rel_buckets. */
  int buckets;
  /* Validate p's parameters for H >= 1 heads, allocating nothing.  Errors
   * name the fields of the HTTP API's bias object ("slopes.3"). */
  enum ab_status (*check)(const struct ab_bias_params *p, int64_t H);
  /* After check, for callers that evaluate bias values rather than
   * buckets alone; NULL when every valid p has values. */
  enum ab_status (*check_values)(const struct ab_bias_params *p);
  /* Resolve a checked p into b->state (b->fam and b->num_heads are set,
   * the rest zero).  On failure b->state may hold a partial state, which
   * release frees.  NULL: the family keeps no state. */
  enum ab_status (*resolve)(const struct ab_bias_params *p,
                            struct ab__bias *b);
  /* Free b->state; NULL with resolve. */
  void (*release)(void *state);
  /* Fill b->rel_vals / rel_buckets for g (checked; both NULL on entry)
   * with ab__bias_rel_reserve; NULL: nothing to prepare. */
  enum ab_status (*prepare)(struct ab__bias *b, const struct ab_geometry *g);
  /* out[t] = bias(h, pq, j0 + t) for 0 <= t < n (n >= 1), the position
   * bias alone, written through k (`stream` as for the kernels: it never
   * changes the values).  Thread-safe; allocates nothing. */
  void (*span)(const struct ab__bias *b, const struct ab__bias_kernels *k,
               int64_t h, int64_t pq, int64_t j0, int64_t n, float *out,
               int stream);
  /* Optional, for families whose rows are cheaper for all heads at once:
   * write row r (query position pq) of every head of the table `bias`
   * [H, g->q_len, g->k_len], -inf outside the visible keys [lo, hi]
   * (lo > hi: none).  NULL: the table writes each head's row with span. */
  void (*table_rows)(const struct ab__bias *b,
                     const struct ab__bias_kernels *k, float *bias,
                     const struct ab_geometry *g, int64_t r, int64_t pq,
                     int64_t lo, int64_t hi);
  /* Arithmetic per (query, key) cell of a table beyond writing it, for the
   * job's flops; NULL: none. */
  double (*cell_flops)(const struct ab__bias *b);
};

#define AB_BIAS_FAMILY(e, f) extern const struct ab__bias_family ab__bias_##f;
#include "families.def"
#undef AB_BIAS_FAMILY

/* ---- helpers shared by the family files (bias.c) ---------------------- */

/* A per-head array, given in one of its two forms (float f or double d):
 * present, finite, lo < v (or lo <= v when lo_inclusive) and v <= hi;
 * `range` words the condition for the error ("finite and > 0"). */
enum ab_status ab__bias_check_heads(const float *f, const double *d,
                                    int64_t H, const char *name, double lo,
                                    int lo_inclusive, double hi,
                                    const char *range);

/* The rel = j - p_q range [*rel_min, *rel_max] a geometry can ask for. */
void ab__bias_rel_range(const struct ab_geometry *g, int64_t *rel_min,
                        int64_t *rel_max);

/* Allocate b's per-distance tables over [rel_min, rel_max]: rel_vals for
 * `heads` rows when vals, rel_buckets when buckets; sets rel_min and rel_n.
 * An empty range (rel_min > rel_max) allocates nothing and leaves rel_n 0. */
enum ab_status ab__bias_rel_reserve(struct ab__bias *b, int64_t heads,
                                    int64_t rel_min, int64_t rel_max,
                                    int vals, int buckets);

/* The prepared values for head row hr at rel0 .. rel0 + n - 1, or NULL when
 * that run is not covered. */
static inline const float *ab__bias_prepared(const struct ab__bias *b,
                                             int64_t hr, int64_t rel0,
                                             int64_t n)
{
  if (!b->rel_vals || rel0 < b->rel_min ||
      rel0 - b->rel_min + n > b->rel_n)
    return NULL;
  return b->rel_vals + hr * b->rel_n + (rel0 - b->rel_min);
}

/* span for a family whose bias is a function value(b, h, rel) of the
 * distance alone: a copy of the prepared run when there is one, else the
 * values one by one (inlined with the family's value function). */
static inline void ab__bias_span_rel(
    const struct ab__bias *b, const struct ab__bias_kernels *k, int64_t h,
    int64_t pq, int64_t j0, int64_t n, float *out, int stream,
    float (*value)(const struct ab__bias *b, int64_t h, int64_t rel))
{
  const float *src = ab__bias_prepared(b, h, j0 - pq, n);
  int64_t t;

  if (src) {
    k->table_copy(out, src, n, stream);
    return;
  }
  for (t = 0; t < n; t++)
    out[t] = value(b, h, j0 + t - pq);
}

/* prepare for such a family: the value of every head at every rel of the
 * geometry (buckets, when it has them, are filled by the family). */
static inline enum ab_status ab__bias_prepare_rel(
    struct ab__bias *b, const struct ab_geometry *g,
    float (*value)(const struct ab__bias *b, int64_t h, int64_t rel))
{
  int64_t rel_min, rel_max, i, h;
  enum ab_status st;

  ab__bias_rel_range(g, &rel_min, &rel_max);
  if ((st = ab__bias_rel_reserve(b, b->num_heads, rel_min, rel_max, 1, 0)) !=
      AB_STATUS_OK)
    return st;
  for (i = 0; i < b->rel_n; i++)
    for (h = 0; h < b->num_heads; h++)
      b->rel_vals[h * b->rel_n + i] = value(b, h, rel_min + i);
  return AB_STATUS_OK;
}

#endif /* AB_BIAS_FAMILY_H */
