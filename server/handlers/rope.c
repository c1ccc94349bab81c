/* rope.c: POST /v1/rope -- RoPE tables (inv_freq, cos, sin, attention
 * scaling) or q/k rotated -- and the RoPE config parser that the attention
 * route shares (its "rope" object takes the same fields). */
#include "params.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Enums are stored through int-sized fields by the table parser. */
_Static_assert(sizeof(enum ab_rope_type) == sizeof(int),
               "enum ab_rope_type must be int-sized");
_Static_assert(sizeof(enum ab_layout) == sizeof(int),
               "enum ab_layout must be int-sized");

/* Positions beyond 2^53 cannot be told apart once they are angles in
 * double; they are refused rather than silently merged. */
#define POS_MAX 9007199254740992.0

/* CFG(f): where the parameter parser stores member f of the RoPE configuration
 * (struct srv_rope_cfg). */
#define CFG(f) offsetof(struct srv_rope_cfg, f)

/* ==== tables ============================================================ */

static const struct srv_param rope_config[] = {
    {.name = "head_dim", .type = SRV_PT_INT, .flags = SRV_PF_MIN, .min = 2,
     .off = CFG(p.head_dim), .def_rule = "the last dimension of q/k",
     .desc = "channels per head (required unless q or k gives it)"},
    {.name = "rope_theta", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 10000, .min = 0,
     .off = CFG(p.rope_theta), .desc = "frequency base (Llama 3: 500000)"},
    {.name = "partial_rotary_factor", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL | SRV_PF_MAX, .def = 1, .min = 0,
     .max = 1, .off = CFG(p.partial_rotary_factor),
     .desc = "rotary_dim = int(head_dim * partial_rotary_factor)"},
    {.name = "rotary_dim", .type = SRV_PT_INT, .flags = SRV_PF_MIN, .min = 2,
     .off = CFG(p.rotary_dim),
     .def_rule = "int(head_dim * partial_rotary_factor)",
     .desc = "rotated channels (even, <= head_dim); the rest pass through"},
    {.name = "rotary_offset", .type = SRV_PT_INT,
     .flags = SRV_PF_DEF | SRV_PF_MIN, .def = 0, .min = 0,
     .off = CFG(p.rotary_offset),
     .desc = "first rotated channel: channels [rotary_offset, rotary_offset "
             "+ rotary_dim) rotate, the others pass through (DeepSeek's "
             "[q_nope | q_pe] heads: qk_nope_head_dim; a config with "
             "qk_rope_head_dim sets it)"},
    {.name = "interleaved", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF,
     .def = 0, .off = CFG(p.interleaved),
     .desc = "false: pairs (i, i + r/2) (rotate-half: HF Llama, GPT-NeoX); "
             "true: pairs (2i, 2i+1) (GPT-J, RoFormer, Meta reference)"},
    {.name = "max_position_embeddings", .type = SRV_PT_INT,
     .flags = SRV_PF_MIN, .min = 1, .off = CFG(p.max_position_embeddings),
     .desc = "context length; the default factor of yarn and longrope is "
             "max_position_embeddings / original_max_position_embeddings"},
    {.name = "original_max_position_embeddings", .type = SRV_PT_INT,
     .flags = SRV_PF_MIN, .min = 1, .off = CFG(orig_max_pos_top),
     .desc = "top-level form (Phi-3 configs) of "
             "rope_scaling.original_max_position_embeddings"},
    {.name = "seq_len", .type = SRV_PT_INT, .flags = SRV_PF_MIN, .min = 1,
     .off = CFG(seq_len), .def_rule = "max(position) + 1",
     .desc = "current sequence length (dynamic and longrope depend on it)"},
    {.name = "rope_scaling", .type = SRV_PT_OBJECT, .off = CFG(scaling),
     .desc = "the rope_scaling object of a Hugging Face config.json"},
};
const struct srv_ptable srv_ptab_rope_config =
    SRV_PTABLE("rope", "RoPE configuration (Hugging Face config names)",
               rope_config);

/* The /v1/rope request fields beside the config.  Bound to struct rope_req. */
struct rope_req {
  struct srv_rope_cfg cfg;
  const json_t *positions;
  struct ab_tensor q, k;
  int layout;
  int64_t *pos; /* [n_axes, n] */
};
/* REQ(f): where the parameter parser stores member f of the request
 * (struct rope_req). */
