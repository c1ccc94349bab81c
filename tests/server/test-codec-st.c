/* test-codec-st.c: binary bodies -- safetensors requests (every tensor and
 * every malformed-header case), safetensors responses (read back by hand
 * and with jansson), and .npy responses checked byte by byte against the
 * NumPy format 1.0 specification and, when /usr/bin/python3 has numpy,
 * loaded by numpy.load. */
#include "call/call.h"
#include "codec/codec-internal.h"
#include "srv.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

struct body {
  char *p;
  size_t len;
};

/* An 8-byte LE length, the header text padded with `pad` spaces, then
 * `dlen` bytes of data. */
static struct body st_body(const char *header, size_t pad, const void *data,
                           size_t dlen)
{
  struct body b;
  size_t hl = strlen(header) + pad;
  int i;

  b.len = 8 + hl + dlen;
  b.p = malloc(b.len + 1);
  for (i = 0; i < 8; i++)
    b.p[i] = (char)((uint64_t)hl >> (8 * i));
  memcpy(b.p + 8, header, strlen(header));
  memset(b.p + 8 + strlen(header), ' ', pad);
  if (dlen)
    memcpy(b.p + 8 + hl, data, dlen);
  return b;
}

static void call_init(struct srv_call *c, const char *ctype, const char *body,
                      size_t len)
{
  srv_call_init(c, NULL);
  c->req.content_type = ctype;
  c->req.body = body;
  c->req.body_len = len;
}

static void call_free(struct srv_call *c)
{
  srv_call_release(c);
}

/* Decode a safetensors body; returns the decode status, err filled. */
static int st_decode(struct srv_call *c, struct body b, struct srv_err *err)
{
  call_init(c, "application/vnd.safetensors", b.p, b.len);
  memset(err, 0, sizeof *err);
  return srv_codec_decode_request(c, err);
}

/* ---- requests ------------------------------------------------------------ */

TEST(st_decode_tensors_and_params)
{
  /* q: F32 [2, 3] at 0..24, bias.table: F16 [2] at 24..28, pos: I32 [3]
   * at 28..40.  Header padded to a multiple of 8 so data is aligned. */
  static const char hdr[] =
      "{\"__metadata__\":{\"format\":\"pt\",\"params\":\"{\\\"num_heads\\\": 2,"
      " \\\"x\\\": {\\\"shape\\\": [1], \\\"data\\\": [5]}}\"},"
      "\"q\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"bias.table\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
      "\"pos\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[28,40]}}";
  unsigned char data[40];
  float q[6] = {1, -2, 0.5f, 3.25f, -INFINITY, 1e-30f};
  uint16_t h[2] = {0x3c00, 0xc000}; /* 1, -2 */
  int32_t pos[3] = {0, 7, -3};
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  struct body b;
  size_t pad = (8 - (8 + strlen(hdr)) % 8) % 8;
  int i;

  memcpy(data, q, 24);
  memcpy(data + 24, h, 4);
  memcpy(data + 28, pos, 12);
  b = st_body(hdr, pad, data, sizeof data);
  if (st_decode(&c, b, &err))
    FAIL_AT("decode: %d %s (%s)", err.http, err.detail, err.field);
  CHECK_EQ_I64(c.in.nbin, 3);
  CHECK_EQ_I64(json_integer_value(json_object_get(c.in.params, "num_heads")),
               2);

  CHECK_EQ_I64(srv_codec_tensor(&c, "q", 1, &t, &err), 1);
  CHECK_EQ_I64(t.dtype, AB_DTYPE_F32);
  CHECK_EQ_I64(t.ndim, 2);
  CHECK_EQ_I64(t.shape[0], 2);
  CHECK_EQ_I64(t.shape[1], 3);
  /* Aligned: used in place, zero copy. */
  CHECK(t.data == (void *)(b.p + 8 + strlen(hdr) + pad));
  for (i = 0; i < 6; i++)
    CHECK(((float *)t.data)[i] == q[i]);

  CHECK_EQ_I64(srv_codec_tensor(&c, "bias.table", 1, &t, &err), 1);
  CHECK_EQ_I64(t.dtype, AB_DTYPE_F16);
  CHECK(ab_f16_to_f32(((uint16_t *)t.data)[1]) == -2.0f);
  CHECK_EQ_I64(srv_codec_tensor(&c, "pos", 1, &t, &err), 1);
  CHECK_EQ_I64(t.dtype, AB_DTYPE_I32);
  CHECK_EQ_I64(((int32_t *)t.data)[2], -3);
  /* A tensor still given as JSON inside params. */
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), 1);
  CHECK(((float *)t.data)[0] == 5.0f);
  CHECK_EQ_I64(srv_codec_tensor(&c, "k", 0, &t, &err), 0);
  call_free(&c);
  free(b.p);
  return 0;
}

