/* encoding.c: absolute position encodings -- sinusoidal (three layouts),
 * learned tables, and the didactic integer and binary encodings
 * (docs/methods.md#absolute-encodings: sinusoidal, learned tables,
 * integer and binary). */
#include "ab-internal.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <string.h>

/* Sinusoidal frequencies are produced in tiles of AB__ENC_TILE pairs (the
 * kernel's), so the pow/exp per frequency is paid once per tile instead of
 * once per cell, without allocating (ab_encoding allocates nothing). */

/* 2^62: positions and offsets beyond this cannot index any table and would
 * overflow the int64 arithmetic below, so they are rejected up front. */
#define POS_LIMIT 4611686018427387904.0

void ab_encoding_params_init(struct ab_encoding_params *p)
{
  if (!p)
    return;
  memset(p, 0, sizeof *p); /* sinusoidal, interleaved, dim 0, no table */
  p->base = 10000.0;
  p->normalize = 1.0;
}

/* ==== validation ======================================================== */

static enum ab_status check_sinusoidal(const struct ab_encoding_params *p)
{
  if (!(p->base > 0.0) || !isfinite(p->base))
    return ab__fail(AB_STATUS_INVALID_ARG, "base",
                    "base %g must be a finite number > 0", p->base);
  switch (p->layout) {
  case AB_SIN_INTERLEAVED:
  case AB_SIN_CONCAT:
    if (p->dim % 2 != 0)
      return ab__fail(AB_STATUS_INVALID_ARG, "dim",
                      "dim %lld must be even for the %s layout",
                      (long long)p->dim,
                      p->layout == AB_SIN_CONCAT ? "concat" : "interleaved");
    break;
  case AB_SIN_T2T:
    /* The frequency exponent divides by d/2 - 1 (fairseq's get_embedding);
     * d < 4 makes that zero. */
    if (p->dim < 4)
      return ab__fail(AB_STATUS_INVALID_ARG, "dim",
                      "dim %lld must be >= 4 for the tensor2tensor layout",
                      (long long)p->dim);
    break;
  default:
    return ab__fail(AB_STATUS_INVALID_ARG, "layout",
                    "layout %d is not interleaved (0), concat (1) or "
                    "tensor2tensor (2)",
                    (int)p->layout);
  }
  return AB_STATUS_OK;
}

/* The argument name of position t ("positions.<t>"), written into buf. */
static const char *pos_arg(char buf[48], int64_t t)
{
  snprintf(buf, 48, "positions.%lld", (long long)t);
  return buf;
}

/* Integral position as int64, or a recorded error naming positions.<t>. */
static enum ab_status integral_position(double v, int64_t t, int64_t *out)
{
  char arg[48];

  if (!isfinite(v) || v != floor(v))
    return ab__fail(AB_STATUS_INVALID_ARG, pos_arg(arg, t),
                    "position %g must be a finite integer for this method",
                    v);
  if (fabs(v) > POS_LIMIT)
    return ab__fail(AB_STATUS_OUT_OF_RANGE, pos_arg(arg, t),
                    "position %g is outside +-2^62", v);
  *out = (int64_t)v;
  return AB_STATUS_OK;
}

static enum ab_status check_positions(const struct ab_encoding_params *p,
                                      const double *positions, int64_t n,
                                      int64_t table_rows)
{
  char arg[48];
  enum ab_status st;
  int64_t t, ip, row;

  for (t = 0; t < n; t++) {
    double v = positions[t];
    switch (p->method) {
    case AB_ENC_SINUSOIDAL:
    case AB_ENC_INTEGER:
      if (!isfinite(v))
        return ab__fail(AB_STATUS_INVALID_ARG, pos_arg(arg, t),
                        "position %g is not finite", v);
      break;
    case AB_ENC_LEARNED:
      if ((st = integral_position(v, t, &ip)) != AB_STATUS_OK)
        return st;
      if (__builtin_add_overflow(ip, p->offset, &row) || row < 0 ||
          row >= table_rows)
        return ab__fail(AB_STATUS_OUT_OF_RANGE, pos_arg(arg, t),
                        "position %lld + offset %lld is outside the table's "
                        "rows 0..%lld",
                        (long long)ip, (long long)p->offset,
                        (long long)table_rows - 1);
      break;
    case AB_ENC_BINARY:
      if ((st = integral_position(v, t, &ip)) != AB_STATUS_OK)
        return st;
      if (ip < 0)
        return ab__fail(AB_STATUS_OUT_OF_RANGE, pos_arg(arg, t),
                        "position %lld must be >= 0 for the binary encoding",
                        (long long)ip);
      break;
    }
  }
  return AB_STATUS_OK;
}

