/* bias.c: POST /v1/bias -- position-bias tables (ALiBi, T5, FIRE, Kerple,
 * none) and T5 buckets, or a PNG picture of some heads -- and the
 * bias-method parser that the attention route shares for its "bias"
 * object. */
#include "params.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(enum ab_bias_method) == sizeof(int),
               "enum ab_bias_method must be int-sized");

/* More FIRE layers than this are refused before anything is allocated; the
 * library's own (lower) limit then speaks for the rest. */
#define FIRE_LAYERS_MAX 64

/* Bits of "return". */
enum { RET_BIAS = 1u << 0, RET_BUCKETS = 1u << 1 };

/* ==== method tables ===================================================== */

/* The parsed form of one method's members; p's pointers end up pointing at
 * the arena copies made from these. */
struct bias_holder {
  struct ab_bias_params p;
  struct ab_tensor slopes, table, r1, r2;
  const json_t *layers;
};
/* METHOD(f): where the parameter parser stores member f of a method
 * (struct bias_holder). */
#define METHOD(f) offsetof(struct bias_holder, f)

/* The selector's choices, by enum ab_bias_method (the terminator last). */
static const struct srv_choice bias_methods[] = {
    [AB_BIAS_NONE] = {"none", AB_BIAS_NONE,
                      "zeros (with the causal mask if asked)"},
    [AB_BIAS_ALIBI] = {"alibi", AB_BIAS_ALIBI,
                       "ALiBi: -m_h * |p_q - j| (Press et al.)"},
    [AB_BIAS_T5] = {"t5", AB_BIAS_T5,
                    "T5 relative buckets looked up in a [num_buckets, "
                    "num_heads] table"},
    [AB_BIAS_FIRE] = {"fire", AB_BIAS_FIRE,
                      "FIRE: an MLP of the log-normalised distance (Li et "
                      "al.)"},
    [AB_BIAS_KERPLE] = {"kerple", AB_BIAS_KERPLE,
                        "Kerple: -r1*ln(1 + r2*|i-j|) or -r1*|i-j|^r2 (Chi "
                        "et al.)"},
    [AB_BIAS_METHOD_LAST_] = {NULL, 0, NULL}};
_Static_assert(sizeof bias_methods / sizeof bias_methods[0] ==
                   AB_BIAS_METHOD_LAST_ + 1,
               "one choice per bias method");

/* The selector, used in the /v1/bias table and on its own by attention. */
#define BIAS_METHOD_PARAM                                                      \
  {.name = "method", .type = SRV_PT_ENUM,                                      \
   .flags = SRV_PF_REQ | SRV_PF_NOSTORE, .choices = bias_methods,              \
   .desc = "the position-bias family"}
const struct srv_param srv_param_bias_method = BIAS_METHOD_PARAM;

