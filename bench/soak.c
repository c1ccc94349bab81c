/* soak.c: `make soak` -- a minute of overload against attnbiasd on
 * loopback, measured.
 *
 * Starts attnbiasd on 127.0.0.1 (--server), or drives one that already runs
 * (--port and --pid: how the smoke test in tests/http uses it), and then,
 * from one epoll thread of its own:
 *
 *   1. reference  every request of the mix twice, one at a time, on the
 *                 idle server.  Each must answer 200; its answer's bytes
 *                 (a digest) are what every later 200 is compared with.
 *   2. capacity   a closed loop: --capacity-connections (64: as many
 *                 requests as the server's default --max-queue admits)
 *                 sending the mix back to back for --capacity-seconds.
 *                 Requests done per second = the server's capacity for
 *                 this mix, here, now; it is also the warm-up.  Fewer
 *                 connections would measure the latency of each request
 *                 more than the server's throughput.
 *   3. overload   --connections (256) offered --factor (2) times that
 *                 capacity for --seconds (60): arrivals at random
 *                 (Poisson) times, whether or not earlier requests were
 *                 answered, each taking a free connection.
 *   4. settle     every connection closed; the server's open descriptors
 *                 must come back to their idle count, its queue to empty.
 *   5. health     /healthz, three answers checked against float64 values
 *                 computed here (ALiBi table, sinusoidal encoding,
 *                 attention), and the whole mix once more, byte for byte
 *                 as in step 1.
 *
 * The mix covers every route: the GET routes, encodings, RoPE tables and
 * rotations, bias tables (JSON, safetensors, PNG), attention (nested
 * lists, base64, safetensors answered as safetensors, .npy or JSON;
 * bodies of 4 MiB and more, which the server computes while they arrive,
 * and answers it streams).  Some clients go away on purpose: mid-body,
 * mid-compute (after the body, before the answer) and mid-answer; half of
 * them with a reset (SO_LINGER 0), half with a plain close.
 *
 * Every answer must be 200, or 503 with Retry-After; any other status, a
 * reset, a connection closed without a whole answer, a request unanswered
 * after --request-timeout, or a 200 whose bytes differ from the reference
 * is a failure.  So are: the server's RSS moving more than 5 % from the
 * middle of the overload to its end (medians of the samples of the 10 s
 * before each; judged when --seconds >= 30, so that the first half is
 * warm-up), descriptors not back to idle, a failed
 * health check, and (a server it started) an exit status other than 0
 * after SIGTERM.  It prints a table, writes --out (JSON) and exits 1 on
 * any failure, 2 when it could not run at all.
 *
 * All of it is bounded: every request has a deadline, every wait an upper
 * bound, and a server it started is killed if the soak dies. */
#include "bench.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ==== options ============================================================ */

static struct {
  const char *server;       /* attnbiasd to start, or NULL */
  const char *extra[16];    /* --server-arg: more flags for it */
  int nextra;
  int port;                 /* a running server (with pid) */
  pid_t pid;
  int connections;          /* overload phase */
  double seconds;
  double factor;            /* offered load / capacity */
  double rate;              /* offered load in requests/s, 0: factor's */
  int cap_connections;      /* capacity phase */
  double cap_seconds;
  double request_timeout;   /* an unanswered request is lost after this */
  double settle_timeout;    /* bound on waiting for descriptors */
  const char *out;          /* JSON results */
  uint64_t seed;
} opt;

/* A client connection idle this long is closed rather than reused: the
 * server may close idle ones (--timeout-s, 30 s by default), and a
 * request sent as it does so would be lost through no fault of its own. */
#define IDLE_MAX_S 5.0
/* Mid-compute leavers close within this many seconds of their body's end;
 * mid-answer leavers after this many bytes of the answer. */
#define LEAVE_COMPUTE_S 0.010
#define LEAVE_ANSWER_BYTES 65536
/* RSS from the middle to the end of the overload: at most this share. */
#define RSS_FLAT 0.05

static void usage(FILE *f)
{
  fprintf(f,
          "usage: soak --server PATH [--server-arg FLAG]... | --port P --pid PID\n"
          "            [--connections 256] [--seconds 60] [--factor 2 | --rate R]\n"
          "            [--capacity-connections 64] [--capacity-seconds S]\n"
          "            [--request-timeout 120] [--settle-timeout 60]\n"
          "            [--out FILE] [--seed N]\n"
          "env: SOAK_SECONDS, SOAK_CONNECTIONS, SOAK_FACTOR (flags win)\n");
}

static double env_num(const char *name, double dflt)
{
  const char *v = getenv(name);

  return v && *v ? atof(v) : dflt;
}

static void parse_opts(int argc, char **argv)
{
  int i;

  opt.connections = (int)env_num("SOAK_CONNECTIONS", 256);
  opt.seconds = env_num("SOAK_SECONDS", 60);
  opt.factor = env_num("SOAK_FACTOR", 2);
  opt.cap_connections = 0;
  opt.cap_seconds = 0;
  opt.request_timeout = 120;
  opt.settle_timeout = 60;
  opt.seed = 1;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

#define TAKE(flag) (strcmp(a, flag) == 0 && v && (i++, 1))
    if (TAKE("--server"))
      opt.server = v;
    else if (TAKE("--server-arg") && opt.nextra < 16)
      opt.extra[opt.nextra++] = v;
    else if (TAKE("--port"))
      opt.port = atoi(v);
    else if (TAKE("--pid"))
      opt.pid = (pid_t)atoi(v);
    else if (TAKE("--connections"))
      opt.connections = atoi(v);
    else if (TAKE("--seconds"))
      opt.seconds = atof(v);
    else if (TAKE("--factor"))
      opt.factor = atof(v);
    else if (TAKE("--rate"))
      opt.rate = atof(v);
    else if (TAKE("--capacity-connections"))
      opt.cap_connections = atoi(v);
    else if (TAKE("--capacity-seconds"))
      opt.cap_seconds = atof(v);
    else if (TAKE("--request-timeout"))
      opt.request_timeout = atof(v);
    else if (TAKE("--settle-timeout"))
      opt.settle_timeout = atof(v);
    else if (TAKE("--out"))
      opt.out = v;
    else if (TAKE("--seed"))
      opt.seed = strtoull(v, NULL, 10);
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "soak: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      exit(2);
    }
#undef TAKE
  }
  if (!opt.server == !(opt.port > 0 && opt.pid > 0)) {
    fprintf(stderr, "soak: give --server, or --port and --pid\n");
    usage(stderr);
    exit(2);
  }
  if (opt.connections < 1 || opt.connections > 4096 || !(opt.seconds > 0) ||
      opt.seconds > 3600 || !(opt.factor > 0) || !(opt.request_timeout > 0) ||
      !(opt.settle_timeout > 0)) {
    fprintf(stderr, "soak: --connections 1..4096, --seconds (0, 3600], "
                    "--factor, --request-timeout, --settle-timeout > 0\n");
    exit(2);
  }
  if (opt.cap_connections <= 0)
    opt.cap_connections = opt.connections < 64 ? opt.connections : 64;
  if (opt.cap_connections > opt.connections)
    opt.cap_connections = opt.connections;
  if (!(opt.cap_seconds > 0)) /* a sixth of the overload, 2 to 10 s */
    opt.cap_seconds = fmin(10.0, fmax(2.0, opt.seconds / 6));
  if (opt.seed == 0)
    opt.seed = 1;
}

/* ==== random numbers (xorshift64*: the same run for the same seed) ===== */

static uint64_t g_rng;

static double rnd01(void)
{
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-53;
}

/* ==== text buffers ======================================================= */

struct sb {
  char *p;
  size_t n, cap;
};

static void sb_grow(struct sb *s, size_t more)
{
  if (s->n + more + 1 <= s->cap)
    return;
  while (s->n + more + 1 > s->cap)
    s->cap = s->cap ? 2 * s->cap : 4096;
  s->p = realloc(s->p, s->cap);
  if (!s->p) {
    fprintf(stderr, "soak: out of memory\n");
    exit(2);
  }
}

static void sb_put(struct sb *s, const void *p, size_t n)
{
  sb_grow(s, n);
  memcpy(s->p + s->n, p, n);
  s->n += n;
  s->p[s->n] = '\0';
}

static void sb_printf(struct sb *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *s, const char *fmt, ...)
{
  va_list ap;
  int k;

  va_start(ap, fmt);
  k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  sb_grow(s, (size_t)k);
  va_start(ap, fmt);
  vsnprintf(s->p + s->n, (size_t)k + 1, fmt, ap);
  va_end(ap);
  s->n += (size_t)k;
}

/* {"shape": [...], "data": [...]} of n floats. */
static void sb_tensor(struct sb *s, const float *x, int rank,
                      const int64_t *shape)
{
  size_t n = 1;
  int r;

  sb_printf(s, "{\"shape\": [");
  for (r = 0; r < rank; r++) {
    sb_printf(s, "%s%lld", r ? ", " : "", (long long)shape[r]);
    n *= (size_t)shape[r];
  }
  sb_printf(s, "], \"data\": [");
  for (size_t i = 0; i < n; i++)
    sb_printf(s, "%s%.9g", i ? "," : "", (double)x[i]);
  sb_printf(s, "]}");
}

