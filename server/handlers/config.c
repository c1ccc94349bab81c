/* config.c: the resolver -- one Hugging Face config.json (and a layer) in,
 * attnbias's own parameters out (config.h).  It depends on jansson and the
 * key and family tables only, so a fuzzer can call srv_model_resolve with
 * any json_t.
 *
 * What each key means follows the model's Hugging Face configuration and
 * modeling code, family by family: which base a layer's RoPE uses, which
 * layers slide, how DeepSeek's YaRN changes the softmax scale, how Gemma
 * scales its queries.  Keys absent from the config take the defaults of
 * the family's configuration class (srv_families), and the answer then
 * names model_type as their source. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything one resolution reads and writes. */
struct rd {
  json_t *eff;           /* the config, text_config lifted (owned) */
  json_t *where;         /* key -> JSON pointer of its value (owned) */
  const json_t *defs;    /* the family's defaults, or NULL (borrowed) */
  struct srv_model *m;
  struct srv_err *err;
};

/* ==== pointers and sources ============================================== */

/* parent + "/" + key (RFC 6901 escaping); a preset's values all point at
 * "/model", the member that named it. */
void srv_cfg_ptr(const char *parent, const char *key, char *out, size_t cap)
{
  size_t n;

  snprintf(out, cap, "%s", parent);
  if (strcmp(parent, "/model") == 0)
    return;
  n = strlen(out);
  if (n + 1 < cap)
    out[n++] = '/';
  for (; *key && n + 2 < cap; key++) {
    if (*key == '~' || *key == '/') {
      out[n++] = '~';
      out[n++] = *key == '~' ? '0' : '1';
    } else {
      out[n++] = *key;
    }
  }
  out[n] = '\0';
}

/* The JSON pointer a key's value came from ("attn_config.alibi" ->
 * "/config/attn_config/alibi").  A default value points at model_type,
 * which chose it. */
const char *srv_model_key_ptr(const struct srv_model *m, const char *key,
                              char *buf, size_t cap)
{
  const json_t *w = json_object_get(m->where, key);
  const char *dot = strchr(key, '.');

  if (json_is_string(w)) {
    snprintf(buf, cap, "%s", json_string_value(w));
    return buf;
  }
  if (dot) { /* a member of a container: below the container's pointer */
    char parent[160], head[64];
    size_t hl = (size_t)(dot - key) < sizeof head ? (size_t)(dot - key)
                                                  : sizeof head - 1;
    memcpy(head, key, hl);
    head[hl] = '\0';
    srv_model_key_ptr(m, head, parent, sizeof parent);
    srv_cfg_ptr(parent, dot + 1, buf, cap);
    return buf;
  }
  if (strcmp(key, "model_type") != 0)
    return srv_model_key_ptr(m, "model_type", buf, cap);
  srv_cfg_ptr("/config", key, buf, cap);
  return buf;
}

static const char *key_ptr(const struct rd *r, const char *key, char *buf,
                           size_t cap)
{
  return srv_model_key_ptr(r->m, key, buf, cap);
}

/* Record that `key` shaped the parameter at canonical pointer `canon`. */
static void note(struct rd *r, const char *canon, const char *key)
{
  const json_t *old = json_object_get(r->m->sources, canon);
  char buf[512];

  if (!canon || !key)
    return;
  if (json_is_string(old)) {
    const char *s = json_string_value(old);
    size_t kl = strlen(key);
    const char *p = s;
    /* no duplicates in the comma list */
    while ((p = strstr(p, key)) != NULL) {
      if ((p == s || p[-1] == ',') && (p[kl] == ',' || p[kl] == '\0'))
        return;
      p += kl;
    }
    snprintf(buf, sizeof buf, "%s,%s", s, key);
  } else {
    snprintf(buf, sizeof buf, "%s", key);
  }
  json_object_set_new(r->m->sources, canon, json_string(buf));
}

/* ==== reading values ==================================================== */

/* The value of `key` (dotted for container members): the config's, else
 * the family default's (*dflt = 1).  JSON null is returned as such: a
 * config that says null means "none", not "absent". */
