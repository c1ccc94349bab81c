/* pool.c: the benchmark's own thread pool (the library starts no threads)
 * plus timing, statistics and buffer helpers.  The calling thread is
 * thread 0 and works too, so N threads means N busy cores, no more. */
#include "bench.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== time, statistics, buffers ======================================= */

double bench_now(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_samples_add(struct bench_samples *s, double v)
{
  if (s->n < BENCH_MAX_REPS)
    s->v[s->n++] = v;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

double bench_median(const struct bench_samples *s)
{
  double t[BENCH_MAX_REPS];

  if (s->n == 0)
    return NAN;
  memcpy(t, s->v, (size_t)s->n * sizeof t[0]);
  qsort(t, (size_t)s->n, sizeof t[0], cmp_double);
  return s->n % 2 ? t[s->n / 2] : 0.5 * (t[s->n / 2 - 1] + t[s->n / 2]);
}

double bench_min(const struct bench_samples *s)
{
  double m = NAN;
  int i;

  for (i = 0; i < s->n; i++)
    if (i == 0 || s->v[i] < m)
      m = s->v[i];
  return m;
}

double bench_max(const struct bench_samples *s)
{
  double m = NAN;
  int i;

  for (i = 0; i < s->n; i++)
    if (i == 0 || s->v[i] > m)
      m = s->v[i];
  return m;
}

void bench_fill(float *x, size_t n, uint64_t seed, float amp)
{
  uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i;

  for (i = 0; i < n; i++) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    /* 24 random bits -> [0, 1) exactly representable in float. */
    x[i] = amp * (2.0f * (float)(st >> 40) * (1.0f / 16777216.0f) - 1.0f);
  }
}

void *bench_alloc(size_t bytes)
{
  size_t rounded = (bytes + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, rounded ? rounded : 64);

  if (!p) {
    fprintf(stderr, "bench: cannot allocate %zu bytes\n", bytes);
    exit(2);
  }
  return p;
}

/* ==== the pool ========================================================== */

struct bench_worker {
  struct bench_pool *pool;
  pthread_t tid_sys;
  int tid;
  void *scratch;
  size_t scratch_size;
};

struct bench_pool {
  int n;
  struct bench_worker *w;
  /* The task of the current generation.  Written by thread 0 under mu
   * before gen is bumped; read by workers after they see the new gen. */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  unsigned gen;
  int active; /* workers still in the current generation */
  int stop;
  int each;   /* 1: every thread runs its own index once */
  int64_t npieces;
  _Atomic int64_t next;
  bench_piece_fn fn;
  void *ctx;
};

static void run_share(struct bench_pool *p, struct bench_worker *w)
{
  int64_t i;

  if (p->each) {
    p->fn(p->ctx, w->tid, w->tid, NULL);
    return;
  }
  /* Pieces come numbered costly-first (library contract), so handing
   * them out in index order keeps the threads balanced. */
  while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) <
         p->npieces)
    p->fn(p->ctx, i, w->tid, w->scratch);
}

static void *worker_main(void *arg)
{
  struct bench_worker *w = arg;
  struct bench_pool *p = w->pool;
  unsigned seen = 0;

  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->gen == seen && !p->stop)
      pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop)
      break;
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    run_share(p, w);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0)
      pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

struct bench_pool *bench_pool_new(int threads)
{
  struct bench_pool *p = calloc(1, sizeof *p);
  int i;

  if (!p || threads < 1)
    goto fail;
  p->n = threads;
  p->w = calloc((size_t)threads, sizeof *p->w);
  if (!p->w)
    goto fail;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  for (i = 0; i < threads; i++) {
    p->w[i].pool = p;
    p->w[i].tid = i;
  }
  for (i = 1; i < threads; i++)
    if (pthread_create(&p->w[i].tid_sys, NULL, worker_main, &p->w[i])) {
      fprintf(stderr, "bench: cannot start thread %d\n", i);
      exit(2);
    }
  return p;
fail:
  fprintf(stderr, "bench: cannot create a pool of %d threads\n", threads);
  exit(2);
}

void bench_pool_free(struct bench_pool *p)
{
  int i;

  if (!p)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (i = 1; i < p->n; i++)
    pthread_join(p->w[i].tid_sys, NULL);
  for (i = 0; i < p->n; i++)
    free(p->w[i].scratch);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  free(p->w);
  free(p);
}

int bench_pool_threads(const struct bench_pool *p) { return p->n; }

static void dispatch(struct bench_pool *p, int each, int64_t n, size_t scratch,
                     bench_piece_fn fn, void *ctx)
{
  int i;

  /* Workers are idle between generations, so thread 0 may resize their
   * scratch here without a lock on the buffers themselves. */
  for (i = 0; i < p->n; i++)
    if (p->w[i].scratch_size < scratch) {
      free(p->w[i].scratch);
      p->w[i].scratch = bench_alloc(scratch);
      p->w[i].scratch_size = scratch;
      memset(p->w[i].scratch, 0, scratch); /* fault the pages in now */
    }
  pthread_mutex_lock(&p->mu);
  p->each = each;
  p->npieces = n;
  atomic_store(&p->next, 0);
  p->fn = fn;
  p->ctx = ctx;
  p->active = p->n - 1;
  p->gen++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);

  run_share(p, &p->w[0]);

  pthread_mutex_lock(&p->mu);
  while (p->active > 0)
    pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void bench_pool_run(struct bench_pool *p, int64_t n, size_t scratch,
                    bench_piece_fn fn, void *ctx)
{
  dispatch(p, 0, n, scratch, fn, ctx);
}

void bench_pool_each(struct bench_pool *p, bench_piece_fn fn, void *ctx)
{
  dispatch(p, 1, p->n, 0, fn, ctx);
}

struct job_ctx {
  const ab_job_t *job;
  _Atomic int status; /* first failing status, 0 while all succeed */
};

static void job_piece(void *ctx, int64_t piece, int tid, void *scratch)
{
  struct job_ctx *jc = ctx;
  enum ab_status st;
  int expect = 0;

  (void)tid;
  if (atomic_load_explicit(&jc->status, memory_order_relaxed))
    return; /* something failed: finish quickly */
  st = ab_job_run(jc->job, piece, scratch);
  if (st != AB_STATUS_OK) {
    atomic_compare_exchange_strong(&jc->status, &expect, (int)st);
    fprintf(stderr, "bench: job piece %lld failed: %s (%s)\n",
            (long long)piece, ab_status_str(st), ab_last_error()->msg);
  }
}

enum ab_status bench_pool_job(struct bench_pool *p, const ab_job_t *job)
{
  struct job_ctx jc;

  jc.job = job;
  atomic_init(&jc.status, 0);
  bench_pool_run(p, ab_job_pieces(job), ab_job_scratch_size(job), job_piece,
                 &jc);
  return (enum ab_status)atomic_load(&jc.status);
}
