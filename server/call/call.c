/* call.c: a call's pipeline, independent of MHD -- decode the body, run
 * the handler's prepare, run its jobs (inline when tiny, else on the pool),
 * then finish and encode.  Every failure on the way becomes the call's
 * problem+json response, so the HTTP side only ever sends c->resp.body
 * (followed by c->resp.seg for a binary encoding). */
#include "call/call.h"
#include "metrics/metrics.h"
#include "util/jsonmem.h"
#include "work/work.h"

#include <pthread.h>
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
  c->req.route = route;
  srv_arena_init(&c->arena, 0);
  srv_buf_init(&c->plan.custom, 0);
  srv_buf_init(&c->in.ignored, 0);
  /* Budgets are checked before computing (srv_check_budget) with the
   * response's largest size; this bound only backs them up, with room for
   * the JSON around the tensors. */
  srv_buf_init(&c->resp.body,
               srv_cfg.max_output_mb > 0
                   ? (size_t)(srv_cfg.max_output_mb * 1048576.0) + (1u << 20)
                   : 0);
  c->in.out_dtype = AB_DTYPE_F32;
  /* mhd.c sends resp.body followed by the segments, and keeps the call
   * (its arena and body) alive until they are sent. */
  c->resp.seg_ok = 1;
}

/* A response smaller than this is sent in one piece after the job: a
 * handful of write buffers gains nothing from overlapping the kernels. */
#define STREAM_MIN_BYTES ((uint64_t)1 << 20)
/* A reader waiting for bytes is woken once this many past its position
 * are ready (or the response is complete): fewer, fuller sends. */
#define STREAM_WAKE_BYTES ((uint64_t)256 << 10)

/* The state of a streamed response (srv_call_stream_begin); in the arena.
 * Written by pool threads (piece_done, failure) and read by the HTTP
 * thread sending the response, all under mu.  A piece's output bytes are
 * written before the piece is marked done under mu, and read after the
 * reader took mu and saw them ready: the mutex orders the two. */
struct srv_stream {
  pthread_mutex_t mu;
  uint64_t total;       /* response bytes */
  uint64_t ready;       /* [0, ready) are final */
  uint64_t want;        /* a waiting reader's position */
  int waiting, failed, ended; /* ended: every piece ran */
  struct srv_err err;   /* why, when failed */
  int64_t npieces, scan; /* order[0..scan) are done */
  int64_t ndone;        /* pieces done */
  uint64_t *start;      /* piece -> lowest response byte it writes */
  int64_t *order;       /* pieces by start */
  unsigned char *done;  /* per piece */
  void (*wake)(void *arg);
  void *arg;
};

/* The call is not (or no longer) streamed. */
static void stream_drop(struct srv_call *c)
{
  if (c->run.stream) {
    pthread_mutex_destroy(&c->run.stream->mu);
    c->run.stream = NULL;
    c->run.piece_done = NULL;
  }
}

static void gate_drop(struct srv_call *c)
{
  if (c->run.gate) {
    pthread_mutex_destroy(&c->run.gate->mu);
    c->run.gate = NULL;
  }
}

void srv_call_release(struct srv_call *c)
{
  int i;

  stream_drop(c);
  gate_drop(c);
  /* Jobs borrow tensors in the arena and the body: free them first. */
  for (i = 0; i < c->plan.njobs; i++)
    ab_job_free(c->plan.jobs[i]);
  c->plan.njobs = 0;
  json_decref(c->in.params);
  c->in.params = NULL;
  srv_buf_free(&c->plan.custom);
  srv_buf_free(&c->in.ignored);
  srv_buf_free(&c->resp.body);
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

  srv_buf_free(&c->resp.body);
  srv_buf_init(&c->resp.body, 0);
  c->resp.nseg = 0;
  c->resp.status = e->http;
  c->resp.type = "application/problem+json";
  if (srv_codec_problem(e, &c->resp.body) != 0) {
    srv_buf_free(&c->resp.body);
    c->resp.status = 500;
    if (srv_buf_append(&c->resp.body, fallback, sizeof fallback - 1) != 0)
      srv_buf_free(&c->resp.body); /* headers only, still a 500 */
  }
}

/* After the jobs succeeded: the route's finish for a picture (or for every
 * answer of a route that completes its outputs there), then the body --
 * the handler's own (c->plan.custom) or the codec's encoding of
 * c->plan.outputs. */
