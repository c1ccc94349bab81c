/* bias.h: kernel slots of the bias-table family (owned by lib/src/bias.c). */
#ifndef AB_KERNELS_BIAS_H
#define AB_KERNELS_BIAS_H

#include <stdint.h>

struct ab__bias_kernels {
  /* out[j] = -slope * |pq - j| for j in [0, n) */
  void (*alibi_row)(float *out, int64_t n, int64_t pq, float slope);
};

void ab__bias_kernels_ref(struct ab__bias_kernels *k);

#endif
