/* pool.c: the worker pool -- a libuv loop thread that owns the threadpool
 * queue, and the splitting of a call's jobs into work items.
 *
 * Threads and what they touch:
 *   - any thread (HTTP threads) calls srv_work_submit*: it appends a task to
 *     g_pending under g_lock and wakes the loop with uv_async_send;
 *   - the loop thread drains g_pending (uv_async_send coalesces wake-ups,
 *     so one callback may find many tasks), calls uv_queue_work, runs the
 *     after-work callbacks, starts each next job, and calls `done`;
 *   - pool threads run work items: they claim pieces of the current job from
 *     the task's atomic counter, and the one that finishes the call's last
 *     piece runs the `complete` step;
 *   - for a call submitted while its body arrives (a gated call), the HTTP
 *     thread reports bytes with srv_work_gate_advance, which may append the
 *     task to g_poked and wake the loop to queue its items again;
 *   - a timer on the loop thread returns idle blocks of util/buf.c's cache
 *     of large buffers (srv_mem_trim), and once the server has gone idle
 *     after work, the C library's free heap pages (srv_mem_release).
 * Lock order: g_lock is a leaf (nothing else is locked while holding it).
 * A task's fields other than the atomics are written by the loop thread
 * before uv_queue_work and read by workers after it; libuv's queue mutex
 * orders those accesses, and likewise orders workers' writes before the
 * after-work callbacks. */
#include "work/work.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

struct task {
  struct srv_call *c;
  srv_work_complete_fn complete;
  srv_work_done_fn done;
  void *arg;
  struct task *next; /* in g_pending */

  int job;               /* index into c->plan.jobs of the current phase */
  int items;             /* work items of the current phase */
  int items_after;       /* of those, after-work callbacks still due */
  uv_work_t *work;       /* enough for the largest phase */

  _Atomic int64_t next_piece; /* next piece of the current job to claim */
  _Atomic int items_running;  /* items of the phase not yet finished */
  _Atomic int failed;         /* first failure wins the right to set err */
  _Atomic uint64_t kernel_ns;
  _Atomic uint64_t first_ns;  /* when the first item started */
  int final;                  /* set by the last item: no phase follows */
  int status;                 /* 0 or the HTTP status of the failure */
  struct srv_err err;

  /* Gated calls (c->run.gate): items come and go with the body's bytes. */
  struct srv_gate *gate;
  int slots;                  /* uv_work_t in `work`, and items wanted */
  unsigned char *used;        /* loop thread: slot has an item out */
  int outstanding;            /* loop thread: items whose after-work is due */
  struct task *poke_next;     /* in g_poked */
  struct task *gated_next;    /* in g_gated */
};

/* How often the loop returns large blocks that sat unused in the reuse
 * cache of util/buf.c (srv_mem_trim), and after how long unused. */
#define TRIM_EVERY_MS 5000
#define TRIM_IDLE_S 10.0

static uv_loop_t g_loop;
static uv_async_t g_wake;
static uv_timer_t g_trim;
static uv_thread_t g_thread;
static int g_threads;
static int g_started;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct task *g_pending, *g_pending_tail; /* under g_lock */
static struct task *g_poked;                    /* under g_lock */
/* Gated tasks not yet finished: added under g_lock by submitters, removed
 * by the loop thread (which alone frees tasks) under g_lock. */
static struct task *g_gated;
static int g_stopping;                          /* under g_lock */
static int g_closed;                            /* under g_lock */
static _Atomic int g_cancel;
static _Atomic int g_gate_stop; /* stopping: gated calls end */
static _Atomic int g_busy; /* calls submitted whose done has not run */
static _Atomic uint64_t g_submitted; /* calls submitted so far */

/* Scratch for one work item: 64-byte aligned as ab_job_run wants. */
static void *scratch_alloc(size_t n)
{
  void *p = NULL;

  if (n == 0)
    return NULL;
  if (posix_memalign(&p, 64, n) != 0)
    return NULL;
  return p;
}

