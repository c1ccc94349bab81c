/* attn.c: fused flash-style attention -- validation, job construction
 * (dtype conversion, RoPE, bias resolution, piece ordering) and the
 * per-piece loop over key tiles with an online softmax.  The arithmetic
 * lives in the kernels of kernels/attn.h; this file decides what to compute.
 *
 * Work split.  A piece is one batch entry x one kv head x a chunk of the
 * query heads that share it (GQA) x a block of query positions.  Its rows
 * ("virtual rows", at most max_rows) are the (head, position) pairs, head
 * major, so a group of query heads reads its kv head once per tile and a
 * decode step (Nq = 1) still fills a block.  The block walks the keys in
 * tiles between the first and last key any of its rows can see; tiles every
 * row sees in full skip the mask, the others are masked per row.  Nothing
 * of size Nq x Nk exists unless the caller asked for the weights.
 *
 * Few rows.  A block of at most AB__ATTN_ROWS_MAX rows (decoding: a few
 * new tokens per query head) runs on the kernels vectorised over the head
 * dimension (qk_rows, pv_rows) instead of padding its rows to a vector.
 * At most 4 rows (a decode step of a GQA group of up to 4 heads) pack
 * their scores 4 to a key where no mask, bias or softcap touches the
 * tile, so the softmax's vectors are full too (softmax_rows4).
 *
 * Split keys.  When the blocks are too few to keep every thread streaming
 * K and V (decoding: B * Hkv blocks; the caller may say how many threads
 * there are, ab_attn_params.threads), each block's keys are split into
 * nsplit chunks, one piece each.  A chunk's piece leaves its unnormalised
 * output rows with their running max and sum in the job's `part` buffer;
 * the piece that finishes a block's last chunk (a per-block counter) merges
 * the partial softmaxes and writes the block's outputs.
 *
 * Memory.  q is read in place (gathered per block into a pre-scaled copy
 * in scratch); k and v are read in place when they are float32, bfloat16
 * or float16 with unit inner stride and no RoPE (16-bit tiles are widened
 * as they are used: half the memory traffic of float32), otherwise
 * converted once at job creation to float32 [B, Hkv, N, D] (with RoPE, q
 * and k are rotated into float32 copies in their own layout).
 * Translation-invariant position biases (ALiBi, T5, Kerple) are tabulated
 * once per head over the Nq+Nk-1 possible distances; FIRE (which also
 * depends on the query position) is evaluated per row and tile.
 * Everything allocated is O(B*H*N*D). */
#include "attn-internal.h"
#include "bias-internal.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Query offsets beyond this magnitude are rejected, so position arithmetic
 * (q_offset + row, distances to keys) never overflows int64; windows of any
 * size are safe in ab__visible_keys. */
#define POS_LIMIT ((int64_t)1 << 40)

/* Slack after each head's distance table: padded rows of a block extend the
 * last row's pointer by up to AB__ATTN_ROW_PAD - 1 entries. */
#define REL_SLACK AB__ATTN_ROW_PAD

/* Pieces are ordered costliest first only to within this many cost levels
 * (see cmp_cost). */
#define COST_LEVELS 2.0

/* ==== parameters and validation ======================================== */

void ab_attn_params_init(struct ab_attn_params *p)
{
  if (!p)
    return;
  memset(p, 0, sizeof *p);
  p->layout = AB_LAYOUT_BHSD;
  p->window_left = -1;
  p->window_right = -1;
}

/* Shapes and strides resolved from the parameters. */
struct attn_shape {
  int64_t B, Hq, Hkv, G, Nq, Nk, D, Dv;
  /* [batch, head, seq, dim] strides of q, k, v (0 for implicit axes) */
  int64_t qst[4], kst[4], vst[4];
  double scale;
  int64_t q_offset, wl, wr;
  int causal;
  int64_t abst[4]; /* attn_bias strides per (b, h, r, j); 0 broadcasts */
  int rope_axes;
};

/* Sizes [B, H, S, dim] and element strides of a rank 2..4 tensor in
 * `layout` (rank 3 is [H, S, D] / [S, H, D], rank 2 is [S, D]); `stride`
 * overrides t's strides (for float32 copies with the same shape). */
static void view4(const struct ab_tensor *t, const int64_t *stride,
                  enum ab_layout layout, int64_t sh[4], int64_t st[4])
{
  int n = t->ndim, hax = -1, sax;

  if (!stride)
    stride = t->stride;
  sh[0] = 1, st[0] = 0, sh[1] = 1, st[1] = 0;
  if (n == 4) {
    sh[0] = t->shape[0], st[0] = stride[0];
    hax = layout == AB_LAYOUT_BHSD ? 1 : 2;
    sax = layout == AB_LAYOUT_BHSD ? 2 : 1;
  } else if (n == 3) {
    hax = layout == AB_LAYOUT_BHSD ? 0 : 1;
    sax = layout == AB_LAYOUT_BHSD ? 1 : 0;
  } else {
    sax = 0;
  }
  if (hax >= 0)
    sh[1] = t->shape[hax], st[1] = stride[hax];
  sh[2] = t->shape[sax], st[2] = stride[sax];
  sh[3] = t->shape[n - 1], st[3] = stride[n - 1];
}

/* Row-major strides of t's shape. */
static void contiguous_strides(const struct ab_tensor *t, int64_t st[4])
{
  int64_t s = 1;
  int i;

  for (i = t->ndim - 1; i >= 0; i--) {
    st[i] = s;
    s *= t->shape[i];
  }
}

/* Re-record the current error with its argument under `prefix.` (errors of
 * the rope and bias parameter checks name their own fields). */
static enum ab_status prefix_error(enum ab_status st, const char *prefix)
{
  const struct ab_error *e = ab_last_error();
  size_t n = strlen(prefix);
  char arg[sizeof e->arg + 32], msg[sizeof e->msg];

  if (strncmp(e->arg, prefix, n) == 0 && (e->arg[n] == 0 || e->arg[n] == '.'))
    return st;
  if (e->arg[0])
    snprintf(arg, sizeof arg, "%s.%s", prefix, e->arg);
  else
    snprintf(arg, sizeof arg, "%s", prefix);
  snprintf(msg, sizeof msg, "%s", e->msg);
  return ab__fail(st, arg, "%s", msg);
}

static const char *layout_name(enum ab_layout l)
{
  return l == AB_LAYOUT_BSHD ? "bshd" : "bhsd";
}

/* Everything the job and the flop count need from p, checked in one place.
 * need_out: also require the output buffer (not needed for flops). */
static enum ab_status attn_check(const struct ab_attn_params *p,
                                 struct attn_shape *s, int need_out)
{
  int64_t qsh[4], ksh[4], vsh[4], n;
  enum ab_status st;
  int i;

  memset(s, 0, sizeof *s);
  if (!p)
    return ab__fail(AB_STATUS_INVALID_ARG, "p",
                    "attention parameters are NULL");
  if (p->layout != AB_LAYOUT_BHSD && p->layout != AB_LAYOUT_BSHD)
    return ab__fail(AB_STATUS_INVALID_ARG, "layout",
                    "layout %d is neither bhsd (0) nor bshd (1)",
                    (int)p->layout);
  if (p->threads < 0)
    return ab__fail(AB_STATUS_INVALID_ARG, "threads",
                    "threads is %d; it counts the threads that will run the "
                    "job (0: not known)",
                    p->threads);
  if ((st = ab__check_tensor(p->q, "q", 0)) != AB_STATUS_OK ||
      (st = ab__check_tensor(p->k, "k", 0)) != AB_STATUS_OK ||
      (st = ab__check_tensor(p->v, "v", 0)) != AB_STATUS_OK)
    return st;
  /* Each tensor's rank is its own (rank 3: B = 1, rank 2: B = 1 and one
   * head), so a multi-query k and v may come as [Nk, D] beside q
   * [B=1, Hq, Nq, D]; the shapes they imply must then agree. */
  {
    const struct ab_tensor *t[3] = {p->q, p->k, p->v};
    static const char *const names[3] = {"q", "k", "v"};
    for (i = 0; i < 3; i++)
      if (t[i]->ndim < 2 || t[i]->ndim > 4)
        return ab__fail(AB_STATUS_BAD_SHAPE, names[i],
                        "%s has rank %d; attention takes rank 2, 3 or 4",
                        names[i], (int)t[i]->ndim);
  }
  view4(p->q, NULL, p->layout, qsh, s->qst);
  view4(p->k, NULL, p->layout, ksh, s->kst);
  view4(p->v, NULL, p->layout, vsh, s->vst);
  s->B = qsh[0], s->Hq = qsh[1], s->Nq = qsh[2], s->D = qsh[3];
  s->Hkv = ksh[1], s->Nk = ksh[2], s->Dv = vsh[3];
  if (ksh[0] != s->B)
    return ab__fail(AB_STATUS_BAD_SHAPE, "k",
                    "k has batch %lld but q has batch %lld",
                    (long long)ksh[0], (long long)s->B);
  if (ksh[3] != s->D)
    return ab__fail(AB_STATUS_BAD_SHAPE, "k",
                    "k has head_dim %lld but q has head_dim %lld",
                    (long long)ksh[3], (long long)s->D);
  if (vsh[0] != s->B)
    return ab__fail(AB_STATUS_BAD_SHAPE, "v",
                    "v has batch %lld but q has batch %lld",
                    (long long)vsh[0], (long long)s->B);
  if (vsh[1] != s->Hkv)
    return ab__fail(AB_STATUS_BAD_SHAPE, "v",
                    "v has %lld heads but k has %lld (%s layout)",
                    (long long)vsh[1], (long long)s->Hkv,
                    layout_name(p->layout));
  if (vsh[2] != s->Nk)
    return ab__fail(AB_STATUS_BAD_SHAPE, "v",
                    "v has %lld keys but k has %lld (%s layout)",
                    (long long)vsh[2], (long long)s->Nk,
                    layout_name(p->layout));
  if (s->Hq % s->Hkv != 0)
    return ab__fail(AB_STATUS_BAD_SHAPE, "k",
                    "q has %lld heads, not a multiple of the %lld kv heads "
                    "of k",
                    (long long)s->Hq, (long long)s->Hkv);
  s->G = s->Hq / s->Hkv;