/* The same tensor as {"shape", "dtype", "b64"} (standard alphabet). */
static void sb_tensor_b64(struct sb *s, const float *x, int rank,
                          const int64_t *shape)
{
  static const char al[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *b = (const unsigned char *)x;
  size_t n = 4, i;
  int r;

  sb_printf(s, "{\"shape\": [");
  for (r = 0; r < rank; r++) {
    sb_printf(s, "%s%lld", r ? ", " : "", (long long)shape[r]);
    n *= (size_t)shape[r];
  }
  sb_printf(s, "], \"dtype\": \"float32\", \"b64\": \"");
  sb_grow(s, (n + 2) / 3 * 4);
  for (i = 0; i < n; i += 3) {
    unsigned v = (unsigned)b[i] << 16 | (i + 1 < n ? (unsigned)b[i + 1] << 8 : 0) |
                 (i + 2 < n ? b[i + 2] : 0);
    char q[4] = {al[v >> 18 & 63], al[v >> 12 & 63],
                 i + 1 < n ? al[v >> 6 & 63] : '=', i + 2 < n ? al[v & 63] : '='};
    sb_put(s, q, 4);
  }
  sb_printf(s, "\"}");
}

/* ==== the mix ============================================================ */

/* How a client of a kind behaves: it waits for its answer, or goes away
 * while sending its body, between its body and the answer, or while the
 * answer arrives. */
enum leave { STAY, LEAVE_BODY, LEAVE_COMPUTE, LEAVE_ANSWER };

struct kind {
  const char *name;
  const char *method, *path, *ctype, *accept;
  int weight;
  enum leave leave;
  char *body; /* malloc'd; NULL for GET */
  size_t blen;
  /* the request's bytes, made once the port is known */
  char *wire;
  size_t wlen;
  /* from the reference phase: 1 when two answers on the idle server were
   * the same bytes (then every 200 must be), their digest and type */
  int checked;
  uint64_t digest, rlen;
  char rtype[64];
};

#define MAX_KINDS 32
static struct kind g_kinds[MAX_KINDS];
static int g_nkinds, g_weight_sum;

static struct kind *kind_add(const char *name, const char *method,
                             const char *path, const char *ctype,
                             const char *accept, int weight, enum leave leave)
{
  struct kind *k = &g_kinds[g_nkinds++];

  k->name = name;
  k->method = method;
  k->path = path;
  k->ctype = ctype;
  k->accept = accept;
  k->weight = weight;
  k->leave = leave;
  g_weight_sum += weight;
  return k;
}

static void kind_json(struct kind *k, struct sb *s)
{
  k->body = s->p;
  k->blen = s->n;
  memset(s, 0, sizeof *s);
}

#define JSON "application/json"
#define ST "application/vnd.safetensors"
#define NPY "application/x-npy"

/* A safetensors body of q, k, v [1, h, n, d] (deterministic values). */
static void kind_qkv(struct kind *k, int h, int n, int d, const char *params)
{
  size_t per = (size_t)h * n * d;
  float *x = bench_alloc(per * 3 * sizeof(float));
  struct bench_st_tensor t[3] = {{"q", x, 4, {1, h, n, d}},
                                 {"k", x + per, 4, {1, h, n, d}},
                                 {"v", x + 2 * per, 4, {1, h, n, d}}};

  bench_fill(x, per * 3, (uint64_t)(h * 131 + n * 7 + d), 1.0f);
  k->body = bench_safetensors(t, 3, params, &k->blen);
  free(x);
}

/* Every request of the soak, with its weight in the mix.  Shapes are
 * chosen so that the mix costs the server far more than the client: the
 * soak's one thread must offer twice what the server's threads finish. */
static void build_mix(void)
{
  struct sb s = {0};
  struct kind *k;
  float small[3 * 24 * 16], table[32 * 8], *x;
  int64_t qs[2] = {16, 16}, ks[2] = {24, 16}, ts[2] = {32, 8},
          bs[4] = {1, 4, 128, 64};
  size_t nb = 4 * 128 * 64;

  /* The GET routes. */
  kind_add("healthz", "GET", "/healthz", NULL, NULL, 3, STAY);
  kind_add("readyz", "GET", "/readyz", NULL, NULL, 2, STAY);
  kind_add("metrics", "GET", "/metrics", NULL, NULL, 2, STAY);
  kind_add("openapi", "GET", "/openapi.yaml", NULL, NULL, 1, STAY);
  kind_add("methods", "GET", "/v1/methods", NULL, NULL, 2, STAY);

  /* Encodings: JSON answer, safetensors answer, x + PE from a
   * safetensors body. */
  k = kind_add("enc_json", "POST", "/v1/encodings", JSON, NULL, 6, STAY);
  sb_printf(&s, "{\"method\": \"sinusoidal\", \"positions\": 64, \"dim\": 64}");
  kind_json(k, &s);
  k = kind_add("enc_st", "POST", "/v1/encodings", JSON, ST, 4, STAY);
  sb_printf(&s, "{\"method\": \"sinusoidal\", \"layout\": \"concat\", "
                "\"positions\": 512, \"dim\": 256}");
  kind_json(k, &s);
  k = kind_add("enc_x_st", "POST", "/v1/encodings", ST, ST, 3, STAY);
  x = bench_alloc(256 * 128 * sizeof(float));
  bench_fill(x, 256 * 128, 5, 1.0f);
  {
    struct bench_st_tensor t = {"x", x, 2, {256, 128}};
    k->body = bench_safetensors(&t, 1, "{\"method\": \"sinusoidal\", "
                                       "\"positions\": 256, \"dim\": 128}", &k->blen);
  }
  free(x);

  /* RoPE: Llama 3 tables in JSON, YaRN tables as safetensors, q and k
   * rotated from a safetensors body. */
  k = kind_add("rope_json", "POST", "/v1/rope", JSON, NULL, 6, STAY);
  sb_printf(&s, "{\"head_dim\": 128, \"rope_theta\": 500000, \"positions\": "
                "256, \"rope_scaling\": {\"rope_type\": \"llama3\", "
                "\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": "
                "4, \"original_max_position_embeddings\": 8192}}");
  kind_json(k, &s);
  k = kind_add("rope_yarn_st", "POST", "/v1/rope", JSON, ST, 3, STAY);
  sb_printf(&s, "{\"head_dim\": 128, \"positions\": 2048, \"rope_scaling\": "
                "{\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"original_max_position_embeddings\": 1024}}");
  kind_json(k, &s);
  k = kind_add("rope_qk_st", "POST", "/v1/rope", ST, ST, 4, STAY);
  x = bench_alloc(2 * 8 * 256 * 64 * sizeof(float));
  bench_fill(x, 2 * 8 * 256 * 64, 7, 1.0f);
  {
    struct bench_st_tensor t[2] = {{"q", x, 4, {1, 8, 256, 64}},
                                   {"k", x + 8 * 256 * 64, 4, {1, 8, 256, 64}}};
    k->body = bench_safetensors(t, 2, "{\"head_dim\": 64, \"positions\": 256}",
                                &k->blen);
  }
  free(x);

  /* Bias tables: ALiBi and T5 in JSON, a PNG heatmap, a safetensors
   * table. */
  k = kind_add("bias_alibi_json", "POST", "/v1/bias", JSON, NULL, 6, STAY);
  sb_printf(&s, "{\"method\": \"alibi\", \"num_heads\": 8, \"q_len\": 64, "
                "\"k_len\": 64, \"causal\": true}");
  kind_json(k, &s);
  k = kind_add("bias_t5_json", "POST", "/v1/bias", JSON, NULL, 4, STAY);
  bench_fill(table, 32 * 8, 11, 2.0f);
  sb_printf(&s, "{\"method\": \"t5\", \"num_heads\": 8, \"q_len\": 64, "
                "\"k_len\": 64, \"bidirectional\": true, \"table\": ");
  sb_tensor(&s, table, 2, ts);
  sb_printf(&s, "}");
  kind_json(k, &s);
  k = kind_add("bias_png", "POST", "/v1/bias", JSON, "image/png", 4, STAY);
  sb_printf(&s, "{\"method\": \"alibi\", \"num_heads\": 8, \"q_len\": 128, "
                "\"k_len\": 128, \"causal\": true, \"head\": 2}");
  kind_json(k, &s);
  k = kind_add("bias_st", "POST", "/v1/bias", JSON, ST, 3, STAY);
  sb_printf(&s, "{\"method\": \"alibi\", \"num_heads\": 8, \"q_len\": 256, "
                "\"k_len\": 256}");
  kind_json(k, &s);

  /* Attention: nested lists with a fused bias, base64 with fused RoPE
   * (answered in base64), safetensors answered as safetensors and as
   * .npy, and a 6 MiB body computed as it arrives, its 2 MiB answer
   * streamed (64 short heads: the bytes of a large request for a quarter
   * of a GFLOP, so that its share of the mix tests the paths of large
   * bodies rather than the kernel). */
  k = kind_add("attn_json", "POST", "/v1/attention", JSON, NULL, 6, STAY);
  bench_fill(small, sizeof small / sizeof *small, 13, 1.0f);
  sb_printf(&s, "{\"q\": ");
  sb_tensor(&s, small, 2, qs);
  sb_printf(&s, ", \"k\": ");
  sb_tensor(&s, small + 16 * 16, 2, ks);
  sb_printf(&s, ", \"v\": ");
  sb_tensor(&s, small + 16 * 16 + 24 * 16, 2, ks);
  sb_printf(&s, ", \"causal\": true, \"bias\": {\"method\": \"alibi\"}, "
                "\"return\": [\"output\", \"lse\", \"weights\"]}");
  kind_json(k, &s);
  k = kind_add("attn_b64", "POST", "/v1/attention", JSON, NULL, 4, STAY);
  x = bench_alloc(3 * nb * sizeof(float));
  bench_fill(x, 3 * nb, 17, 1.0f);
  sb_printf(&s, "{\"q\": ");
  sb_tensor_b64(&s, x, 4, bs);
  sb_printf(&s, ", \"k\": ");
  sb_tensor_b64(&s, x + nb, 4, bs);
  sb_printf(&s, ", \"v\": ");
  sb_tensor_b64(&s, x + 2 * nb, 4, bs);
  sb_printf(&s, ", \"causal\": true, \"rope\": {\"head_dim\": 64}, "
                "\"encoding\": \"b64\"}");
  kind_json(k, &s);
  free(x);
  k = kind_add("attn_st", "POST", "/v1/attention", ST, ST, 5, STAY);
  kind_qkv(k, 8, 256, 64, NULL);
  k = kind_add("attn_st_npy", "POST", "/v1/attention", ST, NPY, 2, STAY);
  kind_qkv(k, 8, 256, 64, "{\"window\": [128, 0]}");
  k = kind_add("attn_big_st", "POST", "/v1/attention", ST, ST, 3, STAY);
  kind_qkv(k, 64, 128, 64, NULL);

  /* The clients that leave: mid-body (the 6 MiB body), mid-compute (an
   * answer the server computes and encodes in full before sending: JSON),
   * mid-answer (the streamed one). */
  k = kind_add("leave_body", "POST", "/v1/attention", ST, ST, 3, LEAVE_BODY);
  kind_qkv(k, 64, 128, 64, NULL);
  k = kind_add("leave_compute_attn", "POST", "/v1/attention", ST, JSON, 2,
               LEAVE_COMPUTE);
  kind_qkv(k, 8, 512, 64, "{\"causal\": true}");
  k = kind_add("leave_compute_bias", "POST", "/v1/bias", JSON, NULL, 2,
               LEAVE_COMPUTE);
  sb_printf(&s, "{\"method\": \"alibi\", \"num_heads\": 8, \"q_len\": 256, "
                "\"k_len\": 256, \"causal\": true}");
  kind_json(k, &s);
  k = kind_add("leave_answer", "POST", "/v1/attention", ST, ST, 2,
               LEAVE_ANSWER);
  kind_qkv(k, 64, 128, 64, "{\"causal\": true}");

  for (int i = 0; i < g_nkinds; i++)
    if (g_kinds[i].method[0] == 'P' && !g_kinds[i].body) {
      fprintf(stderr, "soak: out of memory building the mix\n");
      exit(2);
    }
}

/* The request line and headers, then the body, in one buffer. */
static void make_wire(struct kind *k, int port)
{
  struct sb s = {0};

  sb_printf(&s, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", k->method,
            k->path, port);
  if (k->ctype)
    sb_printf(&s, "Content-Type: %s\r\n", k->ctype);
  if (k->accept)
    sb_printf(&s, "Accept: %s\r\n", k->accept);
  if (k->body)
    sb_printf(&s, "Content-Length: %zu\r\n", k->blen);
  sb_printf(&s, "\r\n");
  if (k->body)
    sb_put(&s, k->body, k->blen);
  k->wire = s.p;
  k->wlen = s.n;
}

/* k's place in the mix, or -1 for a request of the health checks. */
static int kind_index(const struct kind *k)
{
  for (int i = 0; i < g_nkinds; i++)
    if (k == &g_kinds[i])
      return i;
  return -1;
}

static struct kind *kind_named(const char *name)
{
  for (int i = 0; i < g_nkinds; i++)
    if (strcmp(g_kinds[i].name, name) == 0)
      return &g_kinds[i];
  return NULL;
}

static struct kind *pick_kind(void)
{
  int r = (int)(rnd01() * g_weight_sum), i;

  for (i = 0; i < g_nkinds - 1; i++) {
    if (r < g_kinds[i].weight)
      break;
    r -= g_kinds[i].weight;
  }
  return &g_kinds[i];
}

/* ==== responses, parsed as they arrive =================================== */

enum rstate { R_HEAD, R_BODY, R_TO_EOF, R_CHUNK_LINE, R_CHUNK_DATA,
              R_CHUNK_CRLF, R_TRAILER, R_DONE };

struct resp {
  enum rstate st;
  char head[8192];
  size_t hlen;
  char line[80]; /* a chunk-size or trailer line */
  size_t llen;
  int status, keep_alive, retry_after;
  uint64_t left;      /* body or chunk bytes still to come */
  uint64_t digest;    /* FNV-1a 64 of the body (de-chunked) */
  uint64_t body_len;
  uint64_t received;  /* every byte of the response so far */
  char ctype[64];
  float timing[3];    /* Server-Timing read, queue, compute (ms); NaN */
  struct sb *keep;    /* the body, when the caller wants it */
};

/* The phases of Server-Timing the report splits a 200's time into: the
 * body's arrival, the wait for the pool, the computing. */
static const char *const g_timing_names[3] = {"read", "queue", "compute"};

static void resp_reset(struct resp *r, struct sb *keep)
{
  r->st = R_HEAD;
  r->hlen = r->llen = 0;
  r->status = r->retry_after = 0;
  r->keep_alive = 1;
  r->left = r->body_len = r->received = 0;
  r->digest = 0xcbf29ce484222325ull;
  r->ctype[0] = '\0';
  r->timing[0] = r->timing[1] = r->timing[2] = NAN;
  r->keep = keep;
}

static void body_bytes(struct resp *r, const char *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    r->digest = (r->digest ^ (unsigned char)p[i]) * 0x100000001b3ull;
  r->body_len += n;
  if (r->keep)
    sb_put(r->keep, p, n);
}

/* The status line and headers (head ends with the blank line): -1 when
 * they are not HTTP/1.1 as the soak expects it. */
static int parse_head(struct resp *r)
{
  char *line, *save = NULL;
  int chunked = 0, has_len = 0;

  r->head[r->hlen] = '\0';
  if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1 || r->status < 100 ||
      r->status > 599)
    return -1;
  line = strtok_r(r->head, "\r\n", &save); /* the status line */
  while ((line = strtok_r(NULL, "\r\n", &save)) != NULL) {
    char *v = strchr(line, ':');

    if (!v)
      continue;
    *v++ = '\0';
    v += strspn(v, " \t");
    if (strcasecmp(line, "content-length") == 0) {
      r->left = strtoull(v, NULL, 10);
      has_len = 1;
    } else if (strcasecmp(line, "transfer-encoding") == 0) {
      chunked = strcasecmp(v, "chunked") == 0;
    } else if (strcasecmp(line, "connection") == 0) {
      r->keep_alive = strcasecmp(v, "close") != 0;
    } else if (strcasecmp(line, "retry-after") == 0) {
      r->retry_after = atoi(v) > 0;
    } else if (strcasecmp(line, "content-type") == 0) {
      snprintf(r->ctype, sizeof r->ctype, "%s", v);
    } else if (strcasecmp(line, "server-timing") == 0) {
      for (int i = 0; i < 3; i++) {
        size_t n = strlen(g_timing_names[i]);

        for (char *t = v; (t = strstr(t, g_timing_names[i])) != NULL; t += n)
          if ((t == v || t[-1] == ' ' || t[-1] == ',') &&
              strncmp(t + n, ";dur=", 5) == 0) {
            r->timing[i] = strtof(t + n + 5, NULL);
            break;
          }
      }
    }
  }
  if (chunked)
    r->st = R_CHUNK_LINE;
  else if (has_len)
    r->st = r->left ? R_BODY : R_DONE;
  else {
    r->st = R_TO_EOF; /* ends when the server closes */
    r->keep_alive = 0;
  }
  return 0;
}

