/* test-util.c: the server's plumbing -- arena, srv_buf, errors, the route
 * table and router, configuration and the metrics text. */
#include "http/http.h"
#include "srv.h"
#include "test.h"
#include "util/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

/* ---- arena ------------------------------------------------------------ */

TEST(arena_alignment_and_independence)
{
  struct srv_arena a;
  unsigned char *p[200];
  size_t sizes[200];
  int i, j;

  srv_arena_init(&a, 0);
  /* Mixed sizes, including ones large enough for a block of their own. */
  for (i = 0; i < 200; i++) {
    sizes[i] = (size_t)(i % 7 == 0 ? 40000 + i : 1 + (i * 37) % 500);
    p[i] = srv_arena_alloc(&a, sizes[i]);
    CHECK(p[i] != NULL);
    CHECK_EQ_I64((uintptr_t)p[i] % 64, 0);
    memset(p[i], i & 0xff, sizes[i]);
  }
  /* No allocation overlaps another: each still holds its own byte. */
  for (i = 0; i < 200; i++)
    for (j = 0; j < (int)sizes[i]; j += 97)
      CHECK_EQ_I64(p[i][j], i & 0xff);
  srv_arena_free(&a);
  CHECK(a.head == NULL);
  CHECK_EQ_I64(a.used, 0);
  return 0;
}

TEST(arena_zero_size_and_strdup)
{
  struct srv_arena a;
  void *x, *y;
  char *s;

  srv_arena_init(&a, 0);
  x = srv_arena_alloc(&a, 0);
  y = srv_arena_alloc(&a, 0);
  CHECK(x != NULL && y != NULL && x != y);
  s = srv_arena_strdup(&a, "bias.layers.0.weight");
  CHECK_STR(s, "bias.layers.0.weight");
  CHECK(srv_arena_strdup(&a, NULL) == NULL);
  srv_arena_free(&a);
  return 0;
}

TEST(arena_calloc_zeroes_and_checks_overflow)
{
  struct srv_arena a;
  int *v;
  int i;

  srv_arena_init(&a, 0);
  /* Dirty a chunk first so that zeroes cannot come from fresh pages. */
  memset(srv_arena_alloc(&a, 1000), 0xAB, 1000);
  v = srv_arena_calloc(&a, 300, sizeof *v);
  CHECK(v != NULL);
  for (i = 0; i < 300; i++)
    CHECK_EQ_I64(v[i], 0);
  CHECK(srv_arena_calloc(&a, SIZE_MAX / 2, 4) == NULL);
  CHECK(srv_arena_alloc(&a, SIZE_MAX - 10) == NULL);
  srv_arena_free(&a);
  return 0;
}

TEST(arena_cap_bounds_total)
{
  struct srv_arena a;
  size_t cap = 200000, total = 0;
  int n = 0;

  srv_arena_init(&a, cap);
  /* A request as large as the cap can never fit (headers count too). */
  CHECK(srv_arena_alloc(&a, cap) == NULL);
  while (srv_arena_alloc(&a, 1000) != NULL) {
    total += 1000;
    n++;
    CHECK(n < 1000); /* must stop well before this */
  }
  CHECK(a.used <= cap);
  /* The cap is used, not wasted: most of it went to allocations. */
  CHECK(total > cap / 2);
  /* Large blocks are refused past the cap too. */
  CHECK(srv_arena_alloc(&a, 50000) == NULL);
  srv_arena_free(&a);
  /* After a free the arena is usable again. */
  CHECK(srv_arena_alloc(&a, 1000) != NULL);
  srv_arena_free(&a);
  return 0;
}

/* ---- srv_buf ---------------------------------------------------------- */

