/* test-encode-fast.c: the two shortcuts of codec/encode.c.
 *
 * Binary responses may leave large tensors where they lie (c->resp.seg,
 * sent by http/mhd.c without a copy): the bytes on the wire --
 * resp.body followed by the segments -- must be exactly the copied
 * encoding, field by field as the safetensors and .npy formats define
 * them, with the large tensors pointing at their own data and nothing
 * after a segment ever copied ahead of it.
 *
 * JSON float arrays go through a small memo of texts: every element must
 * still be the text of its own value, also when many distinct values
 * share memo slots, for -0 and 0, non-finite values, and float16/bfloat16
 * outputs. */
#include "call/call.h"
#include "codec/codec-internal.h"
#include "srv.h"
#include "test.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void call_init(struct srv_call *c, enum srv_fmt fmt, int seg_ok)
{
  srv_call_init(c, NULL);
  c->in.fmt = fmt;
  c->resp.seg_ok = seg_ok;
}

static void call_free(struct srv_call *c)
{
  srv_call_release(c);
}

/* resp.body then every segment, as mhd.c puts them on the wire. */
static char *wire(const struct srv_call *c, size_t *len)
{
  size_t n = c->resp.body.len, off;
  char *w;
  int i;

  for (i = 0; i < c->resp.nseg; i++)
    n += c->resp.seg[i].len;
  w = malloc(n ? n : 1);
  if (!w)
    return NULL;
  memcpy(w, c->resp.body.data, c->resp.body.len);
  off = c->resp.body.len;
  for (i = 0; i < c->resp.nseg; i++) {
    memcpy(w + off, c->resp.seg[i].data, c->resp.seg[i].len);
    off += c->resp.seg[i].len;
  }
  *len = n;
  return w;
}

static void add_output(struct srv_call *c, const char *name, float *data,
                       int ndim, const int64_t *shape)
{
  struct srv_output *o = &c->plan.outputs[c->plan.noutputs++];

  o->name = name;
  ab_tensor_init(&o->t, data, AB_DTYPE_F32, ndim, shape);
}

/* Outputs small "a" [5], large "big" [64, 1024] (256 KiB), small "lse"
 * [16] after it, and a scalar.  With segments allowed, "a" is copied,
 * "big" is sent from its own memory, and "lse" -- small, but after a
 * segment -- becomes a segment too, so the order on the wire holds. */
