/* peer.c: torch as a peer, side by side in the same run.  torch_bench.py
 * runs as a coprocess of /usr/bin/python3 speaking a line protocol on its
 * stdin/stdout; the bench asks for one timed repetition at a time, so the
 * peer's repetitions interleave with ours (A B A B) and both see the same
 * state of the shared machine.  Every read has a deadline: a hung or dead
 * peer is killed and the bench goes on without it.
 *
 * Before anything is timed, the peer computes every case it will be timed
 * on (attention matmul / SDPA variants, RoPE pairings) on small inputs the
 * bench writes to a file, and its outputs are compared with ours: a peer
 * that computes something else is not timed.  The peer also says which
 * OpenBLAS core it runs (and sets a better one than OpenBLAS detected; see
 * torch_bench.py), and the torch rows carry it. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t g_pid = -1;
static FILE *g_to;          /* peer's stdin */
static int g_from = -1;     /* peer's stdout */
static char g_buf[4096];    /* bytes read but not yet consumed */
static size_t g_have;
static int g_sdpa;
static char g_core[64] = "none"; /* OpenBLAS core the peer runs */

int peer_alive(void) { return g_pid > 0; }
int peer_has_sdpa(void) { return g_sdpa; }
const char *peer_openblas_core(void) { return g_core; }

void peer_stop(void)
{
  int status;

  if (g_pid <= 0)
    return;
  if (g_to) {
    fputs("quit\n", g_to);
    fflush(g_to);
  }
  /* Give it a moment to leave cleanly, then make sure. */
  for (int i = 0; i < 50; i++) {
    if (waitpid(g_pid, &status, WNOHANG) == g_pid)
      goto reaped;
    usleep(20000);
  }
  kill(g_pid, SIGKILL);
  waitpid(g_pid, &status, 0);
reaped:
  bench_child_remove(g_pid);
  g_pid = -1;
  if (g_to)
    fclose(g_to);
  g_to = NULL;
  if (g_from >= 0)
    close(g_from);
  g_from = -1;
  g_have = 0;
}

/* Read one line (without its newline) into line within timeout seconds.
 * 0 on success, -1 on EOF, error or timeout. */
static int read_line(char *line, size_t size, double timeout)
{
  double deadline = bench_now() + timeout;

  for (;;) {
    char *nl = memchr(g_buf, '\n', g_have);
    struct pollfd pfd = {g_from, POLLIN, 0};
    double left;
    ssize_t got;

    if (nl) {
      size_t len = (size_t)(nl - g_buf);

      if (len >= size)
        len = size - 1;
      memcpy(line, g_buf, len);
      line[len] = '\0';
      g_have -= (size_t)(nl - g_buf) + 1;
      memmove(g_buf, nl + 1, g_have);
      return 0;
    }
    if (g_have == sizeof g_buf)
      g_have = 0; /* an absurdly long line: drop it */
    left = deadline - bench_now();
    if (left <= 0)
      return -1;
    if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
      continue;
    got = read(g_from, g_buf + g_have, sizeof g_buf - g_have);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return -1;
    g_have += (size_t)got;
  }
}

