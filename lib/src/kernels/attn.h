/* attn.h: kernel slots of the attention family (owned by lib/src/attn.c). */
#ifndef AB_KERNELS_ATTN_H
#define AB_KERNELS_ATTN_H

#include <stdint.h>

struct ab__attn_kernels {
  /* s[i*ldS + j] = dot(q + i*ldq, k + j*ldk, d) for i < m, j < n */
  void (*qk_tile)(float *s, int64_t ldS, const float *q, int64_t ldq,
                  const float *k, int64_t ldk, int64_t m, int64_t n,
                  int64_t d);
};

void ab__attn_kernels_ref(struct ab__attn_kernels *k);

#endif