TEST(buf_append_printf_steal)
{
  struct srv_buf b;
  char want[1200], *p;
  size_t len;
  int i, n = 0;

  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_buf_append(&b, "ab", 2), 0);
  CHECK_EQ_I64(srv_buf_printf(&b, "-%d-%s", 42, "x"), 0);
  CHECK_EQ_I64(b.len, 7);
  CHECK_STR(b.data, "ab-42-x");
  /* A formatted piece longer than the internal stack buffer. */
  for (i = 0; i < 100; i++)
    n += snprintf(want + n, sizeof want - (size_t)n, "%010d", i);
  CHECK_EQ_I64(srv_buf_printf(&b, "%s", want), 0);
  CHECK_EQ_I64(b.len, 7 + 1000);
  CHECK(memcmp(b.data + 7, want, 1000) == 0);
  CHECK_EQ_I64(b.data[b.len], '\0');
  p = srv_buf_steal(&b, &len);
  CHECK_EQ_I64(len, 1007);
  CHECK(b.data == NULL && b.len == 0);
  CHECK(memcmp(p, "ab-42-x", 7) == 0);
  free(p);
  srv_buf_free(&b);
  return 0;
}

TEST(buf_ceiling_is_exact_and_keeps_contents)
{
  struct srv_buf b;

  srv_buf_init(&b, 10);
  CHECK_EQ_I64(srv_buf_append(&b, "0123456789", 10), 0);
  CHECK_EQ_I64(srv_buf_append(&b, "x", 1), -1);
  CHECK_EQ_I64(srv_buf_printf(&b, "%s", "y"), -1);
  CHECK_EQ_I64(b.len, 10);
  CHECK_STR(b.data, "0123456789");
  CHECK_EQ_I64(srv_buf_append(&b, "", 0), 0);
  srv_buf_free(&b);

  /* Overflowing sizes are refused, not wrapped. */
  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_buf_append(&b, "abc", 3), 0);
  CHECK_EQ_I64(srv_buf_reserve(&b, SIZE_MAX - 1), -1);
  CHECK_EQ_I64(b.len, 3);
  srv_buf_free(&b);
  return 0;
}

TEST(buf_zero_filled_is_usable)
{
  struct srv_buf b;

  memset(&b, 0, sizeof b);
  CHECK_EQ_I64(srv_buf_append(&b, "hi", 2), 0);
  CHECK_STR(b.data, "hi");
  srv_buf_free(&b);
  return 0;
}

/* ---- errors ----------------------------------------------------------- */

TEST(err_slug_and_title_follow_status)
{
  static const struct {
    int http;
    const char *slug, *title;
  } want[] = {{400, "bad-request", "Bad Request"},
              {401, "unauthorized", "Unauthorized"},
              {404, "not-found", "Not Found"},
              {405, "method-not-allowed", "Method Not Allowed"},
              {406, "not-acceptable", "Not Acceptable"},
              {413, "content-too-large", "Content Too Large"},
              {415, "unsupported-media-type", "Unsupported Media Type"},
              {500, "internal-error", "Internal Server Error"},
              {503, "service-unavailable", "Service Unavailable"}};
  struct srv_err e;
  size_t i;

  for (i = 0; i < sizeof want / sizeof want[0]; i++) {
    CHECK_EQ_I64(srv_fail(&e, want[i].http, "/q/shape", "value %d", 7), -1);
    CHECK_EQ_I64(e.http, want[i].http);
    CHECK_STR(e.slug, want[i].slug);
    CHECK_STR(e.title, want[i].title);
    CHECK_STR(e.field, "/q/shape");
    CHECK_STR(e.detail, "value 7");
  }
  srv_fail(&e, 400, NULL, "x");
  CHECK_STR(e.field, "");
  CHECK_EQ_I64(e.retry_after, 0);
  CHECK_STR(e.allow, "");
  srv_err_slug(&e, "unknown-field", NULL);
  CHECK_STR(e.slug, "unknown-field");
  CHECK_STR(e.title, "Bad Request");
  return 0;
}