/* ---------------------------------------------------------------------
 * Pool threads
 * --------------------------------------------------------------------- */

/* The index of the next job, at or after `from`, that has pieces; njobs if
 * none.  Jobs without pieces have nothing to run. */
static int next_job(const struct srv_call *c, int from)
{
  while (from < c->plan.njobs && ab_job_pieces(c->plan.jobs[from]) <= 0)
    from++;
  return from;
}

static void fail_task(struct task *t, int http, enum ab_status st,
                      const char *msg)
{
  int expected = 0;

  /* Only the first failure is reported; the others saw the same request. */
  if (!atomic_compare_exchange_strong(&t->failed, &expected, 1))
    return;
  if (msg)
    srv_fail(&t->err, http, NULL, "%s", msg);
  else
    srv_fail_lib(&t->err, st, "", NULL); /* reads this thread's ab_last_error */
}

/* ---- gated calls ----
 *
 * A gated call's items claim pieces in gate->order, each only once the
 * body holds the bytes it reads; an item that finds the next one not
 * ready leaves its thread.  gate->running counts the items queued and not
 * yet returned.  Under gate->mu, whoever makes the next piece ready (an
 * advance of the body) or finds it ready while items are missing (the
 * last item leaving) pokes the loop, which queues items up to `slots`.
 * The last item to leave when every piece is claimed -- or the call is
 * failed or cancelled -- ends the call.  Lock order: gate->mu, then
 * g_lock. */

static int gate_cancelled(const struct task *t)
{
  return atomic_load(&g_cancel) || atomic_load(&g_gate_stop) ||
         atomic_load(&t->c->run.cancel) || atomic_load(&t->failed);
}

/* Under mu: an item would have something to do. */
static int gate_runnable(const struct task *t)
{
  const struct srv_gate *g = t->gate;
  int64_t i = atomic_load(&t->next_piece);

  if (gate_cancelled(t))
    return 1;
  return i < g->npieces && g->need[i] <= atomic_load(&g->avail);
}

/* Claim the next piece if its bytes are in: its claim index, or -1. */
static int64_t gate_claim(struct task *t)
{
  const struct srv_gate *g = t->gate;
  int64_t i = atomic_load_explicit(&t->next_piece, memory_order_relaxed);

  for (;;) {
    if (i >= g->npieces ||
        g->need[i] > atomic_load_explicit(&g->avail, memory_order_acquire))
      return -1;
    if (atomic_compare_exchange_weak_explicit(&t->next_piece, &i, i + 1,
                                              memory_order_relaxed,
                                              memory_order_relaxed))
      return i;
  }
}

/* Under mu: ask the loop for items if some are missing and would have
 * work.  Dropped once the loop has closed (nothing could run them). */
static void gate_poke(struct task *t)
{
  struct srv_gate *g = t->gate;

  if (g->poked || !g->task || g->running >= t->slots || !gate_runnable(t))
    return;
  pthread_mutex_lock(&g_lock);
  if (!g_closed) {
    g->poked = 1;
    t->poke_next = g_poked;
    g_poked = t;
    uv_async_send(&g_wake);
  }
  pthread_mutex_unlock(&g_lock);
}

/* An item of a gated call leaves: 1 if it is the last and the call is
 * over (every piece claimed, or failed, or cancelled), else 0. */
static int gate_item_end(struct task *t)
{
  struct srv_gate *g = t->gate;
  int over;

  pthread_mutex_lock(&g->mu);
  g->running--;
  over = g->running == 0 &&
         (atomic_load(&t->next_piece) >= g->npieces || gate_cancelled(t));
  if (over) {
    if (atomic_load(&t->next_piece) < g->npieces && !atomic_load(&t->failed))
      fail_task(t, 503, AB_STATUS_OK,
                atomic_load(&g_cancel) || atomic_load(&g_gate_stop)
                    ? "the server is shutting down and the drain deadline "
                      "passed before this request was computed"
                    : "the client went away before the answer was computed");
    g->task = NULL; /* no more items, no more pokes */
  } else {
    gate_poke(t); /* bytes may have come while this item ran */
  }
  pthread_mutex_unlock(&g->mu);
  return over;
}

