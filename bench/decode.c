/* decode.c: attention at decoding shapes -- a few new query rows per head
 * (Nq = 1, 4, 16, causal, bottom-right) against a long key/value cache
 * (Nk = 4096, 32768), GQA Hq = 32, Hkv = 8, d = 128, k and v float32 and
 * bfloat16 -- the shape every inference engine lives on, and a memory-bound
 * one: K and V are read once per step.  Reported as GB/s of K and V read
 * and as % of the triad probe run in the same rounds.  Every timed run
 * starts with K and V out of the caches (an eviction stream runs before
 * it), as a cache that many layers share would be. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEC_HQ 32
#define DEC_HKV 8
#define DEC_D 128
#define EVICT_BYTES ((size_t)96 << 20) /* several times any L3 seen here */

struct dec_var {
  int nq, bf16;
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  struct bench_samples ms;
  /* per round: % of that round's triad and read probes, and (bf16) time
   * over the fp32 twin's of the same round */
  struct bench_samples pct_triad, pct_read, vs_fp32;
  /* per round: % of the FMA ceiling the arithmetic would need to run at
   * 70 % of that round's triad */
  struct bench_samples need_fma;
  double bytes, flops, err; /* K and V read, useful flops, check */
  int failed;
};

/* Useful flops of a decoding step: q.k and p.v, 2 flops per product, for
 * every query row over the keys it sees (causal, bottom-right: row r of
 * Nq sees Nk - Nq + r + 1 keys). */
static double dec_flops(int nq, int nk)
{
  double keys = 0.0;
  int r;

  for (r = 0; r < nq; r++)
    keys += nk - nq + r + 1;
  return 4.0 * DEC_HQ * DEC_D * keys;
}

/* Reads every line of the eviction buffer: K and V of the last run leave
 * the caches. */
static void evict(const float *buf)
{
  static volatile float sink; /* keeps the reads */
  float acc = 0.0f;
  size_t i;

  for (i = 0; i < EVICT_BYTES / 4; i += 16)
    acc += buf[i];
  sink = acc;
  (void)sink;
}

/* Output row (h, r) against float64, keys 0 .. Nk - Nq + r (causal,
 * bottom-right); k and v as the floats they hold (bf16 widened). */
static double dec_ref_row(const struct dec_var *v, const float *q,
                          const float *kf, const float *vf, const float *out,
                          int nk, int h, int r, double *s)
{
  const int nq = v->nq, kvh = h / (DEC_HQ / DEC_HKV), last = nk - nq + r;
  const size_t head = (size_t)kvh * nk * DEC_D;

  return bench_attn_row_err(q + ((size_t)h * nq + r) * DEC_D, kf + head,
                            vf + head, last + 1, DEC_D,
                            out + ((size_t)h * nq + r) * DEC_D, s);
}

/* ---- a read-only stream over K and V ------------------------------------
 * Decoding only reads: besides the triad (two reads and a write), each
 * round times the bare read of the same float32 K and V, evicted first, with
 * the triad probe's vector width -- the ceiling of a kernel that only loads. */
struct read_probe {
  const float *buf[2];
  int64_t n; /* floats of each buffer */
  int nthreads;
  float sum[64];
};

static float read_run(const float *a, int64_t n)
{
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f"))
    return bench_read_avx512(a, n);
  if (__builtin_cpu_supports("avx2"))
    return bench_read_avx2(a, n);
#endif
  {
    float s = 0.0f;
    int64_t i;
    for (i = 0; i < n; i++)
      s += a[i];
    return s;
  }
}

static void read_thread(void *vctx, int64_t piece, int tid, void *scratch)
{
  struct read_probe *rp = vctx;
  /* whole 64-byte lines per thread; the last takes the remainder */
  int64_t per = (rp->n / rp->nthreads) & ~(int64_t)15;
  int64_t lo = per * tid, hi = tid == rp->nthreads - 1 ? rp->n : lo + per;
  int b;

  (void)piece;
  (void)scratch;
  for (b = 0; b < 2; b++)
    rp->sum[tid % 64] += read_run(rp->buf[b] + lo, hi - lo);
}