static const struct srv_param bm_alibi[] = {
    {.name = "max_bias", .type = SRV_PT_NUM, .flags = SRV_PF_DEF | SRV_PF_MIN,
     .def = 8, .min = 0, .off = METHOD(p.max_bias),
     .desc = "slopes in ggml form: 8 gives the paper's, BLOOM's and MPT's"},
    {.name = "slopes", .type = SRV_PT_TENSOR, .flags = SRV_PF_F64,
     .off = METHOD(slopes),
     .desc = "explicit per-head slopes [num_heads]; override max_bias "
             "(float32: the table is a float32 product)"},
};
static const struct srv_param bm_t5[] = {
    {.name = "table", .type = SRV_PT_TENSOR, .off = METHOD(table),
     .desc = "[num_buckets, num_heads]: the checkpoint's "
             "relative_attention_bias.weight; needed for bias values, not "
             "for return [\"buckets\"] alone"},
    {.name = "bidirectional", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF,
     .def = 1, .off = METHOD(p.bidirectional),
     .desc = "true for encoders; false for decoder self-attention"},
    {.name = "relative_attention_max_distance", .type = SRV_PT_INT,
     .flags = SRV_PF_DEF | SRV_PF_MIN, .def = 128, .min = 1,
     .off = METHOD(p.max_distance),
     .desc = "distance of the last bucket; must exceed half the exact "
             "range of one direction"},
    {.name = "relative_attention_num_buckets", .type = SRV_PT_INT,
     .flags = SRV_PF_MIN, .min = 1, .off = METHOD(p.num_buckets),
     .def_rule = "the table's row count; 32 without a table (Hugging "
                 "Face's T5Config)",
     .desc = "bucket count: must equal the table's rows; without a table "
             "(buckets alone) it sizes them"},
};
static const struct srv_param bm_fire[] = {
    {.name = "c", .type = SRV_PT_NUM, .flags = SRV_PF_REQ | SRV_PF_MIN_EXCL,
     .min = 0, .off = METHOD(p.c), .desc = "psi(t) = ln(c*t + 1)"},
    {.name = "L", .type = SRV_PT_NUM, .flags = SRV_PF_REQ | SRV_PF_MIN,
     .min = 0, .off = METHOD(p.L),
     .desc = "threshold: input psi(p_q - j) / (psi(max(L, p_q)) + eps)"},
    {.name = "eps", .type = SRV_PT_NUM, .flags = SRV_PF_DEF | SRV_PF_MIN,
     .def = 0, .min = 0, .off = METHOD(p.eps),
     .desc = "added to the denominator"},
    {.name = "layers", .type = SRV_PT_LAYERS, .flags = SRV_PF_REQ,
     .off = METHOD(layers),
     .desc = "the MLP: [{\"weight\": [out, in], \"bias\": [out]}, ...], "
             "input size 1, output num_heads or 1, ReLU between layers"},
};
static const struct srv_choice kerple_variants[] = {
    {"log", 0, "-r1 * ln(1 + r2 * |i - j|)"},
    {"power", 1, "-r1 * |i - j|^r2, 0 < r2 <= 2"},
    {NULL, 0, NULL}};
static const struct srv_param bm_kerple[] = {
    {.name = "variant", .type = SRV_PT_ENUM, .flags = SRV_PF_DEF, .def = 0,
     .choices = kerple_variants, .off = METHOD(p.kerple_power),
     .desc = "kernel form"},
    {.name = "r1", .type = SRV_PT_TENSOR, .flags = SRV_PF_REQ | SRV_PF_F64,
     .off = METHOD(r1), .desc = "[num_heads], each > 0 (read in double)"},
    {.name = "r2", .type = SRV_PT_TENSOR, .flags = SRV_PF_REQ | SRV_PF_F64,
     .off = METHOD(r2),
     .desc = "[num_heads], each > 0 (<= 2 for power; read in double)"},
};
static const struct srv_param bm_none[1] = {{.name = "", .desc = ""}};

/* One FIRE layer object. */
struct fire_layer_in {
  struct ab_tensor weight, bias;
};
static const struct srv_param fire_layer_params[] = {
    {.name = "weight", .type = SRV_PT_TENSOR,
     .flags = SRV_PF_REQ | SRV_PF_F64,
     .off = offsetof(struct fire_layer_in, weight),
     .desc = "[out, in] (read in double, as the MLP runs)"},
    {.name = "bias", .type = SRV_PT_TENSOR, .flags = SRV_PF_F64,
     .off = offsetof(struct fire_layer_in, bias),
     .desc = "[out] (optional: zeros; read in double)"},
};
static const struct srv_ptable tab_fire_layer =
    SRV_PTABLE("fire layer", "one layer of FIRE's MLP", fire_layer_params);

static const struct srv_ptable btab_none = {
    "none", "no position bias: zeros, masked if causal", bm_none, 0};
static const struct srv_ptable btab_alibi =
    SRV_PTABLE("alibi", "ALiBi linear biases (symmetric table)", bm_alibi);
static const struct srv_ptable btab_t5 =
    SRV_PTABLE("t5", "T5 relative position buckets", bm_t5);
static const struct srv_ptable btab_fire =
    SRV_PTABLE("fire", "FIRE functional interpolation", bm_fire);
static const struct srv_ptable btab_kerple =
    SRV_PTABLE("kerple", "Kerple kernelized relative positions", bm_kerple);

/* ==== /v1/bias request fields =========================================== */

struct bias_req {
  struct ab_bias_params p;
  struct ab_geometry g;
  int64_t num_heads, q_len, k_len, q_offset, sliding;
  int causal;
  unsigned ret;
  const json_t *window;
  struct srv_picture pic;
  float *bias;       /* PNG: the table drawn in finish */
  int32_t *buckets;
};
/* REQ(f): where the parameter parser stores member f of the request
 * (struct bias_req). */
