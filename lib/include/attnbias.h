/* attnbias.h: public API of the attnbias library -- position encodings,
 * attention-bias tables and fused attention.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *   - Thread safety: every function is reentrant and may be called from any
 *     number of threads at once on different outputs.  The only global state
 *     is the kernel table (resolved once, thread-safe) and the allocator hook
 *     (set it before any other call).
 *   - Ownership: pointers passed in are borrowed for the duration of the call
 *     (or, for jobs, until ab_job_free); the library never frees them.
 *     Outputs are written only to the buffers the caller passes.
 *   - Allocation: only functions whose comment says "allocates" allocate, and
 *     they use the hook of ab_set_allocator.  Allocation failure is returned
 *     as AB_STATUS_NO_MEMORY, never fatal.
 *   - Errors: a failing call returns a status and records, per thread, which
 *     argument was wrong and why (ab_last_error).  Nothing aborts on bad input.
 *   - Arithmetic: inputs of any dtype (q, k, v, x, attn_bias, learned and
 *     T5 tables) are converted to float32 before any arithmetic;
 *     parameter-only quantities (angles, frequencies, slopes) are computed
 *     in double, from parameters kept as given: LongRoPE's factors, Kerple's
 *     r1 and r2 and FIRE's MLP are read in double (float64 tensors and the
 *     *_f64 arrays keep every digit).  ALiBi's bias is one float32 product
 *     per cell, so its slopes are float32.  Outputs are float32 (T5
 *     buckets: int32).
 *   - Threads: the library starts none.  Large work is exposed as a job of
 *     independent pieces (ab_job_*) that any caller's pool may run.
 */
#ifndef AB_H
#define AB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define AB_API __attribute__((visibility("default")))
#else
#define AB_API
#endif

#define AB_VERSION_MAJOR 0
#define AB_VERSION_MINOR 1
#define AB_VERSION_PATCH 0
#define AB_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------
 * Status codes.  Append only; never renumber (see ab_status_str).
 * ------------------------------------------------------------------------ */
#define AB_STATUS_MAP(X)                                                       \
  X(OK, 0, "success")                                                          \
  X(INVALID_ARG, 1, "invalid argument")                                        \
  X(BAD_SHAPE, 2, "tensor shape not supported")                                \
  X(BAD_DTYPE, 3, "dtype not supported")                                       \
  X(NO_MEMORY, 4, "out of memory")                                             \
  X(UNSUPPORTED, 5, "not built for this CPU")                                  \
  X(OUT_OF_RANGE, 6, "value out of range")                                     \
  X(OVERFLOW, 7, "size overflows")

enum ab_status {
#define AB_X_(name, num, msg) AB_STATUS_##name = num,
  AB_STATUS_MAP(AB_X_)
#undef AB_X_
      AB_STATUS_LAST_ /* never use */
};

/* Static string for a status ("invalid argument"). Never NULL. */
AB_API const char *ab_status_str(enum ab_status s);

/* What the last failing call on this thread objected to.  `arg` names the
 * argument with the dotted path of the HTTP API where one exists ("q",
 * "rope.rotary_dim", "bias.table", "kv_lens.2"); `msg` is a full sentence
 * naming the value ("rotary_dim 7 must be even").  Thread-local storage owned
 * by the library, never NULL; successful calls leave it alone, so it holds
 * until the next failing call on the same thread or ab_clear_error (which
 * zeroes it: status OK, empty strings). */
struct ab_error {
  enum ab_status status;
  char arg[64];
  char msg[256];
};
AB_API const struct ab_error *ab_last_error(void);
AB_API void ab_clear_error(void);

/* Replace the allocator (for tests of allocation failure); a NULL function
 * restores malloc or free.  Every later allocation goes through the hook,
 * and memory is freed with the free function current at that time, so
 * switch only while no job is alive.  Not thread-safe: call it before any
 * other function, or while no other thread uses the library. */
AB_API void ab_set_allocator(void *(*malloc_fn)(size_t),
                             void (*free_fn)(void *));

/* Library version and the kernel set in use: "avx512", "avx2" or "ref".
 * AB_ISA=ref|avx2|avx512 in the environment caps the choice (read once). */
AB_API const char *ab_version(void);
AB_API const char *ab_isa_name(void);

/* ------------------------------------------------------------------------
 * Tensors.
 * ------------------------------------------------------------------------ */
enum ab_dtype {
  AB_DTYPE_F32 = 0,
  AB_DTYPE_F64 = 1,
  AB_DTYPE_F16 = 2,
  AB_DTYPE_BF16 = 3,
  AB_DTYPE_I32 = 4,
  AB_DTYPE_LAST_ /* never use */
};

/* Size in bytes of one element (0 for an unknown dtype) and the canonical
 * names "float32", "float64", "float16", "bfloat16", "int32". */
