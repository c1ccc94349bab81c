/* params.h: the request parameters of the /v1 routes, described once in
 * tables (name, JSON type, default, valid range or choices, one-line
 * description, required?).  The same tables drive the parser (type and
 * range checks, defaults, 400s naming the JSON pointer, unknown members
 * listed for X-Attnbias-Ignored) and the GET /v1/methods catalog, so the
 * catalog cannot drift from what the handlers accept.
 *
 * Private to server/handlers/; the route handlers themselves are declared
 * in srv.h. */
#ifndef SRV_PARAMS_H
#define SRV_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "srv.h"

/* ======================================================================
 * parameter descriptions
 * ====================================================================== */

/* The JSON type of a parameter and where the parser stores it in the bound
 * struct (at srv_param.off). */
enum srv_ptype {
  SRV_PT_INT,       /* integer (an integral real is accepted) -> int64_t */
  SRV_PT_NUM,       /* finite number -> double */
  SRV_PT_BOOL,      /* true | false -> int 0/1 */
  SRV_PT_ENUM,      /* string among choices -> int (the choice's value) */
  SRV_PT_STR,       /* any string -> const char * (borrowed) */
  SRV_PT_ENUMS,     /* non-empty array of distinct strings among choices ->
                       unsigned bitmask of (1u << value) */
  SRV_PT_TENSOR,    /* a tensor in a form of docs/http.md, or a safetensors
                       entry of the dotted name -> struct ab_tensor
                       (data NULL when absent) */
  SRV_PT_INTS,      /* array of integers, each within [min, max] ->
                       const json_t * (borrowed from c->in.params) */
  SRV_PT_POSITIONS, /* integer n (>= 1) or a non-empty array (of numbers, or
                       of equal-length arrays) -> const json_t * */
  SRV_PT_OBJECT,    /* object, parsed by its own tables -> const json_t * */
  SRV_PT_LAYERS     /* non-empty array of objects -> const json_t * */
};

enum srv_pflag {
  SRV_PF_REQ = 1u << 0,      /* absent (or null) -> 400 */
  SRV_PF_DEF = 1u << 1,      /* absent -> store srv_param.def */
  SRV_PF_MIN = 1u << 2,      /* value >= min */
  SRV_PF_MIN_EXCL = 1u << 3, /* value > min */
  SRV_PF_MAX = 1u << 4,      /* value <= max */
  SRV_PF_MAX_EXCL = 1u << 5, /* value < max */
  SRV_PF_NOSTORE = 1u << 6,  /* known here but read by someone else (the
                                route's selector "method", the codec's
                                output options): type-checked, not stored */
  SRV_PF_ZERO_DEF = 1u << 7, /* (numbers) 0 means "use the default", as
                                Hugging Face does for beta_fast/beta_slow */
  SRV_PF_F64 = 1u << 8       /* (tensors) a parameter the library evaluates
                                in double: numbers written in JSON are kept
                                as float64, not rounded to float32 as input
                                tensors are (srv_codec_tensor_as) */
};

/* One choice of an ENUM/ENUMS parameter. */
struct srv_choice {
  const char *name;
  int value;
  const char *desc; /* one line, for the catalog */
};

struct srv_param {
  const char *name;    /* JSON member name (Hugging Face's where one exists) */
  const char *alias;   /* a second accepted name ("type" for rope_type) */
  enum srv_ptype type;
  unsigned flags;      /* enum srv_pflag */
  double min, max;     /* with the MIN and MAX flags (INTS: per element) */
  double def;          /* with SRV_PF_DEF: number, enum value or bitmask */
  const char *def_rule; /* catalog text when the default is computed */
  const struct srv_choice *choices; /* ENUM/ENUMS; ends at name NULL */
  size_t off;          /* offset of the field in the bound struct */
  const char *desc;    /* one line, for the catalog */
};

/* A named list of parameters: one route, method or rope_type. */
struct srv_ptable {
  const char *name;
  const char *desc;
  const struct srv_param *p;
  int n;
};

#define SRV_PTABLE(nm, ds, arr)                                                \
  { (nm), (ds), (arr), (int)(sizeof(arr) / sizeof((arr)[0])) }

/* A table bound to the struct its offsets point into.  `seen` has bit i set
 * when parameter i was present (not null) in the request. */