TEST(err_detail_is_truncated_safely)
{
  struct srv_err e;
  char big[2000];

  memset(big, 'z', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  srv_fail(&e, 400, big, "%s", big);
  CHECK_EQ_I64(strlen(e.detail), sizeof e.detail - 1);
  CHECK_EQ_I64(strlen(e.field), sizeof e.field - 1);
  return 0;
}

/* The field pointer is built from the library's own record of the failing
 * argument: dots become slashes under the prefix. */
TEST(err_from_library_status)
{
  struct srv_err e;
  struct ab_tensor t;
  int64_t shape[2] = {2, 0};
  float data[4];
  char want[256];
  size_t i;
  enum ab_status st;

  st = ab_tensor_init(&t, data, AB_DTYPE_F32, 2, shape);
  CHECK(st != AB_STATUS_OK);
  snprintf(want, sizeof want, "/q/%s", ab_last_error()->arg);
  for (i = 0; want[i]; i++)
    if (want[i] == '.')
      want[i] = '/';
  CHECK_EQ_I64(srv_fail_lib(&e, st, "/q", NULL), -1);
  CHECK_EQ_I64(e.http, 400);
  CHECK_STR(e.field, want);
  CHECK_STR(e.detail, ab_last_error()->msg);

  /* Status mapping; a stale record (other status) is not reported. */
  srv_fail_lib(&e, AB_STATUS_NO_MEMORY, "", NULL);
  CHECK_EQ_I64(e.http, 500);
  CHECK_STR(e.detail, ab_status_str(AB_STATUS_NO_MEMORY));
  CHECK_STR(e.field, "");
  srv_fail_lib(&e, AB_STATUS_OVERFLOW, "/k", NULL);
  CHECK_EQ_I64(e.http, 413);
  CHECK_STR(e.field, "/k");
  return 0;
}

/* ---- routes ----------------------------------------------------------- */

/* docs/http.md#routes, written out independently of routes.def. */
static const struct {
  const char *method, *path;
  int public_;
} g_api_routes[] = {
    {"GET", "/healthz", 1},       {"GET", "/readyz", 1},
    {"GET", "/metrics", 1},       {"GET", "/openapi.yaml", 1},
    {"GET", "/v1/methods", 0},    {"GET", "/v1/models", 0},
    {"POST", "/v1/encodings", 0},
    {"POST", "/v1/rope", 0},      {"POST", "/v1/bias", 0},
    {"POST", "/v1/attention", 0}, {"POST", "/v1/analysis", 0},
    {"GET", "/", 1},              {"GET", "/explorer.js", 1},
    {"GET", "/explorer.css", 1},
    {"GET", "/v2", 0},            {"GET", "/v2/health/live", 1},
    {"GET", "/v2/health/ready", 1},
    {"GET", "/v2/models/encodings", 0},
    {"GET", "/v2/models/encodings/ready", 0},
    {"POST", "/v2/models/encodings/infer", 0},
    {"GET", "/v2/models/rope", 0},
    {"GET", "/v2/models/rope/ready", 0},
    {"POST", "/v2/models/rope/infer", 0},
    {"GET", "/v2/models/bias", 0},
    {"GET", "/v2/models/bias/ready", 0},
    {"POST", "/v2/models/bias/infer", 0},
    {"GET", "/v2/models/attention", 0},
    {"GET", "/v2/models/attention/ready", 0},
    {"POST", "/v2/models/attention/infer", 0},
    {"GET", "/v2/models/analysis", 0},
    {"GET", "/v2/models/analysis/ready", 0},
    {"POST", "/v2/models/analysis/infer", 0},
};
#define N_API_ROUTES (sizeof g_api_routes / sizeof g_api_routes[0])

TEST(routes_match_api_md)
{
  size_t n, i, j;
  const struct srv_route *tab = srv_route_table(&n);
  struct srv_err e;

  CHECK_EQ_I64(n, N_API_ROUTES);
  for (i = 0; i < N_API_ROUTES; i++) {
    const struct srv_route *r =
        srv_route_find(g_api_routes[i].method, g_api_routes[i].path, &e);
    CHECK(r != NULL);
    CHECK_STR(r->path, g_api_routes[i].path);
    CHECK_STR(r->method, g_api_routes[i].method);
    CHECK_EQ_I64(!!(r->flags & SRV_ROUTE_PUBLIC), g_api_routes[i].public_);
    CHECK_EQ_I64(!!(r->flags & SRV_ROUTE_BODY),
                 strcmp(g_api_routes[i].method, "POST") == 0);
    CHECK(r->prepare != NULL);
  }
  /* Metrics labels are unique and Prometheus-safe. */
  for (i = 0; i < n; i++) {
    CHECK(tab[i].name && tab[i].name[0]);
    CHECK(strspn(tab[i].name, "abcdefghijklmnopqrstuvwxyz_0123456789") ==
          strlen(tab[i].name));
    for (j = i + 1; j < n; j++)
      CHECK(strcmp(tab[i].name, tab[j].name) != 0);
  }
  /* /v1/bias, /v1/attention and /v1/analysis may answer image/png, and
   * they draw it in their finish; /v1/analysis's finish also completes its
   * other answers. */
  CHECK(srv_route_find("POST", "/v1/bias", &e)->flags & SRV_ROUTE_PNG);
  CHECK(srv_route_find("POST", "/v1/attention", &e)->flags & SRV_ROUTE_PNG);
  CHECK(srv_route_find("POST", "/v1/attention", &e)->finish != NULL);
  CHECK(srv_route_find("POST", "/v1/analysis", &e)->flags & SRV_ROUTE_PNG);
  CHECK(srv_route_find("POST", "/v1/analysis", &e)->flags & SRV_ROUTE_FINISH);
  CHECK(!(srv_route_find("POST", "/v1/rope", &e)->flags & SRV_ROUTE_PNG));
  CHECK(!(srv_route_find("POST", "/v1/encodings", &e)->flags & SRV_ROUTE_PNG));
  /* "/versions/1" in a /v2 model path is the same route; no other version
   * exists, and the alias is a whole path segment. */
  CHECK(srv_route_find("POST", "/v2/models/rope/versions/1/infer", &e) ==
        srv_route_find("POST", "/v2/models/rope/infer", &e));
  CHECK(srv_route_find("GET", "/v2/models/bias/versions/1", &e) ==
        srv_route_find("GET", "/v2/models/bias", &e));
  CHECK(srv_route_find("GET", "/v2/models/rope/versions/2", &e) == NULL);
  CHECK_EQ_I64(e.http, 404);
  CHECK(srv_route_find("GET", "/v2/models/rope/versions/10", &e) == NULL);
  CHECK(srv_route_find("GET", "/v2/models//versions/1", &e) == NULL);
  CHECK(srv_route_find("GET", "/v2/models/rope/versions/1/infer", &e) == NULL);
  CHECK_EQ_I64(e.http, 405);
  CHECK(srv_route_find("POST", "/v2/models/rope/infer", &e)->flags &
        SRV_ROUTE_V2);
  return 0;
}

TEST(router_404_405_head)
{
  struct srv_err e;
  const struct srv_route *r;

  r = srv_route_find("GET", "/nope", &e);
  CHECK(r == NULL);
  CHECK_EQ_I64(e.http, 404);
  CHECK(strstr(e.detail, "/nope") != NULL);
  /* Paths match exactly: no prefix, no trailing slash. */
  CHECK(srv_route_find("POST", "/v1/rope/", &e) == NULL);
  CHECK_EQ_I64(e.http, 404);
  CHECK(srv_route_find("GET", "/v1", &e) == NULL);
  CHECK_EQ_I64(e.http, 404);

  r = srv_route_find("GET", "/v1/rope", &e);
  CHECK(r == NULL);
  CHECK_EQ_I64(e.http, 405);
  CHECK_STR(e.allow, "POST");
  r = srv_route_find("DELETE", "/healthz", &e);
  CHECK(r == NULL);
  CHECK_EQ_I64(e.http, 405);
  CHECK_STR(e.allow, "GET, HEAD");

  r = srv_route_find("HEAD", "/metrics", &e);
  CHECK(r != NULL);
  CHECK_STR(r->path, "/metrics");
  CHECK(srv_route_find("HEAD", "/v1/bias", &e) == NULL);
  CHECK_EQ_I64(e.http, 405);
  CHECK(srv_route_find(NULL, "/healthz", &e) == NULL);
  CHECK_EQ_I64(e.http, 400);
  return 0;
}

/* ---- configuration ---------------------------------------------------- */

static int load(struct srv_config *cfg, enum srv_action *act, char *msg,
                size_t cap, int argc, const char **argv)
{
  return srv_config_load(cfg, argc, (char **)argv, act, msg, cap);
}

TEST(config_defaults)
{
  struct srv_config cfg;
  enum srv_action act;
  char msg[256];
  const char *argv[] = {"attnbiasd"};

  unsetenv("ATTNBIAS_PORT");
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 1, argv), 0);
  CHECK_EQ_I64(act, SRV_ACTION_RUN);
  CHECK_STR(cfg.host, "127.0.0.1");
  CHECK_EQ_I64(cfg.port, 8080);
  CHECK_EQ_I64(cfg.max_queue, 64);
  CHECK(cfg.max_body_mb == 256 && cfg.max_output_mb == 1024);
  CHECK(cfg.max_gflop == 10000 && cfg.timeout_s == 30 && cfg.drain_s == 30);
  CHECK_EQ_I64(cfg.max_connections, 1024);
  CHECK_STR(cfg.api_key, "");
  CHECK_EQ_I64(cfg.threads, srv_config_cpus());
  CHECK(cfg.threads >= 1 && cfg.http_threads >= 2);
  /* Connection bounds (README, "Limits and slow clients"). */
  CHECK_EQ_I64(cfg.max_connections_per_ip, 512);
  CHECK(cfg.header_timeout_s == 10 && cfg.body_grace_s == 10);
  CHECK(cfg.body_min_rate_kb == 64 && cfg.linger_s == 5);
  CHECK(cfg.linger_mb == 256 + 8); /* --max-body-mb + 8 */
  CHECK_EQ_I64(cfg.linger_max, 128);
  return 0;
}

