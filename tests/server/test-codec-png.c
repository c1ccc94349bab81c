/* test-codec-png.c: srv_codec_png_heatmap -- the bytes are a PNG that
 * libpng decodes, of bounded size, with the ends of the colour ramp where
 * the smallest and largest cells are, masked cells in grey; square cells
 * (a non-square table keeps its shape, also when pooled); several tables
 * as a grid of panels in reading order; tick marks along both axes, and
 * ink where the axis titles and tick labels go -- and srv_codec_png_plot,
 * the line plots of /v1/analysis (below). */
#include "srv.h"
#include "test.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

/* The ends of viridis and the masked colour, as documented in png.c. */
static const unsigned char LOW[3] = {68, 1, 84};
static const unsigned char HIGH[3] = {253, 231, 37};
static const unsigned char GREY[3] = {128, 128, 128};
static const unsigned char MAGENTA[3] = {255, 0, 255};
static const unsigned char INK[3] = {0, 0, 0};

/* Runs shorter than this are the colour bar (24 px wide), not a panel. */
#define PANEL_RUN 30

struct rgb_image {
  unsigned char *px;
  int w, h;
};

struct box {
  int x0, y0, x1, y1; /* inclusive; x0 > x1 when empty */
};

/* Decode PNG bytes to RGB with libpng's simplified API. */
static int decode(const struct srv_buf *b, struct rgb_image *im)
{
  png_image pi;

  memset(&pi, 0, sizeof pi);
  pi.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&pi, b->data, b->len))
    return -1;
  pi.format = PNG_FORMAT_RGB;
  im->w = (int)pi.width;
  im->h = (int)pi.height;
  im->px = malloc(PNG_IMAGE_SIZE(pi));
  if (!im->px || !png_image_finish_read(&pi, NULL, im->px, 0, NULL)) {
    png_image_free(&pi);
    free(im->px);
    return -1;
  }
  return 0;
}

/* Draw hm and decode the picture. */
static int draw(const struct srv_heatmap *hm, struct rgb_image *im)
{
  struct srv_buf b;
  struct srv_err err;
  int rc;

  srv_buf_init(&b, 0);
  rc = srv_codec_png_heatmap(hm, &b, &err);
  if (rc == 0)
    rc = b.len > 8 && memcmp(b.data, "\x89PNG\r\n\x1a\n", 8) == 0 ? decode(&b, im)
                                                                 : -1;
  srv_buf_free(&b);
  return rc;
}

static const unsigned char *px(const struct rgb_image *im, int x, int y)
{
  return im->px + ((size_t)y * im->w + x) * 3;
}

static int is(const unsigned char *p, const unsigned char *c)
{
  return memcmp(p, c, 3) == 0;
}

/* The bounding box of the horizontal runs of colour c at least `run` long
 * within [x0, x1) x [y0, y1). */
static struct box runs_box(const struct rgb_image *im, const unsigned char *c,
                           int run, int x0, int y0, int x1, int y1)
{
  struct box b = {im->w, im->h, -1, -1};
  int x, y, k;

  for (y = y0; y < y1; y++)
    for (x = x0; x < x1; x = k > x ? k : x + 1) {
      for (k = x; k < x1 && is(px(im, k, y), c); k++)
        ;
      if (k - x >= run) {
        b.x0 = x < b.x0 ? x : b.x0;
        b.x1 = k - 1 > b.x1 ? k - 1 : b.x1;
        b.y0 = y < b.y0 ? y : b.y0;
        b.y1 = y > b.y1 ? y : b.y1;
      }
    }
  return b;
}

static struct box whole_runs_box(const struct rgb_image *im,
                                 const unsigned char *c, int run)
{
  return runs_box(im, c, run, 0, 0, im->w, im->h);
}

static long count_in(const struct rgb_image *im, const unsigned char *c,
                     int x0, int y0, int x1, int y1)
{
  long n = 0;
  int x, y;

  for (y = y0 < 0 ? 0 : y0; y < y1 && y < im->h; y++)
    for (x = x0 < 0 ? 0 : x0; x < x1 && x < im->w; x++)
      n += is(px(im, x, y), c);
  return n;
}

static long count(const struct rgb_image *im, const unsigned char *c)
{
  return count_in(im, c, 0, 0, im->w, im->h);
}

/* One table: left half `left`, right half `right` (values). */
static float *halves(int64_t rows, int64_t cols, float left, float right)
{
  float *m = malloc((size_t)(rows * cols) * sizeof *m);
  int64_t r, k;

  if (m)
    for (r = 0; r < rows; r++)
      for (k = 0; k < cols; k++)
        m[r * cols + k] = k < cols / 2 ? left : right;
  return m;
}

