/* fuzz-number.c: numbers as text, both ways -- the float32 and float64
 * formatters of JSON answers and the JSON number reader of requests.
 *
 * Input: byte 0 (bits 0-1) chooses what the rest is.
 *   0  float32 values (4 bytes each, every bit pattern);
 *   1  float64 values (8 bytes each): each formatted text
 *        - reads back bit-exactly (strtof/strtod; float64 also through the
 *          codec's own reader, float32 also through a double, as a JSON
 *          library then a cast to float32 reads it), NaN as "nan" and the
 *          infinities as "inf"/"-inf" (JSON strings);
 *        - is JSON that jansson reads as the same value, and fits the
 *          per-number room the budgets count (SRV_JSON_TXT_F32/F64);
 *        - is shortest: no more significant digits than the printf
 *          reference (first of 1..9 / 1..17 digits that reads back), and
 *          the same digits when as many;
 *   2  a number token: the codec's reader (srv_codec__parse_number)
 *      accepts it exactly when jansson does, with the same value bits;
 *   3  the elements of a tensor's "data" array, its dtype in bits 2-3
 *      (float32, float64, float16, bfloat16): the pre-scan's fast path
 *      (arrays of 64 numbers or more read without jansson) gives the same
 *      tensor, or the same error, as jansson's tree, and each element is
 *      jansson's number rounded once to the dtype. */
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec-internal.h"

/* The significant digits of a formatted number, without leading and
 * trailing zeros ("1.25e-3" -> "125", "100" -> "1", "0" -> ""). */
static size_t sig_digits(const char *t, size_t n, char *out)
{
  size_t i, k = 0;

  for (i = 0; i < n && t[i] != 'e'; i++)
    if (t[i] >= '0' && t[i] <= '9' && (k || t[i] != '0'))
      out[k++] = t[i];
  while (k && out[k - 1] == '0')
    k--;
  out[k] = '\0';
  return k;
}

/* The text as a C string, and whether it is one of the non-finite JSON
 * strings; returns the value strtod reads, NaN for "nan". */
static double read_back(const char *t, size_t n, char *s, int *quoted)
{
  memcpy(s, t, n);
  s[n] = '\0';
  *quoted = n >= 2 && s[0] == '"';
  if (*quoted) {
    if (strcmp(s, "\"nan\"") == 0)
      return NAN;
    if (strcmp(s, "\"inf\"") == 0)
      return INFINITY;
    FUZZ_CHECK(strcmp(s, "\"-inf\"") == 0, "unexpected string %s", s);
    return -INFINITY;
  }
  return strtod(s, NULL);
}

/* jansson's reading of a formatted number (a number, or for the
 * non-finite ones the string): its value, as a double. */
static double json_value(const char *t, size_t n, int quoted)
{
  json_error_t je;
  json_t *j = json_loadb(t, n, JSON_DECODE_ANY, &je);
  double v;

  FUZZ_CHECK(j != NULL, "%.*s is not JSON: %s", (int)n, t, je.text);
  FUZZ_CHECK(quoted ? json_is_string(j) : json_is_number(j),
             "%.*s: wrong JSON type", (int)n, t);
  FUZZ_CHECK(srv_codec_number(j, &v) == 0, "%.*s: not a number", (int)n, t);
  json_decref(j);
  return v;
}

static void check_shortest(const char *t, size_t n, const char *ref,
                           size_t rn)
{
  char a[32], b[32];
  size_t na = sig_digits(t, n, a), nb = sig_digits(ref, rn, b);

  FUZZ_CHECK(na < nb || (na == nb && strcmp(a, b) == 0),
             "%.*s is not the shortest nearest text (printf: %.*s)", (int)n,
             t, (int)rn, ref);
}

static void check_f32(float v)
{
  char t[32], ref[32], s[32];
  size_t n = srv_codec_fmt_f32(t, v), rn;
  int quoted;
  double d;
  float back;

  FUZZ_CHECK(n + 1 <= SRV_JSON_TXT_F32, "%zu bytes for a float32", n);
  d = read_back(t, n, s, &quoted);
  back = quoted ? (float)d : strtof(s, NULL);
  FUZZ_CHECK(memcmp(&back, &v, 4) == 0 || (isnan(back) && isnan(v)),
             "float32 %a written %s reads back as %a", (double)v, s,
             (double)back);
  /* Through a double, then float32: strtod's and jansson's double. */
  back = (float)d;
  FUZZ_CHECK(memcmp(&back, &v, 4) == 0 || (isnan(back) && isnan(v)),
             "float32 %a written %s reads as %a through a double", (double)v,
             s, (double)back);
  back = (float)json_value(t, n, quoted);
  FUZZ_CHECK(memcmp(&back, &v, 4) == 0 || (isnan(back) && isnan(v)),
             "float32 %a written %s: jansson then float32 give %a",
             (double)v, s, (double)back);
  if (!quoted) {
    rn = srv_codec__fmt_f32_simple(ref, v);
    check_shortest(t, n, ref, rn);
  }
}

