/* v2.c: Open Inference Protocol bodies (KServe's "v2" REST protocol, with
 * Triton's binary tensor data extension) to and from the call of a /v1
 * route.
 *
 * A request is a JSON object -- "id", "parameters", "inputs", "outputs"
 * -- optionally followed by the bytes of binary inputs: then the header
 * Inference-Header-Content-Length gives the JSON's length, and each binary
 * input says its size in its "parameters" ("binary_data_size"), the data
 * following in the order of the inputs.  Decoding makes the request the
 * /v1 call of its model:
 *   - each parameter becomes the /v1 body member of the same name; a
 *     string holding a JSON object or array ('{' or '[' first) is read as
 *     that JSON, since the protocol's parameters are only booleans, numbers
 *     and strings;
 *   - a float input (FP32, FP16, BF16, FP64) becomes a named tensor, as a
 *     safetensors entry does (dotted names for nested fields: bias.table);
 *     binary data is read in place when aligned;
 *   - an INT32 input becomes the JSON array of its integers (nested by its
 *     shape) at its name: positions, kv_lens, window are JSON lists in /v1.
 * The answer lists the outputs asked for ("outputs"; all of them without
 * it), each as JSON "data" or, with "binary_data" (or the request's
 * "binary_data_output"), as bytes after the JSON; an output that is a JSON
 * value rather than a tensor goes in the answer's "parameters" as its JSON
 * text.  Every size the body states is checked against the bytes it has
 * before anything is read. */
#include "codec-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PTR_CAP 192

/* An output the request names. */
struct v2_out {
  const char *name;
  int binary; /* -1: as binary_data_output says */
};

struct srv_v2 {
  const char *model; /* the path's model name */
  const char *id;    /* echoed; NULL: none given */
  struct v2_out *outs;
  int nouts;         /* 0: every output */
  int binary_all;    /* binary_data_output */
};

static const struct {
  const char *name;
  enum ab_dtype dtype;
} g_types[] = {
    {"FP32", AB_DTYPE_F32}, {"FP16", AB_DTYPE_F16}, {"BF16", AB_DTYPE_BF16},
    {"FP64", AB_DTYPE_F64}, {"INT32", AB_DTYPE_I32},
};
#define NTYPES (sizeof g_types / sizeof g_types[0])

static const char *type_name(int dtype)
{
  size_t i;

  for (i = 0; i < NTYPES; i++)
    if ((int)g_types[i].dtype == dtype)
      return g_types[i].name;
  return "?";
}

/* ======================================================================
 * decoding
 * ====================================================================== */

/* What decoding an input needs beside the call. */
struct v2_in {
  const char *bin;   /* the bytes after the JSON */
  size_t bin_len, bin_off; /* their count, and how many inputs used */
};

/* Inference-Header-Content-Length: decimal digits, at most the body. */
static int header_length(const struct srv_call *c, size_t *len,
                         struct srv_err *err)
{
  const char *h = c->req.infer_header, *p;
  uint64_t v = 0;

  *len = c->req.body_len;
  if (!h)
    return 0;
  for (p = h; *p == ' ' || *p == '\t'; p++)
    ;
  if (*p < '0' || *p > '9')
    goto bad;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - 9) / 10)
      goto bad;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  while (*p == ' ' || *p == '\t')
    p++;
  if (*p)
    goto bad;
  if (v > c->req.body_len)
    return srv_fail(err, 400, NULL,
                    "Inference-Header-Content-Length %llu is more than the "
                    "body's %zu bytes",
                    (unsigned long long)v, c->req.body_len);
  *len = (size_t)v;
  return 0;
bad:
  return srv_fail(err, 400, NULL,
                  "Inference-Header-Content-Length \"%.40s\" is not a "
                  "byte count",
                  h);
}

/* Set obj[path] (dotted: "bias.table" is obj.bias.table) to v (stolen),
 * creating the objects on the way; a field already there is a 400. */