TEST(st_decode_unaligned_is_copied)
{
  /* Header of a length that leaves the F32 data at an odd address. */
  static const char hdr[] =
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}";
  float x[3] = {1.5f, -0.25f, 7};
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  size_t pad = 0;
  struct body b;

  while ((8 + strlen(hdr) + pad) % 4 != 1)
    pad++;
  b = st_body(hdr, pad, x, sizeof x);
  CHECK_EQ_I64(st_decode(&c, b, &err), 0);
  CHECK(json_is_object(c.in.params) && json_object_size(c.in.params) == 0);
  CHECK_EQ_I64(srv_codec_tensor(&c, "x", 1, &t, &err), 1);
  CHECK((uintptr_t)t.data % 4 == 0);
  CHECK(t.data != (void *)(b.p + 8 + strlen(hdr) + pad));
  CHECK(((float *)t.data)[0] == 1.5f && ((float *)t.data)[2] == 7.0f);
  call_free(&c);
  free(b.p);
  return 0;
}

TEST(st_decode_malformed)
{
  static const struct {
    const char *hdr;
    size_t dlen;
    const char *field;
  } cases[] = {
      {"{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
       "/x"},
      {"{\"x\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16, "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16,
       "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4,0],\"data_offsets\":[0,0]}}", 16,
       "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
       "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],"
       "\"data_offsets\":[0,4]}}", 4, "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
       "/x"}, /* past the data section */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16,
       "/x"}, /* begin > end */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 16,
       "/x"}, /* wrong size */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-4,12]}}",
       16, "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", 16,
       "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,\"16\"]}}",
       16, "/x"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
       "/y"}, /* overlap */
      {"{\"a.b\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
       "\"data_offsets\":[0,16]}}", 16, "/a/b"},
      {"{\"x\":[1]}", 0, "/x"},
      {"{\"__metadata__\":[1]}", 0, "/__metadata__"},
      {"{\"__metadata__\":{\"params\":7}}", 0, "/__metadata__/params"},
      {"{\"__metadata__\":{\"params\":{\"a\":1}}}", 0, "/__metadata__/params"},
      {"{\"__metadata__\":{\"params\":\"{oops\"}}", 0, ""}, /* bad JSON */
      {"{\"__metadata__\":{\"params\":\"[1]\"}}", 0, ""}, /* not an object */
      {"[1, 2]", 0, ""},
      {"{\"x\": 1,", 0, ""},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
       ""}, /* duplicate name */
  };
  unsigned char data[32] = {0};
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct srv_call c;
    struct srv_err err;
    struct body b = st_body(cases[i].hdr, 0, data, cases[i].dlen);
    int rc = st_decode(&c, b, &err);
    call_free(&c);
    free(b.p);
    if (rc == 0)
      FAIL_AT("case %zu accepted: %s", i, cases[i].hdr);
    if (err.http != 400 || strcmp(err.field, cases[i].field) != 0)
      FAIL_AT("case %zu: %d field \"%s\" (want 400 \"%s\"): %s", i, err.http,
              err.field, cases[i].field, err.detail);
  }
  return 0;
}