TEST(config_linger_mb_follows_the_body_cap)
{
  struct srv_config cfg;
  enum srv_action act;
  char msg[256];
  const char *follows[] = {"attnbiasd", "--max-body-mb", "1000"};
  const char *given[] = {"attnbiasd", "--max-body-mb", "1", "--linger-mb",
                         "9"};
  const char *under[] = {"attnbiasd", "--max-body-mb", "1", "--linger-mb",
                         "8.5"};

  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 3, follows), 0);
  CHECK(cfg.linger_mb == 1008);
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 5, given), 0);
  CHECK(cfg.linger_mb == 9);
  /* Under the cap + 8 MiB a client sending a refused body within the cap
   * before it reads could get a reset: refused, naming both flags. */
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 5, under), -1);
  CHECK(strstr(msg, "--linger-mb") && strstr(msg, "--max-body-mb"));
  return 0;
}

TEST(config_flags_env_and_precedence)
{
  struct srv_config cfg;
  enum srv_action act;
  char msg[256];
  const char *argv[] = {"attnbiasd", "--port",      "0",
                        "--max-body-mb=0.5", "--threads", "3"};

  setenv("ATTNBIAS_PORT", "9000", 1);
  setenv("ATTNBIAS_MAX_QUEUE", "7", 1);
  setenv("ATTNBIAS_HOST", "0.0.0.0", 1);
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 6, argv), 0);
  CHECK_EQ_I64(cfg.port, 0);        /* flag wins over ATTNBIAS_PORT */
  CHECK_EQ_I64(cfg.max_queue, 7);   /* from the environment */
  CHECK_STR(cfg.host, "0.0.0.0");
  CHECK(cfg.max_body_mb == 0.5);
  CHECK_EQ_I64(cfg.threads, 3);
  CHECK_EQ_I64(cfg.http_threads, 3);
  unsetenv("ATTNBIAS_PORT");
  unsetenv("ATTNBIAS_MAX_QUEUE");
  unsetenv("ATTNBIAS_HOST");
  return 0;
}

