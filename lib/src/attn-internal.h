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

struct ab__attn_tuning {
  const struct ab__kernels *kernels; /* NULL: ab__kernels() */
  int64_t max_rows;                  /* 0: AB__ATTN_MAX_ROWS; else 1..1024 */
  int64_t key_tile;                  /* 0: AB__ATTN_KEY_TILE; else 1..4096 */
};

/* ab_attention_job with an explicit kernel table and block sizes (t may be
 * NULL for the defaults), so tests can cross tile edges with small shapes
 * and compare whole attentions between ISAs. */
enum ab_status ab__attention_job_tuned(const struct ab_attn_params *p,
                                       const struct ab__attn_tuning *t,
                                       ab_job_t **job);

#endif /* AB_ATTN_INTERNAL_H */
