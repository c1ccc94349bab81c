/* fuzz-v2.c: libFuzzer target over the Open Inference Protocol codec
 * (server/codec/v2.c) -- Inference-Header-Content-Length, the JSON request,
 * binary inputs and their sizes, INT32 inputs turned into JSON, structured
 * parameters given as JSON text -- and then the answer: the float inputs
 * found are given back as outputs of the same names (and a scalar, an
 * INT32 output and a JSON value, as the analysis planner's "configs"),
 * encoded as the request's "outputs" and binary flags ask.
 *
 * Input: byte 0 chooses the headers and the model, bytes 1-2 the header
 * length (little-endian), the rest is the body.
 *   bits 0-1  Content-Type: absent, application/octet-stream,
 *             application/json, text/plain (a 415)
 *   bit  2    send Inference-Header-Content-Length (bytes 1-2, in decimal)
 *   bit  3    ... as a malformed value instead ("12x", "-1", huge)
 *   bits 4-5  the model: encodings, rope, bias, attention
 * `make fuzz TARGET=v2` runs it; make test replays tests/fuzz/corpus/v2/
 * (tests/fuzz/replay.sh), as for every target. */
#include "fuzz.h"
#include "srv.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_ctypes[4] = {NULL, "application/octet-stream",
                                        "application/json", "text/plain"};
static const char *const g_models[4] = {"encodings", "rope", "bias",
                                        "attention"};
static const char *const g_bad_lengths[4] = {"12x", "-1",
                                             "99999999999999999999999", ""};

#define ARENA_CAP ((size_t)64 << 20)
#define OUT_MAX ((size_t)16 << 20)

/* A float input of the decoded call as an output of the same name. */
static void echo_input(struct srv_call *c, const struct srv_named_tensor *nt)
{
  int64_t n = ab_tensor_numel(&nt->t);
  struct srv_output *o;
  float *f;

  if (c->plan.noutputs >= SRV_MAX_OUTPUTS - 3 || n < 1 ||
      (uint64_t)n > ARENA_CAP / 4 / sizeof(float))
    return;
  f = srv_arena_alloc(&c->arena, (size_t)n * sizeof *f);
  if (!f || ab_tensor_to_f32(&nt->t, f) != AB_STATUS_OK)
    return;
  o = &c->plan.outputs[c->plan.noutputs++];
  o->name = nt->name;
  ab_tensor_init(&o->t, f, AB_DTYPE_F32, nt->t.ndim, nt->t.shape);
}

static int fuzz_v2_one(const uint8_t *data, size_t size)
{
  static int32_t ints[6] = {0, -1, 7, INT32_MAX, INT32_MIN, 3};
  struct srv_call c;
  struct srv_err err;
  struct srv_buf prob;
  uint8_t mode = size ? data[0] : 0;
  char path[64], hlen[32];
  int i;

  memset(&c, 0, sizeof c);
  memset(&err, 0, sizeof err);
  srv_arena_init(&c.arena, ARENA_CAP);
  srv_buf_init(&c.resp.body, OUT_MAX);
  srv_buf_init(&c.plan.custom, OUT_MAX);
  srv_buf_init(&c.in.ignored, 4096);
  c.in.out_dtype = AB_DTYPE_F32;
  snprintf(path, sizeof path, "/v2/models/%s/infer", g_models[(mode >> 4) & 3]);
  c.req.route = srv_route_find("POST", path, &err);
  c.req.content_type = g_ctypes[mode & 3];
  if (mode & 8) {
    c.req.infer_header = g_bad_lengths[size > 1 ? data[1] & 3 : 0];
  } else if (mode & 4) {
    snprintf(hlen, sizeof hlen, "%u",
             size > 2 ? (unsigned)data[1] | (unsigned)data[2] << 8 : 0u);
    c.req.infer_header = hlen;
  }
  c.req.body = size > 3 ? (const char *)data + 3 : NULL;
  c.req.body_len = size > 3 ? size - 3 : 0;

  if (c.req.route && srv_codec_decode_request(&c, &err) == 0) {
    for (i = 0; i < c.in.nbin; i++)
      echo_input(&c, &c.in.bin[i]);
    c.plan.outputs[c.plan.noutputs].name = "attention_scaling";
    c.plan.outputs[c.plan.noutputs].is_scalar = 1;
    c.plan.outputs[c.plan.noutputs++].scalar =
        c.req.body_len ? -1.0 / c.req.body[0] : NAN;
    c.plan.outputs[c.plan.noutputs].name = "buckets";
    ab_tensor_init(&c.plan.outputs[c.plan.noutputs++].t, ints, AB_DTYPE_I32, 2,
                   (int64_t[]){2, 3});
    c.plan.outputs[c.plan.noutputs].name = "configs";
    c.plan.outputs[c.plan.noutputs].is_scalar = 1;
    c.plan.outputs[c.plan.noutputs++].json = "{\"linear\":{\"factor\":2.0}}";
    srv_codec_encode(&c, &err);
  }
  srv_buf_init(&prob, 0);
  if (err.http)
    srv_codec_problem(&err, &prob);
  srv_buf_free(&prob);

  json_decref(c.in.params);
  srv_buf_free(&c.resp.body);
  srv_buf_free(&c.plan.custom);
  srv_buf_free(&c.in.ignored);
  srv_arena_free(&c.arena);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  return fuzz_v2_one(data, size);
}