#define REQ(f) offsetof(struct bias_req, f)

static const struct srv_choice bias_returns[] = {
    {"bias", 0, "float [num_heads, q_len, k_len]"},
    {"buckets", 1, "int32 [q_len, k_len] (t5 only)"},
    {NULL, 0, NULL}};

static const struct srv_param bias_common[] = {
    BIAS_METHOD_PARAM,
    {.name = "num_heads", .type = SRV_PT_INT, .flags = SRV_PF_REQ | SRV_PF_MIN,
     .min = 1, .off = REQ(num_heads), .desc = "heads of the table"},
    {.name = "q_len", .type = SRV_PT_INT, .flags = SRV_PF_REQ | SRV_PF_MIN,
     .min = 1, .off = REQ(q_len), .desc = "query rows"},
    {.name = "k_len", .type = SRV_PT_INT, .flags = SRV_PF_MIN, .min = 1,
     .off = REQ(k_len), .def_rule = "q_len", .desc = "key columns"},
    {.name = "q_offset", .type = SRV_PT_INT, .off = REQ(q_offset),
     .def_rule = "k_len - q_len",
     .desc = "position of query row 0 (keys sit at 0..k_len-1); the default "
             "puts the queries last, as when decoding with a KV cache"},
    {.name = "causal", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF, .def = 0,
     .off = REQ(causal), .desc = "keys after the query position get -inf"},
    {.name = "window", .type = SRV_PT_INTS, .flags = SRV_PF_MIN, .min = -1,
     .off = REQ(window),
     .desc = "inclusive [left, right], -1 unbounded: key j is visible iff "
             "p_q - left <= j <= p_q + right; others get -inf"},
    {.name = "sliding_window", .type = SRV_PT_INT, .flags = SRV_PF_MIN,
     .min = 1, .off = REQ(sliding),
     .desc = "HF form of window: W means [W-1, 0] (not with window)"},
    {.name = "return", .type = SRV_PT_ENUMS, .flags = SRV_PF_DEF,
     .def = RET_BIAS, .choices = bias_returns, .off = REQ(ret),
     .desc = "which tables to return"},
    SRV_PICTURE_PARAMS(REQ(pic)),
};
const struct srv_ptable srv_ptab_bias_common = SRV_PTABLE(
    "bias", "attention-bias tables [num_heads, q_len, k_len]", bias_common);

/* ==== shared parsing ==================================================== */

int srv_window_parse(const struct srv_pctx *pc, const json_t *window,
                     int64_t sliding, int has_sliding, int64_t *left,
                     int64_t *right, struct srv_err *err)
{
  char ptr[256];

  *left = -1;
  *right = -1;
  if (window && has_sliding)
    return srv_fail(err, 400,
                    srv_pctx_ptr(pc, "sliding_window", ptr, sizeof ptr),
                    "give either window [left, right] or sliding_window W "
                    "(= [W-1, 0]), not both");
  if (window) {
    int64_t lr[2];
    if (json_array_size(window) != 2)
      return srv_fail(err, 400, srv_pctx_ptr(pc, "window", ptr, sizeof ptr),
                      "window must be [left, right], got %zu numbers",
                      json_array_size(window));
    srv_params_ints(window, lr);
    *left = lr[0];
    *right = lr[1];
  } else if (has_sliding) {
    *left = sliding - 1;
    *right = 0;
  }
  return 0;
}

/* How many FIRE layers the request has: the JSON list's length, or the
 * highest "layers.N." safetensors index + 1, whichever is larger. */
static int64_t fire_layer_count(const struct srv_pctx *pc,
                                const json_t *layers)
{
  char prefix[256];
  int64_t n = layers ? (int64_t)json_array_size(layers) : 0;
  size_t pl;
  int i;

  snprintf(prefix, sizeof prefix, "%s%slayers.", pc->dot,
           pc->dot[0] ? "." : "");
  pl = strlen(prefix);
  for (i = 0; i < pc->c->in.nbin; i++) {
    const char *nm = pc->c->in.bin[i].name;
    char *end;
    long long k;
    if (!nm || strncmp(nm, prefix, pl) != 0)
      continue;
    k = strtoll(nm + pl, &end, 10);
    if (end != nm + pl && *end == '.' && k >= 0 && k + 1 > n)
      n = k + 1 > FIRE_LAYERS_MAX + 1 ? FIRE_LAYERS_MAX + 1 : k + 1;
  }
  return n;
}

