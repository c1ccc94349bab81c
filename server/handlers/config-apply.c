/* config-apply.c: the request step -- "model", "config", "layer" and
 * Hugging Face names at the top level of any POST request become the
 * route's own fields before its handler runs (docs/internals/config.md).
 *
 *   1. The config is assembled: the preset's keys, then config's over them,
 *      then Hugging Face keys given at the top level (member by member;
 *      rope_scaling and the like whole).
 *   2. srv_model_resolve reads it into route-neutral parameters.
 *   3. The route's adapter maps them onto its fields ("/rope/rope_theta"
 *      is /v1/rope's "/rope_theta" and attention's "/rope/rope_theta") and
 *      merges them under the request's: an explicit field -- or one of its
 *      alternatives (window / sliding_window, rotary_dim /
 *      partial_rotary_factor), or an explicit container such as "rope":
 *      null -- wins, and shapes beat head_dim.
 *   4. What was used goes into the call for the answer's headers, and a
 *      blame map lets errors in filled-in fields name the config key. */
#include "config.h"

#include <stdio.h>
#include <string.h>

/* ==== the step's own request fields ===================================== */

struct cfg_req {
  const char *model;
  const json_t *config;
  int64_t layer;
};
/* REQ(f): where the parameter parser stores member f of the request
 * (struct cfg_req). */
#define REQ(f) offsetof(struct cfg_req, f)

static const struct srv_param cfg_params[] = {
    {.name = "model", .type = SRV_PT_STR, .off = REQ(model),
     .desc = "a preset (GET /v1/models): its config fills every field the "
             "request does not give"},
    {.name = "config", .type = SRV_PT_OBJECT, .off = REQ(config),
     .desc = "a Hugging Face config.json (over the preset's keys when both "
             "are given); its keys are also accepted at the top level"},
    {.name = "layer", .type = SRV_PT_INT, .flags = SRV_PF_DEF | SRV_PF_MIN,
     .def = 0, .min = 0, .off = REQ(layer),
     .desc = "the layer computed, for configs whose layers differ (windows, "
             "RoPE bases); the answer's X-Attnbias-Config-Layer names it"},
};
const struct srv_ptable srv_ptab_model_config = SRV_PTABLE(
    "model config", "a model's config on any POST route (GET /v1/models)",
    cfg_params);

/* ==== adapters: canonical parameters -> a route's fields ================ */

/* A canonical pointer (or prefix, ending in '/') and where it goes. */
struct map {
  const char *canon, *route;
};

struct adapter {
  const char *route;         /* srv_route.name */
  const char *kind;          /* the request's "kind" it serves; NULL: any */
  const struct map *maps;    /* ends at canon NULL */
  /* Refuse a config whose positions this route does not compute. */
  enum { FITS_ANY, FITS_ROPE, FITS_BIAS, FITS_NONE } fits;
};

static const struct map rope_maps[] = {{"/rope/", "/"}, {NULL, NULL}};
static const struct map attn_maps[] = {
    {"/rope/", "/rope/"},   {"/bias/", "/bias/"},
    {"/causal", "/causal"}, {"/sliding_window", "/sliding_window"},
    {"/window", "/window"}, {"/softcap", "/softcap"},
    {"/scale", "/scale"},   {NULL, NULL}};
static const struct map bias_maps[] = {
    {"/bias/", "/"},        {"/num_heads", "/num_heads"},
    {"/causal", "/causal"}, {"/sliding_window", "/sliding_window"},
    {"/window", "/window"}, {NULL, NULL}};
/* /v1/analysis kind bias: /v1/bias's method fields, without its masks. */
static const struct map analysis_bias_maps[] = {
    {"/bias/", "/"}, {"/num_heads", "/num_heads"}, {NULL, NULL}};
static const struct map no_maps[] = {{NULL, NULL}};

/* The first line of the route whose kind matches serves the request. */
static const struct adapter g_adapters[] = {
    {"rope", NULL, rope_maps, FITS_ROPE},
    {"attention", NULL, attn_maps, FITS_ANY},
    {"bias", NULL, bias_maps, FITS_ANY},
    {"encodings", NULL, no_maps, FITS_NONE},
    /* kind bias reads /v1/bias's method fields; rope and extend read
     * /v1/rope's configuration under the same names. */
    {"analysis", "bias", analysis_bias_maps, FITS_BIAS},
    {"analysis", NULL, rope_maps, FITS_ROPE},
};