/* Feed n received bytes; -1 on a protocol error (including bytes after
 * the end of the response: the soak never pipelines). */
static int resp_feed(struct resp *r, const char *p, size_t n)
{
  r->received += n;
  while (n) {
    size_t k;

    switch (r->st) {
    case R_HEAD:
      if (r->hlen + 1 >= sizeof r->head)
        return -1;
      r->head[r->hlen++] = *p++;
      n--;
      if (r->hlen >= 4 && memcmp(r->head + r->hlen - 4, "\r\n\r\n", 4) == 0 &&
          parse_head(r) != 0)
        return -1;
      break;
    case R_BODY:
    case R_CHUNK_DATA:
      k = n < r->left ? n : (size_t)r->left;
      body_bytes(r, p, k);
      p += k;
      n -= k;
      r->left -= k;
      if (!r->left)
        r->st = r->st == R_BODY ? R_DONE : R_CHUNK_CRLF;
      break;
    case R_TO_EOF:
      body_bytes(r, p, n);
      n = 0;
      break;
    case R_CHUNK_CRLF:
    case R_CHUNK_LINE:
    case R_TRAILER:
      if (r->llen + 1 >= sizeof r->line)
        return -1;
      r->line[r->llen++] = *p++;
      n--;
      if (r->llen < 2 || memcmp(r->line + r->llen - 2, "\r\n", 2) != 0)
        break;
      if (r->st == R_CHUNK_CRLF) {
        if (r->llen != 2)
          return -1;
        r->st = R_CHUNK_LINE;
      } else if (r->st == R_CHUNK_LINE) {
        char *end;

        r->line[r->llen] = '\0';
        r->left = strtoull(r->line, &end, 16);
        if (end == r->line)
          return -1;
        r->st = r->left ? R_CHUNK_DATA : R_TRAILER;
      } else if (r->llen == 2) {
        r->st = R_DONE; /* the empty line after the last chunk */
      }
      r->llen = 0;
      break;
    case R_DONE:
      return -1;
    }
  }
  return 0;
}

/* ==== what happened to each request ====================================== */

enum fail {
  F_NONE,
  F_STATUS,      /* neither 200 nor 503 */
  F_NO_RETRY,    /* 503 without Retry-After */
  F_BODY,        /* a 200 whose bytes differ from the idle server's */
  F_CUT_200,     /* a 200 to a body that was never sent whole */
  F_RESET,       /* the connection was reset before the whole answer */
  F_CLOSED,      /* closed (EOF) before the whole answer */
  F_TIMEOUT,     /* no whole answer within --request-timeout */
  F_CONNECT,     /* connect() failed */
  F_PROTOCOL,    /* not a well-formed HTTP/1.1 response */
  F_COUNT
};
static const char *const g_fail_names[F_COUNT] = {
    "none",    "status",  "503_without_retry_after", "wrong_body",
    "200_to_cut_body", "reset", "closed_before_answer", "timeout",
    "connect", "protocol"};

enum outcome { O_ANSWERED, O_LEFT, O_FAILED };

struct rec {
  float service_ms;  /* connection taken -> last byte of the answer */
  float response_ms; /* arrival (scheduled) -> last byte */
  float done_s;      /* when it ended, from the phase's start */
  float timing[3];   /* the server's read, queue, compute (ms) or NaN */
  short kind, status;
  unsigned char outcome, fail;
};

struct phase {
  const char *name;
  double t0, t_end, seconds; /* issuing stops at t_end */
  double t_done;             /* the last request in flight ended */
  double srv_cpu0, srv_cpu1, cli_cpu0, cli_cpu1;
  struct rec *recs;
  size_t nrec, cap;
  long issued, shed, idle_closed, unsolicited;
  double lag_max; /* worst wait of an arrival for a free connection, s */
  char firsts[8][200]; /* the first failures, described */
  int nfirsts;
};

static void rec_add(struct phase *ph, const struct rec *r)
{
  if (ph->nrec == ph->cap) {
    ph->cap = ph->cap ? 2 * ph->cap : 4096;
    ph->recs = realloc(ph->recs, ph->cap * sizeof *ph->recs);
    if (!ph->recs) {
      fprintf(stderr, "soak: out of memory\n");
      exit(2);
    }
  }
  ph->recs[ph->nrec++] = *r;
}

/* ==== the server: its process, seen from /proc ========================== */

static pid_t g_srv_pid;
static int g_port;

