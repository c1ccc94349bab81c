/* log.c: srv_log, one line per call on stderr with a UTC timestamp.  The
 * line is built first and written with one write(2), so lines from
 * different threads never interleave.  Also the monotonic clock the
 * server times its phases with. */
#include "srv.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void srv_log(const char *fmt, ...)
{
  char line[2048];
  struct timespec ts;
  struct tm tm;
  size_t n;
  int k;
  va_list ap;

  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  k = snprintf(line + n, sizeof line - n, ".%03ldZ ",
               (long)(ts.tv_nsec / 1000000));
  if (k > 0)
    n += (size_t)k;
  va_start(ap, fmt);
  k = vsnprintf(line + n, sizeof line - n, fmt, ap);
  va_end(ap);
  /* A message longer than the line is cut; the newline always stays. */
  if (k > 0)
    n += (size_t)k < sizeof line - n ? (size_t)k : sizeof line - n - 1;
  while (n > 0 && line[n - 1] == '\n')
    n--;
  if (n >= sizeof line - 1)
    n = sizeof line - 2;
  line[n++] = '\n';
  /* Short writes to a pipe of this size do not happen; a failing stderr
   * leaves nothing useful to do. */
  if (write(STDERR_FILENO, line, n) < 0)
    return;
}

uint64_t srv_now_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