TEST(png_small_matrix_layout)
{
  /* [[min, max], [-inf, mid]] : the min cell top-left, max to its right,
   * the masked cell below it. */
  float m[4] = {-3.0f, 5.0f, -INFINITY, 1.0f};
  const float *panels[1] = {m};
  struct srv_heatmap hm = {panels, NULL, 1, 2, 2, 0, "alibi bias", 0};
  struct rgb_image im;
  struct box lo;
  int cx, cy, x, y;

  CHECK_EQ_I64(draw(&hm, &im), 0);
  CHECK(im.w >= 128 && im.w <= 1200 && im.h >= 128 && im.h <= 1200);
  lo = whole_runs_box(&im, LOW, PANEL_RUN);
  CHECK(lo.x1 >= lo.x0);
  x = lo.x0;
  y = lo.y0;
  cx = lo.x1 - lo.x0 + 1;
  cy = lo.y1 - lo.y0 + 1;
  CHECK(cx >= 32 && cx == cy); /* square cells */
  CHECK(is(px(&im, x + cx + cx / 2, y + cy / 2), HIGH));
  CHECK(is(px(&im, x + cx / 2, y + cy + cy / 2), GREY));
  {
    const unsigned char *p = px(&im, x + cx + cx / 2, y + cy + cy / 2);
    CHECK(!is(p, LOW) && !is(p, HIGH) && !is(p, GREY));
  }
  CHECK(count(&im, MAGENTA) == 0);
  /* A frame of ink around the cells; tick marks below and left of it. */
  CHECK(is(px(&im, x - 1, y + 3), INK) && is(px(&im, x + 3, y - 1), INK));
  CHECK(count_in(&im, INK, x, y + 2 * cy + 2, x + 2 * cx, y + 2 * cy + 5) >= 2);
  CHECK(count_in(&im, INK, x - 5, y, x - 2, y + 2 * cy) >= 2);
  /* Tick labels (digits) under and left of the panel; the axis titles:
   * "key position" further down, "query position" up the left edge. */
  CHECK(count_in(&im, INK, x - 8, y + 2 * cy + 8, x + 2 * cx + 8,
                 y + 2 * cy + 26) > 20);
  CHECK(count_in(&im, INK, x - 40, y, x - 8, y + 2 * cy) > 20);
  CHECK(count_in(&im, INK, x, y + 2 * cy + 30, x + 2 * cx, im.h) > 80);
  CHECK(count_in(&im, INK, 0, 0, 32, im.h) > 80);
  free(im.px);
  return 0;
}

/* The panel of a [rows, cols] table with a min left half and a max right
 * half: the union of the two colours' boxes. */
static struct box panel_of(const struct rgb_image *im)
{
  struct box a = whole_runs_box(im, LOW, PANEL_RUN);
  struct box b = whole_runs_box(im, HIGH, PANEL_RUN);
  struct box u = {a.x0 < b.x0 ? a.x0 : b.x0, a.y0 < b.y0 ? a.y0 : b.y0,
                  a.x1 > b.x1 ? a.x1 : b.x1, a.y1 > b.y1 ? a.y1 : b.y1};
  return u;
}

TEST(png_weights_zero_is_masked)
{
  /* Attention weights: the keys a mask removed have weight 0 exactly and
   * are drawn grey, off the ramp, whose ends are the smallest and largest
   * weights that are not 0. */
  float w[6] = {1.0f, 0.0f, 0.0f, 0.25f, 0.75f, 0.0f};
  const float *panels[1] = {w};
  struct srv_heatmap hm = {panels, NULL, 1, 2, 3, 1, "weights", 1};
  struct rgb_image im;
  struct box hi, lo;
  int cell;

  CHECK_EQ_I64(draw(&hm, &im), 0);
  hi = whole_runs_box(&im, HIGH, PANEL_RUN); /* weight 1 at (0, 0) */
  lo = whole_runs_box(&im, LOW, PANEL_RUN);  /* weight 0.25 at (1, 0) */
  cell = hi.x1 - hi.x0 + 1;
  CHECK(cell >= 32 && lo.x0 == hi.x0 && lo.y0 == hi.y0 + cell);
  CHECK(is(px(&im, hi.x0 + cell + cell / 2, hi.y0 + cell / 2), GREY));
  CHECK(is(px(&im, hi.x0 + 2 * cell + cell / 2, hi.y0 + cell + cell / 2), GREY));
  CHECK(!is(px(&im, hi.x0 + cell + cell / 2, hi.y0 + cell + cell / 2), GREY));
  free(im.px);
  /* Without zero_masked a 0 is a value: the low end of the ramp. */
  hm.zero_masked = 0;
  CHECK_EQ_I64(draw(&hm, &im), 0);
  CHECK(count(&im, GREY) == 0);
  free(im.px);
  return 0;
}

