/* safetensors.c: the binary bodies -- safetensors requests and responses
 * (https://github.com/huggingface/safetensors, "Format": an 8-byte
 * little-endian header length N, N bytes of JSON header, then the data
 * section) and .npy responses (NumPy format 1.0, NEP 1). */
#include "codec-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PTR_CAP 192

static const struct {
  const char *name;
  int dtype;
} g_st_dtypes[] = {
    {"F32", AB_DTYPE_F32}, {"F64", AB_DTYPE_F64}, {"F16", AB_DTYPE_F16},
    {"BF16", AB_DTYPE_BF16}, {"I32", AB_DTYPE_I32},
};

static const char *st_dtype_name(int dtype)
{
  size_t i;
  for (i = 0; i < sizeof g_st_dtypes / sizeof g_st_dtypes[0]; i++)
    if (g_st_dtypes[i].dtype == dtype)
      return g_st_dtypes[i].name;
  return NULL;
}

static void wr_le64(unsigned char *p, uint64_t v)
{
  int i;
  for (i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* ======================================================================
 * decoding a request
 * ====================================================================== */

struct extent {
  uint64_t b, e;
  int idx;
};

static int cmp_extent(const void *a, const void *b)
{
  const struct extent *x = a, *y = b;
  return x->b < y->b ? -1 : x->b > y->b ? 1 : 0;
}

/* One header entry -> c->in.bin[*k]. */
static int st_entry(struct srv_call *c, const char *name, const json_t *v,
                    const unsigned char *data, uint64_t dlen,
                    struct extent *ext, struct srv_err *err)
{
  char ptr[PTR_CAP];
  const json_t *jt = json_object_get(v, "dtype"),
               *js = json_object_get(v, "shape"),
               *jo = json_object_get(v, "data_offsets");
  const char *dn;
  int dtype = -1, rank, i;
  int64_t shape[AB_MAX_DIMS], numel = 1;
  uint64_t b, e, want;
  size_t k, es;
  struct srv_named_tensor *nt = &c->in.bin[c->in.nbin];
  void *p;

  srv_codec__pointer(ptr, sizeof ptr, name);
  if (!json_is_object(v))
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": the header entry is not "
                    "an object", name);
  dn = json_string_value(jt);
  for (k = 0; dn && k < sizeof g_st_dtypes / sizeof g_st_dtypes[0]; k++)
    if (strcmp(dn, g_st_dtypes[k].name) == 0)
      dtype = g_st_dtypes[k].dtype;
  if (dtype < 0)
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": dtype %s%.20s%s is not "
                    "supported (F32, F64, F16, BF16, I32)",
                    name, dn ? "\"" : "", dn ? dn : "(missing)",
                    dn ? "\"" : "");
  if (!json_is_array(js))
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": shape is missing or not "
                    "an array", name);
  rank = (int)json_array_size(js);
  if (rank < 1 || rank > AB_MAX_DIMS)
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": rank %d is not supported "
                    "(1 to %d dimensions)", name, rank, AB_MAX_DIMS);
  for (i = 0; i < rank; i++) {
    const json_t *d = json_array_get(js, (size_t)i);
    if (!json_is_integer(d) || json_integer_value(d) < 1)
      return srv_fail(err, 400, ptr,
                      "safetensors tensor \"%.60s\": shape[%d] must be an "
                      "integer >= 1", name, i);
    shape[i] = (int64_t)json_integer_value(d);
    if (ab_mul_overflow(numel, shape[i], &numel))
      return srv_fail(err, 400, ptr,
                      "safetensors tensor \"%.60s\": the element count "
                      "overflows", name);
  }
  if (!json_is_array(jo) || json_array_size(jo) != 2 ||
      !json_is_integer(json_array_get(jo, 0)) ||
      !json_is_integer(json_array_get(jo, 1)) ||
      json_integer_value(json_array_get(jo, 0)) < 0 ||
      json_integer_value(json_array_get(jo, 1)) < 0)
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": data_offsets must be two "
                    "non-negative integers [begin, end]", name);
  b = (uint64_t)json_integer_value(json_array_get(jo, 0));
  e = (uint64_t)json_integer_value(json_array_get(jo, 1));
  if (b > e || e > dlen)
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": data_offsets [%llu, %llu] "
                    "are not within the data section (%llu bytes)",
                    name, (unsigned long long)b, (unsigned long long)e,
                    (unsigned long long)dlen);
  es = ab_dtype_size((enum ab_dtype)dtype);
  if ((uint64_t)numel > UINT64_MAX / es || (want = (uint64_t)numel * es) != e - b)
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\": data_offsets span %llu "
                    "bytes but %lld elements of %s need %llu",
                    name, (unsigned long long)(e - b), (long long)numel, dn,
                    (unsigned long long)numel * es);

  /* In place when the element is naturally aligned; else one copy --
   * which needs the bytes, so not while they are still arriving. */
  p = (void *)(data + b);
  if ((uintptr_t)p % es != 0 && c->req.body_avail)
    return srv_fail(err, 400, ptr,
                    "safetensors tensor \"%.60s\" is not aligned to its "
                    "element size: it cannot be used before the body is "
                    "complete", name);
  if ((uintptr_t)p % es != 0) {
    void *q = srv_codec__alloc(c, (size_t)want, ptr, err);
    if (!q)
      return -1;
    memcpy(q, p, (size_t)want);
    p = q;
  }
  nt->name = srv_arena_strdup(&c->arena, name);
  if (!nt->name)
    return srv_fail(err, 500, ptr, "out of memory");
  if (ab_tensor_init(&nt->t, p, (enum ab_dtype)dtype, rank, shape) !=
      AB_STATUS_OK)
    return srv_fail(err, 400, ptr, "safetensors tensor \"%.60s\": %s", name,
                    ab_last_error()->msg);
  ext->b = b;
  ext->e = e;
  ext->idx = c->in.nbin;
  c->in.nbin++;
  return 0;
}

