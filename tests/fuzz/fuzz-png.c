/* fuzz-png.c: the PNG heatmap (srv_codec_png_heatmap) on any shape, any
 * float32 bit patterns and any title, read back with libpng.
 *
 * Input: bytes 0-1 and 2-3 are rows and cols (little-endian int16: zero and
 * negative sizes must be refused with a 400), byte 4 the response ceiling
 * (bits 0-1: none, 1 KiB, 64 KiB, 1 MiB), byte 5 the title's length, then
 * the title, then float32 values repeated over the matrix (at most 2^18
 * cells; no values: all zero).
 * Properties: a refusal is a readable 4xx -- 400 for a bad shape, 413 only
 * under a ceiling; an answer is a PNG that libpng decodes in full, no larger
 * than the pooled layout allows (at most 768 cells a side, a title of at
 * most 64 characters); a matrix of -inf only shows the masked grey, one of
 * NaN only the invalid magenta. */
#include "fuzz.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CELLS ((int64_t)1 << 18)
/* The picture of any matrix fits in this (768 cells + margins, legend and
 * a 64-character title). */
#define MAX_SIDE 1200

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

static void check_png(const struct srv_buf *out, int all_masked,
                      int all_invalid)
{
  png_image im;
  unsigned char *px;

  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  FUZZ_CHECK(png_image_begin_read_from_memory(&im, out->data, out->len),
             "libpng cannot read the header: %s", im.message);
  FUZZ_CHECK(im.width >= 1 && im.height >= 1 && im.width <= MAX_SIDE &&
                 im.height <= MAX_SIDE,
             "a %ux%u picture", im.width, im.height);
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
  int64_t rows, cols, cells, i;
  size_t tl, nv;
  char title[256];
  float *m;
  struct srv_buf out;
  struct srv_err err;
  int all_masked = 1, all_invalid = 1, rc;

  if (size < 6)
    return 0;
  rows = (int16_t)(data[0] | data[1] << 8);
  cols = (int16_t)(data[2] | data[3] << 8);
  srv_buf_init(&out, g_ceilings[data[4] & 3]);
  tl = data[5];
  if (size < 6 + tl)
    return 0;
  memcpy(title, data + 6, tl);
  title[tl] = '\0';
  data += 6 + tl;
  size -= 6 + tl;
  nv = size / 4;
  cells = rows > 0 && cols > 0 ? rows * cols : 1;
  if (cells > MAX_CELLS)
    return 0;
  m = malloc((size_t)cells * sizeof *m);
  FUZZ_CHECK(m != NULL, "out of memory");
  for (i = 0; i < cells; i++) {
    if (nv)
      memcpy(&m[i], data + (size_t)(i % (int64_t)nv) * 4, 4);
    else
      m[i] = 0;
    all_masked &= m[i] == -INFINITY;
    all_invalid &= isnan(m[i]) != 0;
  }
  memset(&err, 0, sizeof err);
  rc = srv_codec_png_heatmap(m, rows, cols, title, &out, &err);
  if (rows < 1 || cols < 1) {
    FUZZ_CHECK(rc != 0 && err.http == 400, "a [%lld, %lld] heatmap: %d",
               (long long)rows, (long long)cols, rc ? err.http : 200);
    fuzz_check_error(&err);
  } else if (rc != 0) {
    FUZZ_CHECK(err.http == 413 && out.max, "%d: %s", err.http, err.detail);
    fuzz_check_error(&err);
  } else {
    check_png(&out, all_masked, all_invalid);
  }
  srv_buf_free(&out);
  free(m);
  return 0;
}
