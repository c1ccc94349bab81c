/* test-config.c: the config resolver (srv_model_resolve) family by family
 * against the published meaning of each key, its errors and their
 * pointers, the key table's shape, the presets' parse, and the Prefer
 * header parser.  The numbers expected here are written from the model
 * configs' own fields, not taken from the code. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/config.h"
#include "srv.h"
#include "test.h"

/* Resolve config text (layer) into m; err receives any failure. */
static int resolve_text(const char *text, int64_t layer, struct srv_model *m,
                        struct srv_err *err)
{
  json_error_t je;
  json_t *cfg = json_loads(text, 0, &je);
  int rc;

  if (!cfg) {
    fprintf(stderr, "  bad test JSON: %s\n", je.text);
    memset(m, 0, sizeof *m);
    return -2;
  }
  memset(err, 0, sizeof *err);
  rc = srv_model_resolve(cfg, NULL, layer, m, err);
  json_decref(cfg);
  return rc;
}

/* The canonical value at "/a" or "/a/b" of m->params (NULL if none). */
static const json_t *P(const struct srv_model *m, const char *ptr)
{
  const char *slash = strchr(ptr + 1, '/');
  char head[32];

  if (!slash)
    return json_object_get(m->params, ptr + 1);
  snprintf(head, sizeof head, "%.*s", (int)(slash - ptr - 1), ptr + 1);
  return json_object_get(json_object_get(m->params, head), slash + 1);
}

static double num(const struct srv_model *m, const char *ptr)
{
  const json_t *v = P(m, ptr);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

/* 1 when the comma list of sources at ptr contains key. */
static int sourced(const struct srv_model *m, const char *ptr, const char *key)
{
  const char *s = json_string_value(json_object_get(m->sources, ptr));
  size_t n = strlen(key);

  while (s && *s) {
    if (strncmp(s, key, n) == 0 && (s[n] == ',' || s[n] == '\0'))
      return 1;
    s = strchr(s, ',');
    s = s ? s + 1 : NULL;
  }
  return 0;
}

TEST(config_llama31_rope_fields)
{
  struct srv_model m;
  struct srv_err err;

  CHECK(resolve_text("{\"model_type\": \"llama\", \"hidden_size\": 4096, "
                     "\"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
                     "\"rope_theta\": 500000.0, \"max_position_embeddings\": "
                     "131072, \"num_hidden_layers\": 32, \"rope_scaling\": "
                     "{\"factor\": 8.0, \"rope_type\": \"llama3\", "
                     "\"original_max_position_embeddings\": 8192}}",
                     0, &m, &err) == 0);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/head_dim")), 128);
  CHECK(num(&m, "/rope/rope_theta") == 500000.0);
  CHECK(json_is_false(P(&m, "/rope/interleaved")));
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/max_position_embeddings")),
               131072);
  CHECK_STR(json_string_value(
                json_object_get(P(&m, "/rope/rope_scaling"), "rope_type")),
            "llama3");
  CHECK(json_is_true(P(&m, "/causal")));
  CHECK(!P(&m, "/sliding_window") && !P(&m, "/softcap") && !P(&m, "/scale"));
  CHECK(sourced(&m, "/rope/head_dim", "hidden_size") &&
        sourced(&m, "/rope/head_dim", "num_attention_heads"));
  CHECK_STR(m.layer_type, "full_attention");
  CHECK(m.pos == SRV_POS_ROPE);
  srv_model_free(&m);
  return 0;
}

