/* kernels.c: the library sections of the benchmark -- fused attention (six
 * variants per shape, interleaved A B A B with each other and with the
 * torch peer), RoPE apply on q and k, and bias tables.  Every timed run
 * builds the job, runs its pieces over the bench pool and frees it: that
 * is what a caller pays.  The first run of each case is also checked
 * against a float64 reference computed here, so a fast wrong kernel shows
 * up as such. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== shared ============================================================= */

/* Repetitions after the warm-up round: as many as fit in `budget` seconds,
 * clamped; a round that takes very long (slow kernels) gets one. */
static int pick_reps(double round_s, double budget, int lo, int hi)
{
  int r;

  if (round_s > 20.0)
    return 1;
  r = round_s > 0 ? (int)(budget / round_s) : hi;
  return r < lo ? lo : r > hi ? hi : r;
}

/* ALiBi slope of head h of n (docs/methods.md#alibi, max_bias 8), in double,
 * written independently of the library. */
static double ref_alibi_slope(int h, int n)
{
  int p = 1;

  while (p * 2 <= n)
    p *= 2;
  if (h < p)
    return pow(2.0, -8.0 * (h + 1) / p);
  return pow(2.0, -4.0 * (2 * (h - p) + 1) / p);
}

double bench_attn_row_err(const float *q, const float *k, const float *v,
                          int nkeys, int d, const float *out, double *s)
{
  double mx = -INFINITY, sum = 0, err = 0;
  int j, c;

  for (j = 0; j < nkeys; j++) {
    double dot = 0;
    for (c = 0; c < d; c++)
      dot += (double)q[c] * k[(size_t)j * d + c];
    s[j] = dot / sqrt((double)d);
    mx = fmax(mx, s[j]);
  }
  for (j = 0; j < nkeys; j++)
    sum += (s[j] = exp(s[j] - mx));
  for (c = 0; c < d; c++) {
    double o = 0;
    for (j = 0; j < nkeys; j++)
      o += s[j] * v[(size_t)j * d + c];
    err = fmax(err, fabs(o / sum - out[c]));
  }
  return err;
}

static void print_err_note(double err, double tol)
{
  if (err < 0)
    printf("  -");
  else if (err <= tol)
    printf("  ok %.0e", err);
  else
    printf("  WRONG (max err %.2e > %.0e)", err, tol);
}

/* ==== stream probes on the kernels' own buffers ========================== */

/* The triad ceilings of probe.c are not the traffic of every kernel here:
 * RoPE in place reads and writes each line once (no read-for-ownership),
 * which the STREAM-counted triad does not describe, and a bias table only
 * writes, which on this machine is usually slower (68-100% in the same
 * rounds) than the NT triad's 2:1 mix of reads and writes.  So both
 * sections also time, in every round, the bare
 * stream of their own kind over their own buffer, using probe.c's vector
 * triad kernels:
 *   read+write in place:  x = x + 0*x over the kernel's tensor (values
 *                         unchanged for finite x);
 *   NT write-only:        out = b + 0*b, b a nonzero 1 MiB block reread
 *                         from cache (zero lines stream faster than data on
 *                         this host, so they would flatter the ceiling).
 * Extra columns; %triad and %NT-store keep their bench/README.md meaning. */
struct stream_probe {
  float *buf, *src; /* src: NT write-only's repeated block, else NULL */
  int64_t n;        /* floats of buf */
  int nthreads;
};
#define STREAM_BLOCK ((int64_t)1 << 18) /* floats: 1 MiB */

static void stream_run(float *a, const float *b, int64_t n, int nt)
{
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) {
    bench_triad_avx512(a, b, b, 0.0f, n, nt);
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    bench_triad_avx2(a, b, b, 0.0f, n, nt);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++)
    a[i] = b[i] + 0.0f * b[i];
}

static void stream_thread(void *vctx, int64_t piece, int tid, void *scratch)
{
  const struct stream_probe *sp = vctx;
  /* Whole 64-byte lines per thread (the vector kernels need that); the
   * last thread takes the remainder. */
  int64_t per = (sp->n / sp->nthreads) & ~(int64_t)15;
  int64_t lo = per * tid, hi = tid == sp->nthreads - 1 ? sp->n : lo + per, i;

  (void)piece;
  (void)scratch;
  if (!sp->src) {
    stream_run(sp->buf + lo, sp->buf + lo, hi - lo, 0);
    return;
  }
  for (i = lo; i < hi; i += STREAM_BLOCK)
    stream_run(sp->buf + i, sp->src,
               hi - i < STREAM_BLOCK ? hi - i : STREAM_BLOCK, 1);
}

/* One repetition over all pool threads: GB/s of bytes moved (read+write:
 * 8 per float; write-only: 4). */
static double stream_once(struct bench_pool *pool, struct stream_probe *sp)
{
  double t0 = bench_now();

  sp->nthreads = bench_pool_threads(pool);
  bench_pool_each(pool, stream_thread, sp);
  return (double)sp->n * (sp->src ? 4.0 : 8.0) / (bench_now() - t0) * 1e-9;
}

/* ==== attention ========================================================== */

enum { BIAS_NONE, BIAS_ALIBI, BIAS_T5 };
#define T5_BUCKETS 32
#define T5_MAXDIST 128

struct attn_var {
  const char *name;
  int causal, bias, gqa;
  int bf16;      /* q, k, v bfloat16 (the same values rounded) */
  int fp32;      /* the float32 variant measured beside it, or -1 */
  int hkv;
  struct ab_tensor tq, tk, tv, ttab;
  struct ab_bias_params bp;
  struct ab_attn_params p;
  struct bench_samples ms, build_ms;
  double flops; /* useful: visible (query, key) pairs only */
  double err;   /* max abs error of the checked rows, -1: not checked */
  int failed;
};

