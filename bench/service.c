/* service.c: the service end to end on loopback.  Starts build/attnbiasd
 * (--port 0) and bench/bare-server (a bare libmicrohttpd server in the same
 * threading mode answering a fixed body of the same size), drives both with
 * wrk (64 connections, a Lua script POSTing a small /v1/bias request),
 * interleaved A B A B; then times one binary (safetensors) /v1/attention
 * request against the same attention run in process.  Every load is
 * bounded in count and time, every wait has a deadline, and every process
 * started here is killed before the section returns (and on Ctrl-C). */
#include "bench.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The tiny request of the load test (the "tiny requests"): an ALiBi
 * table of 4 heads, 16 x 16 (1024 floats, about 9 KB of JSON back), so the
 * figure measures the service's per-request cost -- HTTP, parsing, the
 * hand-off, encoding -- not float formatting throughput (which the codec
 * rows measure). */
static const char g_small_body[] =
    "{\"method\": \"alibi\", \"num_heads\": 4, \"q_len\": 16, "
    "\"k_len\": 16}";

static char g_tmp[64]; /* this run's temporary directory */
/* The socket of the attnbiasd started with --unix-socket; http_do with
 * port 0 goes there. */
static char g_unix[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* ==== a minimal HTTP/1.1 client (one request per connection) ============ */

struct http_resp {
  int status;
  char ctype[128];
  double read_ms, compute_ms; /* from Server-Timing; -1: absent */
  double early;               /* share of pieces done by the body's end
                               * (Server-Timing early;desc="N/M"), -1 */
  double sent_at;             /* bench_now() once the body was sent */
  char *body; /* malloc'd, decoded from chunked if need be */
  size_t len;
  size_t cap; /* bytes allocated at body */
};

static void http_resp_free(struct http_resp *r)
{
  free(r->body);
  memset(r, 0, sizeof *r);
}

/* Forget the response but keep its buffer: the next http_do on r reads
 * into it instead of allocating. */
static void http_resp_keep(struct http_resp *r)
{
  r->status = 0;
  r->ctype[0] = '\0';
  r->len = 0;
}

/* The dur= of phase `name` in a Server-Timing value, or -1. */
static double timing_phase(const char *v, const char *name)
{
  size_t n = strlen(name);

  for (const char *p = v; (p = strstr(p, name)) != NULL; p += n)
    if ((p == v || p[-1] == ' ' || p[-1] == ',') && p[n] == ';' &&
        strncmp(p + n, ";dur=", 5) == 0)
      return strtod(p + n + 5, NULL);
  return -1.0;
}

static int send_all(int fd, const char *p, size_t n)
{
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* A result's median, when it was measured at all. */
static void res_median(const char *key, const struct bench_samples *s)
{
  if (s->n)
    res_num(key, bench_median(s));
}

/* Bytes per second at which http_do sends bodies (0: as fast as the
 * socket takes them): a client on a slower network. */
static double g_pace;
#define PACE_BPS 125e6

/* send_all, at g_pace bytes per second in 1 MiB steps. */
static int send_paced(int fd, const char *p, size_t n)
{
  const size_t step = (size_t)1 << 20;
  double t0 = bench_now();
  size_t off;

  if (g_pace <= 0)
    return send_all(fd, p, n);
  for (off = 0; off < n; off += step) {
    size_t k = n - off < step ? n - off : step;
    double lag;

    if (send_all(fd, p + off, k) != 0)
      return -1;
    lag = t0 + (double)(off + k) / g_pace - bench_now();
    if (lag > 0) {
      struct timespec ts = {(time_t)lag,
                            (long)((lag - (double)(time_t)lag) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}

/* ---- the transport alone: n bytes over loopback TCP ---- */

struct tcp_probe {
  int port;
  const char *p;
  size_t n;
};

static void *tcp_probe_send(void *arg)
{
  const struct tcp_probe *t = arg;
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)t->port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
    send_all(fd, t->p, t->n);
  if (fd >= 0)
    close(fd);
  return NULL;
}

/* ms to move n bytes from one thread to another over loopback TCP, the
 * receiver reading 64 KiB at a time into one buffer: what any server
 * pays to receive such a body here, before doing anything with it; -1 on
 * failure.  A sender thread, as the client is another process's. */
static double tcp_transfer_ms(const char *p, size_t n, char *into)
{
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  struct tcp_probe t = {0, p, n};
  pthread_t th;
  double t0 = 0, ms = -1;
  size_t got = 0;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fd;

  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(lfd, 1) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
    if (lfd >= 0)
      close(lfd);
    return -1;
  }
  t.port = ntohs(sa.sin_port);
  if (pthread_create(&th, NULL, tcp_probe_send, &t) != 0) {
    close(lfd);
    return -1;
  }
  fd = accept(lfd, NULL, NULL);
  while (fd >= 0 && got < n) {
    ssize_t r = recv(fd, into + got, n - got < 65536 ? n - got : 65536, 0);
    if (r <= 0)
      break;
    if (!got)
      t0 = bench_now();
    got += (size_t)r;
  }
  if (got == n)
    ms = (bench_now() - t0) * 1e3;
  if (fd >= 0)
    close(fd);
  close(lfd);
  pthread_join(th, NULL);
  return ms;
}

/* Decode a chunked body in place; -1 if it is malformed or incomplete. */
static long dechunk(char *b, size_t n, int *complete)
{
  size_t in = 0, out = 0;

  *complete = 0;
  for (;;) {
    char *eol = memmem(b + in, n - in, "\r\n", 2);
    unsigned long sz;

    if (!eol)
      return (long)out;
    sz = strtoul(b + in, NULL, 16);
    in = (size_t)(eol - b) + 2;
    if (sz == 0) {
      *complete = memmem(b + in, n - in, "\r\n", 2) != NULL;
      return (long)out;
    }
    if (in + sz + 2 > n)
      return (long)out;
    memmove(b + out, b + in, sz);
    out += sz;
    in += sz + 2;
  }
}

/* Send one request and read the whole response within timeout seconds.
 * r is zeroed, or holds a buffer kept by http_resp_keep to read into.
 * Returns 0 (r filled) or -1 (message printed; r's buffer freed). */
static int http_do(int port, const char *method, const char *path,
                   const char *ctype, const char *accept, const char *body,
                   size_t blen, struct http_resp *r, double timeout)
{
  struct sockaddr_in sa;
  struct sockaddr_un su;
  struct timeval tv;
  char hdr[512];
  size_t cap = r->body ? r->cap : 0, have = 0, hend = 0, clen = 0;
  int fd, one = 1, hl, chunked = 0, has_clen = 0, done = 0;
  char *buf = r->body;
  double end = bench_now() + timeout;

  memset(r, 0, sizeof *r);
  r->read_ms = r->compute_ms = r->early = -1.0;
  fd = socket(port ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    free(buf);
    return -1;
  }
  tv.tv_sec = (time_t)timeout;
  tv.tv_usec = (suseconds_t)((timeout - (double)tv.tv_sec) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (port) {
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
      goto fail;
  } else {
    memset(&su, 0, sizeof su);
    su.sun_family = AF_UNIX;
    memcpy(su.sun_path, g_unix, sizeof g_unix);
    if (connect(fd, (struct sockaddr *)&su, sizeof su) != 0)
      goto fail;
  }
  hl = snprintf(hdr, sizeof hdr,
                "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Connection: close\r\n%s%s%s%s%s%s"
                "Content-Length: %zu\r\n\r\n",
                method, path, port, ctype ? "Content-Type: " : "",
                ctype ? ctype : "", ctype ? "\r\n" : "",
                accept ? "Accept: " : "", accept ? accept : "",
                accept ? "\r\n" : "", blen);
  /* A server refusing the body (413) may close before it is all sent:
   * then the response is still read below. */
  if (send_all(fd, hdr, (size_t)hl) == 0 && blen)
    send_paced(fd, body, blen);
  r->sent_at = bench_now();

  if (!buf || cap < 2) {
    free(buf);
    cap = 1 << 16;
    buf = malloc(cap);
  }
  while (buf && !done && bench_now() < end) {
    ssize_t got;

    if (have + 1 >= cap) {
      char *nb = realloc(buf, cap *= 2);

      if (!nb)
        break;
      buf = nb;
    }
    got = recv(fd, buf + have, cap - have - 1, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      done = got == 0; /* EOF ends a body without length */
      break;
    }
    have += (size_t)got;
    buf[have] = '\0';
    if (!hend) {
      char *e = strstr(buf, "\r\n\r\n"), *h;

      if (!e)
        continue;
      hend = (size_t)(e - buf) + 4;
      if (sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1)
        break;
      /* Header lines lie between the status line and the blank line;
       * chunk-size lines after it are never mistaken for headers. */
      for (h = strstr(buf, "\r\n"); h && h < e; h = strstr(h + 2, "\r\n")) {
        char line[256];
        size_t n = strcspn(h + 2, "\r");

        if (n >= sizeof line)
          n = sizeof line - 1;
        memcpy(line, h + 2, n);
        line[n] = '\0';
        if (strncasecmp(line, "content-length:", 15) == 0) {
          clen = strtoul(line + 15, NULL, 10);
          has_clen = 1;
        } else if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
          chunked = strstr(line + 18, "chunked") != NULL;
        } else if (strncasecmp(line, "server-timing:", 14) == 0) {
          r->read_ms = timing_phase(line + 14, "read");
          r->compute_ms = timing_phase(line + 14, "compute");
          {
            const char *ed = strstr(line + 14, "early;desc=\"");
            long long nd, all;
            if (ed && sscanf(ed + 12, "%lld/%lld", &nd, &all) == 2 && all > 0)
              r->early = (double)nd / (double)all;
          }
        } else if (strncasecmp(line, "content-type:", 13) == 0) {
          snprintf(r->ctype, sizeof r->ctype, "%s",
                   line + 13 + strspn(line + 13, " "));
        }
      }
      /* Take the room for the whole body at once, as HTTP clients do
       * given a Content-Length: growing by doubling would copy a large
       * body several times over. */
      if (has_clen && clen < SIZE_MAX / 2 && hend + clen + 1 > cap) {
        char *nb = realloc(buf, hend + clen + 1);

        if (!nb)
          break;
        buf = nb;
        cap = hend + clen + 1;
      }
    }
    if (hend && has_clen && have - hend >= clen)
      done = 1;
    if (hend && chunked && have - hend >= 5 &&
        memcmp(buf + have - 5, "0\r\n\r\n", 5) == 0)
      done = 1;
  }
  close(fd);
  fd = -1;
  if (!buf || !hend || !done) {
    printf("  HTTP %s %s on port %d: no complete response (%s)\n", method,
           path, port, bench_now() >= end ? "timeout" : "connection closed");
    free(buf);
    return -1;
  }
  r->len = have - hend;
  if (has_clen && r->len > clen)
    r->len = clen;
  memmove(buf, buf + hend, r->len);
  if (chunked) {
    int complete;
    long n = dechunk(buf, r->len, &complete);

    if (n < 0 || !complete) {
      printf("  HTTP %s %s: malformed chunked body\n", method, path);
      free(buf);
      return -1;
    }
    r->len = (size_t)n;
  }
  r->body = buf;
  r->cap = cap;
  return 0;
fail:
  if (port)
    printf("  HTTP %s %s: cannot connect to 127.0.0.1:%d: %s\n", method,
           path, port, strerror(errno));
  else
    printf("  HTTP %s %s: cannot connect to unix:%s: %s\n", method, path,
           g_unix, strerror(errno));
  if (fd >= 0)
    close(fd);
  free(buf);
  return -1;
}

/* ==== servers ============================================================ */

struct server {
  const char *label;
  pid_t pid;
  int port;
  char out[128], err[128];
};

/* Start a server printing its port on stdout (or, use_unix set, listening on
 * g_unix) and wait (10 s at most) until it is bound and answers GET path
 * with 200 (ready_path NULL: until it printed its port; an HTTPS server
 * whose client checks it). */
static int server_start(struct server *s, const char *label, char *const argv[],
                        const char *ready_path, int use_unix)
{
  double end = bench_now() + 10.0;
  struct http_resp r = {0};
  int status;

  memset(s, 0, sizeof *s);
  s->label = label;
  snprintf(s->out, sizeof s->out, "%s/%s.out", g_tmp, label);
  snprintf(s->err, sizeof s->err, "%s/%s.err", g_tmp, label);
  s->pid = bench_spawn(argv, s->out, s->err);
  if (s->pid < 0) {
    printf("  cannot start %s: %s\n", argv[0], strerror(errno));
    return -1;
  }
  while (!use_unix && bench_now() < end && !s->port) {
    char *text = bench_slurp(s->out, NULL);

    if (text)
      s->port = bench_parse_port(text);
    free(text);
    if (!s->port && waitpid(s->pid, &status, WNOHANG) == s->pid) {
      char *e = bench_slurp(s->err, NULL);

      printf("  %s exited at start (status %d): %.300s\n", label, status,
             e ? e : "");
      free(e);
      bench_child_remove(s->pid);
      s->pid = -1;
      return -1;
    }
    if (!s->port)
      usleep(20000);
  }
  if (!ready_path && s->port)
    return 0;
  while ((s->port || use_unix) && bench_now() < end) {
    if (use_unix && waitpid(s->pid, &status, WNOHANG) == s->pid) {
      bench_child_remove(s->pid);
      printf("  %s exited at start (status %d; stderr in %s)\n", label,
             status, s->err);
      s->pid = -1;
      return -1;
    }
    if (use_unix && access(g_unix, F_OK) != 0) { /* not bound yet */
      usleep(20000);
      continue;
    }
    if (http_do(s->port, "GET", ready_path, NULL, NULL, NULL, 0, &r, 2.0) ==
            0 &&
        r.status == 200) {
      http_resp_free(&r);
      return 0;
    }
    http_resp_free(&r);
    usleep(50000);
  }
  printf("  %s did not become ready within 10 s (port %d; stderr in %s)\n",
         label, s->port, s->err);
  bench_stop(s->pid, 5.0);
  s->pid = -1;
  return -1;
}

/* ==== wrk ================================================================ */

struct load {
  double rps, p50_ms, p99_ms;
  long requests, errors;
};

/* One bounded wrk run: 64 connections, g_opt.http_seconds, POSTing the
 * body in body_path.  The Lua script prints a one-line JSON summary. */
static int run_wrk(int port, const char *path, const char *body_path,
                   const char *ctype, struct load *ld)
{
  char url[128], dur[32], out[128], err[128];
  char *argv[16], *text, *w;
  int status, argc = 0;
  long dur_us = 0, p50 = 0, p99 = 0, conn = 0, rd = 0, wr = 0, st = 0, to = 0;
  pid_t pid;

  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  snprintf(dur, sizeof dur, "%.0fs", g_opt.http_seconds);
  snprintf(out, sizeof out, "%s/wrk.out", g_tmp);
  snprintf(err, sizeof err, "%s/wrk.err", g_tmp);
  argv[argc++] = "wrk";
  argv[argc++] = "-t2";
  argv[argc++] = "-c64";
  argv[argc++] = "-d";
  argv[argc++] = dur;
  argv[argc++] = "--timeout";
  argv[argc++] = "5s";
  argv[argc++] = "-s";
  argv[argc++] = (char *)g_opt.lua;
  argv[argc++] = url;
  argv[argc++] = "--";
  argv[argc++] = (char *)body_path;
  argv[argc++] = (char *)ctype;
  argv[argc] = NULL;
  pid = bench_spawn(argv, out, err);
  if (pid < 0)
    return -1;
  if (!bench_wait(pid, g_opt.http_seconds + 20.0, &status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    bench_child_remove(pid);
    printf("  wrk did not finish in time; killed\n");
    return -1;
  }
  bench_child_remove(pid);
  text = bench_slurp(out, NULL);
  w = text ? strstr(text, "WRK {") : NULL;
  if (!w || sscanf(w,
                   "WRK {\"requests\": %ld, \"duration_us\": %ld, "
                   "\"p50_us\": %ld, \"p99_us\": %ld, \"connect\": %ld, "
                   "\"read\": %ld, \"write\": %ld, \"status\": %ld, "
                   "\"timeout\": %ld",
                   &ld->requests, &dur_us, &p50, &p99, &conn, &rd, &wr, &st,
                   &to) != 9 ||
      dur_us <= 0) {
    char *e = bench_slurp(err, NULL);

    printf("  wrk gave no summary (exit %d): %.300s %.300s\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, text ? text : "",
           e ? e : "");
    free(e);
    free(text);
    return -1;
  }
  free(text);
  ld->errors = conn + rd + wr + st + to;
  /* Only answered requests count: a 4xx/5xx is not throughput. */
  ld->rps = (double)(ld->requests - st) / ((double)dur_us * 1e-6);
  ld->p50_ms = (double)p50 * 1e-3;
  ld->p99_ms = (double)p99 * 1e-3;
  return 0;
}

/* ==== CPU time ============================================================ */

/* CPU time (s) used so far by every thread of process pid, from the
 * scheduler's nanosecond counters (/proc/PID/task/TID/schedstat, first
 * field); < 0 when they cannot be read.  The server's threads live as long
 * as it does, so differences across a request are that request's cost. */
static double proc_cpu_s(pid_t pid)
{
  char path[64];
  struct dirent *e;
  DIR *d;
  double sum = 0.0;
  int n = 0;

  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  d = opendir(path);
  if (!d)
    return -1.0;
  while ((e = readdir(d)) != NULL) {
    char sp[330];
    unsigned long long ns;
    FILE *f;

    if (e->d_name[0] == '.')
      continue;
    snprintf(sp, sizeof sp, "%s/%s/schedstat", path, e->d_name);
    f = fopen(sp, "r");
    if (!f)
      continue;
    if (fscanf(f, "%llu", &ns) == 1) {
      sum += (double)ns * 1e-9;
      n++;
    }
    fclose(f);
  }
  closedir(d);
  return n ? sum : -1.0;
}

static double clock_s(clockid_t id)
{
  struct timespec ts;

  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ==== the section ======================================================== */

static void http_small(int port_ours, pid_t pid_ours, const char *bare_bin,
                       int threads)
{
  struct server bare;
  struct http_resp r = {0};
  struct bench_samples rps[2] = {{0}, {0}}, p50 = {0}, p99 = {0};
  char req_path[128], resp_path[128], thr[16];
  char *bargv[12];
  long errors[2] = {0, 0};
  /* Three rounds of ours then bare: the ratio is the median of the three
   * rounds' ratios, each of two loads run back to back. */
  int rounds = g_opt.quick ? 1 : 3, i, which, ok = 1;
  struct bench_samples ratio = {0}, cpu_us[2] = {{0}, {0}};
  struct load ld;

  snprintf(req_path, sizeof req_path, "%s/small.json", g_tmp);
  snprintf(resp_path, sizeof resp_path, "%s/small.resp", g_tmp);
  if (bench_write_file(req_path, g_small_body, sizeof g_small_body - 1) != 0 ||
      http_do(port_ours, "POST", "/v1/bias", "application/json", NULL,
              g_small_body, sizeof g_small_body - 1, &r, 10.0) != 0) {
    bench_skip("http_small", "the first /v1/bias request failed");
    return;
  }
  if (r.status != 200) {
    bench_skip("http_small", "/v1/bias answered %d: %.300s", r.status,
               r.body ? r.body : "");
    http_resp_free(&r);
    return;
  }
  if (bench_write_file(resp_path, r.body, r.len) != 0) {
    http_resp_free(&r);
    bench_skip("http_small", "cannot write %s", resp_path);
    return;
  }
  printf("   request: POST /v1/bias %s -> %zu bytes of %s\n", g_small_body,
         r.len, r.ctype);

  /* The bare server answers exactly those bytes, so both sides move the
   * same data; the difference is the service's own work. */
  snprintf(thr, sizeof thr, "%d", threads);
  i = 0;
  bargv[i++] = (char *)bare_bin;
  bargv[i++] = "--port";
  bargv[i++] = "0";
  bargv[i++] = "--threads";
  bargv[i++] = thr;
  bargv[i++] = "--body";
  bargv[i++] = resp_path;
  bargv[i++] = "--type";
  bargv[i++] = r.ctype[0] ? r.ctype : "application/json";
  bargv[i] = NULL;
  if (!bare_bin || access(bare_bin, X_OK) != 0) {
    printf("   (no bare server at %s: bare_rps is null)\n",
           bare_bin ? bare_bin : "(none)");
    bare.pid = -1;
  } else if (server_start(&bare, "bare-server", bargv, "/", 0) != 0) {
    bare.pid = -1;
  }
  http_resp_free(&r);

  for (i = 0; i < rounds; i++)
    for (which = 0; which < 2; which++) { /* ours, bare, ours, bare */
      double cpu0;
      if (which == 1 && bare.pid <= 0)
        continue;
      cpu0 = proc_cpu_s(which ? bare.pid : pid_ours);
      if (run_wrk(which ? bare.port : port_ours, "/v1/bias", req_path,
                  "application/json", &ld) != 0) {
        ok = 0;
        continue;
      }
      /* The server's CPU time per request: what the rate would be on
       * cores of its own (the rate itself also measures wrk and whatever
       * else shares the machine). */
      if (ld.requests > 0)
        bench_samples_add(&cpu_us[which],
                          (proc_cpu_s(which ? bare.pid : pid_ours) - cpu0) /
                              (double)ld.requests * 1e6);
      bench_samples_add(&rps[which], ld.rps);
      errors[which] += ld.errors;
      if (which == 1 && rps[0].n == rps[1].n)
        bench_samples_add(&ratio, rps[0].v[rps[0].n - 1] / ld.rps);
      if (which == 0) {
        bench_samples_add(&p50, ld.p50_ms);
        bench_samples_add(&p99, ld.p99_ms);
      }
      printf("   %-10s round %d: %8.0f req/s  p50 %.2f ms  p99 %.2f ms  "
             "(%ld requests, %ld errors)\n",
             which ? "bare" : "attnbiasd", i + 1, ld.rps, ld.p50_ms, ld.p99_ms,
             ld.requests, ld.errors);
    }
  if (bare.pid > 0)
    bench_stop(bare.pid, 5.0);
  if (rps[0].n == 0) {
    bench_skip("http_small", "no load run succeeded");
    return;
  }
  printf("   http_small: %.0f req/s, p50 %.2f ms, p99 %.2f ms; bare %.0f "
         "req/s -> %.0f%% of bare (median of %d rounds' ratios)%s\n",
         bench_median(&rps[0]), bench_median(&p50), bench_median(&p99),
         bench_median(&rps[1]), 100.0 * bench_median(&ratio), ratio.n,
         errors[0] || errors[1] || !ok ? "  (some errors: see above)" : "");
  res_begin("http_small");
  res_num("rps", bench_median(&rps[0]));
  res_num("p50_ms", bench_median(&p50));
  res_num("p99_ms", bench_median(&p99));
  res_num("bare_rps", bench_median(&rps[1]));
  res_num("pct_of_bare", 100.0 * bench_median(&ratio));
  res_num("cpu_us_per_req", bench_median(&cpu_us[0]));
  res_num("bare_cpu_us_per_req", bench_median(&cpu_us[1]));
  res_end();
  printf("   server CPU per request: attnbiasd %.1f us, bare %.1f us (bare/ours "
         "%.0f%%)\n",
         bench_median(&cpu_us[0]), bench_median(&cpu_us[1]),
         100.0 * bench_median(&cpu_us[1]) / bench_median(&cpu_us[0]));
}

/* One binary attention request over TCP (port) and, with use_unix set, the
 * same over the Unix socket g_unix, interleaved with the in-process run. */
static void http_attention(struct bench_pool *pool, int port, pid_t server,
                           int use_unix)
{
  const int h = 32, n = g_opt.quick ? 512 : 2048, d = 128;
  const size_t per = (size_t)h * n * d;
  float *q = bench_alloc(per * 4), *k = bench_alloc(per * 4),
        *v = bench_alloc(per * 4), *out = bench_alloc(per * 4);
  struct bench_samples http = {0}, kern = {0}, sread = {0}, scomp = {0};
  struct bench_samples searly = {0}, paced = {0}, pearly = {0}, tcp = {0};
  /* CPU time per request: the server's threads, this (client) thread, and
   * the in-process run's threads.  The wall time of a request cannot fall
   * below (server + client CPU) / cores when both share the machine. */
  struct bench_samples cpu_srv = {0}, cpu_cli = {0}, cpu_kern = {0};
  struct bench_samples uhttp = {0}, usread = {0};
  cpu_set_t cpus;
  int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                           : 0;
  /* The response is read into one buffer kept across repetitions, as the
   * in-process side writes into one `out`: neither side pays for touching
   * fresh memory (~8k page faults for a 34 MB response in a new buffer --
   * the client's cost, not the service's). */
  struct http_resp resp = {0};
  size_t blen = 0, rlen = 0;
  char *body;
  int r, reps = g_opt.quick ? 2 : 5;

  bench_fill(q, per, 41, 1.0f);
  bench_fill(k, per, 42, 1.0f);
  bench_fill(v, per, 43, 1.0f);
  body = bench_safetensors_qkv(q, k, v, h, n, d, &blen);
  if (!body) {
    bench_skip("http_attention", "out of memory");
    goto out;
  }
  printf("   request: POST /v1/attention safetensors q,k,v [1,%d,%d,%d] "
         "(%.1f MB), Accept: safetensors\n",
         h, n, d, (double)blen * 1e-6);
  for (r = -1; r < reps; r++) { /* r = -1: warm-up; then http, in-process */
    double s0 = proc_cpu_s(server), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    double t0 = bench_now(), dt, s1, c1;

    if (http_do(port, "POST", "/v1/attention", "application/vnd.safetensors",
                "application/vnd.safetensors", body, blen, &resp, 120.0) != 0)
      break;
    dt = bench_now() - t0;
    c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    s1 = proc_cpu_s(server);
    if (r >= 0 && s0 >= 0.0 && s1 >= 0.0) {
      bench_samples_add(&cpu_srv, (s1 - s0) * 1e3);
      bench_samples_add(&cpu_cli, (c1 - c0) * 1e3);
    }
    if (resp.status != 200) {
      bench_skip("http_attention", "/v1/attention answered %d: %.300s",
                 resp.status, resp.body ? resp.body : "");
      break;
    }
    rlen = resp.len;
    if (r >= 0) {
      bench_samples_add(&http, dt * 1e3);
      if (resp.read_ms >= 0)
        bench_samples_add(&sread, resp.read_ms);
      if (resp.compute_ms >= 0)
        bench_samples_add(&scomp, resp.compute_ms);
      if (resp.early >= 0)
        bench_samples_add(&searly, resp.early);
    }
    http_resp_keep(&resp);
    c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    dt = bench_attention_once(pool, q, k, v, out, h, n, d);
    c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (dt < 0)
      break;
    if (r >= 0) {
      bench_samples_add(&kern, dt * 1e3);
      bench_samples_add(&cpu_kern, (c1 - c0) * 1e3);
    }
    if (use_unix) {
      t0 = bench_now();
      if (http_do(0, "POST", "/v1/attention", "application/vnd.safetensors",
                  "application/vnd.safetensors", body, blen, &resp,
                  120.0) != 0 ||
          resp.status != 200) {
        printf("   (the Unix-socket request failed: status %d)\n",
               resp.status);
        use_unix = 0;
      } else if (r >= 0) {
        bench_samples_add(&uhttp, (bench_now() - t0) * 1e3);
        if (resp.read_ms >= 0)
          bench_samples_add(&usread, resp.read_ms);
      }
      http_resp_keep(&resp);
    }
  }
  /* The transport alone, interleaved with nothing else: the body's bytes
   * from one thread to another over loopback TCP. */
  if (http.n && kern.n) {
    char *into = malloc(blen);
    for (r = 0; into && r < (g_opt.quick ? 2 : 5); r++) {
      double ms = tcp_transfer_ms(body, blen, into);
      if (ms > 0)
        bench_samples_add(&tcp, ms);
    }
    free(into);
  }
  /* The same request from a client on a 1 Gbit/s network: the upload
   * takes 0.8 s, and what the service adds is the time from the body's
   * last byte to the answer's (the computing that the upload could not
   * hide, and the download). */
  if (http.n && kern.n) {
    g_pace = PACE_BPS;
    for (r = 0; r < (g_opt.quick ? 1 : 3); r++) {
      if (http_do(port, "POST", "/v1/attention",
                  "application/vnd.safetensors", "application/vnd.safetensors",
                  body, blen, &resp, 120.0) != 0 ||
          resp.status != 200) {
        http_resp_keep(&resp);
        break;
      }
      bench_samples_add(&paced, (bench_now() - resp.sent_at) * 1e3);
      if (resp.early >= 0)
        bench_samples_add(&pearly, resp.early);
      http_resp_keep(&resp);
    }
    g_pace = 0;
  }
  if (http.n && kern.n) {
    printf("   http_attention N=%d: %.1f ms [%.1f-%.1f] (response %.1f MB); "
           "in process %.1f ms [%.1f-%.1f] -> %.2fx\n",
           n, bench_median(&http), bench_min(&http), bench_max(&http),
           (double)rlen * 1e-6, bench_median(&kern), bench_min(&kern),
           bench_max(&kern), bench_median(&http) / bench_median(&kern));
    /* Where the wall time went, by the server's own clock: receiving the
     * body, then computing while the answer streams out (or computing,
     * then sending, for an answer that is not streamed). */
    if (sread.n && scomp.n)
      printf("   server's Server-Timing (medians): body read %.1f ms, "
             "compute %.1f ms; the rest of the wall time %.1f ms\n",
             bench_median(&sread), bench_median(&scomp),
             bench_median(&http) - bench_median(&sread) -
                 bench_median(&scomp));
    else if (sread.n && searly.n)
      printf("   server's Server-Timing (medians): body read %.1f ms "
             "(%.0f%% of the in-process kernel), computing from its header "
             "on: %.0f%% of the pieces done by its end; then %.1f ms to the "
             "answer's last byte\n",
             bench_median(&sread),
             100.0 * bench_median(&sread) / bench_median(&kern),
             100.0 * bench_median(&searly),
             bench_median(&http) - bench_median(&sread));
    else if (sread.n)
      printf("   server's Server-Timing (medians): body read %.1f ms "
             "(%.0f%% of the in-process kernel); computed while the answer "
             "streamed: %.1f ms\n",
             bench_median(&sread),
             100.0 * bench_median(&sread) / bench_median(&kern),
             bench_median(&http) - bench_median(&sread));
    if (cpu_srv.n && ncpu > 0) {
      double floor_ms =
          (bench_median(&cpu_srv) + bench_median(&cpu_cli)) / ncpu;
      /* A server whose only CPU time were the kernel's (no receiving,
       * copying or sending of its own) against the same client. */
      double ideal_ms =
          (bench_median(&cpu_kern) + bench_median(&cpu_cli)) / ncpu;
      printf("   CPU per request (medians): server %.1f ms, client %.1f ms; "
             "in process %.1f ms.  Sharing %d cores, the request needs at "
             "least %.1f ms of wall time (%.2fx the in-process kernel); a "
             "server spending no CPU beyond the kernel's would still need "
             "%.1f ms (%.2fx)\n",
             bench_median(&cpu_srv), bench_median(&cpu_cli),
             bench_median(&cpu_kern), ncpu, floor_ms,
             floor_ms / bench_median(&kern), ideal_ms,
             ideal_ms / bench_median(&kern));
    }
    if (tcp.n)
      printf("   the body alone over loopback TCP (one thread to another, "
             "nothing else done): %.1f ms [%.1f-%.1f] = %.0f%% of the "
             "in-process kernel\n",
             bench_median(&tcp), bench_min(&tcp), bench_max(&tcp),
             100.0 * bench_median(&tcp) / bench_median(&kern));
    if (paced.n)
      printf("   uploaded at %.0f MB/s (a 1 Gbit/s network): the answer's "
             "last byte %.1f ms after the body's [%.1f-%.1f] (the kernel "
             "alone: %.1f ms); %.0f%% of the pieces done by the body's end\n",
             PACE_BPS * 1e-6, bench_median(&paced), bench_min(&paced),
             bench_max(&paced), bench_median(&kern),
             pearly.n ? 100.0 * bench_median(&pearly) : -1.0);
    if (uhttp.n)
      printf("   over the Unix socket (--unix-socket): %.1f ms [%.1f-%.1f] "
             "-> %.2fx; body read %.1f ms\n",
             bench_median(&uhttp), bench_min(&uhttp), bench_max(&uhttp),
             bench_median(&uhttp) / bench_median(&kern),
             usread.n ? bench_median(&usread) : -1.0);
    res_begin("http_attention");
    res_int("N", n);
    res_num("ms_median", bench_median(&http));
    res_num("kernel_ms_median", bench_median(&kern));
    res_median("server_read_ms", &sread);
    res_median("server_compute_ms", &scomp);
    res_median("server_early_done", &searly);
    res_median("server_cpu_ms", &cpu_srv);
    res_median("client_cpu_ms", &cpu_cli);
    res_median("kernel_cpu_ms", &cpu_kern);
    if (cpu_srv.n)
      res_int("cores", ncpu);
    res_median("paced_after_body_ms", &paced);
    res_median("tcp_body_ms", &tcp);
    res_median("unix_ms_median", &uhttp);
    res_median("unix_server_read_ms", &usread);
    res_end();
  }
out:
  http_resp_free(&resp);
  free(body);
  free(q);
  free(k);
  free(v);
  free(out);
}

static void rm_tmp(void)
{
  static const char *const names[] = {
      "attnbiasd.out", "attnbiasd.err", "bare-server.out", "bare-server.err",
      "wrk.out",       "wrk.err",       "small.json",      "small.resp",
      "attnbiasd-unix.out", "attnbiasd-unix.err", "attnbiasd.sock",
      "attnbiasd-tls.out", "attnbiasd-tls.err", "tls.crt", "tls.key"};
  char p[160];
  size_t i;

  for (i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", g_tmp, names[i]);
    unlink(p);
  }
  rmdir(g_tmp);
}

void bench_service(struct bench_pool *pool)
{
  struct server ours;
  char thr[16], hthr[16];
  char *argv[12];
  int threads = bench_pool_threads(pool), i = 0;
  /* attnbiasd's default number of HTTP polling threads (2..8), given
   * explicitly so that the bare server runs exactly as many. */
  int http_threads = threads < 2 ? 2 : threads > 8 ? 8 : threads;

  bench_section("service end to end on loopback (%d worker + %d HTTP "
                "threads, wrk -t2 -c64 -d%.0fs per load)",
                threads, http_threads, g_opt.http_seconds);
  if (!g_opt.server || access(g_opt.server, X_OK) != 0) {
    bench_skip("service rows", "no server binary at %s",
               g_opt.server ? g_opt.server : "(none given)");
    return;
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/attnbias-bench.XXXXXX");
  if (!mkdtemp(g_tmp)) {
    bench_skip("service rows", "mkdtemp: %s", strerror(errno));
    return;
  }
  snprintf(thr, sizeof thr, "%d", threads);
  snprintf(hthr, sizeof hthr, "%d", http_threads);
  argv[i++] = (char *)g_opt.server;
  argv[i++] = "--host";
  argv[i++] = "127.0.0.1";
  argv[i++] = "--port";
  argv[i++] = "0";
  argv[i++] = "--threads";
  argv[i++] = thr;
  argv[i++] = "--http-threads";
  argv[i++] = hthr;
  argv[i] = NULL;
  if (server_start(&ours, "attnbiasd", argv, "/healthz", 0) != 0) {
    bench_skip("service rows", "attnbiasd did not start");
    rm_tmp();
    return;
  }
  printf("   attnbiasd on 127.0.0.1:%d\n", ours.port);
  if (system("command -v wrk >/dev/null 2>&1") == 0)
    http_small(ours.port, ours.pid, g_opt.bare, http_threads);
  else
    bench_skip("http_small", "wrk is not installed (apt-get install wrk)");
  {
    /* The same server on a Unix socket, for the same request. */
    struct server us;
    char *uargv[12];
    int k = 0, ok;

    snprintf(g_unix, sizeof g_unix, "%s/attnbiasd.sock", g_tmp);
    uargv[k++] = (char *)g_opt.server;
    uargv[k++] = "--unix-socket";
    uargv[k++] = g_unix;
    uargv[k++] = "--threads";
    uargv[k++] = thr;
    uargv[k++] = "--http-threads";
    uargv[k++] = hthr;
    uargv[k] = NULL;
    ok = server_start(&us, "attnbiasd-unix", uargv, "/healthz", 1) == 0;
    if (!ok)
      printf("   (no attnbiasd on a Unix socket: http_attention over TCP "
             "only)\n");
    http_attention(pool, ours.port, ours.pid, ok);
    if (ok)
      bench_stop(us.pid, 5.0);
  }
  {
    /* The same request over HTTPS (bench/tls.c), plain HTTP to `ours` in
     * the same rounds. */
    struct server ts;
    char cert[160], key[160], *targv[16];
    int k = i;

    memcpy(targv, argv, (size_t)i * sizeof *argv);
    targv[k++] = "--tls-cert";
    targv[k++] = cert;
    targv[k++] = "--tls-key";
    targv[k++] = key;
    targv[k] = NULL;
    if (bench_tls_cert(g_tmp, cert, key, sizeof cert) != 0)
      bench_skip("http_attention_tls", "cannot make a certificate");
    else if (server_start(&ts, "attnbiasd-tls", targv, NULL, 0) != 0)
      bench_skip("http_attention_tls", "attnbiasd --tls-cert did not start");
    else {
      bench_tls_attention(ours.port, ts.port, cert);
      bench_stop(ts.pid, 5.0);
    }
  }
  bench_stop(ours.pid, 5.0);
  rm_tmp();
}
