/* png.c: srv_codec_png_heatmap -- tables of queries x keys as a picture a
 * person can read: a viridis colour ramp (perceptually uniform, readable in
 * grey and by most colour-blind readers) from the smallest to the largest
 * finite value of all panels, masked cells (-inf in a bias table, weight
 * 0 in attention weights) in mid grey, NaN/+inf in magenta; axes labelled "key position" and "query position" with ticks at
 * round positions; square cells, so that a non-square table keeps its
 * shape (the picture is padded, never stretched); several heads as a grid
 * of titled panels sharing one colour bar.
 *
 * Tables larger than a panel's budget of cells on a side are mean-pooled
 * (over finite values) by the same factor on both axes; small ones are
 * scaled up by whole pixels.  Memory is bounded by the picture, not the
 * tables: one pass over each table accumulates its pooled cells. */
#include "codec-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PANEL_PX 512      /* long side of a lone panel, in pixels */
#define GRID_PX 1024      /* the panels of one grid row share about this */
#define PANEL_MIN_PX 160  /* ... but a panel's long side is at least this */
#define CELL_MAX 64       /* largest pixel size of one cell */
#define MARGIN 16
#define GAP 28            /* between panels */
#define FONT_SCALE SRV_FONT_SCALE
#define GLYPH_W SRV_GLYPH_W
#define GLYPH_H SRV_GLYPH_H
#define TICK_LEN 5
#define MAX_TICKS 8
#define TITLE_MAX 64 /* characters of a title drawn */
#define BAR_W 24
#define BAR_MIN_H 180 /* also leaves room for the y axis title */

static const char X_LABEL[] = "key position";
static const char Y_LABEL[] = "query position";

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

/* The drawing of every picture is raster.c's; these keep its names short
 * here. */
static void fill_rect(struct srv_image *im, int x, int y, int w, int h,
                      const unsigned char *rgb)
{
  srv_codec__fill_rect(im, x, y, w, h, rgb);
}

static int text_w(const char *s) { return srv_codec__text_w(s); }

/* Text left to right. */
static void draw_text(struct srv_image *im, int x, int y, const char *s)
{
  srv_codec__text(im, x, y, s, 0);
}

/* ======================================================================
 * ticks: round positions along an axis
 * ====================================================================== */

struct ticks {
  int64_t v[MAX_TICKS];
  int n;
};

static int64_t floor_div(int64_t a, int64_t b)
{
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* At most max_n (1..MAX_TICKS) ticks in [lo, hi], at the multiples of the
 * smallest step of the form {1, 2, 4, 5, 8} x 10^k that keeps them that
 * few: positions read best at round numbers and powers of two. */
static void nice_ticks(int64_t lo, int64_t hi, int max_n, struct ticks *t)
{
  static const int mult[] = {1, 2, 4, 5, 8};
  int64_t p = 1, step = 0, v;
  size_t m;

  if (max_n < 1)
    max_n = 1;
  if (max_n > MAX_TICKS)
    max_n = MAX_TICKS;
  while (!step) {
    for (m = 0; m < sizeof mult / sizeof mult[0] && !step; m++) {
      int64_t s = mult[m] * p;
      if (floor_div(hi, s) - (floor_div(lo - 1, s) + 1) + 1 <= max_n)
        step = s;
    }
    if (p > INT64_MAX / 100)
      step = hi - lo + 1; /* one tick: lo */
    p *= 10;
  }
  t->n = 0;
  for (v = (floor_div(lo - 1, step) + 1) * step; v <= hi && t->n < max_n;
       v += step) {
    t->v[t->n++] = v;
    if (v > INT64_MAX - step)
      break;
  }
  if (!t->n) /* the step came from the fallback: lo itself */
    t->v[t->n++] = lo;
}

/* The widest decimal label of a tick in [lo, hi], in characters. */
static int label_chars(int64_t lo, int64_t hi)
{
  char a[24], b[24];
  int la = snprintf(a, sizeof a, "%lld", (long long)lo);
  int lb = snprintf(b, sizeof b, "%lld", (long long)hi);
  return la > lb ? la : lb;
}

/* ======================================================================
 * pooling: each table to at most `cells` cells a side, one factor for
 * both axes
 * ====================================================================== */

struct pooled {
  double *sum;    /* per pooled cell: sum of the finite values */
  int32_t *cnt;   /* ... and their count */
  uint8_t *flags; /* bit 0: a -inf cell, bit 1: NaN/+inf */
  int any_masked, any_invalid;
  double lo, hi;  /* finite range over every panel */
};

/* Pool one [rows, cols] table into oh x ow cells at offset `base` of p.
 * Input row r lands in output row r*oh/rows (bins of equal size up to
 * one), likewise for columns. */
static void pool_table(const float *data, int64_t rows, int64_t cols,
                       int64_t oh, int64_t ow, int zero_masked, size_t base,
                       struct pooled *p)
{
  int64_t r, k;

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
      c = base + (size_t)(orow * ow + ocol);
      if (zero_masked && v == 0)
        v = -INFINITY;
      if (isfinite(v)) {
        p->sum[c] += v;
        p->cnt[c]++;
        if (v < p->lo)
          p->lo = v;
        if (v > p->hi)
          p->hi = v;
      } else if (v < 0) {
        p->flags[c] |= 1;
        p->any_masked = 1;
      } else {
        p->flags[c] |= 2;
        p->any_invalid = 1;
      }
    }
  }
}