#define REQ(f) offsetof(struct rope_req, f)

static const struct srv_choice layouts[] = {
    {"bhsd", AB_LAYOUT_BHSD, "[batch, heads, seq, dim] (PyTorch SDPA)"},
    {"bshd", AB_LAYOUT_BSHD,
     "[batch, seq, heads, dim] (FlashAttention, HF hidden states)"},
    {NULL, 0, NULL}};

static const struct srv_param rope_request[] = {
    {.name = "positions", .type = SRV_PT_POSITIONS, .off = REQ(positions),
     .def_rule = "with q or k: 0..n-1 along their sequence axis (every axis "
                 "of multi-axis RoPE, as the count n); required without "
                 "them, and for vision2d",
     .desc = "n (0..n-1), a list [n], or [axes, n] rows for multi-axis RoPE "
             "([3, n] t/h/w with mrope_section, [2, n] row/column for "
             "vision2d); integers, may be negative"},
    {.name = "q", .type = SRV_PT_TENSOR, .off = REQ(q),
     .desc = "optional tensor to rotate (rank 2..4); its sequence axis has "
             "length n"},
    {.name = "k", .type = SRV_PT_TENSOR, .off = REQ(k),
     .desc = "optional tensor to rotate (xpos scales it by the inverse "
             "decay)"},
    {.name = "layout", .type = SRV_PT_ENUM, .flags = SRV_PF_DEF,
     .def = AB_LAYOUT_BHSD, .choices = layouts, .off = REQ(layout),
     .desc = "axis order of q and k (rank 3 drops the batch axis)"},
};
const struct srv_ptable srv_ptab_rope_request =
    SRV_PTABLE("rope request", "the /v1/rope fields beside the config",
               rope_request);

/* The attention "rope" object's own fields (bound by attention.c to a
 * struct whose first members are these two json pointers). */
static const struct srv_param rope_attn[] = {
    {.name = "q_positions", .type = SRV_PT_POSITIONS, .off = 0,
     .def_rule = "q_offset + r",
     .desc = "query positions [Nq] (or [axes, Nq] for multi-axis RoPE)"},
    {.name = "k_positions", .type = SRV_PT_POSITIONS,
     .off = sizeof(const json_t *), .def_rule = "j",
     .desc = "key positions [Nk] (or [axes, Nk] for multi-axis RoPE)"},
};
const struct srv_ptable srv_ptab_rope_attn =
    SRV_PTABLE("attention rope", "positions of the attention rope object",
               rope_attn);

static const struct srv_choice rope_types[] = {
    {"default", AB_ROPE_DEFAULT, "inv_freq = rope_theta^(-2k/rotary_dim)"},
    {"linear", AB_ROPE_LINEAR, "position interpolation: inv_freq / factor"},
    {"ntk", AB_ROPE_NTK,
     "static NTK-aware: base * factor^(r/(r-2))"},
    {"dynamic", AB_ROPE_DYNAMIC,
     "dynamic NTK: the base grows with seq_len beyond the original length"},
    {"yarn", AB_ROPE_YARN,
     "YaRN: ramp between interpolated and original frequencies, attention "
     "factor on cos/sin"},
    {"llama3", AB_ROPE_LLAMA3, "Llama 3.1 wavelength-banded scaling"},
    {"longrope", AB_ROPE_LONGROPE,
     "LongRoPE / Phi-3: per-frequency short or long divisors"},
    {"vision2d", AB_ROPE_VISION2D,
     "2-D axial RoPE of vision towers (Qwen2-VL ViT): positions [2, n]"},
    {"xpos", AB_ROPE_XPOS,
     "xPos: RoPE with an exponential decay (q and k only, no tables)"},
    {"mrope", AB_ROPE_DEFAULT,
     "Qwen2-VL configs' name for default frequencies with mrope_section"},
    {"su", AB_ROPE_LONGROPE, "early Phi-3 configs' name for longrope"},
    {NULL, 0, NULL}};