TEST(encode_safetensors_segments_are_the_copied_bytes)
{
  static float a[5], lse[16];
  float *big = malloc(64 * 1024 * sizeof *big);
  int64_t sa[1] = {5}, sb[2] = {64, 1024}, sl[1] = {16};
  struct srv_call flat, seg;
  struct srv_err err;
  char *w;
  size_t wlen = 0, i;
  uint64_t hl;
  json_t *hdr, *e;
  int k;

  CHECK(big != NULL);
  for (i = 0; i < 5; i++)
    a[i] = (float)i - 2.5f;
  for (i = 0; i < 64 * 1024; i++)
    big[i] = (float)sin((double)i * 0.001);
  for (i = 0; i < 16; i++)
    lse[i] = 1.0f / (float)(i + 1);

  for (k = 0; k < 2; k++) {
    struct srv_call *c = k ? &seg : &flat;
    call_init(c, SRV_FMT_SAFETENSORS, k);
    add_output(c, "a", a, 1, sa);
    add_output(c, "big", big, 2, sb);
    add_output(c, "lse", lse, 1, sl);
    c->plan.outputs[c->plan.noutputs].name = "s";
    c->plan.outputs[c->plan.noutputs].is_scalar = 1;
    c->plan.outputs[c->plan.noutputs++].scalar = 0.25;
    CHECK_EQ_I64(srv_codec_encode(c, &err), 0);
    CHECK_STR(c->resp.type, "application/vnd.safetensors");
  }
  CHECK_EQ_I64(flat.resp.nseg, 0);
  CHECK_EQ_I64(seg.resp.nseg, 2);
  CHECK(seg.resp.seg[0].data == (const void *)big);
  CHECK_EQ_I64(seg.resp.seg[0].len, sizeof(float) * 64 * 1024);
  CHECK(seg.resp.seg[1].data == (const void *)lse);
  CHECK_EQ_I64(seg.resp.seg[1].len, sizeof lse);
  w = wire(&seg, &wlen);
  CHECK(w != NULL);
  CHECK_EQ_I64(wlen, flat.resp.body.len);
  CHECK(memcmp(w, flat.resp.body.data, wlen) == 0);

  /* And by the format: every tensor's bytes at its data_offsets. */
  hl = srv_codec__rd_le64((const unsigned char *)w);
  CHECK_EQ_I64(wlen, 8 + hl + sizeof a + 64 * 1024 * sizeof(float) +
                         sizeof lse);
  hdr = json_loadb(w + 8, hl, 0, NULL);
  CHECK(hdr != NULL);
  e = json_object_get(json_object_get(hdr, "big"), "data_offsets");
  CHECK_EQ_I64(json_integer_value(json_array_get(e, 0)), sizeof a);
  CHECK(memcmp(w + 8 + hl + sizeof a, big, 64 * 1024 * sizeof(float)) == 0);
  e = json_object_get(json_object_get(hdr, "lse"), "data_offsets");
  CHECK_EQ_I64(json_integer_value(json_array_get(e, 0)),
               sizeof a + 64 * 1024 * sizeof(float));
  CHECK(memcmp(w + 8 + hl + sizeof a + 64 * 1024 * sizeof(float), lse,
               sizeof lse) == 0);
  CHECK(memcmp(w + 8 + hl, a, sizeof a) == 0);
  json_decref(hdr);
  free(w);
  call_free(&flat);
  call_free(&seg);
  free(big);
  return 0;
}

/* A conversion (output_dtype float16) writes a copy into the arena: the
 * segment points there, and the bytes are the float16 values. */
TEST(encode_safetensors_segment_of_a_converted_tensor)
{
  const size_t n = 128 * 1024;
  float *x = malloc(n * sizeof *x);
  int64_t sx[1] = {(int64_t)n};
  struct srv_call flat, seg;
  struct srv_err err;
  const uint16_t *h;
  uint64_t hl;
  size_t i;
  char *w;
  size_t wlen = 0;
  int k;

  CHECK(x != NULL);
  for (i = 0; i < n; i++)
    x[i] = (float)((double)(i % 2048) * 0.5 - 512.0); /* exact in half */
  for (k = 0; k < 2; k++) {
    struct srv_call *c = k ? &seg : &flat;
    call_init(c, SRV_FMT_SAFETENSORS, k);
    c->in.out_dtype = AB_DTYPE_F16;
    add_output(c, "x", x, 1, sx);
    CHECK_EQ_I64(srv_codec_encode(c, &err), 0);
  }
  CHECK_EQ_I64(seg.resp.nseg, 1);
  CHECK(seg.resp.seg[0].data != (const void *)x);
  CHECK_EQ_I64(seg.resp.seg[0].len, n * 2);
  w = wire(&seg, &wlen);
  CHECK(w != NULL);
  CHECK_EQ_I64(wlen, flat.resp.body.len);
  CHECK(memcmp(w, flat.resp.body.data, wlen) == 0);
  hl = srv_codec__rd_le64((const unsigned char *)w);
  CHECK(strstr(seg.resp.body.data + 8, "\"F16\"") != NULL);
  h = seg.resp.seg[0].data;
  for (i = 0; i < n; i += 997) {
    /* Half bits of the exact value, written out by the format's rules:
     * sign, 5-bit exponent (bias 15), 10-bit fraction. */
    double v = (double)x[i], m;
    int ex;
    uint16_t want;
    if (v == 0) {
      want = 0;
    } else {
      m = frexp(fabs(v), &ex); /* |v| = m * 2^ex, m in [0.5, 1) */
      want = (uint16_t)(((ex - 1 + 15) << 10) |
                        ((int)ldexp(m * 2 - 1, 10) & 0x3ff));
      if (v < 0)
        want |= 0x8000;
    }
    CHECK_EQ_I64(h[i], want);
  }
  CHECK_EQ_I64(wlen, 8 + hl + n * 2);
  free(w);
  call_free(&flat);
  call_free(&seg);
  free(x);
  return 0;
}

