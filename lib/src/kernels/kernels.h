/* kernels.h: the table of compute kernels, one slot per op, resolved once
 * at run time (scalar reference in every slot, then per-ISA overrides).
 * Each op family declares its slots in its own header (rope.h, attn.h,
 * bias.h beside this file) so families evolve without touching the others.
 *
 * The kernels are the bottom layer: they include nothing of the library
 * above them (not ab-internal.h, not attnbias.h), only these headers and
 * the C and compiler headers, and they take plain pointers and counts.
 * The library includes them, never the other way. */
#ifndef AB_KERNELS_H
#define AB_KERNELS_H

#include "attn.h"
#include "bias.h"
#include "enc.h"
#include "rope.h"

struct ab__kernels {
  const char *isa; /* "ref", "avx2", "avx512" */
  struct ab__rope_kernels rope;
  struct ab__attn_kernels attn;
  struct ab__bias_kernels bias;
  struct ab__enc_kernels enc;
};

/* Fill every slot with the scalar reference (kernels/ref/ref.c). */
void ab__kernels_ref(struct ab__kernels *k);
/* Override the slots that have an implementation for the ISA
 * (kernels/x86/init-avx2.c, init-avx512.c; built with ISA flags).  The
 * library asks the CPU (cpu-x86.c) and says what it found: bf16, whether
 * it has AVX512-BF16; bf16_fast, whether it runs it faster than float32
 * FMAs. */
void ab__kernels_avx2(struct ab__kernels *k);
void ab__kernels_avx512(struct ab__kernels *k, int bf16, int bf16_fast);

#endif /* AB_KERNELS_H */