AB_API size_t ab_dtype_size(enum ab_dtype d);
AB_API const char *ab_dtype_name(enum ab_dtype d);
/* Parses a name as above (also "f32", "f64", "f16", "bf16", "i32" and
 * their upper-case forms).  Returns -1 if unknown or NULL. */
AB_API int ab_dtype_parse(const char *name);

#define AB_MAX_DIMS 4

/* A borrowed view of an n-dimensional array (rank 1..4).  Strides count
 * elements, not bytes, and may be any non-negative values. */
struct ab_tensor {
  void *data;       /* borrowed; caller owns */
  int32_t dtype;    /* enum ab_dtype */
  int32_t ndim;     /* 1..AB_MAX_DIMS */
  int64_t shape[AB_MAX_DIMS];
  int64_t stride[AB_MAX_DIMS]; /* in elements */
};

/* Fill t as a contiguous row-major view of data (which may be NULL here;
 * the operations refuse a tensor without data).  Checks the rank is 1..4,
 * the dtype known, every dimension >= 1, and that the element count and
 * byte size fit in int64/size_t (AB_STATUS_OVERFLOW otherwise); on failure
 * *t is unspecified.  Allocates nothing. */
AB_API enum ab_status ab_tensor_init(struct ab_tensor *t, void *data,
                                     enum ab_dtype dtype, int ndim,
                                     const int64_t *shape);
/* Element count; -1 on overflow or a bad descriptor (NULL, rank). */
AB_API int64_t ab_tensor_numel(const struct ab_tensor *t);
/* 1 when the strides are the row-major ones for the shape (a dimension of
 * size 1 may have any stride); 0 otherwise, and for NULL or a bad rank. */
AB_API int ab_tensor_is_contiguous(const struct ab_tensor *t);
/* a*b for sizes, with overflow check: returns 0 and sets *out, or returns
 * -1 (leaving *out alone) when a factor is < 0 or the product overflows
 * int64.  Chain it for longer products. */
AB_API int ab_mul_overflow(int64_t a, int64_t b, int64_t *out);

/* Convert `n` contiguous elements between float dtypes (F32, F64, F16,
 * BF16); n == 0 does nothing.  f16 and bf16 are rounded to nearest even;
 * NaN and infinities are preserved.  Allocates nothing.  src and dst must
 * not overlap, except that a same-dtype copy may overlap in any way and
 * dst == src works when the destination element is no wider than the
 * source's (converted front to back). */
AB_API enum ab_status ab_convert(void *dst, enum ab_dtype dst_dtype,
                                 const void *src, enum ab_dtype src_dtype,
                                 int64_t n);
/* Gather any float tensor (any strides) into a contiguous float32 buffer of
 * ab_tensor_numel(src) elements, row-major.  Validates src first (named
 * "src"); allocates nothing; dst must not overlap src's data. */
AB_API enum ab_status ab_tensor_to_f32(const struct ab_tensor *src,
                                       float *dst);
/* The same into doubles: float64 elements keep every digit, the others
 * widen exactly.  For parameters the library evaluates in double. */
AB_API enum ab_status ab_tensor_to_f64(const struct ab_tensor *src,
                                       double *dst);
/* One element: IEEE half and bfloat16 <-> single, as ab_convert does. */
AB_API uint16_t ab_f32_to_f16(float f);
AB_API float ab_f16_to_f32(uint16_t h);
AB_API uint16_t ab_f32_to_bf16(float f);
AB_API float ab_bf16_to_f32(uint16_t h);

/* ------------------------------------------------------------------------
 * Jobs: work a caller's thread pool can split.
 *
 * A job is built by one of the *_job functions (which validate everything
 * and allocate), then consists of `ab_job_pieces` independent pieces.
 * Pieces may run in any order, concurrently, on any threads; each writes a
 * disjoint part of the outputs.  Pieces are numbered so that the costly
 * ones come first: a pool that hands out pieces in index order from a
 * shared counter is balanced.  `scratch` is per-thread working memory of at
 * least ab_job_scratch_size bytes (64-byte aligned), or NULL to let the
 * piece allocate its own.  A job is immutable after creation: running
 * pieces concurrently is thread-safe; ab_job_free must not race with them.
 * ------------------------------------------------------------------------ */
typedef struct ab_job ab_job_t;

/* Piece count, scratch bytes per thread (0: none needed) and estimated
 * floating-point operations of the whole job (for budgets); 0 for NULL. */
AB_API int64_t ab_job_pieces(const ab_job_t *job);
AB_API size_t ab_job_scratch_size(const ab_job_t *job);
AB_API double ab_job_flops(const ab_job_t *job);
/* Run piece 0 <= piece < ab_job_pieces (else OUT_OF_RANGE).  With scratch
 * NULL and a scratch size > 0 it allocates and frees its own. */