TEST(config_windows_by_family)
{
  struct srv_model m;
  struct srv_err err;
  /* Qwen2: use_sliding_window false turns the window off ... */
  CHECK(resolve_text("{\"model_type\": \"qwen2\", \"sliding_window\": 131072,"
                     " \"use_sliding_window\": false, \"num_hidden_layers\": "
                     "28, \"max_window_layers\": 28}",
                     3, &m, &err) == 0);
  CHECK(!P(&m, "/sliding_window"));
  CHECK(sourced(&m, "/window", "use_sliding_window"));
  srv_model_free(&m);
  /* ... and on, it slides from max_window_layers on. */
  CHECK(resolve_text("{\"model_type\": \"qwen2\", \"sliding_window\": 4096,"
                     " \"use_sliding_window\": true, \"num_hidden_layers\": "
                     "28, \"max_window_layers\": 20}",
                     19, &m, &err) == 0);
  CHECK(!P(&m, "/sliding_window"));
  srv_model_free(&m);
  CHECK(resolve_text("{\"model_type\": \"qwen2\", \"sliding_window\": 4096,"
                     " \"use_sliding_window\": true, \"num_hidden_layers\": "
                     "28, \"max_window_layers\": 20}",
                     20, &m, &err) == 0);
  CHECK_EQ_I64(json_integer_value(P(&m, "/sliding_window")), 4096);
  CHECK_STR(m.layer_type, "sliding_attention");
  srv_model_free(&m);
  /* Mistral: every layer; Mixtral's null: none. */
  CHECK(resolve_text("{\"model_type\": \"mistral\", \"sliding_window\": "
                     "4096}", 7, &m, &err) == 0);
  CHECK_EQ_I64(json_integer_value(P(&m, "/sliding_window")), 4096);
  srv_model_free(&m);
  CHECK(resolve_text("{\"model_type\": \"mixtral\", \"sliding_window\": "
                     "null}", 0, &m, &err) == 0);
  CHECK(!P(&m, "/sliding_window"));
  srv_model_free(&m);
  /* Mistral without the key: MistralConfig's default, 4096, by model_type */
  CHECK(resolve_text("{\"model_type\": \"mistral\"}", 0, &m, &err) == 0);
  CHECK_EQ_I64(json_integer_value(P(&m, "/sliding_window")), 4096);
  CHECK(sourced(&m, "/sliding_window", "model_type"));
  srv_model_free(&m);
  return 0;
}

TEST(config_gemma_layers)
{
  struct srv_model m;
  struct srv_err err;
  static const char g2[] =
      "{\"model_type\": \"gemma2\", \"head_dim\": 128, \"hidden_size\": "
      "4608, \"num_attention_heads\": 32, \"query_pre_attn_scalar\": 144, "
      "\"attn_logit_softcapping\": 50.0, \"sliding_window\": 4096, "
      "\"num_hidden_layers\": 46}";
  static const char g3[] =
      "{\"model_type\": \"gemma3\", \"text_config\": {\"model_type\": "
      "\"gemma3_text\", \"num_hidden_layers\": 34, \"sliding_window\": 1024, "
      "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}}}";

  /* Gemma 2: even layers slide; head_dim wins over hidden/heads (144);
   * the scale is query_pre_attn_scalar^-0.5, not head_dim's. */
  CHECK(resolve_text(g2, 0, &m, &err) == 0);
  CHECK_EQ_I64(json_integer_value(P(&m, "/sliding_window")), 4096);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/head_dim")), 128);
  CHECK(near(num(&m, "/scale"), 1.0 / 12.0));
  CHECK(num(&m, "/softcap") == 50.0);
  srv_model_free(&m);
  CHECK(resolve_text(g2, 1, &m, &err) == 0);
  CHECK(!P(&m, "/sliding_window"));
  CHECK_STR(m.layer_type, "full_attention");
  srv_model_free(&m);
  /* Gemma 3 through text_config: layer 0 local (base 10000, unscaled,
   * window 1024), layer 5 global (1e6, linear 8); head_dim 256, 8 heads by
   * Gemma3TextConfig's defaults; QK-norm upstream. */
  CHECK(resolve_text(g3, 0, &m, &err) == 0);
  CHECK(num(&m, "/rope/rope_theta") == 10000.0);
  CHECK(!P(&m, "/rope/rope_scaling"));
  CHECK_EQ_I64(json_integer_value(P(&m, "/sliding_window")), 1024);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/head_dim")), 256);
  CHECK(near(num(&m, "/scale"), 1.0 / 16.0));
  CHECK_EQ_I64(json_array_size(m.upstream), 2);
  srv_model_free(&m);
  CHECK(resolve_text(g3, 5, &m, &err) == 0);
  CHECK(num(&m, "/rope/rope_theta") == 1000000.0);
  CHECK(json_number_value(json_object_get(P(&m, "/rope/rope_scaling"),
                                          "factor")) == 8.0);
  CHECK(!P(&m, "/sliding_window"));
  srv_model_free(&m);
  /* layer 34 does not exist */
  CHECK(resolve_text(g3, 34, &m, &err) == -1);
  CHECK_STR(err.field, "/layer");
  srv_model_free(&m);
  /* an error inside text_config names it */
  CHECK(resolve_text("{\"model_type\": \"gemma3\", \"text_config\": "
                     "{\"sliding_window\": -3}}",
                     0, &m, &err) == -1);
  CHECK_STR(err.field, "/config/text_config/sliding_window");
  srv_model_free(&m);
  return 0;
}

