/* tensor-json.c: srv_codec_tensor -- a request's tensor, by dotted path,
 * from the safetensors part of the body or from the JSON parameters in any
 * of the three forms of docs/http.md#tensors-in-json:
 *   [[1, 2], [3, 4]]                                nested, shape inferred
 *   {"shape": [2, 2], "data": [1, 2, 3, 4], "dtype": "float32"}
 *   {"shape": [2, 2], "dtype": "float16", "b64": "<little-endian bytes>"}
 * Every error names the JSON pointer of the offending value. */
#include "codec-internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PTR_CAP 192 /* = sizeof(struct srv_err){0}.field */

/* ======================================================================
 * values
 * ====================================================================== */

/* Where converted values go, and how to name one if it is rejected. */
struct sink {
  void *buf;
  int dtype;
  int64_t k;          /* next element */
  const char *base;   /* pointer of the array holding the values */
  int rank;           /* of the array's nesting (1 for flat data) */
  int64_t idx[AB_MAX_DIMS];
};

static void elem_pointer(const struct sink *s, int depth, char *out)
{
  char num[24];
  int i;

  snprintf(out, PTR_CAP, "%s", s->base);
  for (i = 0; i < depth; i++) {
    snprintf(num, sizeof num, "%lld", (long long)s->idx[i]);
    srv_codec__pointer_add(out, PTR_CAP, num, strlen(num));
  }
}

static const char *type_name(const json_t *j)
{
  switch (json_typeof(j)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE: return "true";
  case JSON_FALSE: return "false";
  case JSON_NULL: return "null";
  default: return "something else";
  }
}

/* Store v as element s->k in s->dtype, rounded once.  A finite value that
 * the dtype cannot hold is an error rather than a silent infinity:
 * infinities are written as "inf"/"-inf" on purpose. */
static int put(struct sink *s, double v, struct srv_err *err)
{
  float f;
  uint16_t h = 0;
  int over = 0;

  switch (s->dtype) {
  case AB_DTYPE_F64:
    ((double *)s->buf)[s->k] = v;
    break;
  case AB_DTYPE_F32:
    f = (float)v;
    over = isinf(f) && isfinite(v);
    ((float *)s->buf)[s->k] = f;
    break;
  case AB_DTYPE_F16:
  case AB_DTYPE_BF16:
    /* Not through (float)v: a value just past a tie between two halves
     * can round onto the tie in float32, and then to the wrong side
     * (1 + 2^-11 + 2^-40 became 1, not 1 + 2^-10).  ab_convert rounds to
     * odd on the way, so the result is v rounded once. */
    ab_convert(&h, (enum ab_dtype)s->dtype, &v, AB_DTYPE_F64, 1);
    over = (h & 0x7fffu) ==
               (s->dtype == AB_DTYPE_F16 ? 0x7c00u : 0x7f80u) &&
           isfinite(v);
    ((uint16_t *)s->buf)[s->k] = h;
    break;
  default:
    break;
  }
  if (over) {
    char ptr[PTR_CAP];
    elem_pointer(s, s->rank, ptr);
    return srv_fail(err, 400, ptr,
                    "value %g at %s is out of the range of %s; send \"inf\" "
                    "or \"-inf\" for an infinity",
                    v, ptr, ab_dtype_name((enum ab_dtype)s->dtype));
  }
  s->k++;
  return 0;
}

/* ======================================================================
 * nested arrays
 * ====================================================================== */

/* Length of j as an array, or -1. */
static int64_t arr_len(const json_t *j)
{
  return json_is_array(j) ? (int64_t)json_array_size(j) : -1;
}

/* The shape of a nested array: follow the first elements down. */
static int infer_shape(const json_t *j, const char *base, int64_t *shape,
                       int *rank, struct srv_err *err)
{
  char ptr[PTR_CAP];
  int64_t n;
  int r = 0;

  snprintf(ptr, sizeof ptr, "%s", base);
  while ((n = arr_len(j)) >= 0) {
    if (r == AB_MAX_DIMS)
      return srv_fail(err, 400, ptr,
                      "%s nests arrays deeper than %d dimensions", base,
                      AB_MAX_DIMS);
    if (n == 0)
      return srv_fail(err, 400, ptr,
                      "%s is an empty array; every dimension must be >= 1",
                      ptr);
    shape[r++] = n;
    j = json_array_get(j, 0);
    srv_codec__pointer_add(ptr, sizeof ptr, "0", 1);
  }
  *rank = r;
  return 0;
}