TEST(st_decode_bad_lengths)
{
  struct srv_call c;
  struct srv_err err;
  struct body b;
  char small[5] = "abcd";
  unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
                           '{', '}'};

  b.p = small;
  b.len = 4; /* shorter than the length field */
  CHECK(st_decode(&c, b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  call_free(&c);
  b.p = (char *)big; /* a header length far beyond the body */
  b.len = 10;
  CHECK(st_decode(&c, b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  CHECK(strstr(err.detail, "exceeds") != NULL);
  call_free(&c);
  big[0] = 2; /* exactly the body: fine, no tensors */
  memset(big + 1, 0, 7);
  CHECK_EQ_I64(st_decode(&c, b, &err), 0);
  CHECK_EQ_I64(c.in.nbin, 0);
  call_free(&c);
  big[0] = 3; /* one past the body */
  CHECK(st_decode(&c, b, &err) != 0);
  call_free(&c);
  b.len = 0; /* empty safetensors body */
  CHECK(st_decode(&c, b, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  call_free(&c);
  return 0;
}

/* ---- responses ------------------------------------------------------------ */

TEST(st_encode_round_trip)
{
  float x[6] = {1, -2, 0.5f, INFINITY, -0.0f, 3.5f};
  int32_t bk[3] = {4, -1, 9};
  int64_t sx[2] = {3, 2}, sb[1] = {3};
  struct srv_call c, d;
  struct srv_err err;
  struct ab_tensor t;
  json_t *hdr, *e, *meta;
  uint64_t hl = 0;
  const unsigned char *p;
  int i;

  call_init(&c, NULL, NULL, 0);
  c.in.fmt = SRV_FMT_SAFETENSORS;
  c.plan.outputs[0].name = "attention_scaling";
  c.plan.outputs[0].is_scalar = 1;
  c.plan.outputs[0].scalar = 0.5;
  c.plan.outputs[1].name = "cos";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[1].t, x, AB_DTYPE_F32, 2, sx));
  c.plan.outputs[2].name = "buckets";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[2].t, bk, AB_DTYPE_I32, 1, sb));
  c.plan.outputs[3].name = "lse_min";
  c.plan.outputs[3].is_scalar = 1;
  c.plan.outputs[3].scalar = -INFINITY;
  c.plan.noutputs = 4;
  CHECK_EQ_I64(srv_codec_encode(&c, &err), 0);
  CHECK_STR(c.resp.type, "application/vnd.safetensors");

  /* Read it back by the format's definition. */
  p = (const unsigned char *)c.resp.body.data;
  for (i = 7; i >= 0; i--)
    hl = hl << 8 | p[i];
  CHECK_EQ_I64(hl % 8, 0);
  CHECK_EQ_I64(c.resp.body.len, 8 + hl + 24 + 12);
  hdr = json_loadb(c.resp.body.data + 8, hl, 0, NULL);
  CHECK(hdr != NULL);
  meta = json_object_get(hdr, "__metadata__");
  CHECK_STR(json_string_value(json_object_get(meta, "attention_scaling")),
            "0.5");
  CHECK_STR(json_string_value(json_object_get(meta, "lse_min")), "-inf");
  e = json_object_get(hdr, "cos");
  CHECK_STR(json_string_value(json_object_get(e, "dtype")), "F32");
  CHECK_EQ_I64(json_integer_value(json_array_get(json_object_get(e, "shape"),
                                                 0)), 3);
  CHECK_EQ_I64(json_integer_value(json_array_get(
                   json_object_get(e, "data_offsets"), 1)), 24);
  e = json_object_get(hdr, "buckets");
  CHECK_STR(json_string_value(json_object_get(e, "dtype")), "I32");
  CHECK_EQ_I64(json_integer_value(json_array_get(
                   json_object_get(e, "data_offsets"), 0)), 24);
  CHECK(memcmp(c.resp.body.data + 8 + hl, x, 24) == 0);
  CHECK(memcmp(c.resp.body.data + 8 + hl + 24, bk, 12) == 0);
  json_decref(hdr);

  /* And through our own request decoder. */
  call_init(&d, "application/vnd.safetensors", c.resp.body.data,
            c.resp.body.len);
  CHECK_EQ_I64(srv_codec_decode_request(&d, &err), 0);
  CHECK_EQ_I64(d.in.nbin, 2);
  CHECK_EQ_I64(srv_codec_tensor(&d, "cos", 1, &t, &err), 1);
  CHECK(memcmp(t.data, x, 24) == 0);
  CHECK_EQ_I64(srv_codec_tensor(&d, "buckets", 1, &t, &err), 1);
  CHECK_EQ_I64(t.dtype, AB_DTYPE_I32);
  call_free(&d);
  call_free(&c);

  /* output_dtype float16: 1, -2, 0.5, inf, -0, 3.5 as half bits. */
  call_init(&c, NULL, NULL, 0);
  c.in.fmt = SRV_FMT_SAFETENSORS;
  c.in.out_dtype = AB_DTYPE_F16;
  c.plan.outputs[0].name = "x";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, x, AB_DTYPE_F32, 2, sx));
  c.plan.noutputs = 1;
  CHECK_EQ_I64(srv_codec_encode(&c, &err), 0);
  {
    static const uint16_t want[6] = {0x3c00, 0xc000, 0x3800,
                                     0x7c00, 0x8000, 0x4300};
    p = (const unsigned char *)c.resp.body.data;
    hl = 0;
    for (i = 7; i >= 0; i--)
      hl = hl << 8 | p[i];
    CHECK(strstr(c.resp.body.data + 8, "\"F16\"") != NULL);
    CHECK(memcmp(c.resp.body.data + 8 + hl, want, 12) == 0);
  }
  call_free(&c);
  return 0;
}

