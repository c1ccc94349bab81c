/* rope.c: rotary position embeddings (docs/methods.md#rope and its
 * scaling types) -- parameter validation in one place, the
 * frequencies and attention factor of every scaling method, cos/sin tables,
 * and the apply / table jobs whose pieces a caller's pool may split. */
#include "ab-internal.h"
#include "kernels/kernels.h"

#include <float.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define ROPE_TWO_PI 6.283185307179586476925286766559
/* Pairs handled per stack chunk when building tables without allocating
 * (ab_rope_table); head_dim <= 512 fits in one chunk. */
#define ROPE_CHUNK 256
/* Each piece of a table job writes about this many bytes of output: large
 * enough to amortise the call, small enough for two threads to balance. */
#define ROPE_PIECE_BYTES (64 * 1024)
/* The same for apply jobs: consecutive rows of x, so that a pool handing
 * out pieces in order streams x front to back.  On q [1,32,4096,128] 64 KiB
 * to 1 MiB measured the same within noise (the rotation's prefetch runs on
 * past a piece's end); 256 KiB keeps a piece far above the cost of handing
 * it out and still gives 256 pieces.  Small tensors are cut into at least
 * ROPE_APPLY_MIN_PIECES pieces so that a pool still balances them. */
#define ROPE_APPLY_PIECE_BYTES (256 * 1024)
#define ROPE_APPLY_MIN_PIECES 16
/* Bounds head_dim so that every derived size stays far from overflow. */
#define ROPE_MAX_HEAD_DIM ((int64_t)1 << 20)

/* ==== names ============================================================ */

static const char *const g_type_names[AB_ROPE_TYPE_LAST_] = {
    "default",  "linear",   "ntk",      "dynamic", "yarn",
    "llama3",   "longrope", "vision2d", "xpos"};

int ab_rope_type_parse(const char *name)
{
  int i;

  if (!name)
    return -1;
  for (i = 0; i < AB_ROPE_TYPE_LAST_; i++)
    if (strcmp(name, g_type_names[i]) == 0)
      return i;
  /* Names found in published configs: Qwen2-VL says "mrope" (multi-axis
   * comes from mrope_section, the frequencies are the default ones) and
   * early Phi-3 configs say "su" for what HF now calls longrope. */
  if (strcmp(name, "mrope") == 0)
    return AB_ROPE_DEFAULT;
  if (strcmp(name, "su") == 0)
    return AB_ROPE_LONGROPE;
  return -1;
}

const char *ab_rope_type_name(enum ab_rope_type t)
{
  if ((int)t < 0 || t >= AB_ROPE_TYPE_LAST_)
    return "unknown";
  return g_type_names[t];
}

void ab_rope_params_init(struct ab_rope_params *p)
{
  if (!p)
    return;
  memset(p, 0, sizeof *p);
  p->partial_rotary_factor = 1.0;
  p->rope_theta = 10000.0;
  p->rope_type = AB_ROPE_DEFAULT;
  p->factor = -1.0;
  p->beta_fast = 32.0;
  p->beta_slow = 1.0;
  p->attention_factor = -1.0;
  p->mscale = -1.0;
  p->mscale_all_dim = -1.0;
  p->truncate = 1;
  p->low_freq_factor = 1.0;
  p->high_freq_factor = 4.0;
  p->scale_base = 512.0;
  p->gamma = 0.4;
}

/* ==== validation and resolved parameters ================================ */

/* Everything the frequency formulas need, validated once.  `ext` and the
 * section list are the only parts that depend on seq_len (plan_for_len). */
struct rope_plan {
  enum ab_rope_type type;
  int64_t head_dim, rotary_dim;
  int64_t offset; /* first rotated channel (rotary_offset) */
  int64_t half;   /* pairs rotated: rotary_dim / 2 */
  int64_t n_freq; /* distinct frequencies: half, or rotary_dim/4 (vision2d) */
  int n_axes;     /* position rows per token */
  int interleaved;
  double theta;     /* base, after the NTK / dynamic adjustment */
  double theta0;    /* rope_theta as given: the unscaled frequencies' base */
  double factor;    /* resolved scaling factor (1 where unused) */
  double ntk_alpha; /* ntk, dynamic: theta = theta0 * alpha^(r/(r-2)) */
  double attention; /* attention factor: multiplies cos and sin */
  int64_t orig;     /* original context length (dynamic, yarn, llama3,
                       longrope) */
  double yarn_low, yarn_high;     /* ramp ends, in pair index */
  double low_freq, high_freq;     /* llama3 */
  const double *short_f, *long_f; /* longrope, borrowed */
  const double *ext;              /* longrope: the list chosen by seq_len */
  int n_sections;
  int64_t sections[AB_MROPE_MAX_SECTIONS];
  int mrope_interleaved;
  double scale_base, gamma; /* xpos */
};

static int positive(double v) { return isfinite(v) && v > 0; }

/* HF get_mscale: the YaRN attention factor for scale s. */
static double yarn_mscale(double s, double m)
{
  return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0;
}

/* YaRN correction dimension: the pair index whose wavelength turns `rot`
 * times over the original context (HF find_correction_dim). */
static double yarn_corr(double rot, double dim, double base, double len)
{
  return dim * log(len / (rot * ROPE_TWO_PI)) / (2.0 * log(base));
}

static enum ab_status check_factor(const struct ab_rope_params *p,
                                   int required, double dflt, double *out)
{
  const char *name = ab_rope_type_name(p->rope_type);

  if (p->factor < 0) { /* absent */
    if (required)
      return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.factor",
                      "rope_type %s needs rope_scaling.factor", name);
    *out = dflt;
    return AB_STATUS_OK;
  }
  if (!positive(p->factor))
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.factor",
                    "rope_scaling.factor %g must be a positive number",
                    p->factor);
  *out = p->factor;
  return AB_STATUS_OK;
}

/* The original context length: original_max_position_embeddings, else
 * max_position_embeddings (as HF falls back); 0 when neither is set. */
static int64_t orig_len(const struct ab_rope_params *p)
{
  return p->original_max_position_embeddings > 0
             ? p->original_max_position_embeddings
             : p->max_position_embeddings;
}

static enum ab_status check_rotary_dim(const struct ab_rope_params *p,
                                       struct rope_plan *pl)
{
  int64_t r;
  const char *arg = "rotary_dim";

