/* probe-avx512.c: roofline probe kernels with 512-bit vectors -- an FMA
 * throughput loop, the same loop of bfloat16 dot products (vdpbf16ps), and
 * the triad a = b + s*c with normal or non-temporal stores.  Built with
 * AVX-512 flags (Makefile); called only after __builtin_cpu_supports
 * said yes to avx512f (and avx512bf16 for the dot products). */
#if !defined(__AVX512F__) || !defined(__FMA__) || !defined(__AVX512BF16__)
#error "build this file with -mavx512f -mfma -mavx512bf16 (see the Makefile's bench rules)"
#endif
#include <immintrin.h>

#include "bench.h"

/* One step of a chain: an FMA, or (bf16) a bfloat16 dot product
 * (vdpbf16ps: 32 products added pairwise into 16 floats). */
static inline __attribute__((always_inline)) __m512 chain_step(__m512 a,
                                                                int bf16)
{
  if (bf16) {
#if defined(__AVX512BF16__)
    return _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi16(0x3f80),
                            (__m512bh)_mm512_set1_epi16(0x3380));
#endif
  }
  return _mm512_fmadd_ps(a, _mm512_set1_ps(0.999999f),
                         _mm512_set1_ps(1e-7f));
}

/* 16 independent accumulators: Zen 4 has 2 FMA pipes of latency 4, so at
 * least 8 chains are needed to keep both busy; 16 leaves margin for
 * cores with longer latency (Intel: 2 x 4) and still fits the 32 zmm
 * registers with the two operands.  Returns the flops done: 32 per
 * 16-lane FMA, 64 per vdpbf16ps. */
static inline __attribute__((always_inline)) double chains16(int64_t iters,
                                                             int bf16)
{
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
    a0 = chain_step(a0, bf16);
    a1 = chain_step(a1, bf16);
    a2 = chain_step(a2, bf16);
    a3 = chain_step(a3, bf16);
    a4 = chain_step(a4, bf16);
    a5 = chain_step(a5, bf16);
    a6 = chain_step(a6, bf16);
    a7 = chain_step(a7, bf16);
    a8 = chain_step(a8, bf16);
    a9 = chain_step(a9, bf16);
    a10 = chain_step(a10, bf16);
    a11 = chain_step(a11, bf16);
    a12 = chain_step(a12, bf16);
    a13 = chain_step(a13, bf16);
    a14 = chain_step(a14, bf16);
    a15 = chain_step(a15, bf16);
  }
  a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  a8 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                     _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15)));
  _mm512_storeu_ps(sink, _mm512_add_ps(a0, a8));
  keep = sink[0]; /* observable: the loop cannot vanish */
  (void)keep;
  return (double)iters * 16 * (bf16 ? 64 : 32);
}

double bench_fma_avx512(int64_t iters) { return chains16(iters, 0); }

/* Called only after __builtin_cpu_supports("avx512bf16"); the file is
 * built with -mavx512bf16, which the compiler uses in this function only
 * (it never turns FMAs into bfloat16 dot products). */
double bench_bf16_dot_avx512(int64_t iters) { return chains16(iters, 1); }

float bench_read_avx512(const float *a, int64_t n)
{
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;

  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
  }
  for (; i + 16 <= n; i += 16)
    s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
  return _mm512_reduce_add_ps(
      _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
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
