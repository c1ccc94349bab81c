/* test-codec-num.c: numbers -- srv_codec_fmt_f32 against strtof and the
 * printf-based reference formatter (random floats, every binade edge,
 * special values), the JSON number reader against jansson itself, and the
 * fast "data" path against the plain jansson path (same values, same
 * errors, same positions). */
#include "call/call.h"
#include "codec/codec-internal.h"
#include "srv.h"
#include "test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void call_init(struct srv_call *c, const char *body, size_t len)
{
  srv_call_init(c, NULL);
  c->req.content_type = "application/json";
  c->req.body = body;
  c->req.body_len = len;
}

static void call_free(struct srv_call *c)
{
  srv_call_release(c);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

/* ---- formatting ------------------------------------------------------------ */

static const char *fmt(float v, char *buf)
{
  size_t n = srv_codec_fmt_f32(buf, v);
  buf[n] = '\0';
  return buf;
}

TEST(fmt_f32_special_values)
{
  static const struct {
    float v;
    const char *s;
  } cases[] = {
      {0.0f, "0"},
      {-0.0f, "-0.0"}, /* "-0" is the integer 0 to JSON readers */
      {1.0f, "1"},
      {-1.0f, "-1"},
      {0.1f, "0.1"},
      {-2.5f, "-2.5"},
      {100.0f, "100"},
      {1000.0f, "1e3"},  /* shorter than 1000 */
      {0.001f, "1e-3"},  /* shorter than 0.001 */
      {0.01f, "0.01"},   /* a tie goes to plain notation */
      {123456.0f, "123456"},
      {1e10f, "1e10"},
      {1.5e-7f, "1.5e-7"},
      {16777216.0f, "16777216"},
      {3.4028235e38f, "3.4028235e38"}, /* FLT_MAX */
      {1.17549435e-38f, "1.1754944e-38"}, /* FLT_MIN */
      {1.4e-45f, "1e-45"}, /* smallest subnormal */
      {0.3f, "0.3"},
      {2.0f / 3.0f, "0.6666667"},
      {(float)M_PI, "3.1415927"},
      {INFINITY, "\"inf\""},
      {-INFINITY, "\"-inf\""},
      {NAN, "\"nan\""},
  };
  char buf[32];
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK_STR(fmt(cases[i].v, buf), cases[i].s);
  return 0;
}

/* Significant digits of a formatted number. */
static int digits(const char *s)
{
  int n = 0, started = 0;

  for (; *s && *s != 'e'; s++) {
    if (*s >= '1' && *s <= '9')
      started = 1;
    if (started && *s >= '0' && *s <= '9')
      n++;
  }
  /* (Both texts come from the same writer, so "100" counts alike.) */
  return n;
}

/* Ours (a, na bytes) against the printf reference b for the value with
 * these bits: no longer than max_len, never more digits, the same text
 * with as many. */
static int against_reference(const char *a, size_t na, size_t max_len,
                             const char *b, uint64_t bits)
{
  if (na > max_len || digits(a) > digits(b) ||
      (digits(a) == digits(b) && strcmp(a, b) != 0)) {
    fprintf(stderr, "  %llx: \"%s\", reference \"%s\"\n",
            (unsigned long long)bits, a, b);
    return 1;
  }
  return 0;
}

/* Round trip through strtof, and compared with the reference formatter,
 * which tries 1..9 digits with printf and keeps the first that reads back.
 * With as many digits, the text must be the same (the nearest).  Ours may
 * be shorter only where the correctly rounded decimal falls just outside
 * the narrower lower half-interval of a power of two while a neighbour of
 * it is inside (2^-96: 1.2621775e-29 against 1.26217745e-29). */
static int check_one(uint32_t bits)
{
  char a[32], b[32];
  float v, r;
  size_t na, nb;

  memcpy(&v, &bits, 4);
  if (!isfinite(v))
    return 0;
  na = srv_codec_fmt_f32(a, v);
  a[na] = '\0';
  nb = srv_codec__fmt_f32_simple(b, v);
  b[nb] = '\0';
  r = strtof(a, NULL);
  if (memcmp(&r, &v, 4) != 0) {
    fprintf(stderr, "  %08x: \"%s\" reads back as %.9g\n", bits, a,
            (double)r);
    return 1;
  }
  return against_reference(a, na, 15, b, bits);
}

TEST(fmt_f32_random_round_trip)
{
  int i;

  for (i = 0; i < 200000; i++)
    if (check_one((uint32_t)rnd()))
      return 1;
  return 0;
}

TEST(fmt_f32_binade_edges)
{
  uint32_t e, s, d;

  /* Both ends of every binade (the asymmetric interval at powers of two)
   * and their neighbours, both signs; subnormals included. */
  for (s = 0; s < 2; s++)
    for (e = 0; e < 255; e++)
      for (d = 0; d < 4; d++) {
        uint32_t m = d == 0 ? 0 : d == 1 ? 1 : d == 2 ? 0x7fffff : 0x400000;
        if (check_one(s << 31 | e << 23 | m))
          return 1;
      }
  /* Small integers and short decimals, where exact trailing zeros matter. */
  for (d = 0; d < 20000; d++) {
    float v = (float)d, w = (float)d / 1000.0f;
    uint32_t b1, b2;
    memcpy(&b1, &v, 4);
    memcpy(&b2, &w, 4);
    if (check_one(b1) || check_one(b2))
      return 1;
  }
  return 0;
}

/* The same comparison for doubles: round trip through strtod, never more
 * digits than the printf reference (1..17 digits), the same text with as
 * many. */
static int check_one64(uint64_t bits)
{
  char a[40], b[48];
  double v, r;
  size_t na, nb;

  memcpy(&v, &bits, 8);
  if (!isfinite(v))
    return 0;
  na = srv_codec__fmt_f64(a, v);
  a[na] = '\0';
  nb = srv_codec__fmt_f64_simple(b, v);
  b[nb] = '\0';
  r = strtod(a, NULL);
  if (memcmp(&r, &v, 8) != 0) {
    fprintf(stderr, "  %016llx: \"%s\" reads back as %.17g\n",
            (unsigned long long)bits, a, r);
    return 1;
  }
  return against_reference(a, na, 24, b, bits);
}

TEST(fmt_f64_special_values)
{
  static const struct {
    double v;
    const char *s;
  } cases[] = {
      {0.0, "0"},
      {-0.0, "-0.0"},
      {1.0, "1"},
      {1.25, "1.25"},
      {0.1, "0.1"},
      {0.3, "0.3"},
      {0.1 + 0.2, "0.30000000000000004"},
      {1.0 / 3.0, "0.3333333333333333"},
      {2.0 / 3.0, "0.6666666666666666"},
      {M_PI, "3.141592653589793"},
      {-2.5, "-2.5"},
      {1000.0, "1e3"},
      {0.01, "0.01"},
      {123456789012345680.0, "123456789012345680"}, /* plain: shorter */
      {1.2345678901234568e-17, "1.2345678901234568e-17"},
      {9007199254740992.0, "9007199254740992"}, /* 2^53 */
      {9007199254740993.0, "9007199254740992"}, /* rounds to 2^53 */
      /* Whole numbers past INT64_MAX would be JSON integers that jansson
       * (and this server) refuse: exponent notation, though longer. */
      {9223372036854774784.0, "9223372036854775000"}, /* fits int64 */
      {-9223372036854774784.0, "-9223372036854775000"},
      {9223372036854775808.0, "9.223372036854776e18"}, /* 2^63 */
      {-9223372036854775808.0, "-9.223372036854776e18"},
      {9999999999999997952.0, "9.999999999999998e18"},
      {1.2345678901234567e19, "1.2345678901234567e19"},
      {1e23, "1e23"},
      {5e-324, "5e-324"},                  /* smallest subnormal */
      {1e-323, "1e-323"},
      {2.2250738585072014e-308, "2.2250738585072014e-308"}, /* DBL_MIN */
      {2.225073858507201e-308, "2.225073858507201e-308"}, /* largest subn. */
      {1.7976931348623157e308, "1.7976931348623157e308"}, /* DBL_MAX */
      {(double)0.1f, "0.10000000149011612"},
      {INFINITY, "\"inf\""},
      {-INFINITY, "\"-inf\""},
      {NAN, "\"nan\""},
  };
  char buf[40];
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    buf[srv_codec__fmt_f64(buf, cases[i].v)] = '\0';
    CHECK_STR(buf, cases[i].s);
  }
  return 0;
}