/* Visit a rectangular nested array of the given shape, storing its
 * numbers in row-major order. */
static int fill_rec(const json_t *j, int d, const int64_t *shape,
                    struct sink *s, struct srv_err *err)
{
  char ptr[PTR_CAP];
  int64_t n = arr_len(j), i;
  double v;

  if (n != shape[d]) {
    elem_pointer(s, d, ptr);
    if (n < 0)
      return srv_fail(err, 400, ptr,
                      "%s is %s, expected an array of %lld elements "
                      "(nested arrays must be rectangular)",
                      ptr, type_name(j), (long long)shape[d]);
    return srv_fail(err, 400, ptr,
                    "%s has %lld elements, expected %lld (nested arrays "
                    "must be rectangular)",
                    ptr, (long long)n, (long long)shape[d]);
  }
  for (i = 0; i < n; i++) {
    const json_t *e = json_array_get(j, (size_t)i);
    s->idx[d] = i;
    if (d + 1 < s->rank) {
      if (fill_rec(e, d + 1, shape, s, err))
        return -1;
      continue;
    }
    if (srv_codec_number(e, &v) != 0) {
      elem_pointer(s, d + 1, ptr);
      if (json_is_array(e))
        return srv_fail(err, 400, ptr,
                        "%s is an array, expected a number (the tensor's "
                        "rows must all be as deep)",
                        ptr);
      if (json_is_string(e))
        return srv_fail(err, 400, ptr,
                        "%s is the string \"%.40s\", expected a number (or "
                        "\"inf\", \"-inf\", \"nan\")",
                        ptr, json_string_value(e));
      return srv_fail(err, 400, ptr, "%s is %s, expected a number", ptr,
                      type_name(e));
    }
    if (put(s, v, err))
      return -1;
  }
  return 0;
}

/* "[2, 3]" for error messages. */
static const char *shape_str(const int64_t *shape, int rank, char *buf,
                             size_t cap)
{
  size_t n = 0;
  int i;

  n += (size_t)snprintf(buf, cap, "[");
  for (i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
                          (long long)shape[i]);
  if (n < cap)
    snprintf(buf + n, cap - n, "]");
  return buf;
}

static int64_t numel_of(const int64_t *shape, int rank)
{
  int64_t n = 1;
  int i;

  for (i = 0; i < rank; i++)
    if (ab_mul_overflow(n, shape[i], &n))
      return -1;
  return n;
}

/* Buffer for n elements of dtype in the arena. */
static void *tensor_buf(struct srv_call *c, int64_t n, int dtype,
                        const char *ptr, struct srv_err *err)
{
  size_t es = ab_dtype_size((enum ab_dtype)dtype);

  if (n < 0 || (uint64_t)n > SIZE_MAX / es) {
    srv_fail(err, 400, ptr, "%s has too many elements", ptr);
    return NULL;
  }
  return srv_codec__alloc(c, (size_t)n * es, ptr, err);
}

static int finish(struct ab_tensor *out, void *buf, int dtype, int rank,
                  const int64_t *shape, const char *ptr, struct srv_err *err)
{
  enum ab_status st =
      ab_tensor_init(out, buf, (enum ab_dtype)dtype, rank, shape);
  if (st != AB_STATUS_OK)
    return srv_fail(err, 400, ptr, "%s: %s", ptr, ab_last_error()->msg);
  return 0;
}

/* Store numbers v[0..n) read beside the tree, of the given shape (they
 * fill it), naming an element by its place in it. */
static int put_all(struct sink *s, const double *v, int64_t n,
                   const int64_t *shape, struct srv_err *err)
{
  int64_t k;
  int d;

  for (k = 0; k < n; k++) {
    int64_t r = k;
    if (put(s, v[k], err) == 0)
      continue;
    /* Refused: again, with the element's place set for the message. */
    for (d = s->rank - 1; d >= 0; d--) {
      s->idx[d] = r % shape[d];
      r /= shape[d];
    }
    return put(s, v[k], err);
  }
  return 0;
}