/* ---- npy ------------------------------------------------------------------ */

/* Check the .npy bytes against NEP 1 / numpy.lib.format 1.0. */
static int check_npy(const struct srv_buf *b, const char *dict,
                     const void *data, size_t nbytes)
{
  const unsigned char *p = (const unsigned char *)b->data;
  size_t hl, dl = strlen(dict), i;

  if (b->len < 10 || memcmp(p, "\x93NUMPY\x01\x00", 8) != 0)
    return 1;
  hl = (size_t)p[8] | (size_t)p[9] << 8;
  if ((10 + hl) % 64 != 0 || b->len != 10 + hl + nbytes)
    return 2;
  if (memcmp(p + 10, dict, dl) != 0)
    return 3;
  for (i = 10 + dl; i < 10 + hl - 1; i++)
    if (p[i] != ' ')
      return 4;
  if (p[10 + hl - 1] != '\n')
    return 5;
  if (memcmp(p + 10 + hl, data, nbytes) != 0)
    return 6;
  return 0;
}

static int npy_encode(struct srv_call *c, struct srv_err *err)
{
  c->in.fmt = SRV_FMT_NPY;
  return srv_codec_encode(c, err);
}

TEST(npy_header_bytes)
{
  float x[6] = {1, 2, 3, 4, 5, 6};
  int32_t iv[5] = {1, -2, 3, -4, 5};
  int64_t s2[2] = {2, 3}, s1[1] = {5};
  struct srv_call c;
  struct srv_err err;
  int r;

  call_init(&c, NULL, NULL, 0);
  c.plan.outputs[0].name = "bias";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, x, AB_DTYPE_F32, 2, s2));
  c.plan.outputs[1].name = "attention_scaling";
  c.plan.outputs[1].is_scalar = 1;
  c.plan.noutputs = 2;
  CHECK_EQ_I64(npy_encode(&c, &err), 0); /* the one tensor output */
  CHECK_STR(c.resp.type, "application/x-npy");
  r = check_npy(&c.resp.body,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                x, 24);
  CHECK_EQ_I64(r, 0);
  call_free(&c);

  call_init(&c, NULL, NULL, 0);
  c.plan.outputs[0].name = "buckets";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, iv, AB_DTYPE_I32, 1, s1));
  c.plan.noutputs = 1;
  CHECK_EQ_I64(npy_encode(&c, &err), 0);
  r = check_npy(&c.resp.body,
                "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }",
                iv, 20);
  CHECK_EQ_I64(r, 0);
  call_free(&c);

  /* float64 and float16 outputs. */
  {
    double xd[6];
    uint16_t xh[6] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600};
    int i;
    for (i = 0; i < 6; i++)
      xd[i] = x[i];
    call_init(&c, NULL, NULL, 0);
    c.in.out_dtype = AB_DTYPE_F64;
    c.plan.outputs[0].name = "x";
    CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, x, AB_DTYPE_F32, 2, s2));
    c.plan.noutputs = 1;
    CHECK_EQ_I64(npy_encode(&c, &err), 0);
    CHECK_EQ_I64(check_npy(&c.resp.body,
                           "{'descr': '<f8', 'fortran_order': False, "
                           "'shape': (2, 3), }",
                           xd, 48), 0);
    call_free(&c);
    call_init(&c, NULL, NULL, 0);
    c.in.out_dtype = AB_DTYPE_F16;
    c.plan.outputs[0].name = "x";
    CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, x, AB_DTYPE_F32, 2, s2));
    c.plan.noutputs = 1;
    CHECK_EQ_I64(npy_encode(&c, &err), 0);
    CHECK_EQ_I64(check_npy(&c.resp.body,
                           "{'descr': '<f2', 'fortran_order': False, "
                           "'shape': (2, 3), }",
                           xh, 12), 0);
    call_free(&c);
  }
  return 0;
}