TEST(config_rejects_bad_values_naming_the_flag)
{
  static const char *const bad[][2] = {
      {"--port", "65536"},       {"--port", "80x"},
      {"--threads", "0"},        {"--max-queue", "-1"},
      {"--max-body-mb", "0"},    {"--max-body-mb", "nan"},
      {"--timeout-s", "inf"},    {"--max-connections", ""},
      {"--drain-s", "-2"},       {"--host", ""},
      {"--header-timeout-s", "0"}, {"--body-grace-s", "-1"},
      {"--body-min-rate-kb", "0"}, {"--linger-s", "0"},
      {"--linger-max", "0"},     {"--max-connections-per-ip", "0"},
      {"--api-key-file", "/nonexistent/attnbias-key"},
  };
  struct srv_config cfg;
  enum srv_action act;
  char msg[256];
  size_t i;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *argv[] = {"attnbiasd", bad[i][0], bad[i][1]};
    msg[0] = '\0';
    CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 3, argv), -1);
    if (!strstr(msg, bad[i][0]))
      FAIL_AT("message for %s '%s' does not name it: %s", bad[i][0],
              bad[i][1], msg);
  }
  {
    const char *argv[] = {"attnbiasd", "--bogus", "1"};
    CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 3, argv), -1);
    CHECK(strstr(msg, "--bogus") != NULL);
  }
  {
    const char *argv[] = {"attnbiasd", "--port"};
    CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 2, argv), -1);
    CHECK(strstr(msg, "--port") != NULL);
  }
  setenv("ATTNBIAS_TIMEOUT_S", "soon", 1);
  {
    const char *argv[] = {"attnbiasd"};
    CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 1, argv), -1);
    CHECK(strstr(msg, "ATTNBIAS_TIMEOUT_S") != NULL);
  }
  unsetenv("ATTNBIAS_TIMEOUT_S");
  return 0;
}