/* Form 1 read beside the tree: a nested array the codec lifted. */
static int from_lift(struct srv_call *c, const struct srv_codec_lift *l,
                     const char *ptr, int dtype, struct ab_tensor *out,
                     struct srv_err *err)
{
  struct sink s;

  memset(&s, 0, sizeof s);
  s.dtype = dtype;
  s.base = ptr;
  s.rank = l->rank;
  s.buf = tensor_buf(c, l->n, s.dtype, ptr, err);
  if (!s.buf || put_all(&s, l->v, l->n, l->shape, err))
    return -1;
  return finish(out, s.buf, s.dtype, l->rank, l->shape, ptr, err);
}

/* Form 1: a nested array, stored as dtype (float32 unless the caller
 * keeps parameters in float64). */
static int from_nested(struct srv_call *c, const json_t *j, const char *ptr,
                       int dtype, struct ab_tensor *out, struct srv_err *err)
{
  int64_t shape[AB_MAX_DIMS], n;
  struct sink s;
  int rank;

  if (infer_shape(j, ptr, shape, &rank, err))
    return -1;
  n = numel_of(shape, rank);
  memset(&s, 0, sizeof s);
  s.dtype = dtype;
  s.base = ptr;
  s.rank = rank;
  s.buf = tensor_buf(c, n, s.dtype, ptr, err);
  if (!s.buf)
    return -1;
  if (fill_rec(j, 0, shape, &s, err))
    return -1;
  return finish(out, s.buf, s.dtype, rank, shape, ptr, err);
}

/* ======================================================================
 * the object forms
 * ====================================================================== */

static int read_shape(const json_t *js, const char *ptr, int64_t *shape,
                      int *rank, struct srv_err *err)
{
  char sp[PTR_CAP], ep[PTR_CAP], num[24];
  size_t i, n;

  snprintf(sp, sizeof sp, "%s", ptr);
  srv_codec__pointer_add(sp, sizeof sp, "shape", 5);
  if (!js)
    return srv_fail(err, 400, sp,
                    "%s is required with \"data\" or \"b64\" (an array of 1 "
                    "to %d dimensions)",
                    sp, AB_MAX_DIMS);
  if (!json_is_array(js))
    return srv_fail(err, 400, sp, "%s is %s, expected an array of integers",
                    sp, type_name(js));
  n = json_array_size(js);
  if (n < 1 || n > AB_MAX_DIMS)
    return srv_fail(err, 400, sp, "%s has %zu dimensions; 1 to %d are "
                    "supported", sp, n, AB_MAX_DIMS);
  for (i = 0; i < n; i++) {
    const json_t *d = json_array_get(js, i);
    snprintf(ep, sizeof ep, "%s", sp);
    snprintf(num, sizeof num, "%zu", i);
    srv_codec__pointer_add(ep, sizeof ep, num, strlen(num));
    if (!json_is_integer(d))
      return srv_fail(err, 400, ep, "%s is %s, expected an integer", ep,
                      type_name(d));
    if (json_integer_value(d) < 1)
      return srv_fail(err, 400, ep,
                      "%s is %lld; every dimension must be >= 1", ep,
                      (long long)json_integer_value(d));
    shape[i] = (int64_t)json_integer_value(d);
  }
  *rank = (int)n;
  if (numel_of(shape, *rank) < 0)
    return srv_fail(err, 400, sp, "%s: the element count overflows", sp);
  return 0;
}

/* Forms 2 and 3; "data" without a "dtype" is stored as json_dtype. */
static int from_object(struct srv_call *c, const json_t *j, const char *ptr,
                       int json_dtype, struct ab_tensor *out,
                       struct srv_err *err)
{
  const json_t *jd = json_object_get(j, "data"), *jb = json_object_get(j, "b64");
  const json_t *jt = json_object_get(j, "dtype"), *v;
  const struct srv_codec_lift *ld = NULL, *lb = NULL;
  char fp[PTR_CAP];
  int64_t shape[AB_MAX_DIMS], n;
  int rank = 0, dtype;
  const char *key;
  struct sink s;

  /* A long "data" or "b64" was read beside the tree. */
  snprintf(fp, sizeof fp, "%s", ptr);
  srv_codec__pointer_add(fp, sizeof fp, "data", 4);
  if (!jd)
    ld = srv_codec__lift_at(c, fp);
  snprintf(fp, sizeof fp, "%s", ptr);
  srv_codec__pointer_add(fp, sizeof fp, "b64", 3);
  if (!jb)
    lb = srv_codec__lift_at(c, fp);
  dtype = jb || lb ? AB_DTYPE_F32 : json_dtype;

