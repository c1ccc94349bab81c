/* cpu-x86.c: CPU feature detection only (cpuid + xgetbv via GCC builtins);
 * no other file asks the CPU what it can do. */
#include "ab-internal.h"

#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
/* AVX2, FMA and F16C (half <-> float, which the AVX2 files widen 16-bit
 * keys and values with; every AVX2 CPU has it, but the files are built
 * with -mf16c, so it is asked too: CPUID leaf 1, ECX bit 29, since clang
 * before 15 knows no "f16c" for __builtin_cpu_supports). */
int ab__cpu_has_avx2_fma(void)
{
  unsigned eax, ebx, ecx, edx;

  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1);
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

/* AVX512-BF16 straight from CPUID (leaf 7, sub-leaf 1, EAX bit 5): clang
 * before 15 has no "avx512bf16" for __builtin_cpu_supports either, and the
 * fuzz targets build the library with clang.  The OS's saving of the zmm state
 * is part of ab__cpu_has_avx512. */
int ab__cpu_has_avx512_bf16(void)
{
  unsigned eax, ebx, ecx, edx;

  if (!ab__cpu_has_avx512() || __get_cpuid_max(0, NULL) < 7)
    return 0;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax >> 5) & 1;
}

/* vdpbf16ps against FP32 FMAs, the bench's probes paired on 2 threads
 * (2 x 16 independent chains of 512-bit operations): AMD Zen 5 (family
 * 26) 1.97x the FMA flop rate; an Intel Xeon with AVX512-BF16 about 0.5x.
 * So AMD from family 26 on; Zen 4 (family 25) was not measured here and
 * stays on FMAs, as does every other kind.  AB_BF16_DOT=1 or 0 in the
 * environment overrides the choice. */
int ab__cpu_bf16_dot_fast(void)
{
  const char *e = getenv("AB_BF16_DOT");
  unsigned eax, ebx, ecx, edx, family;

  if (e && (e[0] == '0' || e[0] == '1') && !e[1])
    return e[0] == '1';
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx) ||
      !(ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163))
    return 0; /* not "AuthenticAMD" */
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
    return 0;
  family = (eax >> 8) & 0xf;
  if (family == 0xf)
    family += (eax >> 20) & 0xff;
  return family >= 26;
}
#else
int ab__cpu_has_avx2_fma(void) { return 0; }
int ab__cpu_has_avx512(void) { return 0; }
int ab__cpu_has_avx512_bf16(void) { return 0; }
int ab__cpu_bf16_dot_fast(void) { return 0; }
#endif
