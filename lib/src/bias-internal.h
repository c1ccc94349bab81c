/* bias-internal.h: a position-bias family resolved for evaluation inside
 * loops -- shared by bias tables (bias.c) and fused attention (attn.c).
 * Owned by bias.c. */
#ifndef AB_BIAS_INTERNAL_H
#define AB_BIAS_INTERNAL_H

#include "ab-internal.h"

/* Everything needed to evaluate bias(h, p_q, j) without touching the
 * caller's parameter struct again: parameters converted to float32/double,
 * per-head arrays copied.  Immutable after ab__bias_resolve, so any number
 * of threads may evaluate it at once. */
struct ab__bias {
  enum ab_bias_method method;
  int64_t num_heads;
  float *slopes;         /* alibi [H]; kerple r1 [H] */
  float *r2;             /* kerple [H] */
  int kerple_power;
  float *t5_table;       /* [num_buckets, H] float32 */
  int64_t t5_buckets, t5_max_distance;
  int t5_bidirectional;
  /* fire: layers as float32, each W [out, in] then b [out] */
  int fire_layers;
  int64_t fire_dims[17]; /* dims[0] = 1 ... dims[n] = H or 1 */
  float *fire_params;
  double fire_c, fire_L, fire_eps;
};

/* Validate p for num_heads query heads and resolve it (allocates; release
 * with ab__bias_release even on failure).  p may be NULL (method none). */
enum ab_status ab__bias_resolve(const struct ab_bias_params *p,
                                int64_t num_heads, struct ab__bias *out);
void ab__bias_release(struct ab__bias *b);

/* out[t] = bias(h, pq, j0 + t) for t < n: the position bias alone, no mask
 * (FIRE uses distance 0 for keys after the query, as the spec says).
 * Thread-safe; allocates nothing. */
void ab__bias_row(const struct ab__bias *b, int64_t h, int64_t pq, int64_t j0,
                  int64_t n, float *out);

/* The mask predicate shared by tables and attention: 1 when key j is
 * visible from query position pq under causal/window (kv_lens aside). */
static inline int ab__visible(int64_t pq, int64_t j, int causal,
                              int64_t wl, int64_t wr)
{
  if (causal && j > pq)
    return 0;
  if (wl >= 0 && j < pq - wl)
    return 0;
  if (wr >= 0 && j > pq + wr)
    return 0;
  return 1;
}

#endif /* AB_BIAS_INTERNAL_H */
