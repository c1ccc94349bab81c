/* encode.c: srv_codec_encode (the outputs of a call as JSON, safetensors,
 * .npy, or the handler's own bytes) and srv_codec_problem (errors as
 * application/problem+json, RFC 9457).  JSON numbers are written straight
 * into the response buffer with srv_codec_fmt_f32 -- no jansson node per
 * number. */
#include "codec-internal.h"

#include <stdio.h>
#include <string.h>

/* Elements written per reservation of the response buffer: large enough
 * to amortise the check, small enough that a response close to the
 * ceiling is not refused for the worst case of the whole tensor. */
#define EMIT_CHUNK 4096
/* Longest text of one float32/float16 element plus its comma, and of a
 * float64 one (srv.h). */
#define F32_MAX_TXT SRV_JSON_TXT_F32
#define F64_MAX_TXT SRV_JSON_TXT_F64
/* Tensor data from this size up is sent from where it lies rather than
 * copied into the response buffer (when the sender allows it): below it a
 * copy is cheaper than the separate write it would otherwise take. */
#define SEG_MIN ((size_t)64 << 10)

/* ======================================================================
 * output bytes
 * ====================================================================== */

int srv_codec__output_dtype(const struct srv_call *c,
                            const struct srv_output *o)
{
  if (o->t.dtype == AB_DTYPE_I32)
    return AB_DTYPE_I32;
  return c->in.out_dtype;
}

/* Copy a strided tensor of any dtype into contiguous row-major bytes. */
static void gather(void *dst, const struct ab_tensor *t, int64_t numel)
{
  size_t es = ab_dtype_size((enum ab_dtype)t->dtype);
  int64_t idx[AB_MAX_DIMS] = {0}, k;
  char *o = dst;
  int d;

  for (k = 0; k < numel; k++) {
    int64_t off = 0;
    for (d = 0; d < t->ndim; d++)
      off += idx[d] * t->stride[d];
    memcpy(o + (size_t)k * es, (const char *)t->data + (size_t)off * es, es);
    for (d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d])
        break;
      idx[d] = 0;
    }
  }
}

const void *srv_codec__output_bytes(struct srv_call *c,
                                    const struct srv_output *o, int to,
                                    size_t *nbytes, struct srv_err *err)
{
  int64_t n = ab_tensor_numel(&o->t);
  const void *src = o->t.data;
  void *dst;
  size_t fs = ab_dtype_size((enum ab_dtype)o->t.dtype),
         ts = ab_dtype_size((enum ab_dtype)to);
  const char *name = o->name ? o->name : "?";

  if (n < 0 || !fs || !ts || !o->t.data) {
    srv_fail(err, 500, NULL, "output \"%s\" is not a valid tensor", name);
    return NULL;
  }
  if (!ab_tensor_is_contiguous(&o->t)) {
    void *g = srv_codec__alloc(c, (size_t)n * fs, "", err);
    if (!g)
      return NULL;
    gather(g, &o->t, n);
    src = g;
  }
  *nbytes = (size_t)n * ts;
  if (to == o->t.dtype)
    return src;
  dst = srv_codec__alloc(c, (size_t)n * ts, "", err);
  if (!dst)
    return NULL;
  if (ab_convert(dst, (enum ab_dtype)to, src, (enum ab_dtype)o->t.dtype, n) !=
      AB_STATUS_OK) {
    srv_fail(err, 500, NULL, "output \"%s\": %s", name,
             ab_last_error()->msg);
    return NULL;
  }
  return dst;
}

/* ======================================================================
 * JSON
 * ====================================================================== */

static int out_fail(struct srv_call *c, size_t need, struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  if (b->max && (need > b->max || b->len > b->max - need))
    return srv_fail(err, 413, NULL,
                    "the response would exceed %zu bytes (--max-output-mb); "
                    "ask for fewer outputs, a binary Accept or "
                    "\"encoding\": \"b64\"",
                    b->max);
  return srv_fail(err, 500, NULL, "out of memory writing the response");
}

