/* fuzz-png.c: the PNG heatmap (srv_codec_png_heatmap) on any shape, any
 * number of panels, any float32 bit patterns, any query position of row 0
 * and any title, read back with libpng.
 *
 * Input (16 bytes, then the title, then the values):
 *   bytes 0-1, 2-3  rows and cols (little-endian int16: zero and negative
 *                   sizes must be refused with a 400)
 *   byte 4          bits 0-1 the response ceiling (none, 1 KiB, 64 KiB,
 *                   1 MiB), bit 2 zero_masked, bit 3 the panels titled
 *                   "head <i>" (labels 0, 1, ...)
 *   byte 5          panels (0 and more than SRV_HEATMAP_MAX_PANELS must be
 *                   refused with a 400)
 *   bytes 6-13      row0 (little-endian int64: the row labels)
 *   byte 14         the title's length; byte 15 unused
 * then float32 values repeated over every panel's cells (at most 2^18
 * cells in all; no values: all zero).
 * Properties: a refusal is a readable 4xx -- 400 for a bad shape or panel
 * count, 413 only under a ceiling; an answer is a PNG that libpng decodes
 * in full, whose pixels stay within srv_codec_png_bound (what budgets
 * count); a picture of masked cells only (-inf, or 0 when zero_masked)
 * shows the masked grey, one of NaN/+inf only the invalid magenta. */
#include "fuzz.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CELLS ((int64_t)1 << 18)
#define HEAD 16

static const size_t g_ceilings[4] = {0, 1024, 64 << 10, 1 << 20};

static int has_colour(const unsigned char *px, size_t npx, unsigned r,
                      unsigned g, unsigned b)
{
  size_t i;

  for (i = 0; i < npx; i++, px += 3)
    if (px[0] == r && px[1] == g && px[2] == b)
      return 1;
  return 0;
}

static void check_png(const struct srv_buf *out, int panels, int all_masked,
                      int all_invalid)
{
  png_image im;
  unsigned char *px;

  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  FUZZ_CHECK(png_image_begin_read_from_memory(&im, out->data, out->len),
             "libpng cannot read the header: %s", im.message);
  FUZZ_CHECK(im.width >= 1 && im.height >= 1 &&
                 3.0 * im.width * im.height <= srv_codec_png_bound(panels),
             "a %ux%u picture of %d panels, over the bound of %.0f bytes",
             im.width, im.height, panels, srv_codec_png_bound(panels));
  im.format = PNG_FORMAT_RGB;
  px = malloc(PNG_IMAGE_SIZE(im));
  FUZZ_CHECK(px != NULL, "out of memory");
  FUZZ_CHECK(png_image_finish_read(&im, NULL, px, 0, NULL),
             "libpng cannot read the picture: %s", im.message);
  if (all_masked)
    FUZZ_CHECK(has_colour(px, (size_t)im.width * im.height, 128, 128, 128),
               "no grey cell for a matrix of -inf");
  if (all_invalid)
    FUZZ_CHECK(has_colour(px, (size_t)im.width * im.height, 255, 0, 255),
               "no magenta cell for a matrix of NaN");
  free(px);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  int64_t rows, cols, cells, i, labels[SRV_HEATMAP_MAX_PANELS];
  uint64_t row0 = 0;
  size_t tl, nv;
  char title[256];
  float *m;
  const float *panels[SRV_HEATMAP_MAX_PANELS];
  struct srv_heatmap hm;
  struct srv_buf out;
  struct srv_err err;
  int all_masked = 1, all_invalid = 1, rc, n, k, good;

  if (size < HEAD)
    return 0;
  rows = (int16_t)(data[0] | data[1] << 8);
  cols = (int16_t)(data[2] | data[3] << 8);
  srv_buf_init(&out, g_ceilings[data[4] & 3]);
  n = data[5];
  for (k = 0; k < 8; k++)
    row0 |= (uint64_t)data[6 + k] << (8 * k);
  tl = data[14];
  if (size < HEAD + tl)
    return 0;
  memcpy(title, data + HEAD, tl);
  title[tl] = '\0';
  good = rows > 0 && cols > 0 && n >= 1 && n <= SRV_HEATMAP_MAX_PANELS;
  cells = good ? rows * cols * n : 1;
  if (cells > MAX_CELLS)
    return 0;

  memset(&hm, 0, sizeof hm);
  hm.n = n;
  hm.rows = rows;
  hm.cols = cols;
  memcpy(&hm.row0, &row0, sizeof hm.row0);
  hm.title = title;
  hm.zero_masked = (data[4] >> 2) & 1;
  hm.labels = (data[4] & 8) ? labels : NULL;
  hm.panels = panels;
  data += HEAD + tl;
  size -= HEAD + tl;
  nv = size / 4;
  m = malloc((size_t)cells * sizeof *m);
  FUZZ_CHECK(m != NULL, "out of memory");
  for (i = 0; i < cells; i++) {
    if (nv)
      memcpy(&m[i], data + (size_t)(i % (int64_t)nv) * 4, 4);
    else
      m[i] = 0;
    all_masked &= m[i] == -INFINITY || (hm.zero_masked && m[i] == 0);
    all_invalid &= isnan(m[i]) || m[i] == INFINITY;
  }
  for (k = 0; k < SRV_HEATMAP_MAX_PANELS; k++) {
    panels[k] = good && k < n ? m + k * rows * cols : NULL;
    labels[k] = k;
  }
  memset(&err, 0, sizeof err);
  rc = srv_codec_png_heatmap(&hm, &out, &err);
  if (!good) {
    FUZZ_CHECK(rc != 0 && err.http == 400, "%d panels of [%lld, %lld]: %d", n,
               (long long)rows, (long long)cols, rc ? err.http : 200);
    fuzz_check_error(&err);
  } else if (rc != 0) {
    FUZZ_CHECK(err.http == 413 && out.max, "%d: %s", err.http, err.detail);
    fuzz_check_error(&err);
  } else {
    check_png(&out, n, all_masked, all_invalid);
  }
  srv_buf_free(&out);
  free(m);
  return 0;
}