static const struct srv_param rope_scaling_common[] = {
    {.name = "rope_type", .alias = "type", .type = SRV_PT_ENUM,
     .flags = SRV_PF_DEF, .def = AB_ROPE_DEFAULT, .choices = rope_types,
     .off = CFG(p.rope_type), .desc = "the scaling method"},
    {.name = "mrope_section", .type = SRV_PT_INTS, .flags = SRV_PF_MIN,
     .min = 0, .off = CFG(mrope_section),
     .desc = "multi-axis RoPE (Qwen2-VL): 3 or 4 frequency counts per axis "
             "(t, h, w), summing to rotary_dim/2; positions become [3, n]"},
    {.name = "mrope_interleaved", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF,
     .def = 0, .off = CFG(p.mrope_interleaved),
     .desc = "Qwen3-VL interleaved assignment of frequencies to axes"},
};
const struct srv_ptable srv_ptab_rope_scaling = SRV_PTABLE(
    "rope_scaling", "fields of rope_scaling read by every rope_type",
    rope_scaling_common);

#define FACTOR_REQ(d)                                                          \
  {.name = "factor", .type = SRV_PT_NUM, .flags = SRV_PF_REQ | SRV_PF_MIN_EXCL, \
   .min = 0, .off = CFG(p.factor), .desc = (d)}
#define ORIG(flags_, rule, d)                                                  \
  {.name = "original_max_position_embeddings", .type = SRV_PT_INT,             \
   .flags = (flags_) | SRV_PF_MIN, .min = 1,                                   \
   .off = CFG(p.original_max_position_embeddings),                             \
   .def_rule = (rule), .desc = (d)}

static const struct srv_param rt_linear[] = {
    FACTOR_REQ("positions are divided by factor"),
};
static const struct srv_param rt_ntk[] = {
    FACTOR_REQ("the base becomes rope_theta * factor^(r/(r-2))"),
};
static const struct srv_param rt_dynamic[] = {
    FACTOR_REQ("scaling factor applied beyond the original length"),
    ORIG(0, "max_position_embeddings",
         "the original context length (else max_position_embeddings)"),
};
static const struct srv_param rt_yarn[] = {
    {.name = "factor", .type = SRV_PT_NUM, .flags = SRV_PF_MIN_EXCL,
     .min = 0, .off = CFG(p.factor),
     .def_rule = "max_position_embeddings / original_max_position_embeddings",
     .desc = "context extension factor; an explicit value always wins"},
    ORIG(0, "max_position_embeddings",
         "pre-training context length (required, or "
         "max_position_embeddings)"),
    {.name = "beta_fast", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN | SRV_PF_ZERO_DEF, .def = 32, .min = 0,
     .off = CFG(p.beta_fast),
     .desc = "rotations that bound the extrapolated band (null or 0: 32)"},
    {.name = "beta_slow", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN | SRV_PF_ZERO_DEF, .def = 1, .min = 0,
     .off = CFG(p.beta_slow),
     .desc = "rotations that bound the interpolated band (null or 0: 1)"},
    {.name = "attention_factor", .type = SRV_PT_NUM,
     .flags = SRV_PF_MIN_EXCL, .min = 0, .off = CFG(p.attention_factor),
     .def_rule = "0.1*ln(factor) + 1, or mscale ratio (DeepSeek)",
     .desc = "multiplies cos and sin (reported as attention_scaling)"},
    {.name = "mscale", .type = SRV_PT_NUM, .flags = SRV_PF_MIN, .min = 0,
     .off = CFG(p.mscale),
     .desc = "DeepSeek form: with mscale_all_dim, attention factor = "
             "mscale(factor, mscale) / mscale(factor, mscale_all_dim)"},
    {.name = "mscale_all_dim", .type = SRV_PT_NUM, .flags = SRV_PF_MIN,
     .min = 0, .off = CFG(p.mscale_all_dim), .desc = "DeepSeek form"},
    {.name = "truncate", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF, .def = 1,
     .off = CFG(p.truncate),
     .desc = "round the correction range to whole dimensions (gpt-oss: "
             "false)"},
};
static const struct srv_param rt_llama3[] = {
    FACTOR_REQ("divisor of the low frequencies"),
    ORIG(0, NULL, "pre-training context length (required)"),
    {.name = "low_freq_factor", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 1, .min = 0,
     .off = CFG(p.low_freq_factor),
     .desc = "wavelengths above original/low_freq_factor are divided by "
             "factor"},
    {.name = "high_freq_factor", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 4, .min = 0,
     .off = CFG(p.high_freq_factor),
     .desc = "wavelengths below original/high_freq_factor are kept; must "
             "exceed low_freq_factor"},
};
static const struct srv_param rt_longrope[] = {
    {.name = "short_factor", .type = SRV_PT_TENSOR,
     .flags = SRV_PF_REQ | SRV_PF_F64, .off = CFG(short_t),
     .desc = "rotary_dim/2 positive divisors used while seq_len <= "
             "original_max_position_embeddings (read in double)"},
    {.name = "long_factor", .type = SRV_PT_TENSOR,
     .flags = SRV_PF_REQ | SRV_PF_F64, .off = CFG(long_t),
     .desc = "rotary_dim/2 positive divisors used beyond it (read in "
             "double)"},
    {.name = "factor", .type = SRV_PT_NUM, .flags = SRV_PF_MIN_EXCL,
     .min = 0, .off = CFG(p.factor),
     .def_rule = "max_position_embeddings / original_max_position_embeddings",
     .desc = "sets the default attention factor"},
    ORIG(0, "max_position_embeddings",
         "pre-training context length: the short/long switch"),
    {.name = "attention_factor", .type = SRV_PT_NUM,
     .flags = SRV_PF_MIN_EXCL, .min = 0, .off = CFG(p.attention_factor),
     .def_rule = "sqrt(1 + ln(factor)/ln(original_max_position_embeddings))",
     .desc = "multiplies cos and sin (1 when factor <= 1)"},
};
static const struct srv_param rt_xpos[] = {
    {.name = "scale_base", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 512, .min = 0,
     .off = CFG(p.scale_base),
     .desc = "q is scaled by zeta^(p/scale_base), k by zeta^(-p/scale_base)"},
    {.name = "gamma", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL, .def = 0.4, .min = 0,
     .off = CFG(p.gamma),
     .desc = "zeta_k = (2k + gamma*r) / ((1 + gamma)*r)"},
};