TEST(fmt_f64_random_round_trip)
{
  int i;

  /* Random bit patterns (every exponent alike), then random values near
   * 1 (every fraction bit alike, the values attention writes). */
  for (i = 0; i < 60000; i++)
    if (check_one64(rnd()))
      return 1;
  for (i = 0; i < 30000; i++) {
    uint64_t bits = 0x3fe0000000000000ull | (rnd() >> 12);
    if (check_one64(bits) || check_one64(bits ^ 1ull << 63))
      return 1;
  }
  return 0;
}

TEST(fmt_f64_binade_edges)
{
  uint64_t e, s, d;

  /* Both ends of every binade and their neighbours, subnormals and the
   * smallest ones (tiny fractions) included. */
  for (s = 0; s < 2; s++)
    for (e = 0; e < 2047; e++)
      for (d = 0; d < 6; d++) {
        const uint64_t fr = (1ull << 52) - 1;
        uint64_t m = d == 0 ? 0 : d == 1 ? 1 : d == 2 ? fr
                   : d == 3 ? 1ull << 51 : d == 4 ? 2 : fr - 1;
        if (check_one64(s << 63 | e << 52 | m))
          return 1;
      }
  for (d = 1; d < 2000; d++)
    if (check_one64(d))
      return 1;
  /* Integers and short decimals, where exact trailing zeros matter. */
  for (d = 0; d < 20000; d++) {
    double v = (double)d, w = (double)d / 1000.0, x = (double)d * 1e20;
    uint64_t b1, b2, b3;
    memcpy(&b1, &v, 8);
    memcpy(&b2, &w, 8);
    memcpy(&b3, &x, 8);
    if (check_one64(b1) || check_one64(b2) || check_one64(b3))
      return 1;
  }
  return 0;
}