static void finish_ok(struct srv_call *c)
{
  struct srv_err err;

  if (c->req.route->finish &&
      (c->in.fmt == SRV_FMT_PNG || (c->req.route->flags & SRV_ROUTE_FINISH)) &&
      c->req.route->finish(c, &err) != 0) {
    srv_call_fail(c, &err);
    return;
  }
  if (c->plan.custom_type) {
    srv_buf_free(&c->resp.body);
    c->resp.body = c->plan.custom;
    srv_buf_init(&c->plan.custom, 0);
    c->resp.type = c->plan.custom_type;
  } else if (srv_codec_encode(c, &err) != 0) {
    srv_call_fail(c, &err);
    return;
  }
  if (!c->resp.status)
    c->resp.status = 200;
  c->ts.encoded = srv_now_ns();
}

/* Under mu: wake a waiting reader when it has enough to send, when the
 * response is complete or when it can never be. */
static void stream_maybe_wake(struct srv_stream *s)
{
  if (s->waiting && (s->failed || s->ready >= s->total ||
                     s->ready >= s->want + STREAM_WAKE_BYTES)) {
    s->waiting = 0;
    s->wake(s->arg);
  }
}

/* Pool thread, after each piece of a streamed call. */
static void stream_piece_done(struct srv_call *c, int64_t piece)
{
  struct srv_stream *s = c->run.stream;

  pthread_mutex_lock(&s->mu);
  s->done[piece] = 1;
  s->ndone++;
  while (s->scan < s->npieces && s->done[s->order[s->scan]])
    s->scan++;
  s->ready = s->scan < s->npieces ? s->start[s->order[s->scan]] : s->total;
  if (s->ready > s->total)
    s->ready = s->total;
  stream_maybe_wake(s);
  pthread_mutex_unlock(&s->mu);
}

/* Pool thread, after a streamed call's last piece: nothing reads the body
 * any more (its tensors were the jobs' inputs; the answer's bytes are the
 * outputs and resp.body), so give it back before the last bytes can go
 * out.  Kept when a response segment lies in it. */
static void release_body(struct srv_call *c)
{
  const char *lo = c->req.body, *hi = c->req.body + c->req.body_len;
  int i;

  if (!c->req.body_buf || !c->req.body)
    return;
  for (i = 0; i < c->resp.nseg; i++) {
    const char *p = c->resp.seg[i].data;
    if (p + c->resp.seg[i].len > lo && p < hi)
      return;
  }
  srv_buf_free(c->req.body_buf);
  c->req.body_buf = NULL;
  c->req.body = NULL;
  c->req.body_len = 0;
}

/* Pool thread, after the last piece: the same as the inline tail.  A
 * streamed call is encoded already; a failure can only cut its response
 * short (the status line went out long ago). */