static int put_path(json_t *obj, const char *path, json_t *v,
                    const char *ptr, struct srv_err *err)
{
  const char *dot;
  char key[128];

  while ((dot = strchr(path, '.')) != NULL) {
    json_t *next;
    size_t n = (size_t)(dot - path);

    if (n == 0 || n >= sizeof key)
      break;
    memcpy(key, path, n);
    key[n] = '\0';
    next = json_object_get(obj, key);
    if (!next) {
      next = json_object();
      if (!next || json_object_set_new(obj, key, next) != 0)
        goto oom;
    } else if (!json_is_object(next)) {
      json_decref(v);
      return srv_fail(err, 400, ptr,
                      "input \"%.60s\": parameter \"%s\" is not an object "
                      "that could hold it",
                      path, key);
    }
    obj = next;
    path = dot + 1;
  }
  if (json_object_get(obj, path)) {
    json_decref(v);
    return srv_fail(err, 400, ptr,
                    "input \"%.60s\" is also given as a parameter", path);
  }
  if (json_object_set_new(obj, path, v) != 0)
    return srv_fail(err, 500, ptr, "out of memory");
  return 0;
oom:
  json_decref(v);
  return srv_fail(err, 500, ptr, "out of memory");
}

/* The JSON array of vals (count n) nested by shape[0..rank). */
static json_t *nested_ints(const int64_t *vals, const int64_t *shape,
                           int rank, int64_t *at)
{
  json_t *a = json_array();
  int64_t i;

  for (i = 0; a && i < shape[0]; i++) {
    json_t *e = rank > 1 ? nested_ints(vals, shape + 1, rank - 1, at)
                         : json_integer(vals[(*at)++]);
    if (!e || json_array_append_new(a, e) != 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

/* Count the numbers of a "data" value: nested arrays, numbers and the
 * strings "inf", "-inf", "nan".  -1 (err set) on anything else. */
static int64_t data_count(const json_t *j, int depth, const char *ptr,
                          struct srv_err *err)
{
  int64_t n = 0, k;
  size_t i;
  double v;

  if (!json_is_array(j)) {
    if (depth > 0 && srv_codec_number(j, &v) == 0)
      return 1;
    srv_fail(err, 400, ptr,
             "data must be an array of numbers (flat or nested by the "
             "shape)");
    return -1;
  }
  if (depth >= AB_MAX_DIMS) {
    srv_fail(err, 400, ptr, "data is nested deeper than %d levels",
             AB_MAX_DIMS);
    return -1;
  }
  for (i = 0; i < json_array_size(j); i++) {
    if ((k = data_count(json_array_get(j, i), depth + 1, ptr, err)) < 0)
      return -1;
    n += k;
  }
  return n;
}

/* Write the numbers data_count counted, in order, into out. */
static void data_fill(const json_t *j, double *out, int64_t *at)
{
  size_t i;

  if (json_is_array(j)) {
    for (i = 0; i < json_array_size(j); i++)
      data_fill(json_array_get(j, i), out, at);
  } else {
    srv_codec_number(j, &out[(*at)++]);
  }
}

/* JSON "data" of an input as float values of dtype (a new arena block), or
 * as int64 integers for INT32.  n is the count the shape gives.  A long
 * "data" array was read beside the tree (lift), a short one is in it. */
static void *json_data(struct srv_call *c, const json_t *data,
                       const struct srv_codec_lift *lift, int dtype,
                       int64_t n, const char *ptr, struct srv_err *err)
{
  int64_t count, at = 0, k;
  double *d;
  void *out;

  if (lift && lift->kind == SRV_LIFT_B64) {
    srv_fail(err, 400, ptr,
             "data must be an array of numbers (flat or nested by the "
             "shape)");
    return NULL;
  }
  count = lift ? lift->n : data_count(data, 0, ptr, err);
  if (count < 0)
    return NULL;
  if (count != n) {
    srv_fail(err, 400, ptr,
             "data has %lld values and the shape says %lld",
             (long long)count, (long long)n);
    return NULL;
  }
  if (!(d = srv_codec__alloc(c, (size_t)n * sizeof *d, ptr, err)))
    return NULL;
  if (lift)
    memcpy(d, lift->v, (size_t)n * sizeof *d);
  else
    data_fill(data, d, &at);
  if (dtype == AB_DTYPE_F64)
    return d;
  if (dtype == AB_DTYPE_I32) {
    int64_t *iv = (int64_t *)d; /* in place: one 8-byte slot each */
    for (k = 0; k < n; k++) {
      if (!(d[k] == floor(d[k]) && fabs(d[k]) <= 2147483647.0)) {
        srv_fail(err, 400, ptr,
                 "data[%lld] = %.17g is not an INT32 value",
                 (long long)k, d[k]);
        return NULL;
      }
      iv[k] = (int64_t)d[k];
    }
    return iv;
  }
  out = srv_codec__alloc(c, (size_t)n * ab_dtype_size((enum ab_dtype)dtype),
                         ptr, err);
  if (!out)
    return NULL;
  if (ab_convert(out, (enum ab_dtype)dtype, d, AB_DTYPE_F64, n) !=
      AB_STATUS_OK) {
    srv_fail(err, 500, ptr, "%s", ab_last_error()->msg);
    return NULL;
  }
  /* A finite value the datatype cannot hold is refused, as in /v1. */
  for (k = 0; k < n; k++) {
    float f = dtype == AB_DTYPE_F32   ? ((const float *)out)[k]
              : dtype == AB_DTYPE_F16 ? ab_f16_to_f32(((const uint16_t *)out)[k])
                                      : ab_bf16_to_f32(((const uint16_t *)out)[k]);
    if (isfinite(d[k]) && !isfinite(f)) {
      srv_fail(err, 400, ptr, "data[%lld] = %.17g is out of the range of %s",
               (long long)k, d[k], type_name(dtype));
      return NULL;
    }
  }
  return out;
}

/* The shape of an input: rank 1..AB_MAX_DIMS, each dimension >= 1, and
 * the element count and byte size without overflow. */
static int input_shape(const json_t *js, int dtype, int64_t *shape,
                       int *rank, int64_t *numel, uint64_t *bytes,
                       const char *ptr, struct srv_err *err)
{
  int64_t n = 1, nb;
  size_t i;

  if (!json_is_array(js) || json_array_size(js) < 1 ||
      json_array_size(js) > AB_MAX_DIMS)
    return srv_fail(err, 400, ptr,
                    "shape must be an array of 1 to %d dimensions",
                    AB_MAX_DIMS);
  *rank = (int)json_array_size(js);
  for (i = 0; i < json_array_size(js); i++) {
    const json_t *d = json_array_get(js, i);
    if (!json_is_integer(d) || json_integer_value(d) < 1)
      return srv_fail(err, 400, ptr,
                      "shape[%zu] must be an integer >= 1", i);
    shape[i] = (int64_t)json_integer_value(d);
    if (ab_mul_overflow(n, shape[i], &n) ||
        ab_mul_overflow(n, (int64_t)ab_dtype_size((enum ab_dtype)dtype), &nb))
      return srv_fail(err, 413, ptr, "the shape's byte size overflows");
  }
  *numel = n;
  *bytes = (uint64_t)n * ab_dtype_size((enum ab_dtype)dtype);
  return 0;
}

/* The bytes of a binary input: the next `size` bytes after the JSON. */
static const char *binary_data(struct v2_in *in, const json_t *jsize,
                               uint64_t bytes, const char *ptr,
                               struct srv_err *err)
{
  const char *p;
  json_int_t size = json_integer_value(jsize);

  if (!json_is_integer(jsize) || size < 0) {
    srv_fail(err, 400, ptr,
             "parameters.binary_data_size must be an integer >= 0");
    return NULL;
  }
  if ((uint64_t)size != bytes) {
    srv_fail(err, 400, ptr,
             "binary_data_size %lld is not the %llu bytes of the shape and "
             "datatype",
             (long long)size, (unsigned long long)bytes);
    return NULL;
  }
  if (bytes > in->bin_len - in->bin_off) {
    srv_fail(err, 400, ptr,
             "binary_data_size %llu goes past the body: %zu bytes of binary "
             "data are left after the JSON and the inputs before it",
             (unsigned long long)bytes, in->bin_len - in->bin_off);
    return NULL;
  }
  p = in->bin + in->bin_off;
  in->bin_off += (size_t)bytes;
  return p;
}

/* One element of "inputs". */
static int decode_input(struct srv_call *c, struct v2_in *in, size_t idx,
                        const json_t *j, struct srv_err *err)
{
  char ptr[PTR_CAP], dptr[PTR_CAP];
  const json_t *jn = json_object_get(j, "name"),
               *jt = json_object_get(j, "datatype"),
               *jp = json_object_get(j, "parameters"),
               *jd = json_object_get(j, "data"), *jsize;
  const struct srv_codec_lift *lift;
  const char *name, *tn, *key;
  int dtype = -1, rank = 0, i;
  int64_t shape[AB_MAX_DIMS], numel = 0;
  uint64_t bytes = 0;
  const void *data;
  size_t k;
  json_t *v;

  snprintf(ptr, sizeof ptr, "/inputs/%zu", idx);
  if (!json_is_object(j))
    return srv_fail(err, 400, ptr, "an input must be an object");
  name = json_string_value(jn);
  if (!name || !name[0] || strlen(name) > 120)
    return srv_fail(err, 400, ptr,
                    "an input needs a name (a string of 1 to 120 bytes)");
  tn = json_string_value(jt);
  for (k = 0; tn && k < NTYPES; k++)
    if (strcmp(tn, g_types[k].name) == 0)
      dtype = (int)g_types[k].dtype;
  if (dtype < 0)
    return srv_fail(err, 400, ptr,
                    "input \"%.60s\": datatype %s%.20s%s is not one of FP32, "
                    "FP16, BF16, FP64, INT32",
                    name, tn ? "\"" : "", tn ? tn : "(missing)", tn ? "\"" : "");
  if (input_shape(json_object_get(j, "shape"), dtype, shape, &rank, &numel,
                  &bytes, ptr, err))
    return -1;
  if (jp && !json_is_object(jp))
    return srv_fail(err, 400, ptr, "parameters must be an object");
  jsize = json_object_get(jp, "binary_data_size");
  json_object_foreach((json_t *)jp, key, v) {
    if (strcmp(key, "binary_data_size") != 0) {
      char p2[PTR_CAP];
      srv_strcpy(p2, sizeof p2, ptr);
      srv_codec__pointer_add(p2, sizeof p2, "parameters", 10);
      srv_codec__pointer_add(p2, sizeof p2, key, strlen(key));
      srv_codec_ignore(c, p2);
    }
  }
  json_object_foreach((json_t *)j, key, v) {
    if (strcmp(key, "name") && strcmp(key, "datatype") &&
        strcmp(key, "shape") && strcmp(key, "parameters") &&
        strcmp(key, "data")) {
      char p2[PTR_CAP];
      srv_strcpy(p2, sizeof p2, ptr);
      srv_codec__pointer_add(p2, sizeof p2, key, strlen(key));
      srv_codec_ignore(c, p2);
    }
  }
  srv_strcpy(dptr, sizeof dptr, ptr);
  srv_codec__pointer_add(dptr, sizeof dptr, "data", 4);
  lift = srv_codec__lift_at(c, dptr);
  if (!jsize == !(jd || lift))
    return srv_fail(err, 400, ptr,
                    "input \"%.60s\" needs either data or "
                    "parameters.binary_data_size (binary data after the "
                    "JSON), not %s",
                    name, jsize ? "both" : "neither");
  data = jsize ? (const void *)binary_data(in, jsize, bytes, ptr, err)
               : json_data(c, jd, lift, dtype, numel, dptr, err);
  if (!data)
    return -1;

  if (dtype == AB_DTYPE_I32) {
    int64_t *iv = (int64_t *)(void *)data, at = 0, e;
    json_t *list;

    if (jsize) { /* little-endian int32 bytes */
      const unsigned char *b = data;
      if (!(iv = srv_codec__alloc(c, (size_t)numel * sizeof *iv, ptr, err)))
        return -1;
      for (e = 0; e < numel; e++)
        iv[e] = (int32_t)((uint32_t)b[4 * e] | (uint32_t)b[4 * e + 1] << 8 |
                          (uint32_t)b[4 * e + 2] << 16 |
                          (uint32_t)b[4 * e + 3] << 24);
    }
    list = nested_ints(iv, shape, rank, &at);
    if (!list)
      return srv_fail(err, 500, ptr, "out of memory");
    return put_path(c->in.params, name, list, ptr, err);
  }

  /* A float tensor, named as a safetensors entry is. */
  {
    struct srv_named_tensor *nt = &c->in.bin[c->in.nbin];
    size_t es = ab_dtype_size((enum ab_dtype)dtype);

    for (i = 0; i < c->in.nbin; i++)
      if (strcmp(c->in.bin[i].name, name) == 0)
        return srv_fail(err, 400, ptr, "input \"%.60s\" is given twice",
                        name);
    nt->name = srv_arena_strdup(&c->arena, name);
    if (!nt->name)
      return srv_fail(err, 500, ptr, "out of memory");
    if (jsize && ((uintptr_t)data % es) != 0) {
      void *copy = srv_codec__alloc(c, (size_t)bytes, ptr, err);
      if (!copy)
        return -1;
      memcpy(copy, data, (size_t)bytes);
      data = copy;
    }
    if (ab_tensor_init(&nt->t, (void *)data, (enum ab_dtype)dtype, rank,
                       shape) != AB_STATUS_OK)
      return srv_fail(err, 400, ptr, "input \"%.60s\": %s", name,
                      ab_last_error()->msg);
    c->in.nbin++;
  }
  return 0;
}

/* The members the pre-scan read beside the tree (lifts first ..) under
 * JSON pointer `from` belong under `to` once their value moves into the
 * /v1 body (c->in.params): lifts are found by pointer, so they follow it.  A
 * lifted member of `parent` itself becomes a member of c->in.params (named
 * `key` when not NULL), after the members in the tree. */
static int move_lifts(struct srv_call *c, int first, const char *from,
                      const char *to, const json_t *parent, const char *key,
                      struct srv_err *err)
{
  struct srv_codec_state *st = c->in.codec;
  size_t fl = strlen(from);
  int i;

  for (i = first; st && i < st->nlifts; i++) {
    struct srv_codec_lift *l = &st->lifts[i];
    char ptr[PTR_CAP];

    if (strncmp(l->ptr, from, fl) != 0 || l->ptr[fl] != '/')
      continue;
    snprintf(ptr, sizeof ptr, "%s%s", to, l->ptr + fl);
    if (!(l->ptr = srv_arena_strdup(&c->arena, ptr)) ||
        (l->parent == parent && key &&
         !(l->key = srv_arena_strdup(&c->arena, key))))
      return srv_fail(err, 500, from, "out of memory");
    if (l->parent == parent) {
      l->parent = c->in.params;
      l->index = INT64_MAX;
    }
  }
  return 0;
}

/* A string parameter holding a JSON object or array, read as that JSON
 * (with the codec's limits: depth, number arrays read beside the tree):
 * 0 with *use the value, or NULL when the whole value was read beside the
 * tree (it is then the member `key` of c->in.params there). */
static int param_json(struct srv_call *c, const char *key, const char *s,
                      json_t **use, struct srv_err *err)
{
  const struct srv_codec_state *st = c->in.codec;
  const int first = st ? st->nlifts : 0;
  size_t n = strlen(s);
  char *text = srv_codec__alloc(c, n + 8, "/parameters", err), what[96];
  char to[PTR_CAP] = "";
  json_t *wrap;
  int rc;

  if (!text)
    return -1;
  memcpy(text, "{\"v\":", 5);
  memcpy(text + 5, s, n);
  memcpy(text + 5 + n, "}", 2);
  snprintf(what, sizeof what, "the JSON text of parameter \"%.40s\" "
           "(offsets from 5)", key);
  wrap = srv_codec__parse_object(c, text, n + 6, what, err);
  if (!wrap)
    return -1;
  srv_codec__pointer_add(to, sizeof to, key, strlen(key));
  rc = move_lifts(c, first, "/v", to, wrap, key, err);
  *use = json_incref(json_object_get(wrap, "v"));
  json_decref(wrap);
  return rc;
}

static int starts_structured(const char *s)
{
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
    s++;
  return *s == '{' || *s == '[';
}

/* "parameters" of the request: the /v1 body's members. */
static int decode_params(struct srv_call *c, struct srv_v2 *v,
                         const json_t *jp, struct srv_err *err)
{
  const char *key;
  json_t *val;

  if (!jp)
    return 0;
  if (!json_is_object(jp))
    return srv_fail(err, 400, "/parameters", "parameters must be an object");
  if (move_lifts(c, 0, "/parameters", "", jp, NULL, err))
    return -1;
  json_object_foreach((json_t *)jp, key, val) {
    char ptr[PTR_CAP] = "/parameters";
    json_t *use;

    srv_codec__pointer_add(ptr, sizeof ptr, key, strlen(key));
    if (strcmp(key, "binary_data_output") == 0) {
      if (!json_is_boolean(val))
        return srv_fail(err, 400, ptr, "binary_data_output must be a boolean");
      v->binary_all = json_is_true(val);
      continue;
    }
    if (strcmp(key, "encoding") == 0 || strcmp(key, "output") == 0)
      return srv_fail(err, 400, ptr,
                      "\"%s\" is not a v2 parameter: outputs choose their "
                      "form with binary_data, and \"outputs\" picks them",
                      key);
    if (json_is_string(val) && starts_structured(json_string_value(val))) {
      if (param_json(c, key, json_string_value(val), &use, err) != 0) {
        srv_strcpy(err->field, sizeof err->field, ptr);
        return -1;
      }
      if (!use)
        continue; /* read beside the tree, now a member of c->in.params */
    } else {
      use = json_incref(val);
    }
    if (json_object_set_new(c->in.params, key, use) != 0)
      return srv_fail(err, 500, ptr, "out of memory");
  }
  return 0;
}

/* "outputs": the names asked for, each with its binary_data. */
static int decode_outputs(struct srv_call *c, struct srv_v2 *v,
                          const json_t *jo, struct srv_err *err)
{
  size_t i, k;

  if (!jo)
    return 0;
  if (!json_is_array(jo) || json_array_size(jo) > SRV_MAX_OUTPUTS)
    return srv_fail(err, 400, "/outputs",
                    "outputs must be an array of at most %d outputs",
                    SRV_MAX_OUTPUTS);
  v->outs = srv_codec__alloc(c, (json_array_size(jo) + 1) * sizeof *v->outs,
                             "/outputs", err);
  if (!v->outs)
    return -1;
  for (i = 0; i < json_array_size(jo); i++) {
    const json_t *o = json_array_get(jo, i),
                 *jp = json_object_get(o, "parameters"),
                 *jb = json_object_get(jp, "binary_data");
    const char *name = json_string_value(json_object_get(o, "name"));
    char ptr[PTR_CAP];

    snprintf(ptr, sizeof ptr, "/outputs/%zu", i);
    if (!json_is_object(o) || !name)
      return srv_fail(err, 400, ptr, "an output is an object with a name");
    if ((jp && !json_is_object(jp)) || (jb && !json_is_boolean(jb)))
      return srv_fail(err, 400, ptr,
                      "parameters.binary_data must be a boolean");
    for (k = 0; k < i; k++)
      if (strcmp(v->outs[k].name, name) == 0)
        return srv_fail(err, 400, ptr, "output \"%.60s\" is asked twice",
                        name);
    v->outs[i].name = srv_arena_strdup(&c->arena, name);
    if (!v->outs[i].name)
      return srv_fail(err, 500, ptr, "out of memory");
    v->outs[i].binary = jb ? json_is_true(jb) : -1;
  }
  v->nouts = (int)json_array_size(jo);
  return 0;
}

#define V2_MODELS "/v2/models/"

const char *srv_codec_v2_model(const char *path, char *buf, size_t cap)
{
  const char *m, *end;

  if (!path || strncmp(path, V2_MODELS, sizeof V2_MODELS - 1) != 0 || !cap)
    return NULL;
  m = path + sizeof V2_MODELS - 1;
  end = strchr(m, '/');
  if (!end)
    end = m + strlen(m);
  if (end == m || (size_t)(end - m) >= cap)
    return NULL;
  memcpy(buf, m, (size_t)(end - m));
  buf[end - m] = '\0';
  return buf;
}

int srv_codec__v2_decode(struct srv_call *c, struct srv_err *err)
{
  struct v2_in in;
  struct srv_v2 *v;
  char model[64];
  const char *key;
  json_t *req, *val, *inputs;
  size_t hlen, i;
  int rc = -1;

  if (!srv_codec_v2_model(c->req.route->path, model, sizeof model))
    return srv_fail(err, 500, NULL, "route %s has no model",
                    c->req.route->path);
  if (header_length(c, &hlen, err))
    return -1;
  if (!(v = srv_codec__alloc(c, sizeof *v, "", err)))
    return -1;
  memset(v, 0, sizeof *v);
  if (!(v->model = srv_arena_strdup(&c->arena, model)))
    return srv_fail(err, 500, NULL, "out of memory");
  if (hlen == 0)
    return srv_fail(err, 400, NULL,
                    "the inference request is empty; it is a JSON object "
                    "with \"inputs\"");
  req = srv_codec__parse_object(c, c->req.body, hlen, "the inference request",
                                err);
  if (!req) {
    if (hlen < c->req.body_len || c->req.infer_header)
      return -1;
    /* Binary data without the header: say which header was missing. */
    if (memchr(c->req.body, '\0', c->req.body_len))
      srv_strcpy(err->detail + strlen(err->detail),
                 sizeof err->detail - strlen(err->detail),
                 "; binary tensor data after the JSON needs the header "
                 "Inference-Header-Content-Length");
    return -1;
  }
  if (!(c->in.params = json_object())) {
    srv_fail(err, 500, NULL, "out of memory");
    goto out;
  }
  val = json_object_get(req, "id");
  if (val && !json_is_string(val)) {
    srv_fail(err, 400, "/id", "id must be a string");
    goto out;
  }
  if (val && !(v->id = srv_arena_strdup(&c->arena, json_string_value(val)))) {
    srv_fail(err, 500, "/id", "out of memory");
    goto out;
  }
  inputs = json_object_get(req, "inputs");
  if (!json_is_array(inputs)) {
    srv_fail(err, 400, "/inputs", "inputs must be an array of tensors");
    goto out;
  }
  if (decode_params(c, v, json_object_get(req, "parameters"), err) ||
      decode_outputs(c, v, json_object_get(req, "outputs"), err))
    goto out;
  json_object_foreach(req, key, val) {
    if (strcmp(key, "id") && strcmp(key, "parameters") &&
        strcmp(key, "inputs") && strcmp(key, "outputs")) {
      char ptr[PTR_CAP] = "";
      srv_codec__pointer_add(ptr, sizeof ptr, key, strlen(key));
      srv_codec_ignore(c, ptr);
    }
  }
  c->in.bin = srv_codec__alloc(
      c, (json_array_size(inputs) + 1) * sizeof *c->in.bin, "/inputs", err);
  if (!c->in.bin)
    goto out;
  in.bin = c->req.body + hlen;
  in.bin_len = c->req.body_len - hlen;
  in.bin_off = 0;
  for (i = 0; i < json_array_size(inputs); i++)
    if (decode_input(c, &in, i, json_array_get(inputs, i), err))
      goto out;
  if (in.bin_off != in.bin_len) {
    srv_fail(err, 400, NULL,
             "%zu bytes follow the JSON (Inference-Header-Content-Length "
             "%zu) and the inputs' binary_data_size add up to %zu",
             in.bin_len, hlen, in.bin_off);
    goto out;
  }
  if (srv_codec__read_options(c, err))
    goto out;
  /* The call layer turns this into the /v1 call of the model
   * (srv_call_prepare): the codec knows no routes. */
  c->in.v2 = v;
  rc = 0;
out:
  json_decref(req);
  return rc;
}

/* ======================================================================
 * encoding
 * ====================================================================== */

/* An output as it goes out: its bytes (binary) or values, and how. */
struct v2_put {
  const struct srv_output *o;
  int binary, dtype;
  const void *bytes;
  size_t nbytes;
};

static int out_fail(struct srv_call *c, struct srv_err *err)
{
  if (c->resp.body.max && c->resp.body.len + 64 > c->resp.body.max)
    return srv_fail(err, 413, NULL,
                    "the response would exceed --max-output-mb; ask for "
                    "fewer outputs or binary_data");
  return srv_fail(err, 500, NULL, "out of memory writing the response");
}

/* Which outputs go out, in the order asked, and in which form.  A JSON
 * value (the analysis planner's settings) is no tensor: it goes in the
 * answer's parameters as its JSON text, asked for or not, and never as
 * binary data. */
static int pick_outputs(struct srv_call *c, struct v2_put *put, int *nput,
                        struct srv_err *err)
{
  const struct srv_v2 *v = c->in.v2;
  int i, k, n = v->nouts ? v->nouts : c->plan.noutputs;

  for (i = 0; i < n; i++) {
    const struct srv_output *o = NULL;
    int binary = v->binary_all;
    char ptr[PTR_CAP];

    snprintf(ptr, sizeof ptr, "/outputs/%d", i);
    if (v->nouts) {
      char names[256];
      size_t w = 0;

      names[0] = '\0';
      for (k = 0; k < c->plan.noutputs && !o; k++) {
        if (strcmp(c->plan.outputs[k].name, v->outs[i].name) == 0)
          o = &c->plan.outputs[k];
        else if (w < sizeof names)
          w += (size_t)snprintf(names + w, sizeof names - w, "%s%s",
                                w ? ", " : "", c->plan.outputs[k].name);
      }
      if (!o) {
        srv_codec__pointer_add(ptr, sizeof ptr, "name", 4);
        return srv_fail(err, 400, ptr,
                        "output \"%.60s\" is not among this answer's "
                        "outputs (%s)",
                        v->outs[i].name, names[0] ? names : "none");
      }
      if (v->outs[i].binary >= 0)
        binary = v->outs[i].binary;
      if (o->json && v->outs[i].binary > 0)
        return srv_fail(err, 400, ptr,
                        "output \"%.60s\" is a JSON value, not a tensor: it "
                        "comes as JSON text in the answer's parameters, "
                        "never as binary data",
                        o->name);
    } else {
      o = &c->plan.outputs[i];
    }
    put[i].o = o;
    put[i].binary = o->json ? 0 : binary;
    if (o->json)
      continue;
    if (o->is_scalar) {
      double *d = srv_codec__alloc(c, sizeof *d, "", err);
      if (!d)
        return -1;
      *d = o->scalar;
      put[i].dtype = AB_DTYPE_F64;
      put[i].bytes = d;
      put[i].nbytes = sizeof *d;
    } else {
      put[i].dtype = srv_codec__output_dtype(c, o);
      put[i].bytes = srv_codec__output_bytes(c, o, put[i].dtype,
                                             &put[i].nbytes, err);
      if (!put[i].bytes)
        return -1;
    }
  }
  *nput = n;
  return 0;
}

/* The JSON values among the outputs, as the answer's "parameters": each
 * its JSON text in a string (the protocol's parameters are booleans,
 * numbers and strings), the way a structured request parameter comes. */
static int put_json_params(struct srv_call *c, const struct v2_put *put,
                           int n, struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  int i, first = 1;

  for (i = 0; i < n; i++) {
    const struct srv_output *o = put[i].o;

    if (!o->json)
      continue;
    if (srv_buf_append(b, first ? ",\"parameters\":{" : ",",
                       first ? 15 : 1) ||
        srv_codec__json_str(b, o->name, strlen(o->name)) ||
        srv_buf_append(b, ":", 1) ||
        srv_codec__json_str(b, o->json, strlen(o->json)))
      return out_fail(c, err);
    first = 0;
  }
  return !first && srv_buf_append(b, "}", 1) ? out_fail(c, err) : 0;
}

static int put_output(struct srv_call *c, const struct v2_put *p,
                      struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  const char *name = p->o->name;
  int d;

  if (srv_buf_append(b, "{\"name\":", 8) ||
      srv_codec__json_str(b, name, strlen(name)) ||
      srv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[",
                     type_name(p->dtype)))
    return out_fail(c, err);
  if (p->o->is_scalar) {
    if (srv_buf_append(b, "1", 1))
      return out_fail(c, err);
  } else {
    for (d = 0; d < p->o->t.ndim; d++)
      if (srv_buf_printf(b, "%s%lld", d ? "," : "",
                         (long long)p->o->t.shape[d]))
        return out_fail(c, err);
  }
  if (p->binary) {
    if (srv_buf_printf(b, "],\"parameters\":{\"binary_data_size\":%zu}}",
                       p->nbytes))
      return out_fail(c, err);
    return 0;
  }
  if (srv_buf_append(b, "],\"data\":", 9))
    return out_fail(c, err);
  if (srv_codec__emit_data(c, p->bytes, p->dtype,
                           (int64_t)(p->nbytes /
                                     ab_dtype_size((enum ab_dtype)p->dtype)),
                           err))
    return -1;
  return srv_buf_append(b, "}", 1) ? out_fail(c, err) : 0;
}

int srv_codec__v2_encode(struct srv_call *c, struct srv_err *err)
{
  struct srv_buf *b = &c->resp.body;
  const struct srv_v2 *v = c->in.v2;
  struct v2_put put[SRV_MAX_OUTPUTS];
  int i, k, n = 0, nbin = 0;

  if (pick_outputs(c, put, &n, err))
    return -1;
  if (srv_buf_append(b, "{\"model_name\":", 14) ||
      srv_codec__json_str(b, v->model, strlen(v->model)) ||
      srv_buf_append(b, ",\"model_version\":\"1\"", 20))
    return out_fail(c, err);
  if (v->id && (srv_buf_append(b, ",\"id\":", 6) ||
                srv_codec__json_str(b, v->id, strlen(v->id))))
    return out_fail(c, err);
  if (put_json_params(c, put, n, err))
    return -1;
  if (srv_buf_append(b, ",\"outputs\":[", 12))
    return out_fail(c, err);
  for (i = 0, k = 0; i < n; i++) {
    if (put[i].o->json)
      continue;
    if (k++ && srv_buf_append(b, ",", 1))
      return out_fail(c, err);
    if (put_output(c, &put[i], err))
      return -1;
    nbin += put[i].binary;
  }
  if (srv_buf_append(b, "]}", 2))
    return out_fail(c, err);
  c->resp.type = "application/json";
  if (!nbin)
    return 0;
  /* The binary outputs follow the JSON, in the order of its list. */
  c->resp.infer_header = b->len;
  c->resp.type = "application/octet-stream";
  for (i = 0; i < n; i++)
    if (put[i].binary &&
        srv_codec__emit_bytes(c, put[i].bytes, put[i].nbytes, err))
      return -1;
  return 0;
}
