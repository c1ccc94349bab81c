/* codec-internal.h: helpers shared by the files of server/codec/ (JSON text
 * escaping, base64, JSON pointers, the fast number-array path, the
 * safetensors reader and the float formatters).  Nothing outside codec/
 * includes this header; the public seams are in srv.h. */
#ifndef SRV_CODEC_INTERNAL_H
#define SRV_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "srv.h"

/* Deepest nesting of arrays/objects accepted in any JSON text (request
 * bodies, safetensors headers and their "params").  jansson recurses per
 * level, so the bound is checked by a pre-scan before jansson sees the text. */
#define SRV_CODEC_MAX_DEPTH 64
/* Room for a JSON pointer (= sizeof(struct srv_err){0}.field). */
#define SRV_CODEC_PTR_MAX 192

/* Arrays of at least this many numbers, as the value of a "data" member,
 * are parsed by the codec's own number parser instead of becoming one
 * jansson node per number; strings of at least SRV_CODEC_B64_MIN base64
 * characters, as the value of a "b64" member, are decoded straight from
 * the body instead of being copied by jansson (see json-text.c). */
#define SRV_CODEC_SPAN_MIN 64
#define SRV_CODEC_B64_MIN 256
/* Likewise a member's value that is a rectangular nested array of numbers
 * (a tensor written as nested lists, numpy's tolist()) whose rows hold
 * this many numbers or more.  Not the members named in
 * srv_codec_node_keys, whose arrays their readers take node by node. */
#define SRV_CODEC_ROW_MIN 4
extern const char *const srv_codec_node_keys[];

/* ---- per-call codec state (c->in.codec, in the arena) ------------------- */

/* What a lifted member holds. */
enum srv_lift_kind {
  SRV_LIFT_DATA,   /* a "data" array of numbers: v[0..n) */
  SRV_LIFT_NESTED, /* a nested array of numbers: shape[0..rank), v row-major */
  SRV_LIFT_B64     /* a "b64" string: text[0..len), in the body */
};

/* One member the pre-scan lifted out of the text: jansson never sees it,
 * so c->in.params holds no node for it (and no stand-in of any kind); it lives
 * here, found by its JSON pointer or by its object and name. */
struct srv_codec_lift {
  const char *ptr;      /* its JSON pointer ("/q", "/x/data") */
  const char *key;      /* its name in its object */
  int64_t index;        /* its place among that object's members as sent */
  const json_t *parent; /* that object in the tree; NULL once the member
                         * was put into the tree (srv_codec_member) */
  enum srv_lift_kind kind;
  const double *v;      /* numbers, exactly as jansson would have read them */
  int64_t n;
  int rank;
  int64_t shape[AB_MAX_DIMS];
  const char *text;     /* SRV_LIFT_B64: its characters, no quotes */
  size_t len;
};

struct srv_codec_state {
  struct srv_codec_lift *lifts;
  int nlifts, cap;
};

/* ---- JSON text ---------------------------------------------------------- */

/* Append s[0..n) as a quoted JSON string: quotes, backslashes and control
 * characters escaped, invalid UTF-8 replaced by U+FFFD so the output is
 * always valid JSON.  Returns 0 or -1 (buffer ceiling / no memory). */
int srv_codec__json_str(struct srv_buf *b, const char *s, size_t n);

/* Build the JSON pointer of a dotted path into out ("bias.layers.0.weight"
 * -> "/bias/layers/0/weight"), escaping '~' and '/' per RFC 6901.  Always
 * NUL-terminates; truncates at cap. */
void srv_codec__pointer(char *out, size_t cap, const char *dotted);

/* Append one reference token to a pointer held in out (RFC 6901 escaping). */
void srv_codec__pointer_add(char *out, size_t cap, const char *tok, size_t n);

/* Parse a JSON text into an object: a pre-scan first rejects nesting deeper
 * than SRV_CODEC_MAX_DEPTH (400 naming the pointer and byte offset) and,
 * when c is not NULL, lifts the members holding many numbers out of the
 * text into c's lifts (struct srv_codec_lift), so that jansson never
 * builds a node per number.  `what` names the text in
 * details ("request body", "safetensors header").  Returns a new reference
 * or NULL with err set (400 naming line, column and byte offset; 413/500
 * when memory runs out). */
