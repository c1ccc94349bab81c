/* png.c: srv_codec_png_heatmap -- a [rows, cols] matrix as a picture a
 * person can read: a viridis colour ramp (perceptually uniform, readable in
 * grey and by most colour-blind readers) from the smallest to the largest
 * finite value, -inf (masked) cells in mid grey, NaN/+inf in magenta, a
 * title, and a legend bar labelled with its min and max.  Matrices larger
 * than HEAT_MAX cells on a side are mean-pooled (over finite values) down to
 * it; small ones are scaled up.  Memory is bounded by the picture size, not
 * the matrix: one pass over the data accumulates the pooled cells. */
#include "codec-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAT_MAX 768    /* pooled cells per side, at most */
#define HEAT_TARGET 512 /* small matrices are scaled up towards this */
#define CELL_MAX 64     /* largest pixel size of one cell */
#define MARGIN 16
#define GLYPH_W SRV_GLYPH_W
#define GLYPH_H SRV_GLYPH_H
#define TITLE_MAX 64 /* characters of the title drawn */
#define BAR_W 24

/* ======================================================================
 * colours
 * ====================================================================== */

/* matplotlib's viridis at 0, 0.1, ..., 1 (van der Walt and Smith, 2015);
 * linear interpolation between these stays within a few units of it. */
static const unsigned char g_viridis[11][3] = {
    {68, 1, 84},    {72, 36, 117},  {65, 68, 135},  {53, 95, 141},
    {42, 120, 142}, {33, 145, 140}, {34, 168, 132}, {68, 191, 112},
    {122, 209, 81}, {189, 223, 38}, {253, 231, 37},
};
static const unsigned char g_masked[3] = {128, 128, 128};
static const unsigned char g_invalid[3] = {255, 0, 255};
static const unsigned char *const g_ink = srv_codec__ink;

static void ramp(double t, unsigned char *rgb)
{
  int i, k;
  double f;

  if (!(t > 0)) /* also NaN */
    t = 0;
  if (t > 1)
    t = 1;
  f = t * 10;
  i = (int)f;
  if (i >= 10)
    i = 9;
  f -= i;
  for (k = 0; k < 3; k++)
    rgb[k] = (unsigned char)lround(g_viridis[i][k] +
                                   f * (g_viridis[i + 1][k] - g_viridis[i][k]));
}

/* ======================================================================
 * the heatmap
 * ====================================================================== */

int srv_codec_png_heatmap(const float *data, int64_t rows, int64_t cols,
                          const char *title, struct srv_buf *out,
                          struct srv_err *err)
{
  struct srv_image im;
  char ttl[TITLE_MAX + 1], lo_s[32], hi_s[32];
  int64_t oh, ow, r, k, n;
  int sx, sy, pw, ph, hx, hy, lx, lh, w, h, y, x, any_masked = 0,
      any_invalid = 0, label_w;
  double lo = INFINITY, hi = -INFINITY, *sum = NULL;
  int32_t *cnt = NULL;
  uint8_t *flags = NULL; /* bit 0: a -inf cell, bit 1: NaN/+inf */
  size_t cells;
  unsigned char rgb[3];
  int rc;

  if (!data || rows < 1 || cols < 1 || ab_mul_overflow(rows, cols, &n))
    return srv_fail(err, 400, NULL,
                    "a heatmap needs a [rows, cols] matrix with rows, cols "
                    ">= 1 (got [%lld, %lld])",
                    (long long)rows, (long long)cols);
  oh = rows > HEAT_MAX ? HEAT_MAX : rows;
  ow = cols > HEAT_MAX ? HEAT_MAX : cols;
  cells = (size_t)(oh * ow);
  sum = calloc(cells, sizeof *sum);
  cnt = calloc(cells, sizeof *cnt);
  flags = calloc(cells, 1);
  if (!sum || !cnt || !flags)
    goto oom;

  /* Pool: input row r lands in output row r*oh/rows (bins of equal size
   * up to one), likewise for columns. */
  for (r = 0; r < rows; r++) {
    const float *row = data + r * cols;
    int64_t orow = r * oh / rows, ocol = 0;
    /* Column k belongs to output column floor(k*ow/cols); the next
     * boundary is the first k with k*ow >= (ocol+1)*cols. */
    int64_t next = (cols + ow - 1) / ow;
    for (k = 0; k < cols; k++) {
      float v = row[k];
      size_t c;
      if (k == next) {
        ocol++;
        next = ((ocol + 1) * cols + ow - 1) / ow;
      }
      c = (size_t)(orow * ow + ocol);
      if (isfinite(v)) {
        sum[c] += v;
        cnt[c]++;
        if (v < lo)
          lo = v;
        if (v > hi)
          hi = v;
      } else if (v < 0) {
        flags[c] |= 1;
        any_masked = 1;
      } else {
        flags[c] |= 2;
        any_invalid = 1;
      }
    }
  }
  if (lo > hi) /* no finite value at all */
    lo = hi = 0;