TEST(npy_choice_and_refusals)
{
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t s2[2] = {2, 3};
  struct srv_call c;
  struct srv_err err;

  /* Two tensors: 406 unless "output" picks one. */
  call_init(&c, NULL, NULL, 0);
  c.plan.outputs[0].name = "cos";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, x, AB_DTYPE_F32, 2, s2));
  c.plan.outputs[1].name = "sin";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[1].t, x, AB_DTYPE_F32, 2, s2));
  c.plan.noutputs = 2;
  CHECK(npy_encode(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 406);
  CHECK(strstr(err.detail, "\"cos\"") && strstr(err.detail, "\"sin\""));
  c.in.pick = "sin";
  CHECK_EQ_I64(npy_encode(&c, &err), 0);
  c.in.pick = "tan";
  CHECK(npy_encode(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 400);
  CHECK_STR(err.field, "/output");
  /* bfloat16 has no .npy descr. */
  c.in.pick = "cos";
  c.in.out_dtype = AB_DTYPE_BF16;
  CHECK(npy_encode(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 406);
  call_free(&c);

  /* Only scalars: nothing to write. */
  call_init(&c, NULL, NULL, 0);
  c.plan.outputs[0].name = "s";
  c.plan.outputs[0].is_scalar = 1;
  c.plan.noutputs = 1;
  CHECK(npy_encode(&c, &err) != 0);
  CHECK_EQ_I64(err.http, 406);
  call_free(&c);
  return 0;
}

/* numpy.load reads what we write (skipped when numpy is not installed). */
TEST(npy_loads_in_numpy)
{
  float x[6] = {1.5f, -2, 0.1f, 4, -INFINITY, 6};
  int64_t s[3] = {1, 2, 3};
  struct srv_call c;
  struct srv_err err;
  char path[] = "/tmp/attnbias-npy-XXXXXX", cmd[512], line[512] = "";
  FILE *f;
  int fd;

  if (access("/usr/bin/python3", X_OK) != 0 ||
      system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    fprintf(stderr, "  # skip: /usr/bin/python3 with numpy not available\n");
    return 0;
  }
  call_init(&c, NULL, NULL, 0);
  c.plan.outputs[0].name = "x";
  CHECK_OK(ab_tensor_init(&c.plan.outputs[0].t, x, AB_DTYPE_F32, 3, s));
  c.plan.noutputs = 1;
  CHECK_EQ_I64(npy_encode(&c, &err), 0);
  fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK_EQ_I64(write(fd, c.resp.body.data, c.resp.body.len),
               (long long)c.resp.body.len);
  close(fd);
  call_free(&c);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import numpy,sys; a=numpy.load(sys.argv[1]);"
           " print(a.dtype.str, a.shape, a.flags['C_CONTIGUOUS'],"
           " ' '.join(repr(float(v)) for v in a.ravel()))\" %s",
           path);
  f = popen(cmd, "r");
  CHECK(f != NULL);
  if (!fgets(line, sizeof line, f))
    line[0] = '\0';
  pclose(f);
  unlink(path);
  line[strcspn(line, "\n")] = '\0';
  /* 0.1f is 0.10000000149011612 as a double. */
  CHECK_STR(line, "<f4 (1, 2, 3) True 1.5 -2.0 0.10000000149011612 4.0 "
                  "-inf 6.0");
  return 0;
}

/* A long base64 tensor inside __metadata__.params: that text is a string
 * of the header, not the body, so it is decoded through jansson's copy --
 * and must still be right after the header is gone. */
TEST(st_params_b64_tensor)
{
  enum { N = 200 };
  float y[N];
  char b64[1100], hdr[1400];
  struct srv_call c;
  struct srv_err err;
  struct ab_tensor t;
  struct body b;
  size_t el = srv_codec__b64_encoded_len(sizeof y);
  int i;

  for (i = 0; i < N; i++)
    y[i] = (float)i * 0.5f - 7.0f;
  srv_codec__b64_encode(b64, y, sizeof y);
  b64[el] = '\0';
  snprintf(hdr, sizeof hdr,
           "{\"__metadata__\":{\"params\":\"{\\\"y\\\": {\\\"shape\\\": [%d], "
           "\\\"b64\\\": \\\"%s\\\"}}\"}}",
           N, b64);
  b = st_body(hdr, 0, NULL, 0);
  CHECK_EQ_I64(st_decode(&c, b, &err), 0);
  CHECK_EQ_I64(srv_codec_tensor(&c, "y", 1, &t, &err), 1);
  CHECK_EQ_I64(t.shape[0], N);
  CHECK(memcmp(t.data, y, sizeof y) == 0);
  call_free(&c);
  free(b.p);
  return 0;
}