static const json_t *lookup(const struct rd *r, const char *key, int *dflt)
{
  const char *dot = strchr(key, '.');
  const json_t *v;

  *dflt = 0;
  if (dot) {
    char head[64];
    size_t hl = (size_t)(dot - key);
    const json_t *c;
    if (hl >= sizeof head)
      return NULL;
    memcpy(head, key, hl);
    head[hl] = '\0';
    c = json_object_get(r->eff, head);
    v = json_is_object(c) ? json_object_get(c, dot + 1) : NULL;
    if (v)
      return v;
    c = r->defs ? json_object_get(r->defs, head) : NULL;
    v = json_is_object(c) ? json_object_get(c, dot + 1) : NULL;
    *dflt = v != NULL;
    return v;
  }
  v = json_object_get(r->eff, key);
  if (v)
    return v;
  v = r->defs ? json_object_get(r->defs, key) : NULL;
  *dflt = v != NULL;
  return v;
}

/* The value of key, noted under canon (when not NULL) if present; NULL
 * when absent. */
static const json_t *get(struct rd *r, const char *key, const char *canon)
{
  int dflt;
  const json_t *v = lookup(r, key, &dflt);

  if (v && canon)
    note(r, canon, dflt ? "model_type" : key);
  return v;
}

static int bad(struct rd *r, const char *key, const json_t *v,
               const char *what)
{
  char ptr[192], val[96];
  char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

  snprintf(val, sizeof val, "%s", text ? text : "?");
  free(text);
  return srv_fail(r->err, 400, key_ptr(r, key, ptr, sizeof ptr),
                  "config key %s must be %s, got %s", key, what, val);
}

/* A number (> 0 when positive): 1 found, 0 absent or null, -1 error. */
static int num(struct rd *r, const char *key, const char *canon,
               int positive, double *out)
{
  const json_t *v = get(r, key, canon);

  if (!v || json_is_null(v))
    return 0;
  if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
      (positive && !(json_number_value(v) > 0)))
    return bad(r, key, v, positive ? "a positive number" : "a number");
  *out = json_number_value(v);
  return 1;
}

/* An integer >= min (integral reals accepted): 1, 0 absent or null, -1. */
static int integer(struct rd *r, const char *key, const char *canon,
                   int64_t min, int64_t *out)
{
  const json_t *v = get(r, key, canon);
  double d;
  char what[48];

  if (!v || json_is_null(v))
    return 0;
  d = json_is_number(v) ? json_number_value(v) : NAN;
  if (!(d == floor(d)) || d < (double)min || d > 9007199254740992.0) {
    snprintf(what, sizeof what, "an integer >= %lld", (long long)min);
    return bad(r, key, v, what);
  }
  *out = (int64_t)d;
  return 1;
}

static int boolean(struct rd *r, const char *key, const char *canon,
                   int *out)
{
  const json_t *v = get(r, key, canon);

  if (!v || json_is_null(v))
    return 0;
  if (!json_is_boolean(v))
    return bad(r, key, v, "true or false");
  *out = json_is_true(v);
  return 1;
}

/* The first of several spellings that is present: its value into *out
 * (integer >= 1).  1, 0, -1. */
static int first_int(struct rd *r, const char *const *keys, const char *canon,
                     int64_t *out)
{
  int i, got;
  int dflt;

  for (i = 0; keys[i]; i++)
    if (lookup(r, keys[i], &dflt) && !dflt)
      return integer(r, keys[i], canon, 1, out);
  for (i = 0; keys[i]; i++) /* a family default under one of them */
    if ((got = integer(r, keys[i], canon, 1, out)) != 0)
      return got;
  return 0;
}

/* ==== parameters ======================================================== */

static json_t *obj_at(json_t *params, const char *name)
{
  json_t *o = json_object_get(params, name);

  if (!o) {
    o = json_object();
    json_object_set_new(params, name, o);
  }
  return o;
}

/* Set canonical member canon ("/rope/rope_theta" or "/scale") to v (a new
 * reference, stolen). */
