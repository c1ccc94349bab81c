/* test-call-early.c: a call started while its body arrives
 * (srv_call_start_early, srv_call_early_end), without HTTP: the real
 * /v1/attention route and the real pool, a safetensors body whose bytes
 * are copied in step by step.  The streamed answer must match a float64
 * attention written here; a call cancelled while it waits for bytes must
 * end as a plain 503; a request that cannot start early must leave the
 * call as srv_call_init made it. */
#include "call/call.h"
#include "test.h"
#include "work/work.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 8, N = 512, D = 64 }; /* a 1 MiB answer: it streams */
#define NEL ((size_t)H * N * D)

/* A safetensors body q, k, v [1, H, N, D] float32 (in that order) with
 * `params` as __metadata__.params; *hdr_end = where the data starts. */
static char *st_body(const float *q, const float *k, const float *v,
                     const char *params, size_t *len, size_t *hdr_end)
{
  char hdr[1024];
  const size_t tb = NEL * 4;
  int n = snprintf(hdr, sizeof hdr,
                   "{\"__metadata__\":{\"params\":\"%s\"},"
                   "\"q\":{\"dtype\":\"F32\",\"shape\":[1,%d,%d,%d],"
                   "\"data_offsets\":[0,%zu]},"
                   "\"k\":{\"dtype\":\"F32\",\"shape\":[1,%d,%d,%d],"
                   "\"data_offsets\":[%zu,%zu]},"
                   "\"v\":{\"dtype\":\"F32\",\"shape\":[1,%d,%d,%d],"
                   "\"data_offsets\":[%zu,%zu]}}",
                   params, H, N, D, tb, H, N, D, tb, 2 * tb, H, N, D, 2 * tb,
                   3 * tb);
  size_t hl = ((size_t)n + 7) & ~(size_t)7, i;
  char *b;

  *hdr_end = 8 + hl;
  *len = *hdr_end + 3 * tb;
  b = malloc(*len);
  for (i = 0; i < 8; i++)
    b[i] = (char)((uint64_t)hl >> (8 * i));
  memset(b + 8, ' ', hl);
  memcpy(b + 8, hdr, (size_t)n);
  memcpy(b + *hdr_end, q, tb);
  memcpy(b + *hdr_end + tb, k, tb);
  memcpy(b + *hdr_end + 2 * tb, v, tb);
  return b;
}

/* ---- done / wake ------------------------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_done;

static void on_done(struct srv_call *c, void *arg)
{
  (void)c, (void)arg;
  pthread_mutex_lock(&g_mu);
  g_done++;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

static void wait_done(void)
{
  pthread_mutex_lock(&g_mu);
  while (!g_done)
    pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

static void no_wake(void *arg) { (void)arg; }
static void no_suspend(void *arg) { (void)arg; }

/* A call for POST /v1/attention whose body lives in `buf` (all `len`
 * bytes reserved, `avail` of them in). */
static void call_setup(struct srv_call *c, const char *buf, size_t len,
                       size_t avail)
{
  struct srv_err e;

  srv_cfg.max_body_mb = 256;
  srv_cfg.max_output_mb = 1024;
  srv_cfg.max_gflop = 1e4;
  srv_call_init(c, srv_route_find("POST", "/v1/attention", &e));
  c->req.content_type = "application/vnd.safetensors";
  c->req.accept = "application/vnd.safetensors";
  c->req.body = buf;
  c->req.body_len = len;
  c->req.body_avail = avail;
  g_done = 0;
}

static float *uniform(unsigned seed)
{
  float *a = malloc(NEL * sizeof *a);
  size_t i;

  srand(seed);
  for (i = 0; i < NEL; i++)
    a[i] = (float)(2.0 * rand() / RAND_MAX - 1.0);
  return a;
}

