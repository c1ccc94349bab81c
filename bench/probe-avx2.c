/* probe-avx2.c: roofline probe kernels with 256-bit vectors (AVX2 + FMA),
 * for CPUs without AVX-512.  Called only after __builtin_cpu_supports
 * reported avx2 and fma. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "build this file with -mavx2 -mfma (see the Makefile's bench rules)"
#endif
#include <immintrin.h>

#include "bench.h"

/* 12 chains: enough for 2 pipes x latency 5 (the slowest common case)
 * while leaving 4 of the 16 ymm registers for the operands. */
double bench_fma_avx2(int64_t iters)
{
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1);
  __m256 a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
  __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5);
  __m256 a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
  __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9);
  __m256 a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  float sink[8];
  volatile float keep;
  int64_t i;

  /* Written out: at -O2 a loop over an array of accumulators is kept
   * in memory, and the store-to-load chain would time the cache, not
   * the FMA units.  Each chain depends only on itself. */
  for (i = 0; i < iters; i++) {
    a0 = _mm256_fmadd_ps(a0, x, y);
    a1 = _mm256_fmadd_ps(a1, x, y);
    a2 = _mm256_fmadd_ps(a2, x, y);
    a3 = _mm256_fmadd_ps(a3, x, y);
    a4 = _mm256_fmadd_ps(a4, x, y);
    a5 = _mm256_fmadd_ps(a5, x, y);
    a6 = _mm256_fmadd_ps(a6, x, y);
    a7 = _mm256_fmadd_ps(a7, x, y);
    a8 = _mm256_fmadd_ps(a8, x, y);
    a9 = _mm256_fmadd_ps(a9, x, y);
    a10 = _mm256_fmadd_ps(a10, x, y);
    a11 = _mm256_fmadd_ps(a11, x, y);
  }
  a0 = _mm256_add_ps(a0, a1);
  a0 = _mm256_add_ps(a0, a2);
  a0 = _mm256_add_ps(a0, a3);
  a0 = _mm256_add_ps(a0, a4);
  a0 = _mm256_add_ps(a0, a5);
  a0 = _mm256_add_ps(a0, a6);
  a0 = _mm256_add_ps(a0, a7);
  a0 = _mm256_add_ps(a0, a8);
  a0 = _mm256_add_ps(a0, a9);
  a0 = _mm256_add_ps(a0, a10);
  a0 = _mm256_add_ps(a0, a11);
  _mm256_storeu_ps(sink, a0);
  keep = sink[0]; /* observable: the loop cannot vanish */
  (void)keep;
  return (double)iters * 12 * 8 * 2;
}

float bench_read_avx2(const float *a, int64_t n)
{
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  float lanes[8], sum = 0.0f;
  int64_t i = 0;
  int l;

  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(a + i + 24));
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
  _mm256_storeu_ps(lanes,
                   _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (l = 0; l < 8; l++)
    sum += lanes[l];
  return sum;
}

void bench_triad_avx2(float *a, const float *b, const float *c, float s,
                      int64_t n, int nt)
{
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;

  if (nt) {
    for (; i + 8 <= n; i += 8)
      _mm256_stream_ps(a + i, _mm256_fmadd_ps(vs, _mm256_load_ps(c + i),
                                              _mm256_load_ps(b + i)));
    _mm_sfence();
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_store_ps(a + i, _mm256_fmadd_ps(vs, _mm256_load_ps(c + i),
                                             _mm256_load_ps(b + i)));
  }
  for (; i < n; i++)
    a[i] = b[i] + s * c[i];
}