json_t *srv_codec__parse_object(struct srv_call *c, const char *text,
                                size_t len, const char *what,
                                struct srv_err *err);

/* The member lifted at JSON pointer ptr, or NULL. */
const struct srv_codec_lift *srv_codec__lift_at(const struct srv_call *c,
                                                const char *ptr);

/* Parse one JSON number token s[0..n) exactly as jansson 2.14 does
 * (integers through int64 then converted to double, reals by correctly
 * rounded decimal conversion).  Returns 0, or -1 if the token is not a JSON
 * number or jansson would reject it (integer out of int64, real overflow). */
int srv_codec__parse_number(const char *s, size_t n, double *out);

/* ---- base64 (RFC 4648, standard alphabet, '=' padding) ------------------ */

/* Bytes that n base64 characters decode to, or -1 when n characters cannot
 * be a padded base64 text (length not a multiple of 4, bad padding). */
int64_t srv_codec__b64_decoded_len(const char *s, size_t n);
/* Decode s[0..n) into dst (exactly srv_codec__b64_decoded_len bytes).
 * Returns 0, or -1 with *bad set to the offset of the first invalid
 * character. */
int srv_codec__b64_decode(void *dst, const char *s, size_t n, size_t *bad);
/* Characters needed for n bytes (with padding). */
size_t srv_codec__b64_encoded_len(size_t n);
/* Encode n bytes into dst (srv_codec__b64_encoded_len(n) characters, no
 * terminator). */
void srv_codec__b64_encode(char *dst, const void *src, size_t n);

/* ---- numbers ------------------------------------------------------------ */

/* Shortest decimal that reads back as the same double (17 digits at most),
 * the nearest among the shortest, in the shorter of plain and exponent
 * notation as srv_codec_fmt_f32 writes it; non-finite values as the JSON
 * strings "inf", "-inf", "nan".  Writes at most 24 bytes, no terminator;
 * returns the length. */
size_t srv_codec__fmt_f64(char *buf, double v);
/* The simple reference formatter for float64: the first of 1..17 digits
 * that strtod reads back (printf + strtod, ~1 us a number). */
size_t srv_codec__fmt_f64_simple(char *buf, double v);
/* The float64 formatter's floor(log10(2^e)), or floor(log10(3/4 * 2^e)),
 * for a test to check against logarithms. */
int32_t srv_codec__floor_log10_pow2(int32_t e, int three_quarters);

/* The simple reference formatter for float32: the first of %.1g .. %.9g
 * that strtof reads back.  Used by tests and the benchmark to check and
 * compare srv_codec_fmt_f32. */
size_t srv_codec__fmt_f32_simple(char *buf, float v);

/* ---- arena -------------------------------------------------------------- */

/* srv_arena_alloc that turns failure into an error: 413 when the arena's
 * cap is what refused (the request needs more memory than allowed), 500
 * when malloc failed.  `field` names what was being decoded. */
void *srv_codec__alloc(struct srv_call *c, size_t n, const char *field,
                       struct srv_err *err);

/* ---- safetensors (safetensors.c) ---------------------------------------- */

/* Decode a safetensors request body into c->in.bin and c->in.params. */
int srv_codec__st_decode(struct srv_call *c, struct srv_err *err);
/* Encode c's outputs as a safetensors file into c->resp.body. */
int srv_codec__st_encode(struct srv_call *c, struct srv_err *err);
/* Encode one output as a .npy (format 1.0) file into c->resp.body. */
int srv_codec__npy_encode(struct srv_call *c, const struct srv_output *o,
                          struct srv_err *err);

/* ---- encode helpers (encode.c) ------------------------------------------ */

/* The bytes of output o converted to dtype `to` (float outputs) or as is
 * (int32): points into the arena or at o's own data.  *nbytes receives the
 * size. */
const void *srv_codec__output_bytes(struct srv_call *c,
                                    const struct srv_output *o, int to,
                                    size_t *nbytes, struct srv_err *err);