/* ==== the encodings ===================================================== */

/* Frequencies of the sinusoidal pairs k0 .. k0+kn-1, in double. */
static void sin_freqs(const struct ab_encoding_params *p, int64_t k0,
                      int64_t kn, double *freq)
{
  const int64_t half = p->dim / 2;
  const double ln_base = log(p->base);
  int64_t k;

  for (k = 0; k < kn; k++) {
    const double kk = (double)(k0 + k);
    if (p->layout == AB_SIN_T2T) /* fairseq: exp(-k ln(base)/(d/2-1)) */
      freq[k] = exp(-kk * (ln_base / (double)(half - 1)));
    else /* paper: base^(-2k/d) */
      freq[k] = pow(p->base, -2.0 * kk / (double)p->dim);
  }
}

/* The longest run of positions from the first that the kernel can step
 * through: each positions[i] == positions[0] + i * step exactly, as the
 * kernel forms them (integral positions always are).  At least 1. */
static int64_t step_run(const double *positions, int64_t n, double *step)
{
  int64_t i = 1;

  *step = n > 1 ? positions[1] - positions[0] : 0.0;
  while (i < n && positions[i] == positions[0] + (double)i * *step)
    i++;
  return i;
}

/* Sinusoidal rows `first` .. first + n - 1 of the table.  Each cell is sin
 * or cos of position * frequency in double, rounded once to float, as the
 * README decides: the kernel table's enc.sin_rows writes runs of rows
 * whose positions advance by a fixed step (the usual 0, 1, 2, ...), by the
 * angle-addition recurrence whose error bound kernels/enc.h states, other
 * positions in runs of one or two.  Pairs are done in tiles of
 * AB__ENC_TILE, placed interleaved or in the two halves, streaming when
 * asked. */
static void sinusoidal(const struct ab_encoding_params *p,
                       const double *positions, int64_t n, int64_t first,
                       float *out, const double *freqs,
                       const struct ab__kernels *K, int stream)
{
  const int64_t d = p->dim;
  const int64_t half = d / 2;
  const int interleaved = p->layout == AB_SIN_INTERLEAVED;
  double tile[AB__ENC_TILE], step;
  int64_t k0, t, run;

  for (k0 = 0; k0 < half; k0 += AB__ENC_TILE) {
    const int64_t kn = ab__min64(AB__ENC_TILE, half - k0);
    const double *freq = freqs ? freqs + k0 : tile;
    float *col = out + (interleaved ? 2 * k0 : k0);

    if (!freqs)
      sin_freqs(p, k0, kn, tile);
    for (t = 0; t < n; t += run) {
      /* Runs end at the table's multiples of AB__ENC_ANCHOR rows, where
       * the pieces of a job start: a job writes the bits of one call. */
      const int64_t cut = AB__ENC_ANCHOR - (first + t) % AB__ENC_ANCHOR;
      run = step_run(positions + t, ab__min64(n - t, cut), &step);
      K->enc.sin_rows(col + t * d, d, interleaved ? 0 : half, positions[t],
                      step, freq, kn, run, stream);
    }
  }
  /* tensor2tensor with odd d: fairseq appends a zero column. */
  if (p->layout == AB_SIN_T2T && (d & 1))
    for (t = 0; t < n; t++)
      out[t * d + d - 1] = 0.0f;
}

