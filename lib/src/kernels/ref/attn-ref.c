/* attn-ref.c: scalar reference kernels of the attention family. */
#include "../kernels.h"

static void qk_tile_ref(float *s, int64_t ldS, const float *q, int64_t ldq,
                        const float *k, int64_t ldk, int64_t m, int64_t n,
                        int64_t d)
{
  int64_t i, j, c;

  for (i = 0; i < m; i++)
    for (j = 0; j < n; j++) {
      float acc = 0.0f;
      for (c = 0; c < d; c++)
        acc += q[i * ldq + c] * k[j * ldk + c];
      s[i * ldS + j] = acc;
    }
}

void ab__attn_kernels_ref(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_ref;
}
