/* attn.h: kernel slots of the attention family (owned by lib/src/attn.c).
 *
 * The fused attention works on a block of M "virtual" query rows at a time
 * (attn.c: one kv head's query heads x a run of query positions) and keeps
 * every per-block matrix TRANSPOSED, with the query row as the fastest axis:
 *
 *   qt [D][ld]    the block's queries, already multiplied by the scale
 *   s  [nk][ld]   scores of one key tile: s[j*ld + i] = q_i . k_j
 *   ot [Dv][ld]   the running output numerators
 *
 * so every SIMD kernel vectorises over query rows: the softmax's row max and
 * row sum become vertical vector operations, masks compare a vector of
 * per-row bounds with one key index, and K and V are read in place, row-major,
 * by broadcasting single elements (no packing, zero-copy for float32 input).
 *
 * Row padding: ld is a multiple of AB__ATTN_ROW_PAD and every row array
 * (qt columns, s, ot, tb, mx, l, alpha, lo, hi, bptr) has ld valid entries;
 * kernels may compute rows m .. round_up(m, AB__ATTN_ROW_PAD) - 1 too, and
 * the caller ignores them.  Row arrays and every row of them start 64-byte
 * aligned (the SIMD kernels use aligned loads).  Keys (nk), head dims (d,
 * dv) have no padding, and k, v rows need no alignment.
 *
 * Few rows.  A block of a handful of rows (decoding: one new token per
 * query head of a kv group) would waste most of each vector of rows, so
 * qk_rows and pv_rows vectorise over the head dimension instead, with q and
 * the output numerators row-major (q [m][ldq], o [m][ldo]) and the score
 * tile in the transposed layout above, so softmax_tile serves both.  They
 * also read k and v of any element type (ab__elem), widening vectors as
 * they load them: 16-bit keys and values cost half the memory traffic.
 * The row-vectorised kernels take float32 tiles; `widen` makes them from
 * 16-bit rows. */
#ifndef AB_KERNELS_ATTN_H
#define AB_KERNELS_ATTN_H

#include <stdint.h>

#include "elem.h"

/* Rows are padded to this multiple (one AVX-512 vector of floats). */
#define AB__ATTN_ROW_PAD 16

/* What softmax_tile does with a finished tile of scores. */
enum ab__attn_mode {
  /* Online softmax step: mx/l are the running row max and sum; they are
   * updated, alpha[i] = exp(old max - new max) is written, and s becomes
   * exp(score - new max) (0 for masked and fully masked rows). */
  AB__ATTN_ONLINE = 0,
  /* Final probabilities (the weights pass): mx/l are the final row max and
   * sum; s becomes exp(score - mx) / l exactly normalised (0 when l == 0). */
  AB__ATTN_FINAL = 1
};

/* One tile of transposed scores and what turns them into probabilities.
 * Score (i, j) of row i < m and tile key j < nk (docs/methods.md#score-order):
 *   x = s[j*ld + i]                       (scale already folded into q)
 *   x = softcap * tanh(x)                 if softcap > 0 (q was divided by it)
 *   x += bptr[i][-j]                      if bptr (translation-invariant bias)
 *   x += tb[j*ld + i]                     if tb (any other additive bias)
 *   x = -inf  unless lo[i] <= j < hi[i]   if lo (causal, window, kv_lens)
 * bptr[i] points into a table indexed by (query position - key position), so
 * bptr[i] - j is row i's bias for key j; kernels may use one vector load
 * where bptr[i + t] == bptr[i] + t across a vector of rows. */
struct ab__attn_tile {
  float *s;
  int64_t ld, nk, m;
  float softcap;
  const float *const *bptr;
  const float *tb;
  const int32_t *lo, *hi;
  float *mx, *l, *alpha;
  enum ab__attn_mode mode;
};