/* Rows of the table; a float32 table with unit column stride is copied
 * row by row with the table writer. */
static void learned(const struct ab_encoding_params *p,
                    const double *positions, int64_t n, float *out,
                    const struct ab__kernels *K, int stream)
{
  const struct ab_tensor *tb = p->table;
  const int direct = tb->dtype == AB_DTYPE_F32 && tb->stride[1] == 1;
  int64_t t, c;

  for (t = 0; t < n; t++) {
    const int64_t row = (int64_t)positions[t] + p->offset; /* validated */
    const int64_t base = row * tb->stride[0];
    float *o = out + t * p->dim;

    if (direct) {
      K->bias.table_copy(o, (const float *)tb->data + base, p->dim, stream);
      continue;
    }
    for (c = 0; c < p->dim; c++)
      o[c] = ab__load_f32(tb->data, tb->dtype, base + c * tb->stride[1]);
  }
}

static void integer(const struct ab_encoding_params *p,
                    const double *positions, int64_t n, float *out,
                    const struct ab__kernels *K, int stream)
{
  int64_t t;

  for (t = 0; t < n; t++)
    K->bias.table_fill(out + t * p->dim, p->dim,
                       (float)(positions[t] / p->normalize), stream);
}

static void binary(const struct ab_encoding_params *p,
                   const double *positions, int64_t n, float *out)
{
  int64_t t, c;

  for (t = 0; t < n; t++) {
    /* Validated: integral, 0 <= position <= 2^62. */
    const uint64_t v = (uint64_t)positions[t];
    for (c = 0; c < p->dim; c++)
      out[t * p->dim + c] = c < 64 ? (float)((v >> c) & 1u) : 0.0f;
  }
}

/* Every check of ab_encoding, before anything is written. */
static enum ab_status check_all(const struct ab_encoding_params *p,
                                const double *positions, int64_t n,
                                const void *out)
{
  enum ab_status st;
  int64_t rows = 0, cells;

  if (!p)
    return ab__fail(AB_STATUS_INVALID_ARG, "params", "params is NULL");
  if (n < 1)
    return ab__fail(AB_STATUS_BAD_SHAPE, "positions",
                    "%lld positions given; at least 1 is needed",
                    (long long)n);
  if (!positions)
    return ab__fail(AB_STATUS_INVALID_ARG, "positions", "positions is NULL");
  if (!out)
    return ab__fail(AB_STATUS_INVALID_ARG, "out", "out is NULL");

  switch (p->method) {
  case AB_ENC_SINUSOIDAL:
  case AB_ENC_INTEGER:
  case AB_ENC_BINARY:
    if (p->dim < 1)
      return ab__fail(AB_STATUS_INVALID_ARG, "dim", "dim %lld must be >= 1",
                      (long long)p->dim);
    break;
  case AB_ENC_LEARNED:
    if ((st = ab__check_tensor(p->table, "table", 0)) != AB_STATUS_OK)
      return st;
    if (p->table->ndim != 2)
      return ab__fail(AB_STATUS_BAD_SHAPE, "table",
                      "table has rank %d; it must be [rows, dim]",
                      (int)p->table->ndim);
    if (p->dim != p->table->shape[1])
      return ab__fail(AB_STATUS_BAD_SHAPE, "dim",
                      "dim %lld differs from the table's %lld columns",
                      (long long)p->dim, (long long)p->table->shape[1]);
    rows = p->table->shape[0];
    break;
  default:
    return ab__fail(AB_STATUS_INVALID_ARG, "method",
                    "encoding method %d is not sinusoidal, learned, integer "
                    "or binary",
                    (int)p->method);
  }
  if (ab_mul_overflow(n, p->dim, &cells) ||
      (uint64_t)cells > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "dim",
                    "%lld positions x dim %lld overflows", (long long)n,
                    (long long)p->dim);
  if (p->method == AB_ENC_SINUSOIDAL &&
      (st = check_sinusoidal(p)) != AB_STATUS_OK)
    return st;
  if (p->method == AB_ENC_INTEGER &&
      (!isfinite(p->normalize) || p->normalize == 0.0))
    return ab__fail(AB_STATUS_INVALID_ARG, "normalize",
                    "normalize %g must be finite and non-zero",
                    p->normalize);
  /* Every position is checked before anything is written, so a failing
   * call leaves out untouched. */
  return check_positions(p, positions, n, rows);
}