static void put(struct rd *r, const char *canon, json_t *v)
{
  const char *slash = strchr(canon + 1, '/');

  if (!v)
    return;
  if (slash) {
    char head[32];
    size_t hl = (size_t)(slash - canon - 1);
    if (hl >= sizeof head) {
      json_decref(v);
      return;
    }
    memcpy(head, canon + 1, hl);
    head[hl] = '\0';
    json_object_set_new(obj_at(r->m->params, head), slash + 1, v);
  } else {
    json_object_set_new(r->m->params, canon + 1, v);
  }
}

/* ==== classifying the keys ============================================== */

static int when_matches(enum srv_ckey_when w, const json_t *v)
{
  switch (w) {
  case SRV_CW_ANY: return v && !json_is_null(v);
  case SRV_CW_TRUE: return json_is_true(v);
  case SRV_CW_FALSE: return json_is_false(v);
  default: return 0;
  }
}

static void add_unique(json_t *arr, const char *s)
{
  size_t i;

  for (i = 0; i < json_array_size(arr); i++)
    if (strcmp(json_string_value(json_array_get(arr, i)), s) == 0)
      return;
  json_array_append_new(arr, json_string(s));
}

/* Every member of obj (dotted names below `prefix`): unknown ones are
 * listed as ignored, refused values fail, upstream steps are listed. */
static int classify(struct rd *r, const json_t *obj, const char *prefix)
{
  const char *key;
  json_t *v;

  json_object_foreach((json_t *)obj, key, v) {
    char name[128], ptr[192];
    const struct srv_ckey *k;

    snprintf(name, sizeof name, "%s%s", prefix, key);
    k = srv_ckey_find(name);
    if (!k) {
      json_array_append_new(r->m->ignored,
                            json_string(key_ptr(r, name, ptr, sizeof ptr)));
      continue;
    }
    if (when_matches(k->refuse, v))
      return srv_fail(r->err, 400, key_ptr(r, name, ptr, sizeof ptr),
                      "config key %s = %s cannot be honoured: %s", name,
                      json_is_true(v) ? "true" : json_is_false(v) ? "false"
                                                                  : "set",
                      k->desc);
    if (k->cls == SRV_CK_UPSTREAM && when_matches(k->when, v))
      add_unique(r->m->upstream, name);
    if (strcmp(name, "attn_config") == 0 && json_is_object(v) &&
        classify(r, v, "attn_config.") != 0)
      return -1;
  }
  return 0;
}

/* ==== the config, text_config lifted ==================================== */

/* eff = the top level's members, then text_config's over them; where =
 * the pointer of each. */
static int flatten(struct rd *r, const json_t *config, const json_t *origins)
{
  const json_t *text = json_object_get(config, "text_config");
  const char *key;
  json_t *v;
  char ptr[192], parent[192];

  r->eff = json_object();
  r->where = r->m->where = json_object();
  if (!r->eff || !r->where)
    return srv_fail(r->err, 500, NULL, "out of memory reading the config");
  json_object_foreach((json_t *)config, key, v) {
    const json_t *o = origins ? json_object_get(origins, key) : NULL;
    if (o)
      snprintf(ptr, sizeof ptr, "%s", json_string_value(o));
    else
      srv_cfg_ptr("/config", key, ptr, sizeof ptr);
    json_object_set(r->eff, key, v);
    json_object_set_new(r->where, key, json_string(ptr));
  }
  if (text && !json_is_null(text)) {
    if (!json_is_object(text))
      return bad(r, "text_config", text, "an object");
    key_ptr(r, "text_config", parent, sizeof parent);
    json_object_foreach((json_t *)text, key, v) {
      char dotted[160];
      const json_t *o;
      snprintf(dotted, sizeof dotted, "text_config.%s", key);
      o = origins ? json_object_get(origins, dotted) : NULL;
      if (o)
        snprintf(ptr, sizeof ptr, "%s", json_string_value(o));
      else
        srv_cfg_ptr(parent, key, ptr, sizeof ptr);
      json_object_set(r->eff, key, v);
      json_object_set_new(r->where, key, json_string(ptr));
    }
  }
  return 0;
}

/* ==== layers ============================================================ */

/* Whether layer m->layer slides, by layer_types or the family's pattern;
 * the keys read are noted under "/window" (the canonical window, in either
 * form). */