static int fire_layers(const struct srv_pctx *pc, struct bias_holder *h,
                       struct srv_err *err)
{
  struct srv_pctx lc;
  struct fire_layer_in *in;
  struct ab_fire_layer *out;
  int64_t n = fire_layer_count(pc, h->layers), i;
  char ptr[256];

  srv_pctx_ptr(pc, "layers", ptr, sizeof ptr);
  if (n < 1)
    return srv_fail(err, 400, ptr, "layers is required");
  if (n > FIRE_LAYERS_MAX)
    return srv_fail(err, 400, ptr, "%lld FIRE layers; at most %d", (long long)n,
                    FIRE_LAYERS_MAX);
  in = srv_arena_calloc(&pc->c->arena, (size_t)n, sizeof *in);
  out = srv_arena_calloc(&pc->c->arena, (size_t)n, sizeof *out);
  if (!in || !out)
    return srv_fail(err, 500, ptr, "out of memory reading the layers");
  srv_pctx_child(pc, "layers", &lc);
  for (i = 0; i < n; i++) {
    struct srv_pctx one;
    struct srv_pbind b = {&tab_fire_layer, &in[i], 0};
    const struct srv_ptable *tabs[1] = {&tab_fire_layer};
    const json_t *obj = h->layers ? json_array_get(h->layers, (size_t)i) : NULL;
    char idx[24];

    snprintf(idx, sizeof idx, "%lld", (long long)i);
    srv_pctx_child(&lc, idx, &one);
    if (srv_params_parse(&one, obj, &b, err) != 0)
      return -1;
    srv_params_unknown(&one, obj, tabs, 1, NULL);
    out[i].weight = &in[i].weight;
    out[i].bias = in[i].bias.data ? &in[i].bias : NULL;
  }
  h->p.layers = out;
  h->p.n_layers = (int)n;
  return 0;
}

/* ==== the families ===================================================== */

/* After the table's members are parsed into h: per-head lists go to the
 * library in double (it rounds ALiBi's slopes for its float32 table and
 * keeps Kerple's), the T5 table and the FIRE layers are attached. */
static int alibi_finish(const struct srv_pctx *pc, struct bias_holder *h,
                        const struct srv_pbind *b, struct srv_err *err)
{
  (void)b;
  if (h->slopes.data &&
      srv_params_list(pc, "slopes", &h->slopes, h->p.num_heads, "num_heads",
                      &h->p.slopes_f64, err) != 0)
    return -1;
  return 0;
}

static int t5_finish(const struct srv_pctx *pc, struct bias_holder *h,
                     const struct srv_pbind *b, struct srv_err *err)
{
  (void)pc;
  (void)err;
  /* No table: buckets alone, HF's 32 of them unless told (the library
   * refuses bias values without the table, naming it). */
  if (h->table.data)
    h->p.table = &h->table;
  else if (!srv_pbind_seen(b, "relative_attention_num_buckets"))
    h->p.num_buckets = 32;
  return 0;
}

static int fire_finish(const struct srv_pctx *pc, struct bias_holder *h,
                       const struct srv_pbind *b, struct srv_err *err)
{
  (void)b;
  return fire_layers(pc, h, err);
}

static int kerple_finish(const struct srv_pctx *pc, struct bias_holder *h,
                         const struct srv_pbind *b, struct srv_err *err)
{
  const int64_t H = h->p.num_heads;

  (void)b;
  if (srv_params_list(pc, "r1", &h->r1, H, "num_heads", &h->p.r1_f64,
                      err) != 0 ||
      srv_params_list(pc, "r2", &h->r2, H, "num_heads", &h->p.r2_f64, err) != 0)
    return -1;
  return 0;
}

/* One bias family as the server reads it. */
struct bias_family {
  const struct srv_ptable *params; /* its members of the bias object */
  /* Turns the parsed members into library parameters; NULL: nothing to
   * do.  -1 with err. */
  int (*finish)(const struct srv_pctx *pc, struct bias_holder *h,
                const struct srv_pbind *b, struct srv_err *err);
  double cell_flops; /* rough cost of one table cell, for --max-gflop */
  int buckets;       /* return ["buckets"] is allowed */
};

