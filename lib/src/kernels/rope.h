/* rope.h: kernel slots of the RoPE family (owned by lib/src/rope.c). */
#ifndef AB_KERNELS_ROPE_H
#define AB_KERNELS_ROPE_H

#include <stdint.h>

struct ab__rope_kernels {
  /* Rotate npairs pairs of one row: pair k is (x[a_k], x[b_k]) with
   * a_k = k*pstride_a... (see rope.c for the exact contract). */
  void (*rotate_row)(float *x, const float *cs, int64_t npairs,
                     int interleaved);
};

void ab__rope_kernels_ref(struct ab__rope_kernels *k);

#endif
