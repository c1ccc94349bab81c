/* probe-bf16.c: the bfloat16 dot-product probe -- vdpbf16ps (AVX512-BF16)
 * throughput, beside the FP32 FMA probe, to say whether bfloat16 dot
 * products beat float32 FMAs on this CPU kind (they are the only other way
 * to multiply-add at vector width).  Built with AVX512-BF16 flags
 * (Makefile); called only after __builtin_cpu_supports("avx512bf16"). */
#if !defined(__AVX512F__) || !defined(__AVX512BF16__)
#error "build this file with -mavx512f -mavx512bf16 (see the Makefile's bench rules)"
#endif
#include <immintrin.h>

#include "bench.h"

/* 16 independent accumulators, as the FMA probe; each vdpbf16ps on zmm
 * does 32 bfloat16 products and adds them pairwise into 16 floats: 64
 * flops, counted like an FMA's 2 per product. */
double bench_bf16_dot_avx512(int64_t iters)
{
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* 1.0 */
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380); /* 2^-24 */
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1);
  __m512 a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
  __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5);
  __m512 a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
  __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9);
  __m512 a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  __m512 a12 = _mm512_set1_ps(12), a13 = _mm512_set1_ps(13);
  __m512 a14 = _mm512_set1_ps(14), a15 = _mm512_set1_ps(15);
  float sink[16];
  volatile float keep;
  int64_t i;

  /* Written out, as the FMA probe: an array of accumulators would go
   * through memory at -O2.  Each chain depends only on itself. */
  for (i = 0; i < iters; i++) {
    a0 = _mm512_dpbf16_ps(a0, x, y);
    a1 = _mm512_dpbf16_ps(a1, x, y);
    a2 = _mm512_dpbf16_ps(a2, x, y);
    a3 = _mm512_dpbf16_ps(a3, x, y);
    a4 = _mm512_dpbf16_ps(a4, x, y);
    a5 = _mm512_dpbf16_ps(a5, x, y);
    a6 = _mm512_dpbf16_ps(a6, x, y);
    a7 = _mm512_dpbf16_ps(a7, x, y);
    a8 = _mm512_dpbf16_ps(a8, x, y);
    a9 = _mm512_dpbf16_ps(a9, x, y);
    a10 = _mm512_dpbf16_ps(a10, x, y);
    a11 = _mm512_dpbf16_ps(a11, x, y);
    a12 = _mm512_dpbf16_ps(a12, x, y);
    a13 = _mm512_dpbf16_ps(a13, x, y);
    a14 = _mm512_dpbf16_ps(a14, x, y);
    a15 = _mm512_dpbf16_ps(a15, x, y);
  }
  a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  a8 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                     _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15)));
  _mm512_storeu_ps(sink, _mm512_add_ps(a0, a8));
  keep = sink[0]; /* observable: the loop cannot vanish */
  (void)keep;
  return (double)iters * 16 * 64;
}