struct srv_pbind {
  const struct srv_ptable *t;
  void *dst;
  uint64_t seen;
};

/* ======================================================================
 * parsing
 * ====================================================================== */

/* Where in the request an object sits: its JSON pointer (for errors and the
 * ignored list) and its dotted path (for srv_codec_tensor and safetensors
 * names).  Children are made with srv_pctx_child. */
struct srv_pctx {
  struct srv_call *c;
  unsigned char *bin_used; /* [c->in.nbin]: safetensors entries consumed */
  char ptr[192];           /* "" for the root, "/rope_scaling", ... */
  char dot[192];           /* "" for the root, "bias.layers.0", ... */
};

/* The root context of a request (allocates the bin_used marks in the arena;
 * -1 with err 500 on allocation failure). */
int srv_pctx_root(struct srv_call *c, struct srv_pctx *pc,
                  struct srv_err *err);
/* How every /v1 handler starts: the root context, and the handler's state
 * (`size` zeroed bytes in the arena, also stored in c->plan.state).  Returns
 * the state, or NULL with err set (500). */
void *srv_handler_begin(struct srv_call *c, struct srv_pctx *pc, size_t size,
                        struct srv_err *err);
/* The context of member `name` (an object key or an array index). */
void srv_pctx_child(const struct srv_pctx *pc, const char *name,
                    struct srv_pctx *child);
/* JSON pointer of member `name` of pc's object into buf (RFC 6901
 * escaping); returns buf. */
const char *srv_pctx_ptr(const struct srv_pctx *pc, const char *name,
                         char *buf, size_t size);

/* Parse the members of obj (an object, or NULL for "all absent") that b's
 * table describes: type and range checks, defaults, required members, into
 * b->dst; sets b->seen.  Tensor parameters are looked up through
 * srv_codec_tensor even when obj lacks them (safetensors bodies).  Returns
 * 0, or -1 with a 400 naming the member's JSON pointer and value. */
int srv_params_parse(const struct srv_pctx *pc, const json_t *obj,
                     struct srv_pbind *b, struct srv_err *err);

/* Append to c->in.ignored the pointer of every member of obj that none of the
 * n tables describes (nor `extra`, a NULL-terminated list of other known
 * names, may be NULL). */
void srv_params_unknown(const struct srv_pctx *pc, const json_t *obj,
                        const struct srv_ptable *const *tables, int n,
                        const char *const *extra);

/* A parameter list: tensor t (member `name` of pc's object) must be rank 1
 * with `want` entries, else a 400 naming it and "<what> = <want>"
 * ("rotary_dim/2", "num_heads").  Its values as doubles in the arena
 * (float64 keeps every digit).  -1 with err. */
int srv_params_list(const struct srv_pctx *pc, const char *name,
                    const struct ab_tensor *t, int64_t want, const char *what,
                    const double **out, struct srv_err *err);

/* After parsing: append every safetensors entry no parameter consumed. */
void srv_params_unused_bin(const struct srv_pctx *pc);

/* 1 when the parameter `name` of b's table was present in the request. */
int srv_pbind_seen(const struct srv_pbind *b, const char *name);

/* Look up a tensor by dotted path below pc (marks the safetensors entry as
 * used); as srv_codec_tensor: 1 found, 0 absent, -1 error. */
int srv_params_tensor(const struct srv_pctx *pc, const char *name,
                      int required, struct ab_tensor *out,
                      struct srv_err *err);

/* Read the selector parameter p (an ENUM such as "method") of obj, with the
 * same checks as srv_params_parse.  Returns 1 and sets *value, 0 when
 * absent and not required (value untouched), -1 on error. */
int srv_params_enum(const struct srv_pctx *pc, const json_t *obj,
                    const struct srv_param *p, int *value,
                    struct srv_err *err);

/* Copy an SRV_PT_INTS array (already checked by srv_params_parse) into out
 * (n = json_array_size(a) entries). */
void srv_params_ints(const json_t *a, int64_t *out);

/* Find a table's parameter by name (NULL if none). */
const struct srv_param *srv_ptable_find(const struct srv_ptable *t,
                                        const char *name);

/* ======================================================================
 * catalog (GET /v1/methods)
 * ====================================================================== */

