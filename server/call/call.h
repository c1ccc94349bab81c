/* call.h: a call's pipeline (call.c) -- decode the body, run the handler's
 * prepare, run its jobs (inline, on the pool, streamed, or early while the
 * body arrives), finish and encode.  It knows nothing about libmicrohttpd:
 * http/ drives it and moves its bytes. */
#ifndef SRV_CALL_H
#define SRV_CALL_H

#include "srv.h"

#include <stdint.h>

/* Zero c and set up its arena and buffers for `route`. */
void srv_call_init(struct srv_call *c, const struct srv_route *route);
/* Free everything c owns (jobs, params, buffers, arena); c->req.body is the
 * caller's. */
void srv_call_release(struct srv_call *c);
/* Make e the call's response: status and problem+json body. */
void srv_call_fail(struct srv_call *c, const struct srv_err *e);
/* Decode the body (c->req.body complete) and run the handler's prepare.
 * Returns 0 when the call is ready to run, -1 when its response (an error)
 * is ready in c. */
int srv_call_prepare(struct srv_call *c);
/* 1 when the prepared call's estimated flops and output bytes are small
 * enough that running it on the calling thread beats the pool hand-off. */
int srv_call_is_tiny(const struct srv_call *c);
/* Run the jobs here, then finish and encode: the response is ready. */
void srv_call_run_inline(struct srv_call *c);
/* Hand the prepared call to the pool.  Returns 0: done(c, arg) will run on
 * the loop thread once the response is ready in c; or -1: the pool refused
 * (shutting down) and the response (a 503) is ready now. */
int srv_call_submit(struct srv_call *c,
                    void (*done)(struct srv_call *c, void *arg), void *arg);

/* Streaming: a prepared call whose response is binary (safetensors, .npy)
 * made only of float32 outputs that its one job writes in place, with no
 * finish step, is encoded before it runs, and its bytes go out as the
 * pieces finish: a byte is sent once every piece that writes at or below
 * it is done (ab_job_piece_first).  Returns 1: c->run.stream is set, the
 * response layout (c->resp.body, c->resp.seg, status 200) is final, and
 * the call is to be submitted with srv_call_submit, whose done still comes
 * last; 0: not a streaming call (c unchanged); -1: the response could not
 * be encoded and c holds the error to send instead of running.  wake(arg)
 * will be called from a pool thread when bytes a reader waits for are
 * ready (see srv_call_stream_read). */
int srv_call_stream_begin(struct srv_call *c, void (*wake)(void *arg),
                          void *arg);
/* Copy response bytes from `pos` (at most max) into buf.  Returns the
 * count (> 0); or 0 after calling suspend(arg) when none are ready yet
 * (wake follows when some are, never before suspend returned); or -1
 * when the pieces failed and the response cannot be completed. */
long srv_call_stream_read(struct srv_call *c, uint64_t pos, char *buf,
                          size_t max, void (*suspend)(void *arg),
                          void *arg);
/* The whole response's length. */
uint64_t srv_call_stream_length(const struct srv_call *c);

/* Computing while the body arrives.  c->req.body points at a buffer that will
 * hold all c->req.body_len bytes and never moves; c->req.body_avail (> 0) of
 * them are in, at least the whole safetensors header.  When the route allows it
 * (SRV_ROUTE_EARLY) and the call prepares without reading tensor data
 * and streams its answer (srv_call_stream_begin), it is submitted gated:
 * each piece runs once the bytes it reads are in (the caller reports them
 * with srv_work_gate_advance).  Returns 1 then -- done(c, arg) comes as
 * for srv_call_submit, and srv_call_early_end follows the body's end;
 * else 0 with c back as srv_call_init left it (the caller re-sets the
 * request fields and prepares at the body's end as usual, reporting any
 * error then). */
int srv_call_start_early(struct srv_call *c, void (*wake)(void *arg),
                         void *wake_arg,
                         void (*done)(struct srv_call *c, void *arg),
                         void *done_arg);
/* The body of an early call is complete.  Returns 0: send the streamed
 * answer; 1: the job has already failed (cancelled: the drain deadline)
 * and c holds the error response to send instead, not streamed. */
int srv_call_early_end(struct srv_call *c);

#endif /* SRV_CALL_H */