static int layer_slides(struct rd *r, int *slides)
{
  const struct srv_family *f = r->m->family;
  const json_t *types = get(r, "layer_types", "/window");
  int64_t layer = r->m->layer, n;
  int use = 1;

  *slides = 0;
  if (types && !json_is_null(types)) {
    const json_t *t;
    const char *s;
    char base[192], ptr[192], el[24];
    if (!json_is_array(types))
      return bad(r, "layer_types", types, "a list of layer types");
    if ((int64_t)json_array_size(types) <= layer)
      return srv_fail(r->err, 400, "/layer",
                      "layer %lld does not exist: layer_types lists %zu "
                      "layers",
                      (long long)layer, json_array_size(types));
    t = json_array_get(types, (size_t)layer);
    s = json_is_string(t) ? json_string_value(t) : "";
    if (strcmp(s, "sliding_attention") == 0) {
      *slides = 1;
    } else if (strcmp(s, "full_attention") != 0) {
      key_ptr(r, "layer_types", base, sizeof base);
      snprintf(el, sizeof el, "%lld", (long long)layer);
      srv_cfg_ptr(base, el, ptr, sizeof ptr);
      return srv_fail(r->err, 400, ptr,
                      "layer %lld is of type %.40s, which attnbias cannot "
                      "honour (full_attention and sliding_attention only)",
                      (long long)layer, s);
    }
    return 0;
  }
  switch (f ? f->pattern : SRV_LP_ALL) {
  case SRV_LP_ALL:
  case SRV_LP_QWEN2: {
    const json_t *w = get(r, "sliding_window", NULL);
    if (boolean(r, "use_sliding_window", "/window", &use) < 0)
      return -1;
    *slides = use && w && !json_is_null(w);
    if (*slides && f && f->pattern == SRV_LP_QWEN2) {
      int64_t from = 0;
      if (integer(r, "max_window_layers", "/window", 0, &from) < 0)
        return -1;
      *slides = layer >= from;
    }
    return 0;
  }
  case SRV_LP_GEMMA2:
    note(r, "/window", "model_type");
    *slides = layer % 2 == 0;
    return 0;
  case SRV_LP_GEMMA3: {
    int got = integer(r, "sliding_window_pattern", "/window", 1, &n);
    if (got == 0)
      got = integer(r, "_sliding_window_pattern", "/window", 1, &n);
    if (got < 0)
      return -1;
    if (got == 0)
      n = 6;
    note(r, "/window", "model_type");
    *slides = (layer + 1) % n != 0;
    return 0;
  }
  case SRV_LP_MODERNBERT:
    if (integer(r, "global_attn_every_n_layers", "/window", 1, &n) <= 0)
      n = 1;
    *slides = layer % n != 0;
    return 0;
  }
  return 0;
}

/* The window of this layer: "sliding_window" W (causal families) or
 * "window" [W/2, W/2] (ModernBERT's local layers). */
static int resolve_window(struct rd *r, int slides)
{
  int64_t w = 0;
  const struct srv_family *f = r->m->family;

  if (!slides)
    return 0;
  if (f && f->pattern == SRV_LP_MODERNBERT) {
    json_t *lr;
    int got = integer(r, "local_attention", "/window", 2, &w);
    if (got <= 0)
      return got;
    lr = json_array();
    json_array_append_new(lr, json_integer(w / 2));
    json_array_append_new(lr, json_integer(w / 2));
    put(r, "/window", lr);
    return 0;
  }
  switch (integer(r, "sliding_window", "/window", 1, &w)) {
  case -1:
    return -1;
  case 1:
    put(r, "/sliding_window", json_integer(w));
    /* the same keys decided it */
    json_object_set(r->m->sources, "/sliding_window",
                    json_object_get(r->m->sources, "/window"));
    return 0;
  default:
    return 0;
  }
}

/* ==== RoPE ============================================================== */

static int is_deepseek(const struct rd *r)
{
  int dflt;
  const struct srv_family *f = r->m->family;

  if (f && strncmp(f->model_type, "deepseek", 8) == 0)
    return 1;
  return lookup(r, "qk_rope_head_dim", &dflt) && !dflt;
}