AB_API enum ab_status ab_job_run(const ab_job_t *job, int64_t piece,
                                 void *scratch);
/* What a piece writes, for callers that send results while a job runs:
 * *first = the lowest element offset (from the output's base pointer, in
 * elements, whatever its strides) that `piece` writes in `output` (the
 * data pointer of one of the job's outputs, as passed to the *_job call),
 * or INT64_MAX when the piece writes none of it.  The pieces together
 * write every element of each output, each element once -- or, where an
 * attention job splits a block's keys into several pieces, whichever of
 * them finishes last writes the block, and each of them reports the
 * block's first element; either way, once every piece p with
 * *first(p) < X has finished, elements [0, X) of that output are final.  Attention jobs describe out, lse and weights; other job
 * kinds return INVALID_ARG naming "job" (as do outputs the job does not
 * write, naming "output"). */
AB_API enum ab_status ab_job_piece_first(const ab_job_t *job, int64_t piece,
                                         const void *output, int64_t *first);
/* What a piece reads, for callers that start a job before its inputs are
 * all there (ab_attn_params.inputs_later): *end = one past the highest
 * element offset (from the input's base pointer, in elements, whatever its
 * strides) that `piece` may read of `input` (the data pointer of one of
 * the job's inputs, as passed to the *_job call), or 0 when it reads none
 * of it (also when the job read the input into a copy of its own).  So
 * once elements [0, end) of every input are in place, the piece can run.
 * Attention jobs describe q, k, v and attn_bias; other job kinds return
 * INVALID_ARG naming "job" (as do pointers that are no input of the job,
 * naming "input"). */
AB_API enum ab_status ab_job_piece_reads(const ab_job_t *job, int64_t piece,
                                         const void *input, int64_t *end);
/* Run every piece in order on the calling thread (allocates scratch once);
 * stops at the first failing piece and returns its status. */
AB_API enum ab_status ab_job_run_all(const ab_job_t *job);
/* Free the job and everything it allocated; NULL is a no-op. */
AB_API void ab_job_free(ab_job_t *job);

/* ------------------------------------------------------------------------
 * Absolute position encodings (docs/methods.md#absolute-encodings).
 * ------------------------------------------------------------------------ */
enum ab_enc_method {
  AB_ENC_SINUSOIDAL = 0,
  AB_ENC_LEARNED = 1,
  AB_ENC_INTEGER = 2,
  AB_ENC_BINARY = 3
};

enum ab_sin_layout {
  AB_SIN_INTERLEAVED = 0, /* paper: even sin, odd cos, freq base^(-2k/d) */
  AB_SIN_CONCAT = 1,      /* [sin | cos], same frequencies */
  AB_SIN_T2T = 2          /* [sin | cos], base^(-k/(d/2-1)), odd d padded */
};

struct ab_encoding_params {
  enum ab_enc_method method;
  int64_t dim;             /* columns; learned: must equal the table's */
  double base;             /* sinusoidal; default 10000 */
  enum ab_sin_layout layout;
  double normalize;        /* integer: PE = p / normalize; default 1 */
  const struct ab_tensor *table; /* learned: [rows, dim], any float dtype */
  int64_t offset;          /* learned: row = position + offset */
};

/* Fill p with the defaults (sinusoidal, interleaved, base 10000,
 * normalize 1, offset 0). */
AB_API void ab_encoding_params_init(struct ab_encoding_params *p);

/* out[t, c] = PE(positions[t], c) for t < n, as float32 [n, dim].
 * Positions may be fractional for sinusoidal and integer (timesteps);
 * learned and binary need integral positions (learned: 0 <= p + offset <
 * rows, else OUT_OF_RANGE naming "positions.<t>"; binary: p >= 0).
 * Everything is checked before anything is written: a failing call leaves
 * out untouched.  Rows are independent: to split, pass positions + r0 and
 * out + r0 * dim.  Reads p->table for learned.  Allocates nothing. */
AB_API enum ab_status ab_encoding(const struct ab_encoding_params *p,
                                  const double *positions, int64_t n,
                                  float *out);

/* The same as a job of independent pieces (row ranges of the output).
 * Without x (NULL), out is the encoding [n, dim]; with x ([..., n, dim],
 * any float dtype and strides), out is float32 contiguous of x's shape and
 * holds x + encoding broadcast over the leading dims (pieces then need
 * dim floats of scratch).  Validates everything first; allocates the job
 * (p itself is copied); borrows p->table, positions, x (the descriptor and
 * its data) and out until ab_job_free. */
AB_API enum ab_status ab_encoding_job(const struct ab_encoding_params *p,
                                      const double *positions, int64_t n,
                                      const struct ab_tensor *x, float *out,
                                      ab_job_t **job);