/* ======================================================================
 * layout
 * ====================================================================== */

struct layout {
  int64_t oh, ow;     /* pooled cells of a panel */
  int cell;           /* pixels of one pooled cell, both ways */
  int pw, ph;         /* a panel's pixels */
  int gcols, grows;   /* the grid */
  int ylab_w;         /* y tick labels' width */
  int col_w, row_h;   /* one grid cell: labels, ticks, panel, gap */
  int panel_dx;       /* panel's left edge within its grid cell */
  int panel_dy;       /* panel's top edge within its grid cell */
  int grid_x, grid_y; /* the grid's top-left corner */
  int bar_x, bar_y, bar_h;
  int xtitle_y;       /* "key position", under the grid */
  int ytitle_mid;     /* "query position", centred here */
  int swatch_y;       /* the legend of grey and magenta cells */
  int w, h;
  struct ticks xt, yt;
};

static void plan(const struct srv_heatmap *hm, const char *title,
                 const char *hi_s, const char *lo_s, int swatches,
                 struct layout *L)
{
  int64_t longest = hm->rows > hm->cols ? hm->rows : hm->cols;
  int target, label_w, grid_w, grid_h, xlab, max_x, max_y, bottom;

  L->gcols = hm->n <= 4 ? hm->n : (int)ceil(sqrt((double)hm->n));
  L->grows = (hm->n + L->gcols - 1) / L->gcols;
  target = hm->n == 1 ? PANEL_PX : GRID_PX / L->gcols;
  if (target > PANEL_PX)
    target = PANEL_PX;
  if (target < PANEL_MIN_PX)
    target = PANEL_MIN_PX;

  /* One pooling factor for both axes keeps the cells square. */
  if (longest > target) {
    double f = (double)longest / target;
    L->oh = (int64_t)llround(hm->rows / f);
    L->ow = (int64_t)llround(hm->cols / f);
    L->oh = L->oh < 1 ? 1 : L->oh > hm->rows ? hm->rows : L->oh;
    L->ow = L->ow < 1 ? 1 : L->ow > hm->cols ? hm->cols : L->ow;
  } else {
    L->oh = hm->rows;
    L->ow = hm->cols;
  }
  L->cell = (int)(target / (L->oh > L->ow ? L->oh : L->ow));
  L->cell = L->cell < 1 ? 1 : L->cell > CELL_MAX ? CELL_MAX : L->cell;
  L->pw = (int)L->ow * L->cell;
  L->ph = (int)L->oh * L->cell;