  /* Unknown members are ignored, and reported like unknown fields
   * (X-Attnbias-Ignored). */
  json_object_foreach((json_t *)j, key, v) {
    if (strcmp(key, "data") && strcmp(key, "b64") && strcmp(key, "dtype") &&
        strcmp(key, "shape")) {
      snprintf(fp, sizeof fp, "%s", ptr);
      srv_codec__pointer_add(fp, sizeof fp, key, strlen(key));
      srv_codec_ignore(c, fp);
    }
  }
  if ((jd || ld) && (jb || lb)) {
    snprintf(fp, sizeof fp, "%s", ptr);
    srv_codec__pointer_add(fp, sizeof fp, "b64", 3);
    return srv_fail(err, 400, fp, "%s has both \"data\" and \"b64\"; give "
                    "one of them", ptr);
  }
  if (!jd && !ld && !jb && !lb)
    return srv_fail(err, 400, ptr,
                    "%s is an object without \"data\" or \"b64\"; a tensor is "
                    "a nested array, {\"shape\", \"data\"} or {\"shape\", "
                    "\"dtype\", \"b64\"}",
                    ptr);
  if (jt) {
    snprintf(fp, sizeof fp, "%s", ptr);
    srv_codec__pointer_add(fp, sizeof fp, "dtype", 5);
    dtype = json_is_string(jt) ? ab_dtype_parse(json_string_value(jt)) : -1;
    if (dtype < 0 || dtype == AB_DTYPE_I32)
      return srv_fail(err, 400, fp,
                      "%s is %s%.40s%s; expected \"float32\", \"float64\", "
                      "\"float16\" or \"bfloat16\"",
                      fp, json_is_string(jt) ? "\"" : type_name(jt),
                      json_is_string(jt) ? json_string_value(jt) : "",
                      json_is_string(jt) ? "\"" : "");
  }
  if (read_shape(json_object_get(j, "shape"), ptr, shape, &rank, err))
    return -1;
  n = numel_of(shape, rank);

  memset(&s, 0, sizeof s);
  s.dtype = dtype;
  if (jb || lb) {
    int64_t want, got;
    const char *b;
    size_t blen, bad;
    snprintf(fp, sizeof fp, "%s", ptr);
    srv_codec__pointer_add(fp, sizeof fp, "b64", 3);
    if (!lb && !json_is_string(jb))
      return srv_fail(err, 400, fp, "%s is %s, expected a base64 string",
                      fp, type_name(jb));
    if (n > INT64_MAX / 8)
      return srv_fail(err, 400, fp, "%s: shape has too many elements", fp);
    want = n * (int64_t)ab_dtype_size((enum ab_dtype)dtype); /* no overflow */
    /* A long base64 text is read where it lies in the body. */
    b = lb ? lb->text : json_string_value(jb);
    blen = lb ? lb->len : json_string_length(jb);
    got = srv_codec__b64_decoded_len(b, blen);
    if (got < 0)
      return srv_fail(err, 400, fp,
                      "%s has %zu characters, not a multiple of 4: padded "
                      "base64 (RFC 4648) is expected",
                      fp, blen);
    if (got != want) {
      char ss[96];
      return srv_fail(err, 400, fp,
                      "%s decodes to %lld bytes but shape %s of %s needs "
                      "%lld",
                      fp, (long long)got, shape_str(shape, rank, ss, sizeof ss),
                      ab_dtype_name((enum ab_dtype)dtype), (long long)want);
    }
    s.buf = tensor_buf(c, n, dtype, fp, err);
    if (!s.buf)
      return -1;
    /* Little-endian bytes land in place: this host is little-endian. */
    if (srv_codec__b64_decode(s.buf, b, blen, &bad) != 0)
      return srv_fail(err, 400, fp,
                      "%s has an invalid base64 character at offset %zu", fp,
                      bad);
    return finish(out, s.buf, dtype, rank, shape, ptr, err);
  }

