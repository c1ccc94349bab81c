/* jsonmem.c: jansson's allocator with a per-thread budget.
 *
 * Why: jansson builds one node per JSON value.  An empty object costs it
 * about 200 bytes for 3 bytes of text, so a body of "{},{},..." within the
 * default 256 MiB cap would need ~15 GiB, and two of them at once (two HTTP
 * threads) get the process killed by the kernel.  The budget turns that
 * into a refused allocation, which jansson reports as a parse error and
 * call/call.c as a 413.
 *
 * The budget is thread-local: decoding happens on the HTTP thread that
 * received the body, with nothing else using jansson on that thread in
 * between, so no locking is needed.  Frees are counted too (jansson grows
 * arrays by reallocation), with malloc_usable_size giving the size. */
#include "util/jsonmem.h"

#include <jansson.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

struct budget {
  int on;      /* a budget is open on this thread */
  int refused; /* an allocation was refused since it opened */
  size_t used, peak, cap;
};

static _Thread_local struct budget g_budget;

static void *jm_malloc(size_t n)
{
  struct budget *b = &g_budget;
  void *p;

  if (b->on && (n > b->cap || b->used > b->cap - n)) {
    b->refused = 1;
    return NULL;
  }
  p = malloc(n);
  if (p && b->on) {
    b->used += malloc_usable_size(p);
    if (b->used > b->peak)
      b->peak = b->used;
  }
  return p;
}

static void jm_free(void *p)
{
  struct budget *b = &g_budget;

  if (p && b->on) {
    /* A value allocated before the budget opened may be freed inside it:
     * never count below zero. */
    size_t n = malloc_usable_size(p);
    b->used -= n < b->used ? n : b->used;
  }
  free(p);
}

void srv_jsonmem_install(void) { json_set_alloc_funcs(jm_malloc, jm_free); }

void srv_jsonmem_begin(size_t cap)
{
  g_budget.on = 1;
  g_budget.refused = 0;
  g_budget.used = g_budget.peak = 0;
  g_budget.cap = cap;
}

int srv_jsonmem_end(size_t *peak)
{
  if (peak)
    *peak = g_budget.peak;
  g_budget.on = 0;
  return g_budget.refused;
}

size_t srv_jsonmem_request_cap(size_t max_body)
{
  size_t floor = (size_t)64 << 20;

  if (max_body > SIZE_MAX / 8)
    return SIZE_MAX;
  return 8 * max_body > floor ? 8 * max_body : floor;
}
