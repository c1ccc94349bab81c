/* fuzz-npy.c: the .npy writer (NumPy format 1.0) on any shape, dtype and
 * bit pattern, read back by a reader of its own.
 *
 * Input: byte 0 = the tensor's dtype (bits 0-2, modulo the five), the
 * answer's output_dtype (bits 3-4: float32, float64, float16, bfloat16;
 * int32 tensors stay int32), a transposed view (bit 5: the last two axes'
 * strides swapped, so the writer gathers) and whether the data may stay
 * where it lies (bit 6: resp.seg_ok, as the server sends it); byte 1 =
 * rank - 1 (bits 0-1); then one byte per axis (size - 1); the rest fills
 * the tensor's bytes, repeated.  At most 2^14 elements (64 KiB of float32
 * and more are sent as a segment).
 * Properties: the file is magic, version 1.0, a header length that puts the
 * data 64-byte aligned, a dict with the dtype's descr, fortran_order False
 * and the shape, and the data: exactly the values in row-major order --
 * identical when the output dtype holds them, else the nearest value of
 * the narrower dtype (ties to even, NaN stays NaN); bfloat16 is refused
 * with a 406. */
#include "fuzz.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NUMEL ((int64_t)1 << 14)

static const enum ab_dtype g_dtypes[5] = {AB_DTYPE_F32, AB_DTYPE_F64,
                                          AB_DTYPE_F16, AB_DTYPE_BF16,
                                          AB_DTYPE_I32};
static const enum ab_dtype g_outs[4] = {AB_DTYPE_F32, AB_DTYPE_F64,
                                        AB_DTYPE_F16, AB_DTYPE_BF16};

/* ---- the file ------------------------------------------------------------ */

/* Parse the header dict: descr, fortran_order, shape.  Returns the rank,
 * or -1 when the dict is not what NumPy writes. */
static int parse_dict(const char *d, size_t n, char *descr, int64_t *shape)
{
  const char *p, *e = d + n;
  int rank = 0;

  if (n < 2 || d[0] != '{')
    return -1;
  p = memmem(d, n, "'descr': '", 10);
  if (!p || p + 13 > e || p[13] != '\'')
    return -1;
  memcpy(descr, p + 10, 3);
  descr[3] = '\0';
  if (!memmem(d, n, "'fortran_order': False", 22))
    return -1;
  p = memmem(d, n, "'shape': (", 10);
  if (!p)
    return -1;
  for (p += 10; p < e && *p != ')';) {
    int64_t v = 0;
    if (*p < '0' || *p > '9' || rank == AB_MAX_DIMS)
      return -1;
    while (p < e && *p >= '0' && *p <= '9')
      v = v * 10 + (*p++ - '0');
    shape[rank++] = v;
    if (p < e && *p == ',')
      p++;
    while (p < e && *p == ' ')
      p++;
  }
  return p < e ? rank : -1;
}

static const char *descr_of(int dtype)
{
  switch (dtype) {
  case AB_DTYPE_F32: return "<f4";
  case AB_DTYPE_F64: return "<f8";
  case AB_DTYPE_F16: return "<f2";
  case AB_DTYPE_I32: return "<i4";
  }
  return "?";
}

/* Element k (row-major over t's shape) of t, by its strides. */
static const unsigned char *element(const struct ab_tensor *t, int64_t k)
{
  int64_t off = 0;
  int d;

  for (d = t->ndim - 1; d >= 0; d--) {
    off += (k % t->shape[d]) * t->stride[d];
    k /= t->shape[d];
  }
  return (const unsigned char *)t->data +
         off * (int64_t)ab_dtype_size((enum ab_dtype)t->dtype);
}

static double as_double(int dtype, const unsigned char *p)
{
  float f;
  double x;
  uint16_t h;

  switch (dtype) {
  case AB_DTYPE_F32: memcpy(&f, p, 4); return f;
  case AB_DTYPE_F64: memcpy(&x, p, 8); return x;
  default: memcpy(&h, p, 2); return fuzz_narrow_value(dtype, h);
  }
}