int64_t srv_codec_st_head(const char *body, size_t have, uint64_t total)
{
  uint64_t hlen;

  if (have < 8)
    return 0;
  hlen = srv_codec__rd_le64((const unsigned char *)body);
  if (total < 8 || hlen > total - 8)
    return -1;
  return (int64_t)(8 + hlen);
}

int srv_codec__st_decode(struct srv_call *c, struct srv_err *err)
{
  const unsigned char *body = (const unsigned char *)c->req.body;
  uint64_t hlen, dlen;
  json_t *hdr, *v, *meta = NULL;
  const char *key;
  struct extent *ext = NULL;
  size_t n = 0;
  int i, rc = -1;

  if (c->req.body_len < 8)
    return srv_fail(err, 400, NULL,
                    "the safetensors body is %zu bytes; it needs at least the "
                    "8-byte header length", c->req.body_len);
  hlen = srv_codec__rd_le64(body);
  if (c->req.body_avail &&
      (c->req.body_avail < 8 || hlen > c->req.body_avail - 8))
    return srv_fail(err, 400, NULL,
                    "the safetensors header has not arrived yet");
  if (hlen > c->req.body_len - 8)
    return srv_fail(err, 400, NULL,
                    "the safetensors header length %llu exceeds the body "
                    "(%zu bytes after the length)",
                    (unsigned long long)hlen, c->req.body_len - 8);
  /* No spans in the header: its arrays are shapes and offsets. */
  hdr = srv_codec__parse_object(NULL, c->req.body + 8, (size_t)hlen,
                                "the safetensors header", err);
  if (!hdr)
    return -1;
  dlen = c->req.body_len - 8 - hlen;

  json_object_foreach(hdr, key, v) {
    if (strcmp(key, "__metadata__") == 0)
      meta = v;
    else
      n++;
  }
  if (n) {
    c->in.bin = srv_codec__alloc(c, n * sizeof *c->in.bin, "", err);
    ext = malloc(n * sizeof *ext);
    if (!c->in.bin || !ext) {
      if (c->in.bin)
        srv_fail(err, 500, NULL, "out of memory");
      goto out;
    }
  }
  json_object_foreach(hdr, key, v) {
    if (strcmp(key, "__metadata__") == 0)
      continue;
    if (st_entry(c, key, v, body + 8 + hlen, dlen, &ext[c->in.nbin], err))
      goto out;
  }
  /* Tensors may be stored in any order but never share bytes. */
  if (n > 1)
    qsort(ext, n, sizeof *ext, cmp_extent);
  for (i = 1; i < (int)n; i++) {
    if (ext[i].b < ext[i - 1].e) {
      char ptr[PTR_CAP];
      srv_codec__pointer(ptr, sizeof ptr, c->in.bin[ext[i].idx].name);
      srv_fail(err, 400, ptr,
               "safetensors tensors \"%.60s\" and \"%.60s\" overlap "
               "(data_offsets [%llu, %llu] and [%llu, %llu])",
               c->in.bin[ext[i - 1].idx].name, c->in.bin[ext[i].idx].name,
               (unsigned long long)ext[i - 1].b,
               (unsigned long long)ext[i - 1].e, (unsigned long long)ext[i].b,
               (unsigned long long)ext[i].e);
      goto out;
    }
  }

  if (meta && !json_is_object(meta)) {
    srv_fail(err, 400, "/__metadata__",
             "the safetensors __metadata__ must be an object of strings");
    goto out;
  }
  v = meta ? json_object_get(meta, "params") : NULL;
  if (v && !json_is_string(v)) {
    srv_fail(err, 400, "/__metadata__/params",
             "__metadata__.params must be a string holding the JSON object "
             "of the non-tensor fields");
    goto out;
  }
  if (v)
    c->in.params =
        srv_codec__parse_object(c, json_string_value(v), json_string_length(v),
                                "__metadata__.params", err);
  else
    c->in.params = json_object();
  if (!c->in.params) {
    if (!v)
      srv_fail(err, 500, NULL, "out of memory");
    goto out;
  }
  rc = 0;
out:
  free(ext);
  json_decref(hdr);
  return rc;
}

