/* bias.h: kernel slots of the bias-table family (owned by lib/src/bias.c). */
#ifndef AB_KERNELS_BIAS_H
#define AB_KERNELS_BIAS_H

#include <stdint.h>

struct ab__bias_kernels {
  /* out[j] = -slope * (float)|pq - j| for j in [0, n): the distance is
   * converted to float, then multiplied (every ISA gives the same bits). */
  void (*alibi_row)(float *out, int64_t n, int64_t pq, float slope);
  /* Table writers.  `stream` asks for non-temporal stores where the
   * destination is aligned (the table is larger than the cache and will not
   * be read back soon); whoever streams calls store_fence once after its
   * last row.  The values written never depend on `stream`. */
  void (*table_alibi)(float *out, int64_t n, int64_t pq, float slope,
                      int stream);
  void (*table_fill)(float *out, int64_t n, float v, int stream);
  /* Copy n 4-byte elements (float bias values or int32 buckets). */
  void (*table_copy)(void *out, const void *src, int64_t n, int stream);
  void (*store_fence)(void);
};

void ab__bias_kernels_ref(struct ab__bias_kernels *k);
/* kernels/x86/bias-avx2.c, bias-avx512.c: override every slot. */
void ab__bias_kernels_avx2(struct ab__bias_kernels *k);
void ab__bias_kernels_avx512(struct ab__bias_kernels *k);

#endif
