/* fuzz-common.c: the helpers of fuzz.h that need only the codec and
 * util/ (every target links them). */
#include "fuzz.h"

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
  c->route = route;
  srv_arena_init(&c->arena, arena_cap);
  srv_buf_init(&c->resp_body, out_max);
  srv_buf_init(&c->custom, out_max);
  srv_buf_init(&c->ignored, 0);
  c->out_dtype = AB_DTYPE_F32;
}

void fuzz_call_free(struct srv_call *c)
{
  int i;

  /* Jobs borrow the arena and the body: first. */
  for (i = 0; i < c->njobs; i++)
    ab_job_free(c->jobs[i]);
  c->njobs = 0;
  json_decref(c->params);
  c->params = NULL;
  srv_buf_free(&c->resp_body);
  srv_buf_free(&c->custom);
  srv_buf_free(&c->ignored);
  srv_arena_free(&c->arena);
}

char *fuzz_answer(const struct srv_call *c, size_t *len)
{
  size_t n = c->resp_body.len, off;
  char *a;
  int i;

  for (i = 0; i < c->nresp_seg; i++)
    n += c->resp_seg[i].len;
  a = malloc(n ? n : 1);
  FUZZ_CHECK(a != NULL, "out of memory (%zu bytes)", n);
  if (c->resp_body.len)
    memcpy(a, c->resp_body.data, c->resp_body.len);
  off = c->resp_body.len;
  for (i = 0; i < c->nresp_seg; i++) {
    memcpy(a + off, c->resp_seg[i].data, c->resp_seg[i].len);
    off += c->resp_seg[i].len;
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