  /* Scores are float32: scale, softcap and the factor scale / softcap the
   * kernels multiply q by must be finite float32 numbers (a softcap that
   * rounds to 0, or a factor that rounds to inf, would give NaN). */
  if (p->has_scale) {
    if (!(fabs(p->scale) <= FLT_MAX))
      return ab__fail(AB_STATUS_INVALID_ARG, "scale",
                      "scale %g is not a finite float32 number (|scale| <= "
                      "%g)",
                      p->scale, (double)FLT_MAX);
    s->scale = p->scale;
  } else {
    s->scale = 1.0 / sqrt((double)s->D);
  }
  if (!(p->softcap >= 0.0) || !isfinite(p->softcap))
    return ab__fail(AB_STATUS_INVALID_ARG, "softcap",
                    "softcap %g must be finite and >= 0 (0 turns it off)",
                    p->softcap);
  if (p->softcap > 0.0 &&
      (p->softcap < FLT_MIN || p->softcap > FLT_MAX ||
       !(fabs(s->scale / p->softcap) <= FLT_MAX)))
    return ab__fail(AB_STATUS_INVALID_ARG, "softcap",
                    "softcap %g is out of float32's range for scale %g "
                    "(needs %g <= softcap and |scale / softcap| <= %g)",
                    p->softcap, s->scale, (double)FLT_MIN, (double)FLT_MAX);
  s->q_offset = p->has_q_offset ? p->q_offset : s->Nk - s->Nq;
  if (s->q_offset > POS_LIMIT || s->q_offset < -POS_LIMIT)
    return ab__fail(AB_STATUS_OUT_OF_RANGE, "q_offset",
                    "q_offset %lld is beyond +-2^40", (long long)s->q_offset);
  if (p->window_left < -1)
    return ab__fail(AB_STATUS_INVALID_ARG, "window",
                    "window left %lld must be >= 0, or -1 for unbounded",
                    (long long)p->window_left);
  if (p->window_right < -1)
    return ab__fail(AB_STATUS_INVALID_ARG, "window",
                    "window right %lld must be >= 0, or -1 for unbounded",
                    (long long)p->window_right);
  s->wl = p->window_left;
  s->wr = p->window_right;
  s->causal = p->causal != 0;
  if (p->kv_lens)
    for (n = 0; n < s->B; n++)
      if (p->kv_lens[n] < 0 || p->kv_lens[n] > s->Nk) {
        char arg[32];
        snprintf(arg, sizeof arg, "kv_lens.%lld", (long long)n);
        return ab__fail(AB_STATUS_OUT_OF_RANGE, arg,
                        "kv_lens[%lld] = %d is not in 0..%lld (the key "
                        "length)",
                        (long long)n, (int)p->kv_lens[n], (long long)s->Nk);
      }

  if (p->attn_bias) {
    const struct ab_tensor *a = p->attn_bias;
    const int64_t full[4] = {s->B, s->Hq, s->Nq, s->Nk};
    if ((st = ab__check_tensor(a, "attn_bias", 0)) != AB_STATUS_OK)
      return st;
    for (i = 0; i < a->ndim; i++) {
      int f = 4 - a->ndim + i;
      if (a->shape[i] != 1 && a->shape[i] != full[f])
        return ab__fail(AB_STATUS_BAD_SHAPE, "attn_bias",
                        "attn_bias dimension %d is %lld; it must be 1 or %lld "
                        "to broadcast to [B, Hq, Nq, Nk] = [%lld, %lld, %lld, "
                        "%lld]",
                        i, (long long)a->shape[i], (long long)full[f],
                        (long long)full[0], (long long)full[1],
                        (long long)full[2], (long long)full[3]);
      s->abst[f] = a->shape[i] == 1 ? 0 : a->stride[i];
    }
  }

  if (p->rope) {
    int64_t rot;
    if ((st = ab_rope_check(p->rope, &rot, NULL, &s->rope_axes)) !=
        AB_STATUS_OK)
      return prefix_error(st, "rope");
    if (p->rope->head_dim != s->D)
      return ab__fail(AB_STATUS_BAD_SHAPE, "rope.head_dim",
                      "rope.head_dim %lld differs from the head_dim %lld of q "
                      "and k",
                      (long long)p->rope->head_dim, (long long)s->D);
    if (p->rope_seq_len < 0)
      return ab__fail(AB_STATUS_INVALID_ARG, "rope_seq_len",
                      "rope_seq_len %lld is negative (0: max position + 1)",
                      (long long)p->rope_seq_len);
  }

  /* Output sizes: every product must fit in int64 and in bytes. */
  if (ab_mul_overflow(s->B, s->Hq, &n) || ab_mul_overflow(n, s->Nq, &n) ||
      ab_mul_overflow(n, s->Dv, &n) || (uint64_t)n > SIZE_MAX / 4)
    return ab__fail(AB_STATUS_OVERFLOW, "out",
                    "output [%lld, %lld, %lld, %lld] overflows",
                    (long long)s->B, (long long)s->Hq, (long long)s->Nq,
                    (long long)s->Dv);
  if (p->weights &&
      (ab_mul_overflow(s->B, s->Hq, &n) || ab_mul_overflow(n, s->Nq, &n) ||
       ab_mul_overflow(n, s->Nk, &n) || (uint64_t)n > SIZE_MAX / 4))
    return ab__fail(AB_STATUS_OVERFLOW, "weights",
                    "weights [%lld, %lld, %lld, %lld] overflow",
                    (long long)s->B, (long long)s->Hq, (long long)s->Nq,
                    (long long)s->Nk);
  if (need_out && !p->out)
    return ab__fail(AB_STATUS_INVALID_ARG, "out",
                    "out is NULL; the output buffer is required");
  return AB_STATUS_OK;
}

/* Visible (query, key) pairs of one batch entry and one head. */
static double visible_pairs(const struct attn_shape *s, int64_t kvlen)
{
  double sum = 0.0;
  int64_t r, lo, hi;

  for (r = 0; r < s->Nq; r++) {
    ab__visible_keys(s->q_offset + r, kvlen, s->causal, s->wl, s->wr, &lo,
                     &hi);
    sum += (double)(hi - lo);
  }
  return sum;
}

static double flops_of(const struct attn_shape *s, const int32_t *kv_lens)
{
  double pairs = 0.0;
  int64_t b;

  if (!kv_lens)
    pairs = (double)s->B * visible_pairs(s, s->Nk);
  else
    for (b = 0; b < s->B; b++)
      pairs += visible_pairs(s, kv_lens[b]);
  /* 2 flops per multiply-add: q.k over D and p.v over Dv. */
  return pairs * (double)s->Hq * 2.0 * (double)(s->D + s->Dv);
}

double ab_attention_flops(const struct ab_attn_params *p)
{
  struct attn_shape s;

  if (attn_check(p, &s, 0) != AB_STATUS_OK)
    return -1.0;
  return flops_of(&s, p->kv_lens);
}

/* ==== the job =========================================================== */

struct attn_ctx {
  struct attn_shape s;
  const struct ab__kernels *kern;
  float qscale, softcap;
  const int32_t *kv_lens;
  /* q as read by the pieces: any dtype, strides s.qst (or a RoPE copy) */
  const void *q;
  int32_t q_dtype;
  int64_t qst[4];
  /* k, v with unit inner stride (elements of type ke, ve); strides per
   * (b, h, j) in elements */
  const void *k, *v;
  enum ab__elem ke, ve;
  int64_t kst[3], vst[3];
  int dot; /* scores by qk_tile_bf16 (bfloat16 q and k) */
  float *q_own, *k_own, *v_own;
  const void *in_q, *in_k, *in_v; /* the caller's (ab_job_piece_reads) */
  /* position bias */
  struct ab__bias bias; /* all zero (no family) when p->bias is NULL */
  int bias_rows;        /* evaluated per row and key tile (AB__BIAS_POSITION) */
  float *rel;          /* [Hq][rel_stride] by distance, or NULL */
  int64_t rel_stride, rel_u0;
  /* attn_bias */
  const void *ab;
  int32_t ab_dtype;
  int need_tb;
  /* outputs */
  float *out, *lse, *weights;
  int64_t ost[4];
  int stream_out; /* out is written with non-temporal stores */
  /* blocking */
  int64_t bq, nqb, hg, nhc, key_tile, mp_max;
  /* query blocks per piece (consecutive blocks of one head chunk), and
   * the pieces per head chunk they make; a block's scratch and its size */
  int64_t qpb, nqs;
  size_t block_scratch;
  int64_t rows_max, rows_tile; /* few-row blocks and their key tile */
  int threads;                 /* the caller's hint (0: not known) */
  int64_t nsplit;      /* key chunks per block (>= 1) */
  int64_t *order;      /* piece -> block x nsplit + chunk, costliest first */
  /* split keys: per block x chunk, part_rec floats (o [mp_max][Dv], then
   * mx and l [mp_max]); per block, chunks finished (modulo nsplit) */
  float *part;
  int64_t part_rec;
  _Atomic int64_t *arrive;
  /* scratch layout (byte offsets) */
  size_t off_qt, off_s, off_ot, off_tb, off_mx, off_l, off_alpha, off_lo,
      off_hi, off_lo64, off_hi64, off_bptr, off_row, off_kw, off_vw,
      off_qrow, off_orow;
};