static void work_cb(uv_work_t *w);
static void after_work_cb(uv_work_t *w, int status);

/* Loop thread: queue items for a gated call, up to `slots` at once and
 * as many as free slots allow (a slot frees in after_work_cb, which calls
 * this again). */
static void gate_fill(struct task *t, int unpoke)
{
  struct srv_gate *g = t->gate;
  int k = 0, free_slots = 0, i;

  for (i = 0; i < t->slots; i++)
    free_slots += !t->used[i];
  pthread_mutex_lock(&g->mu);
  if (unpoke)
    g->poked = 0; /* t has left g_poked */
  if (g->task && gate_runnable(t)) {
    k = t->slots - g->running;
    k = k < free_slots ? k : free_slots;
    k = k > 0 ? k : 0;
    g->running += k;
  }
  pthread_mutex_unlock(&g->mu);
  for (i = 0; i < t->slots && k > 0; i++) {
    if (t->used[i])
      continue;
    t->used[i] = 1;
    t->outstanding++;
    k--;
    t->work[i].data = t;
    uv_queue_work(&g_loop, &t->work[i], work_cb, after_work_cb);
  }
}

void srv_work_gate_advance(struct srv_call *c, uint64_t avail)
{
  struct srv_gate *g = c->run.gate;

  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  if (avail > atomic_load(&g->avail))
    atomic_store_explicit(&g->avail, avail, memory_order_release);
  if (g->task)
    gate_poke(g->task);
  pthread_mutex_unlock(&g->mu);
}

static void work_cb(uv_work_t *w)
{
  struct task *t = w->data;
  struct srv_call *c = t->c;
  uint64_t t0 = srv_now_ns(), zero = 0;

  atomic_compare_exchange_strong(&t->first_ns, &zero, t0);
  if (t->job < c->plan.njobs) {
    const ab_job_t *job = c->plan.jobs[t->job];
    int64_t pieces = ab_job_pieces(job), i;
    size_t ss = ab_job_scratch_size(job);
    void *scratch = scratch_alloc(ss);

    if (ss && !scratch) {
      fail_task(t, 500, AB_STATUS_OK, "cannot allocate scratch memory for a "
                                      "kernel");
    } else {
      for (;;) {
        if (atomic_load_explicit(&t->failed, memory_order_relaxed))
          break;
        if (atomic_load_explicit(&g_cancel, memory_order_relaxed)) {
          fail_task(t, 503, AB_STATUS_OK,
                    "the server is shutting down and the drain deadline "
                    "passed before this request was computed");
          break;
        }
        if (atomic_load_explicit(&c->run.cancel, memory_order_relaxed)) {
          fail_task(t, 503, AB_STATUS_OK,
                    "the client went away before the answer was computed");
          break;
        }
        if (t->gate) {
          if ((i = gate_claim(t)) < 0)
            break; /* none ready: leave the thread to other calls */
          i = t->gate->order[i];
        } else {
          /* Pieces are numbered costliest first, so taking them in order
           * from one counter balances the items. */
          i = atomic_fetch_add_explicit(&t->next_piece, 1,
                                        memory_order_relaxed);
          if (i >= pieces)
            break;
        }
        enum ab_status st = ab_job_run(job, i, scratch);
        if (st != AB_STATUS_OK) {
          fail_task(t, 0, st, NULL);
          break;
        }
        if (c->run.piece_done)
          c->run.piece_done(c, i);
      }
    }
    free(scratch);
  }
  atomic_fetch_add_explicit(&t->kernel_ns, srv_now_ns() - t0,
                            memory_order_relaxed);

  /* The last item of the phase decides whether the call is finished; the
   * acq_rel decrement (for a gated call, its mutex) makes every other
   * item's writes (outputs, err) visible here before finish/encode read
   * them. */
  if (t->gate ? !gate_item_end(t)
              : atomic_fetch_sub_explicit(&t->items_running, 1,
                                          memory_order_acq_rel) != 1)
    return;
  t->final =
      atomic_load(&t->failed) || next_job(c, t->job + 1) >= c->plan.njobs;
  if (!t->final)
    return;
  c->ts.kernel_seconds = (double)atomic_load(&t->kernel_ns) * 1e-9;
  c->ts.run_start = atomic_load(&t->first_ns);
  c->ts.run_end = srv_now_ns();
  t->status = atomic_load(&t->failed) ? t->err.http : 0;
  if (t->complete)
    t->complete(c, t->status, t->status ? &t->err : NULL, t->arg);
}