/* Rows [t0, t1) of the encoding into out (row t0 first); validated.
 * freqs: the sinusoidal frequencies (sin_freqs of every pair), or NULL to
 * compute them per tile.  stream: non-temporal stores where aligned (the
 * caller fences). */
static void fill_rows(const struct ab_encoding_params *p,
                      const double *positions, int64_t t0, int64_t t1,
                      float *out, const double *freqs, int stream)
{
  const struct ab__kernels *K = ab__kernels();

  positions += t0;
  switch (p->method) {
  case AB_ENC_SINUSOIDAL:
    sinusoidal(p, positions, t1 - t0, t0, out, freqs, K, stream);
    break;
  case AB_ENC_LEARNED: learned(p, positions, t1 - t0, out, K, stream); break;
  case AB_ENC_INTEGER: integer(p, positions, t1 - t0, out, K, stream); break;
  case AB_ENC_BINARY: binary(p, positions, t1 - t0, out); break;
  }
}

/* Whether an output of rows x dim floats is streamed (AB__STREAM_BYTES);
 * dim * rows is known not to overflow. */
static int stream_rows(int64_t rows, int64_t dim)
{
  return rows * dim >= AB__STREAM_BYTES / (int64_t)sizeof(float);
}

enum ab_status ab_encoding(const struct ab_encoding_params *p,
                           const double *positions, int64_t n, float *out)
{
  enum ab_status st = check_all(p, positions, n, out);
  int stream;

  if (st != AB_STATUS_OK)
    return st;
  stream = stream_rows(n, p->dim);
  fill_rows(p, positions, 0, n, out, NULL, stream);
  if (stream)
    ab__kernels()->bias.store_fence();
  return st;
}

/* ==== the job: rows of the output, with or without x ==================== */

struct enc_job {
  struct ab_encoding_params p;
  const double *positions;
  int64_t n, rows, rows_per_piece; /* n positions; rows of out */
  const struct ab_tensor *x; /* NULL: out is the encoding itself */
  float *out;
  int stream;                /* out is written with non-temporal stores */
  const double *freqs; /* sinusoidal: every pair's frequency (after ctx) */
  /* With x: a piece is a block of pos_block positions for lead_block of
   * the x's lead = rows / n leading rows (batch entries). */
  int64_t lead, pos_block, lead_block, npos_blocks;
};

/* Columns of a row that add_row sums on the stack before streaming them. */
#define ADD_CHUNK 512

/* x's row r (of the flattened leading dims x n) plus enc, into out: by the
 * table writer's sum when x's row is float32 and contiguous; else summed
 * straight into out, or (streaming) a chunk at a time on the stack and
 * streamed from there. */
