/* call.c: a call's pipeline, independent of MHD -- decode the body, run
 * the handler's prepare, run its jobs (inline when tiny, else on the pool),
 * then finish and encode.  Every failure on the way becomes the call's
 * problem+json response, so the HTTP side only ever sends c->resp_body
 * (followed by c->resp_seg for a binary encoding). */
#include "http/http.h"
#include "util/jsonmem.h"
#include "work/work.h"

#include <stdlib.h>
#include <string.h>

/* Below both thresholds a call is answered on the HTTP thread: handing it
 * to the pool and back costs about 50 us, more than computing and encoding
 * a table of this size (e.g. a /v1/bias of 8 x 128 x 128). */
#define INLINE_MAX_FLOPS 8e6
#define INLINE_MAX_BYTES ((double)(1u << 20))

/* The done callback and its argument for a call on the pool; lives in the
 * call's arena. */
struct pending {
  void (*done)(struct srv_call *c, void *arg);
  void *arg;
};

void srv_call_init(struct srv_call *c, const struct srv_route *route)
{
  memset(c, 0, sizeof *c);
  c->route = route;
  srv_arena_init(&c->arena, 0);
  srv_buf_init(&c->custom, 0);
  srv_buf_init(&c->ignored, 0);
  srv_buf_init(&c->resp_body, 0);
  c->out_dtype = AB_DTYPE_F32;
  /* mhd.c sends resp_body followed by the segments, and keeps the call
   * (its arena and body) alive until they are sent. */
  c->resp_seg_ok = 1;
}

void srv_call_release(struct srv_call *c)
{
  int i;

  /* Jobs borrow tensors in the arena and the body: free them first. */
  for (i = 0; i < c->njobs; i++)
    ab_job_free(c->jobs[i]);
  c->njobs = 0;
  json_decref(c->params);
  c->params = NULL;
  srv_buf_free(&c->custom);
  srv_buf_free(&c->ignored);
  srv_buf_free(&c->resp_body);
  srv_arena_free(&c->arena);
}

void srv_call_fail(struct srv_call *c, const struct srv_err *e)
{
  /* Used when even the problem body cannot be built (out of memory). */
  static const char fallback[] =
      "{\"type\":\"https://attnbias.dev/errors/internal-error\","
      "\"title\":\"Internal Server Error\",\"status\":500,"
      "\"detail\":\"out of memory while reporting an error\","
      "\"error\":\"out of memory while reporting an error\"}";

  srv_buf_free(&c->resp_body);
  srv_buf_init(&c->resp_body, 0);
  c->nresp_seg = 0;
  c->status = e->http;
  c->resp_type = "application/problem+json";
  if (srv_codec_problem(e, &c->resp_body) != 0) {
    srv_buf_free(&c->resp_body);
    c->status = 500;
    if (srv_buf_append(&c->resp_body, fallback, sizeof fallback - 1) != 0)
      srv_buf_free(&c->resp_body); /* headers only, still a 500 */
  }
}

/* After the jobs succeeded: the handler's finish, then the body -- the
 * handler's own (c->custom) or the codec's encoding of c->outputs. */
static void finish_ok(struct srv_call *c)
{
  struct srv_err err;

  if (c->route->finish && c->route->finish(c, &err) != 0) {
    srv_call_fail(c, &err);
    return;
  }
  if (c->custom_type) {
    srv_buf_free(&c->resp_body);
    c->resp_body = c->custom;
    srv_buf_init(&c->custom, 0);
    c->resp_type = c->custom_type;
  } else if (srv_codec_encode(c, &err) != 0) {
    srv_call_fail(c, &err);
    return;
  }
  if (!c->status)
    c->status = 200;
}

/* Pool thread, after the last piece: the same as the inline tail. */
static void complete_on_pool(struct srv_call *c, int status,
                             const struct srv_err *err, void *arg)
{
  (void)arg;
  if (status)
    srv_call_fail(c, err);
  else
    finish_ok(c);
}

/* Loop thread: the response is ready. */
static void done_on_loop(struct srv_call *c, int status, void *arg)
{
  struct pending *p = arg;

  (void)status; /* already turned into the response by complete_on_pool */
  p->done(c, p->arg);
}

int srv_call_is_tiny(const struct srv_call *c)
{
  double flops = 0, bytes = 0;
  int i;

  for (i = 0; i < c->njobs; i++)
    flops += ab_job_flops(c->jobs[i]);
  for (i = 0; i < c->noutputs; i++) {
    int64_t n = ab_tensor_numel(&c->outputs[i].t);
    if (!c->outputs[i].is_scalar && n > 0)
      bytes += (double)n * (double)ab_dtype_size(c->outputs[i].t.dtype);
  }
  return flops <= INLINE_MAX_FLOPS && bytes <= INLINE_MAX_BYTES;
}

/* The most memory jansson may hold while one body is parsed (see
 * util/jsonmem.c): a multiple of --max-body-mb. */
static size_t parse_budget(void)
{
  double bytes = srv_cfg.max_body_mb * 1048576.0;

  if (!(bytes > 0))
    bytes = 0;
  if (bytes >= (double)(SIZE_MAX / 8))
    return srv_jsonmem_request_cap(SIZE_MAX / 8);
  return srv_jsonmem_request_cap((size_t)bytes);
}

int srv_call_prepare(struct srv_call *c)
{
  struct srv_err err;

  if (c->route->flags & SRV_ROUTE_BODY) {
    size_t cap = parse_budget();
    int rc;

    srv_jsonmem_begin(cap);
    rc = srv_codec_decode_request(c, &err);
    if (srv_jsonmem_end(NULL) && rc != 0) {
      /* The parser ran out of its budget: the text is within the body cap
       * but its structure is not (jansson reports it as a JSON error). */
      srv_fail(&err, 413, NULL,
               "parsing the body would take more than %zu MiB (8 x "
               "--max-body-mb); JSON with that many small values costs far "
               "more memory than its bytes -- send large tensors as \"data\" "
               "arrays, \"b64\" or safetensors",
               cap >> 20);
      srv_metrics_reject(SRV_REJECT_OVER_BUDGET);
    }
    if (rc != 0)
      goto fail;
  } else {
    /* GET routes have no parameters and answer in their own format. */
    c->params = json_object();
    if (!c->params) {
      srv_fail(&err, 500, NULL, "out of memory");
      goto fail;
    }
  }
  if (c->route->prepare(c, &err) != 0) {
    if (err.http == 413)
      srv_metrics_reject(SRV_REJECT_OVER_BUDGET);
    goto fail;
  }
  return 0;

fail:
  srv_call_fail(c, &err);
  return -1;
}

void srv_call_run_inline(struct srv_call *c)
{
  struct srv_err err;

  if (srv_work_run_inline(c, &err) != 0)
    srv_call_fail(c, &err);
  else
    finish_ok(c);
}

int srv_call_submit(struct srv_call *c,
                    void (*done)(struct srv_call *c, void *arg), void *arg)
{
  struct srv_err err;
  struct pending *p = srv_arena_alloc(&c->arena, sizeof *p);

  if (!p) {
    srv_fail(&err, 500, NULL, "out of memory");
    srv_call_fail(c, &err);
    return -1;
  }
  p->done = done;
  p->arg = arg;
  if (srv_work_submit_full(c, complete_on_pool, done_on_loop, p) != 0) {
    srv_fail(&err, 503, NULL, "the server is shutting down");
    srv_call_fail(c, &err);
    return -1;
  }
  return 0;
}