static const struct adapter *adapter_for(const struct srv_call *c)
{
  const char *route = c->req.route ? c->req.route->name : NULL;
  const char *kind = json_string_value(json_object_get(c->in.params, "kind"));
  size_t i;

  for (i = 0; route && i < sizeof g_adapters / sizeof g_adapters[0]; i++) {
    const struct adapter *ad = &g_adapters[i];
    if (strcmp(ad->route, route) == 0 &&
        (!ad->kind || (kind && strcmp(ad->kind, kind) == 0)))
      return ad;
  }
  return NULL;
}

/* Tables t[*n..] += the n_add tables of add, within cap. */
static void add_tables(const struct srv_ptable **t, int *n, int cap,
                       const struct srv_ptable *const *add, int n_add)
{
  int i;

  for (i = 0; i < n_add && *n < cap; i++)
    t[(*n)++] = add[i];
}

/* Every bias family's parameter table, in the order of the enum. */
static void add_bias_tables(const struct srv_ptable **t, int *n, int cap)
{
  int i;

  for (i = 0; i < AB_BIAS_METHOD_LAST_ && *n < cap; i++)
    t[(*n)++] = srv_bias_method_params((enum ab_bias_method)i);
}

/* The route's top-level fields: a Hugging Face key of the same name there
 * is the route's own (rope_theta on /v1/rope), not config. */
static int is_native(const struct adapter *ad, const char *key)
{
  const struct srv_ptable *t[12];
  const char *route = ad ? ad->route : NULL;
  int n = 0, i, k;

  if (!route)
    return 0;
  t[n++] = &srv_ptab_output;
  if (strcmp(route, "rope") == 0) {
    t[n++] = &srv_ptab_rope_config;
    t[n++] = &srv_ptab_rope_request;
  } else if (strcmp(route, "attention") == 0) {
    t[n++] = &srv_ptab_attention;
  } else if (strcmp(route, "bias") == 0) {
    t[n++] = &srv_ptab_bias_common;
    add_bias_tables(t, &n, 12);
  } else if (strcmp(route, "encodings") == 0) {
    t[n++] = &srv_ptab_enc_common;
    add_tables(t, &n, 12, srv_ptab_enc_methods, srv_ptab_enc_nmethods);
  } else if (strcmp(route, "analysis") == 0) {
    t[n++] = &srv_ptab_analysis;
    if (ad->fits == FITS_BIAS) {
      t[n++] = &srv_ptab_analysis_bias;
      add_bias_tables(t, &n, 12);
    } else {
      t[n++] = &srv_ptab_rope_config;
    }
  }
  for (i = 0; i < n; i++)
    for (k = 0; k < t[i]->n; k++)
      if (strcmp(t[i]->p[k].name, key) == 0 ||
          (t[i]->p[k].alias && strcmp(t[i]->p[k].alias, key) == 0))
        return 1;
  return 0;
}

/* The route pointer of canonical pointer `canon`, or 0. */
static int map_ptr(const struct map *maps, const char *canon, char *out,
                   size_t cap)
{
  for (; maps->canon; maps++) {
    size_t n = strlen(maps->canon);
    if (maps->canon[n - 1] == '/' ? strncmp(canon, maps->canon, n) == 0
                                  : strcmp(canon, maps->canon) == 0) {
      snprintf(out, cap, "%s%s", maps->route,
               maps->canon[n - 1] == '/' ? canon + n : "");
      return 1;
    }
  }
  return 0;
}

/* ==== the per-call trace ================================================= */

/* A route field the config filled: where its value came from. */
struct blame {
  char route[96];   /* "/rope/rope_scaling" */
  char origin[160]; /* "/config/rope_scaling", or "/model" */
  char keys[160];   /* "rope_scaling" */
};

struct srv_cfg_trace {
  struct blame *b;
  int n;
  char model[64]; /* the preset's name, or "" */
};