static long rss_kb(void)
{
  char path[64], line[256];
  long kb = -1;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/status", (int)g_srv_pid);
  f = fopen(path, "r");
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

static int fd_count(void)
{
  char path[64];
  struct dirent *e;
  DIR *d;
  int n = 0;

  snprintf(path, sizeof path, "/proc/%d/fd", (int)g_srv_pid);
  d = opendir(path);
  if (!d)
    return -1;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* CPU seconds (user + system) of the server, all threads. */
static double srv_cpu_s(void)
{
  char path[64], buf[1024], *p;
  unsigned long ut = 0, st = 0;
  FILE *f;
  size_t n;

  snprintf(path, sizeof path, "/proc/%d/stat", (int)g_srv_pid);
  f = fopen(path, "r");
  if (!f)
    return -1;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  p = strrchr(buf, ')'); /* the command name may hold spaces */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                   &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The 1-minute load average: how busy the machine was besides us. */
static double loadavg(void)
{
  double la = -1;
  FILE *f = fopen("/proc/loadavg", "r");

  if (f) {
    if (fscanf(f, "%lf", &la) != 1)
      la = -1;
    fclose(f);
  }
  return la;
}

static double cli_cpu_s(void)
{
  struct rusage ru;

  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* One sample a second of RSS and descriptors, through every phase. */
struct sample {
  float t;
  long rss_kb;
  int fds;
};
#define MAX_SAMPLES 8192
static struct sample g_samples[MAX_SAMPLES];
static int g_nsamples;
static double g_t_origin, g_next_sample;

/* The median RSS of the samples taken in [from, to] (seconds since the
 * soak began), or -1 when there is none. */
static long rss_median(double from, double to)
{
  long v[MAX_SAMPLES];
  int n = 0;

  for (int i = 0; i < g_nsamples; i++)
    if (g_samples[i].t >= from && g_samples[i].t <= to &&
        g_samples[i].rss_kb >= 0) {
      int j = n++;

      for (; j > 0 && v[j - 1] > g_samples[i].rss_kb; j--) /* insertion */
        v[j] = v[j - 1];
      v[j] = g_samples[i].rss_kb;
    }
  return n ? v[n / 2] : -1;
}

static void sample_now(double now)
{
  if (g_nsamples < MAX_SAMPLES)
    g_samples[g_nsamples++] =
        (struct sample){(float)(now - g_t_origin), rss_kb(), fd_count()};
}

/* ==== connections and the event loop ==================================== */

struct conn {
  int fd;             /* -1: not connected */
  int slot;
  struct kind *k;     /* NULL: no request */
  int connecting, reused, send_failed;
  size_t off;         /* request bytes sent */
  size_t cut;         /* LEAVE_BODY: leave once this many are sent */
  double t_sched, t_start, deadline, leave_at, idle_since;
  struct phase *ph;
  struct resp rp;
};

static struct {
  int ep;
  struct conn *c;
  int n, busy;
  int *free; /* stack of slots with no request; the top is the most
              * recently used, so kept-alive connections are reused */
  int nfree;
} E;

static void conn_events(struct conn *c)
{
  struct epoll_event ev = {0};

  ev.events = EPOLLIN | EPOLLRDHUP;
  if (c->k && (c->connecting || (!c->send_failed && c->off < c->k->wlen &&
                                 (c->k->leave != LEAVE_BODY || c->off < c->cut))))
    ev.events |= EPOLLOUT;
  ev.data.u32 = (uint32_t)c->slot;
  epoll_ctl(E.ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Close the socket: with a reset (SO_LINGER 0) when rst is set. */
static void conn_close(struct conn *c, int rst)
{
  if (c->fd < 0)
    return;
  if (rst) {
    struct linger lg = {1, 0};

    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  epoll_ctl(E.ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
}

static void note_failure(struct phase *ph, const struct conn *c, enum fail f,
                         const char *how)
{
  if (ph->nfirsts < 8)
    snprintf(ph->firsts[ph->nfirsts++], sizeof ph->firsts[0],
             "%s: %s (status %d, %zu of %zu request bytes sent, %llu answer "
             "bytes received, %s connection)",
             c->k->name, how ? how : g_fail_names[f], c->rp.status, c->off,
             c->k->wlen, (unsigned long long)c->rp.received,
             c->reused ? "a reused" : "a new");
}

/* The request on c is over: record it, keep or close the connection, free
 * the slot. */
static void conn_done(struct conn *c, enum outcome o, enum fail f,
                      const char *how)
{
  double now = bench_now();
  struct rec r = {0};
  int keep = 0;

  r.kind = (short)kind_index(c->k);
  r.status = (short)c->rp.status;
  r.service_ms = (float)((now - c->t_start) * 1e3);
  r.response_ms = (float)((now - c->t_sched) * 1e3);
  r.done_s = c->ph ? (float)(now - c->ph->t0) : 0;
  memcpy(r.timing, c->rp.timing, sizeof r.timing);
  if (o == O_ANSWERED) {
    int whole = c->off == c->k->wlen && !c->send_failed;

    if (c->rp.status == 200) {
      if (c->k->leave == LEAVE_BODY && !whole)
        f = F_CUT_200;
      else if (c->k->checked &&
               (c->rp.digest != c->k->digest || c->rp.body_len != c->k->rlen ||
                strcmp(c->rp.ctype, c->k->rtype) != 0))
        f = F_BODY;
    } else if (c->rp.status == 503) {
      if (!c->rp.retry_after)
        f = F_NO_RETRY;
    } else {
      f = F_STATUS;
    }
    if (f != F_NONE)
      o = O_FAILED;
    keep = o == O_ANSWERED && whole && c->rp.keep_alive;
  }
  r.outcome = (unsigned char)o;
  r.fail = (unsigned char)f;
  if (c->ph) {
    rec_add(c->ph, &r);
    if (o == O_FAILED)
      note_failure(c->ph, c, f, how);
  }
  if (!keep)
    conn_close(c, o == O_LEFT && rnd01() < 0.5);
  else
    conn_events(c);
  c->k = NULL;
  c->idle_since = now;
  E.busy--;
  E.free[E.nfree++] = c->slot;
}

static void conn_leave(struct conn *c) { conn_done(c, O_LEFT, F_NONE, NULL); }

/* Send what the socket takes. */
static void conn_send(struct conn *c)
{
  size_t end = c->k->leave == LEAVE_BODY ? c->cut : c->k->wlen;

  while (c->off < end) {
    ssize_t w = send(c->fd, c->k->wire + c->off, end - c->off, MSG_NOSIGNAL);

    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (w <= 0) {
      /* The server closed while we still sent: an answer it sent first
       * may still be waiting to be read. */
      c->send_failed = 1;
      break;
    }
    c->off += (size_t)w;
  }
  if (c->k->leave == LEAVE_BODY && c->off == c->cut && !c->send_failed) {
    conn_leave(c);
    return;
  }
  if (c->k->leave == LEAVE_COMPUTE && c->off == c->k->wlen && !c->leave_at)
    c->leave_at = bench_now() + rnd01() * LEAVE_COMPUTE_S;
  conn_events(c);
}

static char g_rbuf[1 << 17];

/* Read what has arrived; the answer may end the request. */
static void conn_recv(struct conn *c)
{
  for (;;) {
    ssize_t n = recv(c->fd, g_rbuf, sizeof g_rbuf, 0);

    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (!c->k) {
      /* An idle kept-alive connection: the server may close it (an end of
       * file, or a reset), but it has nothing to say on it. */
      if (n > 0 && c->ph) {
        c->ph->unsolicited++;
        if (c->ph->nfirsts < 8)
          snprintf(c->ph->firsts[c->ph->nfirsts++], sizeof c->ph->firsts[0],
                   "%zd bytes nobody asked for on an idle connection", n);
      } else if (c->ph) {
        c->ph->idle_closed++;
      }
      conn_close(c, 0);
      return;
    }
    if (n == 0) {
      if (c->rp.st == R_TO_EOF) {
        c->rp.st = R_DONE;
        conn_done(c, O_ANSWERED, F_NONE, NULL);
      } else {
        conn_done(c, O_FAILED, F_CLOSED, NULL);
      }
      return;
    }
    if (n < 0) {
      conn_done(c, O_FAILED, errno == ECONNRESET ? F_RESET : F_CLOSED,
                strerror(errno));
      return;
    }
    if (resp_feed(&c->rp, g_rbuf, (size_t)n) != 0) {
      conn_done(c, O_FAILED, F_PROTOCOL, NULL);
      return;
    }
    if (c->rp.st == R_DONE) {
      conn_done(c, O_ANSWERED, F_NONE, NULL);
      return;
    }
    if (c->k->leave == LEAVE_ANSWER && c->rp.received >= LEAVE_ANSWER_BYTES) {
      conn_leave(c);
      return;
    }
  }
}

static int conn_open(struct conn *c)
{
  struct sockaddr_in sa;
  struct epoll_event ev = {0};
  int one = 1;

  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    return -1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)g_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
  ev.data.u32 = (uint32_t)c->slot;
  if (epoll_ctl(E.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    close(c->fd);
    c->fd = -1;
    return -1;
  }
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
      errno != EINPROGRESS) {
    int e = errno;

    conn_close(c, 0);
    errno = e;
    return -1;
  }
  c->connecting = 1;
  return 0;
}

/* Start request k, which arrived at t_sched, on a free slot. */
static void start(struct phase *ph, struct kind *k, double t_sched,
                  struct sb *keep)
{
  struct conn *c = &E.c[E.free[--E.nfree]];
  double now = bench_now();

  E.busy++;
  c->k = k;
  c->ph = ph;
  c->t_sched = t_sched;
  c->t_start = now;
  c->deadline = now + opt.request_timeout;
  c->leave_at = 0;
  c->off = 0;
  c->send_failed = 0;
  c->cut = k->leave == LEAVE_BODY
               ? k->wlen - k->blen + (size_t)((0.01 + 0.98 * rnd01()) * k->blen)
               : k->wlen;
  resp_reset(&c->rp, keep);
  if (ph) {
    ph->issued++;
    if (now - t_sched > ph->lag_max)
      ph->lag_max = now - t_sched;
  }
  if (c->fd >= 0 && now - c->idle_since > IDLE_MAX_S)
    conn_close(c, 0);
  c->reused = c->fd >= 0;
  if (c->fd < 0 && conn_open(c) != 0) {
    conn_done(c, O_FAILED, F_CONNECT, strerror(errno));
    return;
  }
  if (!c->connecting)
    conn_send(c);
}

static void on_event(struct conn *c, uint32_t events)
{
  if (c->connecting && c->k && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    int err = 0;
    socklen_t len = sizeof err;

    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      conn_done(c, O_FAILED, F_CONNECT, strerror(err));
      return;
    }
    c->connecting = 0;
  }
  if (c->k && !c->connecting && (events & EPOLLOUT))
    conn_send(c);
  if (c->fd >= 0 && (events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)))
    conn_recv(c);
}

/* Deadlines and mid-compute leavers. */
static void check_timers(double now)
{
  for (int i = 0; i < E.n; i++) {
    struct conn *c = &E.c[i];

    if (!c->k)
      continue;
    if (c->leave_at > 0 && now >= c->leave_at && c->rp.status == 0)
      conn_leave(c);
    else if (now >= c->deadline)
      conn_done(c, O_FAILED, F_TIMEOUT, NULL);
  }
}

/* Wait at most wait_s for events and handle them; then timers and the
 * once-a-second sample of the server. */
static void loop_once(double wait_s)
{
  struct epoll_event evs[256];
  int n, ms = (int)ceil(wait_s * 1e3);
  double now;

  n = epoll_wait(E.ep, evs, 256, ms < 0 ? 0 : ms);
  for (int i = 0; i < n; i++) {
    struct conn *c = &E.c[evs[i].data.u32];

    if (c->fd >= 0)
      on_event(c, evs[i].events);
  }
  now = bench_now();
  check_timers(now);
  if (now >= g_next_sample) {
    sample_now(now);
    g_next_sample = now + 1.0;
  }
}

static void engine_init(int slots)
{
  E.ep = epoll_create1(EPOLL_CLOEXEC);
  E.n = slots;
  E.c = calloc((size_t)slots, sizeof *E.c);
  E.free = calloc((size_t)slots, sizeof *E.free);
  if (E.ep < 0 || !E.c || !E.free) {
    fprintf(stderr, "soak: cannot set up epoll\n");
    exit(2);
  }
  for (int i = 0; i < slots; i++) {
    E.c[i].fd = -1;
    E.c[i].slot = i;
    E.free[i] = slots - 1 - i; /* slot 0 on top */
  }
  E.nfree = slots;
}

/* Every connection closed (none may be busy). */
static void close_all(void)
{
  for (int i = 0; i < E.n; i++)
    conn_close(&E.c[i], 0);
}

/* One request alone on an idle engine, to its end: 0 and *r filled (the
 * body in keep when given), or -1 (what went wrong in *how). */
static int one_request(struct kind *k, struct sb *keep, struct resp *r,
                       char *how, size_t howlen)
{
  struct phase ph = {.name = "one"};
  struct conn *c = &E.c[E.free[E.nfree - 1]]; /* the slot start() takes */

  if (keep)
    keep->n = 0;
  start(&ph, k, bench_now(), keep);
  while (E.busy)
    loop_once(0.05);
  *r = c->rp;
  c->ph = NULL;
  conn_close(c, 0); /* the idle count of descriptors stays exact */
  if (ph.nrec == 1 && ph.recs[0].outcome == O_ANSWERED) {
    free(ph.recs);
    return 0;
  }
  snprintf(how, howlen, "%s", ph.nfirsts ? ph.firsts[0] : "no answer");
  free(ph.recs);
  return -1;
}

/* ==== phases ============================================================= */

static void phase_begin(struct phase *ph, const char *name, double seconds)
{
  memset(ph, 0, sizeof *ph);
  ph->name = name;
  ph->seconds = seconds;
  ph->t0 = bench_now();
  ph->t_end = ph->t0 + seconds;
  ph->srv_cpu0 = srv_cpu_s();
  ph->cli_cpu0 = cli_cpu_s();
}

/* After the phase's last arrival: wait for what is in flight (each
 * request has its own deadline, so this ends). */
static void phase_finish(struct phase *ph)
{
  while (E.busy)
    loop_once(0.05);
  ph->t_done = bench_now();
  ph->srv_cpu1 = srv_cpu_s();
  ph->cli_cpu1 = cli_cpu_s();
}

/* Closed loop on `conns` connections: each sends the next request as soon
 * as the last one is over. */
static void run_closed(struct phase *ph, int conns, double seconds)
{
  phase_begin(ph, "capacity", seconds);
  E.nfree = 0;
  for (int i = conns - 1; i >= 0; i--)
    if (!E.c[i].k)
      E.free[E.nfree++] = i;
  for (;;) {
    double now = bench_now();

    if (now >= ph->t_end)
      break;
    while (E.nfree)
      start(ph, pick_kind(), bench_now(), NULL);
    loop_once(fmin(0.01, ph->t_end - now));
  }
  phase_finish(ph);
  E.nfree = 0; /* every slot free again, all of them this time */
  for (int i = E.n - 1; i >= 0; i--)
    E.free[E.nfree++] = i;
}

/* Open loop: Poisson arrivals at `rate` per second for `seconds`, each on
 * a free connection (waiting in a bounded backlog when none is free). */
static void run_open(struct phase *ph, double rate, double seconds,
                     long *rss_mid_kb, long *rss_end_kb)
{
  const size_t cap = 4 * (size_t)E.n;
  struct { struct kind *k; double t; } *backlog = calloc(cap, sizeof *backlog);
  size_t head = 0, len = 0;
  double next, mid;

  phase_begin(ph, "overload", seconds);
  next = ph->t0 - log(1.0 - rnd01()) / rate;
  mid = ph->t0 + seconds / 2;
  *rss_mid_kb = -1;
  for (;;) {
    double now = bench_now(), wait;

    if (now >= ph->t_end)
      break;
    if (*rss_mid_kb < 0 && now >= mid)
      *rss_mid_kb = rss_kb();
    for (; next <= now; next -= log(1.0 - rnd01()) / rate) {
      if (len == cap) {
        ph->shed++; /* the client cannot keep up: said in the report */
        continue;
      }
      backlog[(head + len++) % cap].k = pick_kind();
      backlog[(head + len - 1) % cap].t = next;
    }
    while (len && E.nfree) {
      start(ph, backlog[head].k, backlog[head].t, NULL);
      head = (head + 1) % cap;
      len--;
    }
    wait = len ? 0.001 : fmin(next, ph->t_end) - bench_now();
    loop_once(fmin(wait, 0.01));
  }
  *rss_end_kb = rss_kb();
  ph->shed += (long)len; /* arrivals never sent before the end */
  free(backlog);
  phase_finish(ph);
}

/* ==== the server's own account: /metrics ================================ */

/* The sum of every sample of metric `name` (all label sets), or -1. */
static double metric_sum(const char *text, const char *name)
{
  size_t n = strlen(name);
  double sum = -1;

  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (strncmp(p, name, n) == 0 && (p[n] == ' ' || p[n] == '{')) {
      const char *v = p[n] == '{' ? strchr(p, '}') : p + n;

      if (v) {
        v += v[0] == '}';
        sum = (sum < 0 ? 0 : sum) + strtod(v, NULL);
      }
    }
  }
  return sum;
}

struct metrics {
  double inflight, queue, kept, rejected;
  char rejected_text[1024]; /* reason=value pairs */
};

static int get_metrics(struct metrics *m)
{
  struct sb body = {0};
  struct resp r;
  char how[256];
  struct kind *k = kind_named("metrics");
  int rc = one_request(k, &body, &r, how, sizeof how);

  memset(m, 0, sizeof *m);
  if (rc == 0 && r.status == 200 && body.p) {
    const char *p = body.p;
    size_t at = 0;

    /* Less one: the /metrics request itself is in flight as it answers. */
    m->inflight = metric_sum(body.p, "attnbias_inflight_requests") - 1;
    m->queue = metric_sum(body.p, "attnbias_queue_depth");
    m->kept = metric_sum(body.p, "attnbias_memory_kept_bytes");
    m->rejected = metric_sum(body.p, "attnbias_rejected_total");
    while ((p = strstr(p, "attnbias_rejected_total{reason=\"")) != NULL) {
      const char *q = p + 32, *e = strchr(q, '"'), *v = strchr(q, '}');

      if (e && v && at < sizeof m->rejected_text - 64)
        at += (size_t)snprintf(m->rejected_text + at,
                               sizeof m->rejected_text - at, "%s%.*s=%g",
                               at ? ", " : "", (int)(e - q), q,
                               strtod(v + 1, NULL));
      p = q;
    }
  } else {
    rc = -1;
  }
  free(body.p);
  return rc;
}

/* ==== health: answers against float64 references computed here ========== */

/* The float32 array of a .npy answer: its data, count and shape (rank up
 * to 4), or NULL when it is not a little-endian float32 .npy. */
static const float *npy_data(const struct sb *b, size_t *count, int *rank,
                             int64_t *shape)
{
  const char *p = b->p, *sh;
  size_t hl, off;

  if (!p || b->n < 10 || memcmp(p, "\x93NUMPY", 6) != 0)
    return NULL;
  if (p[6] == 1) {
    hl = (unsigned char)p[8] | (size_t)(unsigned char)p[9] << 8;
    off = 10;
  } else {
    if (b->n < 12)
      return NULL;
    hl = (unsigned char)p[8] | (size_t)(unsigned char)p[9] << 8 |
         (size_t)(unsigned char)p[10] << 16 | (size_t)(unsigned char)p[11] << 24;
    off = 12;
  }
  if (off + hl > b->n || !memmem(p + off, hl, "'<f4'", 5) ||
      !(sh = memmem(p + off, hl, "'shape': (", 10)))
    return NULL;
  *count = 1;
  *rank = 0;
  for (sh += 10; *rank < 4 && *sh >= '0' && *sh <= '9';) {
    char *e;

    shape[*rank] = strtoll(sh, &e, 10);
    *count *= (size_t)shape[(*rank)++];
    sh = e + strspn(e, ", ");
  }
  if (off + hl + *count * 4 != b->n)
    return NULL;
  return (const float *)(p + off + hl); /* npy data is 64-byte aligned */
}

/* Ask k (an .npy answer) and compare it with want[] of `count` values,
 * within tol (absolute, plus tol relative): NULL when it matches, else
 * what differed. */
static const char *check_npy(struct kind *k, const double *want, size_t count,
                             double tol, char *why, size_t whylen)
{
  struct sb body = {0};
  struct resp r;
  int64_t shape[4];
  size_t n = 0;
  int rank = 0;
  const float *got;
  const char *res = NULL;

  make_wire(k, g_port);
  if (one_request(k, &body, &r, why, whylen) != 0 || r.status != 200) {
    if (r.status && r.status != 200)
      snprintf(why, whylen, "%s answered %d: %.150s", k->name, r.status,
               body.p ? body.p : "");
    res = why;
  } else if (!(got = npy_data(&body, &n, &rank, shape)) || n != count) {
    snprintf(why, whylen, "%s: not a float32 .npy of %zu values", k->name,
             count);
    res = why;
  } else {
    for (size_t i = 0; i < n && !res; i++)
      if (!(fabs((double)got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
        snprintf(why, whylen, "%s: value %zu is %.9g, float64 says %.9g",
                 k->name, i, (double)got[i], want[i]);
        res = why;
      }
  }
  free(body.p);
  free(k->wire);
  k->wire = NULL;
  return res;
}

/* ALiBi [4, 8, 8]: head h's slope is 2^(-8 (h + 1) / 4) (max_bias 8), the
 * table -slope * |i - j|. */
static const char *check_alibi(char *why, size_t whylen)
{
  struct kind k = {.name = "alibi check", .method = "POST",
                   .path = "/v1/bias", .ctype = JSON, .accept = NPY};
  static const char body[] =
      "{\"method\": \"alibi\", \"num_heads\": 4, \"q_len\": 8, \"k_len\": 8}";
  double want[4 * 8 * 8];

  k.body = (char *)body;
  k.blen = sizeof body - 1;
  for (int h = 0; h < 4; h++)
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 8; j++)
        want[(h * 8 + i) * 8 + j] =
            -pow(2.0, -8.0 * (h + 1) / 4) * fabs((double)(i - j));
  return check_npy(&k, want, 4 * 8 * 8, 1e-6, why, whylen);
}

/* Sinusoidal [16, 8], interleaved: PE[p][2i] = sin(p / 10000^(2i/8)),
 * PE[p][2i+1] = cos of the same. */
static const char *check_sinusoidal(char *why, size_t whylen)
{
  struct kind k = {.name = "sinusoidal check", .method = "POST",
                   .path = "/v1/encodings", .ctype = JSON, .accept = NPY};
  static const char body[] =
      "{\"method\": \"sinusoidal\", \"positions\": 16, \"dim\": 8}";
  double want[16 * 8];

  k.body = (char *)body;
  k.blen = sizeof body - 1;
  for (int p = 0; p < 16; p++)
    for (int i = 0; i < 4; i++) {
      double a = p / pow(10000.0, 2.0 * i / 8);

      want[p * 8 + 2 * i] = sin(a);
      want[p * 8 + 2 * i + 1] = cos(a);
    }
  return check_npy(&k, want, 16 * 8, 2e-6, why, whylen);
}

/* Causal attention over q, k, v [1, 2, 16, 8] sent as safetensors:
 * softmax(q k^T / sqrt(8)) v with key j visible to query i when j <= i. */
static const char *check_attention(char *why, size_t whylen)
{
  enum { H = 2, N = 16, D = 8 };
  struct kind k = {.name = "attention check", .method = "POST",
                   .path = "/v1/attention", .ctype = ST, .accept = NPY};
  float x[3 * H * N * D];
  double want[H * N * D];
  const float *q = x, *kk = x + H * N * D, *v = x + 2 * H * N * D;
  struct bench_st_tensor t[3] = {{"q", q, 4, {1, H, N, D}},
                                 {"k", kk, 4, {1, H, N, D}},
                                 {"v", v, 4, {1, H, N, D}}};
  const char *res;

  bench_fill(x, 3 * H * N * D, 99, 1.0f);
  k.body = bench_safetensors(t, 3, "{\"causal\": true}", &k.blen);
  if (!k.body)
    return "out of memory";
  for (int h = 0; h < H; h++)
    for (int i = 0; i < N; i++) {
      double s[N], mx = -INFINITY, sum = 0;

      for (int j = 0; j <= i; j++) {
        s[j] = 0;
        for (int d = 0; d < D; d++)
          s[j] += (double)q[(h * N + i) * D + d] * kk[(h * N + j) * D + d];
        s[j] /= sqrt((double)D);
        mx = fmax(mx, s[j]);
      }
      for (int j = 0; j <= i; j++)
        sum += s[j] = exp(s[j] - mx);
      for (int d = 0; d < D; d++) {
        double o = 0;

        for (int j = 0; j <= i; j++)
          o += s[j] / sum * v[(h * N + j) * D + d];
        want[(h * N + i) * D + d] = o;
      }
    }
  res = check_npy(&k, want, H * N * D, 1e-5, why, whylen);
  free(k.body);
  return res;
}

/* ==== steps ============================================================== */

/* Each request of the mix twice on the idle server; 0, or -1 with the
 * reason printed (the soak cannot judge answers it has no reference for). */
static int reference(void)
{
  for (int i = 0; i < g_nkinds; i++) {
    struct kind *k = &g_kinds[i];
    enum leave leave = k->leave;
    uint64_t d[2] = {0, 0}, len[2] = {0, 0};
    char how[256];

    if (leave == LEAVE_BODY)
      continue; /* never answered: nothing to compare */
    k->leave = STAY;
    for (int rep = 0; rep < 2; rep++) {
      struct sb body = {0};
      struct resp r;

      if (one_request(k, &body, &r, how, sizeof how) != 0 || r.status != 200) {
        printf("soak: %s %s on the idle server: %s\n", k->method, k->path,
               r.status ? "" : how);
        if (r.status)
          printf("  answered %d: %.300s\n", r.status, body.p ? body.p : "");
        free(body.p);
        return -1;
      }
      d[rep] = r.digest;
      len[rep] = r.body_len;
      snprintf(k->rtype, sizeof k->rtype, "%s", r.ctype);
      free(body.p);
    }
    k->leave = leave;
    k->checked = d[0] == d[1] && len[0] == len[1];
    k->digest = d[0];
    k->rlen = len[0];
  }
  return 0;
}

/* The health step: its failures, described, into why (empty: healthy). */
static void health(struct sb *why)
{
  char one[400];
  const char *e;
  struct resp r;

  if (one_request(kind_named("healthz"), NULL, &r, one, sizeof one) != 0 ||
      r.status != 200)
    sb_printf(why, "/healthz: %s; ", r.status ? "not 200" : one);
  if ((e = check_alibi(one, sizeof one)))
    sb_printf(why, "%s; ", e);
  if ((e = check_sinusoidal(one, sizeof one)))
    sb_printf(why, "%s; ", e);
  if ((e = check_attention(one, sizeof one)))
    sb_printf(why, "%s; ", e);
  for (int i = 0; i < g_nkinds; i++) {
    struct kind *k = &g_kinds[i];
    enum leave leave = k->leave;

    if (leave == LEAVE_BODY)
      continue;
    k->leave = STAY;
    if (one_request(k, NULL, &r, one, sizeof one) != 0)
      sb_printf(why, "%s after the load: %s; ", k->name, one);
    else if (r.status != 200)
      sb_printf(why, "%s after the load: status %d; ", k->name, r.status);
    else if (k->checked && (r.digest != k->digest || r.body_len != k->rlen))
      sb_printf(why, "%s after the load: other bytes than before; ", k->name);
    k->leave = leave;
  }
}

/* Poll until the server holds at most `idle` descriptors; seconds it took,
 * or -1 if still more after --settle-timeout (*last: the final count). */
static double wait_fds(int idle, int *last)
{
  double t0 = bench_now();

  for (;;) {
    *last = fd_count();
    if (*last >= 0 && *last <= idle)
      return bench_now() - t0;
    if (bench_now() - t0 > opt.settle_timeout)
      return -1;
    usleep(20000);
  }
}

/* /metrics once no request is in flight or queued, or the last reading
 * after opt.settle_timeout.  A client that left mid-compute has closed its
 * connection, but its call keeps its --max-queue slot until the kernel it
 * runs returns (seconds on a sanitized build or a loaded machine): the
 * descriptors settle before the queue does.  Returns get_metrics'. */
static int wait_metrics_idle(struct metrics *m)
{
  double t0 = bench_now();
  int rc;

  for (;;) {
    rc = get_metrics(m);
    if (rc == 0 && m->inflight == 0 && m->queue == 0)
      return 0;
    if (bench_now() - t0 > opt.settle_timeout)
      return rc;
    usleep(20000);
  }
}

/* ==== the server it starts =============================================== */

static char g_tmp[64];
static char g_srv_err[128];
static char g_perip_flag[64]; /* the server's per-address connection cap */

/* The server's flag capping connections per client address, if its --help
 * lists one (the soak's 256 connections all come from 127.0.0.1). */
static void find_perip_flag(void)
{
  char out[128], err[128], *text, *p;
  char *argv[] = {(char *)opt.server, "--help", NULL};
  int status;
  pid_t pid;

  snprintf(out, sizeof out, "%s/help.out", g_tmp);
  snprintf(err, sizeof err, "%s/help.err", g_tmp);
  pid = bench_spawn(argv, out, err);
  if (pid < 0 || !bench_wait(pid, 10, &status))
    return;
  bench_child_remove(pid);
  text = bench_slurp(out, NULL);
  for (p = text; p && (p = strstr(p, "--")); p += 2) {
    size_t n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");

    if (n < sizeof g_perip_flag - 2 && memmem(p + 2, n, "per-ip", 6)) {
      snprintf(g_perip_flag, sizeof g_perip_flag, "--%.*s", (int)n, p + 2);
      break;
    }
  }
  free(text);
  unlink(out);
  unlink(err);
}

static char g_srv_args[1024]; /* as given, for the report */

static int start_server(void)
{
  char *argv[48], out[128], perip[16];
  int n = 0;
  double end;

  snprintf(g_tmp, sizeof g_tmp, "/tmp/attnbias-soak.XXXXXX");
  if (!mkdtemp(g_tmp)) {
    fprintf(stderr, "soak: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  find_perip_flag();
  argv[n++] = (char *)opt.server;
  argv[n++] = "--host";
  argv[n++] = "127.0.0.1";
  argv[n++] = "--port";
  argv[n++] = "0";
  if (g_perip_flag[0]) {
    /* Room for every connection of the soak twice over: the server may
     * still count one whose client has gone. */
    snprintf(perip, sizeof perip, "%d", 2 * opt.connections + 16);
    argv[n++] = g_perip_flag;
    argv[n++] = perip;
  }
  for (int i = 0; i < opt.nextra; i++)
    argv[n++] = (char *)opt.extra[i];
  argv[n] = NULL;
  for (int i = 1, at = 0; i < n && at < (int)sizeof g_srv_args - 1; i++)
    at += snprintf(g_srv_args + at, sizeof g_srv_args - (size_t)at, "%s%s",
                   i > 1 ? " " : "", argv[i]);
  snprintf(out, sizeof out, "%s/attnbiasd.out", g_tmp);
  snprintf(g_srv_err, sizeof g_srv_err, "%s/attnbiasd.err", g_tmp);
  g_srv_pid = bench_spawn(argv, out, g_srv_err);
  if (g_srv_pid < 0) {
    fprintf(stderr, "soak: cannot start %s: %s\n", opt.server, strerror(errno));
    return -1;
  }
  for (end = bench_now() + 30; !g_port && bench_now() < end;) {
    char *text = bench_slurp(out, NULL);
    int status;

    g_port = text ? bench_parse_port(text) : 0;
    free(text);
    if (!g_port && waitpid(g_srv_pid, &status, WNOHANG) == g_srv_pid) {
      char *e = bench_slurp(g_srv_err, NULL);

      fprintf(stderr, "soak: %s exited at start: %.500s\n", opt.server,
              e ? e : "");
      free(e);
      bench_child_remove(g_srv_pid);
      g_srv_pid = 0;
      return -1;
    }
    if (!g_port)
      usleep(20000);
  }
  if (!g_port) {
    fprintf(stderr, "soak: %s printed no port within 30 s\n", opt.server);
    return -1;
  }
  unlink(out);
  return 0;
}

static void remove_tmp(int keep_log)
{
  if (!g_tmp[0])
    return;
  if (keep_log) {
    printf("server log kept: %s\n", g_srv_err);
    return;
  }
  unlink(g_srv_err);
  rmdir(g_tmp);
}

/* ==== the report ========================================================= */

static int cmp_float(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;

  return (x > y) - (x < y);
}

/* What quantile() takes the quantile of. */
enum field { SERVICE, RESPONSE, READ, QUEUE, COMPUTE };

static float rec_field(const struct rec *r, enum field f)
{
  return f == SERVICE ? r->service_ms
         : f == RESPONSE ? r->response_ms
                         : r->timing[f - READ];
}

/* The q-quantile of a field of the 200s (ms), over those that have it;
 * NaN if none.  kind < 0: every kind. */
static double quantile(const struct phase *ph, int kind, enum field field,
                       double q)
{
  float *v = malloc((ph->nrec + 1) * sizeof *v);
  size_t n = 0;
  double res = NAN;

  for (size_t i = 0; v && i < ph->nrec; i++) {
    const struct rec *r = &ph->recs[i];

    if (r->outcome == O_ANSWERED && r->status == 200 &&
        (kind < 0 || r->kind == kind) && !isnan(rec_field(r, field)))
      v[n++] = rec_field(r, field);
  }
  if (n) {
    qsort(v, n, sizeof *v, cmp_float);
    res = v[(size_t)fmin((double)n - 1, floor(q * (double)n))];
  }
  free(v);
  return res;
}

struct counts {
  long n, ok, busy, left, failed, fail[F_COUNT], other_status[600];
};

static void count(const struct phase *ph, int kind, struct counts *c)
{
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < ph->nrec; i++) {
    const struct rec *r = &ph->recs[i];

    if (kind >= 0 && r->kind != kind)
      continue;
    c->n++;
    if (r->outcome == O_LEFT)
      c->left++;
    else if (r->outcome == O_FAILED) {
      c->failed++;
      c->fail[r->fail]++;
      if (r->fail == F_STATUS && r->status >= 100 && r->status < 600)
        c->other_status[r->status]++;
    } else if (r->status == 200)
      c->ok++;
    else
      c->busy++;
  }
}

/* The work done per second: requests answered 200 or left by their
 * clients (the server worked on them too; a 503 costs it next to nothing),
 * counting those that ended within the phase's seconds, not the ones in
 * flight when it stopped issuing. */
static double finished_rate(const struct phase *ph)
{
  long n = 0;

  for (size_t i = 0; i < ph->nrec; i++) {
    const struct rec *r = &ph->recs[i];

    n += (r->outcome == O_LEFT ||
          (r->outcome == O_ANSWERED && r->status == 200)) &&
         r->done_s <= ph->seconds;
  }
  return (double)n / ph->seconds;
}

/* Cores the server (or this client) used from the phase's start to the
 * end of its last request. */
static double cores(const struct phase *ph, int server)
{
  double dt = ph->t_done - ph->t0;

  if (!(dt > 0))
    return NAN;
  return (server ? ph->srv_cpu1 - ph->srv_cpu0 : ph->cli_cpu1 - ph->cli_cpu0) /
         dt;
}

/* A number, or null when there is none (NaN: no 200 to take a quantile
 * of). */
static void json_num(FILE *f, const char *key, double v)
{
  if (isfinite(v))
    fprintf(f, "\"%s\": %.3f", key, v);
  else
    fprintf(f, "\"%s\": null", key);
}

static void json_phase(FILE *f, const struct phase *ph)
{
  struct counts c;
  int first = 1;

  count(ph, -1, &c);
  fprintf(f, "    \"%s\": {\"seconds\": %.3f, \"issued\": %ld, "
             "\"answered_200\": %ld, \"answered_503\": %ld, \"left\": %ld, "
             "\"failed\": %ld, \"shed_by_client\": %ld, "
             "\"idle_connections_closed_by_server\": %ld,\n",
          ph->name, ph->seconds, ph->issued, c.ok, c.busy, c.left, c.failed,
          ph->shed, ph->idle_closed);
  fprintf(f, "      \"failures\": {");
  for (int i = 1; i < F_COUNT; i++)
    if (c.fail[i]) {
      fprintf(f, "%s\"%s\": %ld", first ? "" : ", ", g_fail_names[i],
              c.fail[i]);
      first = 0;
    }
  fprintf(f, "}, \"other_statuses\": {");
  first = 1;
  for (int s = 100; s < 600; s++)
    if (c.other_status[s]) {
      fprintf(f, "%s\"%d\": %ld", first ? "" : ", ", s, c.other_status[s]);
      first = 0;
    }
  fprintf(f, "},\n      ");
  json_num(f, "p50_ms", quantile(ph, -1, SERVICE, 0.5));
  fprintf(f, ", ");
  json_num(f, "p99_ms", quantile(ph, -1, SERVICE, 0.99));
  fprintf(f, ", ");
  json_num(f, "p50_from_arrival_ms", quantile(ph, -1, RESPONSE, 0.5));
  fprintf(f, ", ");
  json_num(f, "p99_from_arrival_ms", quantile(ph, -1, RESPONSE, 0.99));
  fprintf(f, ", ");
  json_num(f, "max_ms", quantile(ph, -1, SERVICE, 1.0));
  fprintf(f, ", \"max_wait_for_connection_ms\": %.3f,\n", ph->lag_max * 1e3);
  fprintf(f, "      \"seconds_to_last_answer\": %.3f, \"server_cores\": %.3f, "
             "\"client_cores\": %.3f,\n",
          ph->t_done - ph->t0, cores(ph, 1), cores(ph, 0));
  fprintf(f, "      \"by_request\": {");
  for (int k = 0; k < g_nkinds; k++) {
    struct counts kc;

    count(ph, k, &kc);
    fprintf(f, "%s\n        \"%s\": {\"issued\": %ld, \"200\": %ld, "
               "\"503\": %ld, \"left\": %ld, \"failed\": %ld, ",
            k ? "," : "", g_kinds[k].name, kc.n, kc.ok, kc.busy, kc.left,
            kc.failed);
    json_num(f, "p50_ms", quantile(ph, k, SERVICE, 0.5));
    fprintf(f, ", ");
    json_num(f, "p99_ms", quantile(ph, k, SERVICE, 0.99));
    for (int t = 0; t < 3; t++) {
      char key[32];

      snprintf(key, sizeof key, "p50_server_%s_ms", g_timing_names[t]);
      fprintf(f, ", ");
      json_num(f, key, quantile(ph, k, READ + t, 0.5));
    }
    fprintf(f, "}");
  }
  fprintf(f, "},\n      \"first_failures\": [");
  for (int i = 0; i < ph->nfirsts; i++) {
    fprintf(f, "%s\"", i ? ", " : "");
    for (const char *p = ph->firsts[i]; *p; p++)
      fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    fprintf(f, "\"");
  }
  fprintf(f, "]}");
}

static void print_phase(const struct phase *ph)
{
  struct counts c;

  count(ph, -1, &c);
  printf("%-9s %6.1f %8ld %8.0f %8ld %8ld %6ld %6ld %6ld %8.2f %8.2f %5.2f %5.2f\n",
         ph->name, ph->seconds, ph->issued, (double)ph->issued / ph->seconds,
         c.ok, c.busy, c.left, c.failed, ph->shed, quantile(ph, -1, SERVICE, 0.5),
         quantile(ph, -1, SERVICE, 0.99), cores(ph, 1), cores(ph, 0));
}

static void print_failures(const struct phase *ph)
{
  struct counts c;

  count(ph, -1, &c);
  if (!c.failed)
    return;
  printf("  %s failures:", ph->name);
  for (int i = 1; i < F_COUNT; i++)
    if (c.fail[i])
      printf(" %s %ld", g_fail_names[i], c.fail[i]);
  for (int s = 100; s < 600; s++)
    if (c.other_status[s])
      printf(" (status %d: %ld)", s, c.other_status[s]);
  printf("\n");
  for (int i = 0; i < ph->nfirsts; i++)
    printf("    %s\n", ph->firsts[i]);
}

/* ==== main =============================================================== */

struct result {
  struct phase cap, over;
  double load_start, load_end;
  int cores;
  double capacity, target;
  long rss_idle, rss_start, rss_mid, rss_end, rss_after, rss_max;
  /* The rule compares medians of the samples of a window before the
   * middle and before the end: a single reading lands on whatever the
   * requests in flight hold at that instant (a 6 MiB body more or less),
   * or just after the allocator gave memory back. */
  long rss_mid_med, rss_end_med;
  double rss_window;
  int fds_idle, fds_max, fds_after;
  double fds_settle_s;
  struct metrics m_before, m_after;
  int metrics_ok;
  struct sb health;
  int exit_status; /* the started server's, after SIGTERM; -2: not ours */
  int rss_judged;
  double rss_drift;
  int pass;
  struct sb why;
};

static void verdict(struct result *R)
{
  struct counts c1, c2;

  count(&R->cap, -1, &c1);
  count(&R->over, -1, &c2);
  if (c1.failed || c2.failed)
    sb_printf(&R->why, "%ld failed requests; ", c1.failed + c2.failed);
  if (R->cap.unsolicited || R->over.unsolicited)
    sb_printf(&R->why, "bytes on idle connections; ");
  if (R->rss_judged && fabs(R->rss_drift) > RSS_FLAT)
    sb_printf(&R->why, "RSS moved %+.1f %% from the middle to the end "
                         "(medians of %.0f s); ",
              100 * R->rss_drift, R->rss_window);
  if (R->fds_settle_s < 0)
    sb_printf(&R->why, "descriptors: %d after the load, %d idle; ",
              R->fds_after, R->fds_idle);
  if (!R->metrics_ok)
    sb_printf(&R->why, "/metrics after the load did not answer; ");
  else if (R->m_after.inflight != 0 || R->m_after.queue != 0)
    sb_printf(&R->why, "after the load: %g requests in flight, %g queued; ",
              R->m_after.inflight, R->m_after.queue);
  if (R->health.n)
    sb_printf(&R->why, "%s", R->health.p);
  if (R->exit_status != -2 && R->exit_status != 0)
    sb_printf(&R->why, "the server's exit status after SIGTERM was %d; ",
              R->exit_status);
  R->pass = R->why.n == 0;
}

static void write_json(const struct result *R)
{
  FILE *f = fopen(opt.out, "w");

  if (!f) {
    fprintf(stderr, "soak: cannot write %s: %s\n", opt.out, strerror(errno));
    return;
  }
  fprintf(f, "{\n  \"pass\": %s,\n  \"why\": \"", R->pass ? "true" : "false");
  for (const char *p = R->why.p ? R->why.p : ""; *p; p++)
    fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
  fprintf(f, "\",\n  \"server\": {\"binary\": \"%s\", \"args\": \"%s\", "
             "\"per_ip_flag\": \"%s\"},\n",
          opt.server ? opt.server : "", g_srv_args, g_perip_flag);
  fprintf(f, "  \"machine\": {\"cores\": %d, \"loadavg_1min_start\": %.2f, "
             "\"loadavg_1min_end\": %.2f},\n",
          R->cores, R->load_start, R->load_end);
  fprintf(f, "  \"connections\": %d, \"seconds\": %g, \"factor\": %g, "
             "\"capacity_connections\": %d, \"capacity_seconds\": %g, "
             "\"seed\": %llu,\n",
          opt.connections, opt.seconds, opt.factor, opt.cap_connections,
          opt.cap_seconds, (unsigned long long)opt.seed);
  fprintf(f, "  \"capacity_rps\": %.1f, \"offered_rps_target\": %.1f, "
             "\"offered_rps\": %.1f, \"done_rps_in_overload\": %.1f,\n",
          R->capacity, R->target, (double)R->over.issued / R->over.seconds,
          finished_rate(&R->over));
  fprintf(f, "  \"phases\": {\n");
  json_phase(f, &R->cap);
  fprintf(f, ",\n");
  json_phase(f, &R->over);
  fprintf(f, "\n  },\n");
  fprintf(f, "  \"rss_kb\": {\"idle\": %ld, \"start\": %ld, \"middle\": %ld, "
             "\"end\": %ld, \"after\": %ld, \"max\": %ld, "
             "\"window_s\": %.1f, \"middle_median\": %ld, "
             "\"end_median\": %ld, \"end_vs_middle\": %.4f, "
             "\"judged\": %s},\n",
          R->rss_idle, R->rss_start, R->rss_mid, R->rss_end, R->rss_after,
          R->rss_max, R->rss_window, R->rss_mid_med, R->rss_end_med,
          R->rss_drift, R->rss_judged ? "true" : "false");
  fprintf(f, "  \"fds\": {\"idle\": %d, \"max\": %d, \"after\": %d, "
             "\"back_to_idle_s\": %.3f},\n",
          R->fds_idle, R->fds_max, R->fds_after, R->fds_settle_s);
  fprintf(f, "  \"server_metrics_after\": {\"inflight\": %g, \"queue_depth\": "
             "%g, \"memory_kept_bytes\": %g, \"rejected_during_soak\": %g, "
             "\"rejected_by_reason\": \"%s\"},\n",
          R->m_after.inflight, R->m_after.queue, R->m_after.kept,
          R->m_after.rejected - R->m_before.rejected,
          R->m_after.rejected_text);
  fprintf(f, "  \"healthy_after\": %s, \"server_exit_status\": %d,\n",
          R->health.n ? "false" : "true", R->exit_status);
  fprintf(f, "  \"samples\": [");
  for (int i = 0; i < g_nsamples; i++)
    fprintf(f, "%s[%.1f, %ld, %d]", i ? ", " : "", (double)g_samples[i].t,
            g_samples[i].rss_kb, g_samples[i].fds);
  fprintf(f, "]\n}\n");
  fclose(f);
}

static void print_report(const struct result *R)
{
  struct counts c;

  printf("\n%-9s %6s %8s %8s %8s %8s %6s %6s %6s %8s %8s %5s %5s\n", "phase",
         "s", "issued", "req/s", "200", "503", "left", "failed", "shed",
         "p50 ms", "p99 ms", "srv", "cli");
  print_phase(&R->cap);
  print_phase(&R->over);
  printf("(p50/p99: the 200s, from taking a connection to the answer's last "
         "byte; srv/cli: cores used by the server and by this client)\n");
  count(&R->over, -1, &c);
  printf("\nmachine: %d cores, load average %.1f at the start, %.1f at the "
         "end (the soak's own load included)\n",
         R->cores, R->load_start, R->load_end);
  printf("capacity %.0f req/s; offered %.0f req/s (target %.1fx = %.0f), "
         "%ld connections, %.0f s; answered 200 or left under overload "
         "%.0f req/s (%.0f %% of capacity)\n",
         R->capacity, (double)R->over.issued / R->over.seconds,
         R->capacity > 0 ? R->target / R->capacity : 0, R->target, (long)opt.connections, opt.seconds,
         finished_rate(&R->over),
         R->capacity > 0 ? 100 * finished_rate(&R->over) / R->capacity : 0.0);
  printf("overload answers: 200 %ld, 503 %ld (Retry-After on all of them: "
         "%s), left on purpose %ld, failed %ld\n",
         c.ok, c.busy, c.fail[F_NO_RETRY] ? "no" : "yes", c.left, c.failed);
  printf("200s: p50 %.2f ms, p99 %.2f ms, max %.2f ms (from arrival: p50 "
         "%.2f, p99 %.2f); longest wait for a free connection %.1f ms\n",
         quantile(&R->over, -1, SERVICE, 0.5), quantile(&R->over, -1, SERVICE, 0.99),
         quantile(&R->over, -1, SERVICE, 1.0), quantile(&R->over, -1, RESPONSE, 0.5),
         quantile(&R->over, -1, RESPONSE, 0.99), R->over.lag_max * 1e3);
  print_failures(&R->cap);
  print_failures(&R->over);
  printf("server RSS: idle %.1f MiB; overload start %.1f, middle %.1f, end "
         "%.1f MiB; max %.1f; after the load %.1f MiB\n",
         R->rss_idle / 1024.0, R->rss_start / 1024.0, R->rss_mid / 1024.0,
         R->rss_end / 1024.0, R->rss_max / 1024.0, R->rss_after / 1024.0);
  printf("  medians of the %.0f s before the middle and the end: %.1f -> "
         "%.1f MiB, %+.1f %% (%s)\n",
         R->rss_window, R->rss_mid_med / 1024.0, R->rss_end_med / 1024.0,
         100 * R->rss_drift,
         !R->rss_judged ? "not judged: a run under 30 s is all warm-up"
         : fabs(R->rss_drift) <= RSS_FLAT ? "flat: within 5 %"
                                          : "NOT flat: over 5 %");
  printf("server descriptors: idle %d, max %d, after the load %d (%s)\n",
         R->fds_idle, R->fds_max, R->fds_after,
         R->fds_settle_s >= 0 ? "back to idle" : "NOT back to idle");
  if (R->metrics_ok)
    printf("server after the load: %g in flight, %g queued, %.1f MiB kept; "
           "rejected during the soak: %g (%s)\n",
           R->m_after.inflight, R->m_after.queue, R->m_after.kept / 1048576.0,
           R->m_after.rejected - R->m_before.rejected,
           R->m_after.rejected_text[0] ? R->m_after.rejected_text : "none");
  printf("health after the load: %s\n",
         R->health.n ? R->health.p
                     : "/healthz 200; ALiBi, sinusoidal and attention answers "
                       "match float64; every request of the mix answers the "
                       "same bytes as before the load");
  if (R->exit_status != -2)
    printf("server exit status after SIGTERM: %d\n", R->exit_status);
  printf("\nper request (overload); ms of the 200s: p50, p99, and the p50 of "
         "the server's own read / queue / compute (Server-Timing)\n");
  printf("  %-19s %6s %6s %6s %5s %6s %8s %8s %8s %8s %8s\n", "", "issued",
         "200", "503", "left", "failed", "p50", "p99", "read", "queue",
         "compute");
  for (int k = 0; k < g_nkinds; k++) {
    struct counts kc;
    enum field fields[5] = {SERVICE, SERVICE, READ, QUEUE, COMPUTE};
    double qs[5] = {0.5, 0.99, 0.5, 0.5, 0.5};

    count(&R->over, k, &kc);
    printf("  %-19s %6ld %6ld %6ld %5ld %6ld", g_kinds[k].name, kc.n, kc.ok,
           kc.busy, kc.left, kc.failed);
    for (int f = 0; f < 5; f++) {
      double v = quantile(&R->over, k, fields[f], qs[f]);

      if (isfinite(v))
        printf(" %8.1f", v);
      else
        printf(" %8s", "-");
    }
    printf("%s\n", g_kinds[k].checked || g_kinds[k].leave == LEAVE_BODY
                       ? ""
                       : "  (answers vary: not compared)");
  }
  printf("\n%s%s\n", R->pass ? "PASS" : "FAIL: ", R->pass ? "" : R->why.p);
}

/* Everything main() and the mix hold (a leak checker then sees none). */
static void free_all(struct result *R)
{
  free(R->cap.recs);
  free(R->over.recs);
  free(R->health.p);
  free(R->why.p);
  for (int i = 0; i < g_nkinds; i++) {
    free(g_kinds[i].body);
    free(g_kinds[i].wire);
  }
  if (E.c) {
    close_all();
    close(E.ep);
  }
  free(E.c);
  free(E.free);
}

/* Steps 2 to 5: capacity, overload, settle, health. */
static void soak(struct result *R)
{
  printf("capacity: %d connections, closed loop, %.0f s ...\n",
         opt.cap_connections, opt.cap_seconds);
  g_next_sample = bench_now();
  run_closed(&R->cap, opt.cap_connections, opt.cap_seconds);
  R->capacity = finished_rate(&R->cap);
  /* A fixed rate compares two servers (or two builds) on a machine whose
   * measured capacity moves from run to run. */
  R->target = opt.rate > 0 ? opt.rate : opt.factor * R->capacity;
  printf("capacity: %.0f requests/s finished\n", R->capacity);

  printf("overload: %d connections, %.0f req/s offered for %.0f s ...\n",
         opt.connections, R->target, opt.seconds);
  R->rss_start = rss_kb();
  run_open(&R->over, R->target > 0 ? R->target : 1, opt.seconds, &R->rss_mid,
           &R->rss_end);
  {
    double t0 = R->over.t0 - g_t_origin, mid = t0 + opt.seconds / 2,
           end = t0 + opt.seconds;

    R->rss_window = fmin(10.0, opt.seconds / 6);
    R->rss_mid_med = rss_median(mid - R->rss_window, mid);
    R->rss_end_med = rss_median(end - R->rss_window, end);
  }
  R->rss_judged = opt.seconds >= 30;
  R->rss_drift = R->rss_mid_med > 0 ? (double)(R->rss_end_med - R->rss_mid_med) /
                                          R->rss_mid_med
                                    : 0;

  close_all();
  R->fds_settle_s = wait_fds(R->fds_idle, &R->fds_after);
  R->metrics_ok = wait_metrics_idle(&R->m_after) == 0;
  health(&R->health);
  R->rss_after = rss_kb();
  R->rss_max = R->rss_start > R->rss_end ? R->rss_start : R->rss_end;
  for (int i = 0; i < g_nsamples; i++) {
    if (g_samples[i].rss_kb > R->rss_max)
      R->rss_max = g_samples[i].rss_kb;
    if (g_samples[i].fds > R->fds_max)
      R->fds_max = g_samples[i].fds;
  }
  /* The health step's connections must be gone too. */
  if (R->fds_settle_s >= 0 && wait_fds(R->fds_idle, &R->fds_after) < 0)
    R->fds_settle_s = -1;
}

int main(int argc, char **argv)
{
  struct result R;
  struct rlimit rl;
  cpu_set_t cpus;
  int varying = 0, rc = 2;

  memset(&R, 0, sizeof R);
  parse_opts(argc, argv);
  bench_children_guard();
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_rng = opt.seed * 0x9E3779B97F4A7C15ull;
  g_t_origin = bench_now();
  R.exit_status = -2;
  R.load_start = loadavg();
  R.cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                         : -1;
  /* Room for every client socket (and the server's, when it is ours). */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  build_mix();
  if (opt.server && start_server() != 0)
    goto out;
  if (!opt.server) {
    g_port = opt.port;
    g_srv_pid = opt.pid;
  }
  /* Before the soak's first connection: the server's idle state. */
  R.fds_idle = fd_count();
  R.rss_idle = rss_kb();
  if (R.fds_idle < 0 || R.rss_idle < 0) {
    fprintf(stderr, "soak: cannot read /proc/%d\n", (int)g_srv_pid);
    goto out;
  }
  for (int i = 0; i < g_nkinds; i++)
    make_wire(&g_kinds[i], g_port);
  engine_init(opt.connections);
  printf("soak: attnbiasd pid %d on 127.0.0.1:%d%s%s%s; %d kinds of "
         "request\n",
         (int)g_srv_pid, g_port, g_srv_args[0] ? " (" : "", g_srv_args,
         g_srv_args[0] ? ")" : "", g_nkinds);
  if (g_perip_flag[0])
    printf("  %s raised for the soak's connections, all from 127.0.0.1\n",
           g_perip_flag);
  if (reference() != 0 || get_metrics(&R.m_before) != 0)
    goto out;
  printf("reference: every request of the mix answered 200 on the idle "
         "server; answers not the same bytes twice (not compared):");
  for (int i = 0; i < g_nkinds; i++)
    if (!g_kinds[i].checked && g_kinds[i].leave != LEAVE_BODY) {
      printf(" %s", g_kinds[i].name);
      varying++;
    }
  printf("%s\n", varying ? "" : " none");

  soak(&R);
  if (opt.server) {
    int st = bench_stop(g_srv_pid, 60);

    R.exit_status = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    g_srv_pid = 0;
  }
  R.load_end = loadavg();
  verdict(&R);
  print_report(&R);
  if (opt.out) {
    write_json(&R);
    printf("wrote %s\n", opt.out);
  }
  rc = R.pass ? 0 : 1;
out:
  if (opt.server && g_srv_pid > 0)
    bench_stop(g_srv_pid, 10);
  remove_tmp(rc != 0);
  free_all(&R);
  return rc;
}