/* What a JSON client reads back from a formatted number: jansson (which,
 * like Python's json, reads a number without fraction or exponent as an
 * integer) must give the same bits, and so must this server's own reader
 * -- the numbers of an answer can be sent back.  Found by fuzz-number:
 * -0 became +0, and whole float64 numbers past INT64_MAX were written as
 * integers that neither reader accepts. */
static int json_reads_back(double v, int f32)
{
  char t[40];
  size_t n = f32 ? srv_codec_fmt_f32(t, (float)v) : srv_codec__fmt_f64(t, v);
  json_error_t je;
  json_t *j = json_loadb(t, n, JSON_DECODE_ANY, &je);
  double got = j ? json_number_value(j) : NAN, own = NAN;
  int ok = j && json_is_number(j) &&
           srv_codec__parse_number(t, n, &own) == 0 &&
           (f32 ? (float)got == (float)v && signbit(got) == signbit(v)
                : memcmp(&got, &v, 8) == 0 && memcmp(&own, &v, 8) == 0);

  if (!ok)
    fprintf(stderr, "  %s %.17g written %.*s: jansson %s %.17g, own %.17g\n",
            f32 ? "float32" : "float64", v, (int)n, t, j ? "" : je.text,
            got, own);
  json_decref(j);
  return ok;
}

TEST(fmt_whole_numbers_read_back_as_json)
{
  static const double edges[] = {0.0, -0.0, 9223372036854774784.0,
                                 9223372036854775808.0,
                                 9999999999999997952.0,
                                 1.2345678901234567e19, 18446744073709551616.0};
  double p;
  size_t i;
  int s;

  for (i = 0; i < sizeof edges / sizeof edges[0]; i++)
    for (s = 0; s < 2; s++) {
      CHECK(json_reads_back(s ? -edges[i] : edges[i], 0));
      CHECK(json_reads_back(s ? -edges[i] : edges[i], 1));
    }
  /* Every power of two and of ten a whole number may be written plainly
   * near, and its neighbours. */
  for (p = 1; p < 1e25; p *= 2) {
    const double nb[3] = {nextafter(p, 0), p, nextafter(p, INFINITY)};
    const float nbf[3] = {nextafterf((float)p, 0), (float)p,
                          nextafterf((float)p, INFINITY)};
    for (s = 0; s < 3; s++) {
      CHECK(json_reads_back(nb[s], 0));
      CHECK(json_reads_back(-nb[s], 0));
      CHECK(json_reads_back(nbf[s], 1));
      CHECK(json_reads_back(-nbf[s], 1));
    }
  }
  for (p = 1; p < 1e25; p *= 10) {
    const double nb[3] = {nextafter(p, 0), p, nextafter(p, INFINITY)};
    for (s = 0; s < 3; s++)
      CHECK(json_reads_back(nb[s], 0));
  }
  return 0;
}

