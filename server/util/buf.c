/* buf.c: srv_buf, a growable byte buffer with a ceiling (the curl dynbuf
 * idea): request bodies and responses grow in it and can never exceed what
 * the configuration allows.  The bytes are kept NUL-terminated (not counted
 * in len or against max) so text can be read in place. */
#include "srv.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void srv_mem_hint_large(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo, hi;

  if (!p || n < ((size_t)4 << 20) || page == 0 || page == (uintptr_t)-1)
    return;
  /* madvise needs page-aligned bounds: advise the pages inside [p, p+n). */
  lo = ((uintptr_t)p + page - 1) & ~(page - 1);
  hi = ((uintptr_t)p + n) & ~(page - 1);
  if (hi > lo)
    (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
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
  p = realloc(b->data, ncap);
  if (!p)
    return -1;
  srv_mem_hint_large(p, ncap);
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
  free(b->data);
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