static void attn_destroy(struct ab_job *job)
{
  struct attn_ctx *c = job->ctx;

  if (!c)
    return;
  ab__free_aligned(c->q_own);
  ab__free_aligned(c->k_own);
  ab__free_aligned(c->v_own);
  ab__free_aligned(c->rel);
  ab__free_aligned(c->part);
  ab__free(c->arrive);
  ab__free(c->order);
  ab__bias_release(&c->bias); /* a no-op on the zeroed struct */
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Lay out one scratch region of rows x cols elements at *off, 64-byte
 * aligned; returns -1 when its size or the total would overflow. */
static int carve(size_t *total, size_t *off, int64_t rows, int64_t cols,
                 size_t elem)
{
  int64_t count;
  size_t n;

  if (ab_mul_overflow(rows, cols, &count) ||
      (uint64_t)count > (SIZE_MAX - 64) / elem)
    return -1;
  n = ((size_t)count * elem + 63) & ~(size_t)63;
  if (*total > SIZE_MAX - n)
    return -1;
  *off = *total;
  *total += n;
  return 0;
}

/* n floats, 64-byte aligned; NULL when n floats do not fit in memory. */
static float *alloc_f32(int64_t n)
{
  if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float))
    return NULL;
  return ab__malloc_aligned((size_t)n * sizeof(float));
}

/* A float32 copy of a whole tensor as [B, H, N, dim] row-major. */
static enum ab_status copy_bhsd(const struct ab_tensor *t, const int64_t sh[4],
                                const int64_t st[4], const char *name,
                                float **out, int64_t ost[3])
{
  struct ab_tensor view;
  int64_t n = sh[0] * sh[1] * sh[2] * sh[3]; /* checked by the tensor */
  enum ab_status st2;
  int i;

  *out = alloc_f32(n);
  if (!*out)
    return ab__fail(AB_STATUS_NO_MEMORY, name,
                    "cannot allocate a float32 copy of %s (%lld elements)",
                    name, (long long)n);
  memset(&view, 0, sizeof view);
  view.data = t->data;
  view.dtype = t->dtype;
  view.ndim = 4;
  for (i = 0; i < 4; i++)
    view.shape[i] = sh[i], view.stride[i] = st[i];
  if ((st2 = ab_tensor_to_f32(&view, *out)) != AB_STATUS_OK)
    return prefix_error(st2, name);
  ost[0] = sh[1] * sh[2] * sh[3];
  ost[1] = sh[2] * sh[3];
  ost[2] = sh[3];
  return AB_STATUS_OK;
}

/* The kernels' element type for a dtype they read in place (1), or 0 for
 * a dtype that is converted to float32 first. */
static int kernel_elem(int32_t dtype, enum ab__elem *e)
{
  switch (dtype) {
  case AB_DTYPE_F32: *e = AB__ELEM_F32; return 1;
  case AB_DTYPE_BF16: *e = AB__ELEM_BF16; return 1;
  case AB_DTYPE_F16: *e = AB__ELEM_F16; return 1;
  default: return 0;
  }
}

/* k or v as the pieces read it, [B, Hkv, Nk, dim] with strides st4:
 * in place when float32, bfloat16 or float16 with unit inner stride, else
 * a float32 copy in *own (freed with the job).  Sets *data, its element
 * type and the (b, h, j) strides st3. */
static enum ab_status kv_view(const struct ab_tensor *t,
                              const struct attn_shape *s, const int64_t st4[4],
                              int64_t dim, const char *name, const void **data,
                              enum ab__elem *elem, int64_t st3[3], float **own)
{
  const int64_t sh[4] = {s->B, s->Hkv, s->Nk, dim};
  enum ab_status st;

  if (kernel_elem(t->dtype, elem) && st4[3] == 1) {
    *data = t->data;
    st3[0] = st4[0], st3[1] = st4[1], st3[2] = st4[2];
    return AB_STATUS_OK;
  }
  if ((st = copy_bhsd(t, sh, st4, name, own, st3)) != AB_STATUS_OK)
    return st;
  *data = *own;
  *elem = AB__ELEM_F32;
  return AB_STATUS_OK;
}

/* RoPE positions [n_axes, n]: the caller's, or pos0 + t on every axis. */
static int64_t *default_positions(int axes, int64_t n, int64_t pos0)
{
  int64_t *pos, t;
  int a;

  if ((uint64_t)n > SIZE_MAX / sizeof *pos / (size_t)axes)
    return NULL;
  pos = ab__malloc((size_t)axes * (size_t)n * sizeof *pos);
  if (pos)
    for (a = 0; a < axes; a++)
      for (t = 0; t < n; t++)
        pos[a * n + t] = pos0 + t;
  return pos;
}

/* Positions less the middle of their range, in arrays of our own (the
 * caller's are copied).  The differences are computed modulo 2^64, so
 * even a range spanning all of int64 is defined. */
static enum ab_status centre_positions(int axes, int64_t nq, int64_t nk,
                                       const int64_t **qpos,
                                       int64_t **qpos_own,
                                       const int64_t **kpos,
                                       int64_t **kpos_own)
{
  const int64_t n[2] = {(int64_t)axes * nq, (int64_t)axes * nk};
  const int64_t **pos[2] = {qpos, kpos};
  int64_t **own[2] = {qpos_own, kpos_own};
  int64_t mn = INT64_MAX, mx = INT64_MIN, mid, t;
  int side;

  for (side = 0; side < 2; side++)
    for (t = 0; t < n[side]; t++) {
      mn = ab__min64(mn, (*pos[side])[t]);
      mx = ab__max64(mx, (*pos[side])[t]);
    }
  if (mn > mx)
    return AB_STATUS_OK; /* no positions at all */
  mid = (int64_t)((uint64_t)mn + ((uint64_t)mx - (uint64_t)mn) / 2);
  for (side = 0; side < 2; side++) {
    int64_t *dst = *own[side];
    if (!dst) {
      dst = ab__malloc((size_t)n[side] * sizeof *dst + 1);
      if (!dst)
        return ab__fail(AB_STATUS_NO_MEMORY, "rope",
                        "cannot allocate the centred xpos positions");
      memcpy(dst, *pos[side], (size_t)n[side] * sizeof *dst);
      *own[side] = dst;
    }
    for (t = 0; t < n[side]; t++)
      dst[t] = (int64_t)((uint64_t)dst[t] - (uint64_t)mid);
    *pos[side] = dst;
  }
  return AB_STATUS_OK;
}

/* Rotate q and k (float32 copies in their own shapes and layout). */
static enum ab_status apply_rope(struct attn_ctx *c,
                                 const struct ab_attn_params *p)
{
  const struct attn_shape *s = &c->s;
  int axes = s->rope_axes;
  int64_t *qpos_own = NULL, *kpos_own = NULL, seq_len = p->rope_seq_len, t;
  const int64_t *qpos = p->q_positions, *kpos = p->k_positions;
  int64_t cst[4], sh[4], st4[4], nq = ab_tensor_numel(p->q),
                                 nk = ab_tensor_numel(p->k);
  enum ab_status st = AB_STATUS_OK;

  if (!qpos)
    qpos = qpos_own = default_positions(axes, s->Nq, s->q_offset);
  if (!kpos)
    kpos = kpos_own = default_positions(axes, s->Nk, 0);
  c->q_own = alloc_f32(nq);
  c->k_own = alloc_f32(nk);
  if (!qpos || !kpos || !c->q_own || !c->k_own) {
    st = ab__fail(AB_STATUS_NO_MEMORY, "rope",
                  "cannot allocate the rotated copies of q and k");
    goto done;
  }
  if (seq_len == 0) {
    /* Default length for dynamic/longrope scaling: max position + 1 (at
     * least 1; the caller's positions may be anything, even INT64_MAX). */
    int64_t mx = 0;
    for (t = 0; t < (int64_t)axes * s->Nq; t++)
      mx = ab__max64(mx, qpos[t]);
    for (t = 0; t < (int64_t)axes * s->Nk; t++)
      mx = ab__max64(mx, kpos[t]);
    seq_len = mx < INT64_MAX ? mx + 1 : INT64_MAX;
  }
  if (p->rope->rope_type == AB_ROPE_XPOS) {
    /* xPos scales q by zeta^(p/scale_base) and k by zeta^(-p/scale_base):
     * at |p| beyond ~36k one overflows float32 and the other underflows
     * (inf * 0).  Only the distances reach the logits, so both sides are
     * taken relative to the middle of their positions (docs/methods.md#xpos:
     * centring cancels in q.k; rotations are relative as well). */
    if ((st = centre_positions(axes, s->Nq, s->Nk, &qpos, &qpos_own, &kpos,
                               &kpos_own)) != AB_STATUS_OK)
      goto done;
  }
  if ((st = ab_rope_apply(p->rope, seq_len, p->q, p->layout, qpos, 0,
                          c->q_own)) != AB_STATUS_OK ||
      (st = ab_rope_apply(p->rope, seq_len, p->k, p->layout, kpos, 1,
                          c->k_own)) != AB_STATUS_OK) {
    st = prefix_error(st, "rope");
    goto done;
  }
  c->q = c->q_own;
  c->q_dtype = AB_DTYPE_F32;
  contiguous_strides(p->q, cst);
  view4(p->q, cst, p->layout, sh, c->qst);
  contiguous_strides(p->k, cst);
  view4(p->k, cst, p->layout, sh, st4);
  c->k = c->k_own;
  c->ke = AB__ELEM_F32;
  c->kst[0] = st4[0], c->kst[1] = st4[1], c->kst[2] = st4[2];
done:
  ab__free(qpos_own);
  ab__free(kpos_own);
  return st;
}

