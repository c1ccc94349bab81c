/* work.h: the parts of the worker pool beyond srv.h, for http/ and main.c.
 * The pool copies libuv's threadpool contract: kernel pieces run on pool
 * threads, completion comes back on the loop thread. */
#ifndef SRV_WORK_H
#define SRV_WORK_H

#include "srv.h"

/* Runs on the pool thread that finished the call's last piece, before
 * `done` runs on the loop thread: the place for work that must follow the
 * kernels but should not occupy the loop or an HTTP thread (handler finish,
 * encoding the response).  status is 0, or the HTTP status of the failure
 * described by err (a job piece failed: 400/413/500; cancelled: 503). */
typedef void (*srv_work_complete_fn)(struct srv_call *c, int status,
                                     const struct srv_err *err, void *arg);
typedef void (*srv_work_done_fn)(struct srv_call *c, int status, void *arg);

/* srv_work_submit with a completion step on the pool (complete may be
 * NULL).  Thread-safe; callable from any thread.  c->jobs run one after
 * another, each job's pieces spread over min(pieces, threads) work items
 * that take pieces from a shared counter; c->kernel_seconds receives the
 * thread-seconds spent in pieces.  Returns 0 and guarantees exactly one
 * call of `done` (with status 503 if the pool is cancelled meanwhile), or
 * -1 if the pool is stopping (nothing is called then). */
int srv_work_submit_full(struct srv_call *c, srv_work_complete_fn complete,
                         srv_work_done_fn done, void *arg);

/* Make every submitted call skip the pieces it has not started; they
 * complete with status 503.  Used when the drain deadline passes.  Pieces
 * already running finish (a kernel cannot be interrupted). */
void srv_work_cancel(void);

/* Calls submitted whose `done` has not run yet: work the drain waits for
 * even when no connection waits for it any more. */
int srv_work_busy(void);

/* Number of pool threads (0 before srv_work_start). */
int srv_work_threads(void);

#endif /* SRV_WORK_H */