TEST(png_aspect_kept)
{
  /* rows x cols, small and pooled: the panel has the table's shape. */
  static const int64_t shapes[][2] = {{10, 40}, {40, 10}, {3, 90}, {1500, 3000},
                                      {4096, 512}};
  size_t i;

  for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int64_t rows = shapes[i][0], cols = shapes[i][1];
    float *m = halves(rows, cols, 0.0f, 1.0f);
    const float *panels[1] = {m};
    struct srv_heatmap hm = {panels, NULL, 1, rows, cols, 0, "shape", 0};
    struct rgb_image im;
    struct box p;
    double want = (double)cols / rows, got;

    CHECK(m != NULL);
    CHECK_EQ_I64(draw(&hm, &im), 0);
    free(m);
    p = panel_of(&im);
    got = (double)(p.x1 - p.x0 + 1) / (p.y1 - p.y0 + 1);
    /* Within one pooled cell on the short side. */
    CHECK(fabs(got - want) <= want / (p.y1 - p.y0 + 1) + 0.02 * want);
    CHECK(p.x1 - p.x0 + 1 <= 512 && p.y1 - p.y0 + 1 <= 512);
    free(im.px);
  }
  return 0;
}

TEST(png_grid_of_heads)
{
  /* 3 heads side by side; 5 heads on a 3-column grid (the fifth starts
   * the second row).  Each head's table is one value: head 0 the lowest,
   * the last the highest. */
  static const int counts[] = {3, 5};
  size_t c;

  for (c = 0; c < 2; c++) {
    int n = counts[c], i;
    float *m = malloc((size_t)n * 12 * 20 * sizeof *m);
    const float *panels[8];
    int64_t labels[8];
    struct srv_heatmap hm = {panels, labels, n, 12, 20, 100, "grid", 0};
    struct rgb_image im;
    struct box first, last;
    int pw, ph;

    CHECK(m != NULL);
    for (i = 0; i < n * 12 * 20; i++)
      m[i] = (float)(i / (12 * 20));
    for (i = 0; i < n; i++) {
      panels[i] = m + i * 12 * 20;
      labels[i] = 7 * i;
    }
    CHECK_EQ_I64(draw(&hm, &im), 0);
    free(m);
    first = whole_runs_box(&im, LOW, PANEL_RUN);
    last = whole_runs_box(&im, HIGH, PANEL_RUN);
    pw = first.x1 - first.x0 + 1;
    ph = first.y1 - first.y0 + 1;
    CHECK(pw > 0 && pw == last.x1 - last.x0 + 1 && ph == last.y1 - last.y0 + 1);
    CHECK(abs(pw * 12 - ph * 20) <= 20); /* square cells in a grid too */
    if (n == 3) {
      CHECK(last.y0 == first.y0 && last.x0 > first.x0 + 2 * pw);
    } else {
      CHECK(last.y0 > first.y1 && last.x0 > first.x1); /* row 2, column 2 */
      CHECK(im.w < 3 * im.h);                           /* three columns */
    }
    /* Each panel's title ("head 0", ...) is ink above it. */
    CHECK(count_in(&im, INK, first.x0, first.y0 - 22, first.x1, first.y0 - 2) > 20);
    CHECK(count_in(&im, INK, last.x0, last.y0 - 22, last.x1, last.y0 - 2) > 20);
    CHECK(count(&im, GREY) == 0);
    free(im.px);
  }
  return 0;
}