int srv_codec__emit_bytes(struct srv_call *c, const void *p, size_t n,
                          struct srv_err *err)
{
  /* Once a segment is out, later bytes must follow it on the wire, so they
   * become segments too (one per output at most: the array has room). */
  if (c->resp.seg_ok && (c->resp.nseg > 0 || n >= SEG_MIN)) {
    if (n == 0)
      return 0;
    if (c->resp.nseg >= SRV_MAX_OUTPUTS)
      return srv_fail(err, 500, NULL, "too many pieces in the response");
    c->resp.seg[c->resp.nseg].data = p;
    c->resp.seg[c->resp.nseg].len = n;
    c->resp.nseg++;
    return 0;
  }
  if (srv_buf_append(&c->resp.body, p, n))
    return out_fail(c, n, err);
  return 0;
}

static size_t fmt_i32(char *p, int32_t v)
{
  char tmp[12];
  size_t n = 0, k = 0;
  uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;

  if (v < 0)
    p[n++] = '-';
  do {
    tmp[k++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  while (k)
    p[n++] = tmp[--k];
  return n;
}

/* Bias tables repeat a few values many times: ALiBi, Kerple and the
 * masks depend on the distance j - i alone, T5 has one value per bucket
 * (the load test's 4 x 16 x 16 ALiBi table has 52 distinct values in
 * 1024).  A small direct-mapped memo from float bits to text turns most
 * elements of such tables into one 16-byte copy -- formatting was a
 * quarter of a small /v1/bias request's CPU; on data without repeats it
 * costs a probe and a store per element, a few percent of formatting. */
#define MEMO_BITS 8
struct f32_memo {
  uint32_t key[1u << MEMO_BITS];
  uint8_t len[1u << MEMO_BITS]; /* 0: empty slot */
  char txt[1u << MEMO_BITS][F32_MAX_TXT];
};

/* Write the text of f at p and return its length.  p has room for
 * F32_MAX_TXT bytes (the per-element reservation of emit_data), which are
 * copied whole: the bytes past the text are overwritten by what follows. */
static inline size_t fmt_f32_memo(struct f32_memo *m, char *p, float f)
{
  uint32_t bits, h;
  size_t len;

  memcpy(&bits, &f, sizeof bits);
  h = (bits * 0x9E3779B1u) >> (32 - MEMO_BITS);
  if (m->len[h] && m->key[h] == bits) {
    memcpy(p, m->txt[h], F32_MAX_TXT);
    return m->len[h];
  }
  len = srv_codec_fmt_f32(p, f);
  if (len < F32_MAX_TXT) {
    m->key[h] = bits;
    m->len[h] = (uint8_t)len;
    memcpy(m->txt[h], p, F32_MAX_TXT);
  }
  return len;
}

int srv_codec__emit_data(struct srv_call *c, const void *bytes, int to, int64_t n,
                     struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  size_t per = to == AB_DTYPE_F64 ? F64_MAX_TXT : F32_MAX_TXT;
  int64_t i = 0, stop;
  struct f32_memo memo;

  memset(memo.len, 0, sizeof memo.len);

  if (srv_buf_append(b, "[", 1))
    return out_fail(c, 1, err);
  while (i < n) {
    char *p;
    stop = n - i > EMIT_CHUNK ? i + EMIT_CHUNK : n;
    if (srv_buf_reserve(b, (size_t)(stop - i) * per + 2))
      return out_fail(c, (size_t)(stop - i) * per + 2, err);
    p = b->data + b->len;
    switch (to) {
    case AB_DTYPE_F32: {
      const float *f = bytes;
      for (; i < stop; i++) {
        p += fmt_f32_memo(&memo, p, f[i]);
        *p++ = ',';
      }
      break;
    }
    case AB_DTYPE_F16: {
      /* The float16 value, exactly, as its shortest float32 text. */
      const uint16_t *h = bytes;
      for (; i < stop; i++) {
        p += fmt_f32_memo(&memo, p, ab_f16_to_f32(h[i]));
        *p++ = ',';
      }
      break;
    }
    case AB_DTYPE_BF16: {
      const uint16_t *h = bytes;
      for (; i < stop; i++) {
        p += fmt_f32_memo(&memo, p, ab_bf16_to_f32(h[i]));
        *p++ = ',';
      }
      break;
    }
    case AB_DTYPE_F64: {
      const double *d = bytes;
      for (; i < stop; i++) {
        p += srv_codec__fmt_f64(p, d[i]);
        *p++ = ',';
      }
      break;
    }
    case AB_DTYPE_I32: {
      const int32_t *v = bytes;
      for (; i < stop; i++) {
        p += fmt_i32(p, v[i]);
        *p++ = ',';
      }
      break;
    }
    default:
      return srv_fail(err, 500, NULL, "output dtype %d cannot be written",
                      to);
    }
    b->len = (size_t)(p - b->data);
  }
  if (n > 0)
    b->len--; /* the last comma */
  if (srv_buf_append(b, "]", 1))
    return out_fail(c, 1, err);
  return 0;
}

static int emit_tensor(struct srv_call *c, const struct srv_output *o,
                       struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  int to = srv_codec__output_dtype(c, o), d;
  size_t nbytes;
  const void *bytes = srv_codec__output_bytes(c, o, to, &nbytes, err);

  if (!bytes)
    return -1;
  if (srv_buf_append(b, "{\"shape\":[", 10))
    return out_fail(c, 10, err);
  for (d = 0; d < o->t.ndim; d++)
    if (srv_buf_printf(b, "%s%lld", d ? "," : "", (long long)o->t.shape[d]))
      return out_fail(c, 24, err);
  if (srv_buf_printf(b, "],\"dtype\":\"%s\",",
                     ab_dtype_name((enum ab_dtype)to)))
    return out_fail(c, 32, err);
  if (c->in.b64) {
    size_t el = srv_codec__b64_encoded_len(nbytes);
    if (srv_buf_reserve(b, el + 16))
      return out_fail(c, el + 16, err);
    memcpy(b->data + b->len, "\"b64\":\"", 7);
    b->len += 7;
    srv_codec__b64_encode(b->data + b->len, bytes, nbytes);
    b->len += el;
    memcpy(b->data + b->len, "\"}", 2);
    b->len += 2;
    b->data[b->len] = '\0';
    return 0;
  }
  if (srv_buf_append(b, "\"data\":", 7))
    return out_fail(c, 7, err);
  if (srv_codec__emit_data(c, bytes, to, ab_tensor_numel(&o->t), err))
    return -1;
  if (srv_buf_append(b, "}", 1))
    return out_fail(c, 1, err);
  return 0;
}

static int encode_json(struct srv_call *c, struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  char num[40];
  int i;

  if (srv_buf_append(b, "{", 1))
    return out_fail(c, 1, err);
  for (i = 0; i < c->plan.noutputs; i++) {
    const struct srv_output *o = &c->plan.outputs[i];
    const char *name = o->name ? o->name : "";
    if ((i && srv_buf_append(b, ",", 1)) ||
        srv_codec__json_str(b, name, strlen(name)) ||
        srv_buf_append(b, ":", 1))
      return out_fail(c, strlen(name) + 8, err);
    if (o->json) {
      size_t n = strlen(o->json);
      if (srv_buf_append(b, o->json, n))
        return out_fail(c, n, err);
    } else if (o->is_scalar) {
      size_t n = srv_codec__fmt_f64(num, o->scalar);
      if (srv_buf_append(b, num, n))
        return out_fail(c, n, err);
    } else if (emit_tensor(c, o, err)) {
      return -1;
    }
  }
  if (srv_buf_append(b, "}", 1))
    return out_fail(c, 1, err);
  c->resp.type = "application/json";
  return 0;
}

/* ======================================================================
 * the response
 * ====================================================================== */

static const struct srv_output *npy_output(const struct srv_call *c,
                                           struct srv_err *err)
{
  const struct srv_output *found = NULL;
  char names[256];
  size_t n = 0;
  int i, ntensors = 0;

  names[0] = '\0';
  for (i = 0; i < c->plan.noutputs; i++) {
    const struct srv_output *o = &c->plan.outputs[i];
    if (c->in.pick && o->name && strcmp(o->name, c->in.pick) == 0) {
      if (o->is_scalar) {
        srv_fail(err, 406, "/output",
                 "output \"%s\" is a %s; .npy carries one tensor", c->in.pick,
                 o->json ? "JSON value" : "scalar");
        return NULL;
      }
      return o;
    }
    if (o->is_scalar)
      continue;
    ntensors++;
    found = o;
    if (n < sizeof names)
      n += (size_t)snprintf(names + n, sizeof names - n, "%s\"%s\"",
                            n ? ", " : "", o->name ? o->name : "?");
  }
  if (c->in.pick) {
    srv_fail(err, 400, "/output",
             "output \"%.60s\" is not among this response's tensors (%s)",
             c->in.pick, names[0] ? names : "none");
    return NULL;
  }
  if (ntensors == 1)
    return found;
  if (ntensors == 0)
    srv_fail(err, 406, NULL,
             "this response has no tensor output to write as .npy");
  else
    srv_fail(err, 406, "/output",
             ".npy carries one tensor and this response has %d (%s); pick "
             "one with \"output\": \"<name>\"",
             ntensors, names);
  return NULL;
}

int srv_codec_encode(struct srv_call *c, struct srv_err *err)
{
  int rc;

  c->resp.nseg = 0;
  /* A handler's own body (PNG, YAML, text) passes through untouched. */
  if (c->plan.custom.len > 0) {
    srv_buf_free(&c->resp.body);
    c->resp.body.data = c->plan.custom.data;
    c->resp.body.len = c->plan.custom.len;
    c->resp.body.cap = c->plan.custom.cap;
    c->plan.custom.data = NULL;
    c->plan.custom.len = c->plan.custom.cap = 0;
    c->resp.type =
        c->plan.custom_type ? c->plan.custom_type : "application/octet-stream";
    if (!c->resp.status)
      c->resp.status = 200;
    return 0;
  }
  c->resp.body.len = 0;
  if (c->resp.body.data)
    c->resp.body.data[0] = '\0';
  c->resp.infer_header = 0;
  switch (c->in.v2 ? -1 : (int)c->in.fmt) {
  case -1: /* an Open Inference Protocol call */
    rc = srv_codec__v2_encode(c, err);
    break;
  case SRV_FMT_SAFETENSORS:
    rc = srv_codec__st_encode(c, err);
    break;
  case SRV_FMT_NPY: {
    const struct srv_output *o = npy_output(c, err);
    rc = o ? srv_codec__npy_encode(c, o, err) : -1;
    break;
  }
  case SRV_FMT_PNG:
    rc = srv_fail(err, 406, NULL,
                  "this response has no image/png form; ask for "
                  "application/json");
    break;
  default:
    rc = encode_json(c, err);
    break;
  }
  if (rc) {
    srv_buf_free(&c->resp.body);
    c->resp.nseg = 0;
    c->resp.infer_header = 0;
    return -1;
  }
  if (!c->resp.status)
    c->resp.status = 200;
  return 0;
}

/* ======================================================================
 * problem+json
 * ====================================================================== */

int srv_codec_problem(const struct srv_err *e, struct srv_buf *out)
{
  const char *slug = e->slug[0] ? e->slug : "error";
  const char *title = e->title[0] ? e->title : "Error";
  int status = e->http >= 400 && e->http <= 599 ? e->http : 500;
  size_t dl = strnlen(e->detail, sizeof e->detail);

  char type[sizeof e->slug + 32];

  snprintf(type, sizeof type, "https://attnbias.dev/errors/%.*s",
           (int)sizeof e->slug, slug);
  if (srv_buf_append(out, "{\"type\":", 8) ||
      srv_codec__json_str(out, type, strlen(type)))
    return -1;
  if (srv_buf_append(out, ",\"title\":", 9) ||
      srv_codec__json_str(out, title, strnlen(title, sizeof e->title)) ||
      srv_buf_printf(out, ",\"status\":%d,\"detail\":", status) ||
      srv_codec__json_str(out, e->detail, dl) ||
      srv_buf_append(out, ",\"error\":", 9) ||
      srv_codec__json_str(out, e->detail, dl))
    return -1;
  if (e->field[0] &&
      (srv_buf_append(out, ",\"field\":", 9) ||
       srv_codec__json_str(out, e->field, strnlen(e->field, sizeof e->field))))
    return -1;
  return srv_buf_append(out, "}", 1);
}
