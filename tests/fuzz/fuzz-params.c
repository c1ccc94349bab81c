/* fuzz-params.c: one route's parameters from arbitrary JSON -- the codec's
 * decoding, the model config step ("model", "config", "layer"), the
 * handler's prepare (the parameter tables, the route's own checks, the
 * budgets), then the run, finish and encoding of whatever prepare
 * accepted.  Built once per body route of routes.def: the Makefile
 * compiles it with FUZZ_ROUTE set to the route's name ("rope") into
 * fuzz-params-<route>; the corpora start from the requests the README and
 * the HTTP tests send.
 *
 * Input: optional header lines "Accept: <value>\n" (the last one counts),
 * then the JSON body.  Small budgets (fuzz_budgets) keep every accepted
 * request cheap, so anything slow or large that gets past them shows up as
 * a libFuzzer timeout or memory limit.  Properties: a refusal is a 4xx
 * with a readable problem+json (fuzz_check_error); a job that prepare
 * accepted runs without error (fuzz_call_run); the answer is within the
 * budgets and readable (fuzz_check_answer). */
#include "fuzz.h"

#include <string.h>

#ifndef FUZZ_ROUTE
#error "compile with -DFUZZ_ROUTE='\"rope\"' (a body route of routes.def)"
#endif

/* The value of the "Accept: <value>\n" line at *p into buf (cut to cap),
 * *p moved past the line; NULL when *p is not at such a line. */
static const char *header(const uint8_t **p, const uint8_t *end,
                          char *buf, size_t cap)
{
  static const char name[] = "Accept:";
  const uint8_t *nl;
  size_t n;

  if ((size_t)(end - *p) < sizeof name - 1 ||
      memcmp(*p, name, sizeof name - 1) != 0 ||
      !(nl = memchr(*p, '\n', (size_t)(end - *p))))
    return NULL;
  *p += sizeof name - 1;
  while (*p < nl && **p == ' ')
    (*p)++;
  n = (size_t)(nl - *p);
  if (n >= cap)
    n = cap - 1;
  memcpy(buf, *p, n);
  buf[n] = '\0';
  *p = nl + 1;
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const struct srv_route *route;
  const uint8_t *p = data, *end = data + size;
  char accept[256];
  const char *acc = NULL, *h;
  struct srv_call c;
  struct srv_err err;

  if (!route) {
    route = fuzz_route(FUZZ_ROUTE);
    fuzz_budgets();
  }
  while ((h = header(&p, end, accept, sizeof accept)) != NULL)
    acc = h;

  /* No arena cap, as in the server: the budgets alone must hold. */
  fuzz_call_init(&c, route, 0, 0);
  memset(&err, 0, sizeof err);
  c.req.content_type = "application/json";
  c.req.accept = acc;
  c.req.body = p < end ? (const char *)p : NULL;
  c.req.body_len = (size_t)(end - p);
  if (fuzz_call_prepare(&c, &err) == 0 && fuzz_call_run(&c, &err) == 0)
    fuzz_check_answer(&c);
  else
    fuzz_check_error(&err);
  fuzz_check_ignored(&c);
  fuzz_call_free(&c);
  return 0;
}
