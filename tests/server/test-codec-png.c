/* test-codec-png.c: srv_codec_png_heatmap -- the bytes are a PNG that
 * libpng decodes, of bounded size, with the ends of the colour ramp where
 * the smallest and largest cells are, masked cells in grey, and large
 * matrices pooled down -- and srv_codec_png_plot, the line plots (below). */
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

struct rgb_image {
  unsigned char *px;
  int w, h;
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

static const unsigned char *px(const struct rgb_image *im, int x, int y)
{
  return im->px + ((size_t)y * im->w + x) * 3;
}

static int is(const unsigned char *p, const unsigned char *c)
{
  return memcmp(p, c, 3) == 0;
}

/* First pixel of a horizontal run of at least `run` pixels of colour c
 * (the legend bar is narrower than the runs looked for). */
static int find_run(const struct rgb_image *im, const unsigned char *c,
                    int run, int *fx, int *fy)
{
  int x, y, k;

  for (y = 0; y < im->h; y++)
    for (x = 0; x + run <= im->w; x++) {
      for (k = 0; k < run && is(px(im, x + k, y), c); k++)
        ;
      if (k == run) {
        *fx = x;
        *fy = y;
        return 1;
      }
    }
  return 0;
}

static long count(const struct rgb_image *im, const unsigned char *c)
{
  long n = 0;
  int i;

  for (i = 0; i < im->w * im->h; i++)
    n += is(im->px + (size_t)i * 3, c);
  return n;
}

TEST(png_small_matrix_layout)
{
  /* [[min, max], [-inf, mid]] : the min cell top-left, max to its right,
   * the masked cell below it. */
  float m[4] = {-3.0f, 5.0f, -INFINITY, 1.0f};
  struct srv_buf b;
  struct srv_err err;
  struct rgb_image im;
  int x, y, cx, cy;

  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_codec_png_heatmap(m, 2, 2, "alibi head 0", &b, &err), 0);
  CHECK(b.len > 8 && memcmp(b.data, "\x89PNG\r\n\x1a\n", 8) == 0);
  CHECK_EQ_I64(decode(&b, &im), 0);
  CHECK(im.w >= 128 && im.w <= 1024 && im.h >= 128 && im.h <= 1024);
  CHECK(find_run(&im, LOW, 32, &x, &y));
  /* Cells are square here; measure one from the low-colour run. */
  for (cx = 0; x + cx < im.w && is(px(&im, x + cx, y), LOW); cx++)
    ;
  for (cy = 0; y + cy < im.h && is(px(&im, x, y + cy), LOW); cy++)
    ;
  CHECK(cx >= 32 && cx == cy);
  CHECK(is(px(&im, x + cx + cx / 2, y + cy / 2), HIGH));
  CHECK(is(px(&im, x + cx / 2, y + cy + cy / 2), GREY));
  /* The mid cell is neither end nor grey. */
  {
    const unsigned char *p = px(&im, x + cx + cx / 2, y + cy + cy / 2);
    CHECK(!is(p, LOW) && !is(p, HIGH) && !is(p, GREY));
  }
  CHECK(count(&im, MAGENTA) == 0);
  free(im.px);
  srv_buf_free(&b);
  return 0;
}

TEST(png_large_matrix_pooled)
{
  /* 1500 x 2500: left half 0, right half 1, bottom rows -inf, one NaN. */
  const int64_t R = 1500, C = 2500;
  float *m = malloc((size_t)(R * C) * sizeof *m);
  struct srv_buf b;
  struct srv_err err;
  struct rgb_image im;
  int64_t r, k;
  int x, y;

  CHECK(m != NULL);
  for (r = 0; r < R; r++)
    for (k = 0; k < C; k++)
      m[r * C + k] = r >= R - 100 ? -INFINITY : k < C / 2 ? 0.0f : 1.0f;
  m[0] = NAN;
  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_codec_png_heatmap(m, R, C, "weights", &b, &err), 0);
  free(m);
  CHECK_EQ_I64(decode(&b, &im), 0);
  CHECK(im.w <= 1024 && im.h <= 1024);
  CHECK(find_run(&im, LOW, 200, &x, &y));
  CHECK(find_run(&im, HIGH, 200, &x, &y));
  CHECK(find_run(&im, GREY, 200, &x, &y));
  CHECK(count(&im, MAGENTA) >= 1); /* the NaN cell and its swatch */
  free(im.px);
  srv_buf_free(&b);
  return 0;
}

TEST(png_edge_cases)
{
  float one = 2.0f, allmask[3] = {-INFINITY, -INFINITY, -INFINITY};
  struct srv_buf b;
  struct srv_err err;
  struct rgb_image im;

  /* A single value: the range is empty; still a picture. */
  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_codec_png_heatmap(&one, 1, 1, NULL, &b, &err), 0);
  CHECK_EQ_I64(decode(&b, &im), 0);
  free(im.px);
  srv_buf_free(&b);
  /* Everything masked: grey, no ramp colour in the cells. */
  srv_buf_init(&b, 0);
  CHECK_EQ_I64(srv_codec_png_heatmap(allmask, 1, 3, "causal \x01\xff", &b,
                                     &err), 0);
  CHECK_EQ_I64(decode(&b, &im), 0);
  CHECK(count(&im, GREY) > 1000);
  free(im.px);
  srv_buf_free(&b);
  /* Bad shapes and a buffer ceiling. */
  srv_buf_init(&b, 0);
  CHECK(srv_codec_png_heatmap(&one, 0, 1, "x", &b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  CHECK(srv_codec_png_heatmap(NULL, 1, 1, "x", &b, &err) != 0);
  srv_buf_free(&b);
  srv_buf_init(&b, 100);
  CHECK(srv_codec_png_heatmap(&one, 1, 1, "x", &b, &err) != 0);
  CHECK_EQ_I64(err.http, 413);
  srv_buf_free(&b);
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

/* Pixels of exactly colour c in the rectangle [x0, x1) x [y0, y1). */
static long count_in(const struct rgb_image *im, const unsigned char *c, int x0,
                     int y0, int x1, int y1)
{
  long n = 0;
  int x, y;

  for (y = y0; y < y1 && y < im->h; y++)
    for (x = x0; x < x1 && x < im->w; x++)
      n += memcmp(im->px + ((size_t)y * im->w + x) * 3, c, 3) == 0;
  return n;
}

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
