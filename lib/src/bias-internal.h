/* bias-internal.h: a position-bias family resolved for evaluation inside
 * loops -- shared by bias tables (bias.c) and fused attention (attn.c).
 * Owned by bias.c. */
#ifndef AB_BIAS_INTERNAL_H
#define AB_BIAS_INTERNAL_H

#include "ab-internal.h"

/* FIRE limits: fire_dims has room for this many layers, and ab__bias_row
 * keeps two activation vectors of this width on the stack (it may not
 * allocate).  FIRE's MLP in the paper is 32 wide. */
#define AB__FIRE_MAX_LAYERS 16
#define AB__FIRE_MAX_WIDTH 1024

/* Everything needed to evaluate bias(h, p_q, j) without touching the
 * caller's parameter struct again: tables converted to float32, parameters
 * evaluated in double (Kerple's r1 and r2, FIRE's MLP) kept in double,
 * per-head arrays copied.  Immutable after ab__bias_resolve (and the
 * optional ab__bias_prepare), so any number of threads may evaluate it at
 * once. */
struct ab__bias {
  enum ab_bias_method method;
  int64_t num_heads;
  float *slopes;         /* alibi [H] (the kernels multiply in float32) */
  double *r1, *r2;       /* kerple [H] */
  int kerple_power;
  float *t5_table;       /* [num_buckets, H] float32; NULL: buckets alone */
  int64_t t5_buckets, t5_max_distance;
  int t5_bidirectional;
  /* T5: bucket within one direction of the distance n, for n < t5_lut_n.
   * The float32 formula is nondecreasing in n, so once it reaches the top
   * bucket it stays there: when t5_saturated, every n >= t5_lut_n has the
   * top bucket; otherwise (absurd parameters) such n are computed. */
  int32_t *t5_lut;
  int64_t t5_lut_n;
  int t5_saturated;
  /* fire: layers in double, each W [out, in] then b [out] */
  int fire_layers;
  int64_t fire_dims[AB__FIRE_MAX_LAYERS + 1]; /* dims[0] = 1 ... H or 1 */
  double *fire_params;
  double fire_c, fire_L, fire_eps;
  float *fire_zero;      /* [dims[n]]: the MLP at x = 0 (distance 0) */
  /* Filled by ab__bias_prepare for one geometry (NULL otherwise): the bias
   * as a function of rel = j - p_q alone, rel in [rel_min, rel_min+rel_n),
   * per head: T5 and Kerple (every row), FIRE (rows with p_q <= L, whose
   * normaliser is the constant psi(L)+eps; FIRE keeps dims[n] rows).
   * T5 without a table has rel_buckets only. */
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
 * concurrent ab__bias_row.  A no-op for none and ALiBi. */
enum ab_status ab__bias_prepare(struct ab__bias *b,
                                const struct ab_geometry *g);

/* out[t] = bias(h, pq, j0 + t) for t < n: the position bias alone, no mask
 * (FIRE uses distance 0 for keys after the query: docs/methods.md#fire).
 * Thread-safe; allocates nothing. */
void ab__bias_row(const struct ab__bias *b, int64_t h, int64_t pq, int64_t j0,
                  int64_t n, float *out);

/* T5 bucket of rel = key - query for a resolved T5 bias (lookup table). */
int32_t ab__t5_bucket_of(const struct ab__bias *b, int64_t rel);

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