/* ---------------------------------------------------------------------
 * Loop thread
 * --------------------------------------------------------------------- */

static void after_work_cb(uv_work_t *w, int status);

/* Queue the work items of job t->job (t->job may be njobs for a call
 * without pieces: one item then runs only the completion step). */
static void start_phase(struct task *t)
{
  int64_t pieces =
      t->job < t->c->plan.njobs ? ab_job_pieces(t->c->plan.jobs[t->job]) : 0;
  int n = pieces < g_threads ? (int)pieces : g_threads, i;

  if (n < 1)
    n = 1;
  t->items = n;
  t->items_after = n;
  atomic_store(&t->next_piece, 0);
  atomic_store(&t->items_running, n);
  for (i = 0; i < n; i++) {
    t->work[i].data = t;
    /* uv_queue_work fails only for a NULL work_cb. */
    uv_queue_work(&g_loop, &t->work[i], work_cb, after_work_cb);
  }
}

static void task_free(struct task *t)
{
  free(t->used);
  free(t->work);
  free(t);
}

/* Loop thread, stopping: once no gated call is left, close the handles so
 * that uv_run returns when the queued work has come back.  Submissions
 * are refused by then, and pokes after this are dropped (g_closed). */
static void maybe_close(void)
{
  int close_now;

  pthread_mutex_lock(&g_lock);
  /* Not while submissions wait in g_pending: the wake-up that stop sent
   * drains them, then comes here again. */
  close_now = g_stopping && !g_gated && !g_pending && !g_closed;
  if (close_now)
    g_closed = 1;
  pthread_mutex_unlock(&g_lock);
  if (close_now) {
    uv_close((uv_handle_t *)&g_wake, NULL);
    uv_close((uv_handle_t *)&g_trim, NULL);
  }
}

static void finish_task(struct task *t)
{
  struct srv_call *c = t->c;
  srv_work_done_fn done = t->done;
  void *arg = t->arg;
  int status = t->status;

  if (t->gate) {
    struct task **pp;
    pthread_mutex_lock(&g_lock);
    for (pp = &g_gated; *pp != t; pp = &(*pp)->gated_next)
      ;
    *pp = t->gated_next;
    /* A poke may still wait in g_poked (made before the call ended). */
    for (pp = &g_poked; *pp && *pp != t; pp = &(*pp)->poke_next)
      ;
    if (*pp)
      *pp = t->poke_next;
    pthread_mutex_unlock(&g_lock);
  }
  task_free(t);
  done(c, status, arg);
  atomic_fetch_sub(&g_busy, 1);
  maybe_close();
}

static void after_work_cb(uv_work_t *w, int status)
{
  struct task *t = w->data;

  (void)status; /* UV_ECANCELED never happens: we never call uv_cancel */
  if (t->gate) {
    t->used[w - t->work] = 0;
    /* With none out, the last item has returned: t->final is its. */
    if (--t->outstanding == 0 && t->final)
      finish_task(t);
    else
      gate_fill(t, 0); /* a slot came free */
    return;
  }
  if (--t->items_after > 0)
    return;
  if (t->final) {
    finish_task(t);
    return;
  }
  t->job = next_job(t->c, t->job + 1);
  start_phase(t);
}