  if (p->head_dim < 1 || p->head_dim > ROPE_MAX_HEAD_DIM)
    return ab__fail(AB_STATUS_INVALID_ARG, "head_dim",
                    "head_dim %lld must be in 1..%lld", (long long)p->head_dim,
                    (long long)ROPE_MAX_HEAD_DIM);
  if (p->rotary_dim != 0) {
    r = p->rotary_dim;
    if (r < 0)
      return ab__fail(AB_STATUS_INVALID_ARG, arg,
                      "rotary_dim %lld must be positive", (long long)r);
  } else {
    double f = p->partial_rotary_factor;
    /* The whole head rotates by default: an odd head_dim is then the
     * head_dim's fault, not the factor's. */
    arg = f == 1.0 ? "head_dim" : "partial_rotary_factor";
    if (!positive(f) || f > 1.0)
      return ab__fail(AB_STATUS_INVALID_ARG, arg,
                      "partial_rotary_factor %g must be in (0, 1]", f);
    /* int(head_dim * partial_rotary_factor), truncated as Python does. */
    r = (int64_t)((double)p->head_dim * f);
    if (r < 2)
      return ab__fail(AB_STATUS_INVALID_ARG, arg,
                      "partial_rotary_factor %g gives rotary_dim %lld for "
                      "head_dim %lld; at least one pair (2) is needed",
                      f, (long long)r, (long long)p->head_dim);
  }
  if (r > p->head_dim)
    return ab__fail(AB_STATUS_INVALID_ARG, arg,
                    "rotary_dim %lld exceeds head_dim %lld", (long long)r,
                    (long long)p->head_dim);
  if (r % 2 != 0)
    return ab__fail(AB_STATUS_INVALID_ARG, arg,
                    "rotary_dim %lld (head_dim %lld) must be even: channels "
                    "rotate in pairs",
                    (long long)r, (long long)p->head_dim);
  if (p->rope_type == AB_ROPE_VISION2D && r % 4 != 0)
    return ab__fail(AB_STATUS_INVALID_ARG, arg,
                    "rotary_dim %lld must be a multiple of 4 for vision2d "
                    "(two axes of rotary_dim/4 frequencies)",
                    (long long)r);
  if (p->rotary_offset < 0 || p->rotary_offset > p->head_dim - r)
    return ab__fail(AB_STATUS_INVALID_ARG, "rotary_offset",
                    "rotary_offset %lld must be in 0..%lld: the %lld rotated "
                    "channels must fit in head_dim %lld",
                    (long long)p->rotary_offset,
                    (long long)(p->head_dim - r), (long long)r,
                    (long long)p->head_dim);
  pl->rotary_dim = r;
  pl->offset = p->rotary_offset;
  pl->half = r / 2;
  pl->n_freq = p->rope_type == AB_ROPE_VISION2D ? r / 4 : r / 2;
  return AB_STATUS_OK;
}

static enum ab_status check_sections(const struct ab_rope_params *p,
                                     struct rope_plan *pl)
{
  const char *arg = "rope_scaling.mrope_section";
  int64_t sum = 0;
  int i;

  pl->n_axes = p->rope_type == AB_ROPE_VISION2D ? 2 : 1;
  if (p->n_mrope_section == 0) {
    if (p->mrope_interleaved)
      return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.mrope_interleaved",
                      "mrope_interleaved needs rope_scaling.mrope_section");
    return AB_STATUS_OK;
  }
  if (p->rope_type == AB_ROPE_VISION2D || p->rope_type == AB_ROPE_XPOS)
    return ab__fail(AB_STATUS_INVALID_ARG, arg,
                    "mrope_section cannot be combined with rope_type %s",
                    ab_rope_type_name(p->rope_type));
  if (p->n_mrope_section != 3 && p->n_mrope_section != 4)
    return ab__fail(AB_STATUS_INVALID_ARG, arg,
                    "mrope_section has %d entries; it needs 3 (t, h, w) or 4",
                    p->n_mrope_section);
  for (i = 0; i < p->n_mrope_section; i++) {
    if (p->mrope_section[i] < 0 || p->mrope_section[i] > pl->half)
      return ab__fail(AB_STATUS_INVALID_ARG, arg,
                      "mrope_section entry %d is %lld; it must be in 0..%lld",
                      i, (long long)p->mrope_section[i], (long long)pl->half);
    pl->sections[i] = p->mrope_section[i];
    sum += p->mrope_section[i];
  }
  if (sum != pl->half)
    return ab__fail(AB_STATUS_INVALID_ARG, arg,
                    "mrope_section sums to %lld; it must sum to rotary_dim/2 "
                    "= %lld",
                    (long long)sum, (long long)pl->half);
  pl->n_sections = p->n_mrope_section;
  pl->n_axes = p->n_mrope_section;
  pl->mrope_interleaved = p->mrope_interleaved != 0;
  return AB_STATUS_OK;
}

/* YaRN and LongRoPE: the original context length and the scaling factor.
 * An explicit factor wins; only when it is absent is it the ratio of the
 * two lengths (docs/methods.md#yarn). */
static enum ab_status check_orig_factor(const struct ab_rope_params *p,
                                        struct rope_plan *pl)
{
  const char *name = ab_rope_type_name(p->rope_type);

  pl->orig = orig_len(p);
  if (pl->orig <= 0)
    return ab__fail(AB_STATUS_INVALID_ARG,
                    "rope_scaling.original_max_position_embeddings",
                    "%s needs rope_scaling.original_max_position_embeddings "
                    "(or max_position_embeddings)",
                    name);
  if (p->factor < 0 && p->max_position_embeddings <= 0)
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.factor",
                    "%s needs rope_scaling.factor, or max_position_embeddings "
                    "with original_max_position_embeddings",
                    name);
  return check_factor(p, 0,
                      (double)p->max_position_embeddings / (double)pl->orig,
                      &pl->factor);
}

/* YaRN and LongRoPE: rope_scaling.attention_factor, when given (>= 0, or
 * NaN to be refused), overrides the method's own; *given says whether it
 * was, and pl->attention holds it then. */
static enum ab_status check_attention_factor(const struct ab_rope_params *p,
                                             struct rope_plan *pl, int *given)
{
  *given = p->attention_factor >= 0 || isnan(p->attention_factor);
  if (!*given)
    return AB_STATUS_OK;
  if (!positive(p->attention_factor))
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.attention_factor",
                    "rope_scaling.attention_factor %g must be positive",
                    p->attention_factor);
  pl->attention = p->attention_factor;
  return AB_STATUS_OK;
}

static enum ab_status check_yarn(const struct ab_rope_params *p,
                                 struct rope_plan *pl)
{
  double fast = p->beta_fast, slow = p->beta_slow, d = (double)pl->rotary_dim;
  double lo, hi;
  enum ab_status st;
  int given;

  if ((st = check_orig_factor(p, pl)) != AB_STATUS_OK)
    return st;
  if (!(pl->theta > 1.0))
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_theta",
                    "rope_theta %g must exceed 1 for yarn (its correction "
                    "range divides by ln(rope_theta))",
                    pl->theta);
  if (isnan(fast) || isinf(fast))
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.beta_fast",
                    "rope_scaling.beta_fast %g is not a number", fast);
  if (isnan(slow) || isinf(slow))
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.beta_slow",
                    "rope_scaling.beta_slow %g is not a number", slow);
  /* null or 0 mean the defaults, as in HF. */
  if (fast <= 0)
    fast = 32.0;
  if (slow <= 0)
    slow = 1.0;
  lo = yarn_corr(fast, d, pl->theta, (double)pl->orig);
  hi = yarn_corr(slow, d, pl->theta, (double)pl->orig);
  if (p->truncate) {
    lo = floor(lo);
    hi = ceil(hi);
  }
  lo = lo > 0 ? lo : 0;
  hi = hi < d - 1 ? hi : d - 1;
  if (lo == hi) /* HF linear_ramp_factor: avoid 0/0 */
    hi += 0.001;
  pl->yarn_low = lo;
  pl->yarn_high = hi;

  if ((st = check_attention_factor(p, pl, &given)) != AB_STATUS_OK || given)
    return st;
  if (positive(p->mscale) && positive(p->mscale_all_dim)) {
    /* DeepSeek-V2/V3: the ratio form (1 when both are equal). */
    pl->attention = yarn_mscale(pl->factor, p->mscale) /
                    yarn_mscale(pl->factor, p->mscale_all_dim);
    return AB_STATUS_OK;
  }
  if (isnan(p->mscale) || isnan(p->mscale_all_dim))
    return ab__fail(AB_STATUS_INVALID_ARG,
                    isnan(p->mscale) ? "rope_scaling.mscale"
                                     : "rope_scaling.mscale_all_dim",
                    "rope_scaling.%s is not a number",
                    isnan(p->mscale) ? "mscale" : "mscale_all_dim");
  pl->attention = yarn_mscale(pl->factor, 1.0);
  return AB_STATUS_OK;
}