/* ======================================================================
 * encoding a response
 * ====================================================================== */

static int buf_fail(struct srv_call *c, struct srv_buf *b, size_t need,
                    struct srv_err *err)
{
  if (b->max && need > b->max - (b->len < b->max ? b->len : b->max))
    return srv_fail(err, 413, NULL,
                    "the response would exceed %zu bytes (--max-output-mb)",
                    b->max);
  return srv_fail(err, 500, NULL, "out of memory writing the response");
}

int srv_codec__st_encode(struct srv_call *c, struct srv_err *err)
{
  struct srv_buf h;
  struct srv_buf *out = &c->resp.body;
  const void *bytes[SRV_MAX_OUTPUTS];
  size_t sizes[SRV_MAX_OUTPUTS], hlen, total, off = 0;
  unsigned char len8[8];
  int i, first = 1, nscalar = 0;
  char num[40];

  srv_buf_init(&h, 0);
  if (srv_buf_append(&h, "{", 1))
    goto oom;
  for (i = 0; i < c->plan.noutputs; i++)
    nscalar += c->plan.outputs[i].is_scalar;
  /* Scalars go to __metadata__ as strings (the format allows no other). */
  if (nscalar) {
    if (srv_buf_append(&h, "\"__metadata__\":{", 16))
      goto oom;
    for (i = 0; i < c->plan.noutputs; i++) {
      const struct srv_output *o = &c->plan.outputs[i];
      const char *val;
      size_t nl;
      if (!o->is_scalar)
        continue;
      if (o->json) { /* its JSON text, as a string */
        val = o->json;
        nl = strlen(o->json);
      } else {
        nl = srv_codec__fmt_f64(num, o->scalar);
        val = num;
        if (num[0] == '"') { /* "inf" is already a JSON string */
          val = num + 1;
          nl -= 2;
        }
      }
      if ((!first && srv_buf_append(&h, ",", 1)) ||
          srv_codec__json_str(&h, o->name ? o->name : "",
                              o->name ? strlen(o->name) : 0) ||
          srv_buf_append(&h, ":", 1) || srv_codec__json_str(&h, val, nl))
        goto oom;
      first = 0;
    }
    if (srv_buf_append(&h, "}", 1))
      goto oom;
  }
  for (i = 0; i < c->plan.noutputs; i++) {
    const struct srv_output *o = &c->plan.outputs[i];
    int to, d;
    if (o->is_scalar)
      continue;
    to = srv_codec__output_dtype(c, o);
    bytes[i] = srv_codec__output_bytes(c, o, to, &sizes[i], err);
    if (!bytes[i]) {
      srv_buf_free(&h);
      return -1;
    }
    if (!first && srv_buf_append(&h, ",", 1))
      goto oom;
    first = 0;
    if (srv_codec__json_str(&h, o->name ? o->name : "",
                            o->name ? strlen(o->name) : 0) ||
        srv_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(to)))
      goto oom;
    for (d = 0; d < o->t.ndim; d++)
      if (srv_buf_printf(&h, "%s%lld", d ? "," : "", (long long)o->t.shape[d]))
        goto oom;
    if (srv_buf_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off,
                       off + sizes[i]))
      goto oom;
    off += sizes[i];
  }
  if (srv_buf_append(&h, "}", 1))
    goto oom;
  /* Pad with spaces so the data section starts 8-byte aligned. */
  while (h.len % 8)
    if (srv_buf_append(&h, " ", 1))
      goto oom;
  hlen = h.len;
  total = 8 + hlen + off;
  /* The data may be sent from where it lies (srv_codec__emit_bytes); room
   * for all of it is only needed when it is copied. */
  if (srv_buf_reserve(out, c->resp.seg_ok ? 8 + hlen : total)) {
    srv_buf_free(&h);
    return buf_fail(c, out, total, err);
  }
  wr_le64(len8, hlen);
  srv_buf_append(out, len8, 8);
  srv_buf_append(out, h.data, hlen);
  srv_buf_free(&h);
  for (i = 0; i < c->plan.noutputs; i++)
    if (!c->plan.outputs[i].is_scalar &&
        srv_codec__emit_bytes(c, bytes[i], sizes[i], err) != 0)
      return -1;
  c->resp.type = "application/vnd.safetensors";
  return 0;