struct torch_var {
  const char *impl, *variant;
  int ours; /* index of our matching variant */
  struct bench_samples ms;
  int failed;
};

/* The bfloat16 variants come last and name their float32 twin. */
static const struct {
  const char *name;
  int causal, bias, gqa, bf16, fp32;
} g_variants[] = {
    {"dense", 0, BIAS_NONE, 0, 0, -1},
    {"causal", 1, BIAS_NONE, 0, 0, -1},
    {"alibi", 0, BIAS_ALIBI, 0, 0, -1},
    {"t5", 0, BIAS_T5, 0, 0, -1},
    {"causal_alibi", 1, BIAS_ALIBI, 0, 0, -1},
    {"gqa", 0, BIAS_NONE, 1, 0, -1},
    {"dense", 0, BIAS_NONE, 0, 1, 0},
    {"causal", 1, BIAS_NONE, 0, 1, 1},
};
#define NVAR ((int)(sizeof g_variants / sizeof g_variants[0]))

/* Reference output row (h, i) in double; returns max |ref - out|. */
static double attn_ref_row(const struct attn_var *v, const float *q,
                           const float *k, const float *vv, const float *out,
                           const float *t5, int hq, int n, int d, int h, int i,
                           double *s)
{
  int kvh = h / (hq / v->hkv), j, c;
  const float *qi = q + ((size_t)h * n + i) * d;
  double mx = -INFINITY, sum = 0, err = 0, scale = 1.0 / sqrt((double)d);

  for (j = 0; j < n; j++) {
    const float *kj = k + ((size_t)kvh * n + j) * d;
    double dot = 0;

    if (v->causal && j > i) {
      s[j] = -INFINITY;
      continue;
    }
    for (c = 0; c < d; c++)
      dot += (double)qi[c] * kj[c];
    dot *= scale;
    if (v->bias == BIAS_ALIBI)
      dot -= ref_alibi_slope(h, hq) * fabs((double)(i - j));
    else if (v->bias == BIAS_T5)
      dot += t5[(size_t)ab_t5_bucket(j - i, T5_BUCKETS, 1, T5_MAXDIST) * hq +
                h];
    s[j] = dot;
    if (dot > mx)
      mx = dot;
  }
  for (j = 0; j < n; j++) {
    s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
    sum += s[j];
  }
  for (c = 0; c < d; c++) {
    double o = 0;

    for (j = 0; j < n; j++)
      if (s[j] != 0.0)
        o += s[j] * vv[((size_t)kvh * n + j) * d + c];
    o /= sum;
    err = fmax(err, fabs(o - out[((size_t)h * n + i) * d + c]));
  }
  return err;
}

static double attn_check(const struct attn_var *v, const float *q,
                         const float *k, const float *vv, const float *out,
                         const float *t5, int hq, int n, int d)
{
  const int rows[3] = {0, n / 2 + 1 < n ? n / 2 + 1 : n - 1, n - 1};
  const int heads[2] = {0, hq - 1};
  double *s = malloc((size_t)n * sizeof *s), err = 0;
  int a, b;

  if (!s)
    return -1;
  for (a = 0; a < 2; a++)
    for (b = 0; b < 3; b++)
      err = fmax(err, attn_ref_row(v, q, k, vv, out, t5, hq, n, d, heads[a],
                                   rows[b], s));
  free(s);
  return err;
}

static int attn_run(struct bench_pool *pool, struct attn_var *v,
                    double *seconds)
{
  ab_job_t *job = NULL;
  enum ab_status st;
  double t0 = bench_now(), t1, t2;

  st = ab_attention_job(&v->p, &job);
  t1 = bench_now();
  if (st == AB_STATUS_OK) {
    st = bench_pool_job(pool, job);
    ab_job_free(job);
  }
  t2 = bench_now();
  if (st != AB_STATUS_OK) {
    if (!v->failed)
      printf("  %s: attention failed: %s: %s (%s)\n", v->name,
             ab_status_str(st), ab_last_error()->arg, ab_last_error()->msg);
    v->failed = 1;
    return -1;
  }
  bench_samples_add(&v->build_ms, (t1 - t0) * 1e3);
  *seconds = t2 - t0;
  return 0;
}


/* A variant's time over dense as the median of the per-round ratios: the
 * two ran next to each other in each round, so a swing of the shared
 * machine between rounds cancels out, where a ratio of two medians can
 * pair a fast round of one with a slow round of the other.  `fallback`
 * when the rounds do not pair up. */
static double paired_ratio(const struct bench_samples *v,
                           const struct bench_samples *dense, double fallback)
{
  struct bench_samples r = {0};
  int i, n = v->n < dense->n ? v->n : dense->n;

  for (i = 0; i < n; i++)
    if (dense->v[i] > 0)
      bench_samples_add(&r, v->v[i] / dense->v[i]);
  return r.n ? bench_median(&r) : fallback;
}