static enum ab_status check_longrope(const struct ab_rope_params *p,
                                     struct rope_plan *pl)
{
  const double *lists[2] = {p->short_factor, p->long_factor};
  static const char *const names[2] = {"short_factor", "long_factor"};
  char arg[64];
  enum ab_status st;
  int64_t k;
  int l, given;

  for (l = 0; l < 2; l++) {
    snprintf(arg, sizeof arg, "rope_scaling.%s", names[l]);
    if (!lists[l])
      return ab__fail(AB_STATUS_INVALID_ARG, arg,
                      "longrope needs rope_scaling.%s (rotary_dim/2 = %lld "
                      "values)",
                      names[l], (long long)pl->half);
    for (k = 0; k < pl->half; k++)
      if (!positive(lists[l][k])) {
        snprintf(arg, sizeof arg, "rope_scaling.%s.%lld", names[l],
                 (long long)k);
        return ab__fail(AB_STATUS_INVALID_ARG, arg,
                        "rope_scaling.%s[%lld] is %g; every factor must be "
                        "positive",
                        names[l], (long long)k, lists[l][k]);
      }
  }
  pl->short_f = p->short_factor;
  pl->long_f = p->long_factor;
  if ((st = check_orig_factor(p, pl)) != AB_STATUS_OK)
    return st;
  if ((st = check_attention_factor(p, pl, &given)) != AB_STATUS_OK || given)
    return st;
  if (pl->factor <= 1.0) {
    pl->attention = 1.0;
    return AB_STATUS_OK;
  }
  if (pl->orig < 2)
    return ab__fail(AB_STATUS_INVALID_ARG,
                    "rope_scaling.original_max_position_embeddings",
                    "original_max_position_embeddings %lld must be >= 2 "
                    "(the attention factor divides by its logarithm)",
                    (long long)pl->orig);
  pl->attention = sqrt(1.0 + log(pl->factor) / log((double)pl->orig));
  return AB_STATUS_OK;
}

/* Validate p and fill pl with everything that does not depend on seq_len.
 * Arguments are named with the HTTP API's field paths. */
static enum ab_status plan_check(const struct ab_rope_params *p,
                                 struct rope_plan *pl)
{
  enum ab_status st;
  double dd;

  memset(pl, 0, sizeof *pl);
  if (!p)
    return ab__fail(AB_STATUS_INVALID_ARG, "rope", "RoPE parameters are NULL");
  if ((int)p->rope_type < 0 || p->rope_type >= AB_ROPE_TYPE_LAST_)
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.rope_type",
                    "rope_type %d is not a known RoPE type",
                    (int)p->rope_type);
  pl->type = p->rope_type;
  pl->head_dim = p->head_dim;
  pl->interleaved = p->interleaved != 0;
  pl->factor = 1.0;
  pl->attention = 1.0;
  if ((st = check_rotary_dim(p, pl)) != AB_STATUS_OK)
    return st;
  if (!positive(p->rope_theta))
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_theta",
                    "rope_theta %g must be a positive number", p->rope_theta);
  pl->theta = p->rope_theta;
  pl->theta0 = p->rope_theta;
  pl->ntk_alpha = 1.0;
  if ((st = check_sections(p, pl)) != AB_STATUS_OK)
    return st;
  if (p->original_max_position_embeddings < 0)
    return ab__fail(AB_STATUS_INVALID_ARG,
                    "rope_scaling.original_max_position_embeddings",
                    "original_max_position_embeddings %lld is negative",
                    (long long)p->original_max_position_embeddings);
  if (p->max_position_embeddings < 0)
    return ab__fail(AB_STATUS_INVALID_ARG, "max_position_embeddings",
                    "max_position_embeddings %lld is negative",
                    (long long)p->max_position_embeddings);
  dd = (double)pl->rotary_dim;

  switch (p->rope_type) {
  case AB_ROPE_DEFAULT:
  case AB_ROPE_VISION2D:
    break;
  case AB_ROPE_LINEAR:
    st = check_factor(p, 1, 1.0, &pl->factor);
    break;
  case AB_ROPE_NTK:
  case AB_ROPE_DYNAMIC:
    if ((st = check_factor(p, 1, 1.0, &pl->factor)) != AB_STATUS_OK)
      break;
    if (pl->rotary_dim == 2) {
      st = ab__fail(AB_STATUS_INVALID_ARG, "rotary_dim",
                    "rotary_dim 2 is too small for %s scaling (its base is "
                    "raised to rotary_dim/(rotary_dim-2))",
                    ab_rope_type_name(p->rope_type));
      break;
    }
    if (p->rope_type == AB_ROPE_NTK) {
      /* base' = base * factor^(d/(d-2)) */
      pl->ntk_alpha = pl->factor;
      pl->theta = p->rope_theta * pow(pl->factor, dd / (dd - 2.0));
    } else {
      pl->orig = orig_len(p);
      if (pl->orig <= 0)
        st = ab__fail(AB_STATUS_INVALID_ARG, "max_position_embeddings",
                      "dynamic scaling needs max_position_embeddings (or "
                      "rope_scaling.original_max_position_embeddings)");
    }
    break;
  case AB_ROPE_YARN:
    st = check_yarn(p, pl);
    break;
  case AB_ROPE_LLAMA3:
    if ((st = check_factor(p, 1, 1.0, &pl->factor)) != AB_STATUS_OK)
      break;
    pl->orig = p->original_max_position_embeddings;
    if (pl->orig <= 0)
      st = ab__fail(AB_STATUS_INVALID_ARG,
                    "rope_scaling.original_max_position_embeddings",
                    "llama3 needs rope_scaling.original_max_position_"
                    "embeddings");
    else if (!positive(p->low_freq_factor))
      st = ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.low_freq_factor",
                    "rope_scaling.low_freq_factor %g must be positive",
                    p->low_freq_factor);
    else if (!(isfinite(p->high_freq_factor) &&
               p->high_freq_factor > p->low_freq_factor))
      st = ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.high_freq_factor",
                    "rope_scaling.high_freq_factor %g must exceed "
                    "low_freq_factor %g",
                    p->high_freq_factor, p->low_freq_factor);
    pl->low_freq = p->low_freq_factor;
    pl->high_freq = p->high_freq_factor;
    break;
  case AB_ROPE_LONGROPE:
    st = check_longrope(p, pl);
    break;
  case AB_ROPE_XPOS:
    if (!positive(p->scale_base))
      st = ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.scale_base",
                    "rope_scaling.scale_base %g must be positive",
                    p->scale_base);
    else if (!positive(p->gamma))
      st = ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.gamma",
                    "rope_scaling.gamma %g must be positive (zeta_0 would "
                    "be 0)",
                    p->gamma);
    pl->scale_base = p->scale_base;
    pl->gamma = p->gamma;
    break;
  default:
    break;
  }
  return st;
}