static void wake_cb(uv_async_t *h)
{
  struct task *list, *poked, *gated, *t;
  int stopping;

  (void)h;
  pthread_mutex_lock(&g_lock);
  list = g_pending;
  g_pending = g_pending_tail = NULL;
  poked = g_poked;
  g_poked = NULL;
  gated = g_gated;
  stopping = g_stopping;
  pthread_mutex_unlock(&g_lock);

  while ((t = list) != NULL) {
    list = t->next;
    t->job = next_job(t->c, 0);
    if (t->gate)
      gate_fill(t, 0);
    else
      start_phase(t);
  }
  while ((t = poked) != NULL) {
    poked = t->poke_next;
    gate_fill(t, 1);
  }
  /* Stopping or cancelled: gated calls whose items wait for bytes end
   * now (their items see the flag; only this thread unlinks tasks). */
  if (stopping || atomic_load(&g_cancel))
    for (t = gated; t; t = t->gated_next)
      gate_fill(t, 0);
  maybe_close();
}

/* Large buffers kept for the next request are given back once idle: an
 * idle server does not hold a large request's memory for long. */
static void trim_cb(uv_timer_t *t)
{
  /* The count of calls at the previous tick, and at the last release
   * (loop thread only). */
  static uint64_t seen, released;
  uint64_t now = atomic_load(&g_submitted);

  (void)t;
  srv_mem_trim(TRIM_IDLE_S);
  /* Idle: no call for a whole period, none running, the cache of large
   * blocks emptied; after work since the last release, which is what
   * left free pages in the heaps.  Once per idle spell: a busy server
   * reuses those pages, and handing them back would cost it the page
   * faults the cache exists to avoid. */
  if (now == seen && now != released && atomic_load(&g_busy) == 0 &&
      srv_mem_kept() == 0) {
    srv_mem_release();
    released = now;
  }
  seen = now;
}

static void loop_main(void *arg)
{
  (void)arg;
  uv_run(&g_loop, UV_RUN_DEFAULT);
}

/* ---------------------------------------------------------------------
 * Public entry points
 * --------------------------------------------------------------------- */

int srv_work_start(int threads)
{
  char val[16];

  if (g_started)
    return -1;
  if (threads < 1)
    threads = 1;
  /* libuv reads UV_THREADPOOL_SIZE once, when the first work is queued;
   * this runs before any other thread exists (setenv is not thread-safe). */
  snprintf(val, sizeof val, "%d", threads);
  if (setenv("UV_THREADPOOL_SIZE", val, 1) != 0)
    return -1;
  g_threads = threads;
  if (uv_loop_init(&g_loop) != 0)
    return -1;
  if (uv_async_init(&g_loop, &g_wake, wake_cb) != 0) {
    uv_loop_close(&g_loop);
    return -1;
  }
  /* Init and start cannot fail for a timer on a live loop. */
  uv_timer_init(&g_loop, &g_trim);
  uv_timer_start(&g_trim, trim_cb, TRIM_EVERY_MS, TRIM_EVERY_MS);
  g_stopping = 0;
  g_closed = 0;
  atomic_store(&g_cancel, 0);
  atomic_store(&g_gate_stop, 0);
  if (uv_thread_create(&g_thread, loop_main, NULL) != 0) {
    uv_close((uv_handle_t *)&g_wake, NULL);
    uv_close((uv_handle_t *)&g_trim, NULL);
    uv_run(&g_loop, UV_RUN_DEFAULT);
    uv_loop_close(&g_loop);
    return -1;
  }
  g_started = 1;
  return 0;
}

