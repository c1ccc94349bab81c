/* attn-avx512.c: AVX-512 kernels of the attention family -- the body in
 * attn-simd.c.h with 16-float vectors and mask registers: a 6 x 4 register
 * block (24 accumulators of the 32 zmm registers, 4 more for the B row, 1
 * for the broadcast: 24 FMAs per 4 vector loads and 6 broadcasts). */
#include "../kernels.h"
#include "simd-avx512.h"

#include <math.h>
#include <string.h>

#define MR_MAX 6
#define NV_MAX 4
/* Few rows: 4 x 4 dot products (16 accumulators, 4 key and 1 query
 * vector); 2 rows x 8 vectors of output columns (d = 128 in registers). */
#define QKR_KB 4
#define QKR_RB 4
#define PVR_RB 2
#define PVR_CB 8

#include "vmath.c.h"
#include "attn-simd.c.h"

void ab__attn_kernels_avx512(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx512;
  k->pv_tile = pv_tile_avx512;
  k->softmax_tile = softmax_tile_avx512;
  k->softmax_rows4 = softmax_rows4_avx512;
  k->qk_rows = qk_rows_avx512;
  k->pv_rows = pv_rows_avx512;
  k->widen = widen_avx512;
}