/* The parts that depend on the current length: dynamic NTK's base and
 * LongRoPE's short/long choice.  seq_len is checked only where used. */
static enum ab_status plan_for_len(struct rope_plan *pl, int64_t seq_len)
{
  if (pl->type != AB_ROPE_DYNAMIC && pl->type != AB_ROPE_LONGROPE)
    return AB_STATUS_OK;
  if (seq_len < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "seq_len",
                    "seq_len %lld must be >= 1 for %s scaling",
                    (long long)seq_len, ab_rope_type_name(pl->type));
  if (pl->type == AB_ROPE_DYNAMIC) {
    /* HF dynamic NTK: the length never counts as shorter than the
     * original, so short sequences keep the original base. */
    double d = (double)pl->rotary_dim, f = pl->factor;
    double len = (double)(seq_len > pl->orig ? seq_len : pl->orig);
    pl->ntk_alpha = f * len / (double)pl->orig - (f - 1.0);
    pl->theta *= pow(pl->ntk_alpha, d / (d - 2.0));
  } else {
    /* Long factors only beyond the original length: seq_len == original
     * still uses the short ones. */
    pl->ext = seq_len > pl->orig ? pl->long_f : pl->short_f;
  }
  return AB_STATUS_OK;
}

static double inv_freq_at(const struct rope_plan *pl, int64_t f);

static enum ab_status plan_init(const struct ab_rope_params *p,
                                int64_t seq_len, struct rope_plan *pl)
{
  enum ab_status st = plan_check(p, pl);
  int64_t f;

  if (st || (st = plan_for_len(pl, seq_len)) != AB_STATUS_OK)
    return st;
  /* A base far below 1 (or a factor near 0) sends frequencies past
   * float32's range: angles and tables would be NaN. */
  for (f = 0; f < pl->n_freq; f++) {
    double v = inv_freq_at(pl, f);
    if (!(v >= 0.0 && v <= FLT_MAX))
      return ab__fail(AB_STATUS_OUT_OF_RANGE, "rope_theta",
                      "inverse frequency %lld would be %g, beyond float32: "
                      "rope_theta %g (with the scaling's factor) is out of "
                      "range",
                      (long long)f, v, pl->theta);
  }
  return AB_STATUS_OK;
}

/* ==== frequencies ======================================================= */

/* Pair f's frequency without scaling: theta0^(-2f/span). */
static double inv_freq_original(const struct rope_plan *pl, int64_t f)
{
  /* vision2d spreads the exponent over rotary_dim/2 (one axis' share). */
  double span = (double)(pl->type == AB_ROPE_VISION2D ? pl->rotary_dim / 2
                                                      : pl->rotary_dim);
  return pow(pl->theta0, -2.0 * (double)f / span);
}

/* Band of a blend weight that is exactly 0 for kept pairs and 1 for fully
 * interpolated ones. */
static int band_of(double ramp)
{
  return ramp == 0.0   ? AB_ROPE_BAND_KEPT
         : ramp >= 1.0 ? AB_ROPE_BAND_INTERPOLATED
                       : AB_ROPE_BAND_RAMP;
}

/* inv_freq of frequency index f (< n_freq), in double: the one place where
 * each scaling type's formula lives.  *ramp receives the type's blend
 * weight between keeping the pair (0) and interpolating it fully (1)
 * (ab_rope_pairs); may be NULL. */
static double pair_freq(const struct rope_plan *pl, int64_t f, double *ramp)
{
  double span = (double)(pl->type == AB_ROPE_VISION2D ? pl->rotary_dim / 2
                                                      : pl->rotary_dim);
  double inv = pow(pl->theta, -2.0 * (double)f / span), w = 0.0, out = inv;

  switch (pl->type) {
  case AB_ROPE_LINEAR:
    w = 1.0;
    out = inv / pl->factor;
    break;
  case AB_ROPE_NTK:
  case AB_ROPE_DYNAMIC:
    /* The base already holds the adjustment: inv = inv_original *
     * alpha^(-2f/(r-2)), so pair f has moved 2f/(r-2) of the way (in
     * log-frequency) to full interpolation by alpha. */
    if (pl->ntk_alpha != 1.0)
      w = 2.0 * (double)f / (span - 2.0);
    break;
  case AB_ROPE_YARN: {
    /* Ramp 0 below `low` (keep: extrapolate), 1 above `high` (fully
     * interpolated), linear between (HF linear_ramp_factor). */
    w = ((double)f - pl->yarn_low) / (pl->yarn_high - pl->yarn_low);
    w = w < 0 ? 0 : w > 1 ? 1 : w;
    out = inv / pl->factor * w + inv * (1.0 - w);
    break;
  }
  case AB_ROPE_LLAMA3: {
    double wavelen = ROPE_TWO_PI / inv, len = (double)pl->orig, smooth;
    /* Exactly at either threshold the medium branch applies, as in HF
     * (~(wl < high_wl) & ~(wl > low_wl)); it is continuous there anyway. */
    if (wavelen < len / pl->high_freq) {
      w = 0.0;
    } else if (wavelen > len / pl->low_freq) {
      w = 1.0;
      out = inv / pl->factor;
    } else {
      smooth = (len / wavelen - pl->low_freq) / (pl->high_freq - pl->low_freq);
      w = 1.0 - smooth;
      out = (1.0 - smooth) * inv / pl->factor + smooth * inv;
    }
    break;
  }
  case AB_ROPE_LONGROPE:
    /* A searched divisor per pair: its share of the factor, in
     * log-frequency (1 when it divides by exactly the factor). */
    out = inv / pl->ext[f];
    if (pl->ext[f] != 1.0)
      w = pl->factor > 1.0 ? log(pl->ext[f]) / log(pl->factor) : 1.0;
    break;
  default: /* default, vision2d, xpos */
    break;
  }
  if (ramp)
    *ramp = w;
  return out;
}

static double inv_freq_at(const struct rope_plan *pl, int64_t f)
{
  return pair_freq(pl, f, NULL);
}