/* Tables without parameters still need an array; they use a zero-length
 * view of this one. */
static const struct srv_param rt_none[1] = {{.name = "", .desc = ""}};

static const struct srv_ptable rtab_default = {
    "default", "rope_theta^(-2k/rotary_dim), no scaling", rt_none, 0};
static const struct srv_ptable rtab_linear =
    SRV_PTABLE("linear", "position interpolation (Chen et al.)", rt_linear);
static const struct srv_ptable rtab_ntk =
    SRV_PTABLE("ntk", "static NTK-aware base scaling", rt_ntk);
static const struct srv_ptable rtab_dynamic = SRV_PTABLE(
    "dynamic", "dynamic NTK: base from the current seq_len", rt_dynamic);
static const struct srv_ptable rtab_yarn =
    SRV_PTABLE("yarn", "YaRN (Peng et al.), HF and DeepSeek forms", rt_yarn);
static const struct srv_ptable rtab_llama3 =
    SRV_PTABLE("llama3", "Llama 3.1 frequency bands", rt_llama3);
static const struct srv_ptable rtab_longrope = SRV_PTABLE(
    "longrope", "LongRoPE / Phi-3 per-frequency factors", rt_longrope);
static const struct srv_ptable rtab_vision2d = {
    "vision2d",
    "2-D axial RoPE: rotary_dim/4 frequencies per axis, positions [2, n]",
    rt_none, 0};
static const struct srv_ptable rtab_xpos = SRV_PTABLE(
    "xpos", "xPos decay on top of RoPE (apply only: needs q and/or k)",
    rt_xpos);

/* Indexed by enum ab_rope_type. */
const struct srv_ptable *const srv_ptab_rope_types[] = {
    &rtab_default, &rtab_linear,   &rtab_ntk,      &rtab_dynamic, &rtab_yarn,
    &rtab_llama3,  &rtab_longrope, &rtab_vision2d, &rtab_xpos};
const int srv_ptab_rope_ntypes =
    (int)(sizeof srv_ptab_rope_types / sizeof srv_ptab_rope_types[0]);
_Static_assert(sizeof srv_ptab_rope_types / sizeof srv_ptab_rope_types[0] ==
                   AB_ROPE_TYPE_LAST_,
               "one table per rope_type");

