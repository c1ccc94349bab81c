/* fuzz-common.c: the helpers of fuzz.h that need only the codec and
 * util/ (every target links them). */
#include "fuzz.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt,
               ...)
{
  va_list ap;

  fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", file, line, cond);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

void fuzz_call_init(struct srv_call *c, const struct srv_route *route,
                    size_t arena_cap, size_t out_max)
{
  memset(c, 0, sizeof *c);
  c->req.route = route;
  srv_arena_init(&c->arena, arena_cap);
  srv_buf_init(&c->resp.body, out_max);
  srv_buf_init(&c->plan.custom, out_max);
  srv_buf_init(&c->in.ignored, 0);
  c->in.out_dtype = AB_DTYPE_F32;
}

void fuzz_call_free(struct srv_call *c)
{
  int i;

  /* Jobs borrow the arena and the body: first. */
  for (i = 0; i < c->plan.njobs; i++)
    ab_job_free(c->plan.jobs[i]);
  c->plan.njobs = 0;
  json_decref(c->in.params);
  c->in.params = NULL;
  srv_buf_free(&c->resp.body);
  srv_buf_free(&c->plan.custom);
  srv_buf_free(&c->in.ignored);
  srv_arena_free(&c->arena);
}

char *fuzz_answer(const struct srv_call *c, size_t *len)
{
  size_t n = c->resp.body.len, off;
  char *a;
  int i;

  for (i = 0; i < c->resp.nseg; i++)
    n += c->resp.seg[i].len;
  a = malloc(n ? n : 1);
  FUZZ_CHECK(a != NULL, "out of memory (%zu bytes)", n);
  if (c->resp.body.len)
    memcpy(a, c->resp.body.data, c->resp.body.len);
  off = c->resp.body.len;
  for (i = 0; i < c->resp.nseg; i++) {
    memcpy(a + off, c->resp.seg[i].data, c->resp.seg[i].len);
    off += c->resp.seg[i].len;
  }
  *len = n;
  return a;
}

void fuzz_check_error(const struct srv_err *err)
{
  struct srv_buf prob;
  json_t *j;
  json_error_t je;

  FUZZ_CHECK(err->http >= 400 && err->http < 500, "status %d: %s", err->http,
             err->detail);
  FUZZ_CHECK(err->detail[0] != '\0', "status %d without a detail", err->http);
  srv_buf_init(&prob, 0);
  FUZZ_CHECK(srv_codec_problem(err, &prob) == 0, "no problem body for %s",
             err->detail);
  j = json_loadb(prob.data, prob.len, 0, &je);
  FUZZ_CHECK(j != NULL, "problem+json does not parse (%s): %s", je.text,
             prob.data);
  FUZZ_CHECK(json_integer_value(json_object_get(j, "status")) == err->http,
             "problem+json status differs from %d: %s", err->http, prob.data);
  json_decref(j);
  srv_buf_free(&prob);
}

double fuzz_narrow_value(int dtype, uint16_t h)
{
  int e = (h >> 10) & 31, m = h & 1023;
  uint32_t u = (uint32_t)h << 16;
  float f;
  double v;

  if (dtype != AB_DTYPE_F16) { /* bfloat16: the top half of a float32 */
    memcpy(&f, &u, 4);
    return f;
  }
  v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                       : ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

int fuzz_is_nearest(int dtype, double v, uint16_t h)
{
  double d = fuzz_narrow_value(dtype, h), dist;
  uint16_t sign = h & 0x8000, mag = h & 0x7fff;
  int k;

  if (isnan(v))
    return isnan(d);
  if (isinf(v))
    return d == v;
  if (isnan(d) || signbit(d) != signbit(v))
    return 0;
  if (isinf(d)) {
    /* Overflow: |v| is at least the largest finite value plus half its
     * spacing (that midpoint rounds to the even neighbour, infinity). */
    double big = fuzz_narrow_value(dtype, (uint16_t)(mag - 1));
    double below = fuzz_narrow_value(dtype, (uint16_t)(mag - 2));
    return fabs(v) >= big + (big - below) / 2;
  }
  dist = fabs(v - d);
  for (k = -1; k <= 1; k += 2) {
    double nb;
    if (k < 0 && mag == 0)
      continue; /* at zero the other sign's neighbour is as far */
    nb = fuzz_narrow_value(dtype, (uint16_t)(sign | (mag + k)));
    if (!isnan(nb) &&
        (fabs(v - nb) < dist || (fabs(v - nb) == dist && (h & 1))))
      return 0;
  }
  return 1;
}