  /* "data": flat (or nested) numbers, count == prod(shape). */
  snprintf(fp, sizeof fp, "%s", ptr);
  srv_codec__pointer_add(fp, sizeof fp, "data", 4);
  {
    int64_t dshape[AB_MAX_DIMS], dn;
    int drank = 1;
    if (ld) {
      dshape[0] = dn = ld->n;
    } else {
      if (arr_len(jd) < 0)
        return srv_fail(err, 400, fp,
                        "%s is %s, expected an array of numbers", fp,
                        type_name(jd));
      if (infer_shape(jd, fp, dshape, &drank, err))
        return -1;
      dn = numel_of(dshape, drank);
    }
    if (dn != n) {
      char ss[96];
      return srv_fail(err, 400, fp,
                      "%s has %lld elements but shape %s needs %lld", fp,
                      (long long)dn, shape_str(shape, rank, ss, sizeof ss),
                      (long long)n);
    }
    s.base = fp;
    s.rank = drank;
    s.buf = tensor_buf(c, n, dtype, fp, err);
    if (!s.buf)
      return -1;
    if (ld ? put_all(&s, ld->v, ld->n, dshape, err)
           : fill_rec(jd, 0, dshape, &s, err))
      return -1;
  }
  return finish(out, s.buf, dtype, rank, shape, ptr, err);
}

/* ======================================================================
 * lookup
 * ====================================================================== */

int srv_codec_tensor(struct srv_call *c, const char *path, int required,
                     struct ab_tensor *out, struct srv_err *err)
{
  return srv_codec_tensor_as(c, path, required, AB_DTYPE_F32, out, err);
}

int srv_codec_tensor_as(struct srv_call *c, const char *path, int required,
                        enum ab_dtype json_dtype, struct ab_tensor *out,
                        struct srv_err *err)
{
  char ptr[PTR_CAP], walked[PTR_CAP];
  const json_t *j = c->in.params;
  const struct srv_codec_lift *l = NULL;
  const char *p = path, *dot;
  int i;

  srv_codec__pointer(ptr, sizeof ptr, path);
  for (i = 0; i < c->in.nbin; i++)
    if (strcmp(c->in.bin[i].name, path) == 0)
      break;
  walked[0] = '\0';
  while (j && *p) {
    size_t n;
    dot = strchr(p, '.');
    n = dot ? (size_t)(dot - p) : strlen(p);
    if (json_is_object(j)) {
      j = json_object_getn(j, p, n);
    } else if (json_is_array(j)) {
      size_t k, idx = 0;
      for (k = 0; k < n && p[k] >= '0' && p[k] <= '9' && idx < (1u << 30); k++)
        idx = idx * 10 + (size_t)(p[k] - '0');
      j = k == n && n > 0 ? json_array_get(j, idx) : NULL;
    } else if (i < c->in.nbin) {
      j = NULL; /* the params hold no such member: the binary one it is */
    } else {
      return srv_fail(err, 400, walked, "%s is %s, expected an object",
                      walked, type_name(j));
    }
    srv_codec__pointer_add(walked, sizeof walked, p, n);
    p = dot ? dot + 1 : p + n;
  }
  /* A nested array read beside the tree. */
  if (!j && !*p)
    l = srv_codec__lift_at(c, ptr);
  if (i < c->in.nbin) {
    /* One value per field: a tensor in the safetensors data and the same
     * field in __metadata__ params would leave one of them unused. */
    if ((j && !json_is_null(j)) || l)
      return srv_fail(err, 400, ptr,
                      "%s is given twice: as the safetensors tensor \"%s\" "
                      "and in __metadata__ params; send one",
                      ptr, path);
    *out = c->in.bin[i].t;
    return 1;
  }
  memset(out, 0, sizeof *out);
  if (l)
    return from_lift(c, l, ptr, (int)json_dtype, out, err) ? -1 : 1;
  if (!j || json_is_null(j)) {
    if (required)
      return srv_fail(err, 400, ptr, "%s is required (a tensor)", ptr);
    return 0;
  }
  if (json_is_array(j))
    return from_nested(c, j, ptr, (int)json_dtype, out, err) ? -1 : 1;
  if (json_is_object(j))
    return from_object(c, j, ptr, (int)json_dtype, out, err) ? -1 : 1;
  return srv_fail(err, 400, ptr,
                  "%s is %s; a tensor is a nested array of numbers, "
                  "{\"shape\", \"data\"} or {\"shape\", \"dtype\", \"b64\"}",
                  ptr, type_name(j));
}
