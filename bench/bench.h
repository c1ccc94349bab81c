/* bench.h: shared pieces of the attnbias benchmark program (bench/) --
 * the thread pool that runs library jobs, the roofline probes, timing and
 * statistics helpers, the result sink (stdout table + results.json), and
 * the entry points of each benchmark section. */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "attnbias.h"

/* ======================================================================
 * options (bench.c parses them once; read-only afterwards)
 * ====================================================================== */
struct bench_opts {
  int threads;            /* pool size, also the probes' thread count */
  int quick;              /* BENCH_QUICK=1 / --quick: a fast smoke run */
  const char *only;       /* comma list of sections, NULL: all */
  const char *attn_shapes; /* HxNxd list for the attention section, NULL: all */
  const char *out;        /* results.json path */
  const char *server;     /* attnbiasd binary, or NULL */
  const char *bare;       /* bare-server binary, or NULL */
  const char *torch;      /* torch_bench.py path, or NULL */
  const char *lua;        /* wrk Lua script */
  const char *python;     /* interpreter for the torch peer */
  double http_seconds;    /* duration of one wrk load */
};
extern struct bench_opts g_opt;

/* ======================================================================
 * child processes and files (common.c, shared with the soak)
 * ====================================================================== */
/* Processes the bench started (servers, wrk, the torch peer): registered
 * so that they are killed even when the bench is interrupted. */
void bench_child_add(pid_t pid);
void bench_child_remove(pid_t pid);
/* Ignore SIGPIPE; on SIGINT/SIGTERM/SIGHUP and at exit, kill every
 * registered child. */
void bench_children_guard(void);
/* Start argv with stdout and stderr sent to files and no other descriptor
 * of ours; the child dies with us (PR_SET_PDEATHSIG) even if we are killed
 * hard.  Registered; -1 when fork fails. */
pid_t bench_spawn(char *const argv[], const char *out, const char *err);
/* Wait up to timeout seconds: 1 and *status when it exited, 0 if not. */
int bench_wait(pid_t pid, double timeout, int *status);
/* SIGTERM, SIGKILL after timeout s; the wait status, -1 if it was killed. */
int bench_stop(pid_t pid, double timeout);
/* A whole file, NUL-terminated (malloc'd; *len its size), or NULL. */
char *bench_slurp(const char *path, size_t *len);
int bench_write_file(const char *path, const void *p, size_t n);
/* The port a server printed for --port 0: the number after "host:" (as in
 * "listening on http://127.0.0.1:40123"), after the word "port", or a line
 * that is only a number.  0 when none is there yet. */
int bench_parse_port(const char *text);

/* 1 when section `name` is selected by --only (or no --only given). */
int bench_want(const char *name);

/* ======================================================================
 * time and statistics
 * ====================================================================== */
double bench_now(void); /* CLOCK_MONOTONIC seconds */

/* Up to BENCH_MAX_REPS samples of one measured thing. */
#define BENCH_MAX_REPS 64
struct bench_samples {
  int n;
  double v[BENCH_MAX_REPS];
};
void bench_samples_add(struct bench_samples *s, double v);
/* Median, min, max of the samples (NaN when there are none). */
double bench_median(const struct bench_samples *s);
double bench_min(const struct bench_samples *s);
double bench_max(const struct bench_samples *s);

/* Deterministic fill with uniform values in [-amp, amp] (xorshift). */
void bench_fill(float *x, size_t n, uint64_t seed, float amp);
/* 64-byte aligned allocation that exits with a message when it fails (the
 * bench cannot do anything useful without its buffers); free with free(). */
void *bench_alloc(size_t bytes);

/* ======================================================================
 * the pool: N threads (the caller is thread 0), pieces from an atomic
 * counter, a private scratch buffer per thread
 * ====================================================================== */
struct bench_pool;
typedef void (*bench_piece_fn)(void *ctx, int64_t piece, int tid,
                               void *scratch);

struct bench_pool *bench_pool_new(int threads);
void bench_pool_free(struct bench_pool *p);
int bench_pool_threads(const struct bench_pool *p);
/* Run fn for pieces 0..n-1 over all threads; each thread gets a scratch
 * buffer of at least `scratch` bytes.  Returns when every piece is done. */
void bench_pool_run(struct bench_pool *p, int64_t n, size_t scratch,
                    bench_piece_fn fn, void *ctx);
/* Every thread runs fn(ctx, tid, tid, NULL) exactly once (probes). */
void bench_pool_each(struct bench_pool *p, bench_piece_fn fn, void *ctx);
/* Run every piece of a library job; returns the first failing status. */
enum ab_status bench_pool_job(struct bench_pool *p, const ab_job_t *job);

/* ======================================================================
 * roofline probes (probe.c, probe-avx2.c, probe-avx512.c)
 * ====================================================================== */
/* The three ceilings, for percentages. */
enum bench_ceiling { BENCH_CEIL_FMA, BENCH_CEIL_TRIAD, BENCH_CEIL_NT };

struct bench_machine {
  char cpu_model[128]; /* /proc/cpuinfo's model name */
  /* the flags that decide which kernels run: avx512f, avx512_bf16,
   * avx512_fp16, amx (amx_tile) */
  int avx512f, avx512_bf16, avx512_fp16, amx;
  double fma_gflops;   /* FP32 FMA GFLOP/s, all pool threads */
  double bf16_dot_gflops; /* vdpbf16ps, 64 flops each; NaN without it */
  double bf16_dot_vs_fma; /* its rate over the FMA probe's, paired reps */
  double triad_gbs;    /* a = b + s*c, STREAM byte count (12 B/element) */
  double nt_store_gbs; /* the same triad with non-temporal stores */
  const char *probe_isa; /* "avx512", "avx2" or "scalar" */
  int threads;
};
/* Measure the machine (several repetitions, printed) and keep the
 * calibration for the in-round probes below. */
