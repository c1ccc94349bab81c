/* test-pool.c: the worker pool -- every piece runs once, jobs run in
 * order, scratch is per item, failures and the completion step reach the
 * right threads, inline runs agree.  The jobs are built here with the
 * library's internal job constructor, so the pool is tested alone. */
#include "../../lib/src/ab-internal.h"
#include "srv.h"
#include "test.h"
#include "work/work.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- a job whose pieces are checkable -------------------------------- */

struct fill_ctx {
  int64_t pieces;
  int32_t *out;         /* [pieces]: written by piece i */
  const int32_t *prev;  /* [pieces] of an earlier job, or NULL */
  _Atomic int *runs;    /* [pieces]: how often piece i ran */
  int32_t add;
  int64_t fail_at;      /* piece that fails, -1: none */
  size_t scratch;
  _Atomic int bad_scratch;
};

static enum ab_status fill_run(const struct ab_job *job, int64_t i,
                               void *scratch)
{
  struct fill_ctx *x = job->ctx;
  unsigned char *s = scratch;
  size_t k;

  atomic_fetch_add(&x->runs[i], 1);
  if (i == x->fail_at)
    return ab__fail(AB_STATUS_OUT_OF_RANGE, "positions.3",
                    "position 99 is past the table");
  /* Scratch is private to one item at a time: write a pattern, spin a
   * little so another item would interleave, and check it survived. */
  if (x->scratch) {
    if (!s || (uintptr_t)s % 64 != 0) {
      atomic_store(&x->bad_scratch, 1);
    } else {
      for (k = 0; k < x->scratch; k++)
        s[k] = (unsigned char)(i + (int64_t)k);
      for (k = 0; k < x->scratch; k++)
        if (s[k] != (unsigned char)(i + (int64_t)k))
          atomic_store(&x->bad_scratch, 1);
    }
  }
  /* A job that needs the previous job's output sees all of it. */
  x->out[i] = (x->prev ? x->prev[x->pieces - 1 - i] : 0) + x->add;
  return AB_STATUS_OK;
}

static ab_job_t *fill_job(struct fill_ctx *x)
{
  struct ab_job *job;

  if (ab__job_new(0, &job) != AB_STATUS_OK)
    return NULL;
  job->pieces = x->pieces;
  job->scratch_size = x->scratch;
  job->flops = 1e9;
  job->run = fill_run;
  job->ctx = x; /* owned by the test: ab_job_free frees ctx, so reset it */
  return job;
}

/* ab_job_free frees job->ctx; the test owns its contexts. */
static void free_jobs(struct srv_call *c)
{
  int i;
  for (i = 0; i < c->plan.njobs; i++) {
    c->plan.jobs[i]->ctx = NULL;
    ab_job_free(c->plan.jobs[i]);
  }
  c->plan.njobs = 0;
}

/* ---- waiting for done ------------------------------------------------ */

struct waiter {
  int done, status, completed, complete_status;
  pthread_t complete_thread, done_thread;
  char field[192];
};

static struct waiter g_w;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

static void on_complete(struct srv_call *c, int status,
                        const struct srv_err *err, void *arg)
{
  (void)c;
  (void)arg;
  g_w.completed++;
  g_w.complete_status = status;
  g_w.complete_thread = pthread_self();
  if (err)
    snprintf(g_w.field, sizeof g_w.field, "%s", err->field);
}

