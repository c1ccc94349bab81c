/* models.c: GET /v1/models -- the model families attnbias knows, the
 * presets shipped with it (each with its published config and where it was
 * taken from) and the table of every config key it knows, with its class.
 * Built from the same tables the config step reads (config-keys.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

static json_t *family_entry(const struct srv_family *f)
{
  json_t *o = json_object(), *presets = json_array(), *aliases;
  static const char *const patterns[] = {
      "every layer alike", "sliding from max_window_layers on (Qwen2)",
      "even layers sliding (Gemma 2)",
      "every sliding_window_pattern-th layer global (Gemma 3)",
      "every global_attn_every_n_layers-th layer global (ModernBERT)"};
  int i;

  json_object_set_new(o, "model_type", json_string(f->model_type));
  aliases = json_array();
  if (f->aliases) {
    char list[128], *save = NULL, *tok;
    snprintf(list, sizeof list, "%s", f->aliases);
    for (tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
      json_array_append_new(aliases, json_string(tok));
  }
  json_object_set_new(o, "aliases", aliases);
  json_object_set_new(o, "positions", json_string(srv_pos_kind_name(f->pos)));
  if (f->pos == SRV_POS_ROPE)
    json_object_set_new(o, "pairing",
                        json_string(f->interleaved ? "interleaved"
                                                   : "rotate-half"));
  json_object_set_new(o, "causal",
                      f->causal < 0 ? json_string("is_decoder")
                                    : json_boolean(f->causal));
  json_object_set_new(o, "layers", json_string(patterns[f->pattern]));
  json_object_set_new(o, "defaults",
                      json_deep_copy(srv_family_defaults(f)));
  if (f->upstream)
    json_object_set_new(o, "upstream", json_string(f->upstream));
  json_object_set_new(o, "description", json_string(f->desc));
  for (i = 0; i < srv_preset_count(); i++) {
    const json_t *p = srv_preset_at(i);
    const char *fam = json_string_value(json_object_get(p, "family"));
    if (fam && srv_family_find(fam) == f)
      /* a new string: the presets are shared by every thread */
      json_array_append_new(
          presets, json_string(json_string_value(json_object_get(p, "name"))));
  }
  json_object_set_new(o, "presets", presets);
  return o;
}

static json_t *key_entry(const struct srv_ckey *k)
{
  json_t *o = json_object();
  const char *when = srv_ckey_when_name(k->when);
  const char *refuse = srv_ckey_when_name(k->refuse);

  json_object_set_new(o, "key", json_string(k->key));
  json_object_set_new(o, "class", json_string(srv_ckey_class_name(k->cls)));
  if (k->cls == SRV_CK_UPSTREAM && when)
    json_object_set_new(o, "listed_when", json_string(when));
  if (refuse)
    json_object_set_new(o, "refused_when", json_string(refuse));
  json_object_set_new(o, "description", json_string(k->desc));
  return o;
}

static json_t *catalog(void)
{
  json_t *root = json_object(), *fams = json_array(), *presets = json_array(),
         *keys = json_array();
  int i;

  for (i = 0; i < srv_nfamilies; i++)
    json_array_append_new(fams, family_entry(&srv_families[i]));
  for (i = 0; i < srv_preset_count(); i++)
    json_array_append_new(presets, json_deep_copy(srv_preset_at(i)));
  for (i = 0; i < srv_nckeys; i++)
    json_array_append_new(keys, key_entry(&srv_ckeys[i]));
  json_object_set_new(root, "families", fams);
  json_object_set_new(root, "presets", presets);
  json_object_set_new(root, "keys", keys);
  return root;
}

int srv_h_models(struct srv_call *c, struct srv_err *err)
{
  return srv_reply_json(c, catalog(), "the model list", err);
}