/* Which position row drives pair j (0 = t / the only row). */
static int pair_axis(const struct rope_plan *pl, int64_t j)
{
  int64_t acc = 0;
  int a;

  if (pl->type == AB_ROPE_VISION2D)
    return j >= pl->n_freq; /* first half rows, second half columns */
  if (pl->n_sections == 0)
    return 0;
  if (pl->mrope_interleaved) {
    /* Qwen3-VL: h and w take every third frequency up to 3x their section;
     * with a 4th section, ggml IMROPE gives the leftovers to e, else t. */
    if (j % 3 == 1 && j < 3 * pl->sections[1])
      return 1;
    if (j % 3 == 2 && j < 3 * pl->sections[2])
      return 2;
    if (pl->n_sections == 4 && !(j % 3 == 0 && j < 3 * pl->sections[0]))
      return 3;
    return 0;
  }
  /* Qwen2-VL: consecutive sections; the frequency index is not reset. */
  for (a = 0; a < pl->n_sections; a++) {
    acc += pl->sections[a];
    if (j < acc)
      return a;
  }
  return pl->n_sections - 1; /* unreachable: sections sum to half */
}

/* Per-pair constants for pairs [j0, j0 + cnt) (j0 is the caller's). */
struct pair_chunk {
  int64_t cnt;
  double inv[ROPE_CHUNK];
  double lnz[ROPE_CHUNK]; /* xpos: ln(zeta_j) */
  int axis[ROPE_CHUNK];
};

static void chunk_fill(const struct rope_plan *pl, int64_t j0,
                       struct pair_chunk *ch)
{
  int64_t i, j;
  double r = (double)pl->rotary_dim;

  ch->cnt = ab__min64(ROPE_CHUNK, pl->half - j0);
  for (i = 0; i < ch->cnt; i++) {
    j = j0 + i;
    ch->axis[i] = pair_axis(pl, j);
    ch->inv[i] = inv_freq_at(
        pl, pl->type == AB_ROPE_VISION2D ? j % pl->n_freq : j);
    if (pl->type == AB_ROPE_XPOS) /* zeta_j = (2j + gamma r)/((1+gamma) r) */
      ch->lnz[i] = log((2.0 * (double)j + pl->gamma * r) /
                       ((1.0 + pl->gamma) * r));
  }
}

/* cos and sin of token t for the pairs of ch, with the attention factor and
 * (xPos) the decay zeta^(+-p/scale_base) folded in. */
static void chunk_row(const struct rope_plan *pl,
                      const struct ab__kernels *kern,
                      const struct pair_chunk *ch, const int64_t *pos,
                      int64_t n, int64_t t, int is_key, double *theta,
                      float *c, float *s)
{
  int64_t i;

  /* Angles in double: p * inv_freq keeps integer positions far beyond
   * 2^24 exact before the reduction modulo 2 pi. */
  if (pl->n_axes == 1) {
    double pt = (double)pos[t];
    for (i = 0; i < ch->cnt; i++)
      theta[i] = pt * ch->inv[i];
  } else {
    for (i = 0; i < ch->cnt; i++)
      theta[i] = (double)pos[(int64_t)ch->axis[i] * n + t] * ch->inv[i];
  }
  kern->rope.sincos(c, s, theta, ch->cnt);
  if (pl->type == AB_ROPE_XPOS) {
    /* q is scaled by zeta^(p/scale_base), k by zeta^(-p/scale_base): their
     * product depends on the distance only; no centring (README). */
    double e = (double)pos[t] / pl->scale_base * (is_key ? -1.0 : 1.0);
    for (i = 0; i < ch->cnt; i++) {
      double m = pl->attention * exp(e * ch->lnz[i]);
      c[i] = (float)((double)c[i] * m);
      s[i] = (float)((double)s[i] * m);
    }
  } else if (pl->attention != 1.0) {
    /* The factor stays double: one rounding of the product. */
    const double m = pl->attention;
    for (i = 0; i < ch->cnt; i++) {
      c[i] = (float)((double)c[i] * m);
      s[i] = (float)((double)s[i] * m);
    }
  }
}

/* ==== public: check, inv_freq =========================================== */

enum ab_status ab_rope_check(const struct ab_rope_params *p,
                             int64_t *rotary_dim, int64_t *n_freq,
                             int *n_axes)
{
  struct rope_plan pl;
  enum ab_status st = plan_check(p, &pl);

  if (st)
    return st;
  if (rotary_dim)
    *rotary_dim = pl.rotary_dim;
  if (n_freq)
    *n_freq = pl.n_freq;
  if (n_axes)
    *n_axes = pl.n_axes;
  return AB_STATUS_OK;
}

enum ab_status ab_rope_inv_freq(const struct ab_rope_params *p,
                                int64_t seq_len, double *inv_freq,
                                double *attention_scaling)
{
  struct rope_plan pl;
  enum ab_status st = plan_init(p, seq_len, &pl);
  int64_t f;

  if (st)
    return st;
  if (inv_freq)
    for (f = 0; f < pl.n_freq; f++)
      inv_freq[f] = inv_freq_at(&pl, f);
  if (attention_scaling)
    *attention_scaling = pl.attention;
  return AB_STATUS_OK;
}

/* ==== analysis (docs/methods.md#analysis) =============================== */

enum ab_status ab_rope_pairs(const struct ab_rope_params *p, int64_t seq_len,
                             struct ab_rope_pair *pairs,
                             struct ab_rope_scaling_info *info)
{
  struct rope_plan pl;
  enum ab_status st = plan_init(p, seq_len, &pl);
  int64_t f;

  if (st)
    return st;
  for (f = 0; pairs && f < pl.n_freq; f++) {
    struct ab_rope_pair *o = &pairs[f];
    o->inv_freq_original = inv_freq_original(&pl, f);
    o->inv_freq = pair_freq(&pl, f, &o->ramp);
    o->scale = o->inv_freq / o->inv_freq_original;
    o->band = band_of(o->ramp);
  }
  if (info) {
    info->rotary_dim = pl.rotary_dim;
    info->n_freq = pl.n_freq;
    info->rope_theta = pl.theta;
    info->factor = pl.type == AB_ROPE_DYNAMIC ? pl.ntk_alpha : pl.factor;
    info->attention_factor = pl.attention;
    info->original_max_position_embeddings = pl.orig;
    info->yarn_low = pl.type == AB_ROPE_YARN ? pl.yarn_low : NAN;
    info->yarn_high = pl.type == AB_ROPE_YARN ? pl.yarn_high : NAN;
  }
  return AB_STATUS_OK;
}

/* ==== tables ============================================================= */

/* Rows [t0, t1) of the public cos/sin tables [n, rotary_dim]. */
static void table_rows(const struct rope_plan *pl,
                       const struct ab__kernels *kern, const int64_t *pos,
                       int64_t n, int64_t t0, int64_t t1, float *cos_out,
                       float *sin_out)
{
  struct pair_chunk ch;
  double theta[ROPE_CHUNK];
  float c[ROPE_CHUNK], s[ROPE_CHUNK];
  int64_t j0, t, i, r = pl->rotary_dim, h = pl->half;

  for (j0 = 0; j0 < h; j0 += ROPE_CHUNK) {
    chunk_fill(pl, j0, &ch);
    for (t = t0; t < t1; t++) {
      float *co = cos_out + t * r, *so = sin_out + t * r;
      chunk_row(pl, kern, &ch, pos, n, t, 0, theta, c, s);
      for (i = 0; i < ch.cnt; i++) {
        int64_t j = j0 + i;
        if (pl->interleaved) { /* [c0, c0, c1, c1, ...] */
          co[2 * j] = co[2 * j + 1] = c[i];
          so[2 * j] = so[2 * j + 1] = s[i];
        } else { /* [c0 .. c_{h-1}, c0 .. c_{h-1}] */
          co[j] = co[j + h] = c[i];
          so[j] = so[j + h] = s[i];
        }
      }
    }
  }
}