static void on_done(struct srv_call *c, int status, void *arg)
{
  (void)c;
  (void)arg;
  pthread_mutex_lock(&g_mu);
  g_w.done++;
  g_w.status = status;
  g_w.done_thread = pthread_self();
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

/* Each test starts from a clean record (tests may share a process: -n). */
static void reset_waiter(void) { memset(&g_w, 0, sizeof g_w); }

static void wait_done(int n)
{
  pthread_mutex_lock(&g_mu);
  while (g_w.done < n)
    pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

/* ---- tests ------------------------------------------------------------ */

#define NP 1000

TEST(pool_runs_every_piece_once_in_job_order)
{
  static int32_t a[NP], b[NP];
  static _Atomic int ra[NP], rb[NP];
  struct fill_ctx x = {NP, a, NULL, ra, 5, -1, 4096, 0};
  struct fill_ctx y = {NP, b, a, rb, 1000, -1, 0, 0};
  struct srv_call c;
  int i;

  memset(&c, 0, sizeof c);
  c.plan.jobs[c.plan.njobs++] = fill_job(&x);
  c.plan.jobs[c.plan.njobs++] = fill_job(&y);
  CHECK(c.plan.jobs[0] && c.plan.jobs[1]);
  reset_waiter();
  CHECK_EQ_I64(srv_work_start(3), 0);
  CHECK_EQ_I64(srv_work_threads(), 3);
  CHECK_EQ_I64(srv_work_submit_full(&c, on_complete, on_done, NULL), 0);
  wait_done(1);
  CHECK_EQ_I64(g_w.status, 0);
  CHECK_EQ_I64(g_w.completed, 1);
  CHECK_EQ_I64(g_w.complete_status, 0);
  /* complete ran on a pool thread, done on the loop thread: neither is
   * this thread, and they differ. */
  CHECK(!pthread_equal(g_w.done_thread, pthread_self()));
  CHECK(!pthread_equal(g_w.complete_thread, g_w.done_thread));
  for (i = 0; i < NP; i++) {
    CHECK_EQ_I64(ra[i], 1);
    CHECK_EQ_I64(rb[i], 1);
    CHECK_EQ_I64(a[i], 5);
    CHECK_EQ_I64(b[i], 1005); /* job 2 saw job 1's complete output */
  }
  CHECK_EQ_I64(atomic_load(&x.bad_scratch), 0);
  CHECK(c.ts.kernel_seconds > 0);
  free_jobs(&c);
  srv_work_stop();
  return 0;
}

TEST(pool_many_calls_concurrently)
{
  enum { NC = 40, PIECES = 37 };
  static int32_t out[NC][PIECES];
  static _Atomic int runs[NC][PIECES];
  static struct fill_ctx x[NC];
  static struct srv_call c[NC];
  int i, j;

  reset_waiter();
  CHECK_EQ_I64(srv_work_start(2), 0);
  for (i = 0; i < NC; i++) {
    struct fill_ctx init = {PIECES, out[i], NULL, runs[i], i, -1, 256, 0};
    x[i] = init;
    memset(&c[i], 0, sizeof c[i]);
    c[i].plan.jobs[c[i].plan.njobs++] = fill_job(&x[i]);
    CHECK_EQ_I64(srv_work_submit(&c[i], on_done, NULL), 0);
  }
  wait_done(NC);
  for (i = 0; i < NC; i++) {
    for (j = 0; j < PIECES; j++) {
      CHECK_EQ_I64(runs[i][j], 1);
      CHECK_EQ_I64(out[i][j], i);
    }
    free_jobs(&c[i]);
  }
  srv_work_stop();
  return 0;
}

TEST(pool_failure_reports_library_error)
{
  static int32_t a[NP];
  static _Atomic int ra[NP];
  struct fill_ctx x = {NP, a, NULL, ra, 0, 10, 0, 0};
  static int32_t b[4];
  static _Atomic int rb[4];
  struct fill_ctx y = {4, b, NULL, rb, 0, -1, 0, 0};
  struct srv_call c;
  int i, ran = 0;

  memset(&c, 0, sizeof c);
  c.plan.jobs[c.plan.njobs++] = fill_job(&x);
  c.plan.jobs[c.plan.njobs++] = fill_job(&y);
  reset_waiter();
  /* One worker takes the pieces in order, so "the rest is skipped" is
   * deterministic: with two, the other worker may legitimately finish
   * every remaining piece before the failure is seen. */
  CHECK_EQ_I64(srv_work_start(1), 0);
  CHECK_EQ_I64(srv_work_submit_full(&c, on_complete, on_done, NULL), 0);
  wait_done(1);
  CHECK_EQ_I64(g_w.status, 400);
  CHECK_EQ_I64(g_w.complete_status, 400);
  /* The failing thread's ab_last_error became the field pointer. */
  CHECK_STR(g_w.field, "/positions/3");
  /* The rest of the failing job is skipped, the next job never starts. */
  for (i = 0; i < NP; i++)
    ran += ra[i];
  CHECK(ran <= 11); /* pieces 0..10, the failing one included */
  for (i = 0; i < 4; i++)
    CHECK_EQ_I64(rb[i], 0);
  free_jobs(&c);
  srv_work_stop();
  return 0;
}

TEST(pool_call_without_pieces_still_completes)
{
  struct srv_call c;

  memset(&c, 0, sizeof c);
  reset_waiter();
  CHECK_EQ_I64(srv_work_start(2), 0);
  CHECK_EQ_I64(srv_work_submit_full(&c, on_complete, on_done, NULL), 0);
  wait_done(1);
  CHECK_EQ_I64(g_w.completed, 1);
  CHECK_EQ_I64(g_w.status, 0);
  srv_work_stop();
  /* After stop the pool refuses work instead of losing it. */
  CHECK_EQ_I64(srv_work_submit(&c, on_done, NULL), -1);
  return 0;
}

TEST(pool_cancel_completes_with_503)
{
  static int32_t a[NP];
  static _Atomic int ra[NP];
  struct fill_ctx x = {NP, a, NULL, ra, 0, -1, 0, 0};
  struct srv_call c;
  int i, ran = 0;

  memset(&c, 0, sizeof c);
  c.plan.jobs[c.plan.njobs++] = fill_job(&x);
  reset_waiter();
  CHECK_EQ_I64(srv_work_start(2), 0);
  srv_work_cancel();
  CHECK_EQ_I64(srv_work_submit_full(&c, on_complete, on_done, NULL), 0);
  wait_done(1);
  CHECK_EQ_I64(g_w.status, 503);
  for (i = 0; i < NP; i++)
    ran += ra[i];
  CHECK_EQ_I64(ran, 0);
  free_jobs(&c);
  srv_work_stop();
  return 0;
}

TEST(pool_inline_matches)
{
  static int32_t a[NP], b[NP];
  static _Atomic int ra[NP], rb[NP];
  struct fill_ctx x = {NP, a, NULL, ra, 3, -1, 128, 0};
  struct fill_ctx y = {NP, b, a, rb, 1, -1, 0, 0};
  struct srv_call c;
  struct srv_err e;
  int i;

  memset(&c, 0, sizeof c);
  c.plan.jobs[c.plan.njobs++] = fill_job(&x);
  c.plan.jobs[c.plan.njobs++] = fill_job(&y);
  CHECK_EQ_I64(srv_work_run_inline(&c, &e), 0);
  for (i = 0; i < NP; i++)
    CHECK(a[i] == 3 && b[i] == 4 && ra[i] == 1 && rb[i] == 1);
  CHECK_EQ_I64(atomic_load(&x.bad_scratch), 0);
  free_jobs(&c);

  x.fail_at = 7;
  c.plan.jobs[c.plan.njobs++] = fill_job(&x);
  CHECK_EQ_I64(srv_work_run_inline(&c, &e), -1);
  CHECK_EQ_I64(e.http, 400);
  CHECK_STR(e.field, "/positions/3");
  free_jobs(&c);
  return 0;
}

/* ---- gated calls (srv_gate) ------------------------------------------ */

/* A gated call over a fill job: claim index i runs piece order[i] and
 * needs need[i] "body bytes".  Each piece checks, when it runs, that the
 * bytes it needs were announced. */
struct gated {
  struct fill_ctx x;
  struct srv_gate g;
  int64_t order[NP], inv[NP];
  uint64_t need[NP];
  _Atomic int early; /* a piece ran before its bytes were in */
  struct srv_call c;
};

static struct gated *g_gated_now;

static enum ab_status gated_run(const struct ab_job *job, int64_t i,
                                void *scratch)
{
  struct gated *gt = g_gated_now;

  if (gt->need[gt->inv[i]] > atomic_load(&gt->g.avail))
    atomic_store(&gt->early, 1);
  return fill_run(job, i, scratch);
}

static void gated_init(struct gated *gt, int32_t *out, _Atomic int *runs,
                       int64_t pieces)
{
  int64_t i;

  memset(gt, 0, sizeof *gt);
  gt->x = (struct fill_ctx){pieces, out, NULL, runs, 7, -1, 64, 0};
  for (i = 0; i < pieces; i++) {
    gt->order[i] = pieces - 1 - i; /* not the job's own order */
    gt->inv[pieces - 1 - i] = i;
    gt->need[i] = (uint64_t)(i / 3 + 1) * 100; /* three pieces per step */
  }
  gt->g.npieces = pieces;
  gt->g.order = gt->order;
  gt->g.need = gt->need;
  pthread_mutex_init(&gt->g.mu, NULL);
  gt->c.plan.jobs[gt->c.plan.njobs++] = fill_job(&gt->x);
  gt->c.plan.jobs[0]->run = gated_run;
  gt->c.run.gate = &gt->g;
  g_gated_now = gt;
}

static void gated_free(struct gated *gt)
{
  free_jobs(&gt->c);
  pthread_mutex_destroy(&gt->g.mu);
}

TEST(pool_gated_runs_each_piece_once_its_bytes_are_in)
{
  static int32_t a[NP];
  static _Atomic int ra[NP];
  static struct gated gt;
  uint64_t avail;
  int i;

  memset(ra, 0, sizeof ra);
  gated_init(&gt, a, ra, NP);
  reset_waiter();
  CHECK_EQ_I64(srv_work_start(2), 0);
  CHECK_EQ_I64(srv_work_submit_full(&gt.c, on_complete, on_done, NULL), 0);
  /* The bytes arrive in small steps, sometimes slower than the pieces. */
  for (avail = 0; avail <= 100 * (NP / 3 + 1); avail += 37) {
    srv_work_gate_advance(&gt.c, avail);
    if (avail % 1000 < 37) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
  }
  srv_work_gate_advance(&gt.c, UINT64_MAX);
  wait_done(1);
  CHECK_EQ_I64(g_w.status, 0);
  CHECK_EQ_I64(g_w.completed, 1);
  CHECK_EQ_I64(atomic_load(&gt.early), 0);
  for (i = 0; i < NP; i++) {
    CHECK_EQ_I64(ra[i], 1);
    CHECK_EQ_I64(a[i], 7);
  }
  CHECK_EQ_I64(atomic_load(&gt.x.bad_scratch), 0);
  srv_work_stop();
  gated_free(&gt);
  return 0;
}

/* With one thread, a gated call waiting for bytes holds no thread: a call
 * submitted after it completes first. */
TEST(pool_gated_call_waiting_for_bytes_leaves_the_thread)
{
  static int32_t a[NP], b[NP];
  static _Atomic int ra[NP], rb[NP];
  static struct gated gt;
  struct fill_ctx y = {NP, b, NULL, rb, 9, -1, 0, 0};
  struct srv_call c;
  int i;

  memset(ra, 0, sizeof ra);
  gated_init(&gt, a, ra, NP);
  memset(&c, 0, sizeof c);
  c.plan.jobs[c.plan.njobs++] = fill_job(&y);
  reset_waiter();
  CHECK_EQ_I64(srv_work_start(1), 0);
  CHECK_EQ_I64(srv_work_submit_full(&gt.c, on_complete, on_done, NULL), 0);
  srv_work_gate_advance(&gt.c, 250); /* six pieces' bytes */
  CHECK_EQ_I64(srv_work_submit(&c, on_done, NULL), 0);
  wait_done(1);
  for (i = 0; i < NP; i++)
    CHECK_EQ_I64(rb[i], 1);
  CHECK_EQ_I64(g_w.completed, 0); /* the gated call is still open */
  srv_work_gate_advance(&gt.c, UINT64_MAX);
  wait_done(2);
  CHECK_EQ_I64(g_w.completed, 1);
  CHECK_EQ_I64(g_w.complete_status, 0);
  CHECK_EQ_I64(atomic_load(&gt.early), 0);
  for (i = 0; i < NP; i++)
    CHECK_EQ_I64(ra[i], 1);
  free_jobs(&c);
  srv_work_stop();
  gated_free(&gt);
  return 0;
}

/* A gated call whose client went away, or that the pool's stop finds
 * waiting, ends with 503 at once, its missing pieces never run. */
TEST(pool_gated_call_cancelled_or_stopped_while_waiting)
{
  static int32_t a[NP];
  static _Atomic int ra[NP];
  static struct gated gt;
  int i, ran = 0, round;

  for (round = 0; round < 2; round++) {
    memset(ra, 0, sizeof ra);
    gated_init(&gt, a, ra, NP);
    reset_waiter();
    CHECK_EQ_I64(srv_work_start(2), 0);
    CHECK_EQ_I64(srv_work_submit_full(&gt.c, on_complete, on_done, NULL), 0);
    srv_work_gate_advance(&gt.c, 100); /* three pieces */
    if (round == 0) {
      atomic_store(&gt.c.run.cancel, 1);
      srv_work_gate_advance(&gt.c, 100);
      wait_done(1);
      srv_work_stop();
    } else {
      srv_work_stop(); /* returns only once the call has ended */
      CHECK_EQ_I64(g_w.done, 1);
    }
    CHECK_EQ_I64(g_w.status, 503);
    for (ran = 0, i = 0; i < NP; i++)
      ran += ra[i];
    CHECK(ran <= 3);
    CHECK_EQ_I64(atomic_load(&gt.early), 0);
    gated_free(&gt);
  }
  return 0;
}

/* A call submitted while the loop thread is busy in another call's `done`,
 * then the pool stopped: the stop must still run it (the loop must not
 * close its wake-up handle while submissions wait). */
static _Atomic int g_in_done_a, g_done_b;

static void done_slow(struct srv_call *c, int status, void *arg)
{
  struct timespec ts = {0, 200 * 1000 * 1000};

  (void)c, (void)status, (void)arg;
  atomic_store(&g_in_done_a, 1);
  nanosleep(&ts, NULL);
}

static void done_b(struct srv_call *c, int status, void *arg)
{
  (void)c, (void)status, (void)arg;
  atomic_store(&g_done_b, 1);
}

TEST(pool_stop_runs_calls_submitted_just_before)
{
  static int32_t a[4], b[4];
  static _Atomic int ra[4], rb[4];
  struct fill_ctx x = {4, a, NULL, ra, 1, -1, 0, 0};
  struct fill_ctx y = {4, b, NULL, rb, 2, -1, 0, 0};
  struct srv_call ca, cb;
  struct timespec ms = {0, 1000 * 1000};
  int i;

  memset(&ca, 0, sizeof ca);
  memset(&cb, 0, sizeof cb);
  ca.plan.jobs[ca.plan.njobs++] = fill_job(&x);
  cb.plan.jobs[cb.plan.njobs++] = fill_job(&y);
  atomic_store(&g_in_done_a, 0);
  atomic_store(&g_done_b, 0);
  CHECK_EQ_I64(srv_work_start(1), 0);
  CHECK_EQ_I64(srv_work_submit_full(&ca, NULL, done_slow, NULL), 0);
  while (!atomic_load(&g_in_done_a))
    nanosleep(&ms, NULL);
  CHECK_EQ_I64(srv_work_submit_full(&cb, NULL, done_b, NULL), 0);
  srv_work_stop();
  CHECK_EQ_I64(atomic_load(&g_done_b), 1);
  CHECK_EQ_I64(srv_work_busy(), 0);
  for (i = 0; i < 4; i++)
    CHECK_EQ_I64(rb[i], 1);
  free_jobs(&ca);
  free_jobs(&cb);
  return 0;
}