static void attn_shape(struct bench_pool *pool, int hq, int n, int d,
                       int with_torch)
{
  const size_t per = (size_t)hq * n * d;
  float *q = bench_alloc(per * 4), *k = bench_alloc(per * 4),
        *vv = bench_alloc(per * 4), *out = bench_alloc(per * 4),
        *t5 = bench_alloc((size_t)T5_BUCKETS * hq * 4);
  /* bfloat16 q, k, v, and the floats they hold (for the check) */
  uint16_t *qh = bench_alloc(per * 2), *kh = bench_alloc(per * 2),
           *vh = bench_alloc(per * 2);
  float *qw = bench_alloc(per * 4), *kw = bench_alloc(per * 4),
        *vw = bench_alloc(per * 4);
  size_t x;
  struct attn_var var[NVAR];
  struct torch_var tv[8];
  struct bench_samples probe = {0}; /* FMA GFLOP/s in the same rounds */
  int ntv = 0, i, r, reps;
  double round_s = 0, secs;
  const double quick_budget = 0.3, budget = 4.0;

  bench_fill(q, per, 1 + (uint64_t)n, 1.0f);
  bench_fill(k, per, 2 + (uint64_t)n, 1.0f);
  bench_fill(vv, per, 3 + (uint64_t)n, 1.0f);
  bench_fill(t5, (size_t)T5_BUCKETS * hq, 4, 0.5f);
  memset(out, 0, per * 4);
  for (x = 0; x < per; x++) {
    qh[x] = ab_f32_to_bf16(q[x]), qw[x] = ab_bf16_to_f32(qh[x]);
    kh[x] = ab_f32_to_bf16(k[x]), kw[x] = ab_bf16_to_f32(kh[x]);
    vh[x] = ab_f32_to_bf16(vv[x]), vw[x] = ab_bf16_to_f32(vh[x]);
  }

  memset(var, 0, sizeof var);
  for (i = 0; i < NVAR; i++) {
    struct attn_var *v = &var[i];
    int64_t qs[4] = {1, hq, n, d}, ks[4] = {1, hq, n, d};
    int64_t ts[2] = {T5_BUCKETS, hq};

    v->name = g_variants[i].name;
    v->causal = g_variants[i].causal;
    v->bias = g_variants[i].bias;
    v->gqa = g_variants[i].gqa;
    v->bf16 = g_variants[i].bf16;
    v->fp32 = g_variants[i].fp32;
    /* GQA: 4 query heads per kv head (32/8, 8/2); its k and v are the
     * first hkv heads of the full tensors. */
    v->hkv = v->gqa ? hq / 4 : hq;
    ks[1] = v->hkv;
    v->err = -1;
    if (ab_tensor_init(&v->tq, v->bf16 ? (void *)qh : q,
                       v->bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, qs) ||
        ab_tensor_init(&v->tk, v->bf16 ? (void *)kh : k,
                       v->bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, ks) ||
        ab_tensor_init(&v->tv, v->bf16 ? (void *)vh : vv,
                       v->bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, ks) ||
        ab_tensor_init(&v->ttab, t5, AB_DTYPE_F32, 2, ts)) {
      printf("  cannot describe the tensors: %s\n", ab_last_error()->msg);
      v->failed = 1;
    }
    ab_attn_params_init(&v->p);
    v->p.q = &v->tq;
    v->p.k = &v->tk;
    v->p.v = &v->tv;
    v->p.layout = AB_LAYOUT_BHSD;
    v->p.causal = v->causal;
    v->p.out = out;
    if (v->bias != BIAS_NONE) {
      ab_bias_params_init(&v->bp);
      v->bp.num_heads = hq;
      if (v->bias == BIAS_ALIBI) {
        v->bp.method = AB_BIAS_ALIBI;
        v->bp.max_bias = 8.0;
      } else {
        v->bp.method = AB_BIAS_T5;
        v->bp.table = &v->ttab;
        v->bp.bidirectional = 1;
        v->bp.max_distance = T5_MAXDIST;
      }
      v->p.bias = &v->bp;
    }
    /* Useful work: 2 flops per multiply-add in q.k and in p.v, only over
     * (query, key) pairs the mask leaves visible: n(n+1)/2 when causal. */
    v->flops = 4.0 * hq * d *
               (v->causal ? (double)n * (n + 1) / 2 : (double)n * n);
  }
  if (with_torch) {
    static const struct {
      const char *impl, *variant;
      int ours;
    } tl[] = {{"matmul", "dense", 0}, {"matmul", "causal", 1},
              {"matmul", "alibi", 2}, {"sdpa", "dense", 0},
              {"sdpa", "causal", 1}};
    for (i = 0; i < (int)(sizeof tl / sizeof tl[0]); i++) {
      if (strcmp(tl[i].impl, "sdpa") == 0 && !peer_has_sdpa())
        continue;
      memset(&tv[ntv], 0, sizeof tv[ntv]);
      tv[ntv].impl = tl[i].impl;
      tv[ntv].variant = tl[i].variant;
      tv[ntv].ours = tl[i].ours;
      ntv++;
    }
  }

  /* Warm-up round: pages faulted, caches and clocks settled; its outputs
   * are checked against the float64 reference. */
  for (i = 0; i < NVAR; i++) {
    if (var[i].failed)
      continue;
    if (attn_run(pool, &var[i], &secs) == 0) {
      round_s += secs;
      var[i].err = var[i].bf16
                       ? attn_check(&var[i], qw, kw, vw, out, t5, hq, n, d)
                       : attn_check(&var[i], q, k, vv, out, t5, hq, n, d);
    }
  }
  for (i = 0; i < ntv && peer_alive(); i++) {
    double ms = peer_attention(tv[i].impl, tv[i].variant, hq, hq, n, d);
    if (ms < 0)
      tv[i].failed = 1;
    else
      round_s += ms * 1e-3;
  }
  bench_probe_fma_once(pool);
  for (i = 0; i < NVAR; i++)
    var[i].build_ms.n = 0; /* report the timed rounds only */

  reps = g_opt.quick ? pick_reps(round_s, quick_budget, 2, 3)
                     : pick_reps(round_s, budget, 3, 15);
  for (r = 0; r < reps; r++) {
    /* One round = every variant once, ours then torch's, then the FMA
     * probe, so slow drifts of the shared machine hit all of them alike. */
    for (i = 0; i < NVAR; i++)
      if (!var[i].failed && attn_run(pool, &var[i], &secs) == 0)
        bench_samples_add(&var[i].ms, secs * 1e3);
    for (i = 0; i < ntv; i++) {
      double ms;

      if (tv[i].failed || !peer_alive())
        continue;
      ms = peer_attention(tv[i].impl, tv[i].variant, hq, hq, n, d);
      if (ms < 0)
        tv[i].failed = 1;
      else
        bench_samples_add(&tv[i].ms, ms);
    }
    bench_samples_add(&probe, bench_probe_fma_once(pool));
  }

  for (i = 0; i < NVAR; i++) {
    struct attn_var *v = &var[i];
    double med = bench_median(&v->ms), gf, rel;
    const struct attn_var *twin;
    char label[32];

    if (v->ms.n == 0)
      continue;
    gf = v->flops / (med * 1e-3) * 1e-9;
    /* bfloat16 rows: time over their float32 twin's, same rounds */
    twin = v->bf16 ? &var[v->fp32] : &var[0];
    rel = paired_ratio(&v->ms, &twin->ms, med / bench_median(&twin->ms));
    snprintf(label, sizeof label, "%s%s", v->name, v->bf16 ? " bf16" : "");
    printf("  %3d %3d %5d %4d %-19s %9.2f [%.2f-%.2f] %8.1f %5.1f%% %5.1f%% "
           "%6.2f %7.2f",
           hq, v->hkv, n, d, label, med, bench_min(&v->ms),
           bench_max(&v->ms), gf,
           100.0 * gf / bench_ceiling_now(BENCH_CEIL_FMA),
           100.0 * gf / bench_median(&probe), rel,
           bench_median(&v->build_ms));
    print_err_note(v->err, 2e-3);
    printf("\n");
    res_begin("attention");
    res_str("variant", v->name);
    res_str("dtype", v->bf16 ? "bf16" : "fp32");
    res_int("B", 1);
    res_int("Hq", hq);
    res_int("Hkv", v->hkv);
    res_int("N", n);
    res_int("d", d);
    res_num("ms_median", med);
    res_num("ms_min", bench_min(&v->ms));
    res_num("ms_max", bench_max(&v->ms));
    res_num("useful_gflops", gf);
    res_pct("pct_peak", gf, BENCH_CEIL_FMA);
    if (v->bf16) {
      res_num("fp32_ms_median", bench_median(&twin->ms));
      res_num("speedup_vs_fp32", 1.0 / rel);
    } else {
      res_num("vs_dense", rel);
    }
    res_end();
  }
  if (probe.n)
    printf("  %3d %3d %5d %4d (FMA probe, same rounds: %.0f GFLOP/s)\n", hq,
           hq, n, d, bench_median(&probe));
  for (i = 0; i < ntv; i++) {
    double med = bench_median(&tv[i].ms),
           ours = bench_median(&var[tv[i].ours].ms);
    char label[32];

    if (tv[i].ms.n == 0)
      continue;
    snprintf(label, sizeof label, "torch %s %s", tv[i].impl, tv[i].variant);
    printf("  %3d %3d %5d %4d %-19s %9.2f [%.2f-%.2f] %8.1f  "
           "attnbias/torch %.2f\n",
           hq, hq, n, d, label, med, bench_min(&tv[i].ms),
           bench_max(&tv[i].ms),
           var[tv[i].ours].flops / (med * 1e-3) * 1e-9, ours / med);
    res_begin("torch_attention");
    res_str("openblas_core", peer_openblas_core());
    res_str("variant", tv[i].variant);
    res_str("impl", tv[i].impl);
    res_int("Hq", hq);
    res_int("Hkv", hq);
    res_int("N", n);
    res_int("d", d);
    res_num("ms_median", med);
    res_num("ratio", ours / med);
    res_end();
  }
  fflush(stdout);
  free(q);
  free(k);
  free(vv);
  free(out);
  free(t5);
  free(qh), free(kh), free(vh), free(qw), free(kw), free(vw);
}