static enum ab_status table_args(const struct ab_rope_params *p,
                                 int64_t seq_len, const int64_t *positions,
                                 int64_t n, const float *cos_out,
                                 const float *sin_out, struct rope_plan *pl)
{
  enum ab_status st = plan_init(p, seq_len, pl);
  int64_t cells;

  if (st)
    return st;
  if (pl->type == AB_ROPE_XPOS)
    return ab__fail(AB_STATUS_INVALID_ARG, "rope_scaling.rope_type",
                    "xpos has no table form (q and k decay in opposite "
                    "directions); pass q and/or k to apply it");
  if (n < 1)
    return ab__fail(AB_STATUS_INVALID_ARG, "positions",
                    "%lld positions; at least 1 is needed", (long long)n);
  if (ab_mul_overflow(n, pl->rotary_dim, &cells) ||
      (uint64_t)cells > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "positions",
                    "a table of %lld x %lld overflows", (long long)n,
                    (long long)pl->rotary_dim);
  if (!positions)
    return ab__fail(AB_STATUS_INVALID_ARG, "positions", "positions is NULL");
  if (!cos_out || !sin_out)
    return ab__fail(AB_STATUS_INVALID_ARG, cos_out ? "sin" : "cos",
                    "output buffer %s is NULL", cos_out ? "sin" : "cos");
  return AB_STATUS_OK;
}

enum ab_status ab_rope_table(const struct ab_rope_params *p, int64_t seq_len,
                             const int64_t *positions, int64_t n,
                             float *cos_out, float *sin_out)
{
  struct rope_plan pl;
  enum ab_status st =
      table_args(p, seq_len, positions, n, cos_out, sin_out, &pl);

  if (st)
    return st;
  table_rows(&pl, ab__kernels(), positions, n, 0, n, cos_out, sin_out);
  return AB_STATUS_OK;
}

struct table_ctx {
  struct rope_plan pl;
  const struct ab__kernels *kern;
  const int64_t *positions;
  int64_t n, rows_per_piece;
  float *cos_out, *sin_out;
};

static enum ab_status table_piece(const struct ab_job *job, int64_t piece,
                                  void *scratch)
{
  const struct table_ctx *cx = job->ctx;
  int64_t t0 = piece * cx->rows_per_piece;

  (void)scratch;
  table_rows(&cx->pl, cx->kern, cx->positions, cx->n, t0,
             ab__min64(cx->n, t0 + cx->rows_per_piece), cx->cos_out,
             cx->sin_out);
  return AB_STATUS_OK;
}

enum ab_status ab_rope_table_job(const struct ab_rope_params *p,
                                 int64_t seq_len, const int64_t *positions,
                                 int64_t n, float *cos_out, float *sin_out,
                                 ab_job_t **job)
{
  struct rope_plan pl;
  struct table_ctx *cx;
  enum ab_status st;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job pointer is NULL");
  *job = NULL;
  st = table_args(p, seq_len, positions, n, cos_out, sin_out, &pl);
  if (st)
    return st;
  if ((st = ab__job_new(sizeof *cx, job)) != AB_STATUS_OK)
    return st;
  cx = (*job)->ctx;
  cx->pl = pl;
  cx->kern = ab__kernels();
  cx->positions = positions;
  cx->n = n;
  cx->cos_out = cos_out;
  cx->sin_out = sin_out;
  /* Two float rows of rotary_dim per token. */
  cx->rows_per_piece =
      ab__max64(1, ROPE_PIECE_BYTES / (2 * pl.rotary_dim * 4));
  (*job)->pieces = (n + cx->rows_per_piece - 1) / cx->rows_per_piece;
  (*job)->flops = 30.0 * (double)n * (double)pl.half; /* sincos dominates */
  (*job)->run = table_piece;
  return AB_STATUS_OK;
}

/* ==== apply ============================================================== */

/* Table blocks: the cos/sin table of an apply job is filled lazily, one
 * block of tokens at a time, by the first piece that needs the block (see
 * table_ensure).  A block is about this many bytes: small enough that a
 * piece which finds a block busy can build a private copy in its scratch
 * cheaply, large enough that claiming blocks costs nothing. */
#define ROPE_TAB_BLOCK_BYTES (32 * 1024)
enum { TAB_EMPTY = 0, TAB_BUSY = 1, TAB_READY = 2 };

/* x is seen as rows of head_dim channels: `outer` leading dims (0..2) then
 * the inner axis ndim-2, whose rows are one stride apart.  out is the same
 * shape, contiguous, so row R is at out + R*dim.  Pieces are runs of
 * rows_per_piece consecutive rows: pieces handed out in order make the
 * threads of a pool sweep x and out front to back together, which is what
 * the memory system streams best. */
struct apply_ctx {
  const struct ab__kernels *kern;
  /* What the table needs, copied at creation (the caller's p and positions
   * may be gone when the pieces run): the plan's scalars (its borrowed
   * factor lists are cleared: they live on only through `chunks`), the
   * per-pair constants, and the positions [n_axes, n]. */
  struct rope_plan pl;
  struct pair_chunk *chunks; /* ceil(h / ROPE_CHUNK) */
  int64_t *pos;
  int64_t n;
  int is_key;
  float *table;        /* [n, 2h]: cos then sin per token (kernels/rope.h) */
  _Atomic int *state;  /* per table block: TAB_EMPTY, TAB_BUSY, TAB_READY */
  int64_t tab_blk;     /* tokens per table block */
  size_t gather_bytes; /* scratch: gathered rows first, then a table block */
  struct ab_tensor x;
  float *out;
  int64_t dim, h, rows, rows_per_piece;
  int64_t offset; /* first rotated channel of a row */
  int64_t inner_len, inner_stride;
  int n_outer;
  int64_t outer_shape[2], outer_stride[2];
  int seq_outer; /* index into outer dims of the sequence axis, or -1 when
                    the sequence is the inner axis */
  int interleaved, nt, direct;
};

static void apply_destroy(struct ab_job *job)
{
  struct apply_ctx *cx = job->ctx;

  if (!cx)
    return;
  ab__free_aligned(cx->table);
  ab__free((void *)cx->state);
  ab__free(cx->chunks);
  ab__free(cx->pos);
}

/* Convert `cnt` rows of x starting at element offset off to contiguous
 * float32 rows of dim in dst. */
