/* cpu-x86.c: CPU feature detection only (cpuid + xgetbv via GCC builtins);
 * no other file asks the CPU what it can do. */
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
/* AVX2, FMA and F16C (half <-> float, which the AVX2 files widen 16-bit
 * keys and values with; every AVX2 CPU has it, but the files are built
 * with -mf16c, so it is asked too). */
int ab__cpu_has_avx2_fma(void)
{
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

/* Every extension the avx512 files are built with (Makefile ISA_avx512),
 * since the compiler may use any of them there: the attention kernels call
 * AVX512DQ's and/or on zmm outright, so F alone (Knights Landing) is not
 * enough. */
int ab__cpu_has_avx512(void)
{
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && ab__cpu_has_avx2_fma();
}
#else
int ab__cpu_has_avx2_fma(void) { return 0; }
int ab__cpu_has_avx512(void) { return 0; }
#endif
