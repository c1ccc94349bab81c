/* common.c: what the bench (bench.c) and the soak (soak.c) both need --
 * child processes that die with their parent, small files, the port a
 * server prints, and safetensors request bodies. */
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ==== child processes: always killed, even on Ctrl-C =================== */

#define MAX_CHILDREN 16
static volatile pid_t g_children[MAX_CHILDREN];

void bench_child_add(pid_t pid)
{
  int i;

  for (i = 0; i < MAX_CHILDREN; i++)
    if (g_children[i] == 0) {
      g_children[i] = pid;
      return;
    }
}

void bench_child_remove(pid_t pid)
{
  int i;

  for (i = 0; i < MAX_CHILDREN; i++)
    if (g_children[i] == pid)
      g_children[i] = 0;
}

/* Async-signal-safe: only kill(2). */
static void kill_children(void)
{
  int i;

  for (i = 0; i < MAX_CHILDREN; i++)
    if (g_children[i] > 0)
      kill(g_children[i], SIGKILL);
}

static void on_signal(int sig)
{
  kill_children();
  signal(sig, SIG_DFL);
  raise(sig);
}

void bench_children_guard(void)
{
  signal(SIGPIPE, SIG_IGN); /* a dying server must not kill the caller */
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  atexit(kill_children);
}

pid_t bench_spawn(char *const argv[], const char *out, const char *err)
{
  pid_t pid = fork();

  if (pid < 0)
    return -1;
  if (pid == 0) {
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fi = open("/dev/null", O_RDONLY);

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (fo < 0 || fe < 0 || fi < 0)
      _exit(126);
    dup2(fi, 0);
    dup2(fo, 1);
    dup2(fe, 2);
    /* Only the three: a descriptor of the parent's (a client socket of
     * the soak) must not live on in the child. */
    closefrom(3);
    execvp(argv[0], argv);
    _exit(127);
  }
  bench_child_add(pid);
  return pid;
}

int bench_wait(pid_t pid, double timeout, int *status)
{
  double end = bench_now() + timeout;

  do {
    pid_t r = waitpid(pid, status, WNOHANG);

    if (r == pid || (r < 0 && errno == ECHILD))
      return 1;
    usleep(10000);
  } while (bench_now() < end);
  return 0;
}

int bench_stop(pid_t pid, double timeout)
{
  int status = -1;

  if (pid <= 0)
    return -1;
  kill(pid, SIGTERM);
  if (!bench_wait(pid, timeout, &status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    status = -1;
  }
  bench_child_remove(pid);
  return status;
}

/* ==== files ============================================================== */

char *bench_slurp(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  char *s;
  long n;

  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  s = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (s && n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
    n = 0;
  if (s)
    s[n > 0 ? n : 0] = '\0';
  fclose(f);
  if (len)
    *len = (size_t)(n > 0 ? n : 0);
  return s;
}

int bench_write_file(const char *path, const void *p, size_t n)
{
  FILE *f = fopen(path, "wb");
  int ok;

  if (!f)
    return -1;
  ok = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

int bench_parse_port(const char *text)
{
  const char *line = text;

  while (line && *line) {
    const char *end = strchr(line, '\n'), *p;
    char one[512];
    size_t len = end ? (size_t)(end - line) : strlen(line);
    long v;

    if (len >= sizeof one)
      len = sizeof one - 1;
    memcpy(one, line, len);
    one[len] = '\0';
    if ((p = strstr(one, "127.0.0.1:")) || (p = strstr(one, "localhost:")))
      p = strchr(p, ':') + 1;
    else if ((p = strstr(one, "port")))
      for (p += 4; *p && !isdigit((unsigned char)*p); p++)
        if (isalpha((unsigned char)*p)) {
          p = NULL;
          break;
        }
    if (!p) {
      for (p = one; *p == ' '; p++)
        ;
      if (!isdigit((unsigned char)*p) ||
          strspn(p, "0123456789 \r") != strlen(p))
        p = NULL;
    }
    if (p && (v = strtol(p, NULL, 10)) > 0 && v < 65536)
      return (int)v;
    line = end ? end + 1 : NULL;
  }
  return 0;
}

/* ==== safetensors bodies ================================================= */

/* Append s to the header being built as the body of a JSON string. */
static size_t put_escaped(char *dst, size_t at, size_t cap, const char *s)
{
  for (; *s; s++) {
    if ((*s == '"' || *s == '\\') && at < cap)
      dst[at++] = '\\';
    if (at < cap)
      dst[at++] = *s;
  }
  return at;
}

char *bench_safetensors(const struct bench_st_tensor *t, int n,
                        const char *params, size_t *len)
{
  char hdr[4096];
  size_t hl = 0, pad, total, data = 0, off;
  char *buf;
  int i;

  /* safetensors: u64 little-endian header length, the JSON header (padded
   * with spaces to 8 bytes, as the reference writer does), then the raw
   * little-endian data at the offsets the header gives.  The request's
   * other fields travel as a JSON string in __metadata__["params"]. */
  hl += (size_t)snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"params\":\"");
  hl = put_escaped(hdr, hl, sizeof hdr, params ? params : "{}");
  hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "\"}");
  for (i = 0; i < n && hl < sizeof hdr; i++) {
    size_t bytes = 4;

    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl,
                           ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", t[i].name);
    for (int r = 0; r < t[i].rank && hl < sizeof hdr; r++) {
      bytes *= (size_t)t[i].shape[r];
      hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s%lld",
                             r ? "," : "", (long long)t[i].shape[r]);
    }
    if (hl < sizeof hdr)
      hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl,
                             "],\"data_offsets\":[%zu,%zu]}", data,
                             data + bytes);
    data += bytes;
  }
  if (hl + 1 >= sizeof hdr)
    return NULL; /* more tensors or longer params than a bench body has */
  hdr[hl++] = '}';
  pad = (8 - hl % 8) % 8;
  total = 8 + hl + pad + data;
  buf = malloc(total);
  if (!buf)
    return NULL;
  for (i = 0; i < 8; i++)
    buf[i] = (char)(((uint64_t)hl + pad) >> (8 * i) & 0xff);
  memcpy(buf + 8, hdr, hl);
  memset(buf + 8 + hl, ' ', pad);
  /* x86 and every platform the server targets are little-endian, as
   * safetensors requires, so the floats are copied as they are. */
  off = 8 + hl + pad;
  for (i = 0; i < n; i++) {
    size_t bytes = 4;

    for (int r = 0; r < t[i].rank; r++)
      bytes *= (size_t)t[i].shape[r];
    memcpy(buf + off, t[i].data, bytes);
    off += bytes;
  }
  *len = total;
  return buf;
}

char *bench_safetensors_qkv(const float *q, const float *k, const float *v,
                            int h, int n, int d, size_t *len)
{
  const struct bench_st_tensor t[3] = {{"q", q, 4, {1, h, n, d}},
                                       {"k", k, 4, {1, h, n, d}},
                                       {"v", v, 4, {1, h, n, d}}};

  return bench_safetensors(t, 3, NULL, len);
}
