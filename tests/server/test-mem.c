/* test-mem.c: the reuse of large blocks (util/buf.c srv_mem_*) and its two
 * users -- a freed large block comes back for the next allocation of a
 * similar size, small ones and oversized ones are simply freed, the cache
 * stays within SRV_MEM_KEEP_N blocks and SRV_MEM_KEEP_BYTES, trimming
 * frees what sat idle, and a block that came from the cache still behaves
 * like any malloc'd one.  srv_buf (request bodies, responses) and the
 * arena (output tensors) must hand their large blocks back.  Each test
 * runs in its own process, so the cache starts empty. */
#include "srv.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

TEST(mem_small_blocks_are_not_kept)
{
  size_t got = 0;
  unsigned char *p = srv_mem_alloc(100, &got);

  CHECK(p != NULL);
  CHECK((uintptr_t)p % SRV_MEM_ALIGN == 0);
  CHECK(got >= 100);
  memset(p, 0xab, got);
  srv_mem_free(p, got);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  srv_mem_free(NULL, 0); /* ignored */
  CHECK_EQ_I64(srv_mem_kept(), 0);
  return 0;
}

TEST(mem_large_block_is_reused)
{
  size_t got = 0, got2 = 0;
  unsigned char *p, *q;

  p = srv_mem_alloc(6 * MIB + 3, &got);
  CHECK(p != NULL);
  CHECK(got >= 6 * MIB + 3);
  CHECK((uintptr_t)p % SRV_MEM_ALIGN == 0);
  p[0] = 1;
  p[got - 1] = 2;
  srv_mem_free(p, got);
  CHECK_EQ_I64(srv_mem_kept(), got);
  /* A slightly smaller need takes the same block, whole. */
  q = srv_mem_alloc(6 * MIB, &got2);
  CHECK(q == p);
  CHECK_EQ_I64(got2, got);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  /* It is still an ordinary heap block: realloc keeps the bytes. */
  q[0] = 7;
  q[6 * MIB - 1] = 9;
  q = realloc(q, 12 * MIB);
  CHECK(q != NULL);
  CHECK(q[0] == 7 && q[6 * MIB - 1] == 9);
  free(q);
  return 0;
}

TEST(mem_block_twice_the_need_is_left_for_larger_requests)
{
  size_t g1 = 0, g2 = 0;
  void *big = srv_mem_alloc(40 * MIB, &g1), *small;

  CHECK(big != NULL);
  srv_mem_free(big, g1);
  small = srv_mem_alloc(5 * MIB, &g2);
  CHECK(small != NULL);
  CHECK(small != big);
  CHECK_EQ_I64(srv_mem_kept(), g1);
  /* A need larger than every kept block never gets a smaller one. */
  srv_mem_free(small, g2);
  small = srv_mem_alloc(41 * MIB, &g2);
  CHECK(small != NULL && small != big);
  CHECK(g2 >= 41 * MIB);
  free(small);
  srv_mem_trim(0);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  return 0;
}

TEST(mem_cache_is_bounded_and_keeps_the_newest)
{
  enum { N = SRV_MEM_KEEP_N + 4 };
  void *p[N], *q;
  size_t g[N], gq = 0, total = 0, huge = 0;
  int i;

  /* Distinct sizes, so each block is recognisable by its best fit. */
  for (i = 0; i < N; i++) {
    p[i] = srv_mem_alloc(SRV_MEM_BIG + (size_t)i * 4096, &g[i]);
    CHECK(p[i] != NULL);
  }
  for (i = 0; i < N; i++)
    srv_mem_free(p[i], g[i]);
  for (i = N - SRV_MEM_KEEP_N; i < N; i++)
    total += g[i];
  CHECK_EQ_I64(srv_mem_kept(), total);
  /* The oldest were dropped; the last given back comes out again. */
  q = srv_mem_alloc(g[N - 1], &gq);
  CHECK(q == p[N - 1]);
  srv_mem_free(q, gq);
  CHECK_EQ_I64(srv_mem_kept(), total);
  /* A block larger than the whole byte bound is never kept (it is only
   * address space: its pages are never touched here). */
  q = srv_mem_alloc(SRV_MEM_KEEP_BYTES + MIB, &huge);
  CHECK(q != NULL);
  srv_mem_free(q, huge);
  CHECK_EQ_I64(srv_mem_kept(), total);
  srv_mem_trim(0);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  return 0;
}

TEST(mem_trim_frees_only_idle_blocks)
{
  size_t got = 0;
  void *p = srv_mem_alloc(5 * MIB, &got);

  CHECK(p != NULL);
  srv_mem_free(p, got);
  srv_mem_trim(3600.0); /* given back just now: not idle for an hour */
  CHECK_EQ_I64(srv_mem_kept(), got);
  srv_mem_trim(0);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  return 0;
}

/* A request body reserved to its Content-Length, freed, and the next
 * body of the same size: the second gets the first's block, and growing
 * past it (a chunked body) still works and keeps the bytes. */
TEST(mem_srv_buf_reuses_large_blocks)
{
  struct srv_buf b;
  char chunk[4096];
  char *first;
  size_t i;

  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_buf_reserve(&b, 10 * MIB), 0);
  first = b.data;
  CHECK(first != NULL && b.cap >= 10 * MIB + 1);
  memset(b.data, 'x', 10 * MIB);
  srv_buf_free(&b);
  CHECK(b.data == NULL && b.cap == 0);
  CHECK(srv_mem_kept() >= 10 * MIB);

  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_buf_reserve(&b, 10 * MIB), 0);
  CHECK(b.data == first);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  for (i = 0; i < 3 * 1024; i++) { /* 12 MiB: past the block */
    memset(chunk, (int)('a' + i % 26), sizeof chunk);
    CHECK_EQ_I64(srv_buf_append(&b, chunk, sizeof chunk), 0);
  }
  CHECK_EQ_I64(b.len, 12 * MIB);
  for (i = 0; i < 3 * 1024; i++)
    CHECK(b.data[i * sizeof chunk] == (char)('a' + i % 26) &&
          b.data[i * sizeof chunk + sizeof chunk - 1] ==
              (char)('a' + i % 26));
  CHECK(b.data[b.len] == '\0');
  srv_buf_free(&b);
  srv_mem_trim(0);
  return 0;
}

/* An output tensor in one request's arena, then the same shape in the
 * next request's: the block is reused and stays 64-byte aligned. */
TEST(mem_arena_reuses_large_blocks)
{
  struct srv_arena a;
  float *t, *t2, *small;

  srv_arena_init(&a, 0);
  small = srv_arena_alloc(&a, 100);
  t = srv_arena_alloc(&a, 8 * MIB);
  CHECK(small != NULL && t != NULL);
  CHECK((uintptr_t)t % 64 == 0);
  t[0] = 1.5f;
  t[2 * MIB - 1] = -2.5f;
  srv_arena_free(&a);
  CHECK(srv_mem_kept() >= 8 * MIB);

  srv_arena_init(&a, 0);
  t2 = srv_arena_alloc(&a, 8 * MIB);
  CHECK(t2 == t);
  CHECK((uintptr_t)t2 % 64 == 0);
  CHECK_EQ_I64(srv_mem_kept(), 0);
  srv_arena_free(&a);

  /* The arena's cap still counts the bytes asked for. */
  srv_arena_init(&a, 6 * MIB);
  CHECK(srv_arena_alloc(&a, 8 * MIB) == NULL);
  CHECK(srv_arena_alloc(&a, 5 * MIB) != NULL);
  srv_arena_free(&a);
  srv_mem_trim(0);
  return 0;
}