/* GB/s of one read of both buffers over all pool threads. */
static double read_once(struct bench_pool *pool, struct read_probe *rp)
{
  double t0 = bench_now();

  rp->nthreads = bench_pool_threads(pool);
  bench_pool_each(pool, read_thread, rp);
  return 2.0 * (double)rp->n * 4.0 / (bench_now() - t0) * 1e-9;
}

static int dec_run(struct bench_pool *pool, struct dec_var *v, double *sec)
{
  ab_job_t *job = NULL;
  double t0 = bench_now();
  enum ab_status st = ab_attention_job(&v->p, &job);

  if (st == AB_STATUS_OK) {
    st = bench_pool_job(pool, job);
    ab_job_free(job);
  }
  *sec = bench_now() - t0;
  if (st != AB_STATUS_OK) {
    if (!v->failed)
      printf("  decode Nq %d %s failed: %s (%s)\n", v->nq,
             v->bf16 ? "bf16" : "fp32", ab_status_str(st),
             ab_last_error()->msg);
    v->failed = 1;
    return -1;
  }
  return 0;
}

/* ---- what limits Nq = 1: arithmetic and stream, one thread ---------------
 * The same Nq = 1 job run piece by piece on the calling thread, twice: with
 * k and v of one kv head small enough to stay in L2 (DEC_CACHE_NK keys,
 * run again and again: the arithmetic alone), and with the longest cache
 * of the section from memory (evicted first), on the section's buffers;
 * beside them a bare read of the same K and V.  Time per key and kv head;
 * when from memory is about in L2 plus the bare read, the loads are not
 * overlapped with the arithmetic. */
#define DEC_CACHE_NK 512

/* ns per key and kv head of job(q, k, v) on this thread: reps runs, the
 * best; with evbuf, each run starts with K and V evicted. */
static double dec_one_thread(int nk, int hkv, int bf16, float *q, void *k,
                             void *v, float *out,
                             int reps, const float *evbuf)
{
  int64_t qs[4] = {1, hkv * (DEC_HQ / DEC_HKV), 1, DEC_D};
  int64_t ks[4] = {1, hkv, nk, DEC_D};
  struct ab_tensor tq, tk, tv;
  struct ab_attn_params p;
  ab_job_t *job = NULL;
  double best = INFINITY;
  void *scratch;
  int64_t piece;
  int r;

  if (ab_tensor_init(&tq, q, AB_DTYPE_F32, 4, qs) ||
      ab_tensor_init(&tk, k, bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, ks) ||
      ab_tensor_init(&tv, v, bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, ks))
    return NAN;
  ab_attn_params_init(&p);
  p.q = &tq, p.k = &tk, p.v = &tv;
  p.causal = 1;
  p.out = out;
  p.threads = 1;
  if (ab_attention_job(&p, &job) != AB_STATUS_OK)
    return NAN;
  scratch = bench_alloc(ab_job_scratch_size(job) + 64);
  for (r = 0; r < reps; r++) {
    double t0;
    if (evbuf)
      evict(evbuf);
    t0 = bench_now();
    for (piece = 0; piece < ab_job_pieces(job); piece++)
      if (ab_job_run(job, piece, scratch) != AB_STATUS_OK) {
        best = NAN;
        break;
      }
    best = fmin(best, bench_now() - t0);
  }
  free(scratch);
  ab_job_free(job);
  return best * 1e9 / ((double)nk * hkv);
}

/* ns per key and kv head of a bare read of the same K and V (bytes each)
 * on this thread, evicted first: the stream time of those bytes alone. */
