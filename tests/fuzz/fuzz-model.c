/* fuzz-model.c: a model's config.json through the resolver
 * (srv_model_resolve, handlers/config.c) -- any JSON object, for any layer.
 *
 * Input: byte 0 chooses the layer: below 0xf0 the layer itself, from 0xf0
 * on one of g_far_layers (what "layer" may be in a request: any integer
 * from 0 up); the rest is the config's JSON text (inputs that are not a
 * JSON object are skipped: the request step only ever passes objects).
 * The corpus starts from the presets' configs (the "config" of each file
 * of models/) and other configs in the shapes Hugging Face publishes.
 * Properties: a refusal is a 400 with a readable problem+json naming a
 * field (fuzz_check_error); an answer is well formed -- params an object
 * whose members are the route-neutral names, sources and where objects of
 * strings keyed by JSON pointers / config keys, upstream and ignored
 * arrays of strings, the layer the one asked for and of a known type --
 * and the same config resolved again gives the same answer. */
#include "fuzz.h"

#include <stdint.h>
#include <string.h>

#include "handlers/config.h"

static const int64_t g_far_layers[16] = {
    255,       256,           1000,           4095,
    65535,     (int64_t)1 << 31, ((int64_t)1 << 31) - 1, (int64_t)1 << 53,
    ((int64_t)1 << 53) + 1, (int64_t)1 << 62, INT64_MAX - 1, INT64_MAX,
    INT64_MAX / 2, 999999999999, 47, 61};

/* The members srv_model's params may have (config.h). */
static int known_param(const char *k)
{
  static const char *const names[] = {"rope",   "bias",           "causal",
                                      "window", "sliding_window", "softcap",
                                      "scale",  "num_heads",      NULL};
  int i;

  for (i = 0; names[i]; i++)
    if (strcmp(names[i], k) == 0)
      return 1;
  return 0;
}

static void check_strings(const json_t *o, const char *what, int pointers)
{
  const char *k;
  json_t *v;

  FUZZ_CHECK(json_is_object(o), "%s is not an object", what);
  json_object_foreach((json_t *)o, k, v) {
    FUZZ_CHECK(json_is_string(v), "%s[%s] is not a string", what, k);
    FUZZ_CHECK(!pointers || k[0] == '/', "%s key %s is not a JSON pointer",
               what, k);
  }
}

static void check_list(const json_t *a, const char *what)
{
  size_t i;

  FUZZ_CHECK(json_is_array(a), "%s is not an array", what);
  for (i = 0; i < json_array_size(a); i++)
    FUZZ_CHECK(json_is_string(json_array_get(a, i)), "%s[%zu] is not a "
               "string", what, i);
}

static void check_model(const struct srv_model *m, int64_t layer)
{
  const char *k;
  json_t *v;

  FUZZ_CHECK(json_is_object(m->params), "params is not an object");
  json_object_foreach(m->params, k, v)
    FUZZ_CHECK(known_param(k), "params has a member %s", k);
  check_strings(m->sources, "sources", 1);
  check_strings(m->where, "where", 0);
  check_list(m->upstream, "upstream");
  check_list(m->ignored, "ignored");
  FUZZ_CHECK(m->layer == layer, "layer %lld resolved as %lld",
             (long long)layer, (long long)m->layer);
  FUZZ_CHECK(m->layer_type && (strcmp(m->layer_type, "full_attention") == 0 ||
                               strcmp(m->layer_type, "sliding_attention") == 0),
             "layer type %s", m->layer_type ? m->layer_type : "(none)");
  FUZZ_CHECK(m->num_layers <= 0 || m->layer < m->num_layers,
             "layer %lld of %lld accepted", (long long)m->layer,
             (long long)m->num_layers);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct srv_model m[2];
  struct srv_err err[2];
  json_error_t je;
  json_t *config;
  int64_t layer;
  int r[2], k;

  if (size < 1)
    return 0;
  layer = data[0] < 0xf0 ? data[0] : g_far_layers[data[0] - 0xf0];
  config = json_loadb((const char *)data + 1, size - 1,
                      JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(config)) {
    json_decref(config);
    return 0;
  }
  for (k = 0; k < 2; k++) {
    memset(&m[k], 0, sizeof m[k]);
    memset(&err[k], 0, sizeof err[k]);
    r[k] = srv_model_resolve(config, NULL, layer, &m[k], &err[k]);
  }
  if (r[0] == 0) {
    check_model(&m[0], layer);
    FUZZ_CHECK(r[1] == 0 && json_equal(m[0].params, m[1].params) &&
                   json_equal(m[0].sources, m[1].sources),
               "resolved twice, two answers");
  } else {
    FUZZ_CHECK(r[0] == -1 && err[0].http == 400, "%d: %d %s", r[0],
               err[0].http, err[0].detail);
    fuzz_check_error(&err[0]);
    FUZZ_CHECK(r[1] == -1 && strcmp(err[0].detail, err[1].detail) == 0,
               "refused twice, two errors: %s | %s", err[0].detail,
               err[1].detail);
  }
  for (k = 0; k < 2; k++)
    srv_model_free(&m[k]);
  json_decref(config);
  return 0;
}