TEST(call_early_answer_matches_reference)
{
  float *q = uniform(1), *k = uniform(2), *v = uniform(3);
  size_t len, hdr, avail, total, pos = 0;
  char *body = st_body(q, k, v, "{}", &len, &hdr);
  char *buf = malloc(len), *ans;
  const float *out;
  struct srv_call c;
  double *s = malloc(N * sizeof *s);
  int h, r, j, x, bad = 0;

  /* What has not arrived is garbage, not zeros. */
  memset(buf, 0xff, len);
  memcpy(buf, body, hdr);
  call_setup(&c, buf, len, hdr);
  CHECK_EQ_I64(srv_work_start(2), 0);
  CHECK_EQ_I64(srv_call_start_early(&c, no_wake, NULL, on_done, NULL), 1);
  CHECK(c.run.gate != NULL);
  for (avail = hdr; avail < len;) {
    size_t step = len - avail < 65536 ? len - avail : 65536;
    memcpy(buf + avail, body + avail, step);
    avail += step;
    srv_work_gate_advance(&c, avail);
  }
  wait_done();
  CHECK_EQ_I64(srv_call_early_end(&c), 0);
  CHECK_EQ_I64(c.resp.status, 200);
  CHECK(c.run.early_pieces > 1 && c.run.early_done <= c.run.early_pieces);
  total = srv_call_stream_length(&c);
  ans = malloc(total);
  while (pos < total) {
    long n = srv_call_stream_read(&c, pos, ans + pos, total - pos, no_suspend,
                                  NULL);
    CHECK(n > 0);
    pos += (size_t)n;
  }
  /* The output tensor is the answer's last NEL floats. */
  out = (const float *)(ans + total - NEL * 4);
  for (h = 0; h < H; h++)
    for (r = 0; r < N; r++) {
      const float *qr = q + ((size_t)h * N + r) * D;
      double mx = -INFINITY, sum = 0;
      for (j = 0; j < N; j++) {
        const float *kj = k + ((size_t)h * N + j) * D;
        double dot = 0;
        for (x = 0; x < D; x++)
          dot += (double)qr[x] * kj[x];
        s[j] = dot / sqrt((double)D);
        mx = s[j] > mx ? s[j] : mx;
      }
      for (j = 0; j < N; j++)
        sum += (s[j] = exp(s[j] - mx));
      for (x = 0; x < D; x++) {
        double acc = 0, got = out[((size_t)h * N + r) * D + x];
        for (j = 0; j < N; j++)
          acc += s[j] * v[((size_t)h * N + j) * D + x];
        acc /= sum;
        if (!(fabs(got - acc) <= 2e-6 + 1e-4 * fabs(acc)) && bad++ < 3)
          fprintf(stderr, "  out[%d,%d,%d] = %g, want %g\n", h, r, x, got,
                  acc);
      }
    }
  CHECK_EQ_I64(bad, 0);
  srv_work_stop();
  srv_call_release(&c);
  free(q), free(k), free(v), free(body), free(buf), free(ans), free(s);
  return 0;
}

/* Cancelled (the drain deadline) while it waits for bytes: when the body
 * then ends, the answer is the 503 problem, not a stream. */
TEST(call_early_cancelled_while_waiting_answers_503)
{
  float *q = uniform(4), *k = uniform(5), *v = uniform(6);
  size_t len, hdr;
  char *body = st_body(q, k, v, "{}", &len, &hdr);
  char *buf = malloc(len);
  struct srv_call c;

  memcpy(buf, body, len);
  call_setup(&c, buf, len, hdr);
  CHECK_EQ_I64(srv_work_start(2), 0);
  CHECK_EQ_I64(srv_call_start_early(&c, no_wake, NULL, on_done, NULL), 1);
  /* q and k are in, v is not: no piece can run. */
  srv_work_gate_advance(&c, hdr + 2 * NEL * 4);
  srv_work_cancel();
  wait_done();
  srv_work_gate_advance(&c, len);
  CHECK_EQ_I64(srv_call_early_end(&c), 1);
  CHECK_EQ_I64(c.resp.status, 503);
  CHECK(c.run.stream == NULL);
  CHECK(c.resp.body.data && strstr(c.resp.body.data, "shutting down"));
  srv_work_stop();
  srv_call_release(&c);
  free(q), free(k), free(v), free(body), free(buf);
  return 0;
}

/* RoPE rotates q and k when the job is built: no early start, and the
 * call is as srv_call_init left it (prepared again on the whole body). */
TEST(call_early_refused_leaves_a_fresh_call)
{
  float *q = uniform(7), *k = uniform(8), *v = uniform(9);
  size_t len, hdr;
  char *body = st_body(q, k, v, "{\\\"rope\\\": {\\\"head_dim\\\": 64}}", &len,
                       &hdr);
  struct srv_call c;

  call_setup(&c, body, len, hdr);
  CHECK_EQ_I64(srv_work_start(2), 0);
  CHECK_EQ_I64(srv_call_start_early(&c, no_wake, NULL, on_done, NULL), 0);
  CHECK(c.req.route ==
        srv_route_find("POST", "/v1/attention", &(struct srv_err){0}));
  CHECK(c.plan.njobs == 0 && c.in.params == NULL && c.run.stream == NULL &&
        c.run.gate == NULL && c.resp.status == 0 && c.req.body == NULL);
  /* The same request on its whole body still works. */
  c.req.content_type = "application/vnd.safetensors";
  c.req.accept = "application/vnd.safetensors";
  c.req.body = body;
  c.req.body_len = len;
  CHECK_EQ_I64(srv_call_prepare(&c), 0);
  CHECK_EQ_I64(c.plan.njobs, 1);
  srv_work_stop();
  srv_call_release(&c);
  free(q), free(k), free(v), free(body);
  return 0;
}