TEST(config_modernbert_local_global)
{
  struct srv_model m;
  struct srv_err err;
  static const char mb[] =
      "{\"model_type\": \"modernbert\", \"hidden_size\": 768, "
      "\"num_attention_heads\": 12, \"num_hidden_layers\": 22, "
      "\"global_attn_every_n_layers\": 3, \"global_rope_theta\": 160000.0, "
      "\"local_rope_theta\": 10000.0, \"local_attention\": 128}";

  CHECK(resolve_text(mb, 3, &m, &err) == 0); /* global */
  CHECK(num(&m, "/rope/rope_theta") == 160000.0);
  CHECK(!P(&m, "/window") && !P(&m, "/sliding_window"));
  CHECK(json_is_false(P(&m, "/causal")));
  srv_model_free(&m);
  CHECK(resolve_text(mb, 4, &m, &err) == 0); /* local: 64 keys each side */
  CHECK(num(&m, "/rope/rope_theta") == 10000.0);
  CHECK_EQ_I64(json_integer_value(json_array_get(P(&m, "/window"), 0)), 64);
  CHECK_EQ_I64(json_integer_value(json_array_get(P(&m, "/window"), 1)), 64);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/head_dim")), 64);
  srv_model_free(&m);
  return 0;
}

TEST(config_deepseek_scale_and_pairing)
{
  struct srv_model m;
  struct srv_err err;
  double mscale = 0.1 * 0.707 * log(40.0) + 1.0;

  CHECK(resolve_text(
            "{\"model_type\": \"deepseek_v2\", \"qk_nope_head_dim\": 128, "
            "\"qk_rope_head_dim\": 64, \"q_lora_rank\": null, "
            "\"kv_lora_rank\": 512, \"rope_scaling\": {\"type\": \"yarn\", "
            "\"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707, "
            "\"original_max_position_embeddings\": 4096}}",
            0, &m, &err) == 0);
  CHECK(near(num(&m, "/scale"), mscale * mscale / sqrt(192.0)));
  /* A head is [128 channels without RoPE | 64 with it]: the rotated
   * slice is the last 64 of 192. */
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/head_dim")), 192);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/rotary_dim")), 64);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/rotary_offset")), 128);
  CHECK(json_is_true(P(&m, "/rope/interleaved")));
  /* kv_lora_rank is set, q_lora_rank null: one upstream step */
  CHECK_EQ_I64(json_array_size(m.upstream), 1);
  CHECK_STR(json_string_value(json_array_get(m.upstream, 0)), "kv_lora_rank");
  srv_model_free(&m);
  /* V3 with rope_interleave false: rotate-half */
  CHECK(resolve_text("{\"model_type\": \"deepseek_v3\", \"rope_interleave\":"
                     " false}", 0, &m, &err) == 0);
  CHECK(json_is_false(P(&m, "/rope/interleaved")));
  CHECK(near(num(&m, "/scale"), 1.0 / sqrt(192.0)));
  srv_model_free(&m);
  return 0;
}

TEST(config_gptj_neox_t5_alibi)
{
  struct srv_model m;
  struct srv_err err;

  CHECK(resolve_text("{\"model_type\": \"gptj\", \"n_embd\": 4096, "
                     "\"n_head\": 16, \"rotary_dim\": 64, \"n_positions\": "
                     "2048}", 0, &m, &err) == 0);
  CHECK(json_is_true(P(&m, "/rope/interleaved")));
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/rotary_dim")), 64);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/head_dim")), 256);
  CHECK_EQ_I64(json_integer_value(P(&m, "/rope/max_position_embeddings")),
               2048);
  srv_model_free(&m);
  CHECK(resolve_text("{\"model_type\": \"gpt_neox\", \"hidden_size\": 768, "
                     "\"num_attention_heads\": 12, \"rotary_pct\": 0.25, "
                     "\"rotary_emb_base\": 10000}", 0, &m, &err) == 0);
  CHECK(json_is_false(P(&m, "/rope/interleaved")));
  CHECK(num(&m, "/rope/partial_rotary_factor") == 0.25);
  CHECK(num(&m, "/rope/rope_theta") == 10000.0);
  srv_model_free(&m);
  /* T5: the decoder is causal with one-directional buckets, unscaled */
  CHECK(resolve_text("{\"model_type\": \"t5\", \"num_heads\": 8, "
                     "\"is_decoder\": true}", 0, &m, &err) == 0);
  CHECK(json_is_true(P(&m, "/causal")));
  CHECK(json_is_false(P(&m, "/bias/bidirectional")));
  CHECK(num(&m, "/scale") == 1.0);
  CHECK_EQ_I64(json_integer_value(
                   P(&m, "/bias/relative_attention_max_distance")), 128);
  CHECK(!P(&m, "/rope"));
  srv_model_free(&m);
  /* MPT: alibi_bias_max is ALiBi's max_bias */
  CHECK(resolve_text("{\"model_type\": \"mpt\", \"n_heads\": 32, "
                     "\"attn_config\": {\"alibi\": true, \"alibi_bias_max\": "
                     "4, \"qk_ln\": true}}", 0, &m, &err) == 0);
  CHECK_STR(json_string_value(P(&m, "/bias/method")), "alibi");
  CHECK(num(&m, "/bias/max_bias") == 4.0);
  CHECK_STR(json_string_value(json_array_get(m.upstream, 0)),
            "attn_config.qk_ln");
  srv_model_free(&m);
  return 0;
}

