/* rope-ref.c: scalar reference kernels of the RoPE family. */
#include "../kernels.h"

static void rotate_row_ref(float *x, const float *cs, int64_t npairs,
                           int interleaved)
{
  int64_t k, half = npairs;

  for (k = 0; k < npairs; k++) {
    float *a = interleaved ? &x[2 * k] : &x[k];
    float *b = interleaved ? &x[2 * k + 1] : &x[k + half];
    float c = cs[2 * k], s = cs[2 * k + 1], xa = *a, xb = *b;
    *a = xa * c - xb * s;
    *b = xb * c + xa * s;
  }
}

void ab__rope_kernels_ref(struct ab__rope_kernels *k)
{
  k->rotate_row = rotate_row_ref;
}
