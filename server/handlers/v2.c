/* v2.c: the Open Inference Protocol's metadata routes (KServe's "v2" REST
 * protocol, as Triton speaks it) -- GET /v2, the model metadata and the
 * model readiness.  Each /v1 computing route is a model of the same name;
 * its infer route is the /v1 handler itself, fed by codec/v2.c, and the
 * health routes are /healthz and /readyz under other paths (routes.def).
 *
 * The metadata lists the tensors a model takes and gives.  Other inputs of
 * the /v1 request are `parameters` of the v2 request; a dimension the
 * request decides is -1, as the protocol says.  tests/http/test_v2.py
 * checks every output here against what the infer route answers. */
#include "params.h"

#include <string.h>

/* One tensor of a model's metadata. */
struct v2_tensor {
  const char *name, *datatype;
  int rank; /* every dimension variable (-1) */
};

/* A model: its tensors, each list ended by a NULL name. */
struct v2_model {
  const char *name;
  const struct v2_tensor *inputs, *outputs;
};

/* The tensors of each model: names as in the /v1 request and answer.
 * Float outputs are FP32 unless the request's output_dtype says otherwise;
 * a scalar (attention_scaling) is an FP64 tensor of shape [1]. */
static const struct v2_tensor g_encodings_in[] = {
    {"positions", "INT32", 1}, {"x", "FP32", 2}, {"table", "FP32", 2}, {0}};
static const struct v2_tensor g_encodings_out[] = {
    {"encoding", "FP32", 2}, {"x", "FP32", 2}, {0}};
static const struct v2_tensor g_rope_in[] = {
    {"positions", "INT32", 1}, {"q", "FP32", 4}, {"k", "FP32", 4}, {0}};
static const struct v2_tensor g_rope_out[] = {
    {"inv_freq", "FP32", 1}, {"cos", "FP32", 2},
    {"sin", "FP32", 2},      {"attention_scaling", "FP64", 1},
    {"q", "FP32", 4},        {"k", "FP32", 4},
    {0}};
/* The bias families' tensors: /v1/bias and /v1/analysis's kind bias. */
static const struct v2_tensor g_bias_in[] = {{"slopes", "FP64", 1},
                                             {"table", "FP32", 2},
                                             {"r1", "FP64", 1},
                                             {"r2", "FP64", 1},
                                             {0}};
static const struct v2_tensor g_bias_out[] = {
    {"bias", "FP32", 3}, {"buckets", "INT32", 2}, {0}};
static const struct v2_tensor g_attention_in[] = {
    {"q", "FP32", 4},         {"k", "FP32", 4},       {"v", "FP32", 4},
    {"attn_bias", "FP32", 4}, {"kv_lens", "INT32", 1}, {0}};
static const struct v2_tensor g_attention_out[] = {
    {"output", "FP32", 4}, {"lse", "FP32", 3}, {"weights", "FP32", 4}, {0}};
/* Analysis: the tensors of kinds rope and bias (counts and flags INT32).
 * Kind extend answers some of the same names in another form -- a leading
 * row per method for the per-pair and decay outputs (inv_freq [6, P]),
 * rope_theta a tensor [6] rather than a scalar -- and its settings, which
 * are JSON, go in the answer's parameters (codec/v2.c).  The metadata has
 * one shape per name: the one kinds rope and bias answer. */
static const struct v2_tensor g_analysis_out[] = {
    /* kind rope (and extend) */
    {"trained_len", "FP64", 1},
    {"attention_scaling", "FP64", 1},
    {"rope_theta", "FP64", 1},
    {"factor", "FP64", 1},
    {"rotary_dim", "FP64", 1},
    {"yarn_low", "FP64", 1},
    {"yarn_high", "FP64", 1},
    {"inv_freq_original", "FP32", 1},
    {"wavelength_original", "FP32", 1},
    {"turns_trained", "FP32", 1},
    {"inv_freq", "FP32", 1},
    {"wavelength", "FP32", 1},
    {"scale", "FP32", 1},
    {"ramp", "FP32", 1},
    {"band", "INT32", 1},
    {"turns", "FP32", 1},
    {"seen", "INT32", 1},
    {"decay_distance", "FP32", 1},
    {"decay_bound", "FP32", 1},
    {"decay_mean_cos", "FP32", 1},
    /* kind extend's own */
    {"attention_factor", "FP32", 1},
    /* kind bias */
    {"slopes", "FP32", 1},
    {"saturation_distance", "FP64", 1},
    {"bucket_start", "INT32", 1},
    {"reach_10", "FP32", 1},
    {"reach_100", "FP32", 1},
    {"bias", "FP32", 2},
    {"buckets", "INT32", 1},
    {"bias_after", "FP32", 2},
    {"buckets_after", "INT32", 1},
    {0}};

static const struct v2_model g_models[] = {
    {"encodings", g_encodings_in, g_encodings_out},
    {"rope", g_rope_in, g_rope_out},
    {"bias", g_bias_in, g_bias_out},
    {"attention", g_attention_in, g_attention_out},
    {"analysis", g_bias_in, g_analysis_out},
};

#define NMODELS (sizeof g_models / sizeof g_models[0])

/* The model of the call's route (its path names it). */
static const struct v2_model *route_model(const struct srv_call *c,
                                          struct srv_err *err)
{
  char name[64];
  size_t i;

  if (srv_codec_v2_model(c->req.route->path, name, sizeof name))
    for (i = 0; i < NMODELS; i++)
      if (strcmp(g_models[i].name, name) == 0)
        return &g_models[i];
  srv_fail(err, 404, NULL, "no model for path '%.200s'", c->req.route->path);
  return NULL;
}

static json_t *tensor_list(const struct v2_tensor *t)
{
  json_t *list = json_array();
  size_t i;
  int d;

  for (i = 0; list && t[i].name; i++) {
    json_t *shape = json_array(), *one;

    for (d = 0; shape && d < t[i].rank; d++)
      json_array_append_new(shape, json_integer(-1));
    one = json_pack("{s:s, s:s, s:o}", "name", t[i].name, "datatype",
                    t[i].datatype, "shape", shape);
    if (!one || json_array_append_new(list, one) != 0) {
      json_decref(list);
      return NULL;
    }
  }
  return list;
}

int srv_h_v2_server(struct srv_call *c, struct srv_err *err)
{
  return srv_reply_json(c,
                        json_pack("{s:s, s:s, s:[s]}", "name", SRV_NAME,
                                  "version", AB_VERSION_STRING, "extensions",
                                  "binary_tensor_data"),
                        "the server metadata", err);
}

int srv_h_v2_model(struct srv_call *c, struct srv_err *err)
{
  const struct v2_model *m = route_model(c, err);

  if (!m)
    return -1;
  return srv_reply_json(c,
                        json_pack("{s:s, s:[s], s:s, s:o, s:o}", "name",
                                  m->name, "versions", "1", "platform",
                                  SRV_NAME, "inputs",
                                  tensor_list(m->inputs), "outputs",
                                  tensor_list(m->outputs)),
                        "the model metadata", err);
}

/* Ready as long as the server is: a model is code, never loaded. */
int srv_h_v2_model_ready(struct srv_call *c, struct srv_err *err)
{
  const struct v2_model *m = route_model(c, err);

  if (!m)
    return -1;
  if (srv_probe.draining && srv_probe.draining()) {
    srv_fail(err, 503, NULL, "the server is draining and accepts no work");
    err->retry_after = 1;
    return -1;
  }
  return srv_reply_json(c, json_pack("{s:s, s:b}", "name", m->name, "ready", 1),
                        "the model readiness", err);
}
