/* rope-avx512.c: AVX-512 kernels of the RoPE family -- the template
 * rope-simd.c.h with 16-float (8-double) vectors and masked tails. */
#include "../kernels.h"
#include "simd-avx512.h"

#include "vmath.c.h"
#include "rope-simd.c.h"

void ab__rope_kernels_avx512(struct ab__rope_kernels *k)
{
  k->sincos = sincos_avx512;
  k->rotate_rows = rotate_rows_avx512;
}
