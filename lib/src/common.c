/* common.c: status strings, per-thread errors, the allocator hook, dtypes,
 * tensor descriptors and jobs -- everything the methods share. */
#include "ab-internal.h"
#include "kernels/elem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== status and errors ================================================ */

const char *ab_status_str(enum ab_status s)
{
  switch (s) {
#define AB_X_(name, num, msg)                                                 \
  case AB_STATUS_##name:                                                       \
    return msg;
    AB_STATUS_MAP(AB_X_)
#undef AB_X_
  default:
    return "unknown status";
  }
}

static _Thread_local struct ab_error g_err;

const struct ab_error *ab_last_error(void) { return &g_err; }

void ab_clear_error(void) { memset(&g_err, 0, sizeof g_err); }

enum ab_status ab__fail(enum ab_status st, const char *arg, const char *fmt,
                        ...)
{
  va_list ap;

  g_err.status = st;
  snprintf(g_err.arg, sizeof g_err.arg, "%s", arg ? arg : "");
  va_start(ap, fmt);
  vsnprintf(g_err.msg, sizeof g_err.msg, fmt, ap);
  va_end(ap);
  return st;
}

const char *ab_version(void) { return AB_VERSION_STRING; }

/* ==== allocation ======================================================== */

static void *(*g_malloc)(size_t) = malloc;
static void (*g_free)(void *) = free;

void ab_set_allocator(void *(*malloc_fn)(size_t), void (*free_fn)(void *))
{
  g_malloc = malloc_fn ? malloc_fn : malloc;
  g_free = free_fn ? free_fn : free;
}

void *ab__malloc(size_t n) { return g_malloc(n ? n : 1); }

void *ab__calloc(size_t n, size_t size)
{
  void *p;

  if (size && n > SIZE_MAX / size)
    return NULL;
  p = ab__malloc(n * size);
  if (p)
    memset(p, 0, n * size);
  return p;
}

void ab__free(void *p)
{
  if (p)
    g_free(p);
}

/* Over-allocate by 64 bytes and keep the original pointer just before the
 * aligned block, so the hook allocator needs no aligned variant. */
void *ab__malloc_aligned(size_t n)
{
  unsigned char *raw, *al;

  if (n > SIZE_MAX - 64 - sizeof(void *))
    return NULL;
  raw = ab__malloc(n + 64 + sizeof(void *));
  if (!raw)
    return NULL;
  al = (unsigned char *)(((uintptr_t)(raw + sizeof(void *)) + 63) &
                         ~(uintptr_t)63);
  memcpy(al - sizeof(void *), &raw, sizeof raw);
  return al;
}

void ab__free_aligned(void *p)
{
  void *raw;

  if (!p)
    return;
  memcpy(&raw, (unsigned char *)p - sizeof(void *), sizeof raw);
  ab__free(raw);
}

/* ==== dtypes ============================================================ */

size_t ab_dtype_size(enum ab_dtype d)
{
  switch (d) {
  case AB_DTYPE_F32: return 4;
  case AB_DTYPE_F64: return 8;
  case AB_DTYPE_F16: return 2;
  case AB_DTYPE_BF16: return 2;
  case AB_DTYPE_I32: return 4;
  default: return 0;
  }
}

const char *ab_dtype_name(enum ab_dtype d)
{
  switch (d) {
  case AB_DTYPE_F32: return "float32";
  case AB_DTYPE_F64: return "float64";
  case AB_DTYPE_F16: return "float16";
  case AB_DTYPE_BF16: return "bfloat16";
  case AB_DTYPE_I32: return "int32";
  default: return "unknown";
  }
}

int ab_dtype_parse(const char *name)
{
  static const struct { const char *n; int d; } names[] = {
    {"float32", AB_DTYPE_F32}, {"f32", AB_DTYPE_F32}, {"F32", AB_DTYPE_F32},
    {"float64", AB_DTYPE_F64}, {"f64", AB_DTYPE_F64}, {"F64", AB_DTYPE_F64},
    {"float16", AB_DTYPE_F16}, {"f16", AB_DTYPE_F16}, {"F16", AB_DTYPE_F16},
    {"bfloat16", AB_DTYPE_BF16}, {"bf16", AB_DTYPE_BF16},
    {"BF16", AB_DTYPE_BF16}, {"int32", AB_DTYPE_I32}, {"i32", AB_DTYPE_I32},
    {"I32", AB_DTYPE_I32},
  };
  size_t i;

  if (!name)
    return -1;
  for (i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i].n) == 0)
      return names[i].d;
  return -1;
}