static double dec_read_one_thread(const void *k, const void *v, size_t bytes,
                                  int nk, int reps, const float *evbuf)
{
  static volatile float sink;
  double best = INFINITY;
  int r;

  for (r = 0; r < reps; r++) {
    double t0;
    evict(evbuf);
    t0 = bench_now();
    sink = read_run(k, (int64_t)(bytes / 4)) +
           read_run(v, (int64_t)(bytes / 4));
    best = fmin(best, bench_now() - t0);
  }
  (void)sink;
  return best * 1e9 / ((double)nk * DEC_HKV);
}

static void dec_limits(int nk, float *q, float *out, float *kf, float *vf,
                       uint16_t *kh, uint16_t *vh, const float *evbuf)
{
  int bf16, reps = g_opt.quick ? 2 : 5;

  printf("   what limits Nq=1 (one thread, ns per key and kv head; 4 query "
         "rows per kv head):\n");
  for (bf16 = 0; bf16 < 2; bf16++) {
    void *k = bf16 ? (void *)kh : kf, *v = bf16 ? (void *)vh : vf;
    const double bytes = 2.0 * DEC_D * (bf16 ? 2 : 4); /* per key */
    /* the first kv head's DEC_CACHE_NK keys, again and again */
    double cache = dec_one_thread(DEC_CACHE_NK, 1, bf16, q, k, v, out,
                                  reps * 200, NULL);
    double mem = dec_one_thread(nk, DEC_HKV, bf16, q, k, v, out, reps, evbuf);
    double rd = dec_read_one_thread(
        k, v, (size_t)DEC_HKV * nk * DEC_D * (bf16 ? 2 : 4), nk, reps, evbuf);
    printf("   %-5s in L2 %5.1f ns   bare read of K, V %5.1f ns (%4.1f GB/s)   "
           "from memory %5.1f ns (%4.1f GB/s; in L2 + read %5.1f)\n",
           bf16 ? "bf16" : "fp32", cache, rd, bytes / rd, mem, bytes / mem,
           cache + rd);
    res_begin("attention_decode_limits");
    res_str("dtype", bf16 ? "bf16" : "fp32");
    res_int("Nq", 1);
    res_int("Nk", nk);
    res_int("Hq_per_Hkv", DEC_HQ / DEC_HKV);
    res_int("d", DEC_D);
    res_num("ns_per_key_in_l2", cache);
    res_num("ns_per_key_from_memory", mem);
    res_num("ns_per_key_read_alone", rd);
    res_end();
  }
  printf("   When from-memory is about in-L2 plus the bare read of the same "
         "bytes, the arithmetic and the\n   loads take turns instead of "
         "overlapping: the kernel, not the memory, is then the limit.\n");
}

/* The rows of one Nk; with `limits`, then what limits Nq = 1 on the same
 * buffers. */