TEST(config_api_key_file_first_line)
{
  struct srv_config cfg;
  enum srv_action act;
  char msg[256], path[] = "/tmp/attnbias-key-XXXXXX";
  int fd = mkstemp(path);
  const char *argv[] = {"attnbiasd", "--api-key-file", path};

  CHECK(fd >= 0);
  CHECK(write(fd, "s3cr3t key\r\nsecond line\n", 24) == 24);
  close(fd);
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 3, argv), 0);
  CHECK_STR(cfg.api_key, "s3cr3t key");
  /* An empty first line is no key at all: refused. */
  fd = open(path, O_WRONLY | O_TRUNC);
  CHECK(fd >= 0);
  CHECK(write(fd, "\nkey\n", 5) == 5);
  close(fd);
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 3, argv), -1);
  CHECK(strstr(msg, "--api-key-file") != NULL);
  unlink(path);
  return 0;
}

TEST(config_actions)
{
  struct srv_config cfg;
  enum srv_action act;
  char msg[256];
  const char *a1[] = {"attnbiasd", "--healthcheck", "--port", "81"};
  const char *a2[] = {"attnbiasd", "--healthcheck", "--help"};
  const char *a3[] = {"attnbiasd", "--version=1"};

  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 4, a1), 0);
  CHECK_EQ_I64(act, SRV_ACTION_HEALTHCHECK);
  CHECK_EQ_I64(cfg.port, 81);
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 3, a2), 0);
  CHECK_EQ_I64(act, SRV_ACTION_HELP);
  CHECK_EQ_I64(load(&cfg, &act, msg, sizeof msg, 2, a3), -1);
  return 0;
}

/* ---- metrics ---------------------------------------------------------- */