/* ==== the config parser ================================================= */

int srv_rope_parse(const struct srv_pctx *pc, const json_t *obj,
                   int64_t head_dim_hint, struct srv_rope_cfg *cfg,
                   struct srv_err *err)
{
  struct srv_pbind top = {&srv_ptab_rope_config, cfg, 0};
  char ptr[256];
  enum ab_status st;

  ab_rope_params_init(&cfg->p);
  if (srv_params_parse(pc, obj, &top, err) != 0)
    return -1;

  /* head_dim comes from q/k when they are there. */
  if (!srv_pbind_seen(&top, "head_dim")) {
    if (head_dim_hint <= 0)
      return srv_fail(err, 400, srv_pctx_ptr(pc, "head_dim", ptr, sizeof ptr),
                      "head_dim is required (or send q or k)");
    cfg->p.head_dim = head_dim_hint;
  } else if (head_dim_hint > 0 && cfg->p.head_dim != head_dim_hint) {
    return srv_fail(err, 400, srv_pctx_ptr(pc, "head_dim", ptr, sizeof ptr),
                    "head_dim %lld disagrees with the last dimension %lld of "
                    "the tensors",
                    (long long)cfg->p.head_dim, (long long)head_dim_hint);
  }
  /* Both ways of sizing the rotary part: they must agree. */
  if (srv_pbind_seen(&top, "rotary_dim") &&
      srv_pbind_seen(&top, "partial_rotary_factor")) {
    int64_t implied = (int64_t)((double)cfg->p.head_dim *
                                cfg->p.partial_rotary_factor);
    if (implied != cfg->p.rotary_dim)
      return srv_fail(
          err, 400, srv_pctx_ptr(pc, "rotary_dim", ptr, sizeof ptr),
          "rotary_dim %lld contradicts partial_rotary_factor %g (which gives "
          "%lld for head_dim %lld); give one of them",
          (long long)cfg->p.rotary_dim, cfg->p.partial_rotary_factor,
          (long long)implied, (long long)cfg->p.head_dim);
  }

  if (cfg->scaling) {
    struct srv_pctx sc;
    struct srv_pbind common = {&srv_ptab_rope_scaling, cfg, 0}, typ;
    const struct srv_ptable *tabs[2];
    int type;

    srv_pctx_child(pc, "rope_scaling", &sc);
    if (srv_params_parse(&sc, cfg->scaling, &common, err) != 0)
      return -1;
    type = (int)cfg->p.rope_type;
    typ = (struct srv_pbind){srv_ptab_rope_types[type], cfg, 0};
    if (srv_params_parse(&sc, cfg->scaling, &typ, err) != 0)
      return -1;
    tabs[0] = &srv_ptab_rope_scaling;
    tabs[1] = srv_ptab_rope_types[type];
    srv_params_unknown(&sc, cfg->scaling, tabs, 2, NULL);

    if (cfg->mrope_section) {
      size_t n = json_array_size(cfg->mrope_section);
      if (n == 0 || n > AB_MROPE_MAX_SECTIONS)
        return srv_fail(
            err, 400, srv_pctx_ptr(&sc, "mrope_section", ptr, sizeof ptr),
            "mrope_section has %zu entries; it needs 3 (t, h, w) or 4", n);
      srv_params_ints(cfg->mrope_section, cfg->p.mrope_section);
      cfg->p.n_mrope_section = (int)n;
    }

    /* The original length may also sit at the top level (Phi-3). */
    if (cfg->orig_max_pos_top > 0) {
      if (cfg->p.original_max_position_embeddings > 0 &&
          cfg->p.original_max_position_embeddings != cfg->orig_max_pos_top)
        return srv_fail(
            err, 400,
            srv_pctx_ptr(&sc, "original_max_position_embeddings", ptr,
                         sizeof ptr),
            "rope_scaling.original_max_position_embeddings %lld contradicts "
            "the top-level value %lld",
            (long long)cfg->p.original_max_position_embeddings,
            (long long)cfg->orig_max_pos_top);
      cfg->p.original_max_position_embeddings = cfg->orig_max_pos_top;
    }

    if (cfg->p.rope_type == AB_ROPE_LONGROPE) {
      /* The library reads rotary_dim/2 factors from each list: size them
       * first, from the type-independent part of the config. */
      struct ab_rope_params base = cfg->p;
      int64_t rd;
      base.rope_type = AB_ROPE_DEFAULT;
      base.n_mrope_section = 0;
      base.mrope_interleaved = 0;
      st = ab_rope_check(&base, &rd, NULL, NULL);
      if (st != AB_STATUS_OK)
        return srv_fail_lib(err, st, pc->ptr, NULL);
      /* In double, as the library computes the frequencies from them: a
       * float32 rounding would move angles near position 4096 by ~2e-4. */
      if (srv_params_list(&sc, "short_factor", &cfg->short_t, rd / 2,
                          "rotary_dim/2", &cfg->p.short_factor, err) != 0 ||
          srv_params_list(&sc, "long_factor", &cfg->long_t, rd / 2,
                          "rotary_dim/2", &cfg->p.long_factor, err) != 0)
        return -1;
    }
  } else if (cfg->orig_max_pos_top > 0) {
    cfg->p.original_max_position_embeddings = cfg->orig_max_pos_top;
  }

