/* enc-ref.c: the scalar reference of the sinusoidal rows -- libm's sin and
 * cos of each cell's angle, in double, rounded once to float (the values
 * the SIMD recurrence is checked against). */
#include "../kernels.h"

static void sin_rows_ref(float *out, int64_t ldo, int64_t cos_off, double p0,
                         double step, const double *freq, int64_t kn,
                         int64_t rows, int stream)
{
  int64_t t, k;

  (void)stream;
  for (t = 0; t < rows; t++) {
    const double p = p0 + (double)t * step;
    float *row = out + t * ldo;
    for (k = 0; k < kn; k++) {
      float c, s;
      ab__rope_sincos1(&c, &s, p * freq[k]);
      ab__enc_put(row, cos_off, k, s, c);
    }
  }
}

void ab__enc_kernels_ref(struct ab__enc_kernels *k)
{
  k->sin_rows = sin_rows_ref;
}