static void add_row(const struct enc_job *ej, const struct ab__kernels *K,
                    int64_t r, const float *enc)
{
  const struct ab_tensor *x = ej->x;
  const int64_t dim = ej->p.dim, cs = x->stride[x->ndim - 1];
  const int direct = x->dtype == AB_DTYPE_F32 && cs == 1;
  int64_t idx[AB_MAX_DIMS] = {0, 0, 0, 0}, rem = r, off, c0, c;
  float *o = ej->out + r * dim, sum[ADD_CHUNK];
  int d;

  /* Multi-index of row r over x's leading dims (the last is channels). */
  for (d = x->ndim - 2; d >= 0; d--) {
    idx[d] = rem % x->shape[d];
    rem /= x->shape[d];
  }
  off = ab__tensor_offset(x, idx);
  if (direct) {
    K->bias.table_add(o, (const float *)x->data + off, enc, dim, ej->stream);
    return;
  }
  for (c0 = 0; c0 < dim; c0 += ADD_CHUNK) {
    const int64_t len = ab__min64(ADD_CHUNK, dim - c0);
    float *dst = ej->stream ? sum : o + c0;
    const float *e = enc + c0;

    for (c = 0; c < len; c++)
      dst[c] = ab__load_f32(x->data, x->dtype, off + (c0 + c) * cs) + e[c];
    if (ej->stream)
      K->bias.table_copy(o + c0, sum, len, 1);
  }
}

/* One piece.  Without x: output rows [r0, r1) of the encoding.  With x:
 * positions [t0, t1) of leading rows [l0, l1): their encoding rows are
 * built once in the scratch and added to every one of those leading rows
 * (sin and cos per cell are the cost: a batch of B pays them once, not B
 * times). */
static enum ab_status enc_run(const struct ab_job *job, int64_t piece,
                              void *scratch)
{
  const struct enc_job *ej = job->ctx;
  int64_t r0, r1, t0, t1, l0, l1, l, t;
  float *enc = scratch;
  const struct ab__kernels *K = ab__kernels();

  if (!ej->x) {
    r0 = piece * ej->rows_per_piece;
    r1 = ab__min64(r0 + ej->rows_per_piece, ej->rows);
    fill_rows(&ej->p, ej->positions, r0, r1, ej->out + r0 * ej->p.dim,
              ej->freqs, ej->stream);
  } else {
    t0 = piece % ej->npos_blocks * ej->pos_block;
    t1 = ab__min64(t0 + ej->pos_block, ej->n);
    l0 = piece / ej->npos_blocks * ej->lead_block;
    l1 = ab__min64(l0 + ej->lead_block, ej->lead);
    fill_rows(&ej->p, ej->positions, t0, t1, enc, ej->freqs, 0); /* scratch */
    for (l = l0; l < l1; l++)
      for (t = t0; t < t1; t++)
        add_row(ej, K, l * ej->n + t, enc + (t - t0) * ej->p.dim);
  }
  /* This thread's streaming stores are ordered before the piece ends. */
  if (ej->stream)
    K->bias.store_fence();
  return AB_STATUS_OK;
}