TEST(fmt_f64_exponent_formulas)
{
  /* The formatter's fixed-point floor(log10(2^e)) and floor(log10(3/4 *
   * 2^e)) over every binary exponent of a double, against long double
   * logarithms (no e in range puts either within 1e-9 of an integer, far
   * above the long double error). */
  int e;

  for (e = -1100; e <= 1100; e++) {
    long double a = (long double)e * log10l(2.0L),
                b = a + log10l(0.75L);
    CHECK(fabsl(a - roundl(a)) > 1e-9L || e == 0);
    CHECK(fabsl(b - roundl(b)) > 1e-9L);
    CHECK_EQ_I64(srv_codec__floor_log10_pow2(e, 0), (int64_t)floorl(a));
    CHECK_EQ_I64(srv_codec__floor_log10_pow2(e, 1), (int64_t)floorl(b));
  }
  return 0;
}

/* ---- reading numbers ------------------------------------------------------- */

/* jansson's verdict on one token: 0 and *v, or -1 when it rejects it. */
static int jansson_number(const char *tok, double *v)
{
  char text[600];
  json_t *j;

  snprintf(text, sizeof text, "[%s]", tok);
  j = json_loads(text, 0, NULL);
  if (!j)
    return -1;
  if (!json_is_number(json_array_get(j, 0)) || json_array_size(j) != 1) {
    json_decref(j);
    return -1;
  }
  *v = json_number_value(json_array_get(j, 0));
  json_decref(j);
  return 0;
}

static int same_as_jansson(const char *tok)
{
  double a = 0, b = 0;
  int ra = srv_codec__parse_number(tok, strlen(tok), &a);
  int rb = jansson_number(tok, &b);

  if (ra != rb || (ra == 0 && memcmp(&a, &b, 8) != 0)) {
    fprintf(stderr, "  \"%s\": ours %d %.17g, jansson %d %.17g\n", tok, ra, a,
            rb, b);
    return 1;
  }
  return 0;
}

TEST(parse_number_matches_jansson)
{
  static const char *toks[] = {
      "0", "-0", "0.0", "-0.0", "1", "-1", "1.5", "1e3", "1E3", "1e+3",
      "1e-3", "0.1", "0.30000000000000004", "123456789012345678",
      "9223372036854775807", "9223372036854775808", "-9223372036854775808",
      "-9223372036854775809", "12345678901234567890123", "1e308", "1e309",
      "-1e309", "1e-400", "4.9e-324", "2.2250738585072011e-308",
      "179769313486231580793728971405303415079934132710037826936173778980444"
      "968292764750946649017977587207096330286416692887910946555547851940402"
      "630657488671505820681908902000708383676273854845817711531764475730270"
      "069855571366959622842914819860834936475292719074168444365510704342711"
      "559699508093042880177904174497791",
      "0.000000000000000000000000000000000000000000001e45",
      "3.4028235e38", "1.17549435e-38", "1.4e-45", "0.1000000000000000055511",
      "01", "1.", ".5", "-", "+1", "1e", "1e+", "--1", "1.5e3.2", "",
      "0x10", "Infinity", "NaN", "1.0e0000000000000000000000000000000001",
      "100000000000000000000000000000000000000000000000000000000000000000",
  };
  size_t i;
  char tok[64];

  for (i = 0; i < sizeof toks / sizeof toks[0]; i++)
    if (same_as_jansson(toks[i]))
      FAIL_AT("token %zu differs", i);
  for (i = 0; i < 30000; i++) {
    uint64_t bits = rnd();
    double v;
    memcpy(&v, &bits, 8);
    if (!isfinite(v))
      continue;
    switch (i % 5) {
    case 0: snprintf(tok, sizeof tok, "%.17g", v); break;
    case 1: snprintf(tok, sizeof tok, "%.9g", (double)(float)v); break;
    case 2: snprintf(tok, sizeof tok, "%.3e", v); break;
    case 3: snprintf(tok, sizeof tok, "%lld", (long long)bits); break;
    default:
      tok[srv_codec_fmt_f32(tok, (float)test_uniform(-10, 10))] = '\0';
      break;
    }
    if (same_as_jansson(tok))
      FAIL_AT("random token %zu differs", i);
  }
  return 0;
}

/* ---- the fast "data" path ---------------------------------------------------- */

