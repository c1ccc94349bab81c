/* enc-avx512.c: AVX-512 sinusoidal rows -- the template enc-simd.c.h with
 * 8-double (16-float) vectors. */
#include "../kernels.h"
#include "simd-avx512.h"

#include <math.h>

#include "vmath.c.h"
#include "enc-simd.c.h"

void ab__enc_kernels_avx512(struct ab__enc_kernels *k)
{
  k->sin_rows = sin_rows_avx512;
}