void bench_probes(struct bench_pool *pool, struct bench_machine *m);
/* One short repetition (~25 ms FMA, ~10 ms triad) to run inside a round of
 * kernel repetitions, so the kernel's % is against the machine as it was
 * in those same rounds.  GFLOP/s or GB/s; the best ever seen is kept. */
double bench_probe_fma_once(struct bench_pool *pool);
double bench_probe_triad_once(struct bench_pool *pool, int nt);
/* The best figure seen so far for a ceiling (for the table's %). */
double bench_ceiling_now(enum bench_ceiling c);
/* Set m to the best figures seen during the whole run; free the arrays. */
void bench_probes_done(struct bench_machine *m);

/* ISA-specific probe kernels (only called after a cpuid check). */
double bench_fma_avx512(int64_t iters); /* returns flops done */
void bench_triad_avx512(float *a, const float *b, const float *c, float s,
                        int64_t n, int nt);
double bench_fma_avx2(int64_t iters);
double bench_bf16_dot_avx512(int64_t iters); /* returns flops done */
/* Read the CPU model and flags into m (the machine line). */
void bench_cpu_describe(struct bench_machine *m);
void bench_triad_avx2(float *a, const float *b, const float *c, float s,
                      int64_t n, int nt);
/* A read-only stream: the sum of n floats (64-byte aligned, n a multiple of
 * the vector width), in four independent chains. */
float bench_read_avx512(const float *a, int64_t n);
float bench_read_avx2(const float *a, int64_t n);

/* ======================================================================
 * results: the stdout table is printed as each row is measured; the
 * entries are also collected for results.json
 * ====================================================================== */
/* Start an entry {"name": name, ...}; add members; end it. */
void res_begin(const char *name);
void res_str(const char *key, const char *val);
void res_num(const char *key, double val); /* non-finite -> null */
void res_int(const char *key, int64_t val);
/* A percentage of one of the machine's ceilings: `val` is the figure
 * (GFLOP/s or GB/s); 100 * val / ceiling is written by res_write with the
 * best ceiling of the whole run, so results.json is self-consistent. */
void res_pct(const char *key, double val, enum bench_ceiling ceil);
void res_end(void);
/* Write {"machine": {...}, "results": [...]} to path. */
int res_write(const char *path, const struct bench_machine *m,
              const char *isa);

/* Print a section heading / a skip line on stdout (flushed). */
void bench_section(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bench_skip(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ======================================================================
 * the torch peer (peer.c): a /usr/bin/python3 coprocess running
 * torch_bench.py, asked for one timed repetition at a time so that its
 * runs interleave with ours
 * ====================================================================== */
/* Start the peer; 0 when it runs, -1 (a clear line printed) when not. */
int peer_start(void);
int peer_alive(void);
int peer_has_sdpa(void);
/* The OpenBLAS core the peer's torch runs ("none": not OpenBLAS). */
const char *peer_openblas_core(void);
/* Compare the peer's outputs with ours on small inputs (peer_start does);
 * 0 when every case agrees. */
int peer_check(void);
/* One repetition: returns milliseconds, or a negative value on error (the
 * peer is then stopped).  impl "matmul"|"sdpa"; variant as ours. */
double peer_attention(const char *impl, const char *variant, int hq,
                      int hkv, int n, int d);
double peer_rope(const char *pairing, int n);
void peer_stop(void);

/* ======================================================================
 * sections
 * ====================================================================== */
/* Each prints its rows and records its results.json entries. */
void bench_attention(struct bench_pool *pool);
void bench_decode(struct bench_pool *pool);
void bench_long(struct bench_pool *pool);
void bench_rope(struct bench_pool *pool);
void bench_bias(struct bench_pool *pool);
void bench_encoding(struct bench_pool *pool);
void bench_codec(void);
void bench_service(struct bench_pool *pool);

/* HTTPS (tls.c): a throwaway self-signed certificate for 127.0.0.1 as
 * DIR/tls.crt and DIR/tls.key (paths into cert and key, cap bytes each),
 * 0 or -1; and the service section's binary attention request over TLS
 * (to https_port, verified with the certificate ca) against plain HTTP
 * (to http_port), in the same rounds. */
int bench_tls_cert(const char *dir, char *cert, char *key, size_t cap);
void bench_tls_attention(int http_port, int https_port, const char *ca);

/* Max |error| of one output row against float64: query row q [d], the
 * keys 0 .. nkeys-1 of one head (k, v rows of d floats), scale
 * 1/sqrt(d), no bias; s is scratch of nkeys doubles. */
double bench_attn_row_err(const float *q, const float *k, const float *v,
                          int nkeys, int d, const float *out, double *s);

/* Time one dense fp32 attention [1,H,N,d] in process over the pool (q, k,
 * v, out caller-allocated); returns seconds or a negative value. */
double bench_attention_once(struct bench_pool *pool, float *q, float *k,
                            float *v, float *out, int h, int n, int d);

/* A float32 tensor of a safetensors request body. */
struct bench_st_tensor {
  const char *name;
  const float *data;
  int rank;
  int64_t shape[4];
};
/* Serialise n tensors, in that order, as a safetensors file whose
 * __metadata__["params"] is the JSON text `params` (NULL: "{}") --
 * malloc'd, *len set; NULL when out of memory or the header would pass
 * 4 KiB. */
char *bench_safetensors(const struct bench_st_tensor *t, int n,
                        const char *params, size_t *len);
/* q, k, v [1,h,n,d] with no params.  Used by the codec and service
 * sections. */
char *bench_safetensors_qkv(const float *q, const float *k, const float *v,
                            int h, int n, int d, size_t *len);

#endif /* BENCH_H */
