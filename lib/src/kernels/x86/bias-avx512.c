/* bias-avx512.c: AVX-512 table writers of the bias family (ALiBi rows,
 * fills, copies): masked heads and tails, non-temporal stores for tables
 * larger than the cache.  Bit-identical to kernels/ref/bias-ref.c. */
#if !defined(__AVX512F__)
#error "build this file with -mavx512f -mavx512bw -mavx512vl (see Makefile)"
#endif
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

static inline __mmask16 first_mask(int64_t k)
{
  return (__mmask16)((1u << k) - 1u); /* k in 0..15 */
}

/* Elements before out is 64-byte aligned (at most 15), capped at n. */
static inline int64_t head_count(const void *out, int64_t n)
{
  const int64_t h = (int64_t)(((64 - ((uintptr_t)out & 63)) & 63) / 4);
  return h < n ? h : n;
}

static void table_alibi_avx512(float *out, int64_t n, int64_t pq,
                               float slope, int stream)
{
  const __m512 m = _mm512_set1_ps(-slope), step = _mm512_set1_ps(16.0f);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                     12, 13, 14, 15);
  int64_t j = 0, h;
  __m512 d;

  if (n <= 0)
    return;
  if (!ab__alibi_steps_exact(n, pq) || ((uintptr_t)out & 3)) {
    for (j = 0; j < n; j++)
      out[j] = ab__alibi_value(pq, j, slope);
    return;
  }
  /* d holds pq - j for the 16 lanes starting at j */
  d = _mm512_sub_ps(_mm512_set1_ps((float)pq), iota);
  if (stream) {
    h = head_count(out, n);
    if (h) {
      _mm512_mask_storeu_ps(out, first_mask(h),
                            _mm512_mul_ps(m, _mm512_abs_ps(d)));
      j = h;
      d = _mm512_sub_ps(_mm512_set1_ps((float)(pq - j)), iota);
    }
    for (; j + 32 <= n; j += 32) {
      const __m512 d1 = _mm512_sub_ps(d, step);
      _mm512_stream_ps(out + j, _mm512_mul_ps(m, _mm512_abs_ps(d)));
      _mm512_stream_ps(out + j + 16, _mm512_mul_ps(m, _mm512_abs_ps(d1)));
      d = _mm512_sub_ps(d1, step);
    }
    for (; j + 16 <= n; j += 16) {
      _mm512_stream_ps(out + j, _mm512_mul_ps(m, _mm512_abs_ps(d)));
      d = _mm512_sub_ps(d, step);
    }
  } else {
    for (; j + 16 <= n; j += 16) {
      _mm512_storeu_ps(out + j, _mm512_mul_ps(m, _mm512_abs_ps(d)));
      d = _mm512_sub_ps(d, step);
    }
  }
  if (j < n)
    _mm512_mask_storeu_ps(out + j, first_mask(n - j),
                          _mm512_mul_ps(m, _mm512_abs_ps(d)));
}

static void table_fill_avx512(float *out, int64_t n, float v, int stream)
{
  const __m512 x = _mm512_set1_ps(v);
  int64_t j = 0, h;

  if (n <= 0)
    return;
  if ((uintptr_t)out & 3) { /* unaligned floats: no vector stores */
    for (j = 0; j < n; j++)
      out[j] = v;
    return;
  }
  if (stream) {
    h = head_count(out, n);
    if (h)
      _mm512_mask_storeu_ps(out, first_mask(h), x);
    for (j = h; j + 64 <= n; j += 64) {
      _mm512_stream_ps(out + j, x);
      _mm512_stream_ps(out + j + 16, x);
      _mm512_stream_ps(out + j + 32, x);
      _mm512_stream_ps(out + j + 48, x);
    }
    for (; j + 16 <= n; j += 16)
      _mm512_stream_ps(out + j, x);
  } else {
    for (; j + 16 <= n; j += 16)
      _mm512_storeu_ps(out + j, x);
  }
  if (j < n)
    _mm512_mask_storeu_ps(out + j, first_mask(n - j), x);
}

/* Copies 4-byte elements as integers so float payloads and int32 buckets
 * travel bit for bit. */
static void table_copy_avx512(void *out, const void *src, int64_t n,
                              int stream)
{
  int32_t *o = out;
  const int32_t *s = src;
  int64_t j = 0, h;

  if (n <= 0)
    return;
  if (!stream || ((uintptr_t)out & 3)) {
    memcpy(out, src, (size_t)n * 4);
    return;
  }
  h = head_count(out, n);
  if (h)
    _mm512_mask_storeu_epi32(o, first_mask(h),
                             _mm512_maskz_loadu_epi32(first_mask(h), s));
  for (j = h; j + 32 <= n; j += 32) {
    const __m512i a = _mm512_loadu_si512(s + j);
    const __m512i b = _mm512_loadu_si512(s + j + 16);
    _mm512_stream_si512((__m512i *)(o + j), a);
    _mm512_stream_si512((__m512i *)(o + j + 16), b);
  }
  for (; j + 16 <= n; j += 16)
    _mm512_stream_si512((__m512i *)(o + j), _mm512_loadu_si512(s + j));
  if (j < n)
    _mm512_mask_storeu_epi32(o + j, first_mask(n - j),
                             _mm512_maskz_loadu_epi32(first_mask(n - j),
                                                      s + j));
}

static void store_fence_x86(void) { _mm_sfence(); }

void ab__bias_kernels_avx512(struct ab__bias_kernels *k)
{
  k->table_alibi = table_alibi_avx512;
  k->table_fill = table_fill_avx512;
  k->table_copy = table_copy_avx512;
  k->store_fence = store_fence_x86;
}
