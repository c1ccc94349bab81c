/* peer.c: torch as a peer, side by side in the same run.  torch_bench.py
 * runs as a coprocess of /usr/bin/python3 speaking a line protocol on its
 * stdin/stdout; the bench asks for one timed repetition at a time, so the
 * peer's repetitions interleave with ours (A B A B) and both see the same
 * state of the shared machine.  Every read has a deadline: a hung or dead
 * peer is killed and the bench goes on without it. */
#include "bench.h"

#include <errno.h>
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

int peer_alive(void) { return g_pid > 0; }
int peer_has_sdpa(void) { return g_sdpa; }

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
  printf("torch peer: %s (same %d threads, interleaved with ours)\n",
         line + 6, g_opt.threads);
  return 0;
}

/* Send one command and read "ok <ms>"; anything else stops the peer. */
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