/* x[..., t, c] += enc[t, c] in place: x is float32 contiguous [..., n, dim]
 * with `rows` = numel / dim rows (a multiple of n), enc [n, dim] repeats
 * over the leading dims.  Allocates nothing. */
AB_API enum ab_status ab_encoding_add(float *x, int64_t rows, const float *enc,
                                      int64_t n, int64_t dim);

/* ------------------------------------------------------------------------
 * RoPE (docs/methods.md#rope).
 * ------------------------------------------------------------------------ */
enum ab_rope_type {
  AB_ROPE_DEFAULT = 0,
  AB_ROPE_LINEAR = 1,
  AB_ROPE_NTK = 2,
  AB_ROPE_DYNAMIC = 3,
  AB_ROPE_YARN = 4,
  AB_ROPE_LLAMA3 = 5,
  AB_ROPE_LONGROPE = 6,
  AB_ROPE_VISION2D = 7,
  AB_ROPE_XPOS = 8,
  AB_ROPE_TYPE_LAST_ /* never use */
};
/* "default", "linear", ... as in rope_scaling.rope_type; -1 if unknown.
 * Parsing also takes the names of published configs: "mrope" (Qwen2-VL:
 * default frequencies, multi-axis from mrope_section) and "su" (early
 * Phi-3 for longrope). */
AB_API int ab_rope_type_parse(const char *name);
AB_API const char *ab_rope_type_name(enum ab_rope_type t);

#define AB_MROPE_MAX_SECTIONS 4

/* Every field of a model's config that RoPE reads, with the Hugging Face
 * names.  Start from ab_rope_params_init, then set what the config says.
 * A double field that is "absent" holds a negative value (factor,
 * attention_factor, mscale, mscale_all_dim). */
struct ab_rope_params {
  int64_t head_dim;              /* channels per head (required) */
  int64_t rotary_dim;            /* 0: int(head_dim * partial_rotary_factor) */
  /* First rotated channel (default 0): channels [rotary_offset,
   * rotary_offset + rotary_dim) of each head rotate, those before and after
   * pass through.  DeepSeek-V2/V3 rotate the last qk_rope_head_dim channels
   * of a [q_nope | q_pe] head: rotary_offset = qk_nope_head_dim.  Only
   * rotation (ab_rope_apply*, attention's rope) reads it; tables have
   * rotary_dim columns whatever it is. */
  int64_t rotary_offset;
  double partial_rotary_factor;  /* default 1 */
  double rope_theta;             /* default 10000 */
  int interleaved;               /* 0: pairs (k, k+r/2); 1: pairs (2k, 2k+1) */
  enum ab_rope_type rope_type;   /* default AB_ROPE_DEFAULT */
  double factor;                 /* linear/ntk/dynamic/yarn/llama3/longrope */
  int64_t original_max_position_embeddings; /* 0: absent */
  int64_t max_position_embeddings;          /* 0: absent */
  /* yarn */
  double beta_fast;              /* <= 0: 32 */
  double beta_slow;              /* <= 0: 1 */
  double attention_factor;       /* < 0: the method's default */
  double mscale;                 /* < 0: absent (DeepSeek) */
  double mscale_all_dim;         /* < 0: absent (DeepSeek) */
  int truncate;                  /* default 1 */
  /* llama3 */
  double low_freq_factor;        /* default 1 */
  double high_freq_factor;       /* default 4 */
  /* longrope: rotary_dim/2 values each, borrowed */
  const double *short_factor;
  const double *long_factor;
  /* multi-axis (any rope_type except vision2d/xpos): sums to rotary_dim/2 */
  int n_mrope_section;           /* 0: not multi-axis; else 3 (t,h,w) or 4 */
  int64_t mrope_section[AB_MROPE_MAX_SECTIONS];
  int mrope_interleaved;         /* Qwen3-VL interleaved form */
  /* xpos */
  double scale_base;             /* default 512 */
  double gamma;                  /* default 0.4 */
};

AB_API void ab_rope_params_init(struct ab_rope_params *p);

/* Validate p and resolve the derived sizes.  Sets *rotary_dim, *n_freq
 * (rotary_dim/2, or rotary_dim/4 for vision2d) and *n_axes (positions per
 * token: 1, 2 for vision2d, n_mrope_section (3, or 4 with ggml's extra e
 * row) for multi-axis).  Any may be NULL. */
AB_API enum ab_status ab_rope_check(const struct ab_rope_params *p,
                                    int64_t *rotary_dim, int64_t *n_freq,
                                    int *n_axes);

/* inv_freq [n_freq] in double and the attention factor that multiplies cos
 * and sin, for the current length seq_len (dynamic, longrope; ignored by the
 * others; must be >= 1).  Either output may be NULL.  Allocates nothing. */