oom:
  srv_buf_free(&h);
  return srv_fail(err, 500, NULL, "out of memory writing the response");
}

int srv_codec__npy_encode(struct srv_call *c, const struct srv_output *o,
                          struct srv_err *err)
{
  static const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  char dict[256];
  const char *descr;
  const void *bytes;
  size_t nbytes, dl, hl, total, start;
  int to = srv_codec__output_dtype(c, o), d, n;
  unsigned char hl2[2];

  switch (to) {
  case AB_DTYPE_F32: descr = "<f4"; break;
  case AB_DTYPE_F64: descr = "<f8"; break;
  case AB_DTYPE_F16: descr = "<f2"; break;
  case AB_DTYPE_I32: descr = "<i4"; break;
  default:
    return srv_fail(err, 406, "/output_dtype",
                    "%s cannot be written as .npy (NumPy has no bfloat16); "
                    "ask for another output_dtype or another Accept",
                    ab_dtype_name((enum ab_dtype)to));
  }
  /* The dict as numpy.lib.format writes it. */
  n = snprintf(dict, sizeof dict,
               "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (d = 0; d < o->t.ndim; d++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", d ? ", " : "",
                  (long long)o->t.shape[d]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }",
                o->t.ndim == 1 ? "," : "");
  dl = (size_t)n;
  /* magic(6) + version(2) + HEADER_LEN(2) + dict + spaces + '\n' is a
   * multiple of 64, so the data that follows is 64-byte aligned. */
  hl = dl + 1;
  hl += (64 - (10 + hl) % 64) % 64;
  bytes = srv_codec__output_bytes(c, o, to, &nbytes, err);
  if (!bytes)
    return -1;
  total = 10 + hl + nbytes;
  if (srv_buf_reserve(&c->resp.body, c->resp.seg_ok ? total - nbytes : total))
    return buf_fail(c, &c->resp.body, total, err);
  start = c->resp.body.len;
  hl2[0] = (unsigned char)(hl & 0xff);
  hl2[1] = (unsigned char)(hl >> 8);
  srv_buf_append(&c->resp.body, magic, 8);
  srv_buf_append(&c->resp.body, hl2, 2);
  srv_buf_append(&c->resp.body, dict, dl);
  while (c->resp.body.len - start < total - nbytes - 1)
    srv_buf_append(&c->resp.body, " ", 1);
  srv_buf_append(&c->resp.body, "\n", 1);
  if (srv_codec__emit_bytes(c, bytes, nbytes, err) != 0)
    return -1;
  c->resp.type = "application/x-npy";
  return 0;
}