  st = ab_rope_check(&cfg->p, &cfg->rotary_dim, &cfg->n_freq, &cfg->n_axes);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, pc->ptr, NULL);
  return 0;
}

/* ==== positions ========================================================= */

static int pos_value(const struct srv_call *c, const json_t *e,
                     const char *field, int64_t a, int64_t i, int nested,
                     int64_t *out, struct srv_err *err)
{
  char ptr[256], val[64];
  double d;

  if (json_is_integer(e)) {
    *out = (int64_t)json_integer_value(e);
    if (fabs((double)*out) <= POS_MAX)
      return 0;
  } else if (json_is_real(e)) {
    d = json_real_value(e);
    if (d == floor(d) && fabs(d) <= POS_MAX) {
      *out = (int64_t)d;
      return 0;
    }
  }
  if (nested)
    snprintf(ptr, sizeof ptr, "%s/%lld/%lld", field, (long long)a,
             (long long)i);
  else
    snprintf(ptr, sizeof ptr, "%s/%lld", field, (long long)i);
  srv_codec_show(c, e, val, sizeof val);
  return srv_fail(err, 400, ptr,
                  "RoPE positions must be integers within +-2^53; entry %lld "
                  "is %s",
                  (long long)i, val);
}

int srv_rope_positions(struct srv_call *c, const json_t *j, const char *field,
                       int n_axes, int flat_ok, int64_t want_n,
                       int64_t **out, int64_t *n_out, int64_t *max_out,
                       struct srv_err *err)
{
  const json_t *first = json_is_array(j) ? json_array_get(j, 0) : NULL;
  int nested = first && json_is_array(first);
  int64_t n = !j       ? want_n
              : nested ? (int64_t)json_array_size(first)
                       : srv_positions_count(j);
  int64_t *pos, mx = INT64_MIN, a, i;

  if (n < 1)
    return srv_fail(err, 400, field, "positions must not be empty");
  if (want_n > 0 && n != want_n)
    return srv_fail(err, 400, field,
                    "%lld positions given, but the tensors' sequence axis "
                    "has %lld",
                    (long long)n, (long long)want_n);
  if (nested) {
    if ((int64_t)json_array_size(j) != n_axes)
      return srv_fail(err, 400, field,
                      "positions has %zu rows; this RoPE configuration needs "
                      "%d (one per axis)%s",
                      json_array_size(j), n_axes,
                      n_axes == 1 ? ": give a flat list" : "");
  } else if (n_axes > 1 && !flat_ok) {
    return srv_fail(err, 400, field,
                    "positions must be [%d, n] rows (one per axis) for this "
                    "RoPE configuration",
                    n_axes);
  }
  if ((uint64_t)n > SIZE_MAX / sizeof(int64_t) / (uint64_t)n_axes)
    return srv_fail(err, 413, field, "%lld positions are too many",
                    (long long)n);
  pos = srv_arena_alloc(&c->arena, (size_t)n * (size_t)n_axes * sizeof *pos);
  if (!pos)
    return srv_fail(err, 500, field, "cannot allocate %lld positions",
                    (long long)n);
  for (a = 0; a < n_axes; a++) {
    const json_t *row = nested ? json_array_get(j, (size_t)a) : j;
    int64_t *dst = pos + a * n;

    if (nested && (!json_is_array(row) || (int64_t)json_array_size(row) != n)) {
      char ptr[256];
      snprintf(ptr, sizeof ptr, "%s/%lld", field, (long long)a);
      return srv_fail(err, 400, ptr,
                      "positions row %lld must be a list of %lld integers "
                      "like row 0",
                      (long long)a, (long long)n);
    }
    if (!json_is_array(row)) { /* the count form: 0..n-1 on every axis */
      for (i = 0; i < n; i++)
        dst[i] = i;
      mx = n - 1;
      continue;
    }
    if (!nested && a > 0) { /* a flat list serves every axis (text tokens) */
      memcpy(dst, pos, (size_t)n * sizeof *pos);
      continue;
    }
    for (i = 0; i < n; i++) {
      if (pos_value(c, json_array_get(row, (size_t)i), field, a, i, nested,
                    &dst[i], err) != 0)
        return -1;
      if (dst[i] > mx)
        mx = dst[i];
    }
  }
  *out = pos;
  *n_out = n;
  *max_out = mx;
  return 0;
}