static void complete_on_pool(struct srv_call *c, int status,
                             const struct srv_err *err, void *arg)
{
  (void)arg;
  if (c->run.stream) {
    struct srv_stream *s = c->run.stream;

    release_body(c);

    pthread_mutex_lock(&s->mu);
    if (status) {
      s->failed = 1;
      s->err = *err;
      srv_log("streamed response cut: %s", err->detail);
    } else {
      s->ready = s->total;
      s->ended = 1;
    }
    stream_maybe_wake(s);
    pthread_mutex_unlock(&s->mu);
    return;
  }
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

  for (i = 0; i < c->plan.njobs; i++)
    flops += ab_job_flops(c->plan.jobs[i]);
  for (i = 0; i < c->plan.noutputs; i++) {
    int64_t n = ab_tensor_numel(&c->plan.outputs[i].t);
    if (!c->plan.outputs[i].is_scalar && n > 0)
      bytes += (double)n * (double)ab_dtype_size(c->plan.outputs[i].t.dtype);
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

/* Prefer: handling=strict and fields nobody read: a 400 naming each (the
 * first as the field; the same list goes out as X-Attnbias-Ignored). */
static void strict_refusal(const struct srv_call *c, struct srv_err *err)
{
  srv_fail(err, 400, c->in.strict_first,
           "unknown fields, refused under Prefer: handling=strict: %.400s",
           c->in.ignored.data);
}

/* An Open Inference Protocol body, decoded, is the /v1 call of its model
 * from here on: the config step and the handler see the route they serve
 * (the metrics keep the /v2 route: the connection filed its index). */
static int v2_as_v1(struct srv_call *c, struct srv_err *err)
{
  const struct srv_route *v1;
  struct srv_err e1;
  char model[64], path[80];

  if (!srv_codec_v2_model(c->req.route->path, model, sizeof model))
    return srv_fail(err, 500, NULL, "route %s has no model",
                    c->req.route->path);
  snprintf(path, sizeof path, "/v1/%s", model);
  if (!(v1 = srv_route_find("POST", path, &e1)))
    return srv_fail(err, 500, NULL, "model %s has no /v1 route", model);
  c->req.route = v1;
  return 0;
}

int srv_call_prepare(struct srv_call *c)
{
  struct srv_err err;

  c->ts.decode = srv_now_ns();
  if (c->req.route->flags & SRV_ROUTE_BODY) {
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
      if (!c->req.body_avail) /* an early try is not a request's answer */
        srv_metrics_reject(SRV_REJECT_OVER_BUDGET);
    }
    if (rc != 0 || (c->in.v2 && v2_as_v1(c, &err) != 0))
      goto fail;
  } else {
    /* GET routes have no parameters and answer in their own format. */
    c->in.params = json_object();
    if (!c->in.params) {
      srv_fail(&err, 500, NULL, "out of memory");
      goto fail;
    }
  }
  if ((c->req.route->flags & SRV_ROUTE_BODY) && srv_config_apply(c, &err) != 0)
    goto fail;
  if (c->req.route->prepare(c, &err) != 0) {
    if (err.http == 413 && !c->req.body_avail)
      srv_metrics_reject(SRV_REJECT_OVER_BUDGET);
    srv_config_blame(c, &err);
    goto fail;
  }
  if (c->req.strict && c->in.ignored.len) {
    strict_refusal(c, &err);
    goto fail;
  }
  c->ts.prepared = srv_now_ns();
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
    stream_drop(c);
    srv_fail(&err, 500, NULL, "out of memory");
    srv_call_fail(c, &err);
    return -1;
  }
  p->done = done;
  p->arg = arg;
  if (srv_work_submit_full(c, complete_on_pool, done_on_loop, p) != 0) {
    stream_drop(c);
    srv_fail(&err, 503, NULL, "the server is shutting down");
    srv_call_fail(c, &err);
    return -1;
  }
  return 0;
}

/* ---- streaming ---------------------------------------------------------- */

/* A piece and a byte offset to order pieces by: the lowest response byte
 * it writes (streaming), the body bytes it needs (early calls). */
struct key_piece {
  uint64_t key;
  int64_t piece;
};

static int cmp_key_piece(const void *a, const void *b)
{
  const struct key_piece *x = a, *y = b;

  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return (x->piece > y->piece) - (x->piece < y->piece);
}

/* Back out of an encoding made for streaming: the call runs as usual. */
static int stream_undo(struct srv_call *c)
{
  srv_buf_free(&c->resp.body);
  c->resp.nseg = 0;
  c->resp.status = 0;
  c->resp.type = NULL;
  return 0;
}

/* The response offset of every piece's lowest byte, over the segments
 * that hold the job's outputs.  Returns 0, or -1 when a segment is not an
 * output of the job or the job does not describe its pieces. */
static int stream_starts(struct srv_call *c, const ab_job_t *job,
                         struct srv_stream *s)
{
  uint64_t off = c->resp.body.len;
  int64_t p;
  int i, k;

  for (p = 0; p < s->npieces; p++)
    s->start[p] = UINT64_MAX;
  for (i = 0; i < c->resp.nseg; i++) {
    const struct srv_output *o = NULL;

    for (k = 0; k < c->plan.noutputs && !o; k++)
      if (!c->plan.outputs[k].is_scalar &&
          c->plan.outputs[k].t.data == c->resp.seg[i].data &&
          (uint64_t)ab_tensor_numel(&c->plan.outputs[k].t) * 4 ==
              c->resp.seg[i].len)
        o = &c->plan.outputs[k];
    if (!o)
      return -1;
    for (p = 0; p < s->npieces; p++) {
      int64_t first;

      if (ab_job_piece_first(job, p, o->t.data, &first) != AB_STATUS_OK)
        return -1;
      if (first != INT64_MAX && off + (uint64_t)first * 4 < s->start[p])
        s->start[p] = off + (uint64_t)first * 4;
    }
    off += c->resp.seg[i].len;
  }
  return 0;
}