/* IEEE half <-> single, round to nearest even, NaN and inf kept. */
uint16_t ab_f32_to_f16(float f)
{
  uint32_t x, sign, mant;
  int32_t exp;
  uint16_t h;

  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  exp = (int32_t)((x >> 23) & 0xff);
  mant = x & 0x7fffffu;
  if (exp == 0xff) /* inf or NaN (keep a quiet NaN bit) */
    return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  exp = exp - 127 + 15;
  if (exp >= 0x1f) /* overflow to infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) { /* subnormal half or zero */
    uint32_t m, shift, half_bit, rem;
    if (exp < -10)
      return (uint16_t)sign;
    m = mant | 0x800000u;
    shift = (uint32_t)(14 - exp);
    h = (uint16_t)(m >> shift);
    half_bit = 1u << (shift - 1);
    rem = m & ((1u << shift) - 1);
    if (rem > half_bit || (rem == half_bit && (h & 1u)))
      h++;
    return (uint16_t)(sign | h);
  }
  h = (uint16_t)(sign | ((uint32_t)exp << 10) | (mant >> 13));
  /* Round to nearest even; a carry into the exponent is correct. */
  if ((mant & 0x1fffu) > 0x1000u || ((mant & 0x1fffu) == 0x1000u && (h & 1u)))
    h++;
  return h;
}

float ab_f16_to_f32(uint16_t h) { return ab__half_to_float(h); }