int srv_work_submit_full(struct srv_call *c, srv_work_complete_fn complete,
                         srv_work_done_fn done, void *arg)
{
  struct task *t;
  int64_t most = 1;
  int j;

  if (!g_started || !done)
    return -1;
  /* A phase queues min(pieces, threads) items: size the array for the
   * largest one only. */
  for (j = 0; j < c->plan.njobs; j++)
    if (ab_job_pieces(c->plan.jobs[j]) > most)
      most = ab_job_pieces(c->plan.jobs[j]);
  if (most > g_threads)
    most = g_threads;
  t = calloc(1, sizeof *t);
  if (!t)
    return -1;
  t->work = calloc((size_t)most, sizeof *t->work);
  if (!t->work) {
    free(t);
    return -1;
  }
  t->c = c;
  t->complete = complete;
  t->done = done;
  t->arg = arg;
  t->slots = (int)most;
  c->ts.kernel_seconds = 0;
  if (c->run.gate) {
    /* One job, claimed in the gate's order. */
    if (c->plan.njobs != 1 ||
        c->run.gate->npieces != ab_job_pieces(c->plan.jobs[0]) ||
        !(t->used = calloc((size_t)most, 1))) {
      task_free(t);
      return -1;
    }
    t->gate = c->run.gate;
  }

  pthread_mutex_lock(&g_lock);
  if (g_stopping) {
    pthread_mutex_unlock(&g_lock);
    task_free(t);
    return -1;
  }
  if (t->gate) {
    /* Under g_lock (a leaf) only: the gate is not shared yet, so its
     * mutex is not needed to publish the task. */
    t->gate->task = t;
    t->gated_next = g_gated;
    g_gated = t;
  }
  if (g_pending_tail)
    g_pending_tail->next = t;
  else
    g_pending = t;
  g_pending_tail = t;
  atomic_fetch_add(&g_busy, 1);
  atomic_fetch_add_explicit(&g_submitted, 1, memory_order_relaxed);
  /* Sent under the lock so that srv_work_stop cannot close the handle
   * between the check of g_stopping and this call. */
  uv_async_send(&g_wake);
  pthread_mutex_unlock(&g_lock);
  return 0;
}

int srv_work_submit(struct srv_call *c,
                    void (*done)(struct srv_call *c, int status, void *arg),
                    void *arg)
{
  return srv_work_submit_full(c, NULL, done, arg);
}

int srv_work_run_inline(struct srv_call *c, struct srv_err *err)
{
  uint64_t t0 = srv_now_ns();
  int j, rc = 0;

  for (j = 0; j < c->plan.njobs && rc == 0; j++) {
    const ab_job_t *job = c->plan.jobs[j];
    int64_t pieces = ab_job_pieces(job), i;
    size_t ss = ab_job_scratch_size(job);
    void *scratch = scratch_alloc(ss);

    if (ss && !scratch) {
      rc = srv_fail(err, 500, NULL,
                    "cannot allocate %zu bytes of scratch memory for a kernel",
                    ss);
      break;
    }
    for (i = 0; i < pieces; i++) {
      enum ab_status st = ab_job_run(job, i, scratch);
      if (st != AB_STATUS_OK) {
        rc = srv_fail_lib(err, st, "", NULL);
        break;
      }
    }
    free(scratch);
  }
  c->ts.run_start = t0;
  c->ts.run_end = srv_now_ns();
  c->ts.kernel_seconds = (double)(c->ts.run_end - t0) * 1e-9;
  return rc;
}

void srv_work_cancel(void)
{
  atomic_store(&g_cancel, 1);
  /* Gated calls parked for bytes have no item that would see it. */
  pthread_mutex_lock(&g_lock);
  if (g_started && !g_closed)
    uv_async_send(&g_wake);
  pthread_mutex_unlock(&g_lock);
}

int srv_work_busy(void) { return atomic_load(&g_busy); }

int srv_work_threads(void) { return g_threads; }

void srv_work_stop(void)
{
  if (!g_started)
    return;
  /* A gated call still waiting for its body would keep the loop alive:
   * nothing can run once the pool is gone, so it ends (503). */
  atomic_store(&g_gate_stop, 1);
  pthread_mutex_lock(&g_lock);
  g_stopping = 1;
  uv_async_send(&g_wake);
  pthread_mutex_unlock(&g_lock);
  /* The loop returns once the wake handle is closed and every queued work
   * item has come back, i.e. after the last `done`. */
  uv_thread_join(&g_thread);
  uv_loop_close(&g_loop);
  g_started = 0;
  srv_mem_trim(0); /* nothing will reuse the kept blocks now */
}
