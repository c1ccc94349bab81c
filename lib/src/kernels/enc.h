/* enc.h: kernel slots of the sinusoidal encodings (owned by
 * lib/src/encoding.c).
 *
 * A sinusoidal table row at position p holds sin(p * w_k) and cos(p * w_k)
 * for each frequency w_k.  Computing a sine and a cosine per cell kept the
 * tables well below the memory's write speed, so the SIMD kernels compute
 * them exactly (in double) only at an anchor row and advance to the next
 * position p + step by the angle-addition rotation, in double,
 *   sin(a + b) = sin a cos b + cos a sin b,
 *   cos(a + b) = cos a cos b - sin a sin b,
 * with sin/cos(step * w_k) computed once per call; a new anchor every
 * AB__ENC_ANCHOR rows bounds the drift.
 *
 * Error bound (tests/unit/test-encoding.c checks it against float64 at
 * positions up to 10^6): every value is within 2^-25 + 2^-32 of sin (or
 * cos) of p * w_k evaluated in double -- the half float ulp of the final
 * rounding (values lie in [-1, 1]) plus the double-precision part: the
 * anchor's polynomial (below 3e-14, rope.h), 2 to 3 double roundings per
 * rotation over at most AB__ENC_ANCHOR - 1 rotations (with AB__ENC_ANCHOR
 * = 64, below 2e-14), and the rounding of p * w_k itself, which differs
 * between p0 * w + m * (step * w) and the product formed directly by at
 * most |p| * w * 2^-52 (2.2e-10 at |p| = 10^6, w <= 1). */
#ifndef AB_KERNELS_ENC_H
#define AB_KERNELS_ENC_H

#include <stdint.h>

/* Pairs per call (the kernels keep their state on the stack) and rows
 * between exact anchors. */
#define AB__ENC_TILE 256
#define AB__ENC_ANCHOR 64

/* One pair's sine and cosine into its row: at 2k and 2k + 1 (cos_off 0,
 * interleaved), else at k and cos_off + k.  Shared by the reference and
 * the SIMD tails. */
static inline void ab__enc_put(float *row, int64_t cos_off, int64_t k,
                               float s, float c)
{
  if (cos_off) {
    row[k] = s;
    row[cos_off + k] = c;
  } else {
    row[2 * k] = s;
    row[2 * k + 1] = c;
  }
}

struct ab__enc_kernels {
  /* Rows t < rows at positions p0 + t*step (formed in double) of kn <=
   * AB__ENC_TILE sinusoid pairs with frequencies freq[k]: row t starts at
   * out + t*ldo and gets sin(p*freq[k]) at 2k and cos at 2k + 1 when
   * cos_off is 0 (interleaved), else sin at k and cos at cos_off + k
   * (halves).  Values rounded once to float.  Rows 0, AB__ENC_ANCHOR,
   * 2 * AB__ENC_ANCHOR, ... are exact anchors, so a caller whose calls
   * never cross a multiple of AB__ENC_ANCHOR rows of its table gets the
   * same bits however it splits the table.  `stream` asks for non-temporal
   * stores where aligned; the caller fences. */
  void (*sin_rows)(float *out, int64_t ldo, int64_t cos_off, double p0,
                   double step, const double *freq, int64_t kn, int64_t rows,
                   int stream);
};

void ab__enc_kernels_ref(struct ab__enc_kernels *k);
void ab__enc_kernels_avx2(struct ab__enc_kernels *k);
void ab__enc_kernels_avx512(struct ab__enc_kernels *k);

#endif /* AB_KERNELS_ENC_H */
