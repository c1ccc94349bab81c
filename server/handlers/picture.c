/* picture.c: the image/png answers of /v1/bias and /v1/attention -- which
 * heads to draw ("head", or "heads" as a grid) and the drawing itself,
 * through the codec's heatmap (codec/png.c). */
#include "params.h"

#include <stdio.h>

int srv_picture_select(const struct srv_pctx *pc, struct srv_picture *pic,
                       int has_head, int64_t num_heads, struct srv_err *err)
{
  char ptr[256];
  int64_t *sel;
  size_t n, i;

  if (!pic->heads) {
    if (pic->head >= num_heads)
      return srv_fail(err, 400, srv_pctx_ptr(pc, "head", ptr, sizeof ptr),
                      "head %lld does not exist: num_heads is %lld",
                      (long long)pic->head, (long long)num_heads);
    pic->sel = &pic->head;
    pic->n = 1;
    return 0;
  }
  srv_pctx_ptr(pc, "heads", ptr, sizeof ptr);
  if (has_head)
    return srv_fail(err, 400, ptr, "give head or heads, not both");
  n = json_array_size(pic->heads);
  if (n < 1 || n > SRV_HEATMAP_MAX_PANELS)
    return srv_fail(err, 400, ptr,
                    "heads lists %zu heads; a picture draws 1 to %d", n,
                    SRV_HEATMAP_MAX_PANELS);
  sel = srv_arena_alloc(&pc->c->arena, n * sizeof *sel);
  if (!sel)
    return srv_fail(err, 500, ptr, "out of memory");
  srv_params_ints(pic->heads, sel);
  for (i = 0; i < n; i++)
    if (sel[i] >= num_heads) {
      char eptr[280];
      snprintf(eptr, sizeof eptr, "%s/%zu", ptr, i);
      return srv_fail(err, 400, eptr,
                      "heads[%zu] = %lld does not exist: num_heads is %lld", i,
                      (long long)sel[i], (long long)num_heads);
    }
  pic->sel = sel;
  pic->n = (int)n;
  return 0;
}

int srv_picture_draw(struct srv_call *c, const struct srv_picture *pic,
                     const float *table, int heads, int64_t rows,
                     int64_t cols, int64_t row0, const char *title,
                     int zero_masked, struct srv_err *err)
{
  const float *planes[SRV_HEATMAP_MAX_PANELS];
  struct srv_heatmap hm;
  int i;

  hm.n = heads ? pic->n : 1;
  for (i = 0; i < hm.n; i++)
    planes[i] = table + (heads ? pic->sel[i] : 0) * rows * cols;
  hm.panels = planes;
  hm.labels = heads ? pic->sel : NULL;
  hm.rows = rows;
  hm.cols = cols;
  hm.row0 = row0;
  hm.title = title;
  hm.zero_masked = zero_masked;
  if (srv_codec_png_heatmap(&hm, &c->plan.custom, err) != 0)
    return -1;
  c->plan.custom_type = "image/png";
  return 0;
}