static void gather_rows(const struct apply_ctx *cx, int64_t off, int64_t cnt,
                        float *dst)
{
  const struct ab_tensor *x = &cx->x;
  int64_t q, c, cs = x->stride[x->ndim - 1];
  size_t esz = ab_dtype_size((enum ab_dtype)x->dtype);

  for (q = 0; q < cnt; q++) {
    int64_t base = off + q * cx->inner_stride;
    float *d = dst + q * cx->dim;
    if (cs == 1)
      ab_convert(d, AB_DTYPE_F32, (const char *)x->data + (size_t)base * esz,
                 (enum ab_dtype)x->dtype, cx->dim);
    else
      for (c = 0; c < cx->dim; c++)
        d[c] = ab__load_f32(x->data, x->dtype, base + c * cs);
  }
}

/* Table rows of tokens [t0, t1) into dst (row t at dst + (t - t0) * 2h):
 * the same chunk_row calls for every token whoever builds them, so a
 * private copy is bit-identical to the shared one. */
static void table_build(const struct apply_ctx *cx, int64_t t0, int64_t t1,
                        float *dst)
{
  double theta[ROPE_CHUNK];
  const int64_t h = cx->h;
  int64_t j0, t;

  for (j0 = 0; j0 < h; j0 += ROPE_CHUNK) {
    const struct pair_chunk *ch = &cx->chunks[j0 / ROPE_CHUNK];
    for (t = t0; t < t1; t++) {
      float *row = dst + (t - t0) * 2 * h;
      chunk_row(&cx->pl, cx->kern, ch, cx->pos, cx->n, t, cx->is_key, theta,
                row + j0, row + h + j0);
    }
  }
}

/* Make the shared table rows of tokens [t0, t1) ready: blocks nobody has
 * claimed are claimed and built here.  Returns 0 when some block is being
 * built by another thread at this moment; the caller then builds a private
 * copy instead of waiting (a piece never blocks on another). */
static int table_ensure(const struct apply_ctx *cx, int64_t t0, int64_t t1)
{
  int64_t b, b1 = (t1 - 1) / cx->tab_blk;
  int ok = 1;

  for (b = t0 / cx->tab_blk; b <= b1; b++) {
    int s = atomic_load_explicit(&cx->state[b], memory_order_acquire);
    if (s == TAB_READY)
      continue;
    if (s == TAB_EMPTY &&
        atomic_compare_exchange_strong_explicit(&cx->state[b], &s, TAB_BUSY,
                                                memory_order_acquire,
                                                memory_order_acquire)) {
      int64_t a = b * cx->tab_blk, z = ab__min64(cx->n, a + cx->tab_blk);
      table_build(cx, a, z, cx->table + a * 2 * cx->h);
      /* Publishes the rows to the acquire loads above. */
      atomic_store_explicit(&cx->state[b], TAB_READY, memory_order_release);
      continue;
    }
    if (s != TAB_READY) /* the CAS lost to a builder, or one is busy */
      ok = 0;
  }
  return ok;
}

/* Rotate cnt rows (src, stride lds) with table rows tab (stride ldcs) into
 * out.  The kernel rotates the first 2h channels of what it is given and
 * copies the rest, so it is handed each row from the first rotated channel
 * on; the channels before it (rotary_offset: DeepSeek's q_nope) are copied
 * here. */
static void rotate_rows(const struct apply_ctx *cx, float *out,
                        const float *src, int64_t lds, const float *tab,
                        int64_t ldcs, int64_t cnt)
{
  const int64_t off = cx->offset;
  int64_t i;

  cx->kern->rope.rotate_rows(out + off, cx->dim, src + off, lds, tab, ldcs,
                             cnt, cx->h, cx->dim - off, cx->interleaved,
                             cx->nt);
  if (off > 0 && out != src)
    for (i = 0; i < cnt; i++)
      memcpy(out + i * cx->dim, src + i * lds, (size_t)off * sizeof *out);
}

/* Rotate cnt rows (src, stride lds) of tokens starting at t (one token for
 * every row when ldcs is 0) into out, from the shared table, or from
 * private rows built in ptab (tab_blk tokens of room) while another thread
 * is still building a block they need. */
static void rotate_run(const struct apply_ctx *cx, float *out,
                       const float *src, int64_t lds, int64_t t, int64_t ldcs,
                       int64_t cnt, float *ptab)
{
  int64_t a, m;

  if (table_ensure(cx, t, ldcs ? t + cnt : t + 1)) {
    rotate_rows(cx, out, src, lds, cx->table + t * 2 * cx->h, ldcs, cnt);
    return;
  }
  if (!ldcs) {
    table_build(cx, t, t + 1, ptab);
    rotate_rows(cx, out, src, lds, ptab, 0, cnt);
    return;
  }
  for (a = 0; a < cnt; a += m) {
    m = ab__min64(cx->tab_blk, cnt - a);
    table_build(cx, t + a, t + a + m, ptab);
    rotate_rows(cx, out + a * cx->dim, src + a * lds, lds, ptab, ldcs, m);
  }
}

static enum ab_status apply_piece(const struct ab_job *job, int64_t piece,
                                  void *scratch)
{
  const struct apply_ctx *cx = job->ctx;
  float *ptab = (float *)((char *)scratch + cx->gather_bytes);
  int64_t R = piece * cx->rows_per_piece;
  const int64_t r1 = ab__min64(cx->rows, R + cx->rows_per_piece);

  while (R < r1) {
    int64_t o = R / cx->inner_len, i = R % cx->inner_len;
    int64_t cnt = ab__min64(cx->inner_len - i, r1 - R);
    int64_t off = i * cx->inner_stride, t = i, ldcs = 2 * cx->h;
    int d;

    /* Unravel the outer index (row-major) into an element offset. */
    for (d = cx->n_outer - 1; d >= 0; d--) {
      int64_t idx = o % cx->outer_shape[d];
      o /= cx->outer_shape[d];
      off += idx * cx->outer_stride[d];
      if (d == cx->seq_outer)
        t = idx;
    }
    if (cx->seq_outer >= 0)
      ldcs = 0; /* every row of this run is the same token (heads) */
    if (cx->direct) {
      rotate_run(cx, cx->out + R * cx->dim, (const float *)cx->x.data + off,
                 cx->inner_stride, t, ldcs, cnt, ptab);
    } else {
      gather_rows(cx, off, cnt, scratch);
      rotate_run(cx, cx->out + R * cx->dim, scratch, cx->dim, t, ldcs, cnt,
                 ptab);
    }
    R += cnt;
  }
  return AB_STATUS_OK;
}

static int ranges_overlap(const void *a, size_t alen, const void *b,
                          size_t blen)
{
  uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;

  return a0 < b0 + blen && b0 < a0 + alen;
}

/* The job's own copies of what the table needs, and room for the table and
 * its block states (all zero: TAB_EMPTY).  NO_MEMORY names x. */