AB_API enum ab_status ab_rope_inv_freq(const struct ab_rope_params *p,
                                       int64_t seq_len, double *inv_freq,
                                       double *attention_scaling);

/* Tables for n tokens: cos and sin [n, rotary_dim] float32, laid out for the
 * pairing (rotate-half: [c0..c_{r/2-1}, c0..c_{r/2-1}]; interleaved:
 * [c0, c0, c1, c1, ...]) and multiplied by the attention factor.
 * positions is [n_axes, n] row-major (axis-major).  xpos has no table form
 * (INVALID_ARG).  Rows are independent: with one axis, rows [t0, t1) are
 * those of positions + t0, n = t1 - t0, written at cos_out/sin_out +
 * t0 * rotary_dim; ab_rope_table_job splits any number of axes.  Allocates
 * nothing. */
AB_API enum ab_status ab_rope_table(const struct ab_rope_params *p,
                                    int64_t seq_len, const int64_t *positions,
                                    int64_t n, float *cos_out, float *sin_out);

enum ab_layout {
  AB_LAYOUT_BHSD = 0, /* [batch, heads, seq, dim] (PyTorch SDPA) */
  AB_LAYOUT_BSHD = 1  /* [batch, seq, heads, dim] (FlashAttention, HF) */
};

/* Rotate x (rank 2..4, any float dtype and strides; rank 3 is [H, S, D] or
 * [S, H, D], rank 2 is [S, D]) and write float32 contiguous `out` of the
 * same shape.  out may equal x->data when x is contiguous float32; any
 * other overlap is INVALID_ARG.  The sequence axis has length n and
 * positions are [n_axes, n].  is_key selects xPos's decay direction (k is
 * scaled by zeta^-p; uncentred, so beyond |p| ~ 36k * scale_base / 512 one
 * side overflows float32: pass positions relative to a common point, which
 * ab_attention's rope does itself).  Channels outside [rotary_offset,
 * rotary_offset + rotary_dim) are copied through.  Builds
 * the job below and runs it on the calling thread: allocates the job, its
 * cos/sin table [n, rotary_dim] and scratch; frees them before returning. */
AB_API enum ab_status ab_rope_apply(const struct ab_rope_params *p,
                                    int64_t seq_len, const struct ab_tensor *x,
                                    enum ab_layout layout,
                                    const int64_t *positions, int is_key,
                                    float *out);
/* The same as a job of independent pieces.  Validates everything and
 * copies what the cos/sin table needs at creation (p, its factor arrays and
 * positions are read only during the call); the pieces fill the table, each
 * block of tokens once, by whichever piece needs it first.  Allocates the
 * job and the table; copies x's descriptor and borrows x->data and out
 * until ab_job_free. */
AB_API enum ab_status ab_rope_apply_job(const struct ab_rope_params *p,
                                        int64_t seq_len,
                                        const struct ab_tensor *x,
                                        enum ab_layout layout,
                                        const int64_t *positions, int is_key,
                                        float *out, ab_job_t **job);
/* ab_rope_table as a job of row ranges.  Validates everything first;
 * allocates the job (p itself is copied); borrows positions, cos_out,
 * sin_out and, for longrope, p's factor arrays until ab_job_free. */
AB_API enum ab_status ab_rope_table_job(const struct ab_rope_params *p,
                                        int64_t seq_len,
                                        const int64_t *positions, int64_t n,
                                        float *cos_out, float *sin_out,
                                        ab_job_t **job);

/* ------------------------------------------------------------------------
 * Attention-bias families (docs/methods.md#attention-biases).
 * ------------------------------------------------------------------------ */
enum ab_bias_method {
  AB_BIAS_NONE = 0,
  AB_BIAS_ALIBI = 1,
  AB_BIAS_T5 = 2,
  AB_BIAS_FIRE = 3,
  AB_BIAS_KERPLE = 4,
  AB_BIAS_METHOD_LAST_ /* never use */
};
/* "none", "alibi", "t5", "fire", "kerple"; parse gives -1 if unknown. */
AB_API int ab_bias_method_parse(const char *name);
AB_API const char *ab_bias_method_name(enum ab_bias_method m);

/* One FIRE MLP layer: weight [out, in], bias [out] (any float dtype). */
struct ab_fire_layer {
  const struct ab_tensor *weight;
  const struct ab_tensor *bias;
};

