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
 * (kernels/x86/init-avx2.c, init-avx512.c; built with ISA flags). */
void ab__kernels_avx2(struct ab__kernels *k);
void ab__kernels_avx512(struct ab__kernels *k);

/* The table for this process (AB_ISA caps it). */
const struct ab__kernels *ab__kernels(void);
/* Tests: the table of one ISA ("ref", "avx2", "avx512"), or NULL when the
 * CPU cannot run it.  ab__isa_list is NULL-terminated, best last. */
const struct ab__kernels *ab__kernels_for(const char *isa);
const char *const *ab__isa_list(void);

/* cpu-x86.c */
int ab__cpu_has_avx2_fma(void);
int ab__cpu_has_avx512(void);
/* AVX512-BF16 (vdpbf16ps), and whether this CPU kind runs it faster than
 * FP32 FMAs (docs/internals/dispatch.md says which kinds were measured). */
int ab__cpu_has_avx512_bf16(void);
int ab__cpu_bf16_dot_fast(void);

#endif /* AB_KERNELS_H */