/* .npy: the header stays in resp.body (its data 64-byte aligned on the
 * wire), the tensor is one segment; small tensors stay copied. */
TEST(encode_npy_segment_and_small_copy)
{
  const size_t n = 32 * 1024;
  float *x = malloc(n * sizeof *x), tiny[3] = {1, 2, 3};
  int64_t sx[2] = {32, 1024}, st[1] = {3};
  struct srv_call flat, seg, small;
  struct srv_err err;
  char *w;
  size_t wlen = 0, i, hl;
  int k;

  CHECK(x != NULL);
  for (i = 0; i < n; i++)
    x[i] = (float)i;
  for (k = 0; k < 2; k++) {
    struct srv_call *c = k ? &seg : &flat;
    call_init(c, SRV_FMT_NPY, k);
    add_output(c, "output", x, 2, sx);
    CHECK_EQ_I64(srv_codec_encode(c, &err), 0);
    CHECK_STR(c->resp.type, "application/x-npy");
  }
  CHECK_EQ_I64(seg.resp.nseg, 1);
  CHECK(seg.resp.seg[0].data == (const void *)x);
  CHECK(memcmp(seg.resp.body.data, "\x93NUMPY\x01\x00", 8) == 0);
  hl = (size_t)(unsigned char)seg.resp.body.data[8] |
       (size_t)(unsigned char)seg.resp.body.data[9] << 8;
  CHECK_EQ_I64(seg.resp.body.len, 10 + hl);
  CHECK_EQ_I64(seg.resp.body.len % 64, 0);
  CHECK(memmem(seg.resp.body.data, seg.resp.body.len, "'shape': (32, 1024)",
               19) != NULL);
  w = wire(&seg, &wlen);
  CHECK(w != NULL);
  CHECK_EQ_I64(wlen, flat.resp.body.len);
  CHECK(memcmp(w, flat.resp.body.data, wlen) == 0);
  free(w);

  call_init(&small, SRV_FMT_NPY, 1);
  add_output(&small, "output", tiny, 1, st);
  CHECK_EQ_I64(srv_codec_encode(&small, &err), 0);
  CHECK_EQ_I64(small.resp.nseg, 0);
  CHECK(memcmp(small.resp.body.data + small.resp.body.len - 12, tiny, 12) == 0);
  call_free(&small);
  call_free(&flat);
  call_free(&seg);
  free(x);
  return 0;
}