struct ab_bias_params {
  enum ab_bias_method method;
  int64_t num_heads;
  /* alibi */
  double max_bias;            /* default 8; >= 0 */
  const float *slopes;        /* [num_heads] explicit slopes, or NULL */
  /* t5 */
  const struct ab_tensor *table; /* [num_buckets, num_heads], or NULL for
                                    buckets alone (see num_buckets) */
  int bidirectional;          /* default 1 */
  int64_t max_distance;       /* relative_attention_max_distance, def. 128 */
  /* fire: c, L and eps are doubles; the layers any float dtype, read in
   * double (a float64 MLP keeps every digit) */
  double c, L, eps;           /* eps default 0 */
  int n_layers;
  const struct ab_fire_layer *layers; /* in 1 -> ... -> num_heads or 1 */
  /* kerple */
  int kerple_power;           /* 0: log variant, 1: power variant */
  const float *r1, *r2;       /* [num_heads] */
  /* The fields below come last so that the offsets of those above stay
   * what they were. */
  /* t5: the bucket count (relative_attention_num_buckets); 0, the default,
   * takes the table's rows.  With a table it must equal them.  Without a
   * table only buckets can be computed (ab_bias_table with bias NULL; a
   * bias or attention refuses it, naming "table"); Hugging Face's
   * T5Config default is 32. */
  int64_t num_buckets;
  /* Double forms of the per-head arrays, NULL by default; give at most one
   * form of each.  Kerple is evaluated in double, so r1_f64 and r2_f64 keep
   * every digit (the float forms widen exactly).  ALiBi's table is a
   * float32 product, so slopes_f64 is rounded to float32 once, as
   * ab_alibi_slopes' are, and must be finite in float32. */
  const double *slopes_f64;
  const double *r1_f64, *r2_f64;
};
/* Fill p with the defaults: method none, max_bias 8, bidirectional,
 * max_distance 128, num_buckets 0 (the table's), c and L NaN (FIRE
 * requires them), eps 0, every pointer NULL.  NULL is a no-op (as for
 * every *_init). */
AB_API void ab_bias_params_init(struct ab_bias_params *p);

/* Geometry shared by bias tables and attention: query row r sits at
 * position q_offset + r, key j at j.  ab_geometry_init sets q_offset to
 * k_len - q_len (bottom-right), no causality, unbounded window. */
struct ab_geometry {
  int64_t q_len, k_len, q_offset;
  int causal;
  int64_t window_left, window_right; /* inclusive, -1 unbounded */
};
AB_API void ab_geometry_init(struct ab_geometry *g, int64_t q_len,
                             int64_t k_len);

/* ALiBi slopes[num_heads] (ggml form; max_bias 8 = paper, BLOOM, MPT);
 * num_heads >= 1, max_bias finite and >= 0.  Allocates nothing. */
AB_API enum ab_status ab_alibi_slopes(int64_t num_heads, double max_bias,
                                      float *slopes);

/* T5 bucket of rel = key - query, float32 exactly as Hugging Face computes
 * it.  Returns -1 and records the error when the other arguments fail
 * ab_t5_check (or rel is INT64_MIN). */
AB_API int32_t ab_t5_bucket(int64_t rel, int64_t num_buckets,
                            int bidirectional, int64_t max_distance);
/* T5 parameters: 1 <= num_buckets <= 2^24 with at least one exact bucket
 * per direction (max_exact = half of one direction's buckets), and
 * max_distance > max_exact (else HF's log(max_distance/max_exact) is 0). */
AB_API enum ab_status ab_t5_check(int64_t num_buckets, int bidirectional,
                                  int64_t max_distance);

/* Validate p for p->num_heads (>= 1) heads: the method's parameters, the
 * per-head arrays, the T5 table's shape (or, without a table, num_buckets),
 * FIRE's layer chain, ...  Allocates nothing. */
AB_API enum ab_status ab_bias_check(const struct ab_bias_params *p);

/* bias [num_heads, q_len, k_len] float32 (masked cells -inf, from g's
 * causal flag and window), and/or buckets [q_len, k_len] int32 (T5 only,
 * unmasked; they need no table).  Either output may be NULL, not both.  Builds the job below
 * and runs it on the calling thread: allocates it, a resolved copy of p
 * and small per-distance tables (T5 buckets, Kerple and FIRE values), all
 * freed before it returns.  FIRE's c and L are required (NaN after
 * ab_bias_params_init); a FIRE layer's bias may be NULL (zeros). */
AB_API enum ab_status ab_bias_table(const struct ab_bias_params *p,
                                    const struct ab_geometry *g, float *bias,
                                    int32_t *buckets);
/* The same as a job of row blocks (per head, except FIRE whose pieces
 * write every head).  Validates everything first; allocates the job with
 * a copy of p's parameters and tables (tables and slopes in float32,
 * Kerple's and FIRE's parameters in double; p and its arrays are read only
 * during the call); borrows bias and buckets until ab_job_free.  Pieces
 * need no scratch. */
AB_API enum ab_status ab_bias_table_job(const struct ab_bias_params *p,
                                        const struct ab_geometry *g,
                                        float *bias, int32_t *buckets,
                                        ab_job_t **job);

