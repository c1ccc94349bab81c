/* probe-avx512.c: roofline probe kernels with 512-bit vectors -- an FMA
 * throughput loop and the triad a = b + s*c with normal or non-temporal
 * stores.  Built with AVX-512 flags (Makefile); called only after
 * __builtin_cpu_supports("avx512f") said yes. */
#if !defined(__AVX512F__) || !defined(__FMA__)
#error "build this file with -mavx512f -mfma (see the Makefile's bench rules)"
#endif
#include <immintrin.h>

#include "bench.h"

/* 16 independent accumulators: Zen 4 has 2 FMA pipes of latency 4, so at
 * least 8 chains are needed to keep both busy; 16 leaves margin for
 * cores with longer latency (Intel: 2 x 4) and still fits the 32 zmm
 * registers with the two operands. */
double bench_fma_avx512(int64_t iters)
{
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
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

  /* Written out: at -O2 a loop over an array of accumulators is kept
   * in memory, and the store-to-load chain would time the cache, not
   * the FMA units.  Each chain depends only on itself. */
  for (i = 0; i < iters; i++) {
    a0 = _mm512_fmadd_ps(a0, x, y);
    a1 = _mm512_fmadd_ps(a1, x, y);
    a2 = _mm512_fmadd_ps(a2, x, y);
    a3 = _mm512_fmadd_ps(a3, x, y);
    a4 = _mm512_fmadd_ps(a4, x, y);
    a5 = _mm512_fmadd_ps(a5, x, y);
    a6 = _mm512_fmadd_ps(a6, x, y);
    a7 = _mm512_fmadd_ps(a7, x, y);
    a8 = _mm512_fmadd_ps(a8, x, y);
    a9 = _mm512_fmadd_ps(a9, x, y);
    a10 = _mm512_fmadd_ps(a10, x, y);
    a11 = _mm512_fmadd_ps(a11, x, y);
    a12 = _mm512_fmadd_ps(a12, x, y);
    a13 = _mm512_fmadd_ps(a13, x, y);
    a14 = _mm512_fmadd_ps(a14, x, y);
    a15 = _mm512_fmadd_ps(a15, x, y);
  }
  a0 = _mm512_add_ps(a0, a1);
  a0 = _mm512_add_ps(a0, a2);
  a0 = _mm512_add_ps(a0, a3);
  a0 = _mm512_add_ps(a0, a4);
  a0 = _mm512_add_ps(a0, a5);
  a0 = _mm512_add_ps(a0, a6);
  a0 = _mm512_add_ps(a0, a7);
  a0 = _mm512_add_ps(a0, a8);
  a0 = _mm512_add_ps(a0, a9);
  a0 = _mm512_add_ps(a0, a10);
  a0 = _mm512_add_ps(a0, a11);
  a0 = _mm512_add_ps(a0, a12);
  a0 = _mm512_add_ps(a0, a13);
  a0 = _mm512_add_ps(a0, a14);
  a0 = _mm512_add_ps(a0, a15);
  _mm512_storeu_ps(sink, a0);
  keep = sink[0]; /* observable: the loop cannot vanish */
  (void)keep;
  return (double)iters * 16 * 16 * 2;
}

void bench_triad_avx512(float *a, const float *b, const float *c, float s,
                        int64_t n, int nt)
{
  const __m512 vs = _mm512_set1_ps(s);
  int64_t i = 0;

  /* The caller passes 64-byte aligned chunks whose length is a multiple
   * of 16, so there is no tail and streaming stores are legal. */
  if (nt) {
    for (; i + 16 <= n; i += 16)
      _mm512_stream_ps(a + i, _mm512_fmadd_ps(vs, _mm512_load_ps(c + i),
                                              _mm512_load_ps(b + i)));
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_store_ps(a + i, _mm512_fmadd_ps(vs, _mm512_load_ps(c + i),
                                             _mm512_load_ps(b + i)));
  }
  for (; i < n; i++)
    a[i] = b[i] + s * c[i];
}
