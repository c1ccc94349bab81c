/* output.c: what every handler's prepare uses to declare its results --
 * output tensors and scalars in the call's arena, the budget checks that
 * must come before any large allocation, and the list of library jobs the
 * work pool runs. */
#include "srv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

int srv_check_budget(struct srv_call *c, double out_bytes, double flops,
                     struct srv_err *err)
{
  /* A non-positive cap means "no cap".  The comparisons are written so that
   * a NaN estimate (it cannot happen, but sizes come from requests) is
   * refused rather than waved through. */
  if (srv_cfg.max_output_mb > 0 &&
      !(out_bytes <= srv_cfg.max_output_mb * MIB)) {
    const int text = c->in.fmt == SRV_FMT_JSON && !c->in.b64;
    srv_fail(err, 413, NULL,
             "the result would take %.4g MiB%s, more than this server's "
             "--max-output-mb %g",
             out_bytes / MIB,
             text ? " as JSON text (up to 16 bytes a number; \"encoding\": "
                    "\"b64\" or a binary Accept such as "
                    "application/vnd.safetensors take 4)"
                  : "",
             srv_cfg.max_output_mb);
    return -1;
  }
  if (srv_cfg.max_gflop > 0 && !(flops <= srv_cfg.max_gflop * 1e9)) {
    srv_fail(err, 413, NULL,
             "the request needs about %.3g GFLOP, more than this server's "
             "--max-gflop %g",
             flops / 1e9, srv_cfg.max_gflop);
    return -1;
  }
  return 0;
}

void *srv_tensor_alloc(struct srv_call *c, const char *name,
                       enum ab_dtype dtype, int ndim, const int64_t *shape,
                       struct srv_err *err)
{
  int64_t n = 1;
  size_t esz = ab_dtype_size(dtype), before = c->arena.used;
  void *data;
  int i;

  if (esz == 0 || ndim < 1 || ndim > AB_MAX_DIMS) {
    srv_fail(err, 500, NULL, "output %s has an invalid descriptor", name);
    return NULL;
  }
  for (i = 0; i < ndim; i++)
    if (shape[i] < 1 || ab_mul_overflow(n, shape[i], &n) != 0) {
      srv_fail(err, 413, NULL, "output %s is too large to describe", name);
      return NULL;
    }
  if ((uint64_t)n > SIZE_MAX / esz) {
    srv_fail(err, 413, NULL, "output %s is too large to allocate", name);
    return NULL;
  }
  /* Not zeroed: every job writes every element of its outputs (library
   * contract), and a second pass over a large table would cost as much as
   * computing it. */
  data = srv_arena_alloc(&c->arena, (size_t)n * esz);
  if (!data) {
    /* The arena's cap refused it (a limit of this server) or malloc did. */
    int capped = c->arena.cap && before + (size_t)n * esz > c->arena.cap;
    srv_fail(err, capped ? 413 : 500, NULL,
             "cannot allocate %.4g MiB for output %s", (double)n * esz / MIB,
             name);
    return NULL;
  }
  return data;
}

void *srv_output_tensor(struct srv_call *c, const char *name,
                        enum ab_dtype dtype, int ndim, const int64_t *shape,
                        struct srv_err *err)
{
  struct srv_output *o;
  void *data;

  if (c->plan.noutputs >= SRV_MAX_OUTPUTS) {
    srv_fail(err, 500, NULL, "too many outputs declared for %s", name);
    return NULL;
  }
  data = srv_tensor_alloc(c, name, dtype, ndim, shape, err);
  if (!data)
    return NULL;
  o = &c->plan.outputs[c->plan.noutputs];
  memset(o, 0, sizeof *o);
  o->name = name;
  if (ab_tensor_init(&o->t, data, dtype, ndim, shape) != AB_STATUS_OK) {
    srv_fail(err, 413, NULL, "output %s is too large to describe", name);
    return NULL;
  }
  c->plan.noutputs++;
  return data;
}

int srv_output_scalar(struct srv_call *c, const char *name, double v,
                      struct srv_err *err)
{
  struct srv_output *o;

  if (c->plan.noutputs >= SRV_MAX_OUTPUTS)
    return srv_fail(err, 500, NULL, "too many outputs declared for %s", name);
  o = &c->plan.outputs[c->plan.noutputs++];
  memset(o, 0, sizeof *o);
  o->name = name;
  o->is_scalar = 1;
  o->scalar = v;
  return 0;
}

int srv_output_json(struct srv_call *c, const char *name, const json_t *v,
                    struct srv_err *err)
{
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  char *kept;

  if (!text)
    return srv_fail(err, 500, NULL, "out of memory writing %s", name);
  kept = srv_arena_strdup(&c->arena, text);
  free(text);
  if (!kept)
    return srv_fail(err, 500, NULL, "out of memory writing %s", name);
  if (srv_output_scalar(c, name, 0, err) != 0)
    return -1;
  c->plan.outputs[c->plan.noutputs - 1].json = kept;
  return 0;
}

int srv_add_job(struct srv_call *c, ab_job_t *job, struct srv_err *err)
{
  if (!job)
    return srv_fail(err, 500, NULL, "no job to run");
  if (c->plan.njobs >= SRV_MAX_JOBS) {
    ab_job_free(job);
    return srv_fail(err, 500, NULL, "too many jobs for one request");
  }
  c->plan.jobs[c->plan.njobs++] = job;
  return 0;
}
