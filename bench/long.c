/* long.c: attention at long contexts -- N = 8192, 16384, 32768 (H = 8,
 * d = 128, float32, dense and causal, in process), each timed in the same
 * rounds as N = 4096, so that time / N^2 is compared with N = 4096's
 * round by round; and the memory the job needs beyond its inputs and
 * outputs (every library allocation, counted through ab_set_allocator,
 * plus one scratch buffer per thread), which must not grow with N^2. */
#include "bench.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define LONG_H 8
#define LONG_D 128
#define LONG_BASE 4096 /* the N that time / N^2 is compared with */

/* ---- counting allocator ---------------------------------------------- */

/* Each block carries its size in front (16 bytes keep malloc's
 * alignment); the live total and its peak are kept atomically, since the
 * library may allocate on any thread. */
static _Atomic int64_t g_live, g_peak;

static void *count_malloc(size_t n)
{
  unsigned char *p = malloc(n + 16);
  int64_t now, peak;

  if (!p)
    return NULL;
  memcpy(p, &n, sizeof n);
  now = atomic_fetch_add(&g_live, (int64_t)n) + (int64_t)n;
  peak = atomic_load(&g_peak);
  while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now))
    ;
  return p + 16;
}

static void count_free(void *ptr)
{
  unsigned char *p = ptr;
  size_t n;

  if (!p)
    return;
  memcpy(&n, p - 16, sizeof n);
  atomic_fetch_sub(&g_live, (int64_t)n);
  free(p - 16);
}

/* ---- one shape ----------------------------------------------------------- */

struct long_var {
  int n, causal;
  float *q, *k, *v, *out;
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct bench_samples ms;
  double extra_mb; /* beyond inputs and outputs */
  int failed;
};

static int long_alloc(struct long_var *v, int n, int causal, float *shared[4])
{
  const size_t per = (size_t)LONG_H * n * LONG_D;
  int64_t shape[4] = {1, LONG_H, n, LONG_D};

  memset(v, 0, sizeof *v);
  v->n = n;
  v->causal = causal;
  if (shared[0]) { /* the causal variant reads the dense one's tensors */
    v->q = shared[0], v->k = shared[1], v->v = shared[2], v->out = shared[3];
  } else {
    v->q = shared[0] = bench_alloc(per * 4);
    v->k = shared[1] = bench_alloc(per * 4);
    v->v = shared[2] = bench_alloc(per * 4);
    v->out = shared[3] = bench_alloc(per * 4);
    bench_fill(v->q, per, 51 + (uint64_t)n, 1.0f);
    bench_fill(v->k, per, 52 + (uint64_t)n, 1.0f);
    bench_fill(v->v, per, 53 + (uint64_t)n, 1.0f);
  }
  if (ab_tensor_init(&v->tq, v->q, AB_DTYPE_F32, 4, shape) ||
      ab_tensor_init(&v->tk, v->k, AB_DTYPE_F32, 4, shape) ||
      ab_tensor_init(&v->tv, v->v, AB_DTYPE_F32, 4, shape))
    return -1;
  ab_attn_params_init(&v->p);
  v->p.q = &v->tq, v->p.k = &v->tk, v->p.v = &v->tv;
  v->p.causal = causal;
  v->p.out = v->out;
  return 0;
}

/* One timed run: job build + pieces over the pool + free.  With
 * `measure`, the extra memory is recorded. */
static int long_run(struct bench_pool *pool, struct long_var *v, double *sec,
                    int measure)
{
  ab_job_t *job = NULL;
  enum ab_status st;
  double t0 = bench_now();

  if (measure) {
    atomic_store(&g_live, 0);
    atomic_store(&g_peak, 0);
    ab_set_allocator(count_malloc, count_free);
  }
  st = ab_attention_job(&v->p, &job);
  if (st == AB_STATUS_OK) {
    if (measure)
      v->extra_mb = ((double)atomic_load(&g_peak) +
                     (double)bench_pool_threads(pool) *
                         (double)ab_job_scratch_size(job)) * 1e-6;
    st = bench_pool_job(pool, job);
    ab_job_free(job);
  }
  *sec = bench_now() - t0;
  if (measure)
    ab_set_allocator(NULL, NULL);
  if (st != AB_STATUS_OK) {
    printf("  N %d %s failed: %s (%s)\n", v->n, v->causal ? "causal" : "dense",
           ab_status_str(st), ab_last_error()->msg);
    v->failed = 1;
    return -1;
  }
  return 0;
}

/* Row r of head h against float64 (the first rows of head 0, the last of
 * the last head): max |error|. */
static double long_check(const struct long_var *v, int h, int r, double *s)
{
  const int n = v->n, last = v->causal ? r : n - 1;
  const size_t head = (size_t)h * n * LONG_D, row = head + (size_t)r * LONG_D;

  return bench_attn_row_err(v->q + row, v->k + head, v->v + head, last + 1,
                            LONG_D, v->out + row, s);
}