static void check_file(const struct srv_call *c, const struct ab_tensor *t,
                       int to)
{
  size_t len, hl, es = ab_dtype_size((enum ab_dtype)to);
  unsigned char *f = (unsigned char *)fuzz_answer(c, &len);
  int64_t shape[AB_MAX_DIMS], n = ab_tensor_numel(t), k;
  char descr[4];
  int rank, d;

  FUZZ_CHECK(len >= 10 && memcmp(f, "\x93NUMPY\x01\x00", 8) == 0,
             "no .npy 1.0 magic (%zu bytes)", len);
  hl = (size_t)f[8] | (size_t)f[9] << 8;
  FUZZ_CHECK((10 + hl) % 64 == 0 && 10 + hl <= len,
             "header length %zu: data not 64-byte aligned", hl);
  FUZZ_CHECK(f[10 + hl - 1] == '\n', "the header does not end in a newline");
  rank = parse_dict((const char *)f + 10, hl, descr, shape);
  FUZZ_CHECK(rank == t->ndim, "dict of rank %d for a rank-%d tensor", rank,
             (int)t->ndim);
  FUZZ_CHECK(strcmp(descr, descr_of(to)) == 0, "descr %s for %s", descr,
             ab_dtype_name((enum ab_dtype)to));
  for (d = 0; d < rank; d++)
    FUZZ_CHECK(shape[d] == t->shape[d], "shape[%d] = %lld, not %lld", d,
               (long long)shape[d], (long long)t->shape[d]);
  FUZZ_CHECK(len == 10 + hl + (size_t)n * es, "%zu bytes for %lld elements",
             len, (long long)n);
  for (k = 0; k < n; k++) {
    const unsigned char *in = element(t, k), *out = f + 10 + hl + k * es;
    if (to == t->dtype) {
      FUZZ_CHECK(memcmp(in, out, es) == 0, "element %lld changed",
                 (long long)k);
    } else if (to == AB_DTYPE_F16) {
      uint16_t h;
      memcpy(&h, out, 2);
      FUZZ_CHECK(fuzz_is_nearest(to, as_double(t->dtype, in), h),
                 "element %lld: %.17g written as float16 0x%04x",
                 (long long)k, as_double(t->dtype, in), h);
    } else {
      /* Wider, or float64 to float32: C's conversion rounds to nearest. */
      double v = as_double(t->dtype, in), w = as_double(to, out);
      if (to == AB_DTYPE_F32)
        v = (float)v;
      FUZZ_CHECK(v == w || (isnan(v) && isnan(w)),
                 "element %lld: %.17g written as %.17g", (long long)k, v, w);
    }
  }
  free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct srv_call c;
  struct srv_err err;
  struct srv_output *o;
  int64_t shape[AB_MAX_DIMS], n = 1, s;
  enum ab_dtype dt;
  int to, rank, d, rc, transpose, seg_ok;
  size_t es, nbytes, i, k;
  unsigned char *buf;

  if (size < 2)
    return 0;
  dt = g_dtypes[(data[0] & 7) % 5];
  to = dt == AB_DTYPE_I32 ? AB_DTYPE_I32 : (int)g_outs[(data[0] >> 3) & 3];
  transpose = (data[0] & 0x20) != 0;
  seg_ok = (data[0] & 0x40) != 0;
  rank = (data[1] & 3) + 1;
  if (size < 2 + (size_t)rank)
    return 0;
  for (d = 0; d < rank; d++) {
    shape[d] = (int64_t)data[2 + d] + 1;
    n *= shape[d];
    if (n > MAX_NUMEL)
      return 0;
  }
  es = ab_dtype_size(dt);
  nbytes = (size_t)n * es;
  buf = malloc(nbytes);
  FUZZ_CHECK(buf != NULL, "out of memory (%zu bytes)", nbytes);
  data += 2 + rank;
  size -= 2 + (size_t)rank;
  for (i = 0, k = 0; i < nbytes; i++, k = k + 1 == size ? 0 : k + 1)
    buf[i] = size ? data[k] : 0;

  fuzz_call_init(&c, NULL, 0, 0);
  c.resp.seg_ok = seg_ok;
  c.in.fmt = SRV_FMT_NPY;
  c.in.out_dtype = dt == AB_DTYPE_I32 ? AB_DTYPE_F32 : to;
  o = &c.plan.outputs[c.plan.noutputs++];
  o->name = "t";
  FUZZ_CHECK(ab_tensor_init(&o->t, buf, dt, rank, shape) == AB_STATUS_OK,
             "%s", ab_last_error()->msg);
  if (transpose && rank >= 2) {
    /* The same bytes seen transposed: the writer must gather. */
    s = o->t.shape[rank - 1];
    o->t.shape[rank - 1] = o->t.shape[rank - 2];
    o->t.shape[rank - 2] = s;
    s = o->t.stride[rank - 1];
    o->t.stride[rank - 1] = o->t.stride[rank - 2];
    o->t.stride[rank - 2] = s;
  }
  memset(&err, 0, sizeof err);
  rc = srv_codec_encode(&c, &err);
  if (to == AB_DTYPE_BF16) {
    FUZZ_CHECK(rc != 0 && err.http == 406, "bfloat16 written as .npy");
    fuzz_check_error(&err);
  } else {
    FUZZ_CHECK(rc == 0, "%d: %s", err.http, err.detail);
    FUZZ_CHECK(c.resp.type && strcmp(c.resp.type, "application/x-npy") == 0,
               "type %s", c.resp.type ? c.resp.type : "(none)");
    check_file(&c, &o->t, to);
  }
  fuzz_call_free(&c);
  free(buf);
  return 0;
}