int peer_start(void)
{
  int in[2], outp[2];
  char line[512], threads[16];
  pid_t pid;

  if (access(g_opt.torch, R_OK) != 0) {
    bench_skip("torch peer", "%s not readable", g_opt.torch);
    return -1;
  }
  if (pipe(in) || pipe(outp)) {
    bench_skip("torch peer", "pipe: %s", strerror(errno));
    return -1;
  }
  snprintf(threads, sizeof threads, "%d", g_opt.threads);
  pid = fork();
  if (pid < 0) {
    bench_skip("torch peer", "fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the bench */
    dup2(in[0], 0);
    dup2(outp[1], 1);
    close(in[0]);
    close(in[1]);
    close(outp[0]);
    close(outp[1]);
    execl(g_opt.python, g_opt.python, g_opt.torch, "--serve", "--threads",
          threads, (char *)NULL);
    _exit(127);
  }
  bench_child_add(pid);
  close(in[0]);
  close(outp[1]);
  g_pid = pid;
  g_to = fdopen(in[1], "w");
  g_from = outp[0];
  /* First line: "ready <version> sdpa=<0|1>" or "absent <reason>".
   * Importing torch takes a few seconds on a cold cache. */
  if (!g_to || read_line(line, sizeof line, 60.0) != 0) {
    peer_stop();
    bench_skip("torch peer", "%s %s did not answer", g_opt.python,
               g_opt.torch);
    return -1;
  }
  if (strncmp(line, "ready ", 6) != 0) {
    peer_stop();
    bench_skip("torch peer", "%s", strncmp(line, "absent ", 7) == 0
                                       ? line + 7
                                       : line);
    return -1;
  }
  g_sdpa = strstr(line, "sdpa=1") != NULL;
  {
    const char *o = strstr(line, "openblas="), *f = strstr(line, "first=");
    char first[96] = "";
    if (o)
      sscanf(o, "openblas=%63s", g_core);
    if (f)
      sscanf(f, "first=%95s", first);
    printf("torch peer: %.*s (same %d threads, interleaved with ours)\n",
           o ? (int)(o - line - 7) : (int)strlen(line + 6), line + 6,
           g_opt.threads);
    if (first[0] && strcmp(first, g_core) != 0)
      printf("  OpenBLAS core %s: it first picked %s, older than this CPU "
             "runs, so the peer set OPENBLAS_CORETYPE=%s\n",
             g_core, first, g_core);
    else
      printf("  OpenBLAS core %s (the best this CPU runs, or not OpenBLAS)\n",
             g_core);
  }
  if (peer_check() != 0) {
    peer_stop();
    return -1;
  }
  return 0;
}

/* Send one command and read "ok <ms>"; anything else stops the peer. */
static double ask(const char *cmd);

/* ---- the check: the peer's outputs against ours ----------------------- */

#define CHK_H 4
#define CHK_N 256
#define CHK_D 64
#define CHK_ROPE_N 64

/* Write n floats of each array to path; 0 on success. */
static int write_floats(const char *path, const float *const *a,
                        const size_t *n, int count)
{
  FILE *f = fopen(path, "wb");
  int i, ok = f != NULL;

  for (i = 0; ok && i < count; i++)
    ok = fwrite(a[i], sizeof(float), n[i], f) == n[i];
  if (f && fclose(f) != 0)
    ok = 0;
  return ok ? 0 : -1;
}

/* Max |a - b| against the peer's <path>.out, or -1 when it cannot be read. */
static double out_diff(const char *path, const float *ours, size_t n)
{
  char out[512];
  float *theirs = bench_alloc(n * sizeof(float));
  double err = -1;
  size_t i;
  FILE *f;

  snprintf(out, sizeof out, "%s.out", path);
  if ((f = fopen(out, "rb")) != NULL) {
    if (fread(theirs, sizeof(float), n, f) == n)
      for (err = 0, i = 0; i < n; i++)
        err = fmax(err, fabs((double)ours[i] - theirs[i]));
    fclose(f);
  }
  remove(out);
  free(theirs);
  return err;
}

/* Our attention on the check's inputs (bhsd), variant as the peer's. */
static int ours_attention(const char *variant, float *q, float *k, float *v,
                          float *out)
{
  const int64_t sh[4] = {1, CHK_H, CHK_N, CHK_D};
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct ab_bias_params bp;

  if (ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, sh) ||
      ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, sh) ||
      ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, sh))
    return -1;
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv, p.out = out;
  p.causal = strcmp(variant, "causal") == 0;
  if (strcmp(variant, "alibi") == 0) {
    ab_bias_params_init(&bp);
    bp.method = AB_BIAS_ALIBI;
    bp.num_heads = CHK_H;
    bp.max_bias = 8.0;
    p.bias = &bp;
  }
  return ab_attention(&p) == AB_STATUS_OK ? 0 : -1;
}

/* Default RoPE (base 10000, positions 0..N-1) of x [1, 32, N, 128]. */
static int ours_rope(int interleaved, int is_key, float *x, float *out)
{
  const int64_t sh[4] = {1, 32, CHK_ROPE_N, 128};
  struct ab_rope_params p;
  struct ab_tensor t;
  int64_t pos[CHK_ROPE_N];
  int i;

  for (i = 0; i < CHK_ROPE_N; i++)
    pos[i] = i;
  if (ab_tensor_init(&t, x, AB_DTYPE_F32, 4, sh))
    return -1;
  ab_rope_params_init(&p);
  p.head_dim = 128;
  p.rope_theta = 10000.0;
  p.interleaved = interleaved;
  return ab_rope_apply(&p, CHK_ROPE_N, &t, AB_LAYOUT_BHSD, pos, is_key,
                       out) == AB_STATUS_OK
             ? 0
             : -1;
}

