/* ab-internal.h: private to libattnbias -- allocation, error recording,
 * jobs and small numeric helpers shared by every source file. */
#ifndef AB_INTERNAL_H
#define AB_INTERNAL_H

#include "attnbias.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef NDEBUG
#define ab__assert(c) ((void)0)
#else
#include <assert.h>
#define ab__assert(c) assert(c)
#endif

#if defined(__GNUC__)
#define AB__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AB__PRINTF(a, b)
#endif

/* ---- allocation (through the ab_set_allocator hook) ---------------- */
void *ab__malloc(size_t n);
void *ab__calloc(size_t n, size_t size); /* overflow-checked */
void ab__free(void *p);
/* 64-byte aligned; free with ab__free_aligned. */
void *ab__malloc_aligned(size_t n);
void ab__free_aligned(void *p);

/* ---- errors ---------------------------------------------------------- */
/* Record the error for ab_last_error and return st.  arg names the
 * argument (dotted API path), fmt builds a sentence naming the value. */
enum ab_status ab__fail(enum ab_status st, const char *arg, const char *fmt,
                        ...) AB__PRINTF(3, 4);

/* ---- output writers ------------------------------------------------- */
/* Outputs of at least this many bytes are written with non-temporal
 * stores (bias tables, encodings, RoPE into a separate output): half the
 * 32 MiB L3 of the reference machine (bench/README.md), past which the output
 * cannot stay cached for its reader anyway, and streaming saves the
 * read-for-ownership of every output line. */
#define AB__STREAM_BYTES ((int64_t)16 << 20)

/* ---- jobs ------------------------------------------------------------ */
struct ab_job {
  int64_t pieces;
  size_t scratch_size;
  double flops;
  enum ab_status (*run)(const struct ab_job *job, int64_t piece,
                        void *scratch);
  void (*destroy)(struct ab_job *job); /* frees ctx's resources; may be NULL */
  /* The lowest element offset from `output` that `piece` writes
   * (INT64_MAX: none; -1: `output` is not one of the job's outputs).  NULL
   * for job kinds that do not say (ab_job_piece_first). */
  int64_t (*first)(const struct ab_job *job, int64_t piece,
                   const void *output);
  /* One past the highest element offset of `input` that `piece` may read
   * (0: none; -1: `input` is not one of the job's inputs).  NULL for job
   * kinds that do not say (ab_job_piece_reads). */
  int64_t (*reads)(const struct ab_job *job, int64_t piece,
                   const void *input);
  void *ctx;
};
/* Allocate a job whose ctx is a zeroed block of ctx_size bytes. */
enum ab_status ab__job_new(size_t ctx_size, struct ab_job **out);

/* ---- the kernel table (dispatch.c) and the CPU (cpu-x86.c) ---------- */
struct ab__kernels; /* kernels/kernels.h */
/* The table for this process (AB_ISA caps it). */
const struct ab__kernels *ab__kernels(void);
/* Tests: the table of one ISA ("ref", "avx2", "avx512"), or NULL when the
 * CPU cannot run it.  ab__isa_list is NULL-terminated, best last. */
const struct ab__kernels *ab__kernels_for(const char *isa);
const char *const *ab__isa_list(void);
int ab__cpu_has_avx2_fma(void);
int ab__cpu_has_avx512(void);
/* AVX512-BF16 (vdpbf16ps), and whether this CPU kind runs it faster than
 * FP32 FMAs (docs/internals/dispatch.md says which kinds were measured). */
int ab__cpu_has_avx512_bf16(void);
int ab__cpu_bf16_dot_fast(void);

/* ---- numbers --------------------------------------------------------- */
static inline int64_t ab__min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ab__max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Convert one element of a float tensor to float (dtype known valid). */
float ab__load_f32(const void *base, int32_t dtype, int64_t idx);
/* The same in double: float64 elements keep every digit. */
double ab__load_f64(const void *base, int32_t dtype, int64_t idx);
/* Offset in elements of a multi-index (idx has t->ndim entries). */
int64_t ab__tensor_offset(const struct ab_tensor *t, const int64_t *idx);
/* Validate a tensor descriptor: non-NULL data, float dtype (or int32 when
 * allow_int), rank 1..4, dims >= 1, strides >= 0, extent fits, and the
 * byte size of the tensor and of a float32 copy fit in int64 and size_t. */
enum ab_status ab__check_tensor(const struct ab_tensor *t, const char *name,
                                int allow_int);

#endif /* AB_INTERNAL_H */
