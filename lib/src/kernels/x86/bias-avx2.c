/* bias-avx2.c: AVX2 table writers of the bias family (ALiBi rows, fills,
 * copies), with non-temporal stores for tables larger than the cache.
 * Bit-identical to kernels/ref/bias-ref.c. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "build this file with -mavx2 -mfma (see Makefile)"
#endif
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

/* Elements to write one by one until out is 32-byte aligned (stream),
 * capped at n.  Without streaming there is no head. */
static inline int64_t head_count(const void *out, int64_t n, int stream)
{
  int64_t h;

  if (!stream)
    return 0;
  h = (int64_t)(((32 - ((uintptr_t)out & 31)) & 31) / 4);
  /* a float pointer not 4-aligned cannot be streamed at all */
  if ((uintptr_t)out & 3)
    return n;
  return h < n ? h : n;
}

static void table_alibi_avx2(float *out, int64_t n, int64_t pq, float slope,
                             int stream)
{
  const __m256 sign = _mm256_set1_ps(-0.0f), m = _mm256_set1_ps(-slope);
  const __m256 step = _mm256_set1_ps(8.0f);
  int64_t j, h;
  __m256 d;

  if (n <= 0)
    return;
  if (!ab__alibi_steps_exact(n, pq)) {
    for (j = 0; j < n; j++)
      out[j] = ab__alibi_value(pq, j, slope);
    return;
  }
  h = head_count(out, n, stream);
  for (j = 0; j < h; j++)
    out[j] = ab__alibi_value(pq, j, slope);
  /* d holds pq - j for the 8 lanes starting at j */
  d = _mm256_sub_ps(_mm256_set1_ps((float)(pq - j)),
                    _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
  if (stream) {
    for (; j + 16 <= n; j += 16) {
      const __m256 d1 = _mm256_sub_ps(d, step);
      _mm256_stream_ps(out + j, _mm256_mul_ps(m, _mm256_andnot_ps(sign, d)));
      _mm256_stream_ps(out + j + 8,
                       _mm256_mul_ps(m, _mm256_andnot_ps(sign, d1)));
      d = _mm256_sub_ps(d1, step);
    }
    for (; j + 8 <= n; j += 8) {
      _mm256_stream_ps(out + j, _mm256_mul_ps(m, _mm256_andnot_ps(sign, d)));
      d = _mm256_sub_ps(d, step);
    }
  } else {
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(out + j, _mm256_mul_ps(m, _mm256_andnot_ps(sign, d)));
      d = _mm256_sub_ps(d, step);
    }
  }
  for (; j < n; j++)
    out[j] = ab__alibi_value(pq, j, slope);
}

static void table_fill_avx2(float *out, int64_t n, float v, int stream)
{
  const __m256 x = _mm256_set1_ps(v);
  int64_t j, h = head_count(out, n, stream);

  for (j = 0; j < h; j++)
    out[j] = v;
  if (stream) {
    for (; j + 32 <= n; j += 32) {
      _mm256_stream_ps(out + j, x);
      _mm256_stream_ps(out + j + 8, x);
      _mm256_stream_ps(out + j + 16, x);
      _mm256_stream_ps(out + j + 24, x);
    }
    for (; j + 8 <= n; j += 8)
      _mm256_stream_ps(out + j, x);
  } else {
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(out + j, x);
  }
  for (; j < n; j++)
    out[j] = v;
}

/* Copies 4-byte elements as integers so float payloads and int32 buckets
 * travel bit for bit. */
static void table_copy_avx2(void *out, const void *src, int64_t n,
                            int stream)
{
  unsigned char *o = out;
  const unsigned char *s = src;
  int64_t j, h;

  if (n <= 0)
    return;
  if (!stream) {
    memcpy(out, src, (size_t)n * 4);
    return;
  }
  h = head_count(out, n, stream);
  if (h)
    memcpy(o, s, (size_t)h * 4);
  for (j = h; j + 16 <= n; j += 16) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(s + 4 * j));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(s + 4 * j + 32));
    _mm256_stream_si256((__m256i *)(o + 4 * j), a);
    _mm256_stream_si256((__m256i *)(o + 4 * j + 32), b);
  }
  for (; j + 8 <= n; j += 8)
    _mm256_stream_si256((__m256i *)(o + 4 * j),
                        _mm256_loadu_si256((const __m256i *)(s + 4 * j)));
  if (j < n)
    memcpy(o + 4 * j, s + 4 * j, (size_t)(n - j) * 4);
}

static void store_fence_x86(void) { _mm_sfence(); }

void ab__bias_kernels_avx2(struct ab__bias_kernels *k)
{
  k->table_alibi = table_alibi_avx2;
  k->table_fill = table_fill_avx2;
  k->table_copy = table_copy_avx2;
  k->store_fence = store_fence_x86;
}