uint16_t ab_f32_to_bf16(float f)
{
  uint32_t x;

  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
    return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float ab_bf16_to_f32(uint16_t h) { return ab__bf16_to_float(h); }

float ab__load_f32(const void *base, int32_t dtype, int64_t idx)
{
  switch (dtype) {
  case AB_DTYPE_F32: return ((const float *)base)[idx];
  case AB_DTYPE_F64: return (float)((const double *)base)[idx];
  case AB_DTYPE_F16: return ab_f16_to_f32(((const uint16_t *)base)[idx]);
  case AB_DTYPE_BF16: return ab_bf16_to_f32(((const uint16_t *)base)[idx]);
  case AB_DTYPE_I32: return (float)((const int32_t *)base)[idx];
  default: return 0.0f;
  }
}

double ab__load_f64(const void *base, int32_t dtype, int64_t idx)
{
  if (dtype == AB_DTYPE_F64)
    return ((const double *)base)[idx];
  return (double)ab__load_f32(base, dtype, idx); /* exact for the others */
}

static int is_float_dtype(int32_t d)
{
  return d == AB_DTYPE_F32 || d == AB_DTYPE_F64 || d == AB_DTYPE_F16 ||
         d == AB_DTYPE_BF16;
}

/* d rounded to float32 towards zero, the lowest bit set when inexact
 * ("round to odd"): rounding that to float16 or bfloat16 (13 and 16 bits
 * fewer) to nearest even gives the same as rounding d directly, where
 * rounding d to nearest float32 first could create a false tie. */
static float f64_to_f32_odd(double d)
{
  float f = (float)d;
  uint32_t bits;

  if (isnan(d) || (double)f == d)
    return f;
  if (fabs((double)f) > fabs(d))
    f = nextafterf(f, 0.0f);
  memcpy(&bits, &f, 4);
  bits |= 1;
  memcpy(&f, &bits, 4);
  return f;
}

enum ab_status ab_convert(void *dst, enum ab_dtype dst_dtype, const void *src,
                          enum ab_dtype src_dtype, int64_t n)
{
  int64_t i;

  if (n < 0)
    return ab__fail(AB_STATUS_INVALID_ARG, "n", "count %lld is negative",
                    (long long)n);
  if (!is_float_dtype((int32_t)dst_dtype) ||
      !is_float_dtype((int32_t)src_dtype))
    return ab__fail(AB_STATUS_BAD_DTYPE, "dtype",
                    "conversion %s (%d) -> %s (%d) is not between float "
                    "dtypes",
                    ab_dtype_name(src_dtype), (int)src_dtype,
                    ab_dtype_name(dst_dtype), (int)dst_dtype);
  if (n == 0)
    return AB_STATUS_OK;
  if (!dst || !src)
    return ab__fail(AB_STATUS_INVALID_ARG, dst ? "src" : "dst",
                    "buffer is NULL");
  if (dst_dtype == src_dtype) {
    if (dst != src)
      memmove(dst, src, (size_t)n * ab_dtype_size(src_dtype));
    return AB_STATUS_OK;
  }
  if (dst_dtype == AB_DTYPE_F64 && src_dtype == AB_DTYPE_F32) {
    for (i = 0; i < n; i++)
      ((double *)dst)[i] = (double)((const float *)src)[i];
    return AB_STATUS_OK;
  }
  for (i = 0; i < n; i++) {
    float f = src_dtype == AB_DTYPE_F64 && dst_dtype != AB_DTYPE_F32
                  ? f64_to_f32_odd(((const double *)src)[i])
                  : ab__load_f32(src, (int32_t)src_dtype, i);
    switch (dst_dtype) {
    case AB_DTYPE_F32: ((float *)dst)[i] = f; break;
    case AB_DTYPE_F64: ((double *)dst)[i] = (double)f; break;
    case AB_DTYPE_F16: ((uint16_t *)dst)[i] = ab_f32_to_f16(f); break;
    case AB_DTYPE_BF16: ((uint16_t *)dst)[i] = ab_f32_to_bf16(f); break;
    default: break;
    }
  }
  return AB_STATUS_OK;
}

/* ==== tensors =========================================================== */

int ab_mul_overflow(int64_t a, int64_t b, int64_t *out)
{
  if (a < 0 || b < 0)
    return -1;
  if (a != 0 && b > INT64_MAX / a)
    return -1;
  *out = a * b;
  return 0;
}

enum ab_status ab_tensor_init(struct ab_tensor *t, void *data,
                              enum ab_dtype dtype, int ndim,
                              const int64_t *shape)
{
  int64_t n = 1;
  int i;

  if (!t || !shape)
    return ab__fail(AB_STATUS_INVALID_ARG, t ? "shape" : "t", "is NULL");
  if (ndim < 1 || ndim > AB_MAX_DIMS)
    return ab__fail(AB_STATUS_BAD_SHAPE, "shape", "rank %d is not in 1..%d",
                    ndim, AB_MAX_DIMS);
  if (ab_dtype_size(dtype) == 0)
    return ab__fail(AB_STATUS_BAD_DTYPE, "dtype", "dtype %d is unknown",
                    (int)dtype);
  memset(t, 0, sizeof *t);
  t->data = data;
  t->dtype = (int32_t)dtype;
  t->ndim = ndim;
  for (i = ndim - 1; i >= 0; i--) {
    if (shape[i] < 1)
      return ab__fail(AB_STATUS_BAD_SHAPE, "shape",
                      "dimension %d is %lld; every dimension must be >= 1", i,
                      (long long)shape[i]);
    t->shape[i] = shape[i];
    t->stride[i] = n;
    if (ab_mul_overflow(n, shape[i], &n))
      return ab__fail(AB_STATUS_OVERFLOW, "shape",
                      "element count overflows at dimension %d", i);
  }
  if ((uint64_t)n > SIZE_MAX / ab_dtype_size(dtype))
    return ab__fail(AB_STATUS_OVERFLOW, "shape", "byte size overflows");
  return AB_STATUS_OK;
}

int64_t ab_tensor_numel(const struct ab_tensor *t)
{
  int64_t n = 1;
  int i;

  if (!t || t->ndim < 1 || t->ndim > AB_MAX_DIMS)
    return -1;
  for (i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0 || ab_mul_overflow(n, t->shape[i], &n))
      return -1;
  return n;
}

int ab_tensor_is_contiguous(const struct ab_tensor *t)
{
  int64_t s = 1;
  int i;

  if (!t || t->ndim < 1 || t->ndim > AB_MAX_DIMS)
    return 0;
  for (i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s)
      return 0;
    s *= t->shape[i];
  }
  return 1;
}

int64_t ab__tensor_offset(const struct ab_tensor *t, const int64_t *idx)
{
  int64_t off = 0;
  int i;

  for (i = 0; i < t->ndim; i++)
    off += idx[i] * t->stride[i];
  return off;
}