/* c->cfg_* header values: comma-separated, cut to fit. */
static void list_add(char *list, size_t cap, const char *item)
{
  size_t n = strlen(list), il = strlen(item);
  const char *p = list;

  while ((p = strstr(p, item)) != NULL) { /* once each */
    if ((p == list || (p >= list + 2 && p[-2] == ',')) &&
        (p[il] == ',' || p[il] == '\0'))
      return;
    p += il;
  }
  if (n + il + 3 >= cap)
    return;
  snprintf(list + n, cap - n, "%s%s", n ? ", " : "", item);
}

/* ==== assembling the config ============================================== */

/* origins[key] = ptr (a new string). */
static void set_origin(json_t *origins, const char *key, const char *ptr)
{
  json_object_set_new(origins, key, json_string(ptr));
}

/* Containers whose members overlay one by one (the others are replaced
 * whole: rope_scaling above all). */
static int overlays(const char *key)
{
  return strcmp(key, "text_config") == 0 || strcmp(key, "attn_config") == 0;
}

/* The origins of the members of container `key` (at pointer ptr). */
static void member_origins(json_t *origins, const char *key, const json_t *v,
                           const char *ptr)
{
  const char *k2;
  json_t *v2;

  json_object_foreach((json_t *)v, k2, v2) {
    char dotted[160], p2[192];
    snprintf(dotted, sizeof dotted, "%s.%s", key, k2);
    srv_cfg_ptr(ptr, k2, p2, sizeof p2);
    set_origin(origins, dotted, p2);
  }
}

/* Copy the members of src over cfg; `base` is the pointer of src ("/model"
 * for a preset: every value then points there). */
static void overlay(json_t *cfg, json_t *origins, const json_t *src,
                    const char *base)
{
  const char *key;
  json_t *v;

  json_object_foreach((json_t *)src, key, v) {
    char ptr[192];
    json_t *old = json_object_get(cfg, key);

    srv_cfg_ptr(base, key, ptr, sizeof ptr);
    if (overlays(key) && json_is_object(v) && json_is_object(old)) {
      const char *k2;
      json_t *v2;
      json_object_foreach(v, k2, v2)
        json_object_set_new(old, k2, json_deep_copy(v2));
    } else {
      json_object_set_new(cfg, key, json_deep_copy(v));
      set_origin(origins, key, ptr);
    }
    if (overlays(key) && json_is_object(v))
      member_origins(origins, key, v, ptr);
  }
}

/* ==== merging ============================================================ */

static const char *const groups[][3] = {
    {"window", "sliding_window", NULL},
    {"rotary_dim", "partial_rotary_factor", NULL},
};

/* Whether obj gives `name` or one of its alternatives. */
static int gives(const json_t *obj, const char *name)
{
  size_t g;
  int i;

  if (json_object_get(obj, name))
    return 1;
  for (g = 0; g < sizeof groups / sizeof groups[0]; g++) {
    int in = 0;
    for (i = 0; groups[g][i]; i++)
      in |= strcmp(groups[g][i], name) == 0;
    for (i = 0; in && groups[g][i]; i++)
      if (json_object_get(obj, groups[g][i]))
        return 1;
  }
  return 0;
}

/* The value at canonical pointer p of params (one or two levels). */
static const json_t *at(const json_t *params, const char *p)
{
  const char *slash = strchr(p + 1, '/');
  char head[32];
  size_t hl;

  if (!slash)
    return json_object_get(params, p + 1);
  hl = (size_t)(slash - p - 1);
  if (hl >= sizeof head)
    return NULL;
  memcpy(head, p + 1, hl);
  head[hl] = '\0';
  return json_object_get(json_object_get(params, head), slash + 1);
}

/* Put v (borrowed; copied) at route pointer r of the request unless the
 * request gives it; 1 when the config's value (or decision, v NULL)
 * stands, 0 when the request's own field wins. */