int srv_call_stream_begin(struct srv_call *c, void (*wake)(void *arg),
                          void *arg)
{
  struct srv_err err;
  struct srv_stream *s;
  struct key_piece *sp;
  const ab_job_t *job;
  uint64_t total;
  int64_t np, p;
  int i, expect = 0;

  /* A route's finish runs for image/png answers only, unless it completes
   * the outputs (SRV_ROUTE_FINISH): then they are not final until it ran. */
  if (c->plan.njobs != 1 || c->plan.custom_type || c->plan.custom.len ||
      (c->req.route->flags & SRV_ROUTE_FINISH) ||
      c->in.out_dtype != AB_DTYPE_F32 ||
      (c->in.fmt != SRV_FMT_SAFETENSORS && c->in.fmt != SRV_FMT_NPY))
    return 0;
  job = c->plan.jobs[0];
  np = ab_job_pieces(job);
  if (np < 2)
    return 0;
  for (i = 0; i < c->plan.noutputs; i++) {
    const struct srv_output *o = &c->plan.outputs[i];
    if (o->is_scalar)
      continue;
    if (o->t.dtype != AB_DTYPE_F32 || !ab_tensor_is_contiguous(&o->t))
      return 0;
    expect++;
  }
  /* Encoding reads no output value when every output goes out as float32
   * from where it lies (a segment); anything else is undone below. */
  if (srv_codec_encode(c, &err) != 0) {
    srv_call_fail(c, &err);
    return -1;
  }
  if (c->resp.nseg != (c->in.fmt == SRV_FMT_NPY ? 1 : expect))
    return stream_undo(c);
  total = c->resp.body.len;
  for (i = 0; i < c->resp.nseg; i++)
    total += c->resp.seg[i].len;
  if (total < STREAM_MIN_BYTES)
    return stream_undo(c);

  s = srv_arena_alloc(&c->arena, sizeof *s);
  sp = s ? srv_arena_alloc(&c->arena, (size_t)np * sizeof *sp) : NULL;
  if (!sp)
    return stream_undo(c);
  memset(s, 0, sizeof *s);
  s->npieces = np;
  s->start = srv_arena_alloc(&c->arena, (size_t)np * sizeof *s->start);
  s->order = srv_arena_alloc(&c->arena, (size_t)np * sizeof *s->order);
  s->done = srv_arena_alloc(&c->arena, (size_t)np);
  if (!s->start || !s->order || !s->done || stream_starts(c, job, s) != 0)
    return stream_undo(c);
  memset(s->done, 0, (size_t)np);
  for (p = 0; p < np; p++) {
    sp[p].key = s->start[p];
    sp[p].piece = p;
  }
  qsort(sp, (size_t)np, sizeof *sp, cmp_key_piece);
  for (p = 0; p < np; p++)
    s->order[p] = sp[p].piece;
  s->total = total;
  s->ready = s->start[s->order[0]] < total ? s->start[s->order[0]] : total;
  s->wake = wake;
  s->arg = arg;
  if (pthread_mutex_init(&s->mu, NULL) != 0)
    return stream_undo(c);
  c->run.stream = s;
  c->run.piece_done = stream_piece_done;
  c->resp.status = 200;
  c->ts.encoded = srv_now_ns();
  return 1;
}

uint64_t srv_call_stream_length(const struct srv_call *c)
{
  return c->run.stream ? c->run.stream->total : 0;
}

/* Copy n bytes of the response (resp.body, then the segments) from pos. */
static void stream_copy(const struct srv_call *c, uint64_t pos, char *buf,
                        size_t n)
{
  uint64_t base = 0;
  int i;

  for (i = -1; i < c->resp.nseg && n; i++) {
    const char *p = i < 0 ? c->resp.body.data : c->resp.seg[i].data;
    uint64_t len = i < 0 ? c->resp.body.len : c->resp.seg[i].len;

    if (pos < base + len) {
      size_t k = (size_t)(base + len - pos) < n ? (size_t)(base + len - pos)
                                                : n;
      memcpy(buf, p + (pos - base), k);
      buf += k;
      pos += k;
      n -= k;
    }
    base += len;
  }
}