TEST(config_refusals_and_unknown_keys)
{
  struct srv_model m;
  struct srv_err err;

  CHECK(resolve_text("{\"model_type\": \"falcon\", \"alibi\": true}", 0, &m,
                     &err) == -1);
  CHECK_EQ_I64(err.http, 400);
  CHECK_STR(err.field, "/config/alibi");
  srv_model_free(&m);
  CHECK(resolve_text("{\"model_type\": \"mpt\", \"attn_config\": "
                     "{\"prefix_lm\": true}}", 0, &m, &err) == -1);
  CHECK_STR(err.field, "/config/attn_config/prefix_lm");
  srv_model_free(&m);
  CHECK(resolve_text("{\"model_type\": \"no_such_model\"}", 0, &m, &err) ==
        -1);
  CHECK_STR(err.field, "/config/model_type");
  srv_model_free(&m);
  CHECK(resolve_text("{\"model_type\": \"llama\", \"layer_types\": "
                     "[\"full_attention\", \"chunked_attention\"]}",
                     1, &m, &err) == -1);
  CHECK_STR(err.field, "/config/layer_types/1");
  srv_model_free(&m);
  CHECK(resolve_text("{\"rope_theta\": \"big\"}", 0, &m, &err) == -1);
  CHECK_STR(err.field, "/config/rope_theta");
  srv_model_free(&m);
  /* Unknown keys are listed, not refused. */
  CHECK(resolve_text("{\"model_type\": \"llama\", \"my_flag\": 1, "
                     "\"vocab_size\": 32000}", 0, &m, &err) == 0);
  CHECK_EQ_I64(json_array_size(m.ignored), 1);
  CHECK_STR(json_string_value(json_array_get(m.ignored, 0)),
            "/config/my_flag");
  srv_model_free(&m);
  /* Not an object; layer below 0 */
  CHECK(resolve_text("[1, 2]", 0, &m, &err) == -1);
  srv_model_free(&m);
  CHECK(resolve_text("{}", -1, &m, &err) == -1);
  srv_model_free(&m);
  return 0;
}

TEST(config_rope_parameters_per_layer_type)
{
  struct srv_model m;
  struct srv_err err;
  static const char c[] =
      "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 6, "
      "\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", "
      "\"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
      "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}}}";

  CHECK(resolve_text(c, 5, &m, &err) == 0);
  CHECK(num(&m, "/rope/rope_theta") == 1000000.0);
  CHECK(json_number_value(json_object_get(P(&m, "/rope/rope_scaling"),
                                          "factor")) == 8.0);
  srv_model_free(&m);
  CHECK(resolve_text(c, 4, &m, &err) == 0);
  CHECK(num(&m, "/rope/rope_theta") == 10000.0);
  CHECK(!P(&m, "/rope/rope_scaling"));
  srv_model_free(&m);
  return 0;
}

/* Odd values in every key the resolver reads: errors or results, never a
 * crash (a few of what a fuzzer would send). */
TEST(config_odd_values_do_not_crash)
{
  static const char *const vals[] = {"null", "true", "-1", "0", "1e308",
                                     "\"x\"", "[]", "{}", "[1, \"a\"]",
                                     "2.5"};
  int k, v;

  for (k = 0; k < srv_nckeys; k++)
    for (v = 0; v < (int)(sizeof vals / sizeof vals[0]); v++) {
      struct srv_model m;
      struct srv_err err;
      char text[512];
      const char *key = srv_ckeys[k].key, *dot = strchr(key, '.');
      if (dot)
        snprintf(text, sizeof text,
                 "{\"model_type\": \"mpt\", \"%.*s\": {\"%s\": %s}}",
                 (int)(dot - key), key, dot + 1, vals[v]);
      else
        snprintf(text, sizeof text, "{\"model_type\": \"gemma3\", \"%s\": %s}",
                 key, vals[v]);
      resolve_text(text, 1, &m, &err);
      srv_model_free(&m);
    }
  return 0;
}