  /* Ticks: as many as their labels leave room for. */
  xlab = (label_chars(0, hm->cols - 1) + 1) * GLYPH_W;
  max_x = L->pw / xlab + 1; /* n ticks leave n - 1 gaps */
  max_y = L->ph / (2 * GLYPH_H) + 1;
  nice_ticks(0, hm->cols - 1, max_x, &L->xt);
  nice_ticks(hm->row0, hm->row0 + hm->rows - 1, max_y, &L->yt);
  L->ylab_w = label_chars(hm->row0, hm->row0 + hm->rows - 1) * GLYPH_W;

  /* A grid cell: [y tick labels][tick][panel][gap] across; [panel title]
   * [panel][tick][x tick labels][gap] down.  A panel is at least as wide
   * as its x tick labels need. */
  L->panel_dx = L->ylab_w + 4 + TICK_LEN;
  L->panel_dy = hm->labels ? GLYPH_H + 6 : 0;
  L->col_w = L->panel_dx + (L->pw > xlab ? L->pw : xlab) + GAP;
  L->row_h = L->panel_dy + L->ph + TICK_LEN + 4 + GLYPH_H + GAP;
  L->grid_x = MARGIN + GLYPH_H + 8;
  L->grid_y = MARGIN + (*title ? GLYPH_H + MARGIN : 0);
  grid_w = L->gcols * L->col_w - GAP;
  grid_h = L->grows * L->row_h - GAP;

  /* The colour bar along the panels, at least BAR_MIN_H tall; the axis
   * titles under the grid and up its left side, centred on the panels (or
   * on the bar, when it is the taller). */
  L->bar_x = L->grid_x + grid_w + GAP;
  L->bar_y = L->grid_y + L->panel_dy;
  L->bar_h = grid_h - L->panel_dy - TICK_LEN - 4 - GLYPH_H;
  if (L->bar_h < BAR_MIN_H)
    L->bar_h = BAR_MIN_H;
  L->xtitle_y = L->grid_y + grid_h + 8;
  bottom = L->xtitle_y + GLYPH_H;
  if (bottom < L->bar_y + L->bar_h)
    bottom = L->bar_y + L->bar_h;
  L->ytitle_mid = (L->bar_y + (L->grid_y + grid_h > L->bar_y + L->bar_h
                                   ? L->grid_y + grid_h
                                   : L->bar_y + L->bar_h)) / 2;
  L->swatch_y = bottom + MARGIN;
  L->h = (swatches ? L->swatch_y + GLYPH_H : bottom) + MARGIN;
  label_w = text_w(hi_s) > text_w(lo_s) ? text_w(hi_s) : text_w(lo_s);
  L->w = L->bar_x + BAR_W + 8 + label_w + MARGIN;
  if (L->w < 2 * MARGIN + text_w(title))
    L->w = 2 * MARGIN + text_w(title);
}

/* ======================================================================
 * drawing
 * ====================================================================== */

