/* srv.h: the seams between the parts of attnbiasd.  Each part owns one
 * directory and implements its section below (or its own header):
 *   util/     errors, arena, buffers, logging             (srv_err_*, ...)
 *   http/     libmicrohttpd glue, auth, limits, lifecycle (srv_http_*)
 *   call/     a request's pipeline (call/call.h)          (srv_call_*)
 *   metrics/  counters (metrics/metrics.h)                (srv_metrics_*)
 *   work/     libuv loop + pool, running a call's jobs    (srv_work_*)
 *   route/    routes.def and the method+path table        (srv_route_*)
 *   codec/    JSON/base64/safetensors/npy/PNG <-> tensors (srv_codec_*)
 *   handlers/ one file per route: params -> library jobs  (srv_h_*)
 * Which part may use which: docs/internals/layers.md.
 * A request's life: http collects the body -> route match -> auth ->
 * srv_codec_decode_request -> handler prepare (validate, budgets, jobs,
 * outputs declared) -> jobs' pieces run on the pool -> handler finish ->
 * srv_codec_encode -> http sends c->resp.body (and c->resp.seg).  Errors at
 * any step become a problem+json body through srv_codec_problem. */
#ifndef SRV_H
#define SRV_H

#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "attnbias.h"

#define SRV_NAME "attnbiasd"

/* ======================================================================
 * util/: errors
 * ====================================================================== */

/* One error, destined to become one problem+json body. */
struct srv_err {
  int http;             /* 400, 401, 404, 405, 406, 413, 415, 500, 503 */
  char slug[48];        /* type = https://attnbias.dev/errors/<slug> */
  char title[64];       /* short, fixed per slug */
  char field[192];      /* JSON pointer ("/q/shape") or "" */
  char detail[512];     /* sentence naming the offending value */
  int retry_after;      /* seconds (503), 0: none */
  char allow[32];       /* Allow header (405), "" : none */
};

/* src (NULL: "") into dst of cap >= 1 bytes, cut to fit, NUL-terminated:
 * the copy that request paths make many times (no printf). */
void srv_strcpy(char *dst, size_t cap, const char *src);

/* Set e (http status, field pointer or NULL, printf detail); slug and title
 * follow from the status unless srv_err_slug overrides.  Returns -1 so
 * callers can `return srv_fail(...)`. */
int srv_fail(struct srv_err *e, int http, const char *field, const char *fmt,
             ...) __attribute__((format(printf, 4, 5)));
/* Override slug/title after srv_fail (e.g. "unsupported-media-type"). */
void srv_err_slug(struct srv_err *e, const char *slug, const char *title);
/* Turn the library's last error into a 400 (413 for AB_STATUS_OVERFLOW,
 * 500 for NO_MEMORY): field = prefix + "/" + arg with dots as slashes.
 * `prefix` is the pointer of the object the library call describes ("",
 * "/bias", "/rope"); a leading component of the argument equal to `strip`
 * ("bias", "rope"; NULL: none) is removed first, because the library names
 * arguments as the attention request does. */
int srv_fail_lib(struct srv_err *e, enum ab_status st, const char *prefix,
                 const char *strip);

/* ======================================================================
 * util/: memory
 * ====================================================================== */

/* A request's arena: every allocation lives until srv_arena_free.  Blocks
 * are malloc'd individually (64-byte aligned), so large tensors do not
 * need one huge region.  `cap` bounds the total (0: unbounded). */
struct srv_arena_block;
struct srv_arena {
  struct srv_arena_block *head;
  size_t used, cap;
};
void srv_arena_init(struct srv_arena *a, size_t cap);
void *srv_arena_alloc(struct srv_arena *a, size_t n); /* NULL: cap/oom */
void *srv_arena_calloc(struct srv_arena *a, size_t n, size_t size);
char *srv_arena_strdup(struct srv_arena *a, const char *s);
void srv_arena_free(struct srv_arena *a);