/* Tabulate a translation-invariant bias per head over every distance
 * u = pq - j + u0 in [0, Nq + Nk - 2], straight from ab__bias_row at one
 * query position (pq_ref, keys 0 .. Nq+Nk-2 cover all distances). */
static enum ab_status build_rel(struct attn_ctx *c)
{
  const struct attn_shape *s = &c->s;
  int64_t n = s->Nq + s->Nk - 1, pq_ref = s->q_offset + s->Nq - 1, h, j, tot;
  float *tmp;

  c->rel_stride = round_up(n + REL_SLACK, AB__ATTN_ROW_PAD);
  c->rel_u0 = s->Nk - 1 - s->q_offset;
  if (ab_mul_overflow(c->rel_stride, s->Hq, &tot) ||
      (uint64_t)tot > SIZE_MAX / sizeof(float))
    return ab__fail(AB_STATUS_OVERFLOW, "bias",
                    "bias distance table of %lld heads x %lld overflows",
                    (long long)s->Hq, (long long)c->rel_stride);
  c->rel = alloc_f32(tot);
  tmp = ab__malloc((size_t)n * sizeof(float));
  if (!c->rel || !tmp) {
    ab__free(tmp);
    return ab__fail(AB_STATUS_NO_MEMORY, "bias",
                    "cannot allocate the bias distance table (%lld floats)",
                    (long long)tot);
  }
  for (h = 0; h < s->Hq; h++) {
    float *row = c->rel + h * c->rel_stride;
    ab__bias_row(&c->bias, h, pq_ref, 0, n, tmp);
    /* Key j sits at distance pq_ref - j: index (Nq-1) + (Nk-1) - j. */
    for (j = 0; j < n; j++)
      row[n - 1 - j] = tmp[j];
    for (j = n; j < c->rel_stride; j++)
      row[j] = 0.0f;
  }
  ab__free(tmp);
  return AB_STATUS_OK;
}

struct piece_cost {
  double cost;
  int64_t level, kv, idx; /* kv: batch x kv head, the K/V the piece reads */
};

/* Costliest first, but only to within COST_LEVELS cost levels: inside a
 * level the pieces reading the same K/V run back to back (costliest first),
 * so a kv head streams from cache for many blocks in a row instead of every
 * piece touching a different head -- sorted strictly by cost, causal
 * attention at H = 8, N = 2048 took 0.73x the dense time instead of 0.52x
 * because K and V kept coming from DRAM (2 levels measured a few per cent
 * better than 4 or 8 at H = 32, N = 4096, and as good as 1).  The last pieces
 * are still the cheapest blocks of the last kv head, which is what keeps a
 * shared-counter pool balanced. */
