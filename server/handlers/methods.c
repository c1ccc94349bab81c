/* methods.c: GET /v1/methods -- the catalog of every encoding method, RoPE
 * type, bias method and the attention options, generated from the same
 * parameter tables the handlers parse requests with. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

/* {"name", "description", "parameters": [...]} for one table. */
static json_t *entry(const struct srv_ptable *t)
{
  json_t *o = json_object();

  json_object_set_new(o, "name", json_string(t->name));
  json_object_set_new(o, "description", json_string(t->desc));
  json_object_set_new(o, "parameters", srv_params_catalog_list(&t, 1));
  return o;
}

/* The table's parameters minus the selector named `skip`. */
static json_t *list_without(const struct srv_ptable *t, const char *skip)
{
  json_t *a = json_array();
  int i;

  for (i = 0; i < t->n; i++)
    if (!skip || strcmp(t->p[i].name, skip) != 0)
      json_array_append_new(a, srv_params_catalog_param(&t->p[i]));
  return a;
}

/* Canonical names only: the aliases ("mrope", "su") share a table and are
 * listed as aliases of the entry they stand for. */
static json_t *rope_types(void)
{
  const struct srv_param *sel =
      srv_ptable_find(&srv_ptab_rope_scaling, "rope_type");
  json_t *a = json_array();
  int t;

  for (t = 0; t < srv_ptab_rope_ntypes; t++) {
    json_t *e = entry(srv_ptab_rope_types[t]), *aliases = json_array();
    const struct srv_choice *ch;
    const char *canon = ab_rope_type_name((enum ab_rope_type)t);

    for (ch = sel->choices; ch && ch->name; ch++)
      if (ch->value == t && strcmp(ch->name, canon) != 0)
        json_array_append_new(aliases, json_string(ch->name));
    if (json_array_size(aliases))
      json_object_set_new(e, "aliases", aliases);
    else
      json_decref(aliases);
    json_array_append_new(a, e);
  }
  return a;
}

static json_t *catalog(void)
{
  json_t *root = json_object(), *o, *a;
  int i;

  json_object_set_new(root, "version", json_string(ab_version()));
  json_object_set_new(root, "isa", json_string(ab_isa_name()));

  /* /v1/encodings */
  o = json_object();
  json_object_set_new(o, "route", json_string("/v1/encodings"));
  json_object_set_new(o, "description", json_string(srv_ptab_enc_common.desc));
  json_object_set_new(o, "parameters",
                      list_without(&srv_ptab_enc_common, NULL));
  a = json_array();
  for (i = 0; i < srv_ptab_enc_nmethods; i++)
    json_array_append_new(a, entry(srv_ptab_enc_methods[i]));
  json_object_set_new(o, "methods", a);
  json_object_set_new(root, "encodings", o);

  /* /v1/rope */
  o = json_object();
  json_object_set_new(o, "route", json_string("/v1/rope"));
  json_object_set_new(o, "description",
                      json_string("RoPE tables (inv_freq, cos, sin, "
                                  "attention_scaling) or q/k rotated"));
  {
    const struct srv_ptable *t[2] = {&srv_ptab_rope_config,
                                     &srv_ptab_rope_request};
    json_object_set_new(o, "parameters", srv_params_catalog_list(t, 2));
  }
  json_object_set_new(o, "rope_scaling",
                      list_without(&srv_ptab_rope_scaling, NULL));
  json_object_set_new(o, "rope_types", rope_types());
  json_object_set_new(root, "rope", o);

  /* /v1/bias */
  o = json_object();
  json_object_set_new(o, "route", json_string("/v1/bias"));
  json_object_set_new(o, "description",
                      json_string(srv_ptab_bias_common.desc));
  json_object_set_new(o, "parameters",
                      list_without(&srv_ptab_bias_common, NULL));
  a = json_array();
  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++)
    json_array_append_new(
        a, entry(srv_bias_method_params((enum ab_bias_method)i)));
  json_object_set_new(o, "methods", a);
  json_object_set_new(root, "bias", o);

  /* /v1/attention */
  o = json_object();
  json_object_set_new(o, "route", json_string("/v1/attention"));
  json_object_set_new(o, "description", json_string(srv_ptab_attention.desc));
  json_object_set_new(o, "parameters",
                      list_without(&srv_ptab_attention, NULL));
  {
    /* The rope object: the config fields (as /v1/rope) plus positions. */
    const struct srv_ptable *t[2] = {&srv_ptab_rope_config,
                                     &srv_ptab_rope_attn};
    json_object_set_new(o, "rope", srv_params_catalog_list(t, 2));
  }
  {
    json_t *bo = json_object(), *params = json_array();
    json_object_set_new(
        bo, "description",
        json_string("method plus the parameters of that method as in "
                    "/v1/bias methods; num_heads, q_len, k_len, q_offset, "
                    "causal, window and sliding_window come from the "
                    "attention request"));
    /* Of the /v1/bias fields only the selector applies inside it. */
    json_array_append_new(params,
                          srv_params_catalog_param(&srv_param_bias_method));
    json_object_set_new(bo, "parameters", params);
    json_object_set_new(o, "bias", bo);
  }
  json_object_set_new(root, "attention", o);

  /* /v1/analysis: its own fields and the RoPE config fields of /v1/rope
   * (seq_len is its own); kind bias's fields beside /v1/bias's methods. */
  o = json_object();
  json_object_set_new(o, "route", json_string("/v1/analysis"));
  json_object_set_new(
      o, "description",
      json_string("what a position encoding does at a length: kinds rope "
                  "and extend take the RoPE fields of /v1/rope (rope_scaling "
                  "as there); kind bias takes bias_parameters and the "
                  "parameters of the /v1/bias method"));
  {
    json_t *params = list_without(&srv_ptab_analysis, NULL);
    json_t *rope = list_without(&srv_ptab_rope_config, "seq_len");
    json_t *bias = list_without(&srv_ptab_analysis_bias, NULL);
    json_array_extend(params, rope);
    json_decref(rope);
    json_array_insert_new(bias, 0,
                          srv_params_catalog_param(&srv_param_bias_method));
    json_object_set_new(o, "parameters", params);
    json_object_set_new(o, "bias_parameters", bias);
  }
  json_object_set_new(root, "analysis", o);

  json_object_set_new(root, "output_options",
                      list_without(&srv_ptab_output, NULL));
  /* Every POST route: a model's config (GET /v1/models). */
  json_object_set_new(root, "config_options",
                      list_without(&srv_ptab_model_config, NULL));
  return root;
}

int srv_h_methods(struct srv_call *c, struct srv_err *err)
{
  return srv_reply_json(c, catalog(), "the catalog", err);
}
