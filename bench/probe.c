/* probe.c: the roofline probes, measured in the same run and with the same
 * thread count as the kernels they judge -- FP32 FMA peak, triad bandwidth
 * and triad bandwidth with non-temporal stores.  Picks the widest vector
 * ISA the CPU has (cpuid via __builtin_cpu_supports); the ISA files are the
 * only ones built with ISA flags. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* PROBE_BF16 only as an FMA-probe kind: vdpbf16ps instead of FMAs. */
enum probe_isa { PROBE_SCALAR, PROBE_AVX2, PROBE_AVX512, PROBE_BF16 };

static enum probe_isa probe_isa(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return PROBE_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return PROBE_AVX2;
#endif
  return PROBE_SCALAR;
}

/* Scalar stand-ins, so the program still reports something (if only a
 * scalar ceiling) on a CPU without AVX2. */
static double fma_scalar(int64_t iters)
{
  float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  volatile float keep;
  int64_t i;
  int a;

  for (i = 0; i < iters; i++)
    for (a = 0; a < 8; a++)
      acc[a] = fmaf(acc[a], 0.999999f, 1e-7f);
  keep = acc[0] + acc[7];
  (void)keep;
  return (double)iters * 8 * 2;
}

static void triad_scalar(float *a, const float *b, const float *c, float s,
                         int64_t n, int nt)
{
  int64_t i;

  (void)nt;
  for (i = 0; i < n; i++)
    a[i] = b[i] + s * c[i];
}

struct probe_ctx {
  enum probe_isa isa, fma_isa;
  int64_t iters;       /* FMA loop trip count per thread */
  int64_t round_iters; /* the same for an in-round repetition (~25 ms) */
  double flops[256];   /* per thread, FMA */
  float *a, *b, *c;    /* triad arrays */
  int64_t n;           /* elements per array */
  int nthreads, nt, passes;
};

/* Lives from bench_probes to bench_probes_done: the in-round repetitions
 * reuse its calibration and its triad arrays. */
static struct probe_ctx *g_pc;
static double g_best_fma, g_best_triad, g_best_nt;

static double run_fma(enum probe_isa isa, int64_t iters)
{
  switch (isa) {
  case PROBE_AVX512: return bench_fma_avx512(iters);
  case PROBE_BF16: return bench_bf16_dot_avx512(iters);
  case PROBE_AVX2: return bench_fma_avx2(iters);
  default: return fma_scalar(iters);
  }
}

static void fma_thread(void *vctx, int64_t piece, int tid, void *scratch)
{
  struct probe_ctx *pc = vctx;

  (void)piece;
  (void)scratch;
  pc->flops[tid & 255] = run_fma(pc->fma_isa, pc->iters);
}

/* Thread tid's chunk: whole 64-byte lines, the last thread takes the
 * remainder, so every chunk start is 64-byte aligned for streaming. */
static void chunk(const struct probe_ctx *pc, int tid, int64_t *lo,
                  int64_t *hi)
{
  int64_t per = (pc->n / pc->nthreads) & ~(int64_t)15;

  *lo = per * tid;
  *hi = tid == pc->nthreads - 1 ? pc->n : *lo + per;
}

static void init_thread(void *vctx, int64_t piece, int tid, void *scratch)
{
  struct probe_ctx *pc = vctx;
  int64_t lo, hi, i;

  (void)piece;
  (void)scratch;
  chunk(pc, tid, &lo, &hi);
  /* First touch by the thread that will stream the chunk. */
  for (i = lo; i < hi; i++) {
    pc->a[i] = 0.0f;
    pc->b[i] = 1.0f;
    pc->c[i] = 2.0f;
  }
}

static void triad_thread(void *vctx, int64_t piece, int tid, void *scratch)
{
  struct probe_ctx *pc = vctx;
  int64_t lo, hi;
  int pass;

  (void)piece;
  (void)scratch;
  chunk(pc, tid, &lo, &hi);
  for (pass = 0; pass < pc->passes; pass++) {
    switch (pc->isa) {
    case PROBE_AVX512:
      bench_triad_avx512(pc->a + lo, pc->b + lo, pc->c + lo, 3.0f, hi - lo,
                         pc->nt);
      break;
    case PROBE_AVX2:
      bench_triad_avx2(pc->a + lo, pc->b + lo, pc->c + lo, 3.0f, hi - lo,
                       pc->nt);
      break;
    default:
      triad_scalar(pc->a + lo, pc->b + lo, pc->c + lo, 3.0f, hi - lo, pc->nt);
    }
  }
}

/* One FMA repetition on all pool threads at once: GFLOP/s. */
static double fma_rep(struct bench_pool *pool, struct probe_ctx *pc)
{
  int nth = bench_pool_threads(pool), t;
  double t0 = bench_now(), dt, total = 0;

  bench_pool_each(pool, fma_thread, pc);
  dt = bench_now() - t0;
  for (t = 0; t < nth && t < 256; t++)
    total += pc->flops[t];
  return total / dt * 1e-9;
}