/* Whether shape H x N x d is one --attn-shapes asks for (all when none). */
static int shape_wanted(int h, int n, int d)
{
  const char *p = g_opt.attn_shapes;
  int a, b, c, used;

  if (!p || !*p)
    return 1;
  while (sscanf(p, "%dx%dx%d%n", &a, &b, &c, &used) == 3) {
    if (a == h && b == n && c == d)
      return 1;
    p += used;
    if (*p != ',')
      break;
    p++;
  }
  return 0;
}

void bench_attention(struct bench_pool *pool)
{
  static const int full_h[] = {8, 32}, full_n[] = {512, 2048, 4096},
                   full_d[] = {128, 64};
  static const int quick_h[] = {8}, quick_n[] = {512}, quick_d[] = {128, 64};
  const int *hs = g_opt.quick ? quick_h : full_h,
            *ns = g_opt.quick ? quick_n : full_n,
            *ds = g_opt.quick ? quick_d : full_d;
  int nh = g_opt.quick ? 1 : 2, nn = g_opt.quick ? 1 : 3, nd = 2, a, b, c;

  bench_section("attention (fp32 and bf16, B=1, %d threads; ms = job build + "
                "run; useful GFLOP/s)",
                bench_pool_threads(pool));
  printf("  %%peak: of the best FMA probe so far (results.json: of the best "
         "of the run); %%round: of the FMA probe\n  run in the same rounds "
         "(tells how much of a low %%peak is the shared machine's doing)\n");
  printf("  bf16 rows: q, k, v bfloat16 (the same values rounded), /dense is "
         "their time over float32's in the same rounds\n");
  printf("   Hq Hkv     N    d variant             ms median [min-max]     "
         "GFLOP/s  %%peak %%round /dense build-ms check\n");
  if (!peer_alive())
    printf("  (no torch rows: the peer is not running)\n");
  for (a = 0; a < nh; a++)
    for (b = 0; b < nd; b++)
      for (c = 0; c < nn; c++)
        /* torch joins at H=8, d=128, its shapes in bench/README.md (its
         * N x N score matrices make H=32 needlessly slow). */
        if (shape_wanted(hs[a], ns[c], ds[b]))
          attn_shape(pool, hs[a], ns[c], ds[b],
                     peer_alive() && hs[a] == 8 && ds[b] == 128);
}