/* ==== the handler ======================================================= */

/* The sequence axis of a rank-2..4 tensor in a layout. */
static int seq_axis(const struct ab_tensor *t, int layout)
{
  return (t->ndim == 2 || layout == AB_LAYOUT_BHSD) ? t->ndim - 2
                                                    : t->ndim - 3;
}

/* Library failure while building an apply job: "x" is the tensor's own
 * name here. */
static int apply_fail(struct srv_err *err, enum ab_status st,
                      const char *name)
{
  srv_fail_lib(err, st, "", NULL);
  if (strcmp(err->field, "/x") == 0)
    snprintf(err->field, sizeof err->field, "/%s", name);
  return -1;
}

int srv_h_rope(struct srv_call *c, struct srv_err *err)
{
  struct srv_pctx pc;
  struct rope_req *rq;
  struct srv_pbind req;
  const struct srv_ptable *tabs[3];
  struct ab_tensor *ts[2];
  static const char *const names[2] = {"q", "k"};
  int64_t hint = 0, want_n = 0, n, maxpos, seq_len;
  double out_numel = 0, temp = 0, flops = 0;
  int have_qk, i;
  enum ab_status st;

  if (!(rq = srv_handler_begin(c, &pc, sizeof *rq, err)))
    return -1;
  req = (struct srv_pbind){&srv_ptab_rope_request, rq, 0};
  if (srv_params_parse(&pc, c->in.params, &req, err) != 0)
    return -1;
  ts[0] = &rq->q;
  ts[1] = &rq->k;
  have_qk = rq->q.data || rq->k.data;

  /* q and k: rank 2..4, one sequence length between them. */
  for (i = 0; i < 2; i++) {
    const struct ab_tensor *t = ts[i];
    int64_t s;
    char ptr[8];
    if (!t->data)
      continue;
    snprintf(ptr, sizeof ptr, "/%s", names[i]);
    if (t->ndim < 2)
      return srv_fail(err, 400, ptr,
                      "%s must have rank 2..4 ([seq, dim] or more), got %d",
                      names[i], (int)t->ndim);
    s = t->shape[seq_axis(t, rq->layout)];
    if (want_n && s != want_n)
      return srv_fail(err, 400, ptr,
                      "q and k must have the same sequence length (%lld vs "
                      "%lld)",
                      (long long)want_n, (long long)s);
    want_n = s;
    if (!hint)
      hint = t->shape[t->ndim - 1];
  }

  if (srv_rope_parse(&pc, c->in.params, hint, &rq->cfg, err) != 0)
    return -1;
  tabs[0] = &srv_ptab_rope_config;
  tabs[1] = &srv_ptab_rope_request;
  tabs[2] = &srv_ptab_output;
  srv_params_unknown(&pc, c->in.params, tabs, 3, NULL);
  srv_params_unused_bin(&pc);

  if (rq->cfg.p.rope_type == AB_ROPE_XPOS && !have_qk)
    return srv_fail(err, 400,
                    rq->cfg.scaling && json_object_get(rq->cfg.scaling, "type")
                            && !json_object_get(rq->cfg.scaling, "rope_type")
                        ? "/rope_scaling/type"
                        : "/rope_scaling/rope_type",
                    "xpos has no table form (q and k decay in opposite "
                    "directions): send q and/or k to rotate");

  /* Without positions, q/k's sequence length n stands for the count n:
   * 0..n-1, on every axis of multi-axis RoPE (text tokens).  The tables
   * have no n without them, and a vision2d grid has no default order. */
  if (!rq->positions && !have_qk)
    return srv_fail(err, 400, "/positions",
                    "positions is required without q or k: n (for 0..n-1), "
                    "a list, or [axes, n] rows");
  if (!rq->positions && rq->cfg.p.rope_type == AB_ROPE_VISION2D)
    return srv_fail(err, 400, "/positions",
                    "vision2d needs positions [2, n] (each token's row and "
                    "column); there is no default grid");

  /* Budget before allocating anything sized by the request. */
  n = rq->positions ? srv_positions_count(rq->positions) : want_n;
  temp = 8.0 * (double)n * rq->cfg.n_axes;
  if (have_qk) {
    for (i = 0; i < 2; i++)
      if (ts[i]->data) {
        double e = srv_numel_d(ts[i]);
        out_numel += e;
        flops += 6.0 * e;
        temp += 4.0 * (double)n * (double)rq->cfg.rotary_dim; /* its table */
      }
  } else {
    out_numel = 2.0 * (double)n * (double)rq->cfg.rotary_dim +
                (double)rq->cfg.n_freq;
    temp += 8.0 * (double)rq->cfg.n_freq;
    /* A sin/cos pair per angle: call it 40 flops. */
    flops = 40.0 * (double)n * (double)rq->cfg.n_freq;
  }
  if (srv_check_budget(c, srv_out_bytes(c, out_numel) + temp, flops, err) != 0)
    return -1;

  if (srv_rope_positions(c, rq->positions, "/positions", rq->cfg.n_axes,
                         rq->cfg.p.rope_type != AB_ROPE_VISION2D, want_n,
                         &rq->pos, &n, &maxpos, err) != 0)
    return -1;
  seq_len = rq->cfg.seq_len > 0 ? rq->cfg.seq_len
                                : (maxpos >= 1 ? maxpos + 1 : 1);

  if (!have_qk) {
    int64_t shape[2] = {n, rq->cfg.rotary_dim};
    double *inv, scaling = 1;
    float *cs, *sn;
    ab_job_t *job = NULL;

    /* inv_freq is held in double, as the library computes it: the codec
     * rounds it once to the output dtype (float64 keeps it whole). */
    inv = srv_output_tensor(c, "inv_freq", AB_DTYPE_F64, 1, &rq->cfg.n_freq,
                            err);
    if (!inv)
      return -1;
    st = ab_rope_inv_freq(&rq->cfg.p, seq_len, inv, &scaling);
    if (st != AB_STATUS_OK)
      return srv_fail_lib(err, st, "", NULL);
    cs = srv_output_tensor(c, "cos", AB_DTYPE_F32, 2, shape, err);
    sn = cs ? srv_output_tensor(c, "sin", AB_DTYPE_F32, 2, shape, err) : NULL;
    if (!sn)
      return -1;
    if (srv_output_scalar(c, "attention_scaling", scaling, err) != 0)
      return -1;
    st = ab_rope_table_job(&rq->cfg.p, seq_len, rq->pos, n, cs, sn, &job);
    if (st != AB_STATUS_OK)
      return srv_fail_lib(err, st, "", NULL);
    return srv_add_job(c, job, err);
  }

  for (i = 0; i < 2; i++) {
    const struct ab_tensor *t = ts[i];
    ab_job_t *job = NULL;
    float *out;

    if (!t->data)
      continue;
    out = srv_output_tensor(c, names[i], AB_DTYPE_F32, t->ndim, t->shape, err);
    if (!out)
      return -1;
    st = ab_rope_apply_job(&rq->cfg.p, seq_len, t,
                           (enum ab_layout)rq->layout, rq->pos, i == 1, out,
                           &job);
    if (st != AB_STATUS_OK)
      return apply_fail(err, st, names[i]);
    if (srv_add_job(c, job, err) != 0)
      return -1;
  }
  return 0;
}
