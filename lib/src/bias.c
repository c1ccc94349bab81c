/* bias.c: the attention-bias families -- none, ALiBi, T5 buckets, FIRE and
 * Kerple, one file each under bias/ -- behind one table of operations, as
 * full tables (ab_bias_table, ab_bias_table_job) and as the resolved form
 * fused attention evaluates row by row (bias-internal.h).  This file owns
 * what the families share: names, validation of the geometry, the mask and
 * the table job.  Formulas and sources: docs/methods.md#attention-biases. */
#include "bias/family.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <string.h>

/* Positions and the query offset stay within +-2^61 (lengths too), so
 * p_q = q_offset + r, rel = j - p_q and every sum below fit in int64. */
#define POS_LIMIT ((int64_t)1 << 61)

/* Rows per job piece are chosen so a piece writes about this many bytes:
 * large enough to amortise the per-piece work, small enough to balance
 * two threads on a 4096-row table. */
#define PIECE_BYTES ((int64_t)1 << 20)

/* ==== the families ======================================================= */

/* Indexed by enum ab_bias_method; every entry is set (a unit test walks
 * them), and the size check below fails when the enum grows without the
 * list (bias/families.def). */
static const struct ab__bias_family *const g_families[] = {
#define AB_BIAS_FAMILY(e, f) [e] = &ab__bias_##f,
#include "bias/families.def"
#undef AB_BIAS_FAMILY
};
_Static_assert(sizeof g_families / sizeof g_families[0] == AB_BIAS_METHOD_LAST_,
               "one entry of bias/families.def per enum ab_bias_method");

/* The family of method m, NULL when m is not one. */
static const struct ab__bias_family *family_of(enum ab_bias_method m)
{
  if ((int)m < 0 || m >= AB_BIAS_METHOD_LAST_)
    return NULL;
  return g_families[m];
}

int ab_bias_method_parse(const char *name)
{
  int i;

  if (!name)
    return -1;
  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++)
    if (strcmp(name, g_families[i]->name) == 0)
      return i;
  return -1;
}