double bench_attention_once(struct bench_pool *pool, float *q, float *k,
                            float *v, float *out, int h, int n, int d)
{
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  int64_t shape[4] = {1, h, n, d};
  ab_job_t *job = NULL;
  double t0 = bench_now();
  enum ab_status st;

  if (ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, shape) ||
      ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, shape) ||
      ab_tensor_init(&tv, v, AB_DTYPE_F32, 4, shape))
    return -1;
  ab_attn_params_init(&p);
  p.q = &tq;
  p.k = &tk;
  p.v = &tv;
  p.out = out;
  st = ab_attention_job(&p, &job);
  if (st == AB_STATUS_OK) {
    st = bench_pool_job(pool, job);
    ab_job_free(job);
  }
  if (st != AB_STATUS_OK) {
    printf("  in-process attention failed: %s (%s)\n", ab_status_str(st),
           ab_last_error()->msg);
    return -1;
  }
  return bench_now() - t0;
}

/* ==== RoPE =============================================================== */

struct rope_var {
  const char *pairing, *scaling;
  struct ab_rope_params p;
  struct bench_samples ms;
  double err;
  int failed;
};

/* Rotate q and k in place, each by its own job over the pool. */
static int rope_run(struct bench_pool *pool, struct rope_var *v,
                    struct ab_tensor *x[2], const int64_t *pos, int n,
                    double *seconds)
{
  double t0 = bench_now();
  int which;

  for (which = 0; which < 2; which++) {
    ab_job_t *job = NULL;
    enum ab_status st = ab_rope_apply_job(&v->p, n, x[which], AB_LAYOUT_BHSD,
                                          pos, which, x[which]->data, &job);

    if (st == AB_STATUS_OK) {
      st = bench_pool_job(pool, job);
      ab_job_free(job);
    }
    if (st != AB_STATUS_OK) {
      if (!v->failed)
        printf("  rope %s/%s failed: %s: %s (%s)\n", v->pairing, v->scaling,
               ab_status_str(st), ab_last_error()->arg, ab_last_error()->msg);
      v->failed = 1;
      return -1;
    }
  }
  *seconds = bench_now() - t0;
  return 0;
}

/* Default-scaling rotation of one [d] row at position p, float64:
 * angle_k = p * theta^(-2k/d) (docs/methods.md), rotate-half pairs (k, k+d/2)
 * or interleaved pairs (2k, 2k+1).  Returns max |ref - got|. */
static double rope_ref_row(const float *before, const float *got, int d,
                           int64_t p, int interleaved)
{
  double err = 0;
  int kk;

  for (kk = 0; kk < d / 2; kk++) {
    double ang = (double)p * pow(10000.0, -2.0 * kk / d);
    int a = interleaved ? 2 * kk : kk;
    int b = interleaved ? 2 * kk + 1 : kk + d / 2;
    double x0 = before[a], x1 = before[b];

    err = fmax(err, fabs(x0 * cos(ang) - x1 * sin(ang) - got[a]));
    err = fmax(err, fabs(x1 * cos(ang) + x0 * sin(ang) - got[b]));
  }
  return err;
}

