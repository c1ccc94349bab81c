/* test.h: the test harness -- self-registering TEST()s and assertions that
 * print both sides.  Each test file is its own translation unit; a test
 * registers itself from a constructor, so no shared list needs editing. */
#ifndef AB_TEST_H
#define AB_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*test_fn)(void);
void test_register(const char *name, test_fn fn, const char *file);

#define TEST(name)                                                             \
  static int test_##name(void);                                                \
  __attribute__((constructor)) static void test_reg_##name(void)               \
  {                                                                            \
    test_register(#name, test_##name, __FILE__);                               \
  }                                                                            \
  static int test_##name(void)

#define FAIL_AT(...)                                                           \
  do {                                                                         \
    fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                          \
    fprintf(stderr, __VA_ARGS__);                                              \
    fputc('\n', stderr);                                                       \
    return 1;                                                                  \
  } while (0)

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c))                                                                  \
      FAIL_AT("CHECK(%s) failed", #c);                                         \
  } while (0)

#define CHECK_EQ_I64(a, b)                                                     \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    if (a_ != b_)                                                              \
      FAIL_AT("%s == %s (%lld vs %lld)", #a, #b, a_, b_);                      \
  } while (0)

#define CHECK_STR(a, b)                                                        \
  do {                                                                         \
    const char *a_ = (a), *b_ = (b);                                           \
    if (!a_ || !b_ || strcmp(a_, b_) != 0)                                     \
      FAIL_AT("%s == %s (\"%s\" vs \"%s\")", #a, #b, a_ ? a_ : "(null)",       \
              b_ ? b_ : "(null)");                                             \
  } while (0)

/* A library call must return AB_STATUS_OK; print the recorded error if not. */
#define CHECK_OK(call)                                                         \
  do {                                                                         \
    int st_ = (int)(call);                                                     \
    if (st_ != 0)                                                              \
      FAIL_AT("%s returned %d (%s: %s)", #call, st_, ab_last_error()->arg,    \
              ab_last_error()->msg);                                           \
  } while (0)

/* |got - want| <= atol + rtol*|want| for doubles; infinities must match. */
int test_close(double got, double want, double rtol, double atol);
#define CHECK_CLOSE(got, want, rtol, atol)                                     \
  do {                                                                         \
    double g_ = (double)(got), w_ = (double)(want);                            \
    if (!test_close(g_, w_, rtol, atol))                                       \
      FAIL_AT("%s ~ %s (%.9g vs %.9g)", #got, #want, g_, w_);                  \
  } while (0)

/* Compare n floats with a double reference; report the first mismatch. */
int test_array_close(const char *file, int line, const char *what,
                     const float *got, const double *want, int64_t n,
                     double rtol, double atol);
#define CHECK_ARRAY(got, want, n, rtol, atol)                                  \
  do {                                                                         \
    if (!test_array_close(__FILE__, __LINE__, #got, got, want, n, rtol, atol)) \
      return 1;                                                                \
  } while (0)

/* Deterministic random numbers (xorshift64*), uniform in [lo, hi). */
void test_seed(uint64_t s);
double test_uniform(double lo, double hi);
int64_t test_randint(int64_t lo, int64_t hi); /* inclusive */

#endif