/* Indexed by enum ab_bias_method; the size check fails when the enum grows
 * without this list (tests/server/test-params.c checks every entry's
 * name against the library's). */
static const struct bias_family bias_families[] = {
    [AB_BIAS_NONE] = {.params = &btab_none, .cell_flops = 2},
    [AB_BIAS_ALIBI] = {.params = &btab_alibi, .finish = alibi_finish,
                       .cell_flops = 2},
    [AB_BIAS_T5] = {.params = &btab_t5, .finish = t5_finish, .cell_flops = 4,
                    .buckets = 1},
    [AB_BIAS_FIRE] = {.params = &btab_fire, .finish = fire_finish,
                      .cell_flops = 10},
    [AB_BIAS_KERPLE] = {.params = &btab_kerple, .finish = kerple_finish,
                        .cell_flops = 30},
};
_Static_assert(sizeof bias_families / sizeof bias_families[0] ==
                   AB_BIAS_METHOD_LAST_,
               "one entry per bias method");

const struct srv_ptable *srv_bias_method_params(enum ab_bias_method m)
{
  if ((int)m < 0 || m >= AB_BIAS_METHOD_LAST_)
    return NULL;
  return bias_families[m].params;
}

int srv_bias_parse_method(const struct srv_pctx *pc, const json_t *obj,
                          struct ab_bias_params *p, struct srv_err *err)
{
  const struct bias_family *f = &bias_families[p->method];
  struct bias_holder *h;
  struct srv_pbind b;
  enum ab_status st;

  h = srv_arena_calloc(&pc->c->arena, 1, sizeof *h);
  if (!h)
    return srv_fail(err, 500, NULL, "out of memory");
  h->p = *p;
  b = (struct srv_pbind){f->params, h, 0};
  if (srv_params_parse(pc, obj, &b, err) != 0)
    return -1;
  if (f->finish && f->finish(pc, h, &b, err) != 0)
    return -1;
  st = ab_bias_check(&h->p);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, pc->ptr, NULL);
  *p = h->p;
  return 0;
}

/* ==== the handler ======================================================= */

/* Rough cost of one table cell of family m, for the --max-gflop budget. */
double srv_bias_cell_flops(enum ab_bias_method m)
{
  return bias_families[m].cell_flops;
}