enum ab_status ab__check_tensor(const struct ab_tensor *t, const char *name,
                                int allow_int)
{
  int64_t extent = 0, term, n;
  size_t esz;
  int i;

  if (!t)
    return ab__fail(AB_STATUS_INVALID_ARG, name, "%s is required", name);
  if (!(is_float_dtype(t->dtype) || (allow_int && t->dtype == AB_DTYPE_I32)))
    return ab__fail(AB_STATUS_BAD_DTYPE, name, "%s has dtype %s (%d)", name,
                    ab_dtype_name((enum ab_dtype)t->dtype), (int)t->dtype);
  if (t->ndim < 1 || t->ndim > AB_MAX_DIMS)
    return ab__fail(AB_STATUS_BAD_SHAPE, name, "%s has rank %d, not 1..%d",
                    name, (int)t->ndim, AB_MAX_DIMS);
  for (i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 1)
      return ab__fail(AB_STATUS_BAD_SHAPE, name,
                      "%s dimension %d is %lld; every dimension must be >= 1",
                      name, i, (long long)t->shape[i]);
    if (t->stride[i] < 0)
      return ab__fail(AB_STATUS_BAD_SHAPE, name,
                      "%s stride %d is %lld; strides must be >= 0", name, i,
                      (long long)t->stride[i]);
    if (ab_mul_overflow(t->shape[i] - 1, t->stride[i], &term) ||
        extent > INT64_MAX - term)
      return ab__fail(AB_STATUS_OVERFLOW, name, "%s extent overflows", name);
    extent += term;
  }
  /* The elements span extent + 1 of them, whose bytes must be addressable
   * (overlap checks compute them).  The element count times the larger of
   * the element size and a float32 copy's must fit in int64 and size_t, so
   * no caller needs to check its own size products. */
  esz = ab_dtype_size((enum ab_dtype)t->dtype);
  if ((uint64_t)extent >= SIZE_MAX / esz)
    return ab__fail(AB_STATUS_OVERFLOW, name, "%s extent overflows", name);
  if (esz < sizeof(float))
    esz = sizeof(float);
  n = ab_tensor_numel(t);
  if (n < 0 || (uint64_t)n > (uint64_t)INT64_MAX / esz ||
      (uint64_t)n > SIZE_MAX / esz)
    return ab__fail(AB_STATUS_OVERFLOW, name,
                    "%s's element count or byte size overflows", name);
  if (!t->data)
    return ab__fail(AB_STATUS_INVALID_ARG, name, "%s has no data", name);
  return AB_STATUS_OK;
}

/* Gather src (any strides) row-major into dst as float32 or float64. */
static enum ab_status tensor_gather(const struct ab_tensor *src, void *dst,
                                    enum ab_dtype to)
{
  int64_t idx[AB_MAX_DIMS] = {0, 0, 0, 0}, n, i;
  enum ab_status st;
  int d;

  if ((st = ab__check_tensor(src, "src", 0)) != AB_STATUS_OK)
    return st;
  if (!dst)
    return ab__fail(AB_STATUS_INVALID_ARG, "dst", "dst is NULL");
  n = ab_tensor_numel(src);
  if ((uint64_t)n > SIZE_MAX / ab_dtype_size(to))
    return ab__fail(AB_STATUS_OVERFLOW, "src",
                    "%lld elements do not fit in memory as %s",
                    (long long)n, ab_dtype_name(to));
  if (ab_tensor_is_contiguous(src))
    return ab_convert(dst, to, src->data, (enum ab_dtype)src->dtype, n);
  for (i = 0; i < n; i++) {
    const int64_t off = ab__tensor_offset(src, idx);
    if (to == AB_DTYPE_F64)
      ((double *)dst)[i] = ab__load_f64(src->data, src->dtype, off);
    else
      ((float *)dst)[i] = ab__load_f32(src->data, src->dtype, off);
    for (d = src->ndim - 1; d >= 0; d--) {
      if (++idx[d] < src->shape[d])
        break;
      idx[d] = 0;
    }
  }
  return AB_STATUS_OK;
}

enum ab_status ab_tensor_to_f32(const struct ab_tensor *src, float *dst)
{
  return tensor_gather(src, dst, AB_DTYPE_F32);
}

enum ab_status ab_tensor_to_f64(const struct ab_tensor *src, double *dst)
{
  return tensor_gather(src, dst, AB_DTYPE_F64);
}

/* ==== jobs ============================================================== */

