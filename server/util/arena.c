/* arena.c: the per-request arena.  Small allocations are carved from
 * shared chunks; large ones get a block of their own, so a big tensor never
 * forces one huge contiguous region and freeing is one walk of a list. */
#include "srv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 64
/* Chunk size for small allocations; an allocation larger than a quarter of
 * it gets its own block so that chunks are never mostly wasted. */
#define ARENA_CHUNK ((size_t)64 << 10)

struct srv_arena_block {
  struct srv_arena_block *next;
  size_t size; /* usable bytes after the header */
  size_t off;  /* bytes handed out */
  size_t alloc; /* bytes srv_mem_alloc gave, header included */
  /* Pads the header to ARENA_ALIGN so the data after it stays aligned. */
  char pad_[ARENA_ALIGN - 4 * sizeof(size_t)];
};

_Static_assert(sizeof(struct srv_arena_block) == ARENA_ALIGN,
               "arena block header must keep data 64-byte aligned");
_Static_assert(SRV_MEM_ALIGN % ARENA_ALIGN == 0,
               "srv_mem_alloc must align blocks for the arena");

void srv_arena_init(struct srv_arena *a, size_t cap)
{
  a->head = NULL;
  a->used = 0;
  a->cap = cap;
}

/* Allocate a block with `size` usable bytes, counted against the cap
 * (header included: the cap bounds what the arena takes from malloc). */
static struct srv_arena_block *block_new(struct srv_arena *a, size_t size)
{
  struct srv_arena_block *b;
  size_t total, got;
  void *p;

  if (size > SIZE_MAX - sizeof *b)
    return NULL;
  total = sizeof *b + size;
  if (a->cap && (total > a->cap || a->used > a->cap - total))
    return NULL;
  /* Large blocks (output tensors) come back already backed from an
   * earlier request when one of a similar size was freed. */
  p = srv_mem_alloc(total, &got);
  if (!p)
    return NULL;
  b = p;
  b->alloc = got;
  b->size = size;
  b->off = 0;
  a->used += total;
  return b;
}

void *srv_arena_alloc(struct srv_arena *a, size_t n)
{
  struct srv_arena_block *b;
  size_t need, chunk;

  /* Zero bytes still yield a distinct pointer: NULL means failure here. */
  if (n > SIZE_MAX - ARENA_ALIGN)
    return NULL;
  need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if (need == 0)
    need = ARENA_ALIGN;

  b = a->head;
  if (b && b->size - b->off >= need) {
    void *p = (char *)(b + 1) + b->off;
    b->off += need;
    return p;
  }
  if (need > ARENA_CHUNK / 4) {
    /* A block of its own, linked behind the current chunk so that the
     * chunk keeps serving small allocations. */
    b = block_new(a, need);
    if (!b)
      return NULL;
    b->off = need;
    if (a->head) {
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = NULL;
      a->head = b;
    }
    return b + 1;
  }
  chunk = ARENA_CHUNK;
  /* Near the cap, take a smaller chunk rather than failing early. */
  if (a->cap && a->cap - a->used < sizeof *b + chunk &&
      a->cap - a->used >= sizeof *b + need)
    chunk = a->cap - a->used - sizeof *b;
  b = block_new(a, chunk);
  if (!b)
    return NULL;
  b->off = need;
  b->next = a->head;
  a->head = b;
  return b + 1;
}

void *srv_arena_calloc(struct srv_arena *a, size_t n, size_t size)
{
  void *p;

  if (size && n > SIZE_MAX / size)
    return NULL;
  p = srv_arena_alloc(a, n * size);
  if (p)
    memset(p, 0, n * size);
  return p;
}

char *srv_arena_strdup(struct srv_arena *a, const char *s)
{
  size_t n;
  char *p;

  if (!s)
    return NULL;
  n = strlen(s) + 1;
  p = srv_arena_alloc(a, n);
  if (p)
    memcpy(p, s, n);
  return p;
}

void srv_arena_free(struct srv_arena *a)
{
  struct srv_arena_block *b = a->head, *next;

  while (b) {
    next = b->next;
    srv_mem_free(b, b->alloc);
    b = next;
  }
  a->head = NULL;
  a->used = 0;
}