static void dec_shape(struct bench_pool *pool, int nk, const int *nqs,
                      int nnq, const float *evbuf, int limits)
{
  const size_t nkv = (size_t)DEC_HKV * nk * DEC_D;
  const int maxq = nqs[nnq - 1];
  float *q = bench_alloc((size_t)DEC_HQ * maxq * DEC_D * 4);
  float *out = bench_alloc((size_t)DEC_HQ * maxq * DEC_D * 4);
  float *kf = bench_alloc(nkv * 4), *vf = bench_alloc(nkv * 4);
  uint16_t *kh = bench_alloc(nkv * 2), *vh = bench_alloc(nkv * 2);
  double *s = bench_alloc((size_t)nk * sizeof *s);
  struct dec_var var[8];
  struct bench_samples probe = {0}, rprobe = {0};
  struct read_probe rp;
  int nvar = 2 * nnq, i, r, reps = g_opt.quick ? 2 : 7;
  double secs;
  size_t x;

  bench_fill(q, (size_t)DEC_HQ * maxq * DEC_D, 41, 1.0f);
  bench_fill(kf, nkv, 42, 1.0f);
  bench_fill(vf, nkv, 43, 1.0f);
  for (x = 0; x < nkv; x++) {
    kh[x] = ab_f32_to_bf16(kf[x]);
    vh[x] = ab_f32_to_bf16(vf[x]);
  }
  memset(var, 0, sizeof var);
  memset(&rp, 0, sizeof rp);
  rp.buf[0] = kf, rp.buf[1] = vf, rp.n = (int64_t)nkv;
  for (i = 0; i < nvar; i++) {
    struct dec_var *v = &var[i];
    int64_t qs[4] = {1, DEC_HQ, 0, DEC_D}, ks[4] = {1, DEC_HKV, nk, DEC_D};

    v->nq = nqs[i / 2];
    v->bf16 = i % 2;
    v->err = -1;
    v->bytes = 2.0 * (double)nkv * (v->bf16 ? 2 : 4);
    v->flops = dec_flops(v->nq, nk);
    qs[2] = v->nq;
    if (ab_tensor_init(&v->tq, q, AB_DTYPE_F32, 4, qs) ||
        ab_tensor_init(&v->tk, v->bf16 ? (void *)kh : kf,
                       v->bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, ks) ||
        ab_tensor_init(&v->tv, v->bf16 ? (void *)vh : vf,
                       v->bf16 ? AB_DTYPE_BF16 : AB_DTYPE_F32, 4, ks)) {
      printf("  cannot describe the tensors: %s\n", ab_last_error()->msg);
      v->failed = 1;
    }
    ab_attn_params_init(&v->p);
    v->p.q = &v->tq, v->p.k = &v->tk, v->p.v = &v->tv;
    v->p.causal = 1;
    v->p.out = out;
    v->p.threads = bench_pool_threads(pool); /* as attnbiasd does */
  }

  /* Warm-up and check (bf16: against the widened values). */
  for (i = 0; i < nvar; i++) {
    struct dec_var *v = &var[i];
    if (v->failed || dec_run(pool, v, &secs) != 0)
      continue;
    if (v->bf16)
      for (x = 0; x < nkv; x++) {
        kf[x] = ab_bf16_to_f32(kh[x]);
        vf[x] = ab_bf16_to_f32(vh[x]);
      }
    v->err = fmax(dec_ref_row(v, q, kf, vf, out, nk, 0, 0, s),
                  dec_ref_row(v, q, kf, vf, out, nk, DEC_HQ - 1, v->nq - 1,
                              s));
    if (v->bf16) { /* float32 k, v as before for the next variant */
      bench_fill(kf, nkv, 42, 1.0f);
      bench_fill(vf, nkv, 43, 1.0f);
    }
  }
  /* Each round's kernels are compared with that round's probes (adjacent
   * runs): the medians of those ratios, not ratios of medians, which
   * could pair a fast round with a slow one on this shared host. */
  for (r = 0; r < reps; r++) {
    double t[8], tri, rd;
    for (i = 0; i < nvar; i++) {
      t[i] = NAN;
      if (var[i].failed)
        continue;
      evict(evbuf);
      if (dec_run(pool, &var[i], &secs) == 0) {
        bench_samples_add(&var[i].ms, secs * 1e3);
        t[i] = secs;
      }
    }
    tri = bench_probe_triad_once(pool, 0);
    bench_samples_add(&probe, tri);
    evict(evbuf);
    rd = read_once(pool, &rp);
    bench_samples_add(&rprobe, rd);
    for (i = 0; i < nvar; i++) {
      double gbs = var[i].bytes / t[i] * 1e-9;
      if (isnan(t[i]))
        continue;
      bench_samples_add(&var[i].pct_triad, 100.0 * gbs / tri);
      /* at 70 % of the triad the step takes bytes / (0.7 tri) seconds */
      bench_samples_add(&var[i].need_fma,
                        100.0 * var[i].flops * 0.7 * tri / var[i].bytes /
                            bench_ceiling_now(BENCH_CEIL_FMA));
      bench_samples_add(&var[i].pct_read, 100.0 * gbs / rd);
      if (var[i].bf16 && !isnan(t[i - 1]))
        bench_samples_add(&var[i].vs_fp32, t[i] / t[i - 1]);
    }
  }
  for (i = 0; i < nvar; i++) {
    struct dec_var *v = &var[i];
    double med = bench_median(&v->ms), gbs, fma;
    double rel = bench_median(&v->vs_fp32);

    if (v->ms.n == 0)
      continue;
    gbs = v->bytes / (med * 1e-3) * 1e-9;
    fma = 100.0 * v->flops / (med * 1e-3) * 1e-9 /
          bench_ceiling_now(BENCH_CEIL_FMA);
    printf("   %-5s %3d %6d %8.2f [%.2f-%.2f] %7.1f %6.1f%% %6.1f%% %6.1f%% "
           "%5.0f%% %5.0f%%",
           v->bf16 ? "bf16" : "fp32", v->nq, nk, med, bench_min(&v->ms),
           bench_max(&v->ms), gbs,
           100.0 * gbs / bench_ceiling_now(BENCH_CEIL_TRIAD),
           bench_median(&v->pct_triad), bench_median(&v->pct_read), fma,
           bench_median(&v->need_fma));
    if (v->bf16 && v->vs_fp32.n)
      printf("  %5.2f", rel);
    else
      printf("      -");
    if (v->err < 0)
      printf("  -\n");
    else
      printf("  %s %.0e\n", v->err <= 2e-3 ? "ok" : "WRONG", v->err);
    res_begin("attention_decode");
    res_str("dtype", v->bf16 ? "bf16" : "fp32");
    res_int("Nq", v->nq);
    res_int("Nk", nk);
    res_int("Hq", DEC_HQ);
    res_int("Hkv", DEC_HKV);
    res_int("d", DEC_D);
    res_num("ms_median", med);
    res_num("gbs", gbs);
    res_num("pct_triad_round", bench_median(&v->pct_triad));
    res_num("pct_read_round", bench_median(&v->pct_read));
    res_num("pct_fma", fma);
    res_num("pct_fma_at_70_triad", bench_median(&v->need_fma));
    res_end();
  }
  if (probe.n)
    printf("   (triad probe, same rounds: %.1f GB/s; read-only stream of K and "
           "V: %.1f GB/s)\n",
           bench_median(&probe), bench_median(&rprobe));
  if (limits)
    dec_limits(nk, q, out, kf, vf, kh, vh, evbuf);
  free(q), free(out), free(kf), free(vf), free(kh), free(vh), free(s);
}

