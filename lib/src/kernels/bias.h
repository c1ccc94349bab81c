/* bias.h: kernel slots of the bias tables (owned by lib/src/bias.c and the
 * families of lib/src/bias/). */
#ifndef AB_KERNELS_BIAS_H
#define AB_KERNELS_BIAS_H

#include <stdint.h>

/* ALiBi's value for query position pq and key j: the distance is converted
 * to float, then multiplied, so every ISA (and every tail) gives the same
 * bits.  Shared by the reference and the scalar edges of the SIMD writers. */
static inline float ab__alibi_value(int64_t pq, int64_t j, float slope)
{
  return -slope * (float)(pq > j ? pq - j : j - pq);
}

/* The SIMD writers step a float vector of distances pq - j by the vector
 * width.  Distances below 2^24 are exact in float, and so is every step on
 * them, so when the whole row stays below 2^24 the vector values are the
 * ones ab__alibi_value rounds from int64; otherwise they write element by
 * element. */
static inline int ab__alibi_steps_exact(int64_t n, int64_t pq)
{
  const int64_t exact = (int64_t)1 << 24;

  return n < exact && pq < exact && pq > -exact && pq - (n - 1) > -exact;
}

struct ab__bias_kernels {
  /* Table writers.  `stream` asks for non-temporal stores where the
   * destination is aligned (the table is larger than the cache and will not
   * be read back soon); whoever streams calls store_fence once after its
   * last row.  The values written never depend on `stream`. */
  /* out[j] = ab__alibi_value(pq, j, slope) for j in [0, n). */
  void (*table_alibi)(float *out, int64_t n, int64_t pq, float slope,
                      int stream);
  void (*table_fill)(float *out, int64_t n, float v, int stream);
  /* Copy n 4-byte elements (float bias values or int32 buckets). */
  void (*table_copy)(void *out, const void *src, int64_t n, int stream);
  /* out[j] = a[j] + b[j] for j in [0, n) (x + PE). */
  void (*table_add)(float *out, const float *a, const float *b, int64_t n,
                    int stream);
  void (*store_fence)(void);
};

void ab__bias_kernels_ref(struct ab__bias_kernels *k);
/* kernels/x86/bias-avx2.c, bias-avx512.c: override every slot. */
void ab__bias_kernels_avx2(struct ab__bias_kernels *k);
void ab__bias_kernels_avx512(struct ab__bias_kernels *k);

#endif