TEST(png_ticks_evenly_spaced)
{
  /* 64 x 64, positions 0..63 on both axes: the tick marks under the
   * panel stand at equal distances, as do those left of it. */
  float *m = halves(64, 64, 0.0f, 1.0f);
  const float *panels[1] = {m};
  struct srv_heatmap hm = {panels, NULL, 1, 64, 64, 0, NULL, 0};
  struct rgb_image im;
  struct box p;
  int xs[16], ys[16], nx = 0, ny = 0, i, v;

  CHECK(m != NULL);
  CHECK_EQ_I64(draw(&hm, &im), 0);
  free(m);
  p = panel_of(&im);
  for (v = p.x0; v <= p.x1 && nx < 16; v++)
    if (is(px(&im, v, p.y1 + 3), INK))
      xs[nx++] = v;
  for (v = p.y0; v <= p.y1 && ny < 16; v++)
    if (is(px(&im, p.x0 - 4, v), INK))
      ys[ny++] = v;
  CHECK(nx >= 3 && nx <= 8 && ny >= 3 && ny <= 8);
  for (i = 2; i < nx; i++)
    CHECK(abs((xs[i] - xs[i - 1]) - (xs[1] - xs[0])) <= 1);
  for (i = 2; i < ny; i++)
    CHECK(abs((ys[i] - ys[i - 1]) - (ys[1] - ys[0])) <= 1);
  /* The first tick is position 0: at the middle of the first cell. */
  CHECK(abs(xs[0] - (p.x0 + (p.x1 - p.x0 + 1) / 128)) <= 1);
  free(im.px);
  return 0;
}

TEST(png_large_matrix_pooled)
{
  /* 1500 x 2500: left half 0, right half 1, bottom rows -inf, one NaN. */
  const int64_t R = 1500, C = 2500;
  float *m = malloc((size_t)(R * C) * sizeof *m);
  const float *panels[1] = {m};
  struct srv_heatmap hm = {panels, NULL, 1, R, C, 0, "weights", 0};
  struct rgb_image im;
  int64_t r, k;

  CHECK(m != NULL);
  for (r = 0; r < R; r++)
    for (k = 0; k < C; k++)
      m[r * C + k] = r >= R - 100 ? -INFINITY : k < C / 2 ? 0.0f : 1.0f;
  m[0] = NAN;
  CHECK_EQ_I64(draw(&hm, &im), 0);
  free(m);
  CHECK(im.w <= 1024 && im.h <= 1024);
  CHECK(whole_runs_box(&im, LOW, 200).x1 >= 0);
  CHECK(whole_runs_box(&im, HIGH, 200).x1 >= 0);
  CHECK(whole_runs_box(&im, GREY, 200).x1 >= 0);
  CHECK(count(&im, MAGENTA) >= 1); /* the NaN cell and its swatch */
  free(im.px);
  return 0;
}

