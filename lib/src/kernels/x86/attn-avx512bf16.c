/* attn-avx512bf16.c: qk_tile_bf16 (kernels/attn.h) with AVX512-BF16's
 * vdpbf16ps -- each instruction multiplies 16 rows' pairs of bfloat16
 * query values by one key's pair (broadcast) and adds both products into
 * the 16 float accumulators: twice the products of an FMA.  The register
 * block is attn-avx512.c's, 6 keys x 4 vectors of 16 rows: 24 accumulators,
 * 4 query vectors and the broadcast pair in the 32 zmm registers.
 *
 * Installed by init-avx512.c when the CPU has AVX512-BF16; the job uses it
 * where kernels.attn.bf16_dot_fast says it beats widening. */
#include "../kernels.h"
#include "simd-avx512.h"

#if !defined(__AVX512BF16__)
#error "build this file with -mavx512bf16 as well (see Makefile)"
#endif

#include <string.h>

#define MR_MAX 6
#define NV_MAX 4

/* k's pair (c, c+1) of row r as a broadcast; `last` for an odd d's final
 * element, whose partner is 0 (and not read: it is past the row). */
AI __m512bh key_pair(const uint16_t *k, int64_t c, int last)
{
  uint32_t v;

  if (last)
    v = k[c];
  else
    memcpy(&v, k + c, sizeof v);
  return (__m512bh)_mm512_set1_epi32((int)v);
}

AI void micro_bf16(const int MR, const int NV, float *s, int64_t lds,
                   const uint16_t *k, int64_t ldk, const uint32_t *q2,
                   int64_t ldq, int64_t d, float scale)
{
  __m512 acc[MR_MAX][NV_MAX];
  const int64_t pairs = d / 2;
  int64_t t;
  int r, v;

#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (v = 0; v < NV; v++)
      acc[r][v] = _mm512_setzero_ps();
  for (t = 0; t <= pairs; t++) {
    __m512bh qv[NV_MAX];
    const int last = t == pairs;
    if (last && !(d & 1))
      break;
#pragma GCC unroll 4
    for (v = 0; v < NV; v++)
      qv[v] = (__m512bh)_mm512_load_si512(q2 + t * ldq + 16 * v);
#pragma GCC unroll 8
    for (r = 0; r < MR; r++) {
      __m512bh kp = key_pair(k + r * ldk, 2 * t, last);
#pragma GCC unroll 4
      for (v = 0; v < NV; v++)
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], kp, qv[v]);
    }
  }
#pragma GCC unroll 8
  for (r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (v = 0; v < NV; v++)
      _mm512_store_ps(s + r * lds + 16 * v,
                      _mm512_mul_ps(acc[r][v], _mm512_set1_ps(scale)));
}

#define MICRO_CASE(MR, NV)                                                     \
  case (MR - 1) * NV_MAX + (NV - 1):                                           \
    micro_bf16(MR, NV, s, lds, k, ldk, q2, ldq, d, scale);                     \
    break;
#define MICRO_ROW(MR)                                                          \
  MICRO_CASE(MR, 1) MICRO_CASE(MR, 2) MICRO_CASE(MR, 3) MICRO_CASE(MR, 4)

static void micro_bf16_any(int mr, int nv, float *s, int64_t lds,
                           const uint16_t *k, int64_t ldk, const uint32_t *q2,
                           int64_t ldq, int64_t d, float scale)
{
  switch ((mr - 1) * NV_MAX + (nv - 1)) {
    MICRO_ROW(1) MICRO_ROW(2) MICRO_ROW(3) MICRO_ROW(4) MICRO_ROW(5)
    MICRO_ROW(6)
  default:
    break;
  }
}

/* Keys in blocks of MR_MAX, rows in blocks of NV_MAX vectors (rows are
 * padded to AB__ATTN_ROW_PAD = 16: whole vectors). */
static void qk_tile_bf16_avx512(float *s, int64_t lds, const uint16_t *k,
                                int64_t ldk, const uint32_t *q2, int64_t ldq,
                                int64_t nk, int64_t d, int64_t m, float scale)
{
  const int64_t nvec = (m + 15) / 16;
  int64_t i0, j0;

  for (i0 = 0; i0 < nvec * 16; i0 += 16 * NV_MAX) {
    int nv = (int)(nvec - i0 / 16 < NV_MAX ? nvec - i0 / 16 : NV_MAX);
    for (j0 = 0; j0 < nk; j0 += MR_MAX) {
      int mr = (int)(nk - j0 < MR_MAX ? nk - j0 : MR_MAX);
      if (mr == MR_MAX && nv == NV_MAX)
        micro_bf16(MR_MAX, NV_MAX, s + j0 * lds + i0, lds, k + j0 * ldk, ldk,
                   q2 + i0, ldq, d, scale);
      else
        micro_bf16_any(mr, nv, s + j0 * lds + i0, lds, k + j0 * ldk, ldk,
                       q2 + i0, ldq, d, scale);
    }
  }
}

void ab__attn_kernels_avx512bf16(struct ab__attn_kernels *k, int fast)
{
  k->qk_tile_bf16 = qk_tile_bf16_avx512;
  k->bf16_dot_fast = fast;
}