void bench_decode(struct bench_pool *pool)
{
  static const int full_nk[] = {4096, 32768}, full_nq[] = {1, 4, 16};
  static const int quick_nk[] = {4096}, quick_nq[] = {1, 4};
  const int *nks = g_opt.quick ? quick_nk : full_nk;
  const int *nqs = g_opt.quick ? quick_nq : full_nq;
  int nnk = g_opt.quick ? 1 : 2, nnq = g_opt.quick ? 2 : 3, a;
  float *evbuf = bench_alloc(EVICT_BYTES);

  bench_section("attention decoding: Nq new rows, causal, against Nk keys "
                "(Hq %d, Hkv %d, d %d; GB/s of K and V read, %% of triad)",
                DEC_HQ, DEC_HKV, DEC_D);
  printf("   K and V start out of the caches every run; bf16/fp32: time "
         "ratio, same rounds\n");
  printf("   %%read: of a bare read of the same K and V (float32, evicted "
         "first) in the same rounds\n");
  printf("   %%FMA: useful GFLOP/s over the FMA ceiling; @70%%: the %%FMA "
         "that 70 %% of the same round's triad\n   would take (over 100 %%: "
         "the arithmetic, not memory, is the limit)\n");
  printf("   dtype  Nq     Nk    ms median [min-max]    GB/s  %%triad "
         "%%round  %%read   %%FMA   @70%% bf16/fp32 check\n");
  bench_fill(evbuf, EVICT_BYTES / 4, 44, 1.0f);
  for (a = 0; a < nnk; a++)
    dec_shape(pool, nks[a], nqs, nnq, evbuf, a == nnk - 1);
  free(evbuf);
}