TEST(metrics_text_format)
{
  struct srv_buf b;
  size_t n;
  const struct srv_route *tab = srv_route_table(&n);
  int rope = -1;
  size_t i;
  char line[256];

  for (i = 0; i < n; i++)
    if (strcmp(tab[i].path, "/v1/rope") == 0)
      rope = (int)i;
  CHECK(rope >= 0);
  srv_metrics_request(rope, 200, 0.003, 100, 2000);
  srv_metrics_kernel(rope, 0.5);
  srv_metrics_request(rope, 200, 0.2, 10, 20);
  srv_metrics_kernel(rope, 0.25);
  srv_metrics_request(rope, 400, 0.0001, 5, 50);
  srv_metrics_request(-1, 404, 0.0001, 0, 30);
  srv_metrics_reject(SRV_REJECT_QUEUE_FULL);

  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_http_metrics(&b), 0);
  CHECK(b.len > 0 && b.data[b.len - 1] == '\n');
  snprintf(line, sizeof line,
           "attnbias_requests_total{route=\"%s\",status=\"200\"} 2\n",
           tab[rope].name);
  CHECK(strstr(b.data, line) != NULL);
  CHECK(strstr(b.data, "attnbias_requests_total{route=\"none\",status="
                       "\"404\"} 1\n") != NULL);
  /* Histogram: 0.003 s and 0.0001 s fall at or below 0.005; 0.2 does not. */
  snprintf(line, sizeof line,
           "attnbias_request_duration_seconds_bucket{route=\"%s\",le="
           "\"0.005\"} 2\n",
           tab[rope].name);
  CHECK(strstr(b.data, line) != NULL);
  snprintf(line, sizeof line,
           "attnbias_request_duration_seconds_bucket{route=\"%s\",le="
           "\"+Inf\"} 3\n",
           tab[rope].name);
  CHECK(strstr(b.data, line) != NULL);
  snprintf(line, sizeof line,
           "attnbias_kernel_seconds_total{route=\"%s\"} 0.750000000\n",
           tab[rope].name);
  CHECK(strstr(b.data, line) != NULL);
  CHECK(strstr(b.data, "attnbias_bytes_received_total 115\n") != NULL);
  CHECK(strstr(b.data, "attnbias_bytes_sent_total 2100\n") != NULL);
  CHECK(strstr(b.data, "attnbias_rejected_total{reason=\"queue_full\"} 1\n"));
  CHECK(strstr(b.data, "# TYPE attnbias_request_duration_seconds "
                       "histogram\n") != NULL);
  CHECK(strstr(b.data, "# TYPE attnbias_inflight_requests gauge\n"));
  CHECK(strstr(b.data, "# TYPE attnbias_queue_depth gauge\n"));
  CHECK(strstr(b.data, "# TYPE attnbias_pool_calls gauge\n"));
  CHECK(strstr(b.data, "\nattnbias_pool_calls 0\n")); /* no pool here */
  /* No server runs here: no connection in any state. */
  CHECK(strstr(b.data, "attnbias_open_connections{state=\"headers\"} 0\n"));
  CHECK(strstr(b.data, "attnbias_open_connections{state=\"busy\"} 0\n"));
  /* Every sample line's metric has a TYPE line. */
  {
    char *save = NULL, *copy = strdup(b.data), *ln;
    CHECK(copy != NULL);
    for (ln = strtok_r(copy, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
      char name[128], type[160];
      size_t k = strcspn(ln, "{ ");
      if (ln[0] == '#')
        continue;
      snprintf(name, sizeof name, "%.*s", (int)k, ln);
      for (i = 0; i < 3; i++) {
        static const char *const sfx[] = {"_bucket", "_sum", "_count"};
        size_t ls = strlen(sfx[i]), ln_ = strlen(name);
        if (ln_ > ls && strcmp(name + ln_ - ls, sfx[i]) == 0 &&
            strstr(name, "duration"))
          name[ln_ - ls] = '\0';
      }
      snprintf(type, sizeof type, "# TYPE %s ", name);
      if (!strstr(b.data, type)) {
        free(copy);
        FAIL_AT("no TYPE line for %s", name);
      }
    }
    free(copy);
  }
  srv_buf_free(&b);
  return 0;
}