/* rope_parameters (transformers 5): flat, or one object per layer type. */
static const json_t *rope_parameters(struct rd *r)
{
  const json_t *rp = get(r, "rope_parameters", "/rope/rope_scaling");
  const json_t *by_type;

  if (!json_is_object(rp))
    return NULL;
  by_type = json_object_get(rp, r->m->layer_type);
  return json_is_object(by_type) ? by_type : rp;
}

/* DeepSeek's q and k heads are [nope part | rope part]
 * (qk_nope_head_dim + qk_rope_head_dim channels) and RoPE turns the rope
 * part: head_dim is the sum, rotary_dim the rope part and rotary_offset
 * the nope part, so that DeepSeek's own layout is rotated right as it is. */
static int resolve_deepseek_channels(struct rd *r)
{
  int64_t rope = 0, nope = 0;
  int got;

  if ((got = integer(r, "qk_rope_head_dim", "/rope/rotary_dim", 2, &rope)) <= 0)
    return got;
  if (integer(r, "qk_nope_head_dim", "/rope/rotary_offset", 0, &nope) < 0)
    return -1;
  note(r, "/rope/head_dim", "qk_rope_head_dim");
  if (nope > 0)
    note(r, "/rope/head_dim", "qk_nope_head_dim");
  put(r, "/rope/head_dim", json_integer(nope + rope));
  put(r, "/rope/rotary_dim", json_integer(rope));
  put(r, "/rope/rotary_offset", json_integer(nope));
  return 0;
}

static int resolve_head_dim(struct rd *r)
{
  static const char *const heads_k[] = {"num_attention_heads", "n_head",
                                        "n_heads", "num_heads", NULL};
  static const char *const hidden_k[] = {"hidden_size", "n_embd", "n_embed",
                                         "d_model", NULL};
  int64_t hd, heads = 0, hidden = 0;
  int got;

  if (is_deepseek(r))
    return resolve_deepseek_channels(r);
  if ((got = integer(r, "head_dim", "/rope/head_dim", 1, &hd)) < 0)
    return -1;
  if (got) {
    put(r, "/rope/head_dim", json_integer(hd));
    return 0;
  }
  if (first_int(r, heads_k, NULL, &heads) < 0 ||
      first_int(r, hidden_k, NULL, &hidden) < 0)
    return -1;
  if (heads > 0 && hidden > 0) {
    first_int(r, heads_k, "/rope/head_dim", &heads);
    first_int(r, hidden_k, "/rope/head_dim", &hidden);
    /* Hugging Face divides with //. */
    put(r, "/rope/head_dim", json_integer(hidden / heads));
  }
  return 0;
}

static int resolve_theta(struct rd *r, int slides, const json_t *rp)
{
  const struct srv_family *f = r->m->family;
  double theta = 0;
  int got = 0;

  if (rp) {
    const json_t *t = json_object_get(rp, "rope_theta");
    if (t) {
      if (!json_is_number(t) || !(json_number_value(t) > 0))
        return bad(r, "rope_parameters", t, "an object with a positive "
                                            "rope_theta");
      put(r, "/rope/rope_theta", json_real(json_number_value(t)));
      return 0;
    }
  }
  if (f && f->pattern == SRV_LP_MODERNBERT) {
    if (slides)
      got = num(r, "local_rope_theta", "/rope/rope_theta", 1, &theta);
    if (got == 0)
      got = num(r, "global_rope_theta", "/rope/rope_theta", 1, &theta);
  } else if (f && f->pattern == SRV_LP_GEMMA3 && slides) {
    got = num(r, "rope_local_base_freq", "/rope/rope_theta", 1, &theta);
  } else {
    int dflt;
    if (lookup(r, "rotary_emb_base", &dflt))
      got = num(r, "rotary_emb_base", "/rope/rope_theta", 1, &theta);
    if (got == 0)
      got = num(r, "rope_theta", "/rope/rope_theta", 1, &theta);
  }
  if (got < 0)
    return -1;
  if (got)
    put(r, "/rope/rope_theta", json_real(theta));
  return 0;
}