void bench_rope(struct bench_pool *pool)
{
  const int h = 32, d = 128, n = g_opt.quick ? 1024 : 4096;
  const size_t per = (size_t)h * n * d;
  float *q = bench_alloc(per * 4), *k = bench_alloc(per * 4);
  int64_t *pos = bench_alloc((size_t)n * sizeof *pos);
  int64_t shape[4] = {1, h, n, d};
  struct ab_tensor tq, tk, *x[2] = {&tq, &tk};
  struct rope_var var[4];
  struct bench_samples torch_ms[2] = {{0}, {0}}, probe = {0}, rwprobe = {0};
  struct stream_probe rw = {q, NULL, (int64_t)per, 0};
  int torch_failed[2] = {0, 0};
  /* Rows checked: (head, token) pairs of q, copied before the warm-up. */
  const int chk[3][2] = {{0, 1}, {h - 1, n - 1}, {h / 2, n / 2}};
  float before[3][128];
  double bytes = 2.0 * 2.0 * (double)per * 4.0, secs;
  int i, r, c, reps = g_opt.quick ? 3 : 10;

  bench_section("RoPE apply in place on q, k [1,%d,%d,%d] fp32 (GB/s = "
                "read + write of q and k; %% of triad)",
                h, n, d);
  bench_fill(q, per, 11, 1.0f);
  bench_fill(k, per, 12, 1.0f);
  for (i = 0; i < n; i++)
    pos[i] = i;
  if (ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, shape) ||
      ab_tensor_init(&tk, k, AB_DTYPE_F32, 4, shape)) {
    bench_skip("rope", "cannot describe q/k: %s", ab_last_error()->msg);
    goto out;
  }
  for (i = 0; i < 4; i++) {
    struct rope_var *v = &var[i];

    memset(v, 0, sizeof *v);
    v->pairing = i & 1 ? "interleaved" : "half";
    v->scaling = i & 2 ? "yarn" : "default";
    v->err = -1;
    ab_rope_params_init(&v->p);
    v->p.head_dim = d;
    v->p.rope_theta = 10000.0;
    v->p.interleaved = i & 1;
    if (i & 2) {
      /* A 4x YaRN extension of a model trained on n tokens. */
      v->p.rope_type = AB_ROPE_YARN;
      v->p.factor = 4.0;
      v->p.original_max_position_embeddings = n;
    }
  }
  printf("   %%rw: of an in-place read+write stream over q in the same rounds "
         "(RoPE's own traffic: no read-for-ownership)\n");
  printf("   pairing     scaling      N    ms median [min-max]     GB/s  "
         "%%triad %%round    %%rw  check\n");

  /* Warm-up and check: the default variants against rope_ref_row. */
  for (i = 0; i < 4; i++) {
    for (c = 0; c < 3; c++)
      memcpy(before[c], q + ((size_t)chk[c][0] * n + chk[c][1]) * d, d * 4);
    if (rope_run(pool, &var[i], x, pos, n, &secs) == 0 && !(i & 2)) {
      var[i].err = 0;
      for (c = 0; c < 3; c++)
        var[i].err = fmax(var[i].err,
                          rope_ref_row(before[c],
                                       q + ((size_t)chk[c][0] * n + chk[c][1]) *
                                               d,
                                       d, chk[c][1], i & 1));
    }
  }
  for (i = 0; i < 2 && peer_alive(); i++)
    if (peer_rope(i ? "interleaved" : "half", n) < 0)
      torch_failed[i] = 1;

  for (r = 0; r < reps; r++) {
    for (i = 0; i < 4; i++)
      if (!var[i].failed && rope_run(pool, &var[i], x, pos, n, &secs) == 0)
        bench_samples_add(&var[i].ms, secs * 1e3);
    for (i = 0; i < 2; i++) {
      double ms;

      if (torch_failed[i] || !peer_alive())
        continue;
      ms = peer_rope(i ? "interleaved" : "half", n);
      if (ms < 0)
        torch_failed[i] = 1;
      else
        bench_samples_add(&torch_ms[i], ms);
    }
    bench_samples_add(&probe, bench_probe_triad_once(pool, 0));
    bench_samples_add(&rwprobe, stream_once(pool, &rw));
  }
  for (i = 0; i < 4; i++) {
    struct rope_var *v = &var[i];
    double med = bench_median(&v->ms), gbs;

    if (v->ms.n == 0)
      continue;
    gbs = bytes / (med * 1e-3) * 1e-9;
    printf("   %-11s %-8s %6d %8.2f [%.2f-%.2f] %8.1f %6.1f%% %6.1f%% %6.1f%%",
           v->pairing, v->scaling, n, med, bench_min(&v->ms),
           bench_max(&v->ms), gbs,
           100.0 * gbs / bench_ceiling_now(BENCH_CEIL_TRIAD),
           100.0 * gbs / bench_median(&probe),
           100.0 * gbs / bench_median(&rwprobe));
    print_err_note(v->err, 1e-4);
    printf("\n");
    res_begin("rope");
    res_str("pairing", v->pairing);
    res_str("scaling", v->scaling);
    res_int("N", n);
    res_num("gbs", gbs);
    res_pct("pct_triad", gbs, BENCH_CEIL_TRIAD);
    res_num("pct_triad_round", 100.0 * gbs / bench_median(&probe));
    res_num("pct_rw_stream_round", 100.0 * gbs / bench_median(&rwprobe));
    res_end();
  }
  if (probe.n)
    printf("   (triad probe, same rounds: %.1f GB/s; read+write in place: "
           "%.1f GB/s)\n",
           bench_median(&probe), bench_median(&rwprobe));
  for (i = 0; i < 2; i++) {
    double med = bench_median(&torch_ms[i]), ours = bench_median(&var[i].ms);

    if (torch_ms[i].n == 0)
      continue;
    printf("   torch %-11s    %6d %8.2f [%.2f-%.2f] %8.1f          "
           "attnbias/torch %.3f\n",
           i ? "interleaved" : "half", n, med, bench_min(&torch_ms[i]),
           bench_max(&torch_ms[i]), bytes / (med * 1e-3) * 1e-9, ours / med);
    res_begin("torch_rope");
    res_str("openblas_core", peer_openblas_core());
    res_str("pairing", i ? "interleaved" : "half");
    res_str("scaling", "default");
    res_int("N", n);
    res_num("ms_median", med);
    res_num("gbs", bytes / (med * 1e-3) * 1e-9);
    res_num("ratio", ours / med);
    res_end();
  }
out:
  free(q);
  free(k);
  free(pos);
}

/* ==== bias tables ======================================================== */

/* The rest of a write-only kernel's row, after its GB/s: % of the NT-store
 * ceiling, of the NT triad and of the NT write-only stream timed in the
 * same rounds, and the check; the same percentages into the open results
 * entry. */
static void nt_columns(double gbs, const struct bench_samples *probe,
                       const struct bench_samples *wprobe, double err)
{
  printf(" %8.1f%% %6.1f%% %8.1f%%",
         100.0 * gbs / bench_ceiling_now(BENCH_CEIL_NT),
         100.0 * gbs / bench_median(probe), 100.0 * gbs / bench_median(wprobe));
  print_err_note(err, 1e-5);
  printf("\n");
  res_pct("pct_nt_store", gbs, BENCH_CEIL_NT);
  res_num("pct_nt_store_round", 100.0 * gbs / bench_median(probe));
  res_num("pct_nt_write_stream_round", 100.0 * gbs / bench_median(wprobe));
}

