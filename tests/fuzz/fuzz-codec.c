/* fuzz-codec.c: libFuzzer target over the codec's request side and what
 * follows from it -- decode (Content-Type, Accept, JSON with the depth
 * pre-scan and the fast "data" path, safetensors), tensor extraction by
 * every kind of path, then encoding what was found in the negotiated
 * format, and the problem+json of any error.
 *
 * Input: byte 0 chooses the headers and the route, the rest is the body.
 *   bits 0-1  Content-Type: json, safetensors, absent, json;charset=utf-8
 *   bits 2-4  Accept: one of g_accepts
 *   bit  5    the route may answer image/png
 *   bit  6    binary answers may leave large tensors where they lie
 *             (resp.seg_ok, as the server sends them)
 *   bit  7    answer in float64 (a float64 tensor of the body is written
 *             back as it came: every bit pattern reaches the formatter)
 * Every refusal must be a 4xx with a readable problem+json
 * (fuzz_check_error), every JSON answer must parse.  (The PNG heatmap has
 * its own target, fuzz-png.c: drawing one costs a hundred decodes.) */
#include "fuzz.h"

#include <math.h>
#include <string.h>

static const char *const g_ctypes[4] = {"application/json",
                                        "application/vnd.safetensors", NULL,
                                        "application/json; charset=utf-8"};
static const char *const g_accepts[8] = {
    NULL, "*/*", "application/vnd.safetensors", "application/x-npy",
    "image/png", "application/x-npy;q=0.5, application/json;q=0.4",
    "text/plain", "application/*;q=0.2, image/*"};
static const char *const g_paths[] = {
    "q", "k", "v", "x", "table", "attn_bias", "slopes", "data",
    "bias.table", "bias.layers.0.weight", "bias.layers.1.bias", "a.b.c.0"};

static const struct srv_route g_route_png = {"POST", "/v1/bias", "bias", NULL,
                                             NULL,
                                             SRV_ROUTE_BODY | SRV_ROUTE_PNG};
static const struct srv_route g_route = {"POST", "/v1/rope", "rope", NULL,
                                         NULL, SRV_ROUTE_BODY};

/* Limits small enough that the fuzzer explores instead of allocating. */
#define ARENA_CAP ((size_t)64 << 20)
#define OUT_MAX ((size_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct srv_call c;
  struct srv_err err;
  uint8_t mode = size ? data[0] : 0;
  int i;

  fuzz_call_init(&c, (mode & 0x20) ? &g_route_png : &g_route, ARENA_CAP,
                 OUT_MAX);
  memset(&err, 0, sizeof err);
  c.resp.seg_ok = (mode & 0x40) != 0;
  c.req.content_type = g_ctypes[mode & 3];
  c.req.accept = g_accepts[(mode >> 2) & 7];
  c.req.body = size > 1 ? (const char *)data + 1 : NULL;
  c.req.body_len = size > 1 ? size - 1 : 0;

  if (srv_codec_decode_request(&c, &err) == 0) {
    if (mode & 0x80) /* decoding read "output_dtype"; this overrides it */
      c.in.out_dtype = AB_DTYPE_F64;
    for (i = 0; i < (int)(sizeof g_paths / sizeof g_paths[0]); i++) {
      struct ab_tensor t;
      int64_t n;
      float *f;
      if (srv_codec_tensor(&c, g_paths[i], 0, &t, &err) != 1)
        continue;
      n = ab_tensor_numel(&t);
      if (n < 1 || t.dtype == AB_DTYPE_I32 ||
          (uint64_t)n > ARENA_CAP / 4 / sizeof(float))
        continue;
      /* What a handler does: gather to float32 in the arena. */
      f = srv_arena_alloc(&c.arena, (size_t)n * sizeof *f);
      if (!f || ab_tensor_to_f32(&t, f) != AB_STATUS_OK)
        continue;
      if (c.plan.noutputs < SRV_MAX_OUTPUTS) {
        struct srv_output *o = &c.plan.outputs[c.plan.noutputs++];
        o->name = g_paths[i];
        if ((mode & 0x80) && t.dtype == AB_DTYPE_F64)
          o->t = t;
        else
          ab_tensor_init(&o->t, f, AB_DTYPE_F32, t.ndim, t.shape);
      }
    }
    if (c.plan.noutputs < SRV_MAX_OUTPUTS) {
      struct srv_output *o = &c.plan.outputs[c.plan.noutputs++];
      o->name = "scalar";
      o->is_scalar = 1;
      o->scalar = c.req.body_len ? (double)c.req.body[0] / 7.0 : -INFINITY;
    }
    if (srv_codec_encode(&c, &err) == 0 && c.resp.type &&
        strcmp(c.resp.type, "application/json") == 0) {
      json_error_t je;
      json_t *j = json_loadb(c.resp.body.data, c.resp.body.len, 0, &je);
      FUZZ_CHECK(j != NULL, "the JSON answer does not parse: %s", je.text);
      json_decref(j);
    }
  }
  if (err.http)
    fuzz_check_error(&err);
  fuzz_call_free(&c);
  return 0;
}