/* partial_rotary_factor / rotary_pct / rotary_dim. */
static int resolve_partial(struct rd *r)
{
  double f;
  int64_t rd;
  int got;

  if (is_deepseek(r))
    return 0; /* rotary_dim = qk_rope_head_dim, set with head_dim */
  got = num(r, "partial_rotary_factor", "/rope/partial_rotary_factor", 1, &f);
  if (got == 0)
    got = num(r, "rotary_pct", "/rope/partial_rotary_factor", 1, &f);
  if (got < 0)
    return -1;
  if (got) {
    put(r, "/rope/partial_rotary_factor", json_real(f));
    return 0;
  }
  if ((got = integer(r, "rotary_dim", "/rope/rotary_dim", 2, &rd)) < 0)
    return -1;
  if (got)
    put(r, "/rope/rotary_dim", json_integer(rd));
  return 0;
}

static int resolve_pairing(struct rd *r)
{
  const struct srv_family *f = r->m->family;
  int inter;

  if (!f)
    return 0;
  note(r, "/rope/interleaved", "model_type");
  inter = f->interleaved;
  if (strcmp(f->model_type, "deepseek_v3") == 0 &&
      boolean(r, "rope_interleave", "/rope/interleaved", &inter) < 0)
    return -1;
  put(r, "/rope/interleaved", json_boolean(inter));
  return 0;
}

/* The rope_scaling of this layer: the config's (or rope_parameters'),
 * except on the layers a family leaves unscaled. */
static int resolve_scaling(struct rd *r, int slides, const json_t *rp)
{
  const struct srv_family *f = r->m->family;
  const json_t *sc;

  if (f && ((f->pattern == SRV_LP_GEMMA3 && slides) ||
            f->pattern == SRV_LP_MODERNBERT)) {
    /* Gemma 3's local layers and ModernBERT use plain RoPE. */
    if (get(r, "rope_scaling", "/rope/rope_scaling"))
      note(r, "/rope/rope_scaling", "model_type");
    return 0;
  }
  if (rp) {
    /* Everything but the base (and the partial factor, read apart). */
    json_t *copy = json_deep_copy(rp);
    const json_t *type = json_object_get(copy, "rope_type");
    json_object_del(copy, "rope_theta");
    json_object_del(copy, "partial_rotary_factor");
    if (json_object_size(copy) == 0 ||
        (json_object_size(copy) == 1 && json_is_string(type) &&
         strcmp(json_string_value(type), "default") == 0)) {
      json_decref(copy);
      return 0;
    }
    put(r, "/rope/rope_scaling", copy);
    return 0;
  }
  sc = get(r, "rope_scaling", "/rope/rope_scaling");
  if (!sc || json_is_null(sc))
    return 0;
  if (!json_is_object(sc))
    return bad(r, "rope_scaling", sc, "an object or null");
  put(r, "/rope/rope_scaling", json_deep_copy(sc));
  return 0;
}

/* DeepSeek: scale = (qk_nope_head_dim + qk_rope_head_dim)^-0.5, times
 * mscale(factor, mscale_all_dim)^2 under YaRN scaling. */
static int resolve_deepseek_scale(struct rd *r)
{
  int64_t nope = 0, rope = 0;
  const json_t *sc;
  double scale, factor, all;

  if (!is_deepseek(r))
    return 0;
  if (integer(r, "qk_nope_head_dim", "/scale", 0, &nope) < 0 ||
      integer(r, "qk_rope_head_dim", "/scale", 1, &rope) < 0)
    return -1;
  if (nope + rope < 1)
    return 0;
  scale = 1.0 / sqrt((double)(nope + rope));
  sc = get(r, "rope_scaling", NULL);
  if (json_is_object(sc)) {
    const json_t *f = json_object_get(sc, "factor");
    const json_t *a = json_object_get(sc, "mscale_all_dim");
    factor = json_is_number(f) ? json_number_value(f) : 1;
    all = json_is_number(a) ? json_number_value(a) : 0;
    if (all != 0 && factor > 1) {
      double m = 0.1 * all * log(factor) + 1.0;
      scale *= m * m;
      note(r, "/scale", "rope_scaling");
    }
  }
  put(r, "/scale", json_real(scale));
  return 0;
}

