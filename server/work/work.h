/* work.h: the parts of the worker pool beyond srv.h, for http/ and main.c.
 * The pool copies libuv's threadpool contract: kernel pieces run on pool
 * threads, completion comes back on the loop thread. */
#ifndef SRV_WORK_H
#define SRV_WORK_H

#include "srv.h"

#include <pthread.h>

/* Runs on the pool thread that finished the call's last piece, before
 * `done` runs on the loop thread: the place for work that must follow the
 * kernels but should not occupy the loop or an HTTP thread (handler finish,
 * encoding the response).  status is 0, or the HTTP status of the failure
 * described by err (a job piece failed: 400/413/500; cancelled: 503). */
typedef void (*srv_work_complete_fn)(struct srv_call *c, int status,
                                     const struct srv_err *err, void *arg);
typedef void (*srv_work_done_fn)(struct srv_call *c, int status, void *arg);

/* srv_work_submit with a completion step on the pool (complete may be
 * NULL).  Thread-safe; callable from any thread.  c->plan.jobs run one after
 * another, each job's pieces spread over min(pieces, threads) work items
 * that take pieces from a shared counter; c->ts.kernel_seconds receives the
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

/* A call submitted while its body still arrives (c->run.gate, filled in by
 * the submitter before srv_work_submit_full): its single job's pieces are
 * claimed in `order`, the i-th only once `need[i]` body bytes are in
 * (need is nondecreasing).  Items never wait for bytes: when the next
 * piece is not ready they leave the pool thread to other calls, and
 * srv_work_gate_advance brings them back.  The pool's own fields are
 * under mu (init and destroy are the submitter's). */
struct srv_gate {
  int64_t npieces;
  const int64_t *order;  /* claim index -> piece of c->plan.jobs[0] */
  const uint64_t *need;  /* claim index -> body bytes its piece reads */
  pthread_mutex_t mu;
  _Atomic uint64_t avail; /* body bytes in place (stored under mu) */
  struct task *task;      /* under mu: NULL before submit and once ended */
  int running;            /* under mu: items queued and not yet returned */
  int poked;              /* under mu: waiting in the loop's poke list */
};

/* Any thread: `avail` body bytes of a gated call are now in place
 * (nondecreasing; the same value again after setting c->run.cancel makes a
 * call whose items are parked see it).  Cheap when nothing changes. */
void srv_work_gate_advance(struct srv_call *c, uint64_t avail);

/* Number of pool threads (0 before srv_work_start). */
int srv_work_threads(void);

#endif /* SRV_WORK_H */
