/* fuzz-routes.c: the helpers of fuzz.h that reach the handlers -- the body
 * routes taken from routes.def (so their flags are the server's) and a
 * call prepared and run the way call/call.c does it, without the pool. */
#include "fuzz.h"

#include <string.h>

/* The routes without a body (health, metrics, methods) are not parsers of
 * client input, and their handlers would pull in http/: their entries keep
 * no function.  The condition is a constant, so a GET handler's address is
 * never taken and never linked. */
static const struct srv_route g_routes[] = {
#define SRV_ROUTE(method, path, name, prepare, finish, flags)                  \
  {#method, path, #name, ((flags) & SRV_ROUTE_BODY) ? prepare : NULL,          \
   ((flags) & SRV_ROUTE_BODY) ? finish : NULL, flags},
#include "routes.def"
#undef SRV_ROUTE
};

#define NROUTES (sizeof g_routes / sizeof g_routes[0])

const struct srv_route *fuzz_route(const char *name)
{
  size_t i;

  for (i = 0; i < NROUTES; i++)
    if ((g_routes[i].flags & SRV_ROUTE_BODY) &&
        strcmp(g_routes[i].name, name) == 0)
      return &g_routes[i];
  fuzz_fail(__FILE__, __LINE__, "route", "no body route named %s", name);
}

const struct srv_route *fuzz_route_at(unsigned i)
{
  const struct srv_route *body[NROUTES];
  unsigned n = 0;
  size_t k;

  for (k = 0; k < NROUTES; k++)
    if (g_routes[k].flags & SRV_ROUTE_BODY)
      body[n++] = &g_routes[k];
  return body[i % n];
}

void fuzz_budgets(void)
{
  srv_cfg.max_output_mb = FUZZ_BUDGET_MB;
  srv_cfg.max_gflop = FUZZ_BUDGET_GFLOP;
}

int fuzz_call_prepare(struct srv_call *c, struct srv_err *err)
{
  char model[64];

  if (srv_codec_decode_request(c, err) != 0)
    return -1;
  /* A decoded Open Inference Protocol body is the call of its model's /v1
   * route (named as the model), as http/call.c makes it. */
  if (c->in.v2) {
    FUZZ_CHECK(srv_codec_v2_model(c->req.route->path, model, sizeof model),
               "v2 route %s names no model", c->req.route->path);
    c->req.route = fuzz_route(model);
  }
  if (srv_config_apply(c, err) != 0)
    return -1;
  if (c->req.route->prepare(c, err) != 0) {
    srv_config_blame(c, err);
    return -1;
  }
  return 0;
}

int fuzz_call_run(struct srv_call *c, struct srv_err *err)
{
  int j;

  for (j = 0; j < c->plan.njobs; j++) {
    enum ab_status st = ab_job_run_all(c->plan.jobs[j]);
    /* prepare built the job from checked parameters: running it may only
     * run out of memory. */
    FUZZ_CHECK(st == AB_STATUS_OK || st == AB_STATUS_NO_MEMORY,
               "job %d of an accepted request failed: %s", j,
               ab_last_error()->msg);
    if (st != AB_STATUS_OK)
      return srv_fail_lib(err, st, "", NULL);
  }
  if (c->req.route->finish && c->req.route->finish(c, err) != 0)
    return -1;
  if (c->plan.custom_type)
    return 0; /* the handler wrote its own body */
  return srv_codec_encode(c, err);
}

/* The answer may exceed the budgeted tensor bytes by what surrounds the
 * numbers: names, brackets, headers.  Beyond this it was not budgeted. */
#define ANSWER_SLACK 2.0
#define ANSWER_EXTRA 4096.0
/* The handlers' flop estimates are rough (a sin/cos pair counts 40); the
 * library's own count may exceed them by this factor. */
#define FLOP_SLACK 4.0

void fuzz_check_answer(const struct srv_call *c)
{
  double bytes = (double)c->resp.body.len, flops = 0;
  int i;

  for (i = 0; i < c->resp.nseg; i++)
    bytes += (double)c->resp.seg[i].len;
  if (!c->plan.custom_type)
    FUZZ_CHECK(bytes <= ANSWER_SLACK * FUZZ_BUDGET_MB * 1048576.0 +
                            ANSWER_EXTRA,
               "a %.0f-byte answer passed a %g MiB budget", bytes,
               FUZZ_BUDGET_MB);
  for (i = 0; i < c->plan.njobs; i++)
    flops += ab_job_flops(c->plan.jobs[i]);
  FUZZ_CHECK(flops <= FLOP_SLACK * FUZZ_BUDGET_GFLOP * 1e9,
             "jobs of %.4g flop passed a %g GFLOP budget", flops,
             FUZZ_BUDGET_GFLOP);
  if (c->resp.type && strcmp(c->resp.type, "application/json") == 0) {
    json_error_t je;
    json_t *j = json_loadb(c->resp.body.data, c->resp.body.len, 0, &je);
    FUZZ_CHECK(j != NULL, "the JSON answer does not parse: %s", je.text);
    json_decref(j);
  }
  fuzz_check_ignored(c);
}

void fuzz_check_ignored(const struct srv_call *c)
{
  size_t i;

  for (i = 0; i < c->in.ignored.len; i++)
    FUZZ_CHECK(c->in.ignored.data[i] > 0x20 && c->in.ignored.data[i] < 0x7f,
               "byte 0x%02x in the ignored list %s",
               (unsigned char)c->in.ignored.data[i], c->in.ignored.data);
}