static void draw_panel(struct srv_image *im, const struct layout *L,
                       const struct srv_heatmap *hm, const struct pooled *p,
                       int i)
{
  int gx = L->grid_x + (i % L->gcols) * L->col_w;
  int gy = L->grid_y + (i / L->gcols) * L->row_h;
  int px = gx + L->panel_dx, py = gy + L->panel_dy, x, y, t;
  size_t base = (size_t)i * (size_t)(L->oh * L->ow);
  unsigned char rgb[3];
  char s[32];

  if (hm->labels) {
    snprintf(s, sizeof s, "head %lld", (long long)hm->labels[i]);
    draw_text(im, px + (L->pw - text_w(s)) / 2, gy, s);
  }
  /* The cells, inside a thin frame. */
  fill_rect(im, px - 1, py - 1, L->pw + 2, L->ph + 2, g_ink);
  for (y = 0; y < L->oh; y++)
    for (x = 0; x < L->ow; x++) {
      size_t c = base + (size_t)y * (size_t)L->ow + (size_t)x;
      if (p->cnt[c])
        ramp(p->hi > p->lo ? (p->sum[c] / p->cnt[c] - p->lo) / (p->hi - p->lo)
                           : 0.5,
             rgb);
      else
        memcpy(rgb, p->flags[c] & 1 ? g_masked : g_invalid, 3);
      fill_rect(im, px + x * L->cell, py + y * L->cell, L->cell, L->cell,
                rgb);
    }
  /* Ticks at the middle of the cell of their position. */
  for (t = 0; t < L->xt.n; t++) {
    int tx = px + (int)((L->xt.v[t] + 0.5) * L->pw / (double)hm->cols);
    snprintf(s, sizeof s, "%lld", (long long)L->xt.v[t]);
    fill_rect(im, tx, py + L->ph + 1, 1, TICK_LEN, g_ink);
    draw_text(im, tx - text_w(s) / 2 + FONT_SCALE / 2,
              py + L->ph + 1 + TICK_LEN + 3, s);
  }
  for (t = 0; t < L->yt.n; t++) {
    int ty = py + (int)((L->yt.v[t] - hm->row0 + 0.5) * L->ph /
                        (double)hm->rows);
    snprintf(s, sizeof s, "%lld", (long long)L->yt.v[t]);
    fill_rect(im, px - 1 - TICK_LEN, ty, TICK_LEN, 1, g_ink);
    draw_text(im, px - 1 - TICK_LEN - 3 - text_w(s) + FONT_SCALE,
              ty - GLYPH_H / 2, s);
  }
}

static void draw_legend(struct srv_image *im, const struct layout *L,
                        const struct pooled *p, const char *hi_s,
                        const char *lo_s, int zero_masked)
{
  const char *masked = zero_masked ? "0 (masked)" : "-inf (masked)";
  int top = L->bar_y, y, x;
  unsigned char rgb[3];

  /* The ramp from max (top) to min (bottom), labelled. */
  fill_rect(im, L->bar_x - 1, top - 1, BAR_W + 2, L->bar_h + 2, g_ink);
  for (y = 0; y < L->bar_h; y++) {
    ramp(L->bar_h > 1 ? 1.0 - (double)y / (L->bar_h - 1) : 0.5, rgb);
    fill_rect(im, L->bar_x, top + y, BAR_W, 1, rgb);
  }
  draw_text(im, L->bar_x + BAR_W + 8, top, hi_s);
  draw_text(im, L->bar_x + BAR_W + 8, top + L->bar_h - GLYPH_H, lo_s);

  /* Swatches for the cells that have no value on the ramp, bottom left. */
  x = L->grid_x;
  y = L->swatch_y;
  if (p->any_masked) {
    fill_rect(im, x, y, GLYPH_H, GLYPH_H, g_masked);
    draw_text(im, x + GLYPH_H + 6, y, masked);
    x += GLYPH_H + 6 + text_w(masked) + 2 * MARGIN;
  }
  if (p->any_invalid) {
    fill_rect(im, x, y, GLYPH_H, GLYPH_H, g_invalid);
    draw_text(im, x + GLYPH_H + 6, y, "nan/+inf");
  }
}

/* The axis titles: "key position" under the grid, "query position" up its
 * left side. */
static void draw_axis_titles(struct srv_image *im, const struct layout *L)
{
  int grid_w = L->gcols * L->col_w - GAP;

  draw_text(im, L->grid_x + (grid_w - text_w(X_LABEL)) / 2, L->xtitle_y,
            X_LABEL);
  srv_codec__text(im, MARGIN, L->ytitle_mid + text_w(Y_LABEL) / 2, Y_LABEL,
                  1);
}