/* A failed encoding leaves no segment behind (the error body is all). */
TEST(encode_failure_clears_segments)
{
  const size_t n = 32 * 1024;
  float *x = calloc(n, sizeof *x);
  int64_t sx[1] = {(int64_t)n};
  struct srv_call c;
  struct srv_err err;

  CHECK(x != NULL);
  call_init(&c, SRV_FMT_SAFETENSORS, 1);
  add_output(&c, "x", x, 1, sx);
  CHECK_EQ_I64(srv_codec_encode(&c, &err), 0);
  CHECK_EQ_I64(c.resp.nseg, 1);
  /* Re-encode as .npy with a pick that does not exist: 400, no segment. */
  c.in.fmt = SRV_FMT_NPY;
  c.in.pick = "nope";
  CHECK(srv_codec_encode(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  CHECK_EQ_I64(c.resp.nseg, 0);
  call_free(&c);
  free(x);
  return 0;
}

/* ---- JSON ----------------------------------------------------------------- */

/* The next element of a JSON number array at *p (just past '[' or ','),
 * as text; *p moves past it. */
static int next_text(const char **p, char *out, size_t cap)
{
  size_t n = strcspn(*p, ",]");

  if (n == 0 || n >= cap || !(*p)[n])
    return -1;
  memcpy(out, *p, n);
  out[n] = '\0';
  *p += n + 1;
  return 0;
}

/* One float32 output of n values as JSON (in dtype `to`); every element
 * must be the formatter's text of its own value. */
static int check_json_texts(const float *v, size_t n, int to)
{
  int64_t sh[1] = {(int64_t)n};
  struct srv_call c;
  struct srv_err err;
  char got[64], want[64];
  size_t i, wl;
  json_t *doc;
  const char *at;

  call_init(&c, SRV_FMT_JSON, 1);
  c.in.out_dtype = to;
  c.plan.outputs[0].name = "t";
  ab_tensor_init(&c.plan.outputs[0].t, (void *)v, AB_DTYPE_F32, 1, sh);
  c.plan.noutputs = 1;
  CHECK_EQ_I64(srv_codec_encode(&c, &err), 0);
  CHECK_EQ_I64(c.resp.nseg, 0);
  /* Valid JSON with n elements, non-finite values as strings. */
  doc = json_loads(c.resp.body.data, 0, NULL);
  CHECK(doc != NULL);
  CHECK_EQ_I64(json_array_size(json_object_get(json_object_get(doc, "t"),
                                               "data")),
               n);
  json_decref(doc);
  at = strstr(c.resp.body.data, "\"data\":[");
  CHECK(at != NULL);
  at += 8;
  for (i = 0; i < n; i++) {
    float f = v[i];
    if (to == AB_DTYPE_F16)
      f = ab_f16_to_f32(ab_f32_to_f16(f));
    else if (to == AB_DTYPE_BF16)
      f = ab_bf16_to_f32(ab_f32_to_bf16(f));
    wl = srv_codec_fmt_f32(want, f);
    want[wl] = '\0';
    CHECK_EQ_I64(next_text(&at, got, sizeof got), 0);
    if (strcmp(got, want) != 0)
      FAIL_AT("element %zu (%.9g, dtype %d): \"%s\", want \"%s\"", i,
              (double)v[i], to, got, want);
    /* And it reads back as the value (non-finite ones are strings). */
    if (isfinite(f)) {
      float back = strtof(got, NULL);
      CHECK(memcmp(&back, &f, sizeof f) == 0);
    }
  }
  call_free(&c);
  return 0;
}

TEST(encode_json_repeated_values_keep_their_texts)
{
  /* An ALiBi-like table: 8 heads x 32 x 32, slope * -|i - j|, in which
   * each value comes back many times. */
  enum { H = 8, N = 32 };
  static float t[H * N * N];
  int h, i, j;

  for (h = 0; h < H; h++)
    for (i = 0; i < N; i++)
      for (j = 0; j < N; j++)
        t[(h * N + i) * N + j] =
            -(float)ldexp(1.0, -(h + 1)) * (float)abs(i - j);
  if (check_json_texts(t, H * N * N, AB_DTYPE_F32))
    return 1;
  return 0;
}

TEST(encode_json_memo_collisions_and_special_values)
{
  /* 3000 distinct values (many more than the memo has slots, so slots are
   * shared), each repeated at scattered places, plus -0, 0, infinities,
   * NaN, subnormals and extremes. */
  enum { D = 3000, R = 4 };
  static float v[D * R + 16];
  size_t n = 0, i;
  int r;

  for (r = 0; r < R; r++)
    for (i = 0; i < D; i++) {
      size_t k = (i * 7 + (size_t)r * 1013) % D; /* a different order */
      v[n++] = (float)(((double)k - 1500.0) * 0.0123456789);
    }
  v[n++] = -0.0f;
  v[n++] = 0.0f;
  v[n++] = -0.0f;
  v[n++] = INFINITY;
  v[n++] = -INFINITY;
  v[n++] = NAN;
  v[n++] = 1e-45f;
  v[n++] = -1.17549435e-38f;
  v[n++] = 3.40282347e38f;
  v[n++] = 0.0f;
  v[n++] = INFINITY;
  v[n++] = 1e-45f;
  if (check_json_texts(v, n, AB_DTYPE_F32))
    return 1;
  if (check_json_texts(v, n, AB_DTYPE_F16))
    return 1;
  if (check_json_texts(v, n, AB_DTYPE_BF16))
    return 1;
  return 0;
}