static int cmp_cost(const void *a, const void *b)
{
  const struct piece_cost *x = a, *y = b;

  if (x->level != y->level)
    return x->level > y->level ? -1 : 1;
  if (x->kv != y->kv)
    return x->kv < y->kv ? -1 : 1;
  if (x->cost != y->cost)
    return x->cost > y->cost ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The keys any query position r0 .. r0+bq-1 of batch entry b sees: their
 * union [*jlo, *jhi) (both 0 when none is visible). */
static void block_keys(const struct attn_ctx *c, int64_t b, int64_t r0,
                       int64_t bq, int64_t *jlo, int64_t *jhi)
{
  const struct attn_shape *s = &c->s;
  int64_t kvlen = c->kv_lens ? c->kv_lens[b] : s->Nk, r, lo, hi;

  *jlo = INT64_MAX, *jhi = INT64_MIN;
  for (r = r0; r < r0 + bq; r++) {
    ab__visible_keys(s->q_offset + r, kvlen, s->causal, s->wl, s->wr, &lo,
                     &hi);
    if (hi > lo) {
      *jlo = ab__min64(*jlo, lo);
      *jhi = ab__max64(*jhi, hi);
    }
  }
  if (*jlo >= *jhi)
    *jlo = *jhi = 0;
}

/* Chunk `split` of nsplit equal parts of [*lo, *hi), in place. */
static void key_chunk(int64_t nsplit, int64_t split, int64_t *lo,
                      int64_t *hi)
{
  int64_t n = *hi - *lo, a = *lo;

  *lo = a + n * split / nsplit;
  *hi = a + n * (split + 1) / nsplit;
}

/* Key chunks per block: the caller's (tests), else enough to make about
 * AB__ATTN_SPLIT_PIECES pieces (AB__ATTN_SPLIT_PER_THREAD per thread when
 * the caller gave its thread count, if that is fewer) when the blocks
 * alone are fewer, each at least AB__ATTN_SPLIT_MIN_KEYS keys long -- only
 * for blocks of one query block per head (decoding, short q against long
 * k), and never when the weights are asked for (they need every row's
 * final max and sum in the piece that writes them). */
static int64_t choose_splits(const struct attn_ctx *c, int64_t blocks,
                             int64_t forced)
{
  int64_t target = AB__ATTN_SPLIT_PIECES, want, most;

  if (c->weights)
    return 1;
  if (forced > 0)
    return forced;
  if (c->threads > 0)
    target = ab__min64(target, (int64_t)c->threads * AB__ATTN_SPLIT_PER_THREAD);
  if (c->nqb != 1 || blocks >= target)
    return 1;
  want = (target + blocks - 1) / blocks;
  most = c->s.Nk / AB__ATTN_SPLIT_MIN_KEYS;
  return ab__max64(1, ab__min64(want, most));
}

/* Query blocks per piece: the caller's (tests), else one per
 * AB__ATTN_QGROUP_BYTES of one kv head's k and v, up to AB__ATTN_QGROUP,
 * while that leaves about AB__ATTN_SPLIT_PIECES pieces. */
static int64_t choose_group(const struct attn_ctx *c, int64_t blocks,
                            int64_t forced)
{
  const struct attn_shape *s = &c->s;
  double kv_bytes = (double)s->Nk * ((double)s->D * ab__elem_size(c->ke) +
                                     (double)s->Dv * ab__elem_size(c->ve));
  int64_t g = kv_bytes >= AB__ATTN_QGROUP * (double)AB__ATTN_QGROUP_BYTES
                  ? AB__ATTN_QGROUP
                  : (int64_t)(kv_bytes / AB__ATTN_QGROUP_BYTES);

  if (forced > 0)
    return ab__min64(forced, c->nqb);
  g = ab__min64(ab__min64(g, c->nqb), blocks / AB__ATTN_SPLIT_PIECES);
  return ab__max64(1, g);
}

/* Choose the blocks, their groups and key chunks, and order the pieces
 * costliest first. */
static enum ab_status plan_pieces(struct attn_ctx *c, int64_t max_rows,
                                  int64_t forced_splits, int64_t forced_group,
                                  int64_t *npieces)
{
  const struct attn_shape *s = &c->s;
  struct piece_cost *pc;
  double maxcost = 0.0;
  int64_t n, nb, nparts, i, b, qs, qb, kvh, hc, sp;

  if (s->Nq >= max_rows) {
    c->hg = 1;
    c->nqb = (s->Nq + max_rows - 1) / max_rows;
    c->bq = (s->Nq + c->nqb - 1) / c->nqb; /* balanced blocks */
  } else {
    c->bq = s->Nq;
    c->nqb = 1;
    c->hg = ab__max64(1, ab__min64(s->G, max_rows / s->Nq));
  }
  c->nhc = (s->G + c->hg - 1) / c->hg;
  c->hg = (s->G + c->nhc - 1) / c->nhc; /* balanced head chunks */
  c->mp_max = round_up(c->hg * c->bq, AB__ATTN_ROW_PAD);

  if (ab_mul_overflow(s->B, s->Hkv, &nb) || ab_mul_overflow(nb, c->nhc, &nb) ||
      ab_mul_overflow(nb, c->nqb, &nb))
    return ab__fail(AB_STATUS_OVERFLOW, "q", "piece count overflows");
  c->nsplit = choose_splits(c, nb, forced_splits);
  c->qpb = choose_group(c, nb, forced_group);
  c->nqs = (c->nqb + c->qpb - 1) / c->qpb;
  /* nb / nqb * nqs <= nb: no overflow past the checks above */
  if (ab_mul_overflow(nb, c->nsplit, &nparts) ||
      ab_mul_overflow(nb / c->nqb * c->nqs, c->nsplit, &n) ||
      (uint64_t)n > SIZE_MAX / sizeof *pc)
    return ab__fail(AB_STATUS_OVERFLOW, "q", "piece count overflows");
  pc = ab__malloc((size_t)n * sizeof *pc);
  c->order = ab__malloc((size_t)n * sizeof *c->order);
  if (!pc || !c->order) {
    ab__free(pc);
    return ab__fail(AB_STATUS_NO_MEMORY, "job",
                    "cannot allocate the piece table (%lld pieces)",
                    (long long)n);
  }
  /* Cost of a block: rows x keys between the first and last visible key
   * of its chunk (what the tile loop walks), plus a little per row for the
   * q gather and the output, so fully masked blocks still sort after real
   * work; of a piece, the sum over its blocks. */
  for (i = 0; i < n; i++)
    pc[i].cost = 0.0;
  for (b = 0; b < s->B; b++) {
    for (qb = 0; qb < c->nqb; qb++) {
      int64_t r0 = qb * c->bq, bq = ab__min64(c->bq, s->Nq - r0), jlo, jhi;
      qs = qb / c->qpb;
      block_keys(c, b, r0, bq, &jlo, &jhi);
      for (sp = 0; sp < c->nsplit; sp++) {
        int64_t lo = jlo, hi = jhi;
        key_chunk(c->nsplit, sp, &lo, &hi);
        for (kvh = 0; kvh < s->Hkv; kvh++)
          for (hc = 0; hc < c->nhc; hc++) {
            int64_t hg = ab__min64(c->hg, s->G - hc * c->hg);
            i = (((b * s->Hkv + kvh) * c->nhc + hc) * c->nqs + qs) *
                    c->nsplit + sp;
            pc[i].cost += (double)(hg * bq) * ((double)(hi - lo) + 1.0);
            pc[i].kv = b * s->Hkv + kvh;
            pc[i].idx = i;
            maxcost = pc[i].cost > maxcost ? pc[i].cost : maxcost;
          }
      }
    }
  }
  for (i = 0; i < n; i++)
    pc[i].level = (int64_t)ceil(COST_LEVELS * pc[i].cost / maxcost);
  qsort(pc, (size_t)n, sizeof *pc, cmp_cost);
  for (i = 0; i < n; i++)
    c->order[i] = pc[i].idx;
  ab__free(pc);
  if (c->nsplit > 1) {
    /* Partial results of every chunk, and the blocks' counters. */
    int64_t floats;
    c->part_rec = c->mp_max * (s->Dv + 2);
    if (ab_mul_overflow(nparts, c->part_rec, &floats) ||
        !(c->part = alloc_f32(floats)) ||
        !(c->arrive = ab__malloc((size_t)nb * sizeof *c->arrive)))
      return ab__fail(AB_STATUS_NO_MEMORY, "job",
                      "cannot allocate the partial results of %lld key "
                      "chunks",
                      (long long)n);
    for (i = 0; i < nb; i++)
      atomic_init(&c->arrive[i], 0);
  }
  *npieces = n;
  return AB_STATUS_OK;
}

static int64_t attn_first(const struct ab_job *job, int64_t piece,
                          const void *output);
static int64_t attn_reads(const struct ab_job *job, int64_t piece,
                          const void *input);
static enum ab_status attn_run(const struct ab_job *job, int64_t piece,
                               void *scratch);

/* inputs_later: building the job must not read q, k, v or attn_bias.  It
 * would for RoPE (rotated copies) and for k or v that kv_view copies. */
static enum ab_status check_later(const struct ab_attn_params *p,
                                  const struct attn_shape *s)
{
  const struct ab_tensor *kv[2] = {p->k, p->v};
  const int64_t inner[2] = {s->kst[3], s->vst[3]};
  static const char *const names[2] = {"k", "v"};
  int i;

  if (p->rope)
    return ab__fail(AB_STATUS_INVALID_ARG, "inputs_later",
                    "inputs_later needs rope NULL: RoPE rotates q and k "
                    "into copies when the job is built");
  for (i = 0; i < 2; i++) {
    enum ab__elem e;
    if (!kernel_elem(kv[i]->dtype, &e) || inner[i] != 1)
      return ab__fail(AB_STATUS_INVALID_ARG, "inputs_later",
                      "inputs_later needs %s float32, bfloat16 or float16 "
                      "with inner stride 1 (it is %s with inner stride "
                      "%lld): it is copied when the job is built",
                      names[i], ab_dtype_name((enum ab_dtype)kv[i]->dtype),
                      (long long)inner[i]);
  }
  return AB_STATUS_OK;
}

enum ab_status ab__attention_job_tuned(const struct ab_attn_params *p,
                                       const struct ab__attn_tuning *t,
                                       ab_job_t **jobp)
{
  struct attn_shape s;
  struct attn_ctx *c;
  struct ab_job *job;
  int64_t max_rows = t && t->max_rows ? t->max_rows : AB__ATTN_MAX_ROWS;
  int64_t key_tile = t && t->key_tile ? t->key_tile : AB__ATTN_KEY_TILE;
  int64_t rows_max = t && t->rows_max ? t->rows_max : AB__ATTN_ROWS_MAX;
  int64_t npieces = 0, mp, kt, tile;
  size_t total = 0;
  enum ab_status st;

  if (!jobp)
    return ab__fail(AB_STATUS_INVALID_ARG, "job", "job pointer is NULL");
  *jobp = NULL;
  if ((st = attn_check(p, &s, 1)) != AB_STATUS_OK)
    return st;
  if (max_rows < 1 || max_rows > 1024 || key_tile < 1 || key_tile > 4096)
    return ab__fail(AB_STATUS_INVALID_ARG, "tuning",
                    "block of %lld rows x %lld keys is outside 1..1024 x "
                    "1..4096",
                    (long long)max_rows, (long long)key_tile);
  if (rows_max > AB__ATTN_ROW_PAD ||
      (t && (t->key_splits < 0 || t->key_splits > 65536 || t->q_group < 0 ||
             t->q_group > AB__ATTN_QGROUP_MAX)))
    return ab__fail(AB_STATUS_INVALID_ARG, "tuning",
                    "few-row blocks of up to %lld rows (at most %d), %lld "
                    "key chunks or %lld query blocks per piece (at most %d)",
                    (long long)rows_max, AB__ATTN_ROW_PAD,
                    (long long)t->key_splits, (long long)t->q_group,
                    AB__ATTN_QGROUP_MAX);
  if (p->inputs_later && (st = check_later(p, &s)) != AB_STATUS_OK)
    return st;
  if ((st = ab__job_new(sizeof *c, &job)) != AB_STATUS_OK)
    return st;
  job->run = attn_run;
  job->destroy = attn_destroy;
  job->first = attn_first;
  job->reads = attn_reads;
  c = job->ctx;
  c->s = s;
  c->kern = t && t->kernels ? t->kernels : ab__kernels();
  c->softcap = (float)p->softcap;
  /* Fold the scale (and 1/softcap, so the kernel takes tanh of q.k) into
   * the gathered queries: one multiply per query element instead of one
   * per score. */
  c->qscale = (float)(p->softcap > 0.0 ? s.scale / p->softcap : s.scale);
  c->kv_lens = p->kv_lens;
  c->out = p->out;
  c->lse = p->lse;
  c->weights = p->weights;
  c->stream_out = (double)s.B * (double)s.Hq * (double)s.Nq * (double)s.Dv *
                      sizeof(float) >=
                  (double)AB__STREAM_BYTES;
  if (p->layout == AB_LAYOUT_BHSD) {
    c->ost[1] = s.Nq * s.Dv, c->ost[2] = s.Dv;
    c->ost[0] = s.Hq * c->ost[1];
  } else {
    c->ost[1] = s.Dv, c->ost[2] = s.Hq * s.Dv;
    c->ost[0] = s.Nq * c->ost[2];
  }
  c->threads = p->threads;
  c->key_tile = key_tile;
  c->rows_max = rows_max;
  c->rows_tile = AB__ATTN_ROWS_TILES * key_tile;

  /* Position bias: resolve once for Hq heads. */
  if (p->bias) {
    if ((st = ab__bias_resolve(p->bias, s.Hq, &c->bias)) != AB_STATUS_OK) {
      st = prefix_error(st, "bias");
      goto fail;
    }
    switch (ab__bias_kind(&c->bias)) {
    case AB__BIAS_ZERO:
      break;
    case AB__BIAS_DISTANCE:
      if ((st = build_rel(c)) != AB_STATUS_OK)
        goto fail;
      break;
    case AB__BIAS_POSITION: {
      /* The bias depends on the query position too (FIRE), so it is
       * evaluated per row and tile; prepare its per-distance tables for
       * this geometry (FIRE's rows with p_q <= L then become copies). */
      struct ab_geometry g;
      ab_geometry_init(&g, s.Nq, s.Nk);
      g.q_offset = s.q_offset;
      if ((st = ab__bias_prepare(&c->bias, &g)) != AB_STATUS_OK) {
        st = prefix_error(st, "bias");
        goto fail;
      }
      c->bias_rows = 1;
      break;
    }
    }
  }
  if (p->attn_bias) {
    c->ab = p->attn_bias->data;
    c->ab_dtype = p->attn_bias->dtype;
  }
  c->need_tb = c->bias_rows || p->attn_bias != NULL;

  /* q, k, v as the pieces read them. */
  c->in_q = p->q->data;
  c->in_k = p->k->data;
  c->in_v = p->v->data;
  c->q = p->q->data;
  c->q_dtype = p->q->dtype;
  memcpy(c->qst, s.qst, sizeof c->qst);
  if (p->rope)
    st = apply_rope(c, p);
  else
    st = kv_view(p->k, &s, s.kst, s.D, "k", &c->k, &c->ke, c->kst,
                 &c->k_own);
  if (st == AB_STATUS_OK)
    st = kv_view(p->v, &s, s.vst, s.Dv, "v", &c->v, &c->ve, c->vst,
                 &c->v_own);
  if (st != AB_STATUS_OK)
    goto fail;
  /* bfloat16 q and k (read in place): scores by bfloat16 dot products
   * where the kernel table says they beat widening k (or the tuning asks). */
  if (c->kern->attn.qk_tile_bf16 && c->q_dtype == AB_DTYPE_BF16 &&
      c->qst[3] == 1 && c->ke == AB__ELEM_BF16) {
    int want = t ? t->bf16_dot : 0;
    c->dot = want > 0 || (want == 0 && c->kern->attn.bf16_dot_fast);
  }

  if ((st = plan_pieces(c, max_rows, t ? t->key_splits : 0,
                        t ? t->q_group : 0, &npieces)) != AB_STATUS_OK)
    goto fail;

  /* Per-thread scratch: this much for each block of a piece.  q and the
   * output numerators take D x mp and Dv x mp floats in either layout; a
   * score tile has kt x mp floats, or rows_tile x one row vector for few
   * rows. */
  mp = c->mp_max;
  kt = key_tile;
  tile = ab__max64(kt * mp, c->rows_tile * AB__ATTN_ROW_PAD);
  if (carve(&total, &c->off_qt, s.D, mp, sizeof(float)) ||
      carve(&total, &c->off_s, 1, tile, sizeof(float)) ||
      carve(&total, &c->off_ot, s.Dv, mp, sizeof(float)) ||
      carve(&total, &c->off_tb, c->need_tb ? 1 : 0, tile, sizeof(float)) ||
      carve(&total, &c->off_kw, c->ke != AB__ELEM_F32 ? kt : 0, s.D,
            sizeof(float)) ||
      carve(&total, &c->off_vw, c->ve != AB__ELEM_F32 ? kt : 0, s.Dv,
            sizeof(float)) ||
      carve(&total, &c->off_qrow, 1, s.D, sizeof(float)) ||
      carve(&total, &c->off_orow, 1, s.Dv, sizeof(float)) ||
      carve(&total, &c->off_mx, 1, mp, sizeof(float)) ||
      carve(&total, &c->off_l, 1, mp, sizeof(float)) ||
      carve(&total, &c->off_alpha, 1, mp, sizeof(float)) ||
      carve(&total, &c->off_lo, 1, mp, sizeof(int32_t)) ||
      carve(&total, &c->off_hi, 1, mp, sizeof(int32_t)) ||
      carve(&total, &c->off_lo64, 1, mp, sizeof(int64_t)) ||
      carve(&total, &c->off_hi64, 1, mp, sizeof(int64_t)) ||
      carve(&total, &c->off_bptr, 1, mp, sizeof(float *)) ||
      carve(&total, &c->off_row, 1, ab__max64(kt, c->rows_tile),
            sizeof(float))) {
    st = ab__fail(AB_STATUS_OVERFLOW, "q",
                  "scratch for head_dim %lld / %lld overflows",
                  (long long)s.D, (long long)s.Dv);
    goto fail;
  }
  if (total > SIZE_MAX / (size_t)c->qpb) {
    st = ab__fail(AB_STATUS_OVERFLOW, "q", "scratch overflows");
    goto fail;
  }
  c->block_scratch = total;
  job->pieces = npieces;
  job->scratch_size = total * (size_t)c->qpb;
  job->flops = flops_of(&s, p->kv_lens);
  *jobp = job;
  return AB_STATUS_OK;
fail:
  ab_job_free(job);
  return st;
}

enum ab_status ab_attention_job(const struct ab_attn_params *p,
                                ab_job_t **job)
{
  return ab__attention_job_tuned(p, NULL, job);
}

enum ab_status ab_attention(const struct ab_attn_params *p)
{
  struct ab_attn_params one;
  ab_job_t *job;
  enum ab_status st;

  if (p && p->threads == 0) { /* every piece runs on this thread */
    one = *p;
    one.threads = 1;
    p = &one;
  }
  st = ab_attention_job(p, &job);

  if (st != AB_STATUS_OK)
    return st;
  st = ab_job_run_all(job);
  ab_job_free(job);
  return st;
}

/* ==== one piece ========================================================= */

/* A piece's block: which rows and keys, and the views of scratch. */
struct block {
  int64_t b, h0, r0, bq, m, mp;
  int64_t group, split;       /* block index (without chunks), its chunk */
  int64_t jlo, jhi, flo, fhi; /* keys walked; all-rows-visible range */
  int rows;                   /* few-row kernels, row-major q and o */
  int dot;                    /* qk_tile_bf16: q in bfloat16 pairs */
  int64_t tile;               /* keys per tile */
  const void *k, *v;          /* this kv head's rows */
  float *qt, *s, *ot, *tb, *mx, *l, *alpha, *row, *kw, *vw, *qrow, *orow;
  int32_t *lo, *hi;
  int64_t *lo64, *hi64;
  const float **bptr;
};

/* The blocks of a piece: consecutive query blocks of one head chunk, and
 * how many there are (fewer in the chunk's last piece). */
static int64_t piece_blocks(const struct attn_ctx *c, int64_t piece)
{
  int64_t qs = c->order[piece] / c->nsplit % c->nqs;

  return ab__min64(c->qpb, c->nqb - qs * c->qpb);
}

/* The rows of block `sub` of a piece: batch entry b, query heads h0..,
 * positions r0..r0+bq (the block's head x position product, m rows), and
 * its key chunk.  Returns its kv head. */
static int64_t piece_block(const struct attn_ctx *c, int64_t piece,
                           int64_t sub, struct block *bl)
{
  const struct attn_shape *s = &c->s;
  int64_t idx = c->order[piece], qb, hc, kvh;

  bl->split = idx % c->nsplit;
  idx /= c->nsplit;
  qb = idx % c->nqs * c->qpb + sub;
  idx /= c->nqs;
  bl->group = idx * c->nqb + qb;
  hc = idx % c->nhc;
  idx /= c->nhc;
  kvh = idx % s->Hkv;
  bl->b = idx / s->Hkv;
  bl->r0 = qb * c->bq;
  bl->bq = ab__min64(c->bq, s->Nq - bl->r0);
  bl->h0 = kvh * s->G + hc * c->hg;
  bl->m = ab__min64(c->hg, s->G - hc * c->hg) * bl->bq;
  return kvh;
}

/* The keys a piece walks: its chunk of its block's visible keys. */
static void piece_keys(const struct attn_ctx *c, struct block *bl)
{
  block_keys(c, bl->b, bl->r0, bl->bq, &bl->jlo, &bl->jhi);
  key_chunk(c->nsplit, bl->split, &bl->jlo, &bl->jhi);
}

/* ab_job_piece_first: a block's lowest element is its first row's (every
 * stride is >= 0), at column 0, and a piece's first block has the lowest
 * rows.  With split keys, whichever chunk's piece finishes last writes the
 * block, so every chunk reports it. */
static int64_t attn_first(const struct ab_job *job, int64_t piece,
                          const void *output)
{
  const struct attn_ctx *c = job->ctx;
  const struct attn_shape *s = &c->s;
  struct block bl;
  int64_t row;

  piece_block(c, piece, 0, &bl); /* its first block has its lowest rows */
  row = (bl.b * s->Hq + bl.h0) * s->Nq + bl.r0; /* head-major row index */
  if (output == (const void *)c->out)
    return bl.b * c->ost[0] + bl.h0 * c->ost[1] + bl.r0 * c->ost[2];
  if (c->lse && output == (const void *)c->lse)
    return row;
  if (c->weights && output == (const void *)c->weights)
    return row * s->Nk;
  return -1;
}

/* One past the highest offset of the box b, heads [h0, h1), rows
 * [r0, r1), columns [0, cols) of a tensor with (b, h, row, col) strides
 * st, all >= 0 (0 for broadcast or implicit axes). */
static int64_t box_end(const int64_t st[4], int64_t b, int64_t h1,
                       int64_t r1, int64_t cols)
{
  return 1 + b * st[0] + (h1 - 1) * st[1] + (r1 - 1) * st[2] +
         (cols - 1) * st[3];
}

/* ab_job_piece_reads: a block reads its rows of q (and of attn_bias, for
 * every key), and its kv head's keys and values up to the last one its
 * chunk walks; a piece, what its blocks read.  An input the job copied is
 * not read by the pieces; one passed twice (k = v) is read as both. */
static int64_t attn_reads(const struct ab_job *job, int64_t piece,
                          const void *input)
{
  const struct attn_ctx *c = job->ctx;
  const struct attn_shape *s = &c->s;
  const int64_t kst[4] = {c->kst[0], c->kst[1], c->kst[2], 1};
  const int64_t vst[4] = {c->vst[0], c->vst[1], c->vst[2], 1};
  int64_t end = -1, sub, nsub = piece_blocks(c, piece);

  for (sub = 0; sub < nsub; sub++) {
    struct block bl;
    int64_t kvh = piece_block(c, piece, sub, &bl);
    int64_t h1 = bl.h0 + bl.m / bl.bq, r1 = bl.r0 + bl.bq;
    int walks;

    piece_keys(c, &bl);
    walks = bl.jhi > bl.jlo;
    if (input == c->in_q)
      end = ab__max64(end,
                      c->q_own ? 0 : box_end(c->qst, bl.b, h1, r1, s->D));
    if (input == c->in_k)
      end = ab__max64(end, c->k_own || !walks
                               ? 0
                               : box_end(kst, bl.b, kvh + 1, bl.jhi, s->D));
    if (input == c->in_v)
      end = ab__max64(end, c->v_own || !walks
                               ? 0
                               : box_end(vst, bl.b, kvh + 1, bl.jhi, s->Dv));
    if (c->ab && input == c->ab)
      end = ab__max64(end, box_end(s->abst, bl.b, h1, r1, s->Nk));
  }
  return end;
}

static int64_t row_head(const struct block *bl, int64_t i)
{
  return bl->h0 + i / bl->bq;
}

static int64_t row_pos(const struct block *bl, int64_t i)
{
  return bl->r0 + i % bl->bq;
}

/* Row j0 of q, k or v (elements of type e, rows ld apart) as a pointer. */
static const void *kv_row(const void *base, enum ab__elem e, int64_t ld,
                          int64_t j0)
{
  return (const char *)base + (size_t)(j0 * ld) * ab__elem_size(e);
}

/* bfloat16 dot products: the block's bfloat16 queries, unscaled, as
 * pairs, q2[(c/2)*mp + i] = q(i, c) | q(i, c+1) << 16 (0 past D and for
 * padded rows); the kernel applies qscale to the sums. */
static void gather_q_pairs(const struct attn_ctx *c, const struct block *bl)
{
  const int64_t *qs = c->qst, D = c->s.D, mp = bl->mp, np = (D + 1) / 2;
  uint32_t *q2 = (uint32_t *)bl->qt;
  int64_t i, t;

  for (i = 0; i < mp; i++) {
    const uint16_t *src = NULL;
    if (i < bl->m)
      src = (const uint16_t *)c->q + bl->b * qs[0] + row_head(bl, i) * qs[1] +
            row_pos(bl, i) * qs[2];
    for (t = 0; t < np; t++) {
      uint32_t lo = src ? src[2 * t] : 0, hi = 0;
      if (src && 2 * t + 1 < D)
        hi = src[2 * t + 1];
      q2[t * mp + i] = lo | hi << 16;
    }
  }
}

/* The block's queries times qscale: transposed, qt[c][i] with padded rows
 * 0, for the row-vectorised kernels; row-major, q[i][c], for few rows.
 * Rows the kernels can read (unit inner stride, float32 or 16-bit) are
 * widened a row at a time. */
static void gather_q(const struct attn_ctx *c, const struct block *bl)
{
  const int64_t *qs = c->qst, D = c->s.D, mp = bl->mp;
  const int64_t ci = bl->rows ? 1 : mp, ri = bl->rows ? D : 1;
  enum ab__elem e = AB__ELEM_F32;
  const int direct = qs[3] == 1 && kernel_elem(c->q_dtype, &e);
  int64_t i, k;

  for (i = 0; i < bl->m; i++) {
    int64_t off = bl->b * qs[0] + row_head(bl, i) * qs[1] +
                  row_pos(bl, i) * qs[2];
    float *dst = bl->qt + i * ri;
    if (direct) {
      c->kern->attn.widen(bl->qrow, D, kv_row(c->q, e, 1, off), D, e, 1, D);
      for (k = 0; k < D; k++)
        dst[k * ci] = bl->qrow[k] * c->qscale;
    } else {
      for (k = 0; k < D; k++)
        dst[k * ci] = ab__load_f32(c->q, c->q_dtype, off + k * qs[3]) *
                      c->qscale;
    }
  }
  if (!bl->rows)
    for (k = 0; k < D; k++)
      for (i = bl->m; i < mp; i++)
        bl->qt[k * mp + i] = 0.0f;
}

/* Scores of keys [j0, j0 + nk) and the tile description that finishes
 * them: bias pointers, the bias tile, masks where some row is cut. */
static void score_tile(const struct attn_ctx *c, const struct block *bl,
                       int64_t j0, int64_t nk, struct ab__attn_tile *t)
{
  const struct ab__attn_kernels *kn = &c->kern->attn;
  const int64_t mp = bl->mp, ldk = c->kst[2], D = c->s.D;
  const void *k = kv_row(bl->k, c->ke, ldk, j0);
  int64_t i, jj;

  if (bl->rows) {
    kn->qk_rows(bl->s, mp, k, ldk, c->ke, bl->qt, D, nk, D, bl->m);
  } else if (bl->dot) {
    kn->qk_tile_bf16(bl->s, mp, k, ldk, (const uint32_t *)bl->qt, mp, nk, D,
                     bl->m, c->qscale);
  } else if (c->ke != AB__ELEM_F32) {
    kn->widen(bl->kw, D, k, ldk, c->ke, nk, D);
    kn->qk_tile(bl->s, mp, bl->kw, D, bl->qt, mp, nk, D, bl->m);
  } else {
    kn->qk_tile(bl->s, mp, k, ldk, bl->qt, mp, nk, D, bl->m);
  }
  memset(t, 0, sizeof *t);
  t->s = bl->s;
  t->ld = mp;
  t->nk = nk;
  t->m = bl->m;
  t->softcap = c->softcap > 0.0f ? c->softcap : 0.0f;
  t->mx = bl->mx;
  t->l = bl->l;
  t->alpha = bl->alpha;
  if (c->rel) {
    /* Rows are (head, position) pairs, head major: walk them without the
     * divisions of row_head/row_pos (this runs for every tile). */
    const float *base = c->rel + bl->h0 * c->rel_stride +
                        (c->s.q_offset + bl->r0 - j0 + c->rel_u0);
    int64_t r = 0;
    for (i = 0; i < bl->m; i++) {
      bl->bptr[i] = base + r;
      if (++r == bl->bq) {
        r = 0;
        base += c->rel_stride;
      }
    }
    /* Padded rows continue the last row (REL_SLACK keeps them in bounds)
     * so a vector of rows stays one contiguous load. */
    for (i = bl->m; i < mp; i++)
      bl->bptr[i] = bl->bptr[bl->m - 1] + (i - bl->m + 1);
    t->bptr = bl->bptr;
  }
  if (c->need_tb) {
    memset(bl->tb, 0, (size_t)(nk * mp) * sizeof(float));
    for (i = 0; i < bl->m; i++) {
      int64_t h = row_head(bl, i), r = row_pos(bl, i);
      if (c->bias_rows) {
        ab__bias_row(&c->bias, h, c->s.q_offset + r, j0, nk, bl->row);
        for (jj = 0; jj < nk; jj++)
          bl->tb[jj * mp + i] = bl->row[jj];
      }
      if (c->ab) {
        const int64_t *as = c->s.abst;
        int64_t off = bl->b * as[0] + h * as[1] + r * as[2] + j0 * as[3];
        if (c->ab_dtype == AB_DTYPE_F32) {
          const float *src = (const float *)c->ab + off;
          for (jj = 0; jj < nk; jj++)
            bl->tb[jj * mp + i] += src[jj * as[3]];
        } else {
          for (jj = 0; jj < nk; jj++)
            bl->tb[jj * mp + i] +=
                ab__load_f32(c->ab, c->ab_dtype, off + jj * as[3]);
        }
      }
    }
    t->tb = bl->tb;
  }
  if (!(j0 >= bl->flo && j0 + nk <= bl->fhi)) {
    for (i = 0; i < mp; i++) {
      int64_t lo = 0, hi = 0;
      if (i < bl->m) {
        lo = ab__min64(ab__max64(bl->lo64[i] - j0, 0), nk);
        hi = ab__min64(ab__max64(bl->hi64[i] - j0, lo), nk);
      }
      bl->lo[i] = (int32_t)lo;
      bl->hi[i] = (int32_t)hi;
    }
    t->lo = bl->lo;
    t->hi = bl->hi;
  }
}

/* Output numerator (row i, column k) of the block, in either layout. */
static float block_o(const struct attn_ctx *c, const struct block *bl,
                     int64_t i, int64_t k)
{
  return bl->rows ? bl->ot[i * c->s.Dv + k] : bl->ot[k * bl->mp + i];
}

/* Row i's output and lse from its numerators, max and sum; fully masked
 * rows (sum 0) give 0 and -inf.  The row is made in scratch and written
 * by the table writer: with non-temporal stores when the output is larger
 * than the cache (each output line is written once, and its read for
 * ownership cost about as much as the block's softmax). */
static void write_row(const struct attn_ctx *c, const struct block *bl,
                      int64_t i, const float *num, int64_t num_step,
                      float mx, float l)
{
  const struct attn_shape *s = &c->s;
  int64_t h = row_head(bl, i), r = row_pos(bl, i), k;
  float inv = l > 0.0f ? 1.0f / l : 0.0f;
  float *o = c->out + bl->b * c->ost[0] + h * c->ost[1] + r * c->ost[2];

  for (k = 0; k < s->Dv; k++)
    bl->orow[k] = num[k * num_step] * inv;
  c->kern->bias.table_copy(o, bl->orow, s->Dv, c->stream_out);
  if (c->lse)
    c->lse[(bl->b * s->Hq + h) * s->Nq + r] =
        l > 0.0f ? mx + logf(l) : -INFINITY;
}

/* The block's rows of out and lse. */
static void write_block(const struct attn_ctx *c, const struct block *bl)
{
  int64_t i;

  for (i = 0; i < bl->m; i++)
    write_row(c, bl, i,
              bl->rows ? bl->ot + i * c->s.Dv : bl->ot + i,
              bl->rows ? 1 : bl->mp, bl->mx[i], bl->l[i]);
}

/* Split keys: keep this chunk's rows (numerators, max, sum) for the merge;
 * the piece that finishes the block's last chunk merges them all:
 *   M = max_s mx_s,  L = sum_s l_s e^(mx_s - M),
 *   out = sum_s o_s e^(mx_s - M) / L,  lse = M + log L
 * (0 and -inf when no chunk saw a visible key).  The counter's acquire-
 * release increment makes every chunk's partial visible to the merger; it
 * counts modulo nsplit, so the job can run again. */
static void finish_chunk(const struct attn_ctx *c, const struct block *bl,
                         float *num)
{
  const int64_t Dv = c->s.Dv, rec = c->part_rec, mpm = c->mp_max;
  float *mine = c->part + (bl->group * c->nsplit + bl->split) * rec;
  const float *first = c->part + bl->group * c->nsplit * rec;
  int64_t i, k, sp;

  for (i = 0; i < bl->m; i++) {
    for (k = 0; k < Dv; k++)
      mine[i * Dv + k] = block_o(c, bl, i, k);
    mine[mpm * Dv + i] = bl->mx[i];
    mine[mpm * (Dv + 1) + i] = bl->l[i];
  }
  if ((atomic_fetch_add_explicit(&c->arrive[bl->group], 1,
                                 memory_order_acq_rel) + 1) % c->nsplit != 0)
    return;
  for (i = 0; i < bl->m; i++) {
    float M = -INFINITY, L = 0.0f;
    for (sp = 0; sp < c->nsplit; sp++)
      M = fmaxf(M, first[sp * rec + mpm * Dv + i]);
    for (k = 0; k < Dv; k++)
      num[k] = 0.0f;
    if (M != -INFINITY)
      for (sp = 0; sp < c->nsplit; sp++) {
        const float *p = first + sp * rec;
        float w = p[mpm * (Dv + 1) + i] > 0.0f
                      ? expf(p[mpm * Dv + i] - M)
                      : 0.0f;
        L += p[mpm * (Dv + 1) + i] * w;
        for (k = 0; k < Dv; k++)
          num[k] += p[i * Dv + k] * w;
      }
    write_row(c, bl, i, num, 1, M, L);
  }
}

/* Block `sub` of a piece: its pointers into its part of scratch and its
 * rows' visible keys. */
static int64_t block_start(const struct attn_ctx *c, int64_t piece,
                           int64_t sub, unsigned char *w, struct block *bl)
{
  const struct attn_shape *s = &c->s;
  int64_t kvh = piece_block(c, piece, sub, bl), kvlen, i;

  bl->mp = round_up(bl->m, AB__ATTN_ROW_PAD);
  bl->rows = bl->m <= c->rows_max;
  bl->dot = c->dot && !bl->rows;
  bl->tile = bl->rows ? c->rows_tile : c->key_tile;
  bl->k = kv_row(c->k, c->ke, 1, bl->b * c->kst[0] + kvh * c->kst[1]);
  bl->v = kv_row(c->v, c->ve, 1, bl->b * c->vst[0] + kvh * c->vst[1]);
  bl->qt = (float *)(w + c->off_qt);
  bl->s = (float *)(w + c->off_s);
  bl->ot = (float *)(w + c->off_ot);
  bl->tb = (float *)(w + c->off_tb);
  bl->kw = (float *)(w + c->off_kw);
  bl->vw = (float *)(w + c->off_vw);
  bl->qrow = (float *)(w + c->off_qrow);
  bl->orow = (float *)(w + c->off_orow);
  bl->mx = (float *)(w + c->off_mx);
  bl->l = (float *)(w + c->off_l);
  bl->alpha = (float *)(w + c->off_alpha);
  bl->row = (float *)(w + c->off_row);
  bl->lo = (int32_t *)(w + c->off_lo);
  bl->hi = (int32_t *)(w + c->off_hi);
  bl->lo64 = (int64_t *)(w + c->off_lo64);
  bl->hi64 = (int64_t *)(w + c->off_hi64);
  bl->bptr = (const float **)(w + c->off_bptr);

  /* Visible key range of every row and their intersection; the union
   * (cut to this piece's chunk) is what the piece walks. */
  kvlen = c->kv_lens ? c->kv_lens[bl->b] : s->Nk;
  bl->flo = INT64_MIN, bl->fhi = INT64_MAX;
  for (i = 0; i < bl->m; i++) {
    ab__visible_keys(s->q_offset + row_pos(bl, i), kvlen, s->causal, s->wl,
                     s->wr, &bl->lo64[i], &bl->hi64[i]);
    bl->flo = ab__max64(bl->flo, bl->lo64[i]);
    bl->fhi = ab__min64(bl->fhi, bl->hi64[i]);
  }
  piece_keys(c, bl);
  return kvh;
}

/* Block `sub` of a piece, ready for its first key tile: q gathered, no
 * keys seen yet. */
static void block_begin(const struct attn_ctx *c, int64_t piece, int64_t sub,
                        unsigned char *scratch, struct block *bl)
{
  int64_t i;

  block_start(c, piece, sub, scratch + (size_t)sub * c->block_scratch, bl);
  if (bl->dot)
    gather_q_pairs(c, bl);
  else
    gather_q(c, bl);
  for (i = 0; i < bl->mp; i++) {
    bl->mx[i] = -INFINITY;
    bl->l[i] = 0.0f;
  }
  memset(bl->ot, 0, (size_t)(c->s.Dv * bl->mp) * sizeof(float));
  if (bl->rows) /* rows past m of the score tile: finite, and ignored */
    memset(bl->s, 0, (size_t)(bl->tile * bl->mp) * sizeof(float));
}

/* Whether keys [j0, j0 + nk) of a block take the packed few-row softmax
 * (kernels/attn.h, softmax_rows4): at most 4 rows, every one of them sees
 * every key of the tile, and there is no softcap or bias to add. */
static int tile_packed(const struct attn_ctx *c, const struct block *bl,
                       int64_t j0, int64_t nk)
{
  return bl->rows && bl->m <= 4 && !(c->softcap > 0.0f) && !c->rel &&
         !c->need_tb && j0 >= bl->flo && j0 + nk <= bl->fhi;
}

/* Keys [j0, j0 + tile) of a block (cut to its walk): scores, the online
 * softmax, and the output numerators. */
static void block_tile(const struct attn_ctx *c, struct block *bl, int64_t j0)
{
  const struct attn_shape *s = &c->s;
  const struct ab__attn_kernels *kn = &c->kern->attn;
  int64_t nk = ab__min64(bl->tile, bl->jhi - j0), ldv = c->vst[2];
  const void *v = kv_row(bl->v, c->ve, ldv, j0);
  struct ab__attn_tile t;

  if (tile_packed(c, bl, j0, nk)) {
    kn->qk_rows(bl->s, 4, kv_row(bl->k, c->ke, c->kst[2], j0), c->kst[2],
                c->ke, bl->qt, s->D, nk, s->D, bl->m);
    kn->softmax_rows4(bl->s, nk, bl->mx, bl->l, bl->alpha);
    kn->pv_rows(bl->ot, s->Dv, bl->alpha, v, ldv, c->ve, bl->s, 4, nk, s->Dv,
                bl->m);
    return;
  }
  score_tile(c, bl, j0, nk, &t);
  t.mode = AB__ATTN_ONLINE;
  kn->softmax_tile(&t);
  if (bl->rows) {
    kn->pv_rows(bl->ot, s->Dv, bl->alpha, v, ldv, c->ve, bl->s, bl->mp, nk,
                s->Dv, bl->m);
  } else {
    if (c->ve != AB__ELEM_F32) {
      kn->widen(bl->vw, s->Dv, v, ldv, c->ve, nk, s->Dv);
      v = bl->vw;
      ldv = s->Dv;
    }
    kn->pv_tile(bl->ot, bl->mp, bl->alpha, v, ldv, bl->s, bl->mp, nk, s->Dv,
                bl->m);
  }
}

/* A block after its last key tile: its chunk kept for the merge, or its
 * rows written (and, with weights, the scores again, now normalised with
 * the final max and sum). */
static void block_end(const struct attn_ctx *c, struct block *bl)
{
  const struct attn_shape *s = &c->s;
  const struct ab__attn_kernels *kn = &c->kern->attn;
  struct ab__attn_tile t;
  int64_t i, j0;

  if (c->nsplit > 1) {
    /* Once copied out, ot is free for the merge's numerators. */
    finish_chunk(c, bl, bl->ot);
    if (c->stream_out) /* this piece's streaming stores, before it ends */
      c->kern->bias.store_fence();
    return;
  }
  write_block(c, bl);
  if (c->stream_out)
    c->kern->bias.store_fence();
  if (!c->weights)
    return;
  for (i = 0; i < bl->m; i++) {
    float *wr = c->weights +
                ((bl->b * s->Hq + row_head(bl, i)) * s->Nq +
                 row_pos(bl, i)) * s->Nk;
    memset(wr, 0, (size_t)bl->jlo * sizeof(float));
    memset(wr + bl->jhi, 0, (size_t)(s->Nk - bl->jhi) * sizeof(float));
  }
  for (j0 = bl->jlo; j0 < bl->jhi; j0 += bl->tile) {
    int64_t nk = ab__min64(bl->tile, bl->jhi - j0), jj;
    score_tile(c, bl, j0, nk, &t);
    t.mode = AB__ATTN_FINAL;
    kn->softmax_tile(&t);
    for (i = 0; i < bl->m; i++) {
      float *wr = c->weights +
                  ((bl->b * s->Hq + row_head(bl, i)) * s->Nq +
                   row_pos(bl, i)) * s->Nk + j0;
      for (jj = 0; jj < nk; jj++)
        wr[jj] = bl->s[jj * bl->mp + i];
    }
  }
}

/* A piece: its blocks walk their key tiles side by side (tile `step` of
 * every block, then the next), so a tile of k and v that the first block
 * brought from memory is still in cache for the others. */
static enum ab_status attn_run(const struct ab_job *job, int64_t piece,
                               void *scratch)
{
  const struct attn_ctx *c = job->ctx;
  struct block bl[AB__ATTN_QGROUP_MAX];
  int64_t nsub = piece_blocks(c, piece), sub, step;
  int more = 1;

  for (sub = 0; sub < nsub; sub++)
    block_begin(c, piece, sub, scratch, &bl[sub]);
  for (step = 0; more; step++) {
    more = 0;
    for (sub = 0; sub < nsub; sub++) {
      int64_t j0 = bl[sub].jlo + step * bl[sub].tile;
      if (j0 < bl[sub].jhi) {
        block_tile(c, &bl[sub], j0);
        more = 1;
      }
    }
  }
  for (sub = 0; sub < nsub; sub++)
    block_end(c, &bl[sub]);
  return AB_STATUS_OK;
}
