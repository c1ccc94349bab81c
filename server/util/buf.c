/* buf.c: srv_buf, a growable byte buffer with a ceiling (the curl dynbuf
 * idea): request bodies and responses grow in it and can never exceed what
 * the configuration allows.  The bytes are kept NUL-terminated (not counted
 * in len or against max) so text can be read in place. */
#include "srv.h"

#include <pthread.h>
#include <stdarg.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------
 * Large blocks kept for reuse
 *
 * A binary /v1/attention request at N=2048 allocates a 100 MB body and a
 * 34 MB output.  Fresh memory comes from mmap, and the kernel zeroes every
 * page on first touch: measured at 60 ms of CPU per such request on the
 * reference VM (perf: clear_page_erms), more than all the rest of the
 * service's own work on it.  Blocks of SRV_MEM_BIG bytes or more are
 * therefore kept when freed, already backed, for the next request.  The
 * cache is bounded in count and bytes, and srv_mem_trim (called by the
 * pool's loop every few seconds) returns blocks that sat unused.
 *
 * No MADV_HUGEPAGE: with the blocks reused, huge pages saved nothing in the
 * steady state, and fresh ones cost far more on the reference VM -- first
 * touch of 100 MB took 208-242 ms in huge pages against 39-52 ms in 4 KiB
 * pages (the host backs a fresh huge page on demand), so the first large
 * request after an idle spell took 330-510 ms instead of about 270 ms.
 * --------------------------------------------------------------------- */

struct mem_kept {
  void *p;
  size_t size;
  double since; /* CLOCK_MONOTONIC seconds when it was given back */
};

static pthread_mutex_t g_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_kept g_kept[SRV_MEM_KEEP_N]; /* under g_mem_lock */
static int g_nkept;                            /* under g_mem_lock */
static size_t g_kept_bytes;                    /* under g_mem_lock */

static double mono_s(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *srv_mem_alloc(size_t n, size_t *got)
{
  size_t best = SIZE_MAX, size;
  void *p = NULL;
  int i, pick = -1;

  if (n == 0)
    n = 1;
  if (n >= SRV_MEM_BIG) {
    pthread_mutex_lock(&g_mem_lock);
    /* Best fit, and never a block more than twice the need: a small
     * request must not take the block a large one will want. */
    for (i = 0; i < g_nkept; i++)
      if (g_kept[i].size >= n && g_kept[i].size / 2 <= n &&
          g_kept[i].size < best) {
        best = g_kept[i].size;
        pick = i;
      }
    if (pick >= 0) {
      p = g_kept[pick].p;
      size = g_kept[pick].size;
      g_kept_bytes -= size;
      g_kept[pick] = g_kept[--g_nkept];
    }
    pthread_mutex_unlock(&g_mem_lock);
    if (p) {
      *got = size;
      return p;
    }
  }
  /* aligned_alloc wants a multiple of the alignment; the result can be
   * passed to realloc and free like any malloc'd block (C11). */
  size = (n + SRV_MEM_ALIGN - 1) & ~(size_t)(SRV_MEM_ALIGN - 1);
  if (size < n)
    return NULL;
  p = aligned_alloc(SRV_MEM_ALIGN, size);
  if (!p)
    return NULL;
  *got = size;
  return p;
}

void srv_mem_free(void *p, size_t size)
{
  double now;
  int i;

  if (!p)
    return;
  /* Only aligned blocks can serve every caller of srv_mem_alloc. */
  if (size < SRV_MEM_BIG || size > SRV_MEM_KEEP_BYTES ||
      (uintptr_t)p % SRV_MEM_ALIGN != 0) {
    free(p);
    return;
  }
  now = mono_s();
  pthread_mutex_lock(&g_mem_lock);
  /* Make room by dropping the oldest blocks: recent sizes are the ones
   * likely to come again. */
  while (g_nkept > 0 && (g_nkept == SRV_MEM_KEEP_N ||
                         g_kept_bytes + size > SRV_MEM_KEEP_BYTES)) {
    int old = 0;
    void *q;
    for (i = 1; i < g_nkept; i++)
      if (g_kept[i].since < g_kept[old].since)
        old = i;
    q = g_kept[old].p;
    g_kept_bytes -= g_kept[old].size;
    g_kept[old] = g_kept[--g_nkept];
    /* free() of a large block is a munmap: do it outside the lock. */
    pthread_mutex_unlock(&g_mem_lock);
    free(q);
    pthread_mutex_lock(&g_mem_lock);
  }
  g_kept[g_nkept].p = p;
  g_kept[g_nkept].size = size;
  g_kept[g_nkept].since = now;
  g_nkept++;
  g_kept_bytes += size;
  pthread_mutex_unlock(&g_mem_lock);
}

void srv_mem_trim(double idle_s)
{
  double now = mono_s();
  void *drop[SRV_MEM_KEEP_N];
  int i = 0, n = 0;

  pthread_mutex_lock(&g_mem_lock);
  while (i < g_nkept) {
    if (now - g_kept[i].since >= idle_s) {
      drop[n++] = g_kept[i].p;
      g_kept_bytes -= g_kept[i].size;
      g_kept[i] = g_kept[--g_nkept];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&g_mem_lock);
  for (i = 0; i < n; i++)
    free(drop[i]);
}

size_t srv_mem_kept(void)
{
  size_t n;

  pthread_mutex_lock(&g_mem_lock);
  n = g_kept_bytes;
  pthread_mutex_unlock(&g_mem_lock);
  return n;
}

/* glibc keeps what its heaps freed: after a load of large requests its
 * mmap threshold has grown (it follows the largest block freed, up to
 * 32 MiB), so bodies and outputs came from the heaps, and a server back
 * to idle stays at the RSS of its busiest moment.  malloc_trim(0) walks
 * every arena and gives the free pages back (madvise), the middle of a
 * heap included. */
void srv_mem_release(void)
{
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

void srv_buf_init(struct srv_buf *b, size_t max)
{
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->max = max;
}

/* The ceiling in force: 0 means none beyond what can be addressed (one
 * byte kept for the terminator), so a zero-filled srv_buf is usable. */
static size_t buf_max(const struct srv_buf *b)
{
  return b->max ? b->max : SIZE_MAX - 1;
}

/* On failure the buffer is left as it was: the caller decides whether the
 * partial contents still matter, and frees them with srv_buf_free. */
int srv_buf_reserve(struct srv_buf *b, size_t extra)
{
  size_t max = buf_max(b), want, ncap;
  char *p;

  if (extra > max || b->len > max - extra)
    return -1;
  want = b->len + extra + 1; /* + terminator */
  if (want <= b->cap)
    return 0;
  /* Doubling keeps appends amortised O(1); the ceiling caps the growth. */
  ncap = b->cap ? b->cap : 256;
  while (ncap < want)
    ncap = ncap > SIZE_MAX / 2 ? SIZE_MAX : ncap * 2;
  if (ncap > max + 1)
    ncap = max + 1;
  if (ncap < want)
    ncap = want;
  if (!b->data && want >= SRV_MEM_BIG) {
    /* A large first allocation (a request body of known length, a binary
     * response) may reuse a block that is already backed. */
    p = srv_mem_alloc(want, &ncap);
    if (!p)
      return -1;
    b->data = p;
    b->cap = ncap;
    return 0;
  }
  p = realloc(b->data, ncap);
  if (!p)
    return -1;
  b->data = p;
  b->cap = ncap;
  return 0;
}

int srv_buf_append(struct srv_buf *b, const void *p, size_t n)
{
  if (srv_buf_reserve(b, n) != 0)
    return -1;
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int srv_buf_printf(struct srv_buf *b, const char *fmt, ...)
{
  va_list ap;
  char small[256];
  int n;

  /* Format once into a stack buffer; only long lines format twice. */
  va_start(ap, fmt);
  n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0)
    return -1;
  if ((size_t)n < sizeof small)
    return srv_buf_append(b, small, (size_t)n);
  if (srv_buf_reserve(b, (size_t)n) != 0)
    return -1;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

void srv_buf_free(struct srv_buf *b)
{
  srv_mem_free(b->data, b->cap);
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

char *srv_buf_steal(struct srv_buf *b, size_t *len)
{
  char *p = b->data;

  if (len)
    *len = b->len;
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  return p;
}