TEST(png_edge_cases)
{
  float one = 2.0f, allmask[3] = {-INFINITY, -INFINITY, -INFINITY};
  const float *p_one[1] = {&one}, *p_mask[1] = {allmask}, *p_null[1] = {NULL};
  struct srv_heatmap hm = {p_one, NULL, 1, 1, 1, -((int64_t)1 << 40), NULL, 0};
  struct srv_buf b;
  struct srv_err err;
  struct rgb_image im;

  /* A single value (the range is empty), far from position 0: a picture. */
  CHECK_EQ_I64(draw(&hm, &im), 0);
  free(im.px);
  /* Everything masked: grey, no ramp colour in the cells; a title the
   * font cannot draw is drawn with '?'. */
  hm.panels = p_mask;
  hm.cols = 3;
  hm.row0 = 0;
  hm.title = "causal \x01\xff";
  CHECK_EQ_I64(draw(&hm, &im), 0);
  CHECK(count(&im, GREY) > 1000);
  free(im.px);
  /* Bad tables and a buffer ceiling. */
  srv_buf_init(&b, 0);
  hm.panels = p_one;
  hm.cols = 1;
  hm.rows = 0;
  CHECK(srv_codec_png_heatmap(&hm, &b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  hm.rows = 1;
  hm.n = SRV_HEATMAP_MAX_PANELS + 1;
  CHECK(srv_codec_png_heatmap(&hm, &b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  hm.n = 1;
  hm.panels = p_null;
  CHECK(srv_codec_png_heatmap(&hm, &b, &err) != 0);
  CHECK(srv_codec_png_heatmap(NULL, &b, &err) != 0);
  srv_buf_free(&b);
  hm.panels = p_one;
  srv_buf_init(&b, 100);
  CHECK(srv_codec_png_heatmap(&hm, &b, &err) != 0);
  CHECK_EQ_I64(err.http, 413);
  srv_buf_free(&b);
  /* The bound covers the largest grid. */
  CHECK(srv_codec_png_bound(SRV_HEATMAP_MAX_PANELS) > srv_codec_png_bound(1));
  return 0;
}

/* ==== line plots (plot.c) ================================================
 * srv_codec_png_plot: a PNG libpng decodes, 960x540, each series in its
 * palette colour where its points are (a rising line runs from lower left
 * to upper right), reference lines, points that cannot be drawn skipped, a
 * million points drawn column by column, refusals. */

/* The first two colours of the palette (Okabe and Ito), as plot.c has. */
static const unsigned char BLUE[3] = {0, 114, 178};
static const unsigned char ORANGE[3] = {230, 159, 0};

static int plot(const struct srv_plot *p, struct rgb_image *im)
{
  struct srv_buf b;
  struct srv_err err;
  int rc;

  srv_buf_init(&b, 0);
  rc = srv_codec_png_plot(p, &b, &err);
  if (rc == 0)
    rc = decode(&b, im);
  srv_buf_free(&b);
  return rc;
}

TEST(plot_lines_where_their_points_are)
{
  double up[50], down[50], x[50];
  struct srv_plot_series s[2] = {{"rising", x, up, 50, SRV_PLOT_LINE},
                                 {"falling", x, down, 50, SRV_PLOT_DASHED}};
  struct srv_plot_mark mk[2] = {{1, 10, "x = 10"}, {0, 5, "y = 5"}};
  struct srv_plot p = {"two lines", "x", "y", 0, 0, s, 2, mk, 2};
  struct rgb_image im;
  int i;

  for (i = 0; i < 50; i++) {
    x[i] = i;
    up[i] = i;
    down[i] = 49 - i;
  }
  CHECK_EQ_I64(plot(&p, &im), 0);
  CHECK(im.w == 960 && im.h == 540);
  /* The rising line: blue in the plot's lower left and upper right
   * quarters, none in the upper left; the falling one the other way. */
  CHECK(count_in(&im, BLUE, 80, 300, 300, 480) > 50);
  CHECK(count_in(&im, BLUE, 500, 40, 700, 200) > 50);
  CHECK_EQ_I64(count_in(&im, BLUE, 80, 40, 250, 200), 0);
  CHECK(count_in(&im, ORANGE, 80, 40, 300, 200) > 20);
  CHECK_EQ_I64(count_in(&im, ORANGE, 500, 40, 700, 200), 0);
  /* The legend beside the plot carries both colours. */
  CHECK(count_in(&im, BLUE, 780, 0, 960, 540) > 10);
  CHECK(count_in(&im, ORANGE, 780, 0, 960, 540) > 5);
  free(im.px);
  return 0;
}

TEST(plot_skips_what_cannot_be_drawn)
{
  double y[6] = {1, NAN, 10, -3, INFINITY, 100}, x[6] = {1, 2, 3, 4, 5, 6};
  double none[3] = {NAN, NAN, NAN};
  struct srv_plot_series s = {"log", x, y, 6, SRV_PLOT_MARKERS};
  struct srv_plot p = {"log y", "x", "y", 1, 1, &s, 1, NULL, 0};
  struct srv_plot_series empty = {"nothing", NULL, none, 3, SRV_PLOT_LINE};
  struct rgb_image im;

  CHECK_EQ_I64(plot(&p, &im), 0); /* -3 and the non-finite points skipped */
  CHECK(count_in(&im, BLUE, 0, 0, 960, 540) > 50);
  free(im.px);
  p.series = &empty;
  p.xlog = p.ylog = 0;
  CHECK_EQ_I64(plot(&p, &im), 0); /* axes, no line */
  free(im.px);
  return 0;
}

TEST(plot_a_million_points_and_refusals)
{
  const int64_t n = 1000000;
  double *y = malloc((size_t)n * sizeof *y), three[3] = {1, 2, 3};
  struct srv_plot_series s = {"noise", NULL, y, n, SRV_PLOT_STEPS};
  struct srv_plot p = {"many", "i", "sin", 0, 0, &s, 1, NULL, 0};
  struct srv_buf b;
  struct srv_err err;
  struct rgb_image im;
  int64_t i;

  CHECK(y != NULL);
  for (i = 0; i < n; i++)
    y[i] = sin((double)i * 0.001) + (i == n / 2 ? 5 : 0); /* one spike */
  CHECK_EQ_I64(plot(&p, &im), 0);
  /* The single-point spike is still drawn: blue near the top. */
  CHECK(count_in(&im, BLUE, 60, 30, 780, 80) > 0);
  free(im.px);
  free(y);
  s.y = three;
  s.n = 3;
  srv_buf_init(&b, 0);
  p.nseries = 0;
  CHECK(srv_codec_png_plot(&p, &b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  srv_buf_free(&b);
  srv_buf_init(&b, 200); /* a ceiling no picture fits under */
  p.nseries = 1;
  CHECK(srv_codec_png_plot(&p, &b, &err) != 0);
  CHECK_EQ_I64(err.http, 413);
  srv_buf_free(&b);
  return 0;
}
