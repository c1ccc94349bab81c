/* t5.c: T5's relative position buckets (Hugging Face's
 * _relative_position_bucket, reproduced in its float32 arithmetic) and the
 * learned [num_buckets, num_heads] table they index
 * (docs/methods.md#t5-buckets).  Without the table only the buckets can be
 * computed. */
#include "family.h"

/* A T5 bucket count above 2^24 could not be represented exactly in the
 * float32 arithmetic Hugging Face uses; nobody trains such a table. */
#define T5_MAX_BUCKETS ((int64_t)1 << 24)

/* Largest bucket lookup table (distances) built by resolve; beyond it
 * buckets are saturated or computed directly (see struct t5). */
#define T5_LUT_MAX ((int64_t)1 << 16)

struct t5 {
  float *table; /* [buckets, H] float32; NULL: buckets alone */
  int64_t buckets, max_distance;
  int bidirectional;
  /* Bucket within one direction of the distance n, for n < lut_n.  The
   * float32 formula is nondecreasing in n, so once it reaches the top
   * bucket it stays there: when saturated, every n >= lut_n has the top
   * bucket; otherwise (absurd parameters) such n are computed. */
  int32_t *lut;
  int64_t lut_n;
  int saturated;
};

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

enum ab_status ab_t5_bucket_starts(int64_t num_buckets, int bidirectional,
                                   int64_t max_distance, int64_t *first)
{
  const int64_t nbd = bidirectional ? num_buckets / 2 : num_buckets;
  enum ab_status st;
  int64_t b;

  if ((st = ab_t5_check(num_buckets, bidirectional, max_distance)))
    return st;
  if (!first)
    return ab__fail(AB_STATUS_INVALID_ARG, "first", "first is NULL");
  /* The bucket of a distance never decreases with it (a chain of monotone
   * roundings), and the top bucket is reached by max_distance at the
   * latest (the logarithm's quotient is then 1, give or take a rounding,
   * and the result is clamped).  So the smallest distance of each bucket
   * is a bisection over [0, max_distance], whatever max_distance is. */
  for (b = 0; b < nbd; b++) {
    int64_t lo = 0, hi = max_distance; /* bucket(hi) >= b */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (t5_mag_bucket(mid, nbd, max_distance) >= b)
        hi = mid;
      else
        lo = mid + 1;
    }
    first[b] = t5_mag_bucket(lo, nbd, max_distance) == b ? lo : -1;
  }
  return AB_STATUS_OK;
}

/* Bucket of rel = key - query for a resolved T5 bias (lookup table). */
static int32_t t5_bucket_of(const struct t5 *t, int64_t rel)
{
  int64_t nbd, n, mb;
  const int64_t ret = t5_split(rel, t->buckets, t->bidirectional, &nbd, &n);

  if (n < t->lut_n)
    mb = t->lut[n];
  else if (t->saturated)
    mb = nbd - 1;
  else
    mb = t5_mag_bucket(n, nbd, t->max_distance);
  return (int32_t)(ret + mb);
}

/* T5: the table [num_buckets, num_heads], or (for buckets alone) no table
 * and num_buckets.  A num_buckets given with a table must be its rows. */
static enum ab_status t5_check_params(const struct ab_bias_params *p,
                                      int64_t H)
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

/* Bias values need the table: without it only the buckets exist. */
static enum ab_status t5_check_values(const struct ab_bias_params *p)
{
  if (!p->table)
    return ab__fail(AB_STATUS_INVALID_ARG, "table",
                    "t5 bias values need table [num_buckets, num_heads]; "
                    "without it only the buckets can be computed");
  return AB_STATUS_OK;
}

static enum ab_status t5_resolve(const struct ab_bias_params *p,
                                 struct ab__bias *b)
{
  const int64_t nb = p->table ? p->table->shape[0] : p->num_buckets;
  const int64_t nbd = p->bidirectional ? nb / 2 : nb, H = b->num_heads;
  struct t5 *t = ab__calloc(1, sizeof *t);
  int64_t n;

  b->state = t;
  if (!t)
    return ab__fail(AB_STATUS_NO_MEMORY, "table",
                    "cannot allocate the T5 parameters");
  t->buckets = nb;
  t->max_distance = p->max_distance;
  t->bidirectional = p->bidirectional != 0;
  if (p->table) { /* else buckets alone */
    t->table = ab__malloc((size_t)(nb * H) * sizeof(float));
    if (!t->table)
      return ab__fail(AB_STATUS_NO_MEMORY, "table",
                      "cannot allocate the T5 table of %lld buckets",
                      (long long)nb);
    (void)ab_tensor_to_f32(p->table, t->table); /* checked: cannot fail */
  }
  /* Buckets up to the first distance that reaches the top bucket; from
   * there on the formula (a chain of monotone roundings) stays at the top.
   * The first pass only finds that distance, so the table is sized to it
   * (about max_distance entries). */
  t->saturated = 0;
  for (n = 0; n < T5_LUT_MAX; n++)
    if (t5_mag_bucket(n, nbd, p->max_distance) == nbd - 1) {
      t->saturated = 1;
      n++;
      break;
    }
  t->lut_n = n;
  t->lut = ab__malloc((size_t)n * sizeof(int32_t));
  if (!t->lut)
    return ab__fail(AB_STATUS_NO_MEMORY, "table",
                    "cannot allocate the T5 bucket table");
  for (n = 0; n < t->lut_n; n++)
    t->lut[n] = (int32_t)t5_mag_bucket(n, nbd, p->max_distance);
  return AB_STATUS_OK;
}

static void t5_release(void *state)
{
  struct t5 *t = state;

  if (t) {
    ab__free(t->table);
    ab__free(t->lut);
  }
  ab__free(t);
}

/* Head h's table entry at rel = j - p_q (a table is there: check_values). */
static float t5_value(const struct ab__bias *b, int64_t h, int64_t rel)
{
  const struct t5 *t = b->state;

  return t->table[(int64_t)t5_bucket_of(t, rel) * b->num_heads + h];
}

/* The bucket of every rel of the geometry, and with a table the value of
 * every head there. */
static enum ab_status t5_prepare(struct ab__bias *b,
                                 const struct ab_geometry *g)
{
  const struct t5 *t = b->state;
  const int64_t H = b->num_heads;
  int64_t rel_min, rel_max, i, h;
  enum ab_status st;

  ab__bias_rel_range(g, &rel_min, &rel_max);
  if ((st = ab__bias_rel_reserve(b, H, rel_min, rel_max, t->table != NULL,
                                 1)) != AB_STATUS_OK)
    return st;
  for (i = 0; i < b->rel_n; i++) {
    const int32_t bk = t5_bucket_of(t, rel_min + i);
    b->rel_buckets[i] = bk;
    for (h = 0; t->table && h < H; h++)
      b->rel_vals[h * b->rel_n + i] = t->table[bk * H + h];
  }
  return AB_STATUS_OK;
}

static void t5_span(const struct ab__bias *b, const struct ab__bias_kernels *k,
                    int64_t h, int64_t pq, int64_t j0, int64_t n, float *out,
                    int stream)
{
  ab__bias_span_rel(b, k, h, pq, j0, n, out, stream, t5_value);
}

const struct ab__bias_family ab__bias_t5 = {
    .name = "t5",
    .kind = AB__BIAS_DISTANCE,
    .buckets = 1,
    .check = t5_check_params,
    .check_values = t5_check_values,
    .resolve = t5_resolve,
    .release = t5_release,
    .prepare = t5_prepare,
    .span = t5_span,
};
