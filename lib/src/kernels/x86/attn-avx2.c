/* attn-avx2.c: AVX2+FMA kernels of the attention family -- the body in
 * attn-simd.c.h with 8-float vectors: a 6 x 2 register block (12
 * accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm registers,
 * 12 FMAs per 2 vector loads and 6 broadcasts). */
#include "../kernels.h"
#include "simd-avx2.h"

#include <math.h>
#include <string.h>

#define MR_MAX 6
#define NV_MAX 2
/* Few rows: 2 x 4 dot products (8 accumulators, 2 key and 1 query
 * vector); 2 rows x 4 vectors of output columns (8 + 4 + 1 registers). */
#define QKR_KB 2
#define QKR_RB 4
#define PVR_RB 2
#define PVR_CB 4

#include "vmath.c.h"
#include "attn-simd.c.h"

void ab__attn_kernels_avx2(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx2;
  k->pv_tile = pv_tile_avx2;
  k->softmax_tile = softmax_tile_avx2;
  k->softmax_rows4 = softmax_rows4_avx2;
  k->qk_rows = qk_rows_avx2;
  k->pv_rows = pv_rows_avx2;
  k->widen = widen_avx2;
}
