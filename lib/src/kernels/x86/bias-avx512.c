/* bias-avx512.c: AVX-512 table writers of the bias family -- the template
 * table-simd.c.h with 16-float vectors and masked heads and tails. */
#include "../kernels.h"
#include "simd-avx512.h"

#include <string.h>

#include "table-simd.c.h"

void ab__bias_kernels_avx512(struct ab__bias_kernels *k)
{
  k->table_alibi = table_alibi_avx512;
  k->table_fill = table_fill_avx512;
  k->table_copy = table_copy_avx512;
  k->table_add = table_add_avx512;
  k->store_fence = store_fence_avx512;
}
