/* bias-ref.c: scalar reference kernels of the bias-table family -- the
 * oracle the SIMD table writers are checked against. */
#include "../kernels.h"

#include <string.h>

/* The reference never streams: `stream` is a hint it may ignore. */
static void table_alibi_ref(float *out, int64_t n, int64_t pq, float slope,
                            int stream)
{
  int64_t j;

  (void)stream;
  for (j = 0; j < n; j++)
    out[j] = ab__alibi_value(pq, j, slope);
}

static void table_fill_ref(float *out, int64_t n, float v, int stream)
{
  int64_t j;

  (void)stream;
  for (j = 0; j < n; j++)
    out[j] = v;
}

static void table_copy_ref(void *out, const void *src, int64_t n, int stream)
{
  (void)stream;
  if (n > 0)
    memcpy(out, src, (size_t)n * 4);
}

static void table_add_ref(float *out, const float *a, const float *b,
                          int64_t n, int stream)
{
  int64_t j;

  (void)stream;
  for (j = 0; j < n; j++)
    out[j] = a[j] + b[j];
}

static void store_fence_ref(void) {}

void ab__bias_kernels_ref(struct ab__bias_kernels *k)
{
  k->table_alibi = table_alibi_ref;
  k->table_fill = table_fill_ref;
  k->table_copy = table_copy_ref;
  k->table_add = table_add_ref;
  k->store_fence = store_fence_ref;
}
