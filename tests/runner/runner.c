/* runner.c: runs every registered test in a child process with a timeout,
 * prints TAP and a closing "N passed, N failed" line; exit 1 on failure.
 * Usage: tests/run [-n] [name-substring ...]   (-n: no fork, for gdb) */
#include "test.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct test_entry {
  const char *name, *file;
  test_fn fn;
};

static struct test_entry *g_tests;
static int g_ntests, g_cap;

void test_register(const char *name, test_fn fn, const char *file)
{
  if (g_ntests == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 256;
    g_tests = realloc(g_tests, (size_t)g_cap * sizeof *g_tests);
    if (!g_tests)
      abort();
  }
  g_tests[g_ntests].name = name;
  g_tests[g_ntests].file = file;
  g_tests[g_ntests].fn = fn;
  g_ntests++;
}

int test_close(double got, double want, double rtol, double atol)
{
  if (isnan(want))
    return isnan(got);
  if (isinf(want))
    return got == want;
  if (!isfinite(got))
    return 0;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

int test_array_close(const char *file, int line, const char *what,
                     const float *got, const double *want, int64_t n,
                     double rtol, double atol)
{
  int64_t i, bad = 0, first = -1;
  double worst = 0;

  for (i = 0; i < n; i++) {
    if (!test_close(got[i], want[i], rtol, atol)) {
      if (first < 0)
        first = i;
      bad++;
    } else if (isfinite(want[i])) {
      double e = fabs(got[i] - want[i]) / (atol + rtol * fabs(want[i]));
      if (e > worst)
        worst = e;
    }
  }
  if (bad) {
    fprintf(stderr,
            "  %s:%d: %s: %lld of %lld elements differ; first [%lld] %.9g vs "
            "%.9g\n",
            file, line, what, (long long)bad, (long long)n, (long long)first,
            (double)got[first], want[first]);
    return 0;
  }
  return 1;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
void test_seed(uint64_t s) { g_rng = s ? s : 0x9e3779b97f4a7c15ull; }
static uint64_t next_u64(void)
{
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}
double test_uniform(double lo, double hi)
{
  return lo + (hi - lo) * (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0);
}
int64_t test_randint(int64_t lo, int64_t hi)
{
  return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

static int run_forked(const struct test_entry *t, int timeout_s)
{
  pid_t pid = fork();
  int status = 0, waited = 0;

  if (pid < 0)
    return t->fn();
  if (pid == 0) {
    alarm((unsigned)timeout_s);
    test_seed(0);
    _exit(t->fn() ? 1 : 0);
  }
  while (waitpid(pid, &status, 0) < 0)
    if (++waited > 1000)
      return 1;
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "  %s: killed by signal %d%s\n", t->name,
            WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
    return 1;
  }
  return WEXITSTATUS(status) != 0;
}

static int selected(const char *name, int argc, char **argv, int first)
{
  int i;

  if (first >= argc)
    return 1;
  for (i = first; i < argc; i++)
    if (strstr(name, argv[i]))
      return 1;
  return 0;
}

int main(int argc, char **argv)
{
  int first = 1, nofork = 0, passed = 0, failed = 0, n = 0, i;
  int timeout_s = getenv("AB_TEST_TIMEOUT") ? atoi(getenv("AB_TEST_TIMEOUT"))
                                            : 300;

  if (argc > 1 && strcmp(argv[1], "-n") == 0) {
    nofork = 1;
    first = 2;
  }
  for (i = 0; i < g_ntests; i++)
    n += selected(g_tests[i].name, argc, argv, first);
  printf("1..%d\n", n);
  fflush(stdout);
  n = 0;
  for (i = 0; i < g_ntests; i++) {
    const struct test_entry *t = &g_tests[i];
    struct timespec a, b;
    int bad;

    if (!selected(t->name, argc, argv, first))
      continue;
    clock_gettime(CLOCK_MONOTONIC, &a);
    bad = nofork ? t->fn() : run_forked(t, timeout_s);
    clock_gettime(CLOCK_MONOTONIC, &b);
    n++;
    printf("%s %d - %s (%.0f ms)\n", bad ? "not ok" : "ok", n, t->name,
           (double)(b.tv_sec - a.tv_sec) * 1e3 +
               (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    fflush(stdout);
    if (bad)
      failed++;
    else
      passed++;
  }
  printf("# isa=%s\n", getenv("AB_ISA") ? getenv("AB_ISA") : "auto");
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