static void nt_probes_note(const struct bench_samples *probe,
                           const struct bench_samples *wprobe)
{
  if (probe->n)
    printf("   (NT-store triad probe, same rounds: %.1f GB/s; NT write-only: "
           "%.1f GB/s)\n",
           bench_median(probe), bench_median(wprobe));
}

void bench_bias(struct bench_pool *pool)
{
  const int h = g_opt.quick ? 8 : 32, n = g_opt.quick ? 1024 : 4096;
  const size_t cells = (size_t)h * n * n;
  float *out = bench_alloc(cells * 4), *tab = bench_alloc(T5_BUCKETS * 32 * 4);
  int64_t tshape[2] = {T5_BUCKETS, h};
  struct ab_tensor ttab;
  struct ab_bias_params bp[2];
  struct ab_geometry g;
  struct bench_samples ms[2] = {{0}, {0}}, probe = {0}, wprobe = {0};
  float *block = bench_alloc((size_t)STREAM_BLOCK * 4);
  struct stream_probe wr = {out, block, (int64_t)cells, 0};
  double err[2] = {-1, -1};
  int failed[2] = {0, 0}, i, r, s, reps = g_opt.quick ? 2 : 5;
  uint64_t st = 12345;

  bench_section("bias tables [%d,%d,%d] fp32 (GB/s written; %% of NT-store "
                "bandwidth)",
                h, n, n);
  bench_fill(tab, (size_t)T5_BUCKETS * h, 21, 0.5f);
  for (s = 0; s < STREAM_BLOCK; s++)
    block[s] = -1.0f - (float)(s & 255); /* nonzero, like a bias table */
  if (ab_tensor_init(&ttab, tab, AB_DTYPE_F32, 2, tshape)) {
    bench_skip("bias tables", "cannot describe the T5 table: %s",
               ab_last_error()->msg);
    goto out;
  }
  ab_geometry_init(&g, n, n);
  for (i = 0; i < 2; i++) {
    ab_bias_params_init(&bp[i]);
    bp[i].num_heads = h;
  }
  bp[0].method = AB_BIAS_ALIBI;
  bp[0].max_bias = 8.0;
  bp[1].method = AB_BIAS_T5;
  bp[1].table = &ttab;
  bp[1].bidirectional = 1;
  bp[1].max_distance = T5_MAXDIST;
  printf("   %%NT-write: of a non-temporal write-only stream over the same "
         "output in the same rounds\n");
  printf("   method      ms median [min-max]      GB/s  %%NT-store %%round "
         "%%NT-write  check\n");

  for (r = -1; r < reps; r++) { /* r = -1: warm-up (faults the 2 GiB) */
    if (r >= 0) {
      bench_samples_add(&probe, bench_probe_triad_once(pool, 1));
      bench_samples_add(&wprobe, stream_once(pool, &wr));
    }
    for (i = 0; i < 2; i++) {
      ab_job_t *job = NULL;
      enum ab_status stt;
      double t0;

      if (failed[i])
        continue;
      t0 = bench_now();
      stt = ab_bias_table_job(&bp[i], &g, out, NULL, &job);
      if (stt == AB_STATUS_OK) {
        stt = bench_pool_job(pool, job);
        ab_job_free(job);
      }
      if (stt != AB_STATUS_OK) {
        printf("  bias %s failed: %s: %s (%s)\n", i ? "t5" : "alibi",
               ab_status_str(stt), ab_last_error()->arg, ab_last_error()->msg);
        failed[i] = 1;
        continue;
      }
      if (r >= 0) {
        bench_samples_add(&ms[i], (bench_now() - t0) * 1e3);
        continue;
      }
      /* Check 256 random cells against the formulas (ALiBi: -m_h |i-j|,
       * docs/methods.md#alibi; T5: the table row of the bucket). */
      err[i] = 0;
      for (s = 0; s < 256; s++) {
        int hh, qi, kj;
        double want, got;

        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        hh = (int)(st % (uint64_t)h);
        qi = (int)((st >> 16) % (uint64_t)n);
        kj = (int)((st >> 36) % (uint64_t)n);
        got = out[((size_t)hh * n + qi) * n + kj];
        if (i == 0)
          want = -ref_alibi_slope(hh, h) * fabs((double)(qi - kj));
        else
          want = tab[(size_t)ab_t5_bucket(kj - qi, T5_BUCKETS, 1, T5_MAXDIST) *
                         h +
                     hh];
        err[i] = fmax(err[i], fabs(want - got) / fmax(1.0, fabs(want)));
      }
    }
  }
  for (i = 0; i < 2; i++) {
    double med = bench_median(&ms[i]), gbs;

    if (ms[i].n == 0)
      continue;
    gbs = (double)cells * 4.0 / (med * 1e-3) * 1e-9;
    printf("   %-8s %8.2f [%.2f-%.2f] %9.1f", i ? "t5" : "alibi", med,
           bench_min(&ms[i]), bench_max(&ms[i]), gbs);
    res_begin("bias_table");
    res_str("method", i ? "t5" : "alibi");
    res_num("gbs", gbs);
    nt_columns(gbs, &probe, &wprobe, err[i]);
    res_end();
  }
  nt_probes_note(&probe, &wprobe);
out:
  free(out);
  free(tab);
  free(block);
}

/* ==== absolute encodings ================================================= */

struct enc_var {
  const char *method, *layout;
  struct ab_encoding_params p;
  int with_x; /* out = x + PE: reads x as well */
  struct bench_samples ms;
  double err;
  int failed;
};

/* Sinusoidal PE(t, c) in float64 (docs/methods.md): pair k has frequency
 * base^(-2k/d); interleaved puts its sine at 2k and cosine at 2k+1, concat
 * at k and d/2 + k. */