/* ------------------------------------------------------------------------
 * Analysis (docs/methods.md#analysis): what a position encoding does at a
 * length, from its parameters alone, in double.
 * ------------------------------------------------------------------------ */

/* Where a RoPE pair's frequency sits between kept as trained and divided by
 * the whole scaling factor. */
enum ab_rope_band {
  AB_ROPE_BAND_KEPT = 0,        /* unchanged: the pair extrapolates */
  AB_ROPE_BAND_RAMP = 1,        /* in between */
  AB_ROPE_BAND_INTERPOLATED = 2 /* divided by the whole factor */
};

/* One frequency of a RoPE configuration, before and after its scaling. */
struct ab_rope_pair {
  double inv_freq_original; /* rope_theta^(-2k/rotary_dim) (vision2d:
                               -2k/(rotary_dim/2)): no scaling applied */
  double inv_freq;          /* as ab_rope_inv_freq gives it at seq_len */
  double scale;             /* inv_freq / inv_freq_original */
  double ramp;              /* the method's own blend weight, 0 (kept) to 1
                               (interpolated): YaRN's ramp, Llama 3's
                               1 - smooth, NTK's exponent share 2k/(r-2);
                               LongRoPE's ln(ext_k)/ln(factor) may leave
                               [0, 1] */
  int band;                 /* enum ab_rope_band */
};

/* The resolved scaling of a RoPE configuration at a length. */
struct ab_rope_scaling_info {
  int64_t rotary_dim, n_freq;
  double rope_theta;       /* the base in use: NTK's and dynamic NTK's
                              adjusted one, else rope_theta */
  double factor;           /* resolved factor (1 where the type has none);
                              dynamic NTK: the effective factor at seq_len */
  double attention_factor; /* multiplies cos and sin */
  int64_t original_max_position_embeddings; /* the length the type scales
                              from (0 when it uses none) */
  double yarn_low, yarn_high; /* YaRN's correction range in pair indices
                                 (NaN for the other types) */
};

/* Per-pair frequencies before and after scaling, with the factor, blend
 * weight and band of each (pairs [n_freq], may be NULL), and the resolved
 * scaling (info, may be NULL), at the current length seq_len (dynamic,
 * longrope).  The same formulas as ab_rope_inv_freq.  Allocates nothing. */
AB_API enum ab_status ab_rope_pairs(const struct ab_rope_params *p,
                                    int64_t seq_len,
                                    struct ab_rope_pair *pairs,
                                    struct ab_rope_scaling_info *info);

/* RoPE's long-term decay (RoFormer, Su et al. 2021, section 3.4.3) at the
 * relative distances r[0..n): with the P = n_freq frequencies theta_k and
 * S_j = sum_{k<j} exp(i r theta_k),
 *   bound[t]    = (1/P) sum_{j=1..P} |S_j|       (RoFormer's figure 2)
 *   mean_cos[t] = (1/P) sum_k cos(r theta_k)     (q.k of q = k a random
 *                                                 unit vector, expected)
 * in double.  Distances may be any finite reals; either output may be
 * NULL, not both.  Allocates nothing. */
AB_API enum ab_status ab_rope_decay(const double *inv_freq, int64_t n_freq,
                                    const double *r, int64_t n,
                                    double *bound, double *mean_cos);
/* The same as a job of distance blocks.  Validates everything first;
 * allocates the job; borrows every array until ab_job_free. */
AB_API enum ab_status ab_rope_decay_job(const double *inv_freq,
                                        int64_t n_freq, const double *r,
                                        int64_t n, double *bound,
                                        double *mean_cos, ab_job_t **job);

/* Where T5's buckets begin: first[b], for each bucket b of one direction
 * (b < num_buckets/2 when bidirectional, else < num_buckets), is the
 * smallest distance n = |key - query| whose bucket is b (keys after the
 * query of a bidirectional table use bucket b + num_buckets/2 at the same
 * distances), or -1 when the rounding skips bucket b.  Every distance from
 * first[last] on shares the last bucket: there T5 stops telling distances
 * apart.  Parameters as ab_t5_check.  Allocates nothing. */
AB_API enum ab_status ab_t5_bucket_starts(int64_t num_buckets,
                                          int bidirectional,
                                          int64_t max_distance,
                                          int64_t *first);

/* ------------------------------------------------------------------------
 * Attention (docs/methods.md#attention).
 *
 * scores = scale * q.k^T -> softcap c*tanh(s/c) -> + position bias
 *          -> + attn_bias -> masks (causal, window, kv_lens) to -inf
 * output = softmax(scores) . v,  lse = log sum exp(scores),
 * weights = softmax(scores).  A fully masked row gives output 0, weights 0
 * and lse -inf.  No Nq x Nk buffer exists unless weights are asked for.
 * ------------------------------------------------------------------------ */