long srv_call_stream_read(struct srv_call *c, uint64_t pos, char *buf,
                          size_t max, void (*suspend)(void *arg), void *arg)
{
  struct srv_stream *s = c->run.stream;
  uint64_t ready;
  size_t n;

  pthread_mutex_lock(&s->mu);
  if (s->failed) {
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  ready = s->ready;
  if (pos >= ready) {
    /* Suspended under mu: the wake (from stream_maybe_wake, also under
     * mu) can only come after this. */
    s->waiting = 1;
    s->want = pos;
    suspend(arg);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  pthread_mutex_unlock(&s->mu);
  n = ready - pos < max ? (size_t)(ready - pos) : max;
  stream_copy(c, pos, buf, n);
  return (long)n;
}

/* ---- computing while the body arrives (srv_call_start_early) ---- */

/* The gate of c's one job: per piece, the body bytes that the body's
 * tensors it reads end at (ab_job_piece_reads); pieces in that order. */
static int gate_build(struct srv_call *c)
{
  const ab_job_t *job = c->plan.jobs[0];
  int64_t np = ab_job_pieces(job), p;
  struct srv_gate *g = srv_arena_alloc(&c->arena, sizeof *g);
  struct key_piece *kp = srv_arena_alloc(&c->arena, (size_t)np * sizeof *kp);
  int64_t *order = srv_arena_alloc(&c->arena, (size_t)np * sizeof *order);
  uint64_t *need = srv_arena_alloc(&c->arena, (size_t)np * sizeof *need);
  unsigned char *input = srv_arena_alloc(&c->arena, (size_t)c->in.nbin + 1);
  int i;

  if (!g || !kp || !order || !need || !input)
    return -1;
  /* The body's tensors that the pieces read; the others (a bias table
   * read when the job was built, already in) are not waited for. */
  for (i = 0; i < c->in.nbin; i++) {
    int64_t end;
    input[i] =
        ab_job_piece_reads(job, 0, c->in.bin[i].t.data, &end) == AB_STATUS_OK;
  }
  for (p = 0; p < np; p++) {
    kp[p].key = 0;
    kp[p].piece = p;
    for (i = 0; i < c->in.nbin; i++) {
      const struct ab_tensor *t = &c->in.bin[i].t;
      int64_t end;
      uint64_t at;
      if (!input[i] ||
          ab_job_piece_reads(job, p, t->data, &end) != AB_STATUS_OK)
        continue;
      at = (uint64_t)((const char *)t->data - c->req.body) +
           (uint64_t)end * ab_dtype_size((enum ab_dtype)t->dtype);
      if (at > kp[p].key)
        kp[p].key = at;
    }
  }
  qsort(kp, (size_t)np, sizeof *kp, cmp_key_piece);
  for (p = 0; p < np; p++) {
    order[p] = kp[p].piece;
    need[p] = kp[p].key;
  }
  memset(g, 0, sizeof *g);
  g->npieces = np;
  g->order = order;
  g->need = need;
  atomic_init(&g->avail, c->req.body_avail);
  if (pthread_mutex_init(&g->mu, NULL) != 0)
    return -1;
  c->run.gate = g;
  return 0;
}

int srv_call_start_early(struct srv_call *c, void (*wake)(void *arg),
                         void *wake_arg,
                         void (*done)(struct srv_call *c, void *arg),
                         void *done_arg)
{
  const struct srv_route *route = c->req.route;

  if (!(route->flags & SRV_ROUTE_EARLY) || !c->req.body_avail)
    return 0;
  /* Preparing may read tensors that have not arrived (rope positions sent
   * as a tensor, say) before the handler refuses to go on early: it then
   * reads garbage, fails or not, and everything is undone below and done
   * again on the whole body. */
  if (srv_call_prepare(c) == 0 && c->plan.njobs == 1 &&
      srv_call_stream_begin(c, wake, wake_arg) == 1 && gate_build(c) == 0 &&
      srv_call_submit(c, done, done_arg) == 0)
    return 1;
  /* Not this time: back to a fresh call, prepared again at the end. */
  srv_call_release(c);
  srv_call_init(c, route);
  return 0;
}

int srv_call_early_end(struct srv_call *c)
{
  struct srv_stream *s = c->run.stream;
  struct srv_err err;
  int failed;

  c->req.body_avail = 0;
  pthread_mutex_lock(&s->mu);
  failed = s->failed;
  err = s->err;
  c->run.early_done = s->ndone;
  c->run.early_pieces = s->npieces;
  pthread_mutex_unlock(&s->mu);
  if (!failed)
    return 0;
  /* Failed before a byte of the answer went out: say why, plainly.  The
   * pool has ended the call (complete_on_pool ran), so nothing else
   * touches the stream. */
  stream_drop(c);
  srv_call_fail(c, &err);
  return 1;
}