enum ab_status ab__job_new(size_t ctx_size, struct ab_job **out)
{
  struct ab_job *job = ab__calloc(1, sizeof *job);

  *out = NULL;
  if (!job)
    return ab__fail(AB_STATUS_NO_MEMORY, "job", "cannot allocate a job");
  if (ctx_size) {
    job->ctx = ab__calloc(1, ctx_size);
    if (!job->ctx) {
      ab__free(job);
      return ab__fail(AB_STATUS_NO_MEMORY, "job",
                      "cannot allocate %zu bytes of job state", ctx_size);
    }
  }
  *out = job;
  return AB_STATUS_OK;
}

int64_t ab_job_pieces(const ab_job_t *job) { return job ? job->pieces : 0; }

size_t ab_job_scratch_size(const ab_job_t *job)
{
  return job ? job->scratch_size : 0;
}

double ab_job_flops(const ab_job_t *job) { return job ? job->flops : 0.0; }

enum ab_status ab_job_run(const ab_job_t *job, int64_t piece, void *scratch)
{
  enum ab_status st;
  void *own = NULL;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job is NULL");
  if (piece < 0 || piece >= job->pieces)
    return ab__fail(AB_STATUS_OUT_OF_RANGE, "piece",
                    "piece %lld is not in 0..%lld", (long long)piece,
                    (long long)job->pieces - 1);
  if (!scratch && job->scratch_size) {
    own = ab__malloc_aligned(job->scratch_size);
    if (!own)
      return ab__fail(AB_STATUS_NO_MEMORY, "scratch",
                      "cannot allocate %zu bytes of scratch",
                      job->scratch_size);
    scratch = own;
  }
  st = job->run(job, piece, scratch);
  ab__free_aligned(own);
  return st;
}

/* ab_job_piece_first and ab_job_piece_reads: the same checks around the
 * job kind's own answer (its `first` or `reads`). */
static enum ab_status piece_query(const ab_job_t *job, int64_t piece,
                                  const void *ptr, int64_t *res, int reads)
{
  const char *what = reads ? "input" : "output";
  const char *res_name = reads ? "end" : "first";
  int64_t (*fn)(const struct ab_job *, int64_t, const void *);
  int64_t v;

  if (!job || !res || !ptr)
    return ab__fail(AB_STATUS_INVALID_ARG,
                    !job ? "job" : !res ? res_name : what, "%s is NULL",
                    !job ? "job" : !res ? res_name : what);
  if (piece < 0 || piece >= job->pieces)
    return ab__fail(AB_STATUS_OUT_OF_RANGE, "piece",
                    "piece %lld is not in 0..%lld", (long long)piece,
                    (long long)job->pieces - 1);
  fn = reads ? job->reads : job->first;
  if (!fn)
    return ab__fail(AB_STATUS_INVALID_ARG, "job",
                    "this kind of job does not describe what its pieces %s",
                    reads ? "read" : "write");
  v = fn(job, piece, ptr);
  if (v < 0)
    return ab__fail(AB_STATUS_INVALID_ARG, what,
                    "%p is not an %s of this job", ptr, what);
  *res = v;
  return AB_STATUS_OK;
}

enum ab_status ab_job_piece_first(const ab_job_t *job, int64_t piece,
                                  const void *output, int64_t *first)
{
  return piece_query(job, piece, output, first, 0);
}

enum ab_status ab_job_piece_reads(const ab_job_t *job, int64_t piece,
                                  const void *input, int64_t *end)
{
  return piece_query(job, piece, input, end, 1);
}

enum ab_status ab_job_run_all(const ab_job_t *job)
{
  enum ab_status st = AB_STATUS_OK;
  void *scratch = NULL;
  int64_t i;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job is NULL");
  if (job->scratch_size) {
    scratch = ab__malloc_aligned(job->scratch_size);
    if (!scratch)
      return ab__fail(AB_STATUS_NO_MEMORY, "scratch",
                      "cannot allocate %zu bytes of scratch",
                      job->scratch_size);
  }
  for (i = 0; i < job->pieces && st == AB_STATUS_OK; i++)
    st = job->run(job, i, scratch);
  ab__free_aligned(scratch);
  return st;
}

void ab_job_free(ab_job_t *job)
{
  if (!job)
    return;
  if (job->destroy)
    job->destroy(job);
  ab__free(job->ctx);
  ab__free(job);
}
