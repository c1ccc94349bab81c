/* rope-avx2.c: AVX2+FMA kernels of the RoPE family -- the template
 * rope-simd.c.h with 8-float (4-double) vectors and vmaskmov tails. */
#include "../kernels.h"
#include "simd-avx2.h"

#include "vmath.c.h"
#include "rope-simd.c.h"

void ab__rope_kernels_avx2(struct ab__rope_kernels *k)
{
  k->sincos = sincos_avx2;
  k->rotate_rows = rotate_rows_avx2;
}
