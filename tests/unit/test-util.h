/* test-util.h: helpers shared by the unit tests -- a failing, counting
 * allocator for ab_set_allocator and the check that a call fails naming an
 * argument.  Everything is static: each test file gets its own copy (and
 * its own counters), as it had when each file wrote these itself. */
#ifndef AB_TEST_UTIL_H
#define AB_TEST_UTIL_H

#include "attnbias.h"
#include "test.h"

/* A call fails with `status`, naming `argname` in a non-empty message.  The
 * error is cleared first, so a stale one from an earlier call cannot
 * pass. */
#define CHECK_FAILS(call, status, argname)                                     \
  do {                                                                         \
    ab_clear_error();                                                          \
    CHECK_EQ_I64((call), (status));                                            \
    CHECK_STR(ab_last_error()->arg, (argname));                                \
    CHECK(ab_last_error()->msg[0] != 0);                                       \
  } while (0)

/* The allocator's state: allocation number fail_at (counting from 0 since
 * test_alloc_install) returns NULL, and with fail_rest every later one too.
 * calls counts every request, failed or not; live the blocks allocated and
 * not yet freed through the hook; bytes what was handed out. */
static struct {
  int64_t fail_at; /* -1: nothing fails */
  int fail_rest;
  int64_t calls, live;
  size_t bytes;
} test_alloc = {-1, 0, 0, 0, 0};

static inline void *test_alloc_malloc(size_t n)
{
  const int64_t i = test_alloc.calls++;
  void *p;

  if (test_alloc.fail_at >= 0 &&
      (i == test_alloc.fail_at ||
       (test_alloc.fail_rest && i > test_alloc.fail_at)))
    return NULL;
  p = malloc(n);
  if (p) {
    test_alloc.live++;
    test_alloc.bytes += n;
  }
  return p;
}

static inline void test_alloc_free(void *p)
{
  if (p)
    test_alloc.live--;
  free(p);
}

/* Reset the counters and route the library's allocations through the hook;
 * fail_at -1 only counts. */
static inline void test_alloc_install(int64_t fail_at, int fail_rest)
{
  test_alloc.fail_at = fail_at;
  test_alloc.fail_rest = fail_rest;
  test_alloc.calls = 0;
  test_alloc.live = 0;
  test_alloc.bytes = 0;
  ab_set_allocator(test_alloc_malloc, test_alloc_free);
}

/* Back to malloc/free (the counters keep their values for inspection). */
static inline void test_alloc_remove(void)
{
  ab_set_allocator(NULL, NULL);
  test_alloc.fail_at = -1;
}

#endif /* AB_TEST_UTIL_H */
