/* enc-avx2.c: AVX2+FMA sinusoidal rows -- the template enc-simd.c.h with
 * 4-double (8-float) vectors. */
#include "../kernels.h"
#include "simd-avx2.h"

#include <math.h>

#include "vmath.c.h"
#include "enc-simd.c.h"

void ab__enc_kernels_avx2(struct ab__enc_kernels *k)
{
  k->sin_rows = sin_rows_avx2;
}