static int resolve_rope(struct rd *r, int slides)
{
  static const char *const maxpos_k[] = {"max_position_embeddings",
                                         "n_positions", "max_seq_len", NULL};
  const json_t *rp = rope_parameters(r);
  int64_t v = 0; /* stays 0 when no spelling is present */

  if (resolve_head_dim(r) != 0 || resolve_theta(r, slides, rp) != 0 ||
      resolve_partial(r) != 0 || resolve_pairing(r) != 0)
    return -1;
  if (first_int(r, maxpos_k, "/rope/max_position_embeddings", &v) < 0)
    return -1;
  if (v > 0)
    put(r, "/rope/max_position_embeddings", json_integer(v));
  v = 0;
  if (integer(r, "original_max_position_embeddings",
              "/rope/original_max_position_embeddings", 1, &v) < 0)
    return -1;
  if (v > 0)
    put(r, "/rope/original_max_position_embeddings", json_integer(v));
  if (resolve_scaling(r, slides, rp) != 0)
    return -1;
  return resolve_deepseek_scale(r);
}

/* ==== biases, scores, masks ============================================= */

static int resolve_bias(struct rd *r, int decoder)
{
  if (r->m->pos == SRV_POS_ALIBI) {
    double mb = 8;
    int got = 0;
    put(r, "/bias/method", json_string("alibi"));
    note(r, "/bias/method", "model_type");
    if (strcmp(r->m->family->model_type, "mpt") == 0) {
      note(r, "/bias/method", "attn_config.alibi");
      if ((got = num(r, "attn_config.alibi_bias_max", "/bias/max_bias", 1,
                     &mb)) < 0)
        return -1;
    }
    if (!got)
      note(r, "/bias/max_bias", "model_type");
    put(r, "/bias/max_bias", json_real(mb));
    return 0;
  }
  if (r->m->pos == SRV_POS_T5) {
    int64_t v = 0; /* stays 0 when the key is absent or null */
    put(r, "/bias/method", json_string("t5"));
    note(r, "/bias/method", "model_type");
    note(r, "/bias/bidirectional", "is_decoder");
    put(r, "/bias/bidirectional", json_boolean(!decoder));
    if (integer(r, "relative_attention_num_buckets",
                "/bias/relative_attention_num_buckets", 1, &v) < 0)
      return -1;
    if (v > 0)
      put(r, "/bias/relative_attention_num_buckets", json_integer(v));
    v = 0;
    if (integer(r, "relative_attention_max_distance",
                "/bias/relative_attention_max_distance", 1, &v) < 0)
      return -1;
    if (v > 0)
      put(r, "/bias/relative_attention_max_distance", json_integer(v));
    /* T5 does not scale its scores. */
    note(r, "/scale", "model_type");
    put(r, "/scale", json_real(1.0));
  }
  return 0;
}

static int resolve_scores(struct rd *r)
{
  double v;
  int got;

  if ((got = num(r, "attn_logit_softcapping", "/softcap", 0, &v)) < 0)
    return -1;
  if (got && v > 0)
    put(r, "/softcap", json_real(v));
  if ((got = num(r, "query_pre_attn_scalar", "/scale", 1, &v)) < 0)
    return -1;
  if (got)
    put(r, "/scale", json_real(1.0 / sqrt(v)));
  if ((got = num(r, "attn_config.softmax_scale", "/scale", 1, &v)) < 0)
    return -1;
  if (got)
    put(r, "/scale", json_real(v));
  return 0;
}

/* ==== the resolver ====================================================== */

static int resolve_family(struct rd *r)
{
  const json_t *mt = json_object_get(r->eff, "model_type");
  char ptr[192], list[1024];
  size_t n = 0;
  int i;

  if (!mt || json_is_null(mt))
    return 0;
  if (json_is_string(mt))
    r->m->family = srv_family_find(json_string_value(mt));
  if (r->m->family) {
    r->defs = srv_family_defaults(r->m->family);
    return 0;
  }
  list[0] = '\0';
  for (i = 0; i < srv_nfamilies && n + 1 < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                          srv_families[i].model_type);
  if (!json_is_string(mt))
    return bad(r, "model_type", mt, "a string");
  return srv_fail(r->err, 400, key_ptr(r, "model_type", ptr, sizeof ptr),
                  "model_type \"%.60s\" is not a family attnbias knows (%s): "
                  "give attnbias's own fields instead",
                  json_string_value(mt), list);
}

