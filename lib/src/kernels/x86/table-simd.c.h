/* table-simd.c.h: the x86 table writers of the bias family (ALiBi rows,
 * fills, copies, sums), written once over the vector vocabulary (simd-*.h)
 * and included by bias-avx2.c and bias-avx512.c.  Partial vectors at the
 * head (up to the first aligned address, when streaming) and at the tail;
 * non-temporal stores for tables larger than the cache.  Bit-identical to
 * kernels/ref/bias-ref.c. */

/* Elements before out is aligned for V_STREAM (at most V_W - 1), capped
 * at n. */
AI int64_t head_count(const void *out, int64_t n)
{
  const uintptr_t a = V_W * sizeof(float);
  const int64_t h = (int64_t)(((a - ((uintptr_t)out & (a - 1))) & (a - 1)) /
                              sizeof(float));

  return h < n ? h : n;
}

/* A float pointer that is not 4-byte aligned takes no vector stores. */
AI int misaligned(const void *out) { return ((uintptr_t)out & 3) != 0; }

static void V_FN(table_alibi)(float *out, int64_t n, int64_t pq, float slope,
                              int stream)
{
  const V m = V_SET1(-slope), step = V_SET1((float)V_W), iota = V_IOTA();
  int64_t j = 0, h;
  V d;

  if (n <= 0)
    return;
  if (!ab__alibi_steps_exact(n, pq) || misaligned(out)) {
    for (j = 0; j < n; j++)
      out[j] = ab__alibi_value(pq, j, slope);
    return;
  }
  /* d holds pq - j for the V_W lanes starting at j */
  d = V_SUB(V_SET1((float)pq), iota);
  h = stream ? head_count(out, n) : 0;
  if (h) {
    V_STORE_PART(out, h, V_MUL(m, V_ABS(d)));
    j = h;
    d = V_SUB(V_SET1((float)(pq - j)), iota);
  }
  if (stream) {
    for (; j + 2 * V_W <= n; j += 2 * V_W) {
      const V d1 = V_SUB(d, step);
      V_STREAM(out + j, V_MUL(m, V_ABS(d)));
      V_STREAM(out + j + V_W, V_MUL(m, V_ABS(d1)));
      d = V_SUB(d1, step);
    }
    for (; j + V_W <= n; j += V_W) {
      V_STREAM(out + j, V_MUL(m, V_ABS(d)));
      d = V_SUB(d, step);
    }
  } else {
    for (; j + V_W <= n; j += V_W) {
      V_STOREU(out + j, V_MUL(m, V_ABS(d)));
      d = V_SUB(d, step);
    }
  }
  if (j < n)
    V_STORE_PART(out + j, n - j, V_MUL(m, V_ABS(d)));
}

static void V_FN(table_fill)(float *out, int64_t n, float v, int stream)
{
  const V x = V_SET1(v);
  int64_t j = 0, h;

  if (n <= 0)
    return;
  if (misaligned(out)) {
    for (j = 0; j < n; j++)
      out[j] = v;
    return;
  }
  if (stream) {
    h = head_count(out, n);
    if (h)
      V_STORE_PART(out, h, x);
    for (j = h; j + 4 * V_W <= n; j += 4 * V_W) {
      V_STREAM(out + j, x);
      V_STREAM(out + j + V_W, x);
      V_STREAM(out + j + 2 * V_W, x);
      V_STREAM(out + j + 3 * V_W, x);
    }
    for (; j + V_W <= n; j += V_W)
      V_STREAM(out + j, x);
  } else {
    for (; j + V_W <= n; j += V_W)
      V_STOREU(out + j, x);
  }
  if (j < n)
    V_STORE_PART(out + j, n - j, x);
}

/* Copies 4-byte elements through float vectors: loads and stores move
 * bits unchanged, so float payloads and int32 buckets travel exactly. */
static void V_FN(table_copy)(void *out, const void *src, int64_t n,
                             int stream)
{
  float *o = out;
  const float *s = src;
  int64_t j, h;

  if (n <= 0)
    return;
  if (!stream || misaligned(out)) {
    memcpy(out, src, (size_t)n * 4);
    return;
  }
  h = head_count(out, n);
  if (h)
    V_STORE_PART(o, h, V_LOAD_PART(s, h));
  for (j = h; j + 2 * V_W <= n; j += 2 * V_W) {
    const V a = V_LOADU(s + j), b = V_LOADU(s + j + V_W);
    V_STREAM(o + j, a);
    V_STREAM(o + j + V_W, b);
  }
  for (; j + V_W <= n; j += V_W)
    V_STREAM(o + j, V_LOADU(s + j));
  if (j < n)
    V_STORE_PART(o + j, n - j, V_LOAD_PART(s + j, n - j));
}

static void V_FN(table_add)(float *out, const float *a, const float *b,
                            int64_t n, int stream)
{
  int64_t j = 0, h;

  if (n <= 0)
    return;
  if (misaligned(out)) {
    for (j = 0; j < n; j++)
      out[j] = a[j] + b[j];
    return;
  }
  h = stream ? head_count(out, n) : 0;
  if (h)
    V_STORE_PART(out, h, V_ADD(V_LOAD_PART(a, h), V_LOAD_PART(b, h)));
  for (j = h; j + V_W <= n; j += V_W)
    V_STORE_NT(out + j, V_ADD(V_LOADU(a + j), V_LOADU(b + j)), stream);
  if (j < n)
    V_STORE_PART(out + j, n - j,
                 V_ADD(V_LOAD_PART(a + j, n - j), V_LOAD_PART(b + j, n - j)));
}

static void V_FN(store_fence)(void) { V_SFENCE(); }