int peer_check(void)
{
  static const struct {
    const char *impl, *variant;
    int sdpa;
  } cases[] = {{"matmul", "dense", 0}, {"matmul", "causal", 0},
               {"matmul", "alibi", 0}, {"sdpa", "dense", 1},
               {"sdpa", "causal", 1}};
  const size_t per = (size_t)CHK_H * CHK_N * CHK_D;
  const size_t rper = (size_t)32 * CHK_ROPE_N * 128;
  float *q = bench_alloc(per * 4), *k = bench_alloc(per * 4);
  float *v = bench_alloc(per * 4), *out = bench_alloc(2 * rper * 4);
  float *rq = bench_alloc(rper * 4), *rk = bench_alloc(rper * 4);
  char path[] = "/tmp/attnbias-bench-check-XXXXXX", cmd[640];
  double worst_attn = 0, worst_rope = 0, err = -1;
  int fd = mkstemp(path), i, bad = 0;

  if (fd < 0) {
    bench_skip("torch peer", "cannot create a file for the check: %s",
               strerror(errno));
    bad = 1;
    goto done;
  }
  close(fd);
  bench_fill(q, per, 61, 1.0f);
  bench_fill(k, per, 62, 1.0f);
  bench_fill(v, per, 63, 1.0f);
  {
    const float *a[3] = {q, k, v};
    const size_t n[3] = {per, per, per};
    bad = write_floats(path, a, n, 3) != 0;
  }
  for (i = 0; !bad && i < (int)(sizeof cases / sizeof cases[0]); i++) {
    if (cases[i].sdpa && !g_sdpa)
      continue;
    snprintf(cmd, sizeof cmd, "check attn %s %s %d %d %d %d %s",
             cases[i].impl, cases[i].variant, CHK_H, CHK_H, CHK_N, CHK_D,
             path);
    if (ask(cmd) < 0 || ours_attention(cases[i].variant, q, k, v, out) != 0 ||
        (err = out_diff(path, out, per)) < 0 || err > 1e-4) {
      printf("  torch peer: attention %s %s differs from ours (max |diff| "
             "%g, or no answer): not timed\n",
             cases[i].impl, cases[i].variant, g_pid > 0 ? err : -1.0);
      bad = 1;
    }
    worst_attn = fmax(worst_attn, err);
  }
  bench_fill(rq, rper, 64, 1.0f);
  bench_fill(rk, rper, 65, 1.0f);
  {
    const float *a[2] = {rq, rk};
    const size_t n[2] = {rper, rper};
    bad |= write_floats(path, a, n, 2) != 0;
  }
  for (i = 0; !bad && i < 2; i++) {
    snprintf(cmd, sizeof cmd, "check rope %s %d %s",
             i ? "interleaved" : "half", CHK_ROPE_N, path);
    if (ask(cmd) < 0 || ours_rope(i, 0, rq, out) != 0 ||
        ours_rope(i, 1, rk, out + rper) != 0 ||
        (err = out_diff(path, out, 2 * rper)) < 0 || err > 1e-5) {
      printf("  torch peer: RoPE %s differs from ours (max |diff| %g, or no "
             "answer): not timed\n",
             i ? "interleaved" : "half", err);
      bad = 1;
    }
    worst_rope = fmax(worst_rope, err);
  }
  if (!bad)
    printf("  checked before timing: torch's attention (%d cases, [1,%d,%d,%d]) "
           "within %.1e of ours, RoPE (2 pairings) within %.1e\n",
           g_sdpa ? 5 : 3, CHK_H, CHK_N, CHK_D, worst_attn, worst_rope);
  remove(path);
done:
  free(q), free(k), free(v), free(out), free(rq), free(rk);
  return bad ? -1 : 0;
}

static double ask(const char *cmd)
{
  char line[512];
  double ms;

  if (g_pid <= 0)
    return -1;
  fprintf(g_to, "%s\n", cmd);
  fflush(g_to);
  /* The slowest single repetition (matmul N=4096, H=8) takes seconds;
   * two minutes means the peer is stuck. */
  if (read_line(line, sizeof line, 120.0) != 0) {
    printf("  torch peer did not answer '%s'; stopping it\n", cmd);
    peer_stop();
    return -1;
  }
  if (sscanf(line, "ok %lf", &ms) != 1) {
    printf("  torch peer: '%s' -> %s; stopping it\n", cmd, line);
    peer_stop();
    return -1;
  }
  return ms;
}

double peer_attention(const char *impl, const char *variant, int hq, int hkv,
                      int n, int d)
{
  char cmd[128];

  snprintf(cmd, sizeof cmd, "attn %s %s %d %d %d %d", impl, variant, hq, hkv,
           n, d);
  return ask(cmd);
}

double peer_rope(const char *pairing, int n)
{
  char cmd[128];

  snprintf(cmd, sizeof cmd, "rope %s %d", pairing, n);
  return ask(cmd);
}