enum ab_status ab_encoding_job(const struct ab_encoding_params *p,
                               const double *positions, int64_t n,
                               const struct ab_tensor *x, float *out,
                               ab_job_t **job)
{
  struct enc_job *ej;
  enum ab_status st;
  int64_t rows = n, nfreq = 0;

  if (!job)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job is NULL");
  *job = NULL;
  if ((st = check_all(p, positions, n, out)) != AB_STATUS_OK)
    return st;
  if (x) {
    if ((st = ab__check_tensor(x, "x", 0)) != AB_STATUS_OK)
      return st;
    if (x->ndim < 2)
      return ab__fail(AB_STATUS_BAD_SHAPE, "x",
                      "x has rank %d; it must end in [n, dim] = [%lld, %lld]",
                      (int)x->ndim, (long long)n, (long long)p->dim);
    if (x->shape[x->ndim - 1] != p->dim || x->shape[x->ndim - 2] != n)
      return ab__fail(AB_STATUS_BAD_SHAPE, "x",
                      "x ends in [%lld, %lld]; it must end in [n, dim] = "
                      "[%lld, %lld]",
                      (long long)x->shape[x->ndim - 2],
                      (long long)x->shape[x->ndim - 1], (long long)n,
                      (long long)p->dim);
    rows = ab_tensor_numel(x) / p->dim;
  }
  /* The sinusoidal frequencies follow the context: computed once here
   * rather than per piece (one pow per pair, as much as a row's sines). */
  if (p->method == AB_ENC_SINUSOIDAL)
    nfreq = p->dim / 2;
  if ((uint64_t)nfreq > (SIZE_MAX - sizeof *ej) / sizeof(double))
    return ab__fail(AB_STATUS_OVERFLOW, "dim",
                    "dim %lld needs more frequencies than memory can hold",
                    (long long)p->dim);
  if ((st = ab__job_new(sizeof *ej + (size_t)nfreq * sizeof(double), job)) !=
      AB_STATUS_OK)
    return st;
  ej = (*job)->ctx;
  if (nfreq) {
    double *freqs = (double *)(ej + 1);
    sin_freqs(p, 0, nfreq, freqs);
    ej->freqs = freqs;
  }
  ej->p = *p;
  ej->positions = positions;
  ej->n = n;
  ej->rows = rows;
  ej->x = x;
  ej->out = out;
  ej->stream = stream_rows(rows, p->dim);
  /* About 256 KiB of output per piece: enough to amortise the hand-off
   * and the sinusoids' exact anchor rows (kernels/enc.h), small enough to
   * spread a table over every thread and to keep a block of x + PE's
   * encoding in L2. */
  ej->rows_per_piece = ab__max64(1, 65536 / p->dim);
  /* Sinusoids: pieces start at the kernel's anchor rows, so a job writes
   * the same bits as one call. */
  if (p->method == AB_ENC_SINUSOIDAL)
    ej->rows_per_piece = (ej->rows_per_piece + AB__ENC_ANCHOR - 1) /
                         AB__ENC_ANCHOR * AB__ENC_ANCHOR;
  (*job)->pieces = (rows + ej->rows_per_piece - 1) / ej->rows_per_piece;
  (*job)->scratch_size = 0;
  if (x) {
    /* Blocks of 256 KiB of encoding, each added to up to 1 MiB of rows. */
    ej->lead = rows / n;
    ej->pos_block = ab__min64(n, ej->rows_per_piece);
    ej->lead_block = ab__max64(
        1, ab__min64(ej->lead, ((int64_t)1 << 18) / (ej->pos_block * p->dim)));
    ej->npos_blocks = (n + ej->pos_block - 1) / ej->pos_block;
    (*job)->pieces =
        ej->npos_blocks * ((ej->lead + ej->lead_block - 1) / ej->lead_block);
    (*job)->scratch_size = (size_t)(ej->pos_block * p->dim) * sizeof(float);
  }
  (*job)->flops = 20.0 * (double)rows * (double)p->dim;
  (*job)->run = enc_run;
  return AB_STATUS_OK;
}

enum ab_status ab_encoding_add(float *x, int64_t rows, const float *enc,
                               int64_t n, int64_t dim)
{
  int64_t r, c, cells;

  if (!x)
    return ab__fail(AB_STATUS_INVALID_ARG, "x", "x is NULL");
  if (!enc)
    return ab__fail(AB_STATUS_INVALID_ARG, "enc", "enc is NULL");
  if (dim < 1)
    return ab__fail(AB_STATUS_BAD_SHAPE, "dim", "dim %lld must be >= 1",
                    (long long)dim);
  if (n < 1)
    return ab__fail(AB_STATUS_BAD_SHAPE, "positions",
                    "%lld positions; at least 1 is needed", (long long)n);
  if (rows < 1 || rows % n != 0)
    return ab__fail(AB_STATUS_BAD_SHAPE, "x",
                    "x has %lld rows of %lld; that is not a multiple of the "
                    "%lld positions",
                    (long long)rows, (long long)dim, (long long)n);
  if (ab_mul_overflow(rows, dim, &cells) ||
      (uint64_t)cells > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "x", "x's size overflows");
  for (r = 0; r < rows; r++) {
    float *xr = x + r * dim;
    const float *er = enc + (r % n) * dim;
    for (c = 0; c < dim; c++)
      xr[c] += er[c];
  }
  return AB_STATUS_OK;
}