  /* Layout. */
  sx = (int)(HEAT_TARGET / ow);
  sy = (int)(HEAT_TARGET / oh);
  sx = sx < 1 ? 1 : sx > CELL_MAX ? CELL_MAX : sx;
  sy = sy < 1 ? 1 : sy > CELL_MAX ? CELL_MAX : sy;
  pw = (int)ow * sx;
  ph = (int)oh * sy;
  srv_codec__printable(title, ttl, sizeof ttl);
  /* + 0.0 turns -0 into 0 for the labels. */
  snprintf(hi_s, sizeof hi_s, "%.4g", hi + 0.0);
  snprintf(lo_s, sizeof lo_s, "%.4g", lo + 0.0);
  label_w = (int)(strlen(hi_s) > strlen(lo_s) ? strlen(hi_s) : strlen(lo_s));
  if (label_w < 4)
    label_w = 4;
  hx = MARGIN;
  hy = MARGIN + GLYPH_H + MARGIN;
  lx = hx + pw + 2 * MARGIN;
  lh = ph < 160 ? 160 : ph;
  w = lx + BAR_W + 8 + label_w * GLYPH_W + MARGIN;
  if (w < 2 * MARGIN + (int)strlen(ttl) * GLYPH_W)
    w = 2 * MARGIN + (int)strlen(ttl) * GLYPH_W;
  h = hy + (ph > lh ? ph : lh) + MARGIN;
  if (any_masked || any_invalid)
    h += GLYPH_H + MARGIN;

  if (srv_codec__image_init(&im, w, h) != 0)
    goto oom;
  srv_codec__text(&im, MARGIN, MARGIN, ttl, 0);

  /* Cells, with a thin frame around the matrix. */
  srv_codec__fill_rect(&im, hx - 1, hy - 1, pw + 2, ph + 2, g_ink);
  for (y = 0; y < oh; y++) {
    for (x = 0; x < ow; x++) {
      size_t c = (size_t)y * (size_t)ow + (size_t)x;
      if (cnt[c])
        ramp(hi > lo ? (sum[c] / cnt[c] - lo) / (hi - lo) : 0.5, rgb);
      else
        memcpy(rgb, flags[c] & 1 ? g_masked : g_invalid, 3);
      srv_codec__fill_rect(&im, hx + x * sx, hy + y * sy, sx, sy, rgb);
    }
  }

  /* Legend: the ramp from max (top) to min (bottom), labelled. */
  srv_codec__fill_rect(&im, lx - 1, hy - 1, BAR_W + 2, lh + 2, g_ink);
  for (y = 0; y < lh; y++) {
    ramp(lh > 1 ? 1.0 - (double)y / (lh - 1) : 0.5, rgb);
    srv_codec__fill_rect(&im, lx, hy + y, BAR_W, 1, rgb);
  }
  srv_codec__text(&im, lx + BAR_W + 8, hy, hi_s, 0);
  srv_codec__text(&im, lx + BAR_W + 8, hy + lh - GLYPH_H, lo_s, 0);

  /* Swatches for the cells that have no value on the ramp. */
  x = MARGIN;
  y = hy + (ph > lh ? ph : lh) + MARGIN;
  if (any_masked) {
    srv_codec__fill_rect(&im, x, y, GLYPH_H, GLYPH_H, g_masked);
    srv_codec__text(&im, x + GLYPH_H + 6, y, "-inf", 0);
    x += GLYPH_H + 6 + 5 * GLYPH_W + MARGIN;
  }
  if (any_invalid) {
    srv_codec__fill_rect(&im, x, y, GLYPH_H, GLYPH_H, g_invalid);
    srv_codec__text(&im, x + GLYPH_H + 6, y, "nan/+inf", 0);
  }

  free(sum);
  free(cnt);
  free(flags);
  rc = srv_codec__png_write(&im, ttl, out, "heatmap", err);
  free(im.px);
  return rc;
oom:
  free(sum);
  free(cnt);
  free(flags);
  return srv_fail(err, 500, NULL, "out of memory drawing the heatmap");
}