/* A config with none of max_position_embeddings, n_positions, max_seq_len
 * (and no family to default them) gives no max_position_embeddings at all
 * -- it once gave whatever the stack held (found by fuzz-model, whose two
 * resolutions of one config disagreed).  The stack is dirtied first so the
 * test does not pass by luck. */
static void dirty_stack(void)
{
  volatile unsigned char junk[4096];
  size_t i;

  for (i = 0; i < sizeof junk; i++)
    junk[i] = 0x5a;
}

TEST(config_absent_max_positions_stay_absent)
{
  static const char *const texts[] = {
      "{\"rope_theta\": 10000.0, \"head_dim\": 64}",
      "{\"text_config\": {\"rope_scaling\": null, \"head_dim\": 32}}",
  };
  int i;

  for (i = 0; i < 2; i++) {
    struct srv_model m;
    struct srv_err err;

    dirty_stack();
    CHECK_EQ_I64(resolve_text(texts[i], 0, &m, &err), 0);
    if (P(&m, "/rope/max_position_embeddings"))
      FAIL_AT("%s: max_position_embeddings %g", texts[i],
              num(&m, "/rope/max_position_embeddings"));
    srv_model_free(&m);
  }
  return 0;
}

/* A T5 config whose bucket count is null leaves the count out (the route's
 * own default applies).  The resolver used to put whatever its stack held
 * there; whether that shows here depends on the stack, so the regression
 * check for the uninitialised read is the model corpus
 * (34cad11f...: the same config resolved twice gave two answers), which
 * make asan replays under the sanitizers. */
TEST(config_t5_null_buckets_stay_absent)
{
  static const char text[] =
      "{\"model_type\": \"t5\", \"relative_attention_num_buckets\": null}";
  struct srv_model m;
  struct srv_err err;

  dirty_stack();
  CHECK_EQ_I64(resolve_text(text, 0, &m, &err), 0);
  CHECK_STR(json_string_value(P(&m, "/bias/method")), "t5");
  if (P(&m, "/bias/relative_attention_num_buckets"))
    FAIL_AT("relative_attention_num_buckets %g",
            num(&m, "/bias/relative_attention_num_buckets"));
  srv_model_free(&m);
  return 0;
}

TEST(config_key_table_and_presets)
{
  int i, j;

  for (i = 0; i < srv_nckeys; i++) {
    CHECK(srv_ckeys[i].desc && srv_ckeys[i].desc[0]);
    for (j = i + 1; j < srv_nckeys; j++)
      if (strcmp(srv_ckeys[i].key, srv_ckeys[j].key) == 0)
        FAIL_AT("key %s listed twice", srv_ckeys[i].key);
  }
  for (i = 0; i < srv_nfamilies; i++)
    CHECK(json_is_object(srv_family_defaults(&srv_families[i])));
  CHECK(srv_preset_count() >= 20);
  /* every preset resolves cleanly, with nothing unknown */
  for (i = 0; i < srv_preset_count(); i++) {
    struct srv_model m;
    struct srv_err err;
    const json_t *p = srv_preset_at(i);
    int rc = srv_model_resolve(json_object_get(p, "config"), NULL, 0, &m, &err);
    if (rc != 0 || json_array_size(m.ignored) != 0)
      FAIL_AT("preset %s: rc %d, %s, %zu unknown keys",
              json_string_value(json_object_get(p, "name")), rc, err.detail,
              json_array_size(m.ignored));
    CHECK(srv_family_find(json_string_value(json_object_get(p, "family"))) ==
          m.family);
    srv_model_free(&m);
  }
  return 0;
}

TEST(prefer_handling_strict)
{
  CHECK(srv_prefer_strict("handling=strict"));
  CHECK(srv_prefer_strict("HANDLING=Strict"));
  CHECK(srv_prefer_strict("respond-async, wait=10, handling=strict"));
  CHECK(srv_prefer_strict("handling = \"strict\""));
  CHECK(srv_prefer_strict("foo; bar=\"a,b\", handling=strict; x=1"));
  CHECK(!srv_prefer_strict("handling=lenient"));
  CHECK(!srv_prefer_strict("handling=lenient, handling=strict")); /* first */
  CHECK(!srv_prefer_strict("handlingx=strict"));
  CHECK(!srv_prefer_strict("return=minimal"));
  CHECK(!srv_prefer_strict(""));
  CHECK(!srv_prefer_strict("handling"));
  CHECK(!srv_prefer_strict("\"handling=strict\""));
  return 0;
}