struct ab__attn_kernels {
  /* s[j*lds + i] = sum_{c<d} k[j*ldk + c] * qt[c*ldq + i]
   * for j < nk, i < m (rows padded as above; ldq, lds multiples of the pad). */
  void (*qk_tile)(float *s, int64_t lds, const float *k, int64_t ldk,
                  const float *qt, int64_t ldq, int64_t nk, int64_t d,
                  int64_t m);
  /* ot[c*ldo + i] = ot[c*ldo + i] * alpha[i]
   *                 + sum_{j<nk} v[j*ldv + c] * p[j*ldp + i]
   * for c < dv, i < m; alpha may be NULL (= 1). */
  void (*pv_tile)(float *ot, int64_t ldo, const float *alpha, const float *v,
                  int64_t ldv, const float *p, int64_t ldp, int64_t nk,
                  int64_t dv, int64_t m);
  /* Finish a tile of scores and turn it into probabilities (see above). */
  void (*softmax_tile)(const struct ab__attn_tile *t);

  /* softmax_tile's online step for a tile of at most 4 rows with no
   * softcap, bias or mask, its scores packed 4 to a key: s[4*j + i] for
   * j < nk, i < 4 (rows past the block's are finite and ignored).  s
   * becomes exp(score - new max) and mx, l, alpha[0..3] are updated as
   * softmax_tile does; s has room for whole vectors past 4*nk, which it may
   * overwrite.  Decoding's 1-4 rows per kv head would fill a quarter of
   * each vector of rows; packed, every lane is a score. */
  void (*softmax_rows4)(float *s, int64_t nk, float *mx, float *l,
                        float *alpha);
  /* s[j*lds + i] = sum_{c<d} k[j*ldk + c] * q[i*ldq + c] for j < nk,
   * i < m: qk_tile for a few row-major query rows and keys of type ke. */
  void (*qk_rows)(float *s, int64_t lds, const void *k, int64_t ldk,
                  enum ab__elem ke, const float *q, int64_t ldq, int64_t nk,
                  int64_t d, int64_t m);
  /* o[i*ldo + c] = o[i*ldo + c] * alpha[i]
   *                + sum_{j<nk} v[j*ldv + c] * p[j*ldp + i]
   * for c < dv, i < m (o row-major, values of type ve); alpha may be NULL
   * (= 1). */
  void (*pv_rows)(float *o, int64_t ldo, const float *alpha, const void *v,
                  int64_t ldv, enum ab__elem ve, const float *p, int64_t ldp,
                  int64_t nk, int64_t dv, int64_t m);
  /* dst[r*ldd + c] = src[r*lds + c] as float, r < rows, c < cols. */
  void (*widen)(float *dst, int64_t ldd, const void *src, int64_t lds,
                enum ab__elem e, int64_t rows, int64_t cols);

  /* qk_tile on bfloat16 keys and queries by bfloat16 dot products:
   *   s[j*lds + i] = scale * sum_{c<d} k[j*ldk + c] * q(i, c)
   * with q in pairs, q2[(c/2)*ldq + i] holding q(i, c) in its low half and
   * q(i, c+1) in its high half (0 past d); rows padded as for qk_tile.
   * Products of bfloat16 values are exact in float32, so this differs from
   * qk_tile on the widened values only in the order of the sum.  NULL
   * where the CPU has no such instruction (the reference has a scalar
   * one, for tests). */
  void (*qk_tile_bf16)(float *s, int64_t lds, const uint16_t *k, int64_t ldk,
                       const uint32_t *q2, int64_t ldq, int64_t nk, int64_t d,
                       int64_t m, float scale);
  /* Whether the job should use qk_tile_bf16 for bfloat16 q and k: only on
   * CPU kinds where the bench's bf16-dot probe measured the instruction
   * faster than FP32 FMAs (docs/internals/dispatch.md). */
  int bf16_dot_fast;
};

void ab__attn_kernels_ref(struct ab__attn_kernels *k);
void ab__attn_kernels_avx2(struct ab__attn_kernels *k);
void ab__attn_kernels_avx512(struct ab__attn_kernels *k);
/* kernels/x86/attn-avx512bf16.c: qk_tile_bf16, and whether to use it. */
void ab__attn_kernels_avx512bf16(struct ab__attn_kernels *k, int fast);

#endif