static void check_f64(double v)
{
  char t[32], ref[32], s[32];
  size_t n = srv_codec__fmt_f64(t, v), rn;
  int quoted;
  double back, own;

  FUZZ_CHECK(n + 1 <= SRV_JSON_TXT_F64, "%zu bytes for a float64", n);
  back = read_back(t, n, s, &quoted);
  FUZZ_CHECK(memcmp(&back, &v, 8) == 0 || (isnan(back) && isnan(v)),
             "float64 %a written %s reads back as %a", v, s, back);
  if (!quoted) {
    FUZZ_CHECK(srv_codec__parse_number(t, n, &own) == 0 &&
                   memcmp(&own, &v, 8) == 0,
               "float64 %a written %s: the codec's reader gives %a", v, s,
               own);
    rn = srv_codec__fmt_f64_simple(ref, v);
    check_shortest(t, n, ref, rn);
  }
  own = json_value(t, n, quoted);
  FUZZ_CHECK(memcmp(&own, &v, 8) == 0 || (isnan(own) && isnan(v)),
             "float64 %a written %s: jansson gives %a", v, s, own);
}

/* Bytes that may make up a JSON number token (and nothing else jansson
 * would skip, such as whitespace). */
static int token_bytes(const uint8_t *p, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (!strchr("0123456789+-.eE", p[i]) || !p[i])
      return 0;
  return 1;
}

static void check_token(const uint8_t *p, size_t n)
{
  char *s = malloc(n ? n : 1);
  json_error_t je;
  json_t *j;
  double v = 0, w;
  int r;

  FUZZ_CHECK(s != NULL, "out of memory");
  memcpy(s, p, n);
  r = srv_codec__parse_number(s, n, &v);
  j = json_loadb(s, n, JSON_DECODE_ANY, &je);
  FUZZ_CHECK(!j || json_is_number(j), "%.*s: jansson reads a non-number",
             (int)n, s);
  FUZZ_CHECK((r == 0) == (j != NULL), "%.*s: jansson %s, the codec %s",
             (int)n, s, j ? "accepts" : "refuses", r ? "refuses" : "accepts");
  if (j) {
    w = json_number_value(j);
    FUZZ_CHECK(memcmp(&v, &w, 8) == 0, "%.*s: jansson %a, the codec %a",
               (int)n, s, w, v);
    json_decref(j);
  }
  free(s);
}

/* The element a tensor of dtype must hold for the double v (read from the
 * JSON text): v rounded once, to nearest; 0 when it is not. */
static int holds(int dtype, const void *data, int64_t k, double v)
{
  float f;
  double d;
  uint16_t h;

  switch (dtype) {
  case AB_DTYPE_F64:
    memcpy(&d, (const double *)data + k, 8);
    return memcmp(&d, &v, 8) == 0 || (isnan(d) && isnan(v));
  case AB_DTYPE_F32:
    memcpy(&f, (const float *)data + k, 4);
    return (f == (float)v && signbit(f) == signbit(v)) ||
           (isnan(f) && isnan(v));
  default:
    memcpy(&h, (const uint16_t *)data + k, 2);
    return fuzz_is_nearest(dtype, v, h);
  }
}

/* The numbers of j (nested arrays in row-major order: "data" may nest
 * when the count matches) against the elements of t from *k on. */
static void check_leaves(const json_t *j, int dtype, const struct ab_tensor *t,
                         int64_t *k)
{
  double v;
  size_t i;

  if (json_is_array(j)) {
    for (i = 0; i < json_array_size(j); i++)
      check_leaves(json_array_get(j, i), dtype, t, k);
    return;
  }
  FUZZ_CHECK(srv_codec_number(j, &v) == 0, "element %lld is not a number",
             (long long)*k);
  FUZZ_CHECK(*k < ab_tensor_numel(t), "more numbers than elements");
  FUZZ_CHECK(holds(dtype, t->data, *k, v),
             "element %lld: %.17g is not stored as %s rounded once",
             (long long)*k, v, ab_dtype_name((enum ab_dtype)dtype));
  (*k)++;
}

