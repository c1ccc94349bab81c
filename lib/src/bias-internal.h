/* bias-internal.h: a position-bias family resolved for evaluation inside
 * loops -- shared by bias tables (bias.c) and fused attention (attn.c).
 * Owned by bias.c. */
#ifndef AB_BIAS_INTERNAL_H
#define AB_BIAS_INTERNAL_H

#include "ab-internal.h"

struct ab__bias_family;

/* Everything needed to evaluate bias(h, p_q, j) without touching the
 * caller's parameter struct again: the family's operations and its
 * resolved parameters (tables converted to float32, parameters evaluated in
 * double kept in double, per-head arrays copied), in a state only the
 * family's own file (bias/<family>.c) reads.  Immutable after
 * ab__bias_resolve (and the optional ab__bias_prepare), so any number of
 * threads may evaluate it at once. */
struct ab__bias {
  const struct ab__bias_family *fam; /* NULL only in a zeroed struct */
  int64_t num_heads;
  void *state;           /* the family's; NULL for none */
  /* Filled by ab__bias_prepare for one geometry (NULL otherwise): the bias
   * as a function of rel = j - p_q alone, rel in [rel_min, rel_min+rel_n),
   * per head row of the family (bias/family.h says which families fill
   * them and for which rows).  T5 without a table has rel_buckets only. */
  float *rel_vals;       /* [heads of the table][rel_n] */
  int32_t *rel_buckets;  /* T5: [rel_n] */
  int64_t rel_min, rel_n;
};

/* Validate p for num_heads query heads and resolve it (allocates; release
 * with ab__bias_release even on failure).  p may be NULL (method none).
 * p->num_heads may be 0 (attention takes the head count from q); when it
 * is set it must equal num_heads.  The result evaluates bias values, so a
 * T5 table is required.  Errors name the fields of the bias object of the
 * HTTP API ("table", "slopes.3", "layers.0.weight"). */
enum ab_status ab__bias_resolve(const struct ab_bias_params *p,
                                int64_t num_heads, struct ab__bias *out);
void ab__bias_release(struct ab__bias *b);

/* Optional: precompute the per-rel tables above for the geometry g (only
 * q_len, k_len and q_offset matter), so ab__bias_row becomes a copy for
 * T5, Kerple and FIRE rows with p_q <= L.  Results are bit-identical with
 * or without it.  Allocates O(H * (q_len + k_len)); call before any
 * concurrent ab__bias_row.  A no-op for families without a prepare step
 * (none, ALiBi). */
enum ab_status ab__bias_prepare(struct ab__bias *b,
                                const struct ab_geometry *g);

/* out[t] = bias(h, pq, j0 + t) for t < n: the position bias alone, no mask
 * (FIRE uses distance 0 for keys after the query: docs/methods.md#fire).
 * Thread-safe; allocates nothing. */
void ab__bias_row(const struct ab__bias *b, int64_t h, int64_t pq, int64_t j0,
                  int64_t n, float *out);

/* How a resolved bias varies, which decides how attention evaluates it:
 * not at all (zero: nothing to add), with rel = j - p_q alone
 * (translation-invariant: tabulated once per distance before the key
 * loop), or with p_q as well (evaluated per row and key tile). */
enum ab__bias_kind {
  AB__BIAS_ZERO,
  AB__BIAS_DISTANCE,
  AB__BIAS_POSITION
};
enum ab__bias_kind ab__bias_kind(const struct ab__bias *b);

/* The mask shared by bias tables and attention: the keys j in [0, k_len)
 * visible from query position pq under causal and the window [wl, wr]
 * (-1 unbounded) form one run, returned as [*lo, *hi) (empty: *lo == *hi).
 * kv_lens enter as k_len.  The comparisons are written as differences
 * (pq - 0 > wl, (k_len - 1) - pq > wr) so that windows up to INT64_MAX
 * cannot overflow while positions and lengths stay within +-2^62. */
static inline void ab__visible_keys(int64_t pq, int64_t k_len, int causal,
                                    int64_t wl, int64_t wr, int64_t *lo,
                                    int64_t *hi)
{
  int64_t a = 0, z = k_len; /* [a, z) */

  if (causal && pq < z - 1)
    z = pq + 1;
  if (wl >= 0 && pq > wl)
    a = pq - wl;
  if (wr >= 0 && z - 1 - pq > wr)
    z = pq + wr + 1;
  *lo = a;
  *hi = z > a ? z : a;
}

#endif /* AB_BIAS_INTERNAL_H */
