/* codec.c: the server's codecs measured in process, by calling them through
 * srv.h exactly as a request would (decode the body, fetch the tensor;
 * encode the outputs): JSON float parse and emit, base64-in-JSON parse and
 * safetensors parse.  Built with BENCH_HAVE_CODEC=1 when server/codec/
 * exists (the Makefile decides); otherwise the section says it is skipped.
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#if BENCH_HAVE_CODEC

#include "call/call.h"
#include "srv.h"

/* The server keeps its configuration in srv_cfg, defined next to main()
 * which the bench does not link.  This weak definition stands in when no
 * linked server object defines it; a strong one wins when one does. */
struct srv_config srv_cfg __attribute__((weak));

/* A request's call, set up as the server does (call/call.c). */
static void call_init(struct srv_call *c, const char *ctype, const char *body,
                      size_t len)
{
  srv_call_init(c, NULL);
  c->req.content_type = ctype;
  c->req.body = body;
  c->req.body_len = len;
}

/* Decode `body` as a request and fetch the named tensors; seconds or a
 * negative value (the error printed once). */
static double time_decode(const char *ctype, const char *body, size_t len,
                          const char *const *names, int nnames,
                          int64_t expect_numel)
{
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  double t0 = bench_now(), dt;
  int i, ok = 1;

  call_init(&c, ctype, body, len);
  if (srv_codec_decode_request(&c, &err) != 0) {
    printf("  decode failed: %d %s\n", err.http, err.detail);
    ok = 0;
  }
  for (i = 0; ok && i < nnames; i++)
    if (srv_codec_tensor(&c, names[i], 1, &t, &err) != 1 ||
        ab_tensor_numel(&t) != expect_numel) {
      printf("  tensor '%s' failed: %d %s\n", names[i], err.http, err.detail);
      ok = 0;
    }
  dt = bench_now() - t0;
  srv_call_release(&c);
  return ok ? dt : -1;
}

/* Encode one tensor "x" of n elements as a JSON response; seconds or a
 * negative value (the error printed). */
static double time_encode(const void *x, enum ab_dtype dt, int64_t n,
                          size_t *len)
{
  struct srv_call c;
  struct srv_err err;
  double t0, sec = -1;

  call_init(&c, "application/json", "{}", 2);
  c.in.fmt = SRV_FMT_JSON;
  c.plan.outputs[0].name = "x";
  ab_tensor_init(&c.plan.outputs[0].t, (void *)x, dt, 1, &n);
  c.plan.noutputs = 1;
  t0 = bench_now();
  if (srv_codec_encode(&c, &err) == 0) {
    sec = bench_now() - t0;
    *len = c.resp.body.len;
  } else {
    printf("  encode failed: %d %s\n", err.http, err.detail);
  }
  srv_call_release(&c);
  return sec;
}

/* Text body {"x": {"shape": [n], "data": [...]}} with each float in its
 * shortest round-trip form, as the server itself writes floats. */
static char *json_body(const float *x, int64_t n, size_t *len)
{
  size_t cap = (size_t)n * 26 + 64, at = 0;
  char *s = malloc(cap);
  int64_t i;

  if (!s)
    return NULL;
  at += (size_t)sprintf(s, "{\"x\": {\"shape\": [%lld], \"data\": [",
                        (long long)n);
  for (i = 0; i < n; i++) {
    if (i)
      s[at++] = ',';
    at += srv_codec_fmt_f32(s + at, x[i]);
  }
  at += (size_t)sprintf(s + at, "]}}");
  *len = at;
  return s;
}

/* The same floats as a nested list {"x": [[...], ...]} of rows of `row`
 * numbers, as numpy's tolist() writes a 2-D array. */
static char *nested_body(const float *x, int64_t n, int64_t row, size_t *len)
{
  size_t cap = (size_t)n * 26 + (size_t)(n / row) * 4 + 64, at = 0;
  char *s = malloc(cap);
  int64_t i;

  if (!s)
    return NULL;
  at += (size_t)sprintf(s, "{\"x\": [");
  for (i = 0; i < n; i++) {
    if (i % row == 0)
      at += (size_t)sprintf(s + at, "%s[", i ? "], " : "");
    else
      s[at++] = ',';
    at += srv_codec_fmt_f32(s + at, x[i]);
  }
  at += (size_t)sprintf(s + at, "]]}");
  *len = at;
  return s;
}

static char *b64_body(const float *x, int64_t n, size_t *len)
{
  static const char tb[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *p = (const unsigned char *)x;
  size_t bytes = (size_t)n * 4, at, i;
  char *s = malloc(bytes / 3 * 4 + 128);

  if (!s)
    return NULL;
  at = (size_t)sprintf(s, "{\"x\": {\"shape\": [%lld], \"dtype\": "
                          "\"float32\", \"b64\": \"",
                       (long long)n);
  for (i = 0; i + 3 <= bytes; i += 3) {
    uint32_t w = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];

    s[at++] = tb[w >> 18];
    s[at++] = tb[w >> 12 & 63];
    s[at++] = tb[w >> 6 & 63];
    s[at++] = tb[w & 63];
  }
  if (bytes - i == 1) {
    s[at++] = tb[p[i] >> 2];
    s[at++] = tb[(p[i] & 3) << 4];
    s[at++] = '=';
    s[at++] = '=';
  } else if (bytes - i == 2) {
    s[at++] = tb[p[i] >> 2];
    s[at++] = tb[(p[i] & 3) << 4 | p[i + 1] >> 4];
    s[at++] = tb[(p[i + 1] & 15) << 2];
    s[at++] = '=';
  }
  at += (size_t)sprintf(s + at, "\"}}");
  *len = at;
  return s;
}

