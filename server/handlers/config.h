/* config.h: a model's Hugging Face config.json, read into the parameters
 * the routes already take (docs/models.md, docs/internals/config.md).
 *
 * Three layers, each usable on its own:
 *   - the key table and the families (config-keys.c): every config key
 *     attnbias knows, with its class, and the model types it knows, with
 *     Hugging Face's defaults for the keys that matter;
 *   - the resolver (config.c): srv_model_resolve turns one config (a json_t,
 *     nothing else) into route-neutral attnbias parameters, or an error --
 *     the entry point a fuzzer calls;
 *   - the request step (config-apply.c): srv_config_apply, called before a
 *     POST route's handler, fills the request's own fields from "model",
 *     "config", "layer" and Hugging Face names given at the top level, the
 *     explicit fields winning, and records what it used for the answer's
 *     headers.
 * The presets (presets.c) are config files embedded in the binary. */
#ifndef SRV_CONFIG_H
#define SRV_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"

/* ---- the key table ----------------------------------------------------- */

enum srv_ckey_class {
  SRV_CK_HONOURED, /* read and applied */
  SRV_CK_UPSTREAM, /* a step the caller applies before q/k reach attnbias
                      (projections, QK-norm): listed in the answer */
  SRV_CK_REFUSED,  /* changes positions or attention in a way attnbias
                      cannot reproduce: a 400 naming it (for the values in
                      `when`) */
  SRV_CK_INERT     /* no bearing on positions or attention scores
                      (vocabulary, MLP, dropout, token ids, ...) */
};

/* Which values of a key make it upstream (listed) or refused. */
enum srv_ckey_when {
  SRV_CW_NEVER = 0,
  SRV_CW_ANY,    /* any value but null */
  SRV_CW_TRUE,   /* true */
  SRV_CW_FALSE   /* false */
};

struct srv_ckey {
  const char *key;         /* "rope_theta"; nested: "attn_config.alibi" */
  enum srv_ckey_class cls;
  enum srv_ckey_when when; /* UPSTREAM: listed when; also refused when
                              `refuse` is set (any class) */
  enum srv_ckey_when refuse;
  const char *desc;        /* one line, for docs and GET /v1/models */
};

extern const struct srv_ckey srv_ckeys[];
extern const int srv_nckeys;
/* The entry of a key (dotted for nested ones), or NULL. */
const struct srv_ckey *srv_ckey_find(const char *key);
const char *srv_ckey_class_name(enum srv_ckey_class c);
const char *srv_ckey_when_name(enum srv_ckey_when w);

/* ---- families ---------------------------------------------------------- */

enum srv_pos_kind {
  SRV_POS_UNKNOWN = 0, /* no model_type and no position key */
  SRV_POS_ROPE,
  SRV_POS_ALIBI,
  SRV_POS_T5
};

/* How the layers of a family alternate between full and sliding-window
 * attention. */
enum srv_layer_pattern {
  SRV_LP_ALL,        /* sliding_window, when set, on every layer */
  SRV_LP_QWEN2,      /* use_sliding_window and layer >= max_window_layers */
  SRV_LP_GEMMA2,     /* even layers sliding */
  SRV_LP_GEMMA3,     /* (layer + 1) % sliding_window_pattern != 0: sliding */
  SRV_LP_MODERNBERT  /* layer % global_attn_every_n_layers != 0: local */
};

struct srv_family {
  const char *model_type;  /* Hugging Face's model_type */
  const char *aliases;     /* other spellings, comma-separated, or NULL */
  enum srv_pos_kind pos;
  int interleaved;         /* RoPE pairs (2i, 2i+1) */
  int causal;              /* 1 decoder-only, 0 encoder, -1 is_decoder */
  enum srv_layer_pattern pattern;
  const char *defaults;    /* JSON text: the config class's defaults of the
                              keys read here */
  const char *upstream;    /* steps the family always takes before
                              attention ("q_norm,k_norm"), or NULL */
  const char *desc;
};

extern const struct srv_family srv_families[];
extern const int srv_nfamilies;
const struct srv_family *srv_family_find(const char *model_type);
const char *srv_pos_kind_name(enum srv_pos_kind k);
/* The parsed defaults of a family (built once; borrowed). */
const json_t *srv_family_defaults(const struct srv_family *f);

/* ---- the resolver ------------------------------------------------------ */

/* What a config says, in attnbias's own names, route-neutral:
 *   params  {"rope": {head_dim, rope_theta, partial_rotary_factor |
 *            rotary_dim, interleaved, max_position_embeddings,
 *            original_max_position_embeddings, rope_scaling},
 *            "bias": {method, max_bias | bidirectional,
 *            relative_attention_num_buckets, relative_attention_max_distance},
 *            "causal", "sliding_window" | "window", "softcap", "scale",
 *            "num_heads"}
 *   sources {"/rope/rope_theta": "rope_theta", ...}: the config keys each
 *            member of params was derived from (comma-separated), also for
 *            decisions that produced no member ("/softcap":
 *            "attn_logit_softcapping" when it is null)
 *   where   {"rope_theta": "/config/rope_theta", ...}: where each key
 *            came from (a JSON pointer of the request)
 *   upstream, ignored: arrays of key names / JSON pointers. */
struct srv_model {
  json_t *params, *sources, *upstream, *ignored, *where;
  const struct srv_family *family;   /* NULL: no model_type */
  enum srv_pos_kind pos;
  int64_t layer, num_layers;         /* num_layers 0: unknown */
  const char *layer_type;            /* "full_attention" | "sliding_attention" */
};

/* Read `config` (a config.json object; a multimodal model's text_config is
 * read in place of its top level) for layer `layer` into m.  `origins`
 * maps each top-level key (dotted for text_config / attn_config members) to
 * the JSON pointer it came from, for error messages; NULL means
 * "/config/<key>".  Returns 0, or -1 with err a 400 naming the key (by its
 * origin pointer), or 500.  m is always safe to srv_model_free. */
int srv_model_resolve(const json_t *config, const json_t *origins,
                      int64_t layer, struct srv_model *m,
                      struct srv_err *err);
void srv_model_free(struct srv_model *m);
/* The request pointer config key `key` (dotted for container members)
 * came from, into buf; a key that took its family's default points at
 * model_type. */
const char *srv_model_key_ptr(const struct srv_model *m, const char *key,
                              char *buf, size_t cap);
/* parent + "/" + key with RFC 6901 escaping into out; a preset's values
 * all point at "/model" (parent "/model" stays as it is). */
void srv_cfg_ptr(const char *parent, const char *key, char *out, size_t cap);

/* ---- presets ----------------------------------------------------------- */

/* The preset files (models/<name>.json embedded at build time), parsed
 * once: {"name", "family", "title", "source", "note", "config"}.  Borrowed;
 * NULL when `name` is unknown. */
const json_t *srv_preset_find(const char *name);
/* The i-th preset (0 <= i < srv_preset_count()), or NULL. */
const json_t *srv_preset_at(int i);
int srv_preset_count(void);

/* ---- the request step (also declared in srv.h for call/call.c) -------- */

/* The request fields of the step, for the catalog: config, model, layer. */
extern const struct srv_ptable srv_ptab_model_config;

#endif /* SRV_CONFIG_H */