/* A growable byte buffer with a ceiling (curl dynbuf).  max 0 (or a
 * zero-filled struct): no ceiling.  The bytes stay NUL-terminated (not
 * counted in len); a failing call leaves the buffer as it was. */
struct srv_buf {
  char *data;
  size_t len, cap, max;
};
void srv_buf_init(struct srv_buf *b, size_t max);
int srv_buf_reserve(struct srv_buf *b, size_t extra); /* -1: over max/oom */
int srv_buf_append(struct srv_buf *b, const void *p, size_t n);
int srv_buf_printf(struct srv_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void srv_buf_free(struct srv_buf *b);
/* Take ownership of the bytes (caller frees with free()). */
char *srv_buf_steal(struct srv_buf *b, size_t *len);

/* Large blocks kept for reuse (util/buf.c): fresh pages cost a kernel
 * page fault and zeroing on first touch, which for a 100 MB binary request
 * is more CPU than the rest of the service's work on it.  Blocks of at
 * least SRV_MEM_BIG bytes given back with srv_mem_free are kept (the
 * newest SRV_MEM_KEEP_N, SRV_MEM_KEEP_BYTES in all) for the next
 * srv_mem_alloc of a similar size; the pool's loop trims idle ones. */
#define SRV_MEM_BIG ((size_t)4 << 20)
#define SRV_MEM_ALIGN 64
#define SRV_MEM_KEEP_N 8                      /* blocks kept at most */
#define SRV_MEM_KEEP_BYTES ((size_t)1 << 30)  /* bytes kept at most */
/* n bytes or more (*got receives the usable size), SRV_MEM_ALIGN-aligned,
 * uninitialised; realloc and free accept it.  NULL when out of memory. */
void *srv_mem_alloc(size_t n, size_t *got);
/* Give back a block of `size` usable bytes from srv_mem_alloc, malloc or
 * realloc (NULL is ignored): kept when large and aligned, else freed. */
void srv_mem_free(void *p, size_t size);
/* Free the kept blocks unused for idle_s seconds or more (0: all). */
void srv_mem_trim(double idle_s);
/* Bytes currently kept (for tests and metrics). */
size_t srv_mem_kept(void);
/* Return the C library's free heap pages to the kernel (glibc's
 * malloc_trim; nothing elsewhere).  For an idle server after load. */
void srv_mem_release(void);

/* ======================================================================
 * configuration (main.c fills it once, read-only afterwards)
 * ====================================================================== */
struct srv_config {
  char host[256];
  int port;
  char unix_socket[108];   /* "" : TCP on host:port; else this socket path */
  int unix_socket_mode;    /* its permissions; -1: as the umask makes them */
  int threads;             /* worker pool size */
  int max_queue;           /* admitted but unfinished requests */
  double max_body_mb;
  double max_output_mb;
  double max_gflop;
  double timeout_s;
  int max_connections;
  double drain_s;
  char api_key[512];       /* "" : no auth */
  int http_threads;        /* libmicrohttpd's internal pool */
  char tls_cert[1024];     /* "" : plain HTTP; else HTTPS with this PEM
                            * certificate (chain), reread on SIGHUP */
  char tls_key[1024];      /* its PEM private key */
  char tls_ca[1024];       /* PEM CA(s) --healthcheck verifies the server
                            * with; "" : the certificate tls_cert itself */
  /* Connection bounds (http/guard.c and libmicrohttpd). */
  double header_timeout_s; /* headers complete within this of accept */
  double body_grace_s;     /* then a body must keep body_min_rate_kb */
  double body_min_rate_kb; /* KiB/s on average */
  double linger_s;         /* lingering close: at most this long, */
  double linger_mb;        /* this many MiB read and dropped, */
  int linger_max;          /* this many sockets at a time */
  int max_connections_per_ip;
  /* Browsers (http/cors.c): the origins whose pages may call the server,
   * one per line ("*": any, refused with an API key); "" : CORS off. */
  char cors_origins[2048];
  int cors_from_env;       /* cors_origins came from ATTNBIAS_CORS_ORIGIN */
};
extern struct srv_config srv_cfg;

/* ======================================================================
 * a call: one request being answered
 * ====================================================================== */
enum srv_fmt {
  SRV_FMT_JSON = 0,
  SRV_FMT_SAFETENSORS = 1,
  SRV_FMT_NPY = 2,
  SRV_FMT_PNG = 3
};

/* A tensor decoded from a safetensors request body, by dotted name. */
struct srv_named_tensor {
  const char *name; /* arena */
  struct ab_tensor t; /* data points into the body (zero copy) or arena */
};

#define SRV_MAX_OUTPUTS 32
#define SRV_MAX_JOBS 8

/* A named output: a float32 (or int32) contiguous tensor in the arena, or a
 * scalar -- a number, or with `json` set a JSON value (compact text in the
 * arena) that JSON answers carry as it is and safetensors answers as a
 * string in __metadata__.  The codec converts float outputs to
 * c->in.out_dtype on encode. */
struct srv_output {
  const char *name;
  int is_scalar;
  double scalar;
  const char *json;
  struct ab_tensor t;
};

struct srv_route;
struct srv_v2; /* codec/v2.c */
struct srv_stream; /* call/call.c */
struct srv_cfg_trace; /* handlers/config-apply.c */
struct srv_call;

/* Bytes of a response sent from where they lie (see srv_call_response.seg). */
struct srv_seg {
  const void *data;
  size_t len;
};

/* A call is written in stages, and each part below has one writer: the
 * stage that fills it, which the stages after it only read.  call/ sets
 * every part up and releases it, and moves a handler's own body into the
 * response; besides that:
 *
 *   req   http/ (call/: body_avail, v2 route)    what the client sent
 *   in    the codec's decode, srv_codec_ignore,  what the body says
 *         the model config (srv_config_apply)
 *   plan  the route's handler (prepare, finish)  what is to be computed
 *   resp  the codec's encode, the error path     what goes back
 *   run   call/ and work/                        how the jobs run
 *   ts    each stage, as it ends                 what the call measured
 *
 * The arena, which every stage allocates from, belongs to the whole call
 * (srv_call_init, srv_call_release in call/call.h). */

/* ---- request: set by http/ before decode ---- */
struct srv_call_request {
  const struct srv_route *route; /* a v2 call: its model's /v1 route, once
                                  * decoded */
  const char *content_type; /* header value or NULL */
  const char *accept;       /* header value or NULL */
  const char *infer_header; /* Inference-Header-Content-Length or NULL */
  /* Prefer: handling=strict (RFC 7240): unknown fields are a 400, and the
   * answer says Preference-Applied. */
  int strict;
  const char *body;         /* complete body (owned by http/) */
  size_t body_len;
  /* The buffer holding body, when http/ lets the call free it early: a
   * streamed call gives it back as soon as its last piece has run, so that
   * the next large request (often on the same connection, sent the moment
   * the answer's last byte arrives) can reuse the block (util/buf.c). */
  struct srv_buf *body_buf;
  /* Body bytes in place when prepare ran early (0: it ran on the whole
   * body); the codec must not read past them.  call/ sets it back to 0
   * when the body is complete. */
  size_t body_avail;
};

/* ---- inputs: set by srv_codec_decode_request, then completed by the
 * model config and by srv_codec_ignore while the handler reads them ---- */
struct srv_call_inputs {
  json_t *params;           /* the request object (owned); {} when no body */
  struct srv_named_tensor *bin; /* safetensors tensors, or NULL */
  int nbin;
  enum srv_fmt fmt;         /* negotiated from Accept */
  int out_dtype;            /* "output_dtype" (enum ab_dtype), default F32 */
  int b64;                  /* "encoding": "b64" */
  const char *pick;         /* "output": name (for npy), or NULL */
  void *codec;              /* codec-private (members read beside params),
                             * arena */
  /* An Open Inference Protocol call (codec/v2.c): its id, model and the
   * outputs it asked for, in the arena; NULL for every other call. */
  struct srv_v2 *v2;
  /* Unknown request fields, for X-Attnbias-Ignored: names separated by
   * commas, ready for the header (srv_codec_ignore); under
   * req.strict, strict_first is the first unknown field's pointer. */
  struct srv_buf ignored;
  char strict_first[192];
  /* What a model config filled in (srv_config_apply): where each filled
   * field came from, and the X-Attnbias-Config-Used, -Upstream and -Layer
   * header values ("" when no config was used). */
  struct srv_cfg_trace *cfg;
  char cfg_used[1024], cfg_upstream[512], cfg_layer[64];
};

/* ---- plan: set by the handler's prepare (and its finish) ---- */
struct srv_call_plan {
  ab_job_t *jobs[SRV_MAX_JOBS]; /* run before finish; freed by the call */
  int njobs;
  void *state;              /* handler-private, in the arena */
  struct srv_output outputs[SRV_MAX_OUTPUTS];
  int noutputs;
  /* A handler that encodes its own body (PNG heatmap, YAML, text) fills
   * these in prepare or finish; the codec then leaves them alone. */
  struct srv_buf custom;
  const char *custom_type;
  /* Extra response headers of a handler's own answer (the explorer page's
   * Content-Security-Policy): name/value pairs of static strings. */
  const char *const (*custom_headers)[2];
  int ncustom_headers;
};

/* ---- response: set by srv_codec_encode or the error path ---- */
struct srv_call_response {
  int status;
  struct srv_buf body;
  const char *type;
  /* A v2 answer with binary tensors: the length of its JSON header
   * (Inference-Header-Content-Length), 0 for any other answer. */
  size_t infer_header;
  /* When the sender takes segments (seg_ok: srv_call_init sets it, for
   * http/ sends them), a binary encoding may leave large tensors where
   * they lie (arena, body: alive until the call is released) instead of
   * copying them: the response is then body followed by seg[0..nseg).
   * Without it, body is all. */
  int seg_ok;
  struct srv_seg seg[SRV_MAX_OUTPUTS];
  int nseg;
};

/* ---- run: set by call/ and work/ while the jobs run ---- */
struct srv_call_run {
  /* Set when the response goes out while the pieces still run (see
   * srv_call_stream_begin): the pool calls piece_done(c, i) after each
   * piece of the call's job that succeeded. */
  struct srv_stream *stream;
  void (*piece_done)(struct srv_call *c, int64_t piece);
  /* Set (any thread) when nobody waits for the answer any more -- the
   * client of a streamed call went away: the pool skips the pieces it has
   * not started. */
  _Atomic int cancel;
  /* Set when the call was submitted before its body was complete (its
   * job built with inputs_later): the pool runs a piece only once the body
   * bytes it reads are in (work/work.h, struct srv_gate). */
  struct srv_gate *gate;
  /* An early call (srv_call_start_early): pieces done when the body was
   * complete, of how many (Server-Timing "early"). */
  int64_t early_done, early_pieces;
};

/* ---- timings: each stamp set by the stage that ends there ---- */
struct srv_call_times {
  /* When each phase ended (srv_now_ns, 0: not reached): the body was in,
   * decode began, decode + prepare were done, the first and the last piece
   * ran, the response was encoded.  They make the Server-Timing header. */
  uint64_t body, decode, prepared, run_start, run_end, encoded;
  double kernel_seconds; /* time spent in job pieces */
};

struct srv_call {
  struct srv_call_request req;
  struct srv_arena arena;
  struct srv_call_inputs in;
  struct srv_call_plan plan;
  struct srv_call_response resp;
  struct srv_call_run run;
  struct srv_call_times ts;
};

/* Whether a Prefer header value asks for handling=strict (RFC 7240: the
 * first "handling" preference counts; names and values are
 * case-insensitive; parameters after ';' are skipped).  (util/prefer.c) */
int srv_prefer_strict(const char *value);

/* ======================================================================
 * route/: the route table (routes.def, beside this file, is the single
 * list)
 * ====================================================================== */
struct srv_call;
struct srv_err;
typedef int (*srv_handler_fn)(struct srv_call *c, struct srv_err *err);

enum srv_route_flags {
  SRV_ROUTE_PUBLIC = 1,  /* no API key needed (health, metrics, openapi) */
  SRV_ROUTE_BODY = 2,    /* takes a request body (POST) */
  SRV_ROUTE_PNG = 4,     /* may answer image/png (Accept negotiation) */
  SRV_ROUTE_EARLY = 8,   /* may start computing while a safetensors body
                          * arrives (its handler honours c->req.body_avail) */
  SRV_ROUTE_FINISH = 16, /* its finish runs for every answer, not only
                          * image/png: it completes the outputs */
  SRV_ROUTE_V2 = 32      /* an Open Inference Protocol infer route: its
                          * body is decoded by codec/v2.c into the call of
                          * the /v1 route of its model */
};

struct srv_route {
  const char *method;    /* "GET" | "POST" */
  const char *path;
  const char *name;      /* metrics label, e.g. "rope" */
  srv_handler_fn prepare; /* validate + jobs + outputs (may do everything) */
  srv_handler_fn finish;  /* after the jobs of an image/png answer, or NULL */
  unsigned flags;
};

/* Find the route for method+path.  Returns it, or NULL with err set to 404,
 * or to 405 with err->allow filled. */
const struct srv_route *srv_route_find(const char *method, const char *path,
                                       struct srv_err *err);
/* The table itself (n entries), for tests and /v1/methods. */
const struct srv_route *srv_route_table(size_t *n);
/* The index in that table of the first route on path, -1 if none: a 405
 * is counted under the route of its path. */
int srv_route_path_index(const char *path);

/* ======================================================================
 * codec/: bodies <-> tensors
 * ====================================================================== */

/* Decode c->req.body by c->req.content_type (JSON or safetensors, else 415)
 * into c->in.params / c->in.bin, negotiate c->in.fmt from c->req.accept (406
 * when nothing acceptable is offered), and read the generic output options
 * "encoding", "output_dtype", "output". */
int srv_codec_decode_request(struct srv_call *c, struct srv_err *err);
/* The checks of srv_codec_decode_request that the headers alone decide
 * (415 for Content-Type, 406 for Accept), for refusing before the body is
 * read.  Returns 0, or -1 with err set. */
int srv_codec_check_media(const struct srv_route *route,
                          const char *content_type, const char *accept,
                          struct srv_err *err);

/* The bytes a safetensors body of `total` bytes opens with before its
 * tensors -- the length field and the header it gives -- read from the
 * first `have` bytes: > 0, 0 while fewer than 8 are in, -1 when the length
 * field cannot be right (no safetensors body, or a broken one: decoding the
 * whole body will say).  For computing while a body arrives. */
int64_t srv_codec_st_head(const char *body, size_t have, uint64_t total);

/* Find the tensor named by the dotted path ("q", "bias.table",
 * "bias.layers.0.weight"): first among the safetensors tensors, else in the
 * JSON params in any form of docs/http.md#tensors-in-json.  Returns 1 and fills
 * *out (any float dtype, or int32 from a safetensors body; data in the body
 * -- read-only -- or the arena), 0 when absent (an error if `required`), -1
 * on error with err naming the JSON pointer. */
int srv_codec_tensor(struct srv_call *c, const char *path, int required,
                     struct ab_tensor *out, struct srv_err *err);
/* srv_codec_tensor where numbers written in JSON (a nested array, or
 * "data" without a "dtype") are stored as json_dtype instead of float32:
 * AB_DTYPE_F64 keeps parameter lists the library evaluates in double at
 * every digit the client wrote.  An explicit "dtype", base64 and
 * safetensors tensors keep their own. */
int srv_codec_tensor_as(struct srv_call *c, const char *path, int required,
                        enum ab_dtype json_dtype, struct ab_tensor *out,
                        struct srv_err *err);

/* Read a JSON number, accepting the strings "inf", "-inf", "nan".
 * Returns 0, or -1 if j is neither. */
int srv_codec_number(const json_t *j, double *out);

/* Encode c->plan.outputs (or c->plan.custom) as c->in.fmt into c->resp.body and
 * resp.type (binary formats: and c->resp.seg when c->resp.seg_ok).  npy needs
 * exactly one output or c->in.pick, and no bfloat16 (406). */
int srv_codec_encode(struct srv_call *c, struct srv_err *err);

/* The members of request objects.  c->in.params holds what the client sent,
 * except the members the codec read beside it: a tensor written as nested
 * arrays of numbers, a long "data" array, a long "b64" string.  Those are
 * not in the tree at all (no stand-in value either); srv_codec_tensor reads
 * them, and these give them to the code that looks for something else. */
/* Whether obj (an object of c->in.params) has the member `key` beside it. */
int srv_codec_beside(const struct srv_call *c, const json_t *obj,
                     const char *key);
/* The member `key` of obj: the tree's value, or one the codec read beside
 * it, then put into the tree as JSON (arrays of numbers, a string) -- for
 * a parameter that expects something else, so that its error shows what
 * was sent.  NULL when absent (or out of memory). */
const json_t *srv_codec_member(struct srv_call *c, const json_t *obj,
                               const char *key);
/* fn(key, value, arg) for every member of obj in the order sent, those
 * beside the tree with value NULL. */
void srv_codec_members(const struct srv_call *c, const json_t *obj,
                       void (*fn)(const char *key, const json_t *v,
                                  void *arg),
                       void *arg);
/* Compact JSON text of a request value for an error message, cut to fit
 * `size` (then ending "...").  Members read beside the tree are shown as
 * the client sent them. */
void srv_codec_show(const struct srv_call *c, const json_t *v, char *buf,
                    size_t size);

/* An unknown field at a JSON pointer: under Prefer: handling=strict the
 * first one is kept (c->in.strict_first, the 400's field), and every one is
 * added to c->in.ignored (the text of X-Attnbias-Ignored) by name: the
 * pointer's tokens joined by dots ("/rope/rope_scaling/odd" ->
 * rope.rope_scaling.odd, as nested tensors are named in safetensors), with
 * the bytes a name in a header list cannot carry percent-encoded (control
 * bytes, non-ASCII, space, '%' and the separators ',' and '.').  The list
 * is cut, ending in "...", past a couple of kilobytes.  In the codec, not
 * http/: the codec and the parameter parser report into it without
 * depending on the call pipeline.  A field a model config filled in is
 * reported by its config key through srv_config_ignore. */
void srv_codec_ignore(struct srv_call *c, const char *pointer);
/* The model a /v2/models/<model>... path names, copied into buf (cap
 * bytes), or NULL when path is not such a path (codec/v2.c). */
const char *srv_codec_v2_model(const char *path, char *buf, size_t cap);

/* Write the problem+json body of e into out. */
int srv_codec_problem(const struct srv_err *e, struct srv_buf *out);

/* Shortest decimal that reads back as the same float32 (9 significant
 * digits at most), or "inf"/"-inf"/"nan" as JSON strings (with quotes).
 * Writes at most 24 bytes, no terminator; returns the length. */
size_t srv_codec_fmt_f32(char *buf, float v);

/* Longest JSON text of one element and its comma: float32 (float16 and
 * bfloat16 are written as float32 text), float64.  Budgets count them. */
#define SRV_JSON_TXT_F32 16 /* "-1.17549435e-38," */
#define SRV_JSON_TXT_F64 25 /* "-2.2250738585072014e-308," */

/* A picture of one or more [rows, cols] float32 tables -- the heads of a
 * bias table or of attention weights -- on one colour scale.  Rows are
 * queries, columns keys: row r is drawn at query position row0 + r, column
 * j at key position j, and the axes say so. */
struct srv_heatmap {
  const float *const *panels; /* n tables, each rows x cols, row-major */
  const int64_t *labels;      /* panel i is titled "head <labels[i]>"; NULL:
                               * untitled panels */
  int n;                      /* 1 .. SRV_HEATMAP_MAX_PANELS */
  int64_t rows, cols;
  int64_t row0;               /* query position of row 0 */
  const char *title;          /* above the panels (printable ASCII kept) */
  int zero_masked;            /* attention weights: a weight of exactly 0
                               * is a masked key, drawn as masked */
};
#define SRV_HEATMAP_MAX_PANELS 64
/* An upper bound of the RGB pixels' bytes of a picture of n panels, for
 * budgets: the pixels are bounded whatever the tables' size (large tables
 * are mean-pooled), and the PNG is smaller still. */
double srv_codec_png_bound(int n);

/* Draw hm as a PNG and append its bytes to out: the panels as a grid, each
 * with its own position ticks, square cells (a non-square table keeps its
 * shape, padded), a viridis colour bar, masked cells (-inf, or 0 with
 * zero_masked) grey and NaN/+inf magenta.  400 for an empty or malformed hm, 413 when out's
 * ceiling is too low, 500 when memory runs out. */
int srv_codec_png_heatmap(const struct srv_heatmap *hm, struct srv_buf *out,
                          struct srv_err *err);

/* A line plot (codec/plot.c): series of (x, y) points against two titled
 * axes, linear or log10, a legend, and labelled reference lines.  Points
 * that cannot be drawn (NaN, infinities, <= 0 on a log axis) break their
 * line. */
enum srv_plot_style {
  SRV_PLOT_LINE = 0,
  SRV_PLOT_DASHED = 1,
  SRV_PLOT_STEPS = 2,  /* across to the next x, then up or down */
  SRV_PLOT_MARKERS = 3 /* a dot per point, joined by a thin line */
};
struct srv_plot_series {
  const char *label;
  const double *x; /* NULL: 0, 1, 2, ... */
  const double *y;
  int64_t n;
  int style;       /* enum srv_plot_style */
};
struct srv_plot_mark {
  int vertical;    /* 1: at an x value; 0: at a y value */
  double at;
  const char *label;
};
struct srv_plot {
  const char *title, *xlabel, *ylabel;
  int xlog, ylog;
  const struct srv_plot_series *series;
  int nseries;     /* >= 1; the legend shows as many as fit */
  const struct srv_plot_mark *marks;
  int nmarks;
};
/* Draw p as a PNG and append its bytes to out: 400 without a series, 413
 * when out's ceiling is too low, 500 when memory runs out. */
int srv_codec_png_plot(const struct srv_plot *p, struct srv_buf *out,
                       struct srv_err *err);

/* ======================================================================
 * handlers/: one file per route, plus the parameter tables
 * ====================================================================== */

/* Allocate a contiguous [shape] tensor of dtype in the arena, checked for
 * overflow and the arena's cap.  Returns the data pointer or NULL (err
 * set: 500/413). */
void *srv_tensor_alloc(struct srv_call *c, const char *name,
                       enum ab_dtype dtype, int ndim, const int64_t *shape,
                       struct srv_err *err);
/* Declare an output: srv_tensor_alloc, then appended to c->plan.outputs. */
void *srv_output_tensor(struct srv_call *c, const char *name,
                        enum ab_dtype dtype, int ndim, const int64_t *shape,
                        struct srv_err *err);
int srv_output_scalar(struct srv_call *c, const char *name, double v,
                      struct srv_err *err);
/* Declare a JSON-valued output (an object or list of settings, names):
 * v is serialised into the arena now (the caller keeps its reference). */
int srv_output_json(struct srv_call *c, const char *name, const json_t *v,
                    struct srv_err *err);
/* Budgets (srv_cfg): output bytes and estimated flops, before allocating. */
int srv_check_budget(struct srv_call *c, double out_bytes, double flops,
                     struct srv_err *err);
/* Append a job to c->plan.jobs (the call frees it). */
int srv_add_job(struct srv_call *c, ab_job_t *job, struct srv_err *err);

/* The handlers, declared from routes.def: every route's prepare, and its
 * finish unless that is NULL.  The NULL test is the preprocessor's probe
 * idiom: pasted to SRV_H_PROBE_, the token NULL (and only it) names a macro
 * whose comma shifts a 1 into second place. */
typedef int srv_handler(struct srv_call *c, struct srv_err *err);
#define SRV_H_PROBE_NULL ~, 1
#define SRV_H_SECOND_(a, b, ...) b
#define SRV_H_SECOND(...) SRV_H_SECOND_(__VA_ARGS__)
#define SRV_H_CAT_(a, b) a##b
#define SRV_H_CAT(a, b) SRV_H_CAT_(a, b)
#define SRV_H_DECLARE_0(fn) srv_handler fn;
#define SRV_H_DECLARE_1(fn)
#define SRV_ROUTE(method, path, name, prepare, finish, flags)                  \
  srv_handler prepare;                                                         \
  SRV_H_CAT(SRV_H_DECLARE_, SRV_H_SECOND(SRV_H_PROBE_##finish, 0, ~))(finish)
#include "routes.def"
#undef SRV_ROUTE

/* What the operational routes (health.c) report about the server around
 * them: http/ sits above the handlers, so main.c points these at it once,
 * before the server starts.  NULL: never draining / no metrics (500). */
struct srv_probe {
  int (*draining)(void);              /* 1 while draining */
  int (*metrics)(struct srv_buf *out); /* Prometheus text into out */
};
extern struct srv_probe srv_probe;

/* A model's config on a POST route (handlers/config-apply.c, docs/models.md):
 * before the handler runs, "model", "config", "layer" and the Hugging Face
 * keys given at the top level fill the route's own fields that the request
 * does not give.  0, or -1 with err (a 400 naming the config key). */
int srv_config_apply(struct srv_call *c, struct srv_err *err);
/* An error in a field the config filled in names the config key instead
 * (field and detail rewritten); others are left alone. */
void srv_config_blame(const struct srv_call *c, struct srv_err *err);
/* The pointer to report for request pointer ptr: the config key's when the
 * config filled that field in (into buf), else ptr itself. */
const char *srv_config_pointer(const struct srv_call *c, const char *ptr,
                               char *buf, size_t cap);
/* srv_codec_ignore for request pointer ptr, named as srv_config_pointer
 * names it (the handlers' unknown fields, the config's own). */
void srv_config_ignore(struct srv_call *c, const char *ptr);

/* ======================================================================
 * work/: the pool
 * ====================================================================== */

/* Start the libuv loop thread and a pool of `threads` workers. */
int srv_work_start(int threads);
/* Run every piece of c's jobs (spread over the pool; each job's pieces
 * after the previous job's), then call done(c, arg) on the loop thread.
 * Returns -1 if the pool is stopping. */
int srv_work_submit(struct srv_call *c, void (*done)(struct srv_call *c,
                                                     int status, void *arg),
                    void *arg);
/* Run c's jobs on the calling thread (tiny requests, tests). */
int srv_work_run_inline(struct srv_call *c, struct srv_err *err);
void srv_work_stop(void);

/* ======================================================================
 * http/ and metrics
 * ====================================================================== */
int srv_http_start(void);  /* binds; prints the port when --port 0 */
int srv_http_port(void);
void srv_http_drain(void); /* stop accepting; readiness -> 503 */
void srv_http_stop(void);
int srv_http_draining(void);

/* One line to stderr (timestamps added). */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t srv_now_ns(void);

#endif /* SRV_H */