/* {"name", "type", "required", "default" | "default_rule", "minimum" |
 *  "exclusiveMinimum", "maximum" | "exclusiveMaximum", "enum",
 *  "aliases", "description"}.  New reference. */
json_t *srv_params_catalog_param(const struct srv_param *p);
/* [param, ...] of the tables, in order.  New reference. */
json_t *srv_params_catalog_list(const struct srv_ptable *const *tables,
                                int n);

/* ======================================================================
 * shared by the handlers
 * ====================================================================== */

/* Bytes the server holds for a float output of `numel` elements: as the
 * response carries it (binary at the output dtype, base64, or JSON text at
 * its longest per number) plus the float32 results it is converted from
 * when they are not sent as they are.  Budgets (--max-output-mb) are
 * decided at that size. */
double srv_out_bytes(const struct srv_call *c, double numel);

/* The options every route's codec reads ("encoding", "output_dtype",
 * "output"): listed in the catalog, never reported as ignored. */
extern const struct srv_ptable srv_ptab_output;

/* Encodings (encodings.c). */
extern const struct srv_ptable srv_ptab_enc_common;
extern const struct srv_ptable *const srv_ptab_enc_methods[];
extern const int srv_ptab_enc_nmethods;

/* RoPE (rope.c): the config fields shared by /v1/rope and the attention
 * "rope" object, the /v1/rope request fields, the attention-only ones, the
 * rope_scaling fields common to every rope_type and one table per
 * rope_type (index = enum ab_rope_type). */
extern const struct srv_ptable srv_ptab_rope_config;
extern const struct srv_ptable srv_ptab_rope_request;
extern const struct srv_ptable srv_ptab_rope_attn;
extern const struct srv_ptable srv_ptab_rope_scaling;
extern const struct srv_ptable *const srv_ptab_rope_types[];
extern const int srv_ptab_rope_ntypes;

/* Bias (bias.c): the /v1/bias request fields (geometry, return, head), and
 * the members of method m's bias object (NULL when m is not a method; the
 * methods are 0 .. AB_BIAS_METHOD_LAST_ - 1). */
extern const struct srv_ptable srv_ptab_bias_common;
const struct srv_ptable *srv_bias_method_params(enum ab_bias_method m);

/* Analysis (analysis.c): the fields of every kind, and kind bias's beside
 * the method's own. */
extern const struct srv_ptable srv_ptab_analysis;
extern const struct srv_ptable srv_ptab_analysis_bias;

/* Attention (attention.c). */
extern const struct srv_ptable srv_ptab_attention;

/* A RoPE configuration parsed from /v1/rope or the attention "rope" object.
 * Everything lives in the call's arena (jobs borrow it). */
struct srv_rope_cfg {
  struct ab_rope_params p;
  int64_t orig_max_pos_top;     /* top-level original_max_position_embeddings */
  int64_t seq_len;              /* 0: default */
  const json_t *scaling;        /* rope_scaling object or NULL */
  const json_t *mrope_section;  /* rope_scaling.mrope_section or NULL */
  struct ab_tensor short_t, long_t;
  int64_t rotary_dim, n_freq;   /* resolved by ab_rope_check */
  int n_axes;
};

/* Parse the RoPE config members of obj (context pc: the root for /v1/rope,
 * "/rope" in attention) into cfg, including rope_scaling (whose unknown
 * members it reports); the caller reports unknown members of obj itself
 * (srv_ptab_rope_config plus its own tables).  head_dim_hint (> 0) is the
 * last dimension of q/k when the request has them: head_dim defaults to it
 * and must equal it.  Resolves and validates with ab_rope_check.  -1 with
 * err on failure. */
int srv_rope_parse(const struct srv_pctx *pc, const json_t *obj,
                   int64_t head_dim_hint, struct srv_rope_cfg *cfg,
                   struct srv_err *err);

/* Read positions (SRV_PT_POSITIONS json) for n_axes axes into an arena
 * array [n_axes, n] (int64).  want_n > 0 fixes the token count (it must
 * match a list).  An integer form means 0..n-1 on every axis, and so does
 * j NULL with want_n (the default of /v1/rope with q or k); a flat list
 * is used for every axis (text tokens of multi-axis RoPE) unless
 * flat_ok is 0.  field is the member's JSON pointer.  Sets *n_out and
 * *max_out (largest position).  -1 with err. */