/* One triad repetition (pc->passes passes): GB/s with STREAM counting, 12
 * bytes per element (read b, c; write a); the read-for-ownership of a under
 * normal stores is not counted. */
static double triad_rep(struct bench_pool *pool, struct probe_ctx *pc, int nt)
{
  double t0 = bench_now(), dt;

  pc->nt = nt;
  bench_pool_each(pool, triad_thread, pc);
  dt = bench_now() - t0;
  return (double)pc->passes * 12.0 * (double)pc->n / dt * 1e-9;
}

/* FMA throughput: calibrated on one thread, one warm-up (clocks ramp,
 * threads wake). */
static void measure_fma(struct bench_pool *pool, struct probe_ctx *pc,
                        enum probe_isa isa, int reps, struct bench_samples *s)
{
  double t0, dt;
  int r;

  pc->fma_isa = isa;
  pc->iters = 1000000;
  t0 = bench_now();
  run_fma(isa, pc->iters);
  dt = bench_now() - t0;
  /* Short repetitions (50 ms) and many of them: on a shared host the best
   * one is more likely to have found both cores free. */
  pc->iters = (int64_t)((double)pc->iters * (g_opt.quick ? 0.025 : 0.05) /
                        (dt > 1e-6 ? dt : 1e-6));
  if (pc->iters < 1000)
    pc->iters = 1000;
  for (r = 0; r < reps + 1; r++) {
    double v = fma_rep(pool, pc);

    if (r > 0)
      bench_samples_add(s, v);
  }
}

static void print_probe(const char *what, const struct bench_samples *s,
                        const char *unit, const char *ref)
{
  printf("  %-20s %8.1f %-7s (median %.1f, min %.1f; %d reps)  %s\n", what,
         bench_max(s), unit, bench_median(s), bench_min(s), s->n, ref);
}