static int merge_one(json_t *req, const char *r, const json_t *v)
{
  const char *slash = strchr(r + 1, '/');
  json_t *obj = req;
  const char *name = r + 1;

  if (slash) {
    char head[32];
    size_t hl = (size_t)(slash - r - 1);
    json_t *o;
    if (hl >= sizeof head)
      return 0;
    memcpy(head, r + 1, hl);
    head[hl] = '\0';
    o = json_object_get(req, head);
    if (o && !json_is_object(o))
      return 0; /* "rope": null and the like: the request says none */
    if (!o) {
      if (!v)
        return 1;
      o = json_object();
      json_object_set_new(req, head, o);
    }
    obj = o;
    name = slash + 1;
  }
  if (gives(obj, name))
    return 0;
  if (v)
    json_object_set_new(obj, name, json_deep_copy(v));
  return 1;
}

/* Whether the request holds a tensor named `name` (JSON or safetensors). */
static int has_tensor(const struct srv_call *c, const char *name)
{
  int i;

  if (json_object_get(c->in.params, name) ||
      srv_codec_beside(c, c->in.params, name))
    return 1;
  for (i = 0; i < c->in.nbin; i++)
    if (c->in.bin[i].name && strcmp(c->in.bin[i].name, name) == 0)
      return 1;
  return 0;
}

/* ==== the step =========================================================== */

/* The configured fields of a route whose positions do not fit: a 400. */
static int refuse_fit(const struct srv_call *c, const struct adapter *ad,
                      const struct srv_model *m, struct srv_err *err)
{
  char ptr[192];
  const char *fam = m->family ? m->family->model_type : "this config";

  srv_model_key_ptr(m, "model_type", ptr, sizeof ptr);
  if (ad->fits == FITS_ROPE && m->pos != SRV_POS_ROPE &&
      m->pos != SRV_POS_UNKNOWN)
    return srv_fail(err, 400, ptr,
                    "%s has no RoPE (its positions are %s): ask %s", fam,
                    srv_pos_kind_name(m->pos),
                    strcmp(ad->route, "analysis") == 0
                        ? "kind bias"
                        : "/v1/bias or /v1/attention");
  if (ad->fits == FITS_BIAS && m->pos == SRV_POS_ROPE)
    return srv_fail(err, 400, ptr,
                    "%s has no position bias (its positions are rope): ask "
                    "kind rope or extend",
                    fam);
  if (ad->fits == FITS_NONE && m->pos != SRV_POS_UNKNOWN)
    return srv_fail(err, 400, ptr,
                    "%s has no absolute position encoding (its positions "
                    "are %s): ask /v1/%s",
                    fam, srv_pos_kind_name(m->pos),
                    m->pos == SRV_POS_ROPE ? "rope" : "bias");
  return 0;
}

/* Record one used route field. */
static void trace_add(struct srv_call *c, const struct srv_model *m,
                      const char *route_ptr, const char *keys)
{
  struct srv_cfg_trace *t = c->in.cfg;
  struct blame *b;
  char key[96];
  const char *comma = strchr(keys, ',');
  size_t kl = comma ? (size_t)(comma - keys) : strlen(keys);

  if (!t || !t->b)
    return;
  b = &t->b[t->n++];
  snprintf(b->route, sizeof b->route, "%s", route_ptr);
  snprintf(b->keys, sizeof b->keys, "%s", keys);
  snprintf(key, sizeof key, "%.*s", (int)(kl < sizeof key ? kl : 0), keys);
  srv_model_key_ptr(m, key, b->origin, sizeof b->origin);
  /* Every key into the Used header. */
  while (*keys) {
    comma = strchr(keys, ',');
    kl = comma ? (size_t)(comma - keys) : strlen(keys);
    snprintf(key, sizeof key, "%.*s", (int)(kl < sizeof key ? kl : 0), keys);
    list_add(c->in.cfg_used, sizeof c->in.cfg_used, key);
    keys += kl + (comma ? 1 : 0);
  }
}

