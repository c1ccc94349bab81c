/* log.c: srv_log, one line per call on stderr with a UTC timestamp.  The
 * line is built first and written with one write(2), so lines from
 * different threads never interleave.  Also the monotonic clock the
 * server times its phases with. */
#include "srv.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* "YYYY-MM-DDTHH:MM:SS.mmmZ " for now into line (at least 32 bytes); its
 * length.  The part up to the seconds is made once per second per thread
 * (gmtime and strftime cost more than the rest of an access-log line). */
static size_t stamp(char *line)
{
  static _Thread_local time_t sec = -1;
  static _Thread_local char head[24];
  static _Thread_local size_t hlen;
  struct timespec ts;
  long ms;

  clock_gettime(CLOCK_REALTIME, &ts);
  if (ts.tv_sec != sec) {
    struct tm tm;

    gmtime_r(&ts.tv_sec, &tm);
    hlen = strftime(head, sizeof head, "%Y-%m-%dT%H:%M:%S", &tm);
    sec = ts.tv_sec;
  }
  memcpy(line, head, hlen);
  ms = ts.tv_nsec / 1000000;
  line[hlen] = '.';
  line[hlen + 1] = (char)('0' + ms / 100);
  line[hlen + 2] = (char)('0' + ms / 10 % 10);
  line[hlen + 3] = (char)('0' + ms % 10);
  line[hlen + 4] = 'Z';
  line[hlen + 5] = ' ';
  return hlen + 6;
}

void srv_log(const char *fmt, ...)
{
  char line[2048];
  size_t n;
  int k;
  va_list ap;

  n = stamp(line);
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