static double enc_ref(int64_t t, int64_t c, int64_t d, int concat)
{
  int64_t k = concat ? c % (d / 2) : c / 2;
  int cosine = concat ? c >= d / 2 : c & 1;
  double a = (double)t * pow(10000.0, -2.0 * (double)k / (double)d);

  return cosine ? cos(a) : sin(a);
}

void bench_encoding(struct bench_pool *pool)
{
  const int64_t n = g_opt.quick ? 4096 : 32768, d = 2048;
  const size_t cells = (size_t)n * (size_t)d;
  float *out = bench_alloc(cells * 4), *x = bench_alloc(cells * 4);
  float *table = bench_alloc(cells * 4);
  double *pos = bench_alloc((size_t)n * sizeof *pos);
  float *block = bench_alloc((size_t)STREAM_BLOCK * 4);
  int64_t shape[2] = {n, d}, xshape[3] = {1, n, d};
  struct ab_tensor ttab, tx;
  struct enc_var var[4];
  struct bench_samples probe = {0}, wprobe = {0};
  struct stream_probe wr = {out, block, (int64_t)cells, 0};
  int i, r, s, reps = g_opt.quick ? 2 : 7;
  uint64_t st = 777;

  bench_section("absolute encodings [%lld, %lld] fp32 (GB/s moved; %% of "
                "NT-store bandwidth)",
                (long long)n, (long long)d);
  bench_fill(table, cells, 31, 1.0f);
  bench_fill(x, cells, 32, 1.0f);
  for (s = 0; s < STREAM_BLOCK; s++)
    block[s] = -1.0f - (float)(s & 255);
  for (i = 0; i < n; i++)
    pos[i] = (double)i;
  if (ab_tensor_init(&ttab, table, AB_DTYPE_F32, 2, shape) ||
      ab_tensor_init(&tx, x, AB_DTYPE_F32, 3, xshape)) {
    bench_skip("encodings", "cannot describe the inputs: %s",
               ab_last_error()->msg);
    goto out;
  }
  for (i = 0; i < 4; i++) {
    struct enc_var *v = &var[i];

    memset(v, 0, sizeof *v);
    v->err = -1;
    ab_encoding_params_init(&v->p);
    v->p.dim = d;
    v->method = "sinusoidal";
    v->layout = "interleaved";
  }
  var[1].p.layout = AB_SIN_CONCAT;
  var[1].layout = "concat";
  var[2].with_x = 1;
  var[2].layout = "interleaved+x";
  var[3].p.method = AB_ENC_LEARNED;
  var[3].p.table = &ttab;
  var[3].method = "learned";
  var[3].layout = "-";
  printf("   GB/s: bytes written (x + PE: bytes of x read and of the output "
         "written); %%NT-write: of a\n   non-temporal write-only stream over "
         "the same output in the same rounds\n");
  printf("   method     layout            ms median [min-max]     GB/s  "
         "%%NT-store %%round %%NT-write  check\n");

  for (r = -1; r < reps; r++) { /* r = -1: warm-up and check */
    if (r >= 0) {
      bench_samples_add(&probe, bench_probe_triad_once(pool, 1));
      bench_samples_add(&wprobe, stream_once(pool, &wr));
    }
    for (i = 0; i < 4; i++) {
      struct enc_var *v = &var[i];
      ab_job_t *job = NULL;
      enum ab_status est;
      double t0;

      if (v->failed)
        continue;
      t0 = bench_now();
      est = ab_encoding_job(&v->p, pos, n, v->with_x ? &tx : NULL, out, &job);
      if (est == AB_STATUS_OK) {
        est = bench_pool_job(pool, job);
        ab_job_free(job);
      }
      if (est != AB_STATUS_OK) {
        printf("  encoding %s/%s failed: %s: %s (%s)\n", v->method, v->layout,
               ab_status_str(est), ab_last_error()->arg, ab_last_error()->msg);
        v->failed = 1;
        continue;
      }
      if (r >= 0) {
        bench_samples_add(&v->ms, (bench_now() - t0) * 1e3);
        continue;
      }
      /* 256 random cells against float64 (relative to max(1, |want|)). */
      v->err = 0;
      for (s = 0; s < 256; s++) {
        int64_t t, c;
        size_t at;
        double want;

        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        t = (int64_t)(st % (uint64_t)n);
        c = (int64_t)((st >> 32) % (uint64_t)d);
        at = (size_t)t * (size_t)d + (size_t)c;
        want = v->p.method == AB_ENC_LEARNED
                   ? table[at]
                   : enc_ref(t, c, d, v->p.layout == AB_SIN_CONCAT) +
                         (v->with_x ? x[at] : 0.0);
        v->err = fmax(v->err, fabs(want - out[at]) / fmax(1.0, fabs(want)));
      }
    }
  }
  for (i = 0; i < 4; i++) {
    struct enc_var *v = &var[i];
    double med = bench_median(&v->ms), gbs;

    if (v->ms.n == 0)
      continue;
    gbs = (double)cells * (v->with_x ? 8.0 : 4.0) / (med * 1e-3) * 1e-9;
    printf("   %-10s %-14s %8.2f [%.2f-%.2f] %8.1f", v->method, v->layout,
           med, bench_min(&v->ms), bench_max(&v->ms), gbs);
    res_begin("encoding");
    res_str("method", v->method);
    res_str("layout", v->layout);
    res_int("N", (int)n);
    res_int("dim", (int)d);
    res_num("ms_median", med);
    res_num("gbs", gbs);
    nt_columns(gbs, &probe, &wprobe, v->err);
    res_end();
  }
  nt_probes_note(&probe, &wprobe);
out:
  free(out);
  free(x);
  free(table);
  free(pos);
  free(block);
}
