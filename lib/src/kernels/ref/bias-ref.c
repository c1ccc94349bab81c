/* bias-ref.c: scalar reference kernels of the bias-table family. */
#include "../kernels.h"

static void alibi_row_ref(float *out, int64_t n, int64_t pq, float slope)
{
  int64_t j;

  for (j = 0; j < n; j++)
    out[j] = -slope * (float)(pq > j ? pq - j : j - pq);
}

void ab__bias_kernels_ref(struct ab__bias_kernels *k)
{
  k->alibi_row = alibi_row_ref;
}