int srv_h_bias(struct srv_call *c, struct srv_err *err)
{
  struct srv_pctx pc;
  struct bias_req *rq;
  struct srv_pbind common;
  const struct srv_ptable *tabs[3];
  int method, png = c->in.fmt == SRV_FMT_PNG;
  double cells, out_bytes;
  ab_job_t *job = NULL;
  enum ab_status st;
  float *bias = NULL;
  int32_t *buckets = NULL;

  if (!(rq = srv_handler_begin(c, &pc, sizeof *rq, err)))
    return -1;

  if (srv_params_enum(&pc, c->in.params, &srv_param_bias_method, &method, err) <
      0)
    return -1;
  common = (struct srv_pbind){&srv_ptab_bias_common, rq, 0};
  if (srv_params_parse(&pc, c->in.params, &common, err) != 0)
    return -1;
  if (!srv_pbind_seen(&common, "k_len"))
    rq->k_len = rq->q_len;
  ab_geometry_init(&rq->g, rq->q_len, rq->k_len);
  if (srv_pbind_seen(&common, "q_offset"))
    rq->g.q_offset = rq->q_offset;
  rq->g.causal = rq->causal;
  if (srv_window_parse(&pc, rq->window, rq->sliding,
                       srv_pbind_seen(&common, "sliding_window"),
                       &rq->g.window_left, &rq->g.window_right, err) != 0)
    return -1;

  ab_bias_params_init(&rq->p);
  rq->p.method = (enum ab_bias_method)method;
  rq->p.num_heads = rq->num_heads;
  if (srv_bias_parse_method(&pc, c->in.params, &rq->p, err) != 0)
    return -1;
  tabs[0] = &srv_ptab_bias_common;
  tabs[1] = bias_families[method].params;
  tabs[2] = &srv_ptab_output;
  srv_params_unknown(&pc, c->in.params, tabs, 3, NULL);
  srv_params_unused_bin(&pc);

  if ((rq->ret & RET_BUCKETS) && !bias_families[method].buckets)
    return srv_fail(err, 400, "/return",
                    "buckets exist only for method t5, not %s",
                    ab_bias_method_name((enum ab_bias_method)method));
  if (png && srv_picture_select(&pc, &rq->pic, srv_pbind_seen(&common, "head"),
                                rq->num_heads, err) != 0)
    return -1;

  /* Budget before allocating: the tables (for PNG computed whole, then
   * drawn: the picture's pixels are bounded by the panels' count). */
  cells = (double)rq->q_len * (double)rq->k_len;
  out_bytes = 0;
  if (rq->ret & RET_BIAS)
    out_bytes += png ? 4.0 * cells * (double)rq->num_heads
                     : srv_out_bytes(c, cells * (double)rq->num_heads);
  if (rq->ret & RET_BUCKETS)
    out_bytes += 4.0 * cells;
  if (png)
    out_bytes += srv_codec_png_bound(rq->pic.n);
  if (srv_check_budget(c, out_bytes,
                       cells * (double)rq->num_heads *
                           bias_families[method].cell_flops,
                       err) != 0)
    return -1;

  if (png) {
    /* Computed into the arena and drawn by srv_h_bias_finish. */
    int64_t cells_i, total;
    if (ab_mul_overflow(rq->q_len, rq->k_len, &cells_i) ||
        ab_mul_overflow(cells_i, rq->num_heads, &total) ||
        (uint64_t)total > SIZE_MAX / sizeof(float))
      return srv_fail(err, 413, NULL, "the table is too large");
    if (rq->ret & RET_BIAS)
      bias = srv_arena_alloc(&c->arena, (size_t)total * sizeof(float));
    if (rq->ret & RET_BUCKETS)
      buckets = srv_arena_alloc(&c->arena, (size_t)cells_i * sizeof(int32_t));
    if (((rq->ret & RET_BIAS) && !bias) || ((rq->ret & RET_BUCKETS) && !buckets))
      return srv_fail(err, 500, NULL, "cannot allocate the table");
  } else {
    if (rq->ret & RET_BIAS) {
      int64_t shape[3] = {rq->num_heads, rq->q_len, rq->k_len};
      bias = srv_output_tensor(c, "bias", AB_DTYPE_F32, 3, shape, err);
      if (!bias)
        return -1;
    }
    if (rq->ret & RET_BUCKETS) {
      int64_t shape[2] = {rq->q_len, rq->k_len};
      buckets = srv_output_tensor(c, "buckets", AB_DTYPE_I32, 2, shape, err);
      if (!buckets)
        return -1;
    }
  }
  rq->bias = bias;
  rq->buckets = buckets;
  st = ab_bias_table_job(&rq->p, &rq->g, bias, buckets, &job);
  if (st != AB_STATUS_OK)
    return srv_fail_lib(err, st, "", NULL);
  return srv_add_job(c, job, err);
}

int srv_h_bias_finish(struct srv_call *c, struct srv_err *err)
{
  struct bias_req *rq = c->plan.state;
  float *conv;
  int64_t cells, i;
  char title[96];

  if (c->in.fmt != SRV_FMT_PNG || !rq)
    return 0;
  cells = rq->q_len * rq->k_len; /* checked in prepare */
  if (rq->bias) {
    snprintf(title, sizeof title, "%s bias",
             ab_bias_method_name(rq->p.method));
    return srv_picture_draw(c, &rq->pic, rq->bias, 1, rq->q_len, rq->k_len,
                            rq->g.q_offset, title, 0, err);
  }
  /* Only buckets were asked for: draw them (one table for every head). */
  conv = srv_arena_alloc(&c->arena, (size_t)cells * sizeof(float));
  if (!conv)
    return srv_fail(err, 500, NULL, "cannot allocate the picture");
  for (i = 0; i < cells; i++)
    conv[i] = (float)rq->buckets[i];
  return srv_picture_draw(c, &rq->pic, conv, 0, rq->q_len, rq->k_len,
                          rq->g.q_offset, "t5 buckets", 0, err);
}
