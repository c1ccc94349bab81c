/* attn-ref.c: scalar reference kernels of the attention family -- plain
 * loops that define what the SIMD kernels must compute (the oracle of the
 * parity tests) and the fallback for any CPU. */
#include "../kernels.h"

#include <math.h>

static void qk_tile_ref(float *s, int64_t lds, const float *k, int64_t ldk,
                        const float *qt, int64_t ldq, int64_t nk, int64_t d,
                        int64_t m)
{
  int64_t i, j, c;

  for (j = 0; j < nk; j++)
    for (i = 0; i < m; i++) {
      float acc = 0.0f;
      /* Summed in c order; the weights pass recomputes scores with the
       * same kernel, so they are bit-identical to the first pass. */
      for (c = 0; c < d; c++)
        acc += k[j * ldk + c] * qt[c * ldq + i];
      s[j * lds + i] = acc;
    }
}

static void pv_tile_ref(float *ot, int64_t ldo, const float *alpha,
                        const float *v, int64_t ldv, const float *p,
                        int64_t ldp, int64_t nk, int64_t dv, int64_t m)
{
  int64_t i, j, c;

  for (c = 0; c < dv; c++)
    for (i = 0; i < m; i++) {
      float acc = ot[c * ldo + i];
      if (alpha)
        acc *= alpha[i];
      for (j = 0; j < nk; j++)
        acc += v[j * ldv + c] * p[j * ldp + i];
      ot[c * ldo + i] = acc;
    }
}

/* Score (i, j) after softcap, biases and masks (see attn.h). */
static float tile_score(const struct ab__attn_tile *t, int64_t i, int64_t j)
{
  float x = t->s[j * t->ld + i];

  if (t->softcap > 0.0f)
    x = t->softcap * tanhf(x);
  if (t->bptr)
    x += t->bptr[i][-j];
  if (t->tb)
    x += t->tb[j * t->ld + i];
  if (t->lo && (j < t->lo[i] || j >= t->hi[i]))
    x = -INFINITY;
  return x;
}

static void softmax_tile_ref(const struct ab__attn_tile *t)
{
  int64_t i, j;

  for (i = 0; i < t->m; i++) {
    float mx = -INFINITY, mu, sum = 0.0f;

    for (j = 0; j < t->nk; j++) {
      float x = tile_score(t, i, j);
      t->s[j * t->ld + i] = x;
      if (x > mx)
        mx = x;
    }
    if (t->mode == AB__ATTN_FINAL) {
      /* A fully masked row has max -inf and sum 0: its weights are 0. */
      float l = t->l[i];
      mu = t->mx[i] == -INFINITY ? 0.0f : t->mx[i];
      for (j = 0; j < t->nk; j++) {
        float *x = &t->s[j * t->ld + i];
        *x = l > 0.0f ? expf(*x - mu) / l : 0.0f;
      }
      continue;
    }
    if (t->mx[i] > mx)
      mx = t->mx[i];
    /* Subtract 0 instead of -inf when everything so far is masked, so
     * exp(-inf - mu) is 0 and never exp(-inf + inf) = NaN. */
    mu = mx == -INFINITY ? 0.0f : mx;
    t->alpha[i] = expf(t->mx[i] - mu);
    for (j = 0; j < t->nk; j++) {
      float *x = &t->s[j * t->ld + i];
      *x = expf(*x - mu);
      sum += *x;
    }
    t->l[i] = t->l[i] * t->alpha[i] + sum;
    t->mx[i] = mx;
  }
}

/* Row by row, keys in order (the x86 kernels sum 4 keys' lanes apart). */
static void softmax_rows4_ref(float *s, int64_t nk, float *mx, float *l,
                              float *alpha)
{
  int64_t i, j;

  for (i = 0; i < 4; i++) {
    float m = mx[i], mu, sum = 0.0f;

    for (j = 0; j < nk; j++)
      if (s[4 * j + i] > m)
        m = s[4 * j + i];
    mu = m == -INFINITY ? 0.0f : m;
    alpha[i] = expf(mx[i] - mu);
    for (j = 0; j < nk; j++) {
      s[4 * j + i] = expf(s[4 * j + i] - mu);
      sum += s[4 * j + i];
    }
    l[i] = l[i] * alpha[i] + sum;
    mx[i] = m;
  }
}

static void qk_rows_ref(float *s, int64_t lds, const void *k, int64_t ldk,
                        enum ab__elem ke, const float *q, int64_t ldq,
                        int64_t nk, int64_t d, int64_t m)
{
  int64_t i, j, c;

  for (j = 0; j < nk; j++)
    for (i = 0; i < m; i++) {
      float acc = 0.0f;
      for (c = 0; c < d; c++)
        acc += ab__elem_load(k, ke, j * ldk + c) * q[i * ldq + c];
      s[j * lds + i] = acc;
    }
}

static void pv_rows_ref(float *o, int64_t ldo, const float *alpha,
                        const void *v, int64_t ldv, enum ab__elem ve,
                        const float *p, int64_t ldp, int64_t nk, int64_t dv,
                        int64_t m)
{
  int64_t i, j, c;

  for (i = 0; i < m; i++)
    for (c = 0; c < dv; c++) {
      float acc = o[i * ldo + c];
      if (alpha)
        acc *= alpha[i];
      for (j = 0; j < nk; j++)
        acc += ab__elem_load(v, ve, j * ldv + c) * p[j * ldp + i];
      o[i * ldo + c] = acc;
    }
}

static void widen_ref(float *dst, int64_t ldd, const void *src, int64_t lds,
                      enum ab__elem e, int64_t rows, int64_t cols)
{
  int64_t r, c;

  for (r = 0; r < rows; r++)
    for (c = 0; c < cols; c++)
      dst[r * ldd + c] = ab__elem_load(src, e, r * lds + c);
}

static void qk_tile_bf16_ref(float *s, int64_t lds, const uint16_t *k,
                             int64_t ldk, const uint32_t *q2, int64_t ldq,
                             int64_t nk, int64_t d, int64_t m, float scale)
{
  int64_t i, j, c;

  for (j = 0; j < nk; j++)
    for (i = 0; i < m; i++) {
      float acc = 0.0f;
      for (c = 0; c < d; c++) {
        const uint32_t pair = q2[(c / 2) * ldq + i];
        acc += ab__bf16_to_float(k[j * ldk + c]) *
               ab__bf16_to_float((uint16_t)(c % 2 ? pair >> 16 : pair));
      }
      s[j * lds + i] = acc * scale;
    }
}

void ab__attn_kernels_ref(struct ab__attn_kernels *k)
{
  k->qk_tile = qk_tile_ref;
  k->pv_tile = pv_tile_ref;
  k->softmax_tile = softmax_tile_ref;
  k->softmax_rows4 = softmax_rows4_ref;
  k->qk_rows = qk_rows_ref;
  k->pv_rows = pv_rows_ref;
  k->widen = widen_ref;
  k->qk_tile_bf16 = qk_tile_bf16_ref;
  k->bf16_dot_fast = 0; /* the scalar one is for tests only */
}