static enum ab_status apply_alloc(struct apply_ctx *cx,
                                  const struct rope_plan *pl,
                                  const int64_t *positions, int64_t n,
                                  int64_t cells)
{
  const int64_t nchunks = (pl->half + ROPE_CHUNK - 1) / ROPE_CHUNK;
  const int64_t nblk = (n + cx->tab_blk - 1) / cx->tab_blk;
  int64_t c, b;

  cx->table = ab__malloc_aligned((size_t)cells * sizeof(float));
  cx->state = ab__malloc((size_t)nblk * sizeof *cx->state);
  cx->chunks = ab__malloc((size_t)nchunks * sizeof *cx->chunks);
  cx->pos = ab__malloc((size_t)(pl->n_axes * n) * sizeof *cx->pos);
  if (!cx->table || !cx->state || !cx->chunks || !cx->pos)
    return ab__fail(AB_STATUS_NO_MEMORY, "x",
                    "cannot allocate the %lld x %lld cos/sin table",
                    (long long)n, (long long)pl->rotary_dim);
  for (b = 0; b < nblk; b++)
    atomic_init(&cx->state[b], TAB_EMPTY);
  for (c = 0; c < nchunks; c++)
    chunk_fill(pl, c * ROPE_CHUNK, &cx->chunks[c]);
  memcpy(cx->pos, positions, (size_t)(pl->n_axes * n) * sizeof *cx->pos);
  cx->pl = *pl;
  cx->pl.short_f = cx->pl.long_f = cx->pl.ext = NULL;
  return AB_STATUS_OK;
}

enum ab_status ab_rope_apply_job(const struct ab_rope_params *p,
                                 int64_t seq_len, const struct ab_tensor *x,
                                 enum ab_layout layout,
                                 const int64_t *positions, int is_key,
                                 float *out, ab_job_t **job)
{
  struct rope_plan pl;
  struct apply_ctx *cx;
  enum ab_status st;
  int64_t dim, n, rows, cells, extent = 0;
  int nd, seq_axis, d, f32_contig;
  size_t esz;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job pointer is NULL");
  *job = NULL;
  if ((st = plan_init(p, seq_len, &pl)) != AB_STATUS_OK)
    return st;
  if ((st = ab__check_tensor(x, "x", 0)) != AB_STATUS_OK)
    return st;
  nd = x->ndim;
  if (nd < 2)
    return ab__fail(AB_STATUS_BAD_SHAPE, "x",
                    "x has rank %d; RoPE needs [seq, head_dim] or more", nd);
  if (layout != AB_LAYOUT_BHSD && layout != AB_LAYOUT_BSHD)
    return ab__fail(AB_STATUS_INVALID_ARG, "layout",
                    "layout %d is neither bhsd (0) nor bshd (1)", (int)layout);
  dim = x->shape[nd - 1];
  if (dim != pl.head_dim)
    return ab__fail(AB_STATUS_BAD_SHAPE, "x",
                    "x has %lld channels in its last dimension but head_dim "
                    "is %lld",
                    (long long)dim, (long long)pl.head_dim);
  /* rank 2 is [S, D]; otherwise bhsd puts S just before D, bshd before H. */
  seq_axis = (nd == 2 || layout == AB_LAYOUT_BHSD) ? nd - 2 : nd - 3;
  n = x->shape[seq_axis];
  if (!positions)
    return ab__fail(AB_STATUS_INVALID_ARG, "positions", "positions is NULL");
  if (!out)
    return ab__fail(AB_STATUS_INVALID_ARG, "out", "out is NULL");
  rows = ab_tensor_numel(x) / dim;
  if (ab_mul_overflow(n, pl.rotary_dim, &cells) ||
      (uint64_t)cells > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "x", "the cos/sin table overflows");

  /* out may be x itself only when x is already what out will be. */
  esz = ab_dtype_size((enum ab_dtype)x->dtype);
  for (d = 0; d < nd; d++)
    extent += (x->shape[d] - 1) * x->stride[d];
  f32_contig = x->dtype == AB_DTYPE_F32 && ab_tensor_is_contiguous(x);
  if (ranges_overlap(x->data, (size_t)(extent + 1) * esz, out,
                     (size_t)(rows * dim) * sizeof(float)) &&
      !(out == x->data && f32_contig))
    return ab__fail(AB_STATUS_INVALID_ARG, "out",
                    "out overlaps x; in place is allowed only with out == x "
                    "and x contiguous float32");

  if ((st = ab__job_new(sizeof *cx, job)) != AB_STATUS_OK)
    return st;
  cx = (*job)->ctx;
  (*job)->destroy = apply_destroy;
  cx->kern = ab__kernels();
  cx->n = n;
  cx->is_key = is_key != 0;
  cx->h = pl.half;
  cx->tab_blk = ab__max64(1, ROPE_TAB_BLOCK_BYTES / (2 * pl.half * 4));
  if ((st = apply_alloc(cx, &pl, positions, n, cells)) != AB_STATUS_OK) {
    ab_job_free(*job);
    *job = NULL;
    return st;
  }

  cx->x = *x;
  cx->out = out;
  cx->dim = dim;
  cx->rows = rows;
  cx->inner_len = x->shape[nd - 2];
  cx->inner_stride = x->stride[nd - 2];
  cx->n_outer = nd - 2;
  for (d = 0; d < nd - 2; d++) {
    cx->outer_shape[d] = x->shape[d];
    cx->outer_stride[d] = x->stride[d];
  }
  cx->seq_outer = seq_axis == nd - 2 ? -1 : seq_axis;
  cx->interleaved = pl.interleaved;
  cx->offset = pl.offset;
  /* Streaming stores only pay when they save the read-for-ownership of a
   * separate output.  In place every line was just read, so it is already
   * owned; a streaming store would only evict it (slower on Zen 4).  With a
   * rotary_offset the copied channels before the rotated ones share lines
   * with them: plain stores for the whole row. */
  cx->nt = out != x->data && pl.offset == 0 &&
           rows * dim * (int64_t)sizeof(float) >= AB__STREAM_BYTES;
  /* Rows are read in place when they already are float32 rows. */
  cx->direct = x->dtype == AB_DTYPE_F32 && x->stride[nd - 1] == 1;
  cx->rows_per_piece = ab__max64(
      1, ab__min64(ROPE_APPLY_PIECE_BYTES / (dim * 4),
                   (rows + ROPE_APPLY_MIN_PIECES - 1) / ROPE_APPLY_MIN_PIECES));
  (*job)->pieces = (rows + cx->rows_per_piece - 1) / cx->rows_per_piece;
  /* Gathered rows (64-byte multiple, so the table part stays aligned), then
   * one private table block. */
  cx->gather_bytes =
      cx->direct
          ? 0
          : ((size_t)(cx->rows_per_piece * dim) * sizeof(float) + 63) &
                ~(size_t)63;
  (*job)->scratch_size =
      cx->gather_bytes + (size_t)(cx->tab_blk * 2 * pl.half) * sizeof(float);
  (*job)->flops = 6.0 * (double)rows * (double)pl.half;
  (*job)->run = apply_piece;
  return AB_STATUS_OK;
}

enum ab_status ab_rope_apply(const struct ab_rope_params *p, int64_t seq_len,
                             const struct ab_tensor *x, enum ab_layout layout,
                             const int64_t *positions, int is_key, float *out)
{
  ab_job_t *job = NULL;
  enum ab_status st =
      ab_rope_apply_job(p, seq_len, x, layout, positions, is_key, out, &job);

  if (st)
    return st;
  st = ab_job_run_all(job);
  ab_job_free(job);
  return st;
}