/* A body with the same numbers twice: as {"shape","data"} under "x" (the
 * fast path) and as a nested array under "q" (the jansson path). */
static char *two_forms(int n, float *want, size_t *len)
{
  size_t cap = (size_t)n * 64 + 256, at = 0;
  char *s = malloc(cap), *toks = malloc((size_t)n * 32);
  int i;

  at += (size_t)sprintf(s, "{\"x\": {\"shape\": [%d], \"data\": [\n", n);
  for (i = 0; i < n; i++) {
    char *t = toks + (size_t)i * 32;
    uint64_t r = rnd();
    switch (r % 7) {
    case 0: sprintf(t, "%d", (int)(r >> 40) - (1 << 22)); break;
    case 1: sprintf(t, "%.9g", test_uniform(-1, 1)); break;
    case 2: sprintf(t, "%.17g", test_uniform(-1e6, 1e6)); break;
    case 3: sprintf(t, "%.4e", test_uniform(-1, 1) * 1e-30); break;
    case 4: sprintf(t, "\"-inf\""); break;
    case 5: sprintf(t, "%.6E", test_uniform(0, 1) * 1e30); break;
    default: sprintf(t, "-0.0"); break;
    }
    want[i] = t[0] == '"' ? -INFINITY : (float)strtod(t, NULL);
    at += (size_t)sprintf(s + at, "%s%s", i ? (i % 10 ? ", " : ",\n") : "",
                          t);
  }
  at += (size_t)sprintf(s + at, "]}, \"q\": [");
  for (i = 0; i < n; i++)
    at += (size_t)sprintf(s + at, "%s%s", i ? "," : "", toks + (size_t)i * 32);
  at += (size_t)sprintf(s + at, "]}");
  free(toks);
  *len = at;
  return s;
}

TEST(data_fast_path_same_values)
{
  enum { N = 3000 };
  static float want[N];
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor tx, tq;
  size_t len;
  char *body = two_forms(N, want, &len);
  int i;

  call_init(&c, body, len);
  if (srv_codec_decode_request(&c, &err))
    FAIL_AT("decode: %s", err.detail);
  /* The "data" array was lifted out of jansson's way. */
  CHECK(c.in.codec != NULL);
  CHECK_EQ_I64(((struct srv_codec_state *)c.in.codec)->nlifts, 1);
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &tx, &err), 1);
  CHECK_EQ_I64(srv_codec_tensor(&c, "q", 1, &tq, &err), 1);
  CHECK_EQ_I64(tx.shape[0], N);
  CHECK_EQ_I64(tq.shape[0], N);
  for (i = 0; i < N; i++) {
    float a = ((float *)tx.data)[i], b = ((float *)tq.data)[i];
    if (memcmp(&a, &want[i], 4) || memcmp(&b, &want[i], 4))
      FAIL_AT("element %d: fast %.9g, jansson %.9g, strtod %.9g", i,
              (double)a, (double)b, (double)want[i]);
  }
  call_free(&c);
  free(body);
  return 0;
}

TEST(data_fast_path_beside_a_nul_escape)
{
  char body[2048];
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  int n = 0, i;

  /* Text that spells "\u0000" does not matter to lifting: the lifted
   * member is left out of the tree, not replaced by anything a request
   * could also write. */
  n += sprintf(body, "{\"note\": \"\\\\u0000\", \"x\": {\"shape\": [100], "
                     "\"data\": [");
  for (i = 0; i < 100; i++)
    n += sprintf(body + n, "%s%d", i ? "," : "", i);
  sprintf(body + n, "]}}");
  call_init(&c, body, strlen(body));
  CHECK_EQ_I64(srv_codec_decode_request(&c, &err), 0);
  CHECK(c.in.codec != NULL);
  CHECK_STR(json_string_value(json_object_get(c.in.params, "note")), "\\u0000");
  CHECK(json_object_get(json_object_get(c.in.params, "x"), "data") == NULL);
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), 1);
  CHECK(((float *)t.data)[99] == 99.0f);
  call_free(&c);
  return 0;
}