/* N = n and N = LONG_BASE, dense and causal, interleaved in every round. */
static void long_shape(struct bench_pool *pool, int n, struct long_var base[2])
{
  float *shared[4] = {NULL, NULL, NULL, NULL};
  struct long_var var[2];
  struct bench_samples ratio[2] = {{0}, {0}}, probe = {0};
  double *s = bench_alloc((size_t)n * sizeof *s), secs, round = 0, err[2];
  int i, r, reps;

  for (i = 0; i < 2; i++)
    if (long_alloc(&var[i], n, i, shared) != 0) {
      printf("  cannot describe the tensors: %s\n", ab_last_error()->msg);
      var[i].failed = 1;
    }
  /* Warm-up: memory measured, outputs checked. */
  for (i = 0; i < 2; i++) {
    err[i] = -1;
    if (var[i].failed || long_run(pool, &var[i], &secs, 1) != 0)
      continue;
    round += secs;
    err[i] = fmax(long_check(&var[i], 0, 0, s),
                  long_check(&var[i], LONG_H - 1, n - 1, s));
  }
  reps = g_opt.quick ? 2 : round > 40 ? 1 : round > 12 ? 2 : 3;
  for (r = 0; r < reps; r++) {
    for (i = 0; i < 2; i++) {
      double tb, tn;
      if (base[i].failed || var[i].failed ||
          long_run(pool, &base[i], &tb, 0) != 0 ||
          long_run(pool, &var[i], &tn, 0) != 0)
        continue;
      bench_samples_add(&base[i].ms, tb * 1e3);
      bench_samples_add(&var[i].ms, tn * 1e3);
      /* time / N^2 over N = LONG_BASE's, same round */
      bench_samples_add(&ratio[i], (tn / ((double)n * n)) /
                                       (tb / ((double)LONG_BASE * LONG_BASE)));
    }
    bench_samples_add(&probe, bench_probe_fma_once(pool));
  }
  for (i = 0; i < 2; i++) {
    struct long_var *v = &var[i];
    double med = bench_median(&v->ms), pairs, gf;

    if (v->ms.n == 0)
      continue;
    pairs = v->causal ? (double)n * (n + 1) / 2 : (double)n * n;
    gf = 4.0 * LONG_H * LONG_D * pairs / (med * 1e-3) * 1e-9;
    printf("   %6d %-7s %10.1f [%.1f-%.1f] %8.1f %5.1f%% %5.1f%% %8.3f "
           "%8.1f",
           n, v->causal ? "causal" : "dense", med, bench_min(&v->ms),
           bench_max(&v->ms), gf,
           100.0 * gf / bench_ceiling_now(BENCH_CEIL_FMA),
           100.0 * gf / bench_median(&probe), bench_median(&ratio[i]),
           v->extra_mb);
    if (err[i] < 0)
      printf("  -\n");
    else
      printf("  %s %.0e\n", err[i] <= 2e-3 ? "ok" : "WRONG", err[i]);
    res_begin("attention");
    res_str("variant", v->causal ? "causal" : "dense");
    res_str("dtype", "fp32");
    res_int("B", 1);
    res_int("Hq", LONG_H);
    res_int("Hkv", LONG_H);
    res_int("N", n);
    res_int("d", LONG_D);
    res_num("ms_median", med);
    res_num("ms_min", bench_min(&v->ms));
    res_num("ms_max", bench_max(&v->ms));
    res_num("useful_gflops", gf);
    res_pct("pct_peak", gf, BENCH_CEIL_FMA);
    res_num("per_n2_vs_4096", bench_median(&ratio[i]));
    res_num("extra_mb", v->extra_mb);
    res_end();
  }
  free(s);
  for (i = 0; i < 4; i++)
    free(shared[i]);
}

void bench_long(struct bench_pool *pool)
{
  static const int full_n[] = {8192, 16384, 32768}, quick_n[] = {8192};
  const int *ns = g_opt.quick ? quick_n : full_n;
  int nn = g_opt.quick ? 1 : 3, a, i;
  float *shared[4] = {NULL, NULL, NULL, NULL};
  struct long_var base[2];
  double secs;

  bench_section("attention at long contexts (fp32, H=%d, d=%d, in process; "
                "time / N^2 against N=%d's, same rounds)",
                LONG_H, LONG_D, LONG_BASE);
  printf("   extra-MB: memory the job takes beyond q, k, v and out (library "
         "allocations + one scratch per thread)\n");
  printf("        N variant   ms median [min-max]   GFLOP/s %%peak %%round "
         "/N2-vs-%d extra-MB check\n",
         LONG_BASE);
  for (i = 0; i < 2; i++)
    if (long_alloc(&base[i], LONG_BASE, i, shared) != 0 ||
        long_run(pool, &base[i], &secs, 1) != 0)
      base[i].failed = 1;
  for (i = 0; i < 2; i++)
    printf("   %6d %-7s (the reference: timed beside every N below; "
           "extra %.1f MB)\n",
           LONG_BASE, i ? "causal" : "dense", base[i].extra_mb);
  for (a = 0; a < nn; a++)
    long_shape(pool, ns[a], base);
  for (i = 0; i < 4; i++)
    free(shared[i]);
}
