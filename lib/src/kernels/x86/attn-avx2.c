/* attn-avx2.c: AVX2+FMA kernels of the attention family -- the body in
 * attn-simd.c.h with 8-float vectors: a 6 x 2 register block (12
 * accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm registers,
 * 12 FMAs per 2 vector loads and 6 broadcasts). */
#include "../kernels.h"
#include "simd-avx2.h"

#include <math.h>

#define MR_MAX 6
#define NV_MAX 2

#include "vmath.c.h"
#include "attn-simd.c.h"

void ab__attn_kernels_avx2(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_avx2;
  k->pv_tile = pv_tile_avx2;
  k->softmax_tile = softmax_tile_avx2;
}
