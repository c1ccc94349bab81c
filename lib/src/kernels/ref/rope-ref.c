/* rope-ref.c: scalar reference kernels of the RoPE family -- the oracle the
 * SIMD variants are checked against, and the fallback on any CPU. */
#include "../kernels.h"

#include <string.h>

/* libm's double cos/sin reduce any finite argument exactly, so this is as
 * accurate as float output allows. */
static void sincos_ref(float *c, float *s, const double *theta, int64_t n)
{
  int64_t k;

  for (k = 0; k < n; k++)
    ab__rope_sincos1(&c[k], &s[k], theta[k]);
}

static void rotate_rows_ref(float *out, int64_t ldo, const float *x,
                            int64_t ldx, const float *cs, int64_t ldcs,
                            int64_t rows, int64_t h, int64_t dim,
                            int interleaved, int nt)
{
  int64_t i, k;

  (void)nt; /* plain stores: the reference has no streaming variant */
  for (i = 0; i < rows; i++) {
    const float *xr = x + i * ldx, *c = cs + i * ldcs, *s = c + h;
    float *o = out + i * ldo;

    /* ab__rope_pair reads both inputs before writing: out == x works. */
    if (interleaved) {
      for (k = 0; k < h; k++)
        ab__rope_pair(&o[2 * k], &o[2 * k + 1], xr[2 * k], xr[2 * k + 1],
                      c[k], s[k]);
    } else {
      for (k = 0; k < h; k++)
        ab__rope_pair(&o[k], &o[k + h], xr[k], xr[k + h], c[k], s[k]);
    }
    if (dim > 2 * h && o != xr)
      memcpy(o + 2 * h, xr + 2 * h, (size_t)(dim - 2 * h) * sizeof *o);
  }
}

void ab__rope_kernels_ref(struct ab__rope_kernels *k)
{
  k->sincos = sincos_ref;
  k->rotate_rows = rotate_rows_ref;
}