/* Map and merge the resolved parameters into the request. */
static int project(struct srv_call *c, const struct adapter *ad,
                   const struct srv_model *m, struct srv_err *err)
{
  const char *canon;
  json_t *keys;
  char r[128];
  const json_t *method = at(m->params, "/bias/method");
  int bias_other = 0, qk = strcmp(ad->route, "rope") == 0 &&
                           (has_tensor(c, "q") || has_tensor(c, "k"));

  c->in.cfg->b = srv_arena_calloc(&c->arena, json_object_size(m->sources) + 1,
                                  sizeof *c->in.cfg->b);
  if (!c->in.cfg->b)
    return srv_fail(err, 500, NULL, "out of memory applying the config");

  /* A request that names another bias method keeps its own. */
  if (method && map_ptr(ad->maps, "/bias/method", r, sizeof r)) {
    const json_t *mine = at(c->in.params, r);
    bias_other = mine && !json_equal((json_t *)mine, (json_t *)method);
  }
  /* /v1/bias for a model without a position bias: "none" (its masks). */
  if (!method && strcmp(ad->route, "bias") == 0 &&
      !json_object_get(c->in.params, "method") && m->family) {
    json_t *none = json_string("none");
    json_object_set_new(c->in.params, "method", none);
    trace_add(c, m, "/method", "model_type");
  }

  json_object_foreach(m->sources, canon, keys) {
    if (!map_ptr(ad->maps, canon, r, sizeof r))
      continue;
    /* Tensors give head_dim: attention's always, /v1/rope's q and k. */
    if (strcmp(canon, "/rope/head_dim") == 0 &&
        (qk || strcmp(ad->route, "attention") == 0))
      continue;
    if (bias_other && strncmp(canon, "/bias/", 6) == 0)
      continue;
    if (merge_one(c->in.params, r, at(m->params, canon)))
      trace_add(c, m, r, json_string_value(keys));
  }
  return 0;
}

/* Hugging Face keys at the top level: a partial config.  Those that are
 * not the route's own fields move out of the request into `top` (and
 * *foreign counts them); the route's own (rope_theta on /v1/rope) are
 * copied, so that the config reads them too, and stay explicit. */
static json_t *take_top_keys(struct srv_call *c, const struct adapter *ad,
                              int *foreign)
{
  json_t *top = json_object();
  const char *key;
  json_t *v;
  void *tmp;

  *foreign = 0;
  if (!top)
    return NULL;
  json_object_foreach_safe(c->in.params, tmp, key, v) {
    const struct srv_ckey *k = srv_ckey_find(key);
    /* Inert keys stay unknown fields here (a stray "dtype" is no config),
     * and so does "bias", Falcon's flag but attention's own object. */
    if (!k || k->cls == SRV_CK_INERT || strchr(key, '.') ||
        strcmp(key, "bias") == 0)
      continue;
    json_object_set(top, key, v);
    if (!is_native(ad, key)) {
      json_object_del(c->in.params, key);
      ++*foreign;
    }
  }
  return top;
}

/* The preset's names, for an error. */
static void preset_names(char *out, size_t cap)
{
  int i, n = srv_preset_count();
  size_t len = 0;

  out[0] = '\0';
  for (i = 0; i < n && len + 1 < cap; i++)
    len += (size_t)snprintf(
        out + len, cap - len, "%s%s", i ? ", " : "",
        json_string_value(json_object_get(srv_preset_at(i), "name")));
}

/* The config of the request: preset, config, top-level keys. */
static int assemble(struct srv_call *c, const struct cfg_req *q, json_t *top,
                    json_t *cfg, json_t *origins, struct srv_err *err)
{
  if (q->model) {
    const json_t *p = srv_preset_find(q->model);
    char names[1024];
    if (!p) {
      preset_names(names, sizeof names);
      return srv_fail(err, 400, "/model",
                      "model \"%.60s\" is not a preset; GET /v1/models lists "
                      "them: %s",
                      q->model, names);
    }
    overlay(cfg, origins, json_object_get(p, "config"), "/model");
    snprintf(c->in.cfg->model, sizeof c->in.cfg->model, "%s", q->model);
  }
  if (q->config)
    overlay(cfg, origins, q->config, "/config");
  overlay(cfg, origins, top, "");
  return 0;
}

