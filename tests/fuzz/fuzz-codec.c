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
 *   bit  6    also draw the first 2-D tensor as a PNG heatmap (a 3-D
 *             one as a grid of its heads)
 *   bit  7    answer in float64 (a float64 tensor of the body is written
 *             back as it came: every bit pattern reaches the formatter)
 * Built by `make fuzz` with clang -fsanitize=fuzzer; standalone.c replays
 * tests/fuzz/corpus/ with any compiler (make fuzz-replay, make test). */
#include "srv.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
#define PNG_MAX_NUMEL 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct srv_call c;
  struct srv_err err;
  struct srv_buf prob;
  uint8_t mode = size ? data[0] : 0;
  int i, drew = 0;

  memset(&c, 0, sizeof c);
  memset(&err, 0, sizeof err);
  srv_arena_init(&c.arena, ARENA_CAP);
  srv_buf_init(&c.resp_body, OUT_MAX);
  srv_buf_init(&c.custom, OUT_MAX);
  srv_buf_init(&c.ignored.list, 4096);
  c.route = (mode & 0x20) ? &g_route_png : &g_route;
  c.out_dtype = (mode & 0x80) ? AB_DTYPE_F64 : AB_DTYPE_F32;
  c.content_type = g_ctypes[mode & 3];
  c.accept = g_accepts[(mode >> 2) & 7];
  c.body = size > 1 ? (const char *)data + 1 : NULL;
  c.body_len = size > 1 ? size - 1 : 0;

  if (srv_codec_decode_request(&c, &err) == 0) {
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
      if ((mode & 0x40) && !drew && (t.ndim == 2 || t.ndim == 3) &&
          n <= PNG_MAX_NUMEL) {
        /* A 2-D tensor as one table, a 3-D one as a grid of its heads. */
        const float *planes[SRV_HEATMAP_MAX_PANELS];
        int64_t labels[SRV_HEATMAP_MAX_PANELS], k;
        struct srv_heatmap hm = {planes, labels, 1, 0, 0, 0, g_paths[i],
                                 mode & 1};
        hm.rows = t.shape[t.ndim - 2];
        hm.cols = t.shape[t.ndim - 1];
        hm.n = t.ndim == 3 ? (int)(t.shape[0] < SRV_HEATMAP_MAX_PANELS
                                        ? t.shape[0]
                                        : SRV_HEATMAP_MAX_PANELS)
                           : 1;
        hm.labels = t.ndim == 3 ? labels : NULL;
        hm.row0 = (int64_t)data[size - 1] - 128;
        for (k = 0; k < hm.n; k++) {
          planes[k] = f + k * hm.rows * hm.cols;
          labels[k] = k;
        }
        drew = 1;
        if (srv_codec_png_heatmap(&hm, &c.custom, &err) == 0)
          c.custom_type = "image/png";
      }
      if (c.noutputs < SRV_MAX_OUTPUTS) {
        struct srv_output *o = &c.outputs[c.noutputs++];
        o->name = g_paths[i];
        if ((mode & 0x80) && t.dtype == AB_DTYPE_F64)
          o->t = t;
        else
          ab_tensor_init(&o->t, f, AB_DTYPE_F32, t.ndim, t.shape);
      }
    }
    if (c.noutputs < SRV_MAX_OUTPUTS) {
      struct srv_output *o = &c.outputs[c.noutputs++];
      o->name = "scalar";
      o->is_scalar = 1;
      o->scalar = c.body_len ? (double)c.body[0] / 7.0 : -INFINITY;
    }
    srv_codec_encode(&c, &err);
  }
  /* Every error must render as problem+json. */
  srv_buf_init(&prob, 0);
  if (err.http)
    srv_codec_problem(&err, &prob);
  srv_buf_free(&prob);

  json_decref(c.params);
  srv_buf_free(&c.resp_body);
  srv_buf_free(&c.custom);
  srv_buf_free(&c.ignored.list);
  srv_arena_free(&c.arena);
  return 0;
}
