/* attn-internal.h: what tests and benchmarks may tune in the fused attention
 * (attn.c) beyond the public API -- the kernel table and the block sizes. */
#ifndef AB_ATTN_INTERNAL_H
#define AB_ATTN_INTERNAL_H

#include "ab-internal.h"
#include "kernels/kernels.h"

/* Default blocking: query rows per block and keys per tile.  64 x 64 keeps
 * a block's q, score tile and output numerators (d = 128) within L2 and the
 * score tile within L1, and is small enough that causal masking skips all
 * but a thin diagonal band of tiles. */
#define AB__ATTN_MAX_ROWS 64
#define AB__ATTN_KEY_TILE 64

/* Blocks of at most this many rows use the few-row kernels (qk_rows,
 * pv_rows), with key tiles AB__ATTN_ROWS_TILES times as long (a few rows
 * make a small score tile, and a long one spends less per tile on the
 * softmax's bookkeeping).  At 16 rows (4 new tokens of a GQA group of 4)
 * both kinds are compute-bound; measured on one Zen 5 core (thread CPU
 * time, Hq 32, Hkv 8, Nk 32768, d 128): the few-row kernels 36 ms with
 * float32 k, v and 22 ms with bfloat16, the row-vectorised ones 37 and
 * 28 ms.  Below 16 rows the row-vectorised kernels compute a whole vector
 * of rows anyway. */
#define AB__ATTN_ROWS_MAX 16
#define AB__ATTN_ROWS_TILES 4

/* Split keys: when a job's blocks are fewer than AB__ATTN_SPLIT_PIECES,
 * each block's keys are cut into chunks of at least AB__ATTN_SPLIT_MIN_KEYS
 * so that there are about that many pieces -- enough for every thread of
 * a large machine to stream K and V, however few kv heads there are. */
#define AB__ATTN_SPLIT_PIECES 64
#define AB__ATTN_SPLIT_MIN_KEYS 1024
/* With the caller's thread count (ab_attn_params.threads), the split aims
 * at this many pieces per thread instead (at most AB__ATTN_SPLIT_PIECES):
 * enough to even out pieces of unequal cost, without the cost of many
 * short ones (each restarts its streams and adds to the merge). */
#define AB__ATTN_SPLIT_PER_THREAD 4

/* Query blocks per piece: consecutive blocks of one head walk their key
 * tiles side by side, so each tile of k and v comes from memory once for
 * all of them -- one block per AB__ATTN_QGROUP_BYTES of one kv head's k and
 * v, up to AB__ATTN_QGROUP.  Measured on Zen 5 (2 threads, H = 8, d = 128,
 * dense, ns per query-key pair per head): with one block per piece 1.48 at
 * N = 4096 (k and v 4 MB per head) but 2.0-2.1 at N = 16384; with 8
 * blocks, 1.48 at N = 8192 and 1.42 at N = 32768.  Tests may ask for up to
 * AB__ATTN_QGROUP_MAX. */
#define AB__ATTN_QGROUP 8
#define AB__ATTN_QGROUP_BYTES (1 << 20)
#define AB__ATTN_QGROUP_MAX 8

struct ab__attn_tuning {
  const struct ab__kernels *kernels; /* NULL: ab__kernels() */
  int64_t max_rows;                  /* 0: AB__ATTN_MAX_ROWS; else 1..1024 */
  int64_t key_tile;                  /* 0: AB__ATTN_KEY_TILE; else 1..4096 */
  /* 0: AB__ATTN_ROWS_MAX; < 0: never the few-row kernels; else up to 16 */
  int64_t rows_max;
  int64_t key_splits; /* 0: chosen by the job; else key chunks per block */
  /* bfloat16 dot products for bfloat16 q and k: 0 where the kernel table
   * says they are faster, 1 whenever the table has them, -1 never */
  int bf16_dot;
  int64_t q_group; /* 0: chosen by the job; else query blocks per piece */
};

/* ab_attention_job with an explicit kernel table and block sizes (t may be
 * NULL for the defaults), so tests can cross tile edges with small shapes
 * and compare whole attentions between ISAs. */
enum ab_status ab__attention_job_tuned(const struct ab_attn_params *p,
                                       const struct ab__attn_tuning *t,
                                       ab_job_t **job);

#endif /* AB_ATTN_INTERNAL_H */
