/* bias-avx2.c: AVX2 table writers of the bias family -- the template
 * table-simd.c.h with 8-float vectors and vmaskmov heads and tails. */
#include "../kernels.h"
#include "simd-avx2.h"

#include <string.h>

#include "table-simd.c.h"

void ab__bias_kernels_avx2(struct ab__bias_kernels *k)
{
  k->table_alibi = table_alibi_avx2;
  k->table_fill = table_fill_avx2;
  k->table_copy = table_copy_avx2;
  k->table_add = table_add_avx2;
  k->store_fence = store_fence_avx2;
}