int srv_config_apply(struct srv_call *c, struct srv_err *err)
{
  struct srv_pctx pc;
  struct cfg_req q;
  struct srv_pbind b = {&srv_ptab_model_config, &q, 0};
  const struct adapter *ad;
  struct srv_model m;
  json_t *top, *cfg = NULL, *origins = NULL;
  size_t i;
  int rc = -1, foreign;

  if (!json_is_object(c->in.params))
    return 0;
  memset(&q, 0, sizeof q);
  if (srv_pctx_root(c, &pc, err) != 0 ||
      srv_params_parse(&pc, c->in.params, &b, err) != 0)
    return -1;
  ad = adapter_for(c);
  if (!(top = take_top_keys(c, ad, &foreign)))
    return srv_fail(err, 500, NULL, "out of memory");
  if (!q.model && !q.config && !foreign) {
    /* Not a config request: "layer" alone is an unknown field. */
    json_decref(top);
    return 0;
  }
  memset(&m, 0, sizeof m);
  c->in.cfg = srv_arena_calloc(&c->arena, 1, sizeof *c->in.cfg);
  cfg = json_object();
  origins = json_object();
  if (!c->in.cfg || !cfg || !origins) {
    srv_fail(err, 500, NULL, "out of memory");
    goto out;
  }
  if (!ad) {
    srv_fail(err, 400, q.model ? "/model" : "/config",
             "this route takes no model config");
    goto out;
  }
  if (assemble(c, &q, top, cfg, origins, err) != 0 ||
      srv_model_resolve(cfg, origins, q.layer, &m, err) != 0 ||
      refuse_fit(c, ad, &m, err) != 0 || project(c, ad, &m, err) != 0)
    goto out;

  for (i = 0; i < json_array_size(m.upstream); i++)
    list_add(c->in.cfg_upstream, sizeof c->in.cfg_upstream,
             json_string_value(json_array_get(m.upstream, i)));
  for (i = 0; i < json_array_size(m.ignored); i++)
    srv_config_ignore(c, json_string_value(json_array_get(m.ignored, i)));
  snprintf(c->in.cfg_layer, sizeof c->in.cfg_layer, "%lld; type=%s",
           (long long)m.layer, m.layer_type);
  json_object_del(c->in.params, "model");
  json_object_del(c->in.params, "config");
  json_object_del(c->in.params, "layer");
  rc = 0;
out:
  srv_model_free(&m);
  json_decref(top);
  json_decref(cfg);
  json_decref(origins);
  return rc;
}

/* ==== errors and ignored fields in filled-in fields ====================== */

/* The blame entry whose route pointer is ptr or a prefix of it. */
static const struct blame *blame_for(const struct srv_call *c,
                                     const char *ptr)
{
  const struct blame *best = NULL;
  size_t bl = 0;
  int i;

  if (!c->in.cfg || !ptr)
    return NULL;
  for (i = 0; i < c->in.cfg->n; i++) {
    const struct blame *b = &c->in.cfg->b[i];
    size_t n = strlen(b->route);
    if (strncmp(ptr, b->route, n) == 0 && (ptr[n] == '\0' || ptr[n] == '/') &&
        n > bl) {
      best = b;
      bl = n;
    }
  }
  return best;
}

const char *srv_config_pointer(const struct srv_call *c, const char *ptr,
                               char *buf, size_t cap)
{
  const struct blame *b = blame_for(c, ptr);

  if (!b)
    return ptr;
  if (strcmp(b->origin, "/model") == 0)
    snprintf(buf, cap, "/model");
  else
    snprintf(buf, cap, "%s%s", b->origin, ptr + strlen(b->route));
  return buf;
}

void srv_config_ignore(struct srv_call *c, const char *ptr)
{
  char where[192];

  srv_codec_ignore(c, srv_config_pointer(c, ptr, where, sizeof where));
}

void srv_config_blame(const struct srv_call *c, struct srv_err *err)
{
  const struct blame *b = blame_for(c, err->field);
  char field[sizeof err->field];
  size_t n;

  if (!b)
    return;
  srv_config_pointer(c, err->field, field, sizeof field);
  snprintf(err->field, sizeof err->field, "%s", field);
  n = strlen(err->detail);
  if (c->in.cfg->model[0])
    snprintf(err->detail + n, sizeof err->detail - n,
             " (filled in from model %s: %s)", c->in.cfg->model, b->keys);
  else
    snprintf(err->detail + n, sizeof err->detail - n,
             " (filled in from config: %s)", b->keys);
}