/* {"t": {"dtype": D, "data": [elements], "shape": [n]}} (n: the commas +
 * 1) read with the pre-scan lifting number arrays out of the text, and
 * without (a text parsed for no call), both through srv_codec_tensor: the
 * same tensor or the same error, word for word; and each element the
 * number jansson read, rounded once to the dtype. */
static void check_tensor(const uint8_t *p, size_t n, int dtype)
{
  char head[96], tail[48];
  size_t hl, tl, i, commas = 0;
  char *text;
  struct srv_call c[2];
  struct srv_err err[2];
  struct ab_tensor t[2];
  int r[2], k;

  for (i = 0; i < n; i++)
    commas += p[i] == ',';
  hl = (size_t)snprintf(head, sizeof head, "{\"t\":{\"dtype\":\"%s\",\"data\":[",
                        ab_dtype_name((enum ab_dtype)dtype));
  tl = (size_t)snprintf(tail, sizeof tail, "],\"shape\":[%zu]}}", commas + 1);
  text = malloc(hl + n + tl);
  FUZZ_CHECK(text != NULL, "out of memory");
  memcpy(text, head, hl);
  memcpy(text + hl, p, n);
  memcpy(text + hl + n, tail, tl);
  for (k = 0; k < 2; k++) {
    fuzz_call_init(&c[k], NULL, (size_t)64 << 20, 0);
    c[k].req.body = text;
    c[k].req.body_len = hl + n + tl;
    memset(&err[k], 0, sizeof err[k]);
    c[k].in.params = srv_codec__parse_object(
        k ? NULL : &c[k], text, c[k].req.body_len, "the request body", &err[k]);
    r[k] =
        c[k].in.params ? srv_codec_tensor(&c[k], "t", 1, &t[k], &err[k]) : -1;
  }
  FUZZ_CHECK(r[0] == r[1], "fast path %d, jansson %d (%s | %s)", r[0], r[1],
             err[0].detail, err[1].detail);
  if (r[0] == 1) {
    const json_t *arr =
        json_object_get(json_object_get(c[1].in.params, "t"), "data");
    int64_t m = ab_tensor_numel(&t[0]), e;
    size_t es = ab_dtype_size((enum ab_dtype)t[0].dtype);
    FUZZ_CHECK(m == ab_tensor_numel(&t[1]) && t[0].dtype == t[1].dtype &&
                   memcmp(t[0].data, t[1].data, (size_t)m * es) == 0,
               "the fast path reads other values than jansson");
    e = 0;
    check_leaves(arr, dtype, &t[0], &e);
    FUZZ_CHECK(t[0].dtype == dtype && e == m,
               "a %s tensor of %lld elements from %lld numbers",
               ab_dtype_name((enum ab_dtype)t[0].dtype), (long long)m,
               (long long)e);
  } else {
    FUZZ_CHECK(err[0].http == err[1].http &&
                   strcmp(err[0].field, err[1].field) == 0 &&
                   strcmp(err[0].detail, err[1].detail) == 0,
               "errors differ: %d %s %s | %d %s %s", err[0].http,
               err[0].field, err[0].detail, err[1].http, err[1].field,
               err[1].detail);
  }
  for (k = 0; k < 2; k++)
    fuzz_call_free(&c[k]);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  size_t i;

  if (!size)
    return 0;
  switch (data[0] & 3) {
  case 0:
    for (i = 1; i + 4 <= size; i += 4) {
      float v;
      memcpy(&v, data + i, 4);
      check_f32(v);
    }
    break;
  case 1:
    for (i = 1; i + 8 <= size; i += 8) {
      double v;
      memcpy(&v, data + i, 8);
      check_f64(v);
    }
    break;
  case 2:
    if (token_bytes(data + 1, size - 1))
      check_token(data + 1, size - 1);
    break;
  default: {
    static const int dtypes[4] = {AB_DTYPE_F32, AB_DTYPE_F64, AB_DTYPE_F16,
                                  AB_DTYPE_BF16};
    check_tensor(data + 1, size - 1, dtypes[(data[0] >> 2) & 3]);
    break;
  }
  }
  return 0;
}