void bench_probes(struct bench_pool *pool, struct bench_machine *m)
{
  static const char *names[] = {"scalar", "avx2", "avx512"};
  struct probe_ctx *pc = calloc(1, sizeof *pc);
  struct bench_samples fma = {0}, fma256 = {0}, bf16 = {0}, bf16_ratio = {0},
                       triad = {0}, nt = {0};
  int nth = bench_pool_threads(pool), reps = g_opt.quick ? 5 : 15, r;
  int64_t main_iters;

  if (!pc) {
    fprintf(stderr, "bench: out of memory\n");
    exit(2);
  }
  pc->isa = probe_isa();
  pc->nthreads = nth;
  m->probe_isa = names[pc->isa];
  m->threads = nth;

  /* A CPU with AVX-512 may run 512-bit FMAs at the 256-bit rate (Zen 4)
   * or at twice it (Zen 5, Intel server parts): the 256-bit figure tells
   * which, and is the ceiling of AVX2 kernels.  Measured first, so that
   * the main ISA's calibration is the one left for the in-round probes. */
  if (pc->isa == PROBE_AVX512 && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    measure_fma(pool, pc, PROBE_AVX2, reps, &fma256);
  measure_fma(pool, pc, pc->isa, reps, &fma);
  main_iters = pc->iters;
  /* bfloat16 dot products (vdpbf16ps): faster than FP32 FMAs on some CPU
   * kinds, slower on others.  Calibrated on their own, then timed in pairs
   * with the FMA probe, so the ratio of each pair sees one state of the
   * shared machine. */
  if (pc->isa == PROBE_AVX512 && __builtin_cpu_supports("avx512bf16")) {
    int64_t bf16_iters;
    measure_fma(pool, pc, PROBE_BF16, 0, &bf16);
    bf16_iters = pc->iters;
    for (r = 0; r < reps; r++) {
      double f, b;
      pc->fma_isa = pc->isa, pc->iters = main_iters;
      f = fma_rep(pool, pc);
      pc->fma_isa = PROBE_BF16, pc->iters = bf16_iters;
      b = fma_rep(pool, pc);
      bench_samples_add(&bf16, b);
      bench_samples_add(&bf16_ratio, b / f);
    }
    pc->fma_isa = pc->isa, pc->iters = main_iters;
  }
  pc->round_iters = main_iters / 2; /* ~25 ms (quick: ~12 ms) */
  if (pc->round_iters < 1000)
    pc->round_iters = 1000;

  /* Triad: 3 arrays of 64 MiB (6x a 32 MiB L3), plain and non-temporal
   * stores interleaved. */
  pc->n = (int64_t)1 << 24;
  pc->a = bench_alloc((size_t)pc->n * sizeof(float));
  pc->b = bench_alloc((size_t)pc->n * sizeof(float));
  pc->c = bench_alloc((size_t)pc->n * sizeof(float));
  pc->passes = 4;
  bench_pool_each(pool, init_thread, pc);
  for (r = 0; r < reps + 1; r++) {
    double plain = triad_rep(pool, pc, 0), stream = triad_rep(pool, pc, 1);

    if (r > 0) {
      bench_samples_add(&triad, plain);
      bench_samples_add(&nt, stream);
    }
  }

  /* A ceiling is the best the machine can do: on a shared machine other
   * load only ever lowers a repetition, so the best one is the estimate. */
  m->fma_gflops = g_best_fma = bench_max(&fma);
  m->bf16_dot_gflops = bf16.n ? bench_max(&bf16) : NAN;
  m->bf16_dot_vs_fma = bf16.n ? bench_median(&bf16_ratio) : NAN;
  m->triad_gbs = g_best_triad = bench_max(&triad);
  m->nt_store_gbs = g_best_nt = bench_max(&nt);
  bench_section("roofline probes (%d threads, %s vectors; best repetition)",
                nth, m->probe_isa);
  print_probe("FP32 FMA peak", &fma, "GFLOP/s",
              "(bench/README.md: 116 at 1 thread, 226 at 2)");
  if (fma256.n) {
    print_probe("FP32 FMA, 256-bit", &fma256, "GFLOP/s",
                "(the ceiling of AVX2 code)");
    res_begin("probe_fma_256");
    res_num("gflops", bench_max(&fma256));
    res_end();
  }
  if (bf16.n)
    printf("  %-20s %8.1f %-7s (median %.1f; %.2fx the FP32 FMA rate: "
           "median of %d paired reps)\n",
           "bf16 dot, vdpbf16ps", bench_max(&bf16), "GFLOP/s",
           bench_median(&bf16), bench_median(&bf16_ratio), bf16_ratio.n);
  print_probe("triad a=b+s*c", &triad, "GB/s",
              "(bench/README.md: 20 at 1 thread, 40 at 2)");
  print_probe("triad, NT stores", &nt, "GB/s",
              "(bench/README.md: 35 at 1 thread, 51 at 2)");
  printf("  Ceilings are the best repetition (load on the shared host only "
         "lowers one); short probes also run in every\n  round of the "
         "kernels below, and results.json keeps the best seen in the whole "
         "run.\n");
  pc->iters = pc->round_iters;
  pc->passes = 2;
  g_pc = pc;
}

double bench_probe_fma_once(struct bench_pool *pool)
{
  double v = g_pc ? fma_rep(pool, g_pc) : NAN;

  if (v > g_best_fma)
    g_best_fma = v;
  return v;
}

double bench_probe_triad_once(struct bench_pool *pool, int nt)
{
  double v = g_pc ? triad_rep(pool, g_pc, nt) : NAN;

  if (nt && v > g_best_nt)
    g_best_nt = v;
  if (!nt && v > g_best_triad)
    g_best_triad = v;
  return v;
}

double bench_ceiling_now(enum bench_ceiling c)
{
  return c == BENCH_CEIL_FMA ? g_best_fma
         : c == BENCH_CEIL_TRIAD ? g_best_triad
                                 : g_best_nt;
}

/* The CPU model (with family and model numbers: a VM may show only
 * "AMD EPYC") and the flags that matter, from /proc/cpuinfo. */
void bench_cpu_describe(struct bench_machine *m)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192], name[96] = "unknown";
  int have_model = 0, have_flags = 0, family = -1, model = -1;

  while (f && fgets(line, sizeof line, f) && !(have_model && have_flags)) {
    char *colon = strchr(line, ':');
    if (!colon)
      continue;
    if (strncmp(line, "cpu family", 10) == 0)
      family = atoi(colon + 1);
    else if (strncmp(line, "model\t", 6) == 0)
      model = atoi(colon + 1);
    if (!have_model && strncmp(line, "model name", 10) == 0) {
      snprintf(name, sizeof name, "%s", colon + 2);
      name[strcspn(name, "\n")] = '\0';
      have_model = 1;
    } else if (!have_flags && strncmp(line, "flags", 5) == 0) {
      /* whole words: " avx512f " must not match "avx512fp16" */
      strcat(line, " ");
      m->avx512f = strstr(colon, " avx512f ") != NULL;
      m->avx512_bf16 = strstr(colon, " avx512_bf16 ") != NULL;
      m->avx512_fp16 = strstr(colon, " avx512_fp16 ") != NULL;
      m->amx = strstr(colon, " amx_tile ") != NULL;
      have_flags = 1;
    }
  }
  if (f)
    fclose(f);
  snprintf(m->cpu_model, sizeof m->cpu_model, "%s (family %d, model %d)", name,
           family, model);
}

void bench_probes_done(struct bench_machine *m)
{
  m->fma_gflops = g_best_fma;
  m->triad_gbs = g_best_triad;
  m->nt_store_gbs = g_best_nt;
  if (g_pc) {
    free(g_pc->a);
    free(g_pc->b);
    free(g_pc->c);
    free(g_pc);
    g_pc = NULL;
  }
}