double srv_codec_png_bound(int n)
{
  struct srv_heatmap hm;
  struct layout L;
  int64_t one = 0;
  char title[TITLE_MAX + 1];

  /* The widest picture: tables as long as the pooling allows on both
   * axes, labels of the widest positions, a full-length title. */
  memset(&hm, 0, sizeof hm);
  hm.n = n < 1 ? 1 : n > SRV_HEATMAP_MAX_PANELS ? SRV_HEATMAP_MAX_PANELS : n;
  hm.rows = hm.cols = PANEL_PX;
  hm.row0 = INT64_MIN / 2;
  hm.labels = &one;
  memset(title, 'W', TITLE_MAX);
  title[TITLE_MAX] = '\0';
  plan(&hm, title, "-1.234e-300", "-1.234e-300", 1, &L);
  return 3.0 * (double)L.w * (double)L.h;
}

int srv_codec_png_heatmap(const struct srv_heatmap *hm, struct srv_buf *out,
                          struct srv_err *err)
{
  struct srv_image im;
  struct pooled p;
  int rc;
  struct layout L;
  char ttl[TITLE_MAX + 1], lo_s[32], hi_s[32];
  int64_t n, i;
  size_t cells;
  int swatches;

  if (!hm || !hm->panels || hm->n < 1 || hm->n > SRV_HEATMAP_MAX_PANELS ||
      hm->rows < 1 || hm->cols < 1 || ab_mul_overflow(hm->rows, hm->cols, &n))
    return srv_fail(err, 400, NULL,
                    "a heatmap needs 1 to %d tables of [rows, cols] with "
                    "rows, cols >= 1 (got %d of [%lld, %lld])",
                    SRV_HEATMAP_MAX_PANELS, hm ? hm->n : 0,
                    hm ? (long long)hm->rows : 0LL,
                    hm ? (long long)hm->cols : 0LL);
  for (i = 0; i < hm->n; i++)
    if (!hm->panels[i])
      return srv_fail(err, 400, NULL, "heatmap table %lld is missing",
                      (long long)i);

  /* Pool first: the layout needs the value range for the bar's labels. */
  memset(&L, 0, sizeof L);
  srv_codec__printable(hm->title, ttl, sizeof ttl);
  plan(hm, ttl, "0", "0", 0, &L);
  memset(&p, 0, sizeof p);
  cells = (size_t)(L.oh * L.ow) * (size_t)hm->n;
  p.sum = calloc(cells, sizeof *p.sum);
  p.cnt = calloc(cells, sizeof *p.cnt);
  p.flags = calloc(cells, 1);
  if (!p.sum || !p.cnt || !p.flags)
    goto oom;
  p.lo = INFINITY;
  p.hi = -INFINITY;
  for (i = 0; i < hm->n; i++)
    pool_table(hm->panels[i], hm->rows, hm->cols, L.oh, L.ow, hm->zero_masked,
               (size_t)i * (size_t)(L.oh * L.ow), &p);
  if (p.lo > p.hi) /* no finite value at all */
    p.lo = p.hi = 0;
  /* + 0.0 turns -0 into 0 for the labels. */
  snprintf(hi_s, sizeof hi_s, "%.4g", p.hi + 0.0);
  snprintf(lo_s, sizeof lo_s, "%.4g", p.lo + 0.0);
  swatches = p.any_masked || p.any_invalid;
  plan(hm, ttl, hi_s, lo_s, swatches, &L);

  if (srv_codec__image_init(&im, L.w, L.h) != 0)
    goto oom;
  draw_text(&im, MARGIN, MARGIN, ttl);
  for (i = 0; i < hm->n; i++)
    draw_panel(&im, &L, hm, &p, (int)i);
  draw_legend(&im, &L, &p, hi_s, lo_s, hm->zero_masked);
  draw_axis_titles(&im, &L);

  free(p.sum);
  free(p.cnt);
  free(p.flags);
  rc = srv_codec__png_write(&im, ttl, out, "heatmap", err);
  free(im.px);
  return rc;
oom:
  free(p.sum);
  free(p.cnt);
  free(p.flags);
  return srv_fail(err, 500, NULL, "out of memory drawing the heatmap");
}