struct ab_attn_params {
  /* q [B, Hq, Nq, D], k [B, Hkv, Nk, D], v [B, Hkv, Nk, Dv] in `layout`
   * (BSHD swaps the seq and head axes); rank 4 (rank 3 means B = 1 and
   * rank 2 B = 1, one head), each tensor's its own: k and v [Nk, D] with
   * q [Hq, Nq, D] is multi-query attention.  Any float dtype, any
   * strides. */
  const struct ab_tensor *q, *k, *v;
  enum ab_layout layout;
  int has_scale;       /* 0: scale = 1/sqrt(D) */
  double scale;
  double softcap;      /* 0: off; > 0: c */
  /* Geometry: q_len/k_len are taken from the tensors; q_offset, causal and
   * window from here (ab_attn_params_init: bottom-right, non-causal). */
  int has_q_offset;
  int64_t q_offset;
  int causal;
  int64_t window_left, window_right; /* -1 unbounded */
  const int32_t *kv_lens;            /* [B], each in 0..Nk, or NULL */
  /* RoPE on q and k before the scores, or NULL.  Positions default to
   * q_offset + r and j; explicit ones are [n_axes, Nq] / [n_axes, Nk]. */
  const struct ab_rope_params *rope;
  int64_t rope_seq_len;              /* 0: max position + 1 */
  const int64_t *q_positions, *k_positions;
  /* Position bias, computed inside the key loop, or NULL. num_heads = Hq;
   * T5 needs its table. */
  const struct ab_bias_params *bias;
  /* Additive bias broadcastable to [B, Hq, Nq, Nk] (rank <= 4, dims
   * right-aligned, each 1 or full), or NULL.  Always head-major. */
  const struct ab_tensor *attn_bias;
  /* Outputs, float32, caller-allocated.  out: [B, Hq, Nq, Dv] in `layout`
   * (required).  lse: [B, Hq, Nq] and weights [B, Hq, Nq, Nk] head-major in
   * both layouts (optional, NULL to skip). */
  float *out;
  float *lse;
  float *weights;
  /* Nonzero: the data of q, k, v and attn_bias is still arriving (a
   * request body being received) when ab_attention_job is called.  The job
   * then reads none of it until its pieces run, and ab_job_piece_reads
   * says how much of each input a piece needs.  Refused (INVALID_ARG
   * naming "inputs_later") where building the job must read them: RoPE,
   * or k or v that are not float32 with unit inner stride. */
  int inputs_later;
  /* How many threads will run the job's pieces: a hint for how finely to
   * cut the work.  0: not known, so the job is cut for a machine of many
   * threads (when the blocks are few, as in decoding, their keys are split
   * into up to 64 pieces); n > 0: into about 4 pieces per thread at most.
   * Results are the same either way, up to float rounding.  ab_attention,
   * which runs every piece on the calling thread, takes 0 as 1. */
  int threads;
};
/* Zero p, then layout bhsd and an unbounded window (-1, -1): the default
 * scale, bottom-right q_offset, non-causal, no RoPE, no bias. */
AB_API void ab_attn_params_init(struct ab_attn_params *p);

/* Validate and build the attention job, splitting the work by batch x
 * query head x query block, costly pieces first.  q is read in place (any
 * dtype), k and v too when they are float32 with unit inner stride;
 * otherwise k/v are converted to float32 copies, and with RoPE q and k are
 * rotated into float32 copies.  A translation-invariant position bias is
 * tabulated per head over the Nq + Nk - 1 distances.  p, the tensor
 * descriptors, the rope and bias parameters and the positions are read
 * only during the call; the data of q, k, v and attn_bias, kv_lens and
 * the outputs are borrowed until ab_job_free.  Memory it allocates is
 * O(B*H*N*D), never O(Nq*Nk); pieces need ab_job_scratch_size bytes. */
AB_API enum ab_status ab_attention_job(const struct ab_attn_params *p,
                                       ab_job_t **job);
/* Build, run on the calling thread, free. */
AB_API enum ab_status ab_attention(const struct ab_attn_params *p);

/* Estimated flops of an attention call (4*B*Hq*Nq*Nk*D, visible part only
 * for causal/window masks), computed from shapes alone, for budgets that
 * must be decided before allocating.  Precisely 2*(D + Dv) per visible
 * (query, key) pair, kv_lens included.  Returns -1 and records the error
 * (as ab_attention_job would) when the shapes, scalars, masks, attn_bias or
 * rope parameters are invalid; out may still be NULL, and the position-bias
 * parameters are not checked (only ab_attention_job resolves them).
 * Allocates nothing. */
AB_API double ab_attention_flops(const struct ab_attn_params *p);

#ifdef __cplusplus
}
#endif
#endif /* AB_H */