/* Position kind of a config without a known model_type: by its keys. */
static enum srv_pos_kind guess_pos(const struct rd *r)
{
  static const char *const rope_keys[] = {
      "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
      "rotary_dim", "rotary_pct", "rotary_emb_base", NULL};
  int i;

  for (i = 0; rope_keys[i]; i++)
    if (json_object_get(r->eff, rope_keys[i]))
      return SRV_POS_ROPE;
  if (json_object_get(r->eff, "relative_attention_num_buckets"))
    return SRV_POS_T5;
  return SRV_POS_UNKNOWN;
}

static int resolve(struct rd *r)
{
  static const char *const layers_k[] = {"num_hidden_layers", "n_layer",
                                         "n_layers", "num_layers", NULL};
  static const char *const heads_k[] = {"num_attention_heads", "n_head",
                                        "n_heads", "num_heads", NULL};
  struct srv_model *m = r->m;
  int slides = 0, decoder = 0;
  int64_t heads = 0;

  if (resolve_family(r) != 0 || classify(r, r->eff, "") != 0)
    return -1;
  if (m->family && m->family->upstream) {
    char list[64], *save = NULL, *tok;
    snprintf(list, sizeof list, "%s", m->family->upstream);
    for (tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
      add_unique(m->upstream, tok);
  }
  if (first_int(r, layers_k, NULL, &m->num_layers) < 0)
    return -1;
  if (m->num_layers > 0 && m->layer >= m->num_layers)
    return srv_fail(r->err, 400, "/layer",
                    "layer %lld does not exist: the model has %lld layers "
                    "(0..%lld)",
                    (long long)m->layer, (long long)m->num_layers,
                    (long long)m->num_layers - 1);
  if (layer_slides(r, &slides) != 0)
    return -1;
  m->layer_type = slides ? "sliding_attention" : "full_attention";
  m->pos = m->family ? m->family->pos : guess_pos(r);

  if (m->family && m->family->causal >= 0) {
    note(r, "/causal", "model_type");
    put(r, "/causal", json_boolean(m->family->causal));
  } else if (m->family || m->pos == SRV_POS_T5) {
    if (boolean(r, "is_decoder", "/causal", &decoder) < 0)
      return -1;
    put(r, "/causal", json_boolean(decoder));
  }
  if (resolve_window(r, slides) != 0)
    return -1;
  if (first_int(r, heads_k, "/num_heads", &heads) < 0)
    return -1;
  if (heads > 0)
    put(r, "/num_heads", json_integer(heads));
  if (m->pos == SRV_POS_ROPE && resolve_rope(r, slides) != 0)
    return -1;
  if (resolve_bias(r, decoder) != 0)
    return -1;
  return resolve_scores(r);
}

int srv_model_resolve(const json_t *config, const json_t *origins,
                      int64_t layer, struct srv_model *m,
                      struct srv_err *err)
{
  struct rd r;
  int rc;

  memset(m, 0, sizeof *m);
  memset(&r, 0, sizeof r);
  m->layer = layer;
  m->layer_type = "full_attention";
  m->params = json_object();
  m->sources = json_object();
  m->upstream = json_array();
  m->ignored = json_array();
  r.m = m;
  r.err = err;
  err->http = 0;
  if (!m->params || !m->sources || !m->upstream || !m->ignored)
    return srv_fail(err, 500, NULL, "out of memory reading the config");
  if (!json_is_object(config))
    return srv_fail(err, 400, "/config", "config must be an object (a "
                                         "config.json)");
  if (layer < 0)
    return srv_fail(err, 400, "/layer", "layer must be >= 0, got %lld",
                    (long long)layer);
  rc = flatten(&r, config, origins) == 0 ? resolve(&r) : -1;
  json_decref(r.eff); /* m->where stays: errors name keys by it */
  return rc;
}

void srv_model_free(struct srv_model *m)
{
  json_decref(m->params);
  json_decref(m->sources);
  json_decref(m->upstream);
  json_decref(m->ignored);
  json_decref(m->where);
  memset(m, 0, sizeof *m);
}