TEST(data_fast_path_errors)
{
  char body[4096];
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  json_error_t je;
  json_t *direct;
  char where[64];
  int n, i;

  /* A value out of float32 range, found on the fast path, named by index. */
  n = sprintf(body, "{\"x\": {\"shape\": [100], \"data\": [");
  for (i = 0; i < 100; i++)
    n += sprintf(body + n, "%s%s", i ? "," : "", i == 17 ? "1e39" : "1");
  sprintf(body + n, "]}}");
  call_init(&c, body, strlen(body));
  CHECK_EQ_I64(srv_codec_decode_request(&c, &err), 0);
  CHECK(c.in.codec != NULL);
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), -1);
  CHECK_STR(err.field, "/x/data/17");
  call_free(&c);

  /* Count mismatch. */
  sprintf(body + n, "]}}");
  body[strstr(body, "[100]") - body + 1] = '9'; /* shape [900] */
  call_init(&c, body, strlen(body));
  CHECK_EQ_I64(srv_codec_decode_request(&c, &err), 0);
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), -1);
  CHECK_STR(err.field, "/x/data");
  call_free(&c);

  /* A syntax error after a lifted array: same byte offset as jansson
   * reports for the untouched text. */
  n = sprintf(body, "{\"a\": {\"shape\": [100], \"data\": [");
  for (i = 0; i < 100; i++)
    n += sprintf(body + n, "%s%d.5", i ? ", " : "", i);
  n += sprintf(body + n, "]},\n \"b\": {\"data\": [1, 2, 01]}}");
  direct = json_loadb(body, (size_t)n, JSON_REJECT_DUPLICATES, &je);
  CHECK(direct == NULL);
  snprintf(where, sizeof where, "line %d, column %d, byte %d)", je.line,
           je.column, je.position);
  call_init(&c, body, (size_t)n);
  CHECK(srv_codec_decode_request(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  if (!strstr(err.detail, where))
    FAIL_AT("\"%s\" does not end with \"%s\"", err.detail, where);
  call_free(&c);

  /* A key jansson refuses (invalid UTF-8, a raw control character) over
   * rows of numbers the pre-scan would lift: refused as jansson refuses the text,
   * at the same byte.  Cut out of jansson's sight, the 0xff key used to
   * reach the lift table and end in a 500 (found by fuzz-params-bias). */
  {
    static const char *const bad_keys[] = {"num_h\xff\xff" "eads", "a\x01" "b",
                                           "\xc0\xaf", "\xed\xa0\x80"};
    size_t k;

    for (k = 0; k < sizeof bad_keys / sizeof bad_keys[0]; k++) {
      n = sprintf(body, "{\"method\": \"alibi\", \"%s\": [[", bad_keys[k]);
      for (i = 0; i < 100; i++)
        n += sprintf(body + n, "%s%d", i == 0 ? "" : i == 50 ? "], [" : ", ",
                     i);
      n += sprintf(body + n, "]], \"q_len\": 2}");
      direct = json_loadb(body, (size_t)n, JSON_REJECT_DUPLICATES, &je);
      CHECK(direct == NULL);
      snprintf(where, sizeof where, "line %d, column %d, byte %d)",
               je.line, je.column, je.position);
      call_init(&c, body, (size_t)n);
      CHECK(srv_codec_decode_request(&c, &err) != 0);
      CHECK_EQ_I64(err.http, 400);
      if (!strstr(err.detail, where))
        FAIL_AT("key %zu: \"%s\" does not end with \"%s\"", k, err.detail,
                where);
      call_free(&c);
    }
  }

  /* A row of numbers one level past the depth bound is refused like any
   * array there, at its own '[' (byte 69): lifted, it used to slip
   * through (found by fuzz-number). */
  n = sprintf(body, "{\"x\": ");
  for (i = 0; i < SRV_CODEC_MAX_DEPTH - 1; i++)
    n += sprintf(body + n, "[");
  n += sprintf(body + n, "[1, 2, 3, 4]");
  for (i = 0; i < SRV_CODEC_MAX_DEPTH - 1; i++)
    n += sprintf(body + n, "]");
  n += sprintf(body + n, "}");
  call_init(&c, body, (size_t)n);
  CHECK(srv_codec_decode_request(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  if (!strstr(err.detail, "deeper than 64 levels at byte 69 "))
    FAIL_AT("\"%s\" does not name byte 69", err.detail);
  call_free(&c);
  return 0;
}

/* ---- the flat reader, element by element --------------------------------- */

/* {"t": {"dtype": "float64", "shape": [commas + 1], "data": [` elems tail`}
 * read twice: by the pre-scan, which lifts the array when its flat reader
 * takes it, and through jansson's tree alone (a text parsed for no call).
 * Both must give the same float64 values bit for bit, or the same error word
 * for word.  Returns whether the pre-scan lifted it, -1 when the two
 * readings differ. */
static int flat_both_ways(const char *elems, const char *tail)
{
  size_t n = strlen(elems) + strlen(tail) + 96, len, i, commas = 0;
  char *text = malloc(n);
  struct srv_call c[2];
  struct srv_err err[2];
  struct ab_tensor t[2];
  int r[2], k, lifted, same;

  if (!text)
    return -1;
  for (i = 0; elems[i]; i++)
    commas += elems[i] == ',';
  len = (size_t)snprintf(text, n, "{\"t\": {\"dtype\": \"float64\", \"shape\": "
                         "[%zu], \"data\": [%s%s", commas + 1, elems, tail);
  for (k = 0; k < 2; k++) {
    call_init(&c[k], text, len);
    memset(&err[k], 0, sizeof err[k]);
    c[k].in.params = srv_codec__parse_object(k ? NULL : &c[k], text, len,
                                             "the request body", &err[k]);
    r[k] = c[k].in.params ? srv_codec_tensor(&c[k], "t", 1, &t[k], &err[k])
                          : -1;
  }
  lifted = c[0].in.codec &&
           ((struct srv_codec_state *)c[0].in.codec)->nlifts > 0;
  if (r[0] == 1 && r[1] == 1)
    same = t[0].dtype == AB_DTYPE_F64 && t[1].dtype == AB_DTYPE_F64 &&
           ab_tensor_numel(&t[0]) == ab_tensor_numel(&t[1]) &&
           memcmp(t[0].data, t[1].data,
                  (size_t)ab_tensor_numel(&t[0]) * 8) == 0;
  else
    same = r[0] == r[1] && err[0].http == err[1].http &&
           strcmp(err[0].field, err[1].field) == 0 &&
           strcmp(err[0].detail, err[1].detail) == 0;
  if (!same)
    fprintf(stderr, "# lifted %d: %d %s | jansson: %d %s\n", lifted, r[0],
            err[0].detail, r[1], err[1].detail);
  for (k = 0; k < 2; k++)
    call_free(&c[k]);
  free(text);
  return same ? lifted : -1;
}

/* n numbers in the forms a client writes (integers, fractions, exponents
 * of both cases and signs, both zeros, a subnormal, a 2^53 neighbour),
 * element `at` replaced by `odd` (at < 0: none), each followed by the
 * separator seps[i % 5]. */
static char *flat_elems(int n, int at, const char *odd)
{
  static const char *const seps[] = {",", ", ", " ,\n", "\t,\t",
                                     "\r\n,\r\n  "};
  static const char *const forms[] = {"%d", "-%d.25", "%de-3", "-%dE+2",
                                      "-0", "-0.0", "%d.5e-310",
                                      "900719925474099%d"};
  char *s = malloc((size_t)n * 40 + strlen(odd) + 16);
  size_t at_ = 0;
  int i;

  if (!s)
    return NULL;
  at_ += (size_t)sprintf(s, "\n ");
  for (i = 0; i < n; i++) {
    if (i == at)
      at_ += (size_t)sprintf(s + at_, "%s", odd);
    else
      at_ += (size_t)sprintf(s + at_, forms[i % 8], i % 10);
    if (i + 1 < n)
      at_ += (size_t)sprintf(s + at_, "%s", seps[i % 5]);
  }
  sprintf(s + at_, " \n");
  return s;
}

/* What the flat reader takes, it reads as jansson does; what it does not,
 * it leaves to jansson -- whitespace of every kind, the lift threshold,
 * elements of every other kind in the middle, arrays that end early. */
TEST(data_flat_reader_agrees_with_jansson)
{
  /* One element among numbers, late in the array, past the threshold, so
   * that a reader that stopped there would have numbers enough to lift. */
  static const struct {
    const char *elem;
    int lifted;
  } odd[] = {
      /* read by the flat reader */
      {"\"inf\"", 1}, {"\"-inf\"", 1}, {"\"nan\"", 1}, {"1e-400", 1},
      {"-0", 1}, {"0e0", 1}, {"1E+2", 1}, {"123456789012345678", 1},
      {"1.7976931348623157e308", 1}, {"-9223372036854775808", 1},
      /* left to jansson */
      {"null", 0}, {"true", 0}, {"\"x\"", 0}, {"[1]", 0}, {"{}", 0},
      {"\"]\"", 0}, {"\"Infinity\"", 0}, {"NaN", 0}, {"01", 0}, {"1.", 0},
      {".5", 0}, {"+1", 0}, {"-", 0}, {"1e", 0}, {"0x10", 0}, {"1e400", 0},
      {"99999999999999999999", 0}, {"", 0}, {"1 2", 0}, {"\"inf", 0},
  };
  static const int sizes[] = {63, 64, 65, 100000};
  size_t i;
  char *e;

  for (i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    e = flat_elems(sizes[i], -1, "");
    CHECK(e != NULL);
    if (flat_both_ways(e, "]}}") != (sizes[i] >= SRV_CODEC_SPAN_MIN))
      FAIL_AT("%d numbers", sizes[i]);
    free(e);
  }
  for (i = 0; i < sizeof odd / sizeof *odd; i++) {
    e = flat_elems(100, 80, odd[i].elem);
    CHECK(e != NULL);
    if (flat_both_ways(e, "]}}") != odd[i].lifted)
      FAIL_AT("element '%s': %s, or read otherwise than by jansson",
              odd[i].elem, odd[i].lifted ? "not lifted" : "lifted");
    free(e);
  }
  /* An array that ends early: a ']' in the middle (what follows is then
   * jansson's to refuse, at the same byte), a trailing comma, no ']', no
   * text left. */
  e = flat_elems(100, 80, "1]");
  CHECK(e != NULL);
  CHECK(flat_both_ways(e, "]}}") >= 0);
  free(e);
  e = flat_elems(100, -1, "");
  CHECK(e != NULL);
  CHECK_EQ_I64(flat_both_ways(e, ",]}}"), 0);
  CHECK_EQ_I64(flat_both_ways(e, "}}"), 0);
  CHECK_EQ_I64(flat_both_ways(e, ""), 0);
  CHECK_EQ_I64(flat_both_ways(e, "]"), 0);
  free(e);
  return 0;
}

/* Long "b64" strings are read from the body in place; the result is the
 * same as for a short one that jansson copies. */
TEST(b64_fast_path)
{
  enum { N = 1000 }; /* 4000 bytes -> 5336 base64 characters */
  static float x[N];
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  char *body, *e;
  size_t el = srv_codec__b64_encoded_len(sizeof x), n;
  int i;

  for (i = 0; i < N; i++)
    x[i] = (float)test_uniform(-3, 3);
  x[7] = -INFINITY;
  body = malloc(el + 256);
  CHECK(body != NULL);
  n = (size_t)sprintf(body, "{\"x\": {\"shape\": [%d], \"b64\": \"", N);
  e = body + n;
  /* Encode independently of the codec: RFC 4648 by hand. */
  {
    static const char tb[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)x;
    size_t k, o = 0;
    for (k = 0; k + 3 <= sizeof x; k += 3) {
      uint32_t w = (uint32_t)p[k] << 16 | (uint32_t)p[k + 1] << 8 | p[k + 2];
      e[o++] = tb[w >> 18];
      e[o++] = tb[w >> 12 & 63];
      e[o++] = tb[w >> 6 & 63];
      e[o++] = tb[w & 63];
    }
    /* 4000 = 3 * 1333 + 1: one byte left, two '='. */
    e[o++] = tb[p[k] >> 2];
    e[o++] = tb[(p[k] & 3) << 4];
    e[o++] = '=';
    e[o++] = '=';
    CHECK_EQ_I64(o, el);
  }
  n += el;
  n += (size_t)sprintf(body + n, "\"}}");

  call_init(&c, body, n);
  CHECK_EQ_I64(srv_codec_decode_request(&c, &err), 0);
  CHECK(c.in.codec != NULL); /* lifted */
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), 1);
  CHECK(memcmp(t.data, x, sizeof x) == 0);
  call_free(&c);

  /* One bad character: not lifted, and the decoder names its offset. */
  e[100] = '*';
  call_init(&c, body, n);
  CHECK_EQ_I64(srv_codec_decode_request(&c, &err), 0);
  CHECK(c.in.codec == NULL);
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), -1);
  CHECK_STR(err.field, "/x/b64");
  CHECK(strstr(err.detail, "offset 100") != NULL);
  call_free(&c);
  free(body);
  return 0;
}