static void report(const char *name, const struct bench_samples *s,
                   double floats, double bytes)
{
  double med = bench_median(s);

  if (s->n == 0)
    return;
  printf("   %-18s %8.2f ms [%.2f-%.2f]", name, med * 1e3, bench_min(s) * 1e3,
         bench_max(s) * 1e3);
  if (floats > 0)
    printf(" %8.1f Mfloat/s %8.1f MB/s\n", floats / med * 1e-6,
           bytes / med * 1e-6);
  else
    /* Far above memory bandwidth means the tensors were not copied: the
     * decoder points into the body (zero copy) and reads its header. */
    printf(" %8.2f GB/s%s\n", bytes / med * 1e-9,
           bytes / med * 1e-9 > 100 ? " (zero copy: header parse only)" : "");
  res_begin(name);
  if (floats > 0) {
    res_num("floats_per_s", floats / med);
    res_num("mbs", bytes / med * 1e-6);
  } else {
    res_num("gbs", bytes / med * 1e-9);
  }
  res_num("bytes", bytes);
  res_num("ms_median", med * 1e3);
  res_end();
}

void bench_codec(void)
{
  const int64_t n = g_opt.quick ? (1 << 18) : (1 << 20);
  const int reps = g_opt.quick ? 2 : 5, sh = 32, sn = g_opt.quick ? 512 : 2048,
            sd = 128;
  const char *const x1[1] = {"x"}, *const qkv[3] = {"q", "k", "v"};
  float *x = bench_alloc((size_t)n * 4), *big;
  struct bench_samples parse = {0}, nested = {0}, emit = {0}, emit64 = {0},
                       b64 = {0}, st = {0};
  size_t jlen = 0, nlen = 0, blen = 0, slen = 0, elen = 0, elen64 = 0;
  double *x64 = bench_alloc((size_t)n * 8);
  char *jb, *nb, *bb, *sb = NULL;
  int r;

  bench_section("server codecs, in process (%lld floats; safetensors "
                "q,k,v [1,%d,%d,%d])",
                (long long)n, sh, sn, sd);
  /* Defaults of docs/http.md#limits, in case the codec consults them. */
  srv_cfg.max_body_mb = 256;
  srv_cfg.max_output_mb = 1024;
  srv_cfg.max_gflop = 10000;
  bench_fill(x, (size_t)n, 31, 1.0f);
  /* Doubles that need their 15-17 digits, as float64 outputs computed in
   * double precision do (a float widened to double would print its
   * shorter binary expansion). */
  for (int64_t i = 0; i < n; i++)
    x64[i] = (double)x[i] / 3.0 + 1e-9 * (double)(i % 1000);
  jb = json_body(x, n, &jlen);
  nb = nested_body(x, n, 128, &nlen);
  bb = b64_body(x, n, &blen);
  big = bench_alloc((size_t)sh * sn * sd * 4);
  bench_fill(big, (size_t)sh * sn * sd, 32, 1.0f);
  sb = bench_safetensors_qkv(big, big, big, sh, sn, sd, &slen);
  free(big);
  if (!jb || !nb || !bb || !sb) {
    bench_skip("codecs", "out of memory building the bodies");
    goto out;
  }

  for (r = -1; r < reps; r++) { /* r = -1: warm-up */
    double dt;

    dt = time_decode("application/json", jb, jlen, x1, 1, n);
    if (dt >= 0 && r >= 0)
      bench_samples_add(&parse, dt);
    dt = time_decode("application/json", nb, nlen, x1, 1, n);
    if (dt >= 0 && r >= 0)
      bench_samples_add(&nested, dt);
    dt = time_decode("application/json", bb, blen, x1, 1, n);
    if (dt >= 0 && r >= 0)
      bench_samples_add(&b64, dt);
    dt = time_decode("application/vnd.safetensors", sb, slen, qkv, 3,
                     (int64_t)sh * sn * sd);
    if (dt >= 0 && r >= 0)
      bench_samples_add(&st, dt);

    dt = time_encode(x, AB_DTYPE_F32, n, &elen);
    if (dt >= 0 && r >= 0)
      bench_samples_add(&emit, dt);
    dt = time_encode(x64, AB_DTYPE_F64, n, &elen64);
    if (dt >= 0 && r >= 0)
      bench_samples_add(&emit64, dt);
  }
  printf("   %-18s %8s ms [min-max]    rate\n", "", "median");
  report("json_parse", &parse, (double)n, (double)jlen);
  report("json_parse_nested", &nested, (double)n, (double)nlen);
  report("json_emit", &emit, (double)n, (double)elen);
  report("json_emit_f64", &emit64, (double)n, (double)elen64);
  report("json_b64_parse", &b64, 0, (double)blen);
  report("safetensors_parse", &st, 0, (double)slen);
out:
  free(x);
  free(x64);
  free(jb);
  free(nb);
  free(bb);
  free(sb);
}

#else /* !BENCH_HAVE_CODEC */

void bench_codec(void)
{
  bench_section("server codecs");
  bench_skip("codecs", "the server's codec (server/codec/) was not built "
                       "into this bench");
}

#endif
