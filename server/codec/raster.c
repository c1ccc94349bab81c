/* raster.c: what every picture of the codec draws with -- an RGB image,
 * rectangles, anti-aliased lines, text in a 5x7 bitmap font (drawn for this
 * project: digits, both cases, the punctuation of numbers and titles;
 * lower-case letters are 5 rows high, and g, p, q, y keep their bowl at
 * that height with the tail below, so that they read as lower case within
 * 7 rows), and the PNG writer.  png.c (heatmaps) and plot.c (line plots)
 * build on it. */
#include "codec-internal.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * the font
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
    {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
    {'b', {"#....", "#....", "####.", "#...#", "#...#", "#...#", "####."}},
    {'c', {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}},
    {'d', {"....#", "....#", ".####", "#...#", "#...#", "#...#", ".####"}},
    {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
    {'f', {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."}},
    {'g', {".....", ".....", ".####", "#...#", ".####", "....#", ".###."}},
    {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
    {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},
    {'j', {"...#.", ".....", "..##.", "...#.", "...#.", "#..#.", ".##.."}},
    {'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}},
    {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}},
    {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
    {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
    {'p', {".....", ".....", "####.", "#...#", "####.", "#....", "#...."}},
    {'q', {".....", ".....", ".####", "#...#", ".####", "....#", "....#"}},
    {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
    {'s', {".....", ".....", ".####", "#....", ".###.", "....#", "####."}},
    {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
    {'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}},
    {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}},
    {'x', {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}},
    {'y', {".....", ".....", "#...#", "#...#", ".####", "....#", ".###."}},
    {'z', {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"}},
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
    {'|', {"..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
    {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
    {'*', {".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....."}},
    {'<', {"...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."}},
    {'>', {".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."}},
};

/* The glyph of ch: NULL for a space, '?' for what the font lacks. */
static const struct glyph *find_glyph(char ch)
{
  size_t i;

  if (ch == ' ')
    return NULL;
  for (i = 0; i < sizeof g_font / sizeof g_font[0]; i++)
    if (g_font[i].ch == ch)
      return &g_font[i];
  return find_glyph('?');
}

/* ======================================================================
 * drawing
 * ====================================================================== */

const unsigned char srv_codec__ink[3] = {0, 0, 0};
const unsigned char srv_codec__paper[3] = {255, 255, 255};

int srv_codec__image_init(struct srv_image *im, int w, int h)
{
  im->w = w;
  im->h = h;
  im->px = malloc((size_t)w * (size_t)h * 3);
  if (!im->px)
    return -1;
  srv_codec__fill_rect(im, 0, 0, w, h, srv_codec__paper);
  return 0;
}

/* Clipped to the picture.  The first row is painted pixel by pixel and
 * copied to the others: a whole picture's background is one row's work
 * and h memcpy calls, not w * h three-byte copies. */
void srv_codec__fill_rect(struct srv_image *im, int x0, int y0, int w, int h,
                          const unsigned char *rgb)
{
  int xa = x0 < 0 ? 0 : x0, ya = y0 < 0 ? 0 : y0;
  int xb = x0 + w < im->w ? x0 + w : im->w; /* exclusive */
  int yb = y0 + h < im->h ? y0 + h : im->h;
  unsigned char *row;
  size_t stride = (size_t)im->w * 3, len;
  int x, y;

  if (xa >= xb || ya >= yb)
    return;
  row = im->px + (size_t)ya * stride + (size_t)xa * 3;
  len = (size_t)(xb - xa) * 3;
  for (x = 0; x < xb - xa; x++)
    memcpy(row + (size_t)x * 3, rgb, 3);
  for (y = ya + 1; y < yb; y++)
    memcpy(row + (size_t)(y - ya) * stride, row, len);
}

/* Blend rgb over pixel (x, y) with coverage a in [0, 1]. */
static void blend(struct srv_image *im, int x, int y,
                  const unsigned char *rgb, double a)
{
  unsigned char *p;
  int k;

  if (x < 0 || y < 0 || x >= im->w || y >= im->h || !(a > 0))
    return;
  if (a > 1)
    a = 1;
  p = im->px + ((size_t)y * im->w + x) * 3;
  for (k = 0; k < 3; k++)
    p[k] = (unsigned char)lround(p[k] + a * ((double)rgb[k] - p[k]));
}

void srv_codec__line(struct srv_image *im, double x0, double y0, double x1,
                     double y1, double width, const unsigned char *rgb)
{
  /* Coverage from the distance of each pixel centre to the segment: a
   * width-wide stroke with a one-pixel soft edge, round at the ends, so
   * that joined segments make a smooth polyline. */
  const double r = width / 2.0, dx = x1 - x0, dy = y1 - y0;
  const double len2 = dx * dx + dy * dy;
  int xa = (int)floor(fmin(x0, x1) - r - 1);
  int xb = (int)ceil(fmax(x0, x1) + r + 1);
  int ya = (int)floor(fmin(y0, y1) - r - 1);
  int yb = (int)ceil(fmax(y0, y1) + r + 1);
  int x, y;

  if (!isfinite(len2))
    return;
  xa = xa < 0 ? 0 : xa;
  ya = ya < 0 ? 0 : ya;
  xb = xb >= im->w ? im->w - 1 : xb;
  yb = yb >= im->h ? im->h - 1 : yb;
  for (y = ya; y <= yb; y++)
    for (x = xa; x <= xb; x++) {
      double px = x + 0.5 - x0, py = y + 0.5 - y0, t, ex, ey, d;
      t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
      t = t < 0 ? 0 : t > 1 ? 1 : t;
      ex = px - t * dx;
      ey = py - t * dy;
      d = sqrt(ex * ex + ey * ey);
      blend(im, x, y, rgb, r + 0.5 - d);
    }
}

int srv_codec__text_w(const char *s)
{
  return (int)strlen(s) * SRV_GLYPH_W;
}

void srv_codec__text(struct srv_image *im, int x, int y, const char *s,
                     int up)
{
  int c, r, k;
  const int fs = SRV_FONT_SCALE;

  for (c = 0; s[c]; c++) {
    const struct glyph *g = find_glyph(s[c]);
    if (!g)
      continue;
    for (r = 0; r < 7; r++)
      for (k = 0; k < 5; k++) {
        int along = c * SRV_GLYPH_W + k * fs; /* from the text's start */
        if (g->rows[r][k] != '#')
          continue;
        if (up)
          srv_codec__fill_rect(im, x + r * fs, y - along - fs, fs, fs,
                               srv_codec__ink);
        else
          srv_codec__fill_rect(im, x + along, y + r * fs, fs, fs,
                               srv_codec__ink);
      }
  }
}

void srv_codec__printable(const char *s, char *out, size_t cap)
{
  size_t i = 0;

  for (; s && *s && i + 1 < cap; s++)
    out[i++] = (*s >= 32 && *s < 127) ? *s : '?';
  out[i] = '\0';
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
  const struct srv_image *im;
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
  png_set_IHDR(png, info, (png_uint_32)j->im->w, (png_uint_32)j->im->h, 8,
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
  for (y = 0; y < j->im->h; y++)
    png_write_row(png, j->im->px + (size_t)y * j->im->w * 3);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return 0;
}

int srv_codec__png_write(const struct srv_image *im, const char *title,
                         struct srv_buf *out, const char *what,
                         struct srv_err *err)
{
  struct pngjob job;

  memset(&job, 0, sizeof job);
  job.im = im;
  job.title = title;
  job.sink.out = out;
  if (write_png(&job) == 0)
    return 0;
  if (job.sink.failed && out->max)
    return srv_fail(err, 413, NULL,
                    "the %s does not fit in the response limit of %zu bytes",
                    what, out->max);
  return srv_fail(err, 500, NULL, "could not write the PNG %s", what);
}