/* The dtype an output is written in: int32 stays int32, float outputs take
 * c->in.out_dtype. */
int srv_codec__output_dtype(const struct srv_call *c,
                            const struct srv_output *o);
/* Append n bytes of tensor data (alive until the call is released) to a
 * binary response: left in place as a segment (c->resp.seg) when the
 * sender allows it and they are large, or once a segment exists; else
 * copied into c->resp.body.  Returns 0, or -1 with err set. */
int srv_codec__emit_bytes(struct srv_call *c, const void *p, size_t n,
                          struct srv_err *err);

/* The "data" array of n elements of dtype `to` at bytes, appended to
 * c->resp.body as JSON numbers (as a /v1 JSON answer writes them). */
int srv_codec__emit_data(struct srv_call *c, const void *bytes, int to,
                         int64_t n, struct srv_err *err);

/* ---- decode.c ----------------------------------------------------------- */

/* Read the generic output options of c->in.params: "encoding",
 * "output_dtype", "output". */
int srv_codec__read_options(struct srv_call *c, struct srv_err *err);

/* ---- Open Inference Protocol (v2.c) ------------------------------------- */

/* Decode the v2 request body of c (route flagged SRV_ROUTE_V2) into
 * c->in.params, c->in.bin and c->in.v2, and make c the call of the model's /v1
 * route (c->req.route). */
int srv_codec__v2_decode(struct srv_call *c, struct srv_err *err);
/* Encode c's outputs as the v2 answer c->in.v2 asked for: JSON, or JSON
 * followed by binary tensors (c->resp.infer_header set). */
int srv_codec__v2_encode(struct srv_call *c, struct srv_err *err);

/* The little-endian uint64 at p (safetensors' header length). */
static inline uint64_t srv_codec__rd_le64(const unsigned char *p)
{
  uint64_t v = 0;
  int i;

  for (i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* ---- pictures (raster.c): an RGB image and what png.c and plot.c draw
 * on it ------------------------------------------------------------------ */

#define SRV_FONT_SCALE 2                  /* pixels per font dot */
#define SRV_GLYPH_W (6 * SRV_FONT_SCALE)  /* 5 columns + 1 of spacing */
#define SRV_GLYPH_H (7 * SRV_FONT_SCALE)

struct srv_image {
  unsigned char *px; /* RGB, row-major, malloc'd */
  int w, h;
};
extern const unsigned char srv_codec__ink[3];   /* black */
extern const unsigned char srv_codec__paper[3]; /* white */

/* A w x h white image; -1 when out of memory.  Free px with free(). */
int srv_codec__image_init(struct srv_image *im, int w, int h);
/* Rectangles are clipped to the image. */
void srv_codec__fill_rect(struct srv_image *im, int x, int y, int w, int h,
                          const unsigned char *rgb);
/* An anti-aliased stroke of `width` pixels from (x0, y0) to (x1, y1),
 * pixel coordinates (pixel (x, y) covers [x, x+1) x [y, y+1)). */
void srv_codec__line(struct srv_image *im, double x0, double y0, double x1,
                     double y1, double width, const unsigned char *rgb);
/* Text in the 5x7 font, black: left to right with its top-left corner at
 * (x, y), or (up) turned a quarter left, read bottom to top as a y axis
 * title, the glyphs' tops facing column x and the text starting at row y.
 * Characters the font lacks are drawn as '?'. */
void srv_codec__text(struct srv_image *im, int x, int y, const char *s,
                     int up);
int srv_codec__text_w(const char *s); /* pixels, along the text */
/* s with every byte outside printable ASCII replaced by '?', cut to fit
 * cap (NUL-terminated). */
void srv_codec__printable(const char *s, char *out, size_t cap);
/* Append im as a PNG (with `title` as its Title text) to out: 0, or -1 with
 * err 413 when out's ceiling is too low, 500 otherwise; `what` names the
 * picture in the message ("heatmap", "plot"). */
int srv_codec__png_write(const struct srv_image *im, const char *title,
                         struct srv_buf *out, const char *what,
                         struct srv_err *err);

#endif /* SRV_CODEC_INTERNAL_H */
