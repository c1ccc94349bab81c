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
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAT_MAX 768    /* pooled cells per side, at most */
#define HEAT_TARGET 512 /* small matrices are scaled up towards this */
#define CELL_MAX 64     /* largest pixel size of one cell */
#define MARGIN 16
#define FONT_SCALE 2
#define GLYPH_W (6 * FONT_SCALE) /* 5 columns + 1 of spacing */
#define GLYPH_H (7 * FONT_SCALE)
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
static const unsigned char g_ink[3] = {0, 0, 0};

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
 * a 5x7 bitmap font (drawn for this file): digits, capitals, the
 * punctuation of numbers and titles.
 * ====================================================================== */

struct glyph {
  char ch;
  const char *rows[7];
};

static const struct glyph g_font[] = {
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
    {'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
    {'D', {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."}},
    {'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
    {'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
    {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
    {'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'J', {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
    {'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
    {'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
    {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
    {'N', {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}},
    {'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
    {'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
    {'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
    {'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
    {'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
    {'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
    {'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
    {'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
    {'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
    {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
    {'x', {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}},
    {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
    {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
    {'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}},
    {'_', {".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
    {'[', {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."}},
    {']', {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
    {'?', {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."}},
};

/* The glyph of ch; lower case draws as capitals, except 'e' and 'x' in
 * numbers ("1.5e-05", "64x64"), where a small letter reads better. */
static const struct glyph *find_glyph(char ch, int numeric)
{
  size_t i;

  if (ch >= 'a' && ch <= 'z' && !(numeric && (ch == 'e' || ch == 'x')))
    ch = (char)(ch - 'a' + 'A');
  for (i = 0; i < sizeof g_font / sizeof g_font[0]; i++)
    if (g_font[i].ch == ch)
      return &g_font[i];
  return ch == ' ' ? NULL : find_glyph('?', 0);
}

struct image {
  unsigned char *px; /* RGB, row-major */
  int w, h;
};

static void fill_rect(struct image *im, int x0, int y0, int w, int h,
                      const unsigned char *rgb)
{
  int x, y;

  for (y = y0 < 0 ? 0 : y0; y < y0 + h && y < im->h; y++)
    for (x = x0 < 0 ? 0 : x0; x < x0 + w && x < im->w; x++)
      memcpy(im->px + ((size_t)y * im->w + x) * 3, rgb, 3);
}

static void draw_text(struct image *im, int x, int y, const char *s,
                      int numeric)
{
  for (; *s; s++, x += GLYPH_W) {
    const struct glyph *g = find_glyph(*s, numeric);
    int r, k;
    if (!g)
      continue;
    for (r = 0; r < 7; r++)
      for (k = 0; k < 5; k++)
        if (g->rows[r][k] == '#')
          fill_rect(im, x + k * FONT_SCALE, y + r * FONT_SCALE, FONT_SCALE,
                    FONT_SCALE, g_ink);
  }
}

/* ======================================================================
 * PNG output
 * ====================================================================== */

struct sink {
  struct srv_buf *out;
  int failed; /* the buffer refused: over its ceiling or out of memory */
};

static void write_cb(png_structp png, png_bytep data, png_size_t n)
{
  struct sink *s = png_get_io_ptr(png);

  if (srv_buf_append(s->out, data, n)) {
    s->failed = 1;
    png_error(png, "response buffer full");
  }
}

static void flush_cb(png_structp png) { (void)png; }

/* libpng reports errors by longjmp; the default handler also prints to
 * stderr, which a server should not do per request. */
static void error_cb(png_structp png, png_const_charp msg)
{
  (void)msg;
  png_longjmp(png, 1);
}

static void warn_cb(png_structp png, png_const_charp msg)
{
  (void)png;
  (void)msg;
}

/* Everything touched after setjmp lives here, behind a pointer that does
 * not change, so longjmp cannot leave a stale register copy. */
struct pngjob {
  struct image im;
  const char *title;
  struct sink sink;
};

static int write_png(struct pngjob *j)
{
  png_structp png;
  png_infop info;
  png_text text;
  int y;

  png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, error_cb,
                                warn_cb);
  if (!png)
    return -1;
  info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, NULL);
    return -1;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return -1;
  }
  png_set_write_fn(png, &j->sink, write_cb, flush_cb);
  png_set_IHDR(png, info, (png_uint_32)j->im.w, (png_uint_32)j->im.h, 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (j->title && *j->title) {
    memset(&text, 0, sizeof text);
    text.compression = PNG_TEXT_COMPRESSION_NONE;
    text.key = (png_charp) "Title";
    text.text = (png_charp)j->title;
    png_set_text(png, info, &text, 1);
  }
  png_write_info(png, info);
  for (y = 0; y < j->im.h; y++)
    png_write_row(png, j->im.px + (size_t)y * j->im.w * 3);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return 0;
}

/* ======================================================================
 * the heatmap
 * ====================================================================== */

/* Printable copy of the title: ASCII the font can draw, at most TITLE_MAX. */
static void clean_title(const char *title, char *out)
{
  size_t i = 0;

  for (; title && *title && i < TITLE_MAX; title++)
    out[i++] = (*title >= 32 && *title < 127) ? *title : '?';
  out[i] = '\0';
}

int srv_codec_png_heatmap(const float *data, int64_t rows, int64_t cols,
                          const char *title, struct srv_buf *out,
                          struct srv_err *err)
{
  struct pngjob job;
  char ttl[TITLE_MAX + 1], lo_s[32], hi_s[32];
  int64_t oh, ow, r, k, n;
  int sx, sy, pw, ph, hx, hy, lx, lh, w, h, y, x, any_masked = 0,
      any_invalid = 0, label_w;
  double lo = INFINITY, hi = -INFINITY, *sum = NULL;
  int32_t *cnt = NULL;
  uint8_t *flags = NULL; /* bit 0: a -inf cell, bit 1: NaN/+inf */
  size_t cells;
  unsigned char rgb[3];
  static const unsigned char white[3] = {255, 255, 255};

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
  clean_title(title, ttl);
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

  memset(&job, 0, sizeof job);
  job.im.w = w;
  job.im.h = h;
  job.im.px = malloc((size_t)w * (size_t)h * 3);
  if (!job.im.px)
    goto oom;
  fill_rect(&job.im, 0, 0, w, h, white);
  draw_text(&job.im, MARGIN, MARGIN, ttl, 0);

  /* Cells, with a thin frame around the matrix. */
  fill_rect(&job.im, hx - 1, hy - 1, pw + 2, ph + 2, g_ink);
  for (y = 0; y < oh; y++) {
    for (x = 0; x < ow; x++) {
      size_t c = (size_t)y * (size_t)ow + (size_t)x;
      if (cnt[c])
        ramp(hi > lo ? (sum[c] / cnt[c] - lo) / (hi - lo) : 0.5, rgb);
      else
        memcpy(rgb, flags[c] & 1 ? g_masked : g_invalid, 3);
      fill_rect(&job.im, hx + x * sx, hy + y * sy, sx, sy, rgb);
    }
  }

  /* Legend: the ramp from max (top) to min (bottom), labelled. */
  fill_rect(&job.im, lx - 1, hy - 1, BAR_W + 2, lh + 2, g_ink);
  for (y = 0; y < lh; y++) {
    ramp(lh > 1 ? 1.0 - (double)y / (lh - 1) : 0.5, rgb);
    fill_rect(&job.im, lx, hy + y, BAR_W, 1, rgb);
  }
  draw_text(&job.im, lx + BAR_W + 8, hy, hi_s, 1);
  draw_text(&job.im, lx + BAR_W + 8, hy + lh - GLYPH_H, lo_s, 1);

  /* Swatches for the cells that have no value on the ramp. */
  x = MARGIN;
  y = hy + (ph > lh ? ph : lh) + MARGIN;
  if (any_masked) {
    fill_rect(&job.im, x, y, GLYPH_H, GLYPH_H, g_masked);
    draw_text(&job.im, x + GLYPH_H + 6, y, "-inf", 0);
    x += GLYPH_H + 6 + 5 * GLYPH_W + MARGIN;
  }
  if (any_invalid) {
    fill_rect(&job.im, x, y, GLYPH_H, GLYPH_H, g_invalid);
    draw_text(&job.im, x + GLYPH_H + 6, y, "nan/+inf", 0);
  }

  free(sum);
  free(cnt);
  free(flags);
  sum = NULL;
  cnt = NULL;
  flags = NULL;
  job.title = ttl;
  job.sink.out = out;
  if (write_png(&job)) {
    free(job.im.px);
    if (job.sink.failed && out->max)
      return srv_fail(err, 413, NULL,
                      "the heatmap does not fit in the response limit of %zu "
                      "bytes", out->max);
    return srv_fail(err, 500, NULL, "could not write the PNG heatmap");
  }
  free(job.im.px);
  return 0;
oom:
  free(sum);
  free(cnt);
  free(flags);
  return srv_fail(err, 500, NULL, "out of memory drawing the heatmap");
}
