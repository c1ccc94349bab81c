/* none.c: no position bias -- zeros (a table still carries the mask).
 * Attention adds nothing for it. */
#include "family.h"

static enum ab_status none_check(const struct ab_bias_params *p, int64_t H)
{
  (void)p;
  (void)H;
  return AB_STATUS_OK;
}

static void none_span(const struct ab__bias *b,
                      const struct ab__bias_kernels *k, int64_t h, int64_t pq,
                      int64_t j0, int64_t n, float *out, int stream)
{
  (void)b;
  (void)h;
  (void)pq;
  (void)j0;
  k->table_fill(out, n, 0.0f, stream);
}

const struct ab__bias_family ab__bias_none = {
    .name = "none",
    .kind = AB__BIAS_ZERO,
    .check = none_check,
    .span = none_span,
};