const char *ab_bias_method_name(enum ab_bias_method m)
{
  const struct ab__bias_family *f = family_of(m);

  return f ? f->name : "unknown";
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
 * bias/family.h. */
enum ab_status ab__bias_check_heads(const float *f, const double *d,
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

/* The unknown method m: the sentence lists the known ones. */
static enum ab_status fail_method(enum ab_bias_method m)
{
  char known[256] = "";
  int i;

  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++) {
    if (i > 0)
      strncat(known, i == AB_BIAS_METHOD_LAST_ - 1 ? " or " : ", ",
              sizeof known - strlen(known) - 1);
    strncat(known, g_families[i]->name, sizeof known - strlen(known) - 1);
  }
  return ab__fail(AB_STATUS_INVALID_ARG, "method",
                  "bias method %d is not %s", (int)m, known);
}

/* Validate p for H heads; nothing is allocated. */
static enum ab_status check_params(const struct ab_bias_params *p, int64_t H)
{
  const struct ab__bias_family *f = family_of(p->method);

  if (H < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "num_heads",
                    "num_heads %lld must be >= 1", (long long)H);
  if (!f)
    return fail_method(p->method);
  return f->check(p, H);
}

enum ab_status ab_bias_check(const struct ab_bias_params *p)
{
  if (!p)
    return ab__fail(AB_STATUS_INVALID_ARG, "params", "params is NULL");
  return check_params(p, p->num_heads);
}

/* After check_params, for callers that evaluate the bias itself (tables
 * with bias values, attention): some families (T5 without its table) give
 * buckets only. */
static enum ab_status check_values(const struct ab_bias_params *p)
{
  const struct ab__bias_family *f = g_families[p->method];

  return f->check_values ? f->check_values(p) : AB_STATUS_OK;
}

/* ==== resolving ========================================================== */

/* ab__bias_resolve after validation: p is valid for H heads and out is
 * zeroed.  Allocates; out owns everything it points to. */
static enum ab_status resolve_checked(const struct ab_bias_params *p,
                                      int64_t H, struct ab__bias *out)
{
  out->fam = g_families[p->method];
  out->num_heads = H;
  return out->fam->resolve ? out->fam->resolve(p, out) : AB_STATUS_OK;
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
  if (b->fam && b->fam->release)
    b->fam->release(b->state);
  ab__free(b->rel_vals);
  ab__free(b->rel_buckets);
  memset(b, 0, sizeof *b);
}

/* ==== evaluation ========================================================= */

enum ab__bias_kind ab__bias_kind(const struct ab__bias *b)
{
  return b->fam ? b->fam->kind : AB__BIAS_ZERO;
}

void ab__bias_rel_range(const struct ab_geometry *g, int64_t *rel_min,
                        int64_t *rel_max)
{
  *rel_min = -(g->q_offset + g->q_len - 1); /* the last row's p_q */
  *rel_max = g->k_len - 1 - g->q_offset;
}

enum ab_status ab__bias_rel_reserve(struct ab__bias *b, int64_t heads,
                                    int64_t rel_min, int64_t rel_max,
                                    int vals, int buckets)
{
  int64_t cells;

  if (rel_min > rel_max)
    return AB_STATUS_OK;
  if (ab_mul_overflow(heads, rel_max - rel_min + 1, &cells) ||
      (uint64_t)cells > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "bias",
                    "the per-distance bias of %lld heads x %lld distances "
                    "overflows",
                    (long long)heads, (long long)(rel_max - rel_min + 1));
  b->rel_n = rel_max - rel_min + 1;
  b->rel_min = rel_min;
  if (vals)
    b->rel_vals = ab__malloc((size_t)cells * sizeof(float));
  if (buckets)
    b->rel_buckets = ab__malloc((size_t)b->rel_n * sizeof(int32_t));
  if ((vals && !b->rel_vals) || (buckets && !b->rel_buckets)) {
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
  return AB_STATUS_OK;
}

enum ab_status ab__bias_prepare(struct ab__bias *b,
                                const struct ab_geometry *g)
{
  enum ab_status st;

  if (!b)
    return ab__fail(AB_STATUS_INVALID_ARG, "bias", "bias is NULL");
  if ((st = check_geometry(g)) != AB_STATUS_OK)
    return st;
  if (!b->fam || !b->fam->prepare)
    return AB_STATUS_OK;
  ab__free(b->rel_vals);
  ab__free(b->rel_buckets);
  b->rel_vals = NULL;
  b->rel_buckets = NULL;
  b->rel_n = 0;
  return b->fam->prepare(b, g);
}

void ab__bias_row(const struct ab__bias *b, int64_t h, int64_t pq, int64_t j0,
                  int64_t n, float *out)
{
  if (n <= 0)
    return;
  b->fam->span(b, &ab__kernels()->bias, h, pq, j0, n, out, 0);
}

/* ==== tables ============================================================= */

struct table_ctx {
  struct ab__bias b;
  struct ab_geometry g;
  float *bias;
  int32_t *buckets;
  const struct ab__bias_kernels *k;
  int64_t rows_per_block, nblocks;
  int per_head; /* pieces are (head, block); else (block), all heads (a
                   * family writing its rows with table_rows) */
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

/* One head's row: -inf outside the visible run, the bias inside it. */
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
  /* T5 and Kerple copy their values, prepared over the whole rel range of
   * the geometry */
  c->b.fam->span(&c->b, k, h, pq, lo, hi - lo + 1, o + lo, s);
  if (hi < kl - 1)
    k->table_fill(o + hi + 1, kl - 1 - hi, -INFINITY, s);
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
      if (c->b.fam->table_rows)
        c->b.fam->table_rows(&c->b, c->k, c->bias, g, r, pq, lo, hi);
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
  if (buckets && !g_families[p->method]->buckets)
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
  c->per_head = c->b.fam->table_rows == NULL;
  row_bytes = g->k_len * 4 * (c->per_head ? 1 : H);
  c->rows_per_block = ab__max64(1, PIECE_BYTES / row_bytes);
  c->nblocks = (g->q_len + c->rows_per_block - 1) / c->rows_per_block;
  jb->pieces = c->nblocks * (c->per_head && bias ? H : 1);
  jb->scratch_size = 0;
  jb->flops = (double)(bias ? total : cells);
  if (c->b.fam->cell_flops)
    jb->flops += (double)cells * c->b.fam->cell_flops(&c->b);
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