int srv_rope_positions(struct srv_call *c, const json_t *j, const char *field,
                       int n_axes, int flat_ok, int64_t want_n,
                       int64_t **out, int64_t *n_out, int64_t *max_out,
                       struct srv_err *err);
/* The token count of a positions json without materialising it: n for the
 * integer form, the (inner) list length otherwise. */
int64_t srv_positions_count(const json_t *j);

/* Parse a bias method's parameters (context pc, object obj) into p, whose
 * method and num_heads the caller has set (p initialised with
 * ab_bias_params_init).  Per-head arrays, the T5 table and the FIRE layers
 * are read into the arena; the result is validated with ab_bias_check.  The
 * caller reports unknown members (srv_bias_method_params).  -1 with
 * err. */
int srv_bias_parse_method(const struct srv_pctx *pc, const json_t *obj,
                          struct ab_bias_params *p, struct srv_err *err);

/* Rough cost of one bias-table cell of method m, for the --max-gflop
 * budget. */
double srv_bias_cell_flops(enum ab_bias_method m);

/* The bias methods' selector parameter ("method"). */
extern const struct srv_param srv_param_bias_method;

/* Window members "window" [left, right] / "sliding_window" W of one
 * binding (already parsed json) into left/right (-1 unbounded).  Both
 * given -> 400.  -1 with err. */
int srv_window_parse(const struct srv_pctx *pc, const json_t *window,
                     int64_t sliding, int has_sliding, int64_t *left,
                     int64_t *right, struct srv_err *err);

/* A handler's whole answer as compact JSON (c->plan.custom, application/json);
 * takes root (may be NULL: out of memory).  `what` names it in errors. */
int srv_reply_json(struct srv_call *c, json_t *root, const char *what,
                   struct srv_err *err);

/* Element count of a tensor as a double: budgets compare sizes that may not
 * fit in int64 (they are refused before any exact arithmetic). */
double srv_numel_d(const struct ab_tensor *t);

/* ======================================================================
 * pictures (picture.c): the image/png answers of /v1/bias and
 * /v1/attention -- one head ("head"), or several as a grid ("heads")
 * ====================================================================== */

/* The members a request's parameter table binds (SRV_PICTURE_PARAMS), and
 * the heads chosen from them by srv_picture_select. */
struct srv_picture {
  int64_t head;        /* "head", default 0 */
  const json_t *heads; /* "heads" [h, ...] or NULL */
  const int64_t *sel;  /* the heads to draw (arena), n of them */
  int n;
};

/* The table entries of "head" and "heads", for a request struct holding a
 * struct srv_picture at offset `base`. */
#define SRV_PICTURE_PARAMS(base)                                               \
  {.name = "head", .type = SRV_PT_INT, .flags = SRV_PF_DEF | SRV_PF_MIN,       \
   .def = 0, .min = 0, .off = (base) + offsetof(struct srv_picture, head),     \
   .desc = "the head drawn when Accept is image/png"},                         \
  {.name = "heads", .type = SRV_PT_INTS, .flags = SRV_PF_MIN, .min = 0,        \
   .off = (base) + offsetof(struct srv_picture, heads),                        \
   .desc = "heads drawn as a grid when Accept is image/png (1 to 64, "         \
           "instead of head)"}

/* Which heads to draw, of num_heads: "heads" (1 to SRV_HEATMAP_MAX_PANELS,
 * each < num_heads) or else "head".  has_head: "head" was in the request
 * (with "heads" too it is a 400).  -1 with err naming the member. */
int srv_picture_select(const struct srv_pctx *pc, struct srv_picture *pic,
                       int has_head, int64_t num_heads, struct srv_err *err);

/* Draw the chosen heads of `table` (num_heads planes of [rows, cols],
 * plane h at table + h*rows*cols) as the call's image/png answer; row 0 is
 * query position row0.  heads: 0 for a table without a head axis (one
 * untitled panel).  zero_masked: the table is attention weights, whose
 * masked keys are the exact zeros. */
int srv_picture_draw(struct srv_call *c, const struct srv_picture *pic,
                     const float *table, int heads, int64_t rows,
                     int64_t cols, int64_t row0, const char *title,
                     int zero_masked, struct srv_err *err);

#endif /* SRV_PARAMS_H */
