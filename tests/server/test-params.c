/* test-params.c: the table-driven parameter parser (types, ranges,
 * defaults, JSON pointers in errors, the ignored list), the tables'
 * agreement with the library (defaults, names), the catalog, budgets and
 * outputs, and two handlers end to end against float64 references. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"
#include "codec/codec-internal.h"
#include "handlers/params.h"
#include "srv.h"
#include "test.h"

/* ==== a fake call ======================================================= */

static void call_init(struct srv_call *c, const char *json)
{
  json_error_t je;

  srv_call_init(c, NULL);
  c->in.params = json_loads(json, 0, &je);
  if (!c->in.params) {
    fprintf(stderr, "  bad test JSON: %s (%s)\n", je.text, json);
    c->in.params = json_object();
  }
  c->in.fmt = SRV_FMT_JSON;
}

static void call_free(struct srv_call *c)
{
  srv_call_release(c);
}

static const char *ignored(const struct srv_call *c)
{
  return c->in.ignored.data ? c->in.ignored.data : "";
}

/* ==== a table with one parameter of every kind ========================== */

struct kinds {
  int64_t i;
  double num, zd;
  int flag, choice;
  unsigned set;
  const char *str;
  const json_t *ints, *pos, *obj, *layers, *req;
};
#define KO(f) offsetof(struct kinds, f)

static const struct srv_choice abc[] = {
    {"a", 0, "first"}, {"b", 1, NULL}, {"c", 2, NULL}, {NULL, 0, NULL}};

static const struct srv_param kind_params[] = {
    {.name = "i", .type = SRV_PT_INT, .flags = SRV_PF_DEF | SRV_PF_MIN |
                                               SRV_PF_MAX,
     .def = 7, .min = -3, .max = 100, .off = KO(i), .desc = "an int"},
    {.name = "num", .alias = "n", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_MIN_EXCL | SRV_PF_MAX_EXCL, .def = 0.5,
     .min = 0, .max = 1, .off = KO(num), .desc = "a fraction"},
    {.name = "zd", .type = SRV_PT_NUM,
     .flags = SRV_PF_DEF | SRV_PF_ZERO_DEF | SRV_PF_MIN, .def = 32, .min = 0,
     .off = KO(zd), .desc = "0 means 32"},
    {.name = "flag", .type = SRV_PT_BOOL, .flags = SRV_PF_DEF, .def = 1,
     .off = KO(flag), .desc = "a flag"},
    {.name = "choice", .type = SRV_PT_ENUM, .flags = SRV_PF_DEF, .def = 1,
     .choices = abc, .off = KO(choice), .desc = "a choice"},
    {.name = "set", .type = SRV_PT_ENUMS, .flags = SRV_PF_DEF, .def = 1,
     .choices = abc, .off = KO(set), .desc = "a set"},
    {.name = "str", .type = SRV_PT_STR, .off = KO(str), .desc = "text"},
    {.name = "ints", .type = SRV_PT_INTS, .flags = SRV_PF_MIN, .min = -1,
     .off = KO(ints), .desc = "ints"},
    {.name = "pos", .type = SRV_PT_POSITIONS, .off = KO(pos), .desc = "pos"},
    {.name = "obj", .type = SRV_PT_OBJECT, .off = KO(obj), .desc = "obj"},
    {.name = "layers", .type = SRV_PT_LAYERS, .off = KO(layers),
     .desc = "layers"},
    {.name = "req", .type = SRV_PT_OBJECT, .flags = SRV_PF_REQ,
     .off = KO(req), .desc = "required"},
};
static const struct srv_ptable kind_table =
    SRV_PTABLE("kinds", "one of each", kind_params);

/* Parse json with kind_table at the root (or below `child`); returns the
 * parser's result and leaves err/k filled. */
static int parse_kinds(const char *json, const char *child, struct kinds *k,
                       struct srv_err *err, struct srv_call *c)
{
  struct srv_pctx pc, sub;
  struct srv_pbind b = {&kind_table, k, 0};
  const json_t *obj;

  call_init(c, json);
  memset(k, 0, sizeof *k);
  memset(err, 0, sizeof *err);
  if (srv_pctx_root(c, &pc, err) != 0)
    return -2;
  obj = c->in.params;
  if (child) {
    srv_pctx_child(&pc, child, &sub);
    obj = json_object_get(c->in.params, child);
    return srv_params_parse(&sub, obj, &b, err);
  }
  return srv_params_parse(&pc, obj, &b, err);
}

TEST(params_parse_every_kind)
{
  struct srv_call c;
  struct srv_err err;
  struct kinds k;
  struct srv_pbind b = {&kind_table, &k, 0};
  struct srv_pctx pc;

  CHECK_EQ_I64(parse_kinds("{\"i\": -3, \"n\": 0.25, \"zd\": 0, \"flag\": "
                           "false, \"choice\": \"c\", \"set\": [\"a\", "
                           "\"c\"], \"str\": \"s\", \"ints\": [1, -1], "
                           "\"pos\": 4, \"obj\": {}, \"layers\": [{}], "
                           "\"req\": {}}",
                           NULL, &k, &err, &c),
               0);
  CHECK_EQ_I64(k.i, -3);
  CHECK(k.num == 0.25);
  CHECK(k.zd == 32); /* 0 means the default */
  CHECK_EQ_I64(k.flag, 0);
  CHECK_EQ_I64(k.choice, 2);
  CHECK_EQ_I64(k.set, 5u);
  CHECK_STR(k.str, "s");
  CHECK_EQ_I64(json_array_size(k.ints), 2);
  CHECK(json_is_integer(k.pos));
  CHECK(json_is_object(k.obj));
  CHECK(json_is_array(k.layers));
  call_free(&c);

  /* Absent and null members take the defaults; seen bits say which were
   * given; an integral real is an integer. */
  call_init(&c, "{\"i\": 12.0, \"num\": null, \"req\": {}}");
  srv_pctx_root(&c, &pc, &err);
  memset(&k, 0, sizeof k);
  CHECK_EQ_I64(srv_params_parse(&pc, c.in.params, &b, &err), 0);
  CHECK_EQ_I64(k.i, 12);
  CHECK(k.num == 0.5);
  CHECK(k.zd == 32);
  CHECK_EQ_I64(k.flag, 1);
  CHECK_EQ_I64(k.choice, 1);
  CHECK_EQ_I64(k.set, 1u);
  CHECK(k.str == NULL && k.ints == NULL);
  CHECK(srv_pbind_seen(&b, "i"));
  CHECK(!srv_pbind_seen(&b, "num"));
  CHECK(!srv_pbind_seen(&b, "flag"));
  CHECK(!srv_pbind_seen(&b, "nonexistent"));
  call_free(&c);
  return 0;
}

/* Every bad value is a 400 whose field is the JSON pointer of the member
 * (below nested objects too) and whose detail names the value. */
TEST(params_errors_name_the_pointer)
{
  static const struct {
    const char *json, *child, *field, *detail;
  } cases[] = {
      {"{\"i\": \"x\", \"req\": {}}", NULL, "/i", "\"x\""},
      {"{\"i\": 1.5, \"req\": {}}", NULL, "/i", "integer"},
      {"{\"i\": 101, \"req\": {}}", NULL, "/i", "<= 100"},
      {"{\"i\": -4, \"req\": {}}", NULL, "/i", ">= -3"},
      {"{\"num\": 0, \"req\": {}}", NULL, "/num", "> 0"},
      {"{\"n\": 1, \"req\": {}}", NULL, "/n", "< 1"},
      {"{\"num\": \"inf\", \"req\": {}}", NULL, "/num", "finite"},
      {"{\"num\": 0.2, \"n\": 0.3, \"req\": {}}", NULL, "/n", "disagree"},
      {"{\"zd\": -1, \"req\": {}}", NULL, "/zd", ">= 0"},
      {"{\"flag\": 1, \"req\": {}}", NULL, "/flag", "boolean"},
      {"{\"choice\": \"d\", \"req\": {}}", NULL, "/choice", "a, b, c"},
      {"{\"choice\": 2, \"req\": {}}", NULL, "/choice", "string"},
      {"{\"set\": [], \"req\": {}}", NULL, "/set", "non-empty"},
      {"{\"set\": [\"a\", \"q\"], \"req\": {}}", NULL, "/set/1", "\"q\""},
      {"{\"str\": 5, \"req\": {}}", NULL, "/str", "string"},
      {"{\"ints\": [0, -2], \"req\": {}}", NULL, "/ints/1", ">= -1"},
      {"{\"ints\": [0, 0.5], \"req\": {}}", NULL, "/ints/1", "integer"},
      {"{\"ints\": 3, \"req\": {}}", NULL, "/ints", "array of integers"},
      {"{\"pos\": 0, \"req\": {}}", NULL, "/pos", ">= 1"},
      {"{\"pos\": [], \"req\": {}}", NULL, "/pos", "empty"},
      {"{\"pos\": \"all\", \"req\": {}}", NULL, "/pos", "list"},
      {"{\"obj\": [], \"req\": {}}", NULL, "/obj", "object"},
      {"{\"layers\": [{}, 3], \"req\": {}}", NULL, "/layers/1", "object"},
      {"{}", NULL, "/req", "required"},
      {"{\"req\": null}", NULL, "/req", "required"},
      {"{\"a/b~c\": {\"i\": true, \"req\": {}}}", "a/b~c", "/a~1b~0c/i",
       "true"},
  };
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct srv_call c;
    struct srv_err err;
    struct kinds k;
    int r = parse_kinds(cases[i].json, cases[i].child, &k, &err, &c);

    if (r != -1 || err.http != 400 || strcmp(err.field, cases[i].field) != 0 ||
        !strstr(err.detail, cases[i].detail)) {
      fprintf(stderr, "  case %zu %s: r=%d http=%d field=%s detail=%s\n", i,
              cases[i].json, r, err.http, err.field, err.detail);
      call_free(&c);
      return 1;
    }
    call_free(&c);
  }
  return 0;
}

/* Unknown members are listed by name, nested ones by dotted path, with
 * what a header list cannot carry percent-encoded (srv_config_ignore):
 * the separators ',' and '.', '%', control bytes and non-ASCII. */
TEST(params_unknown_members_are_listed_safely)
{
  struct srv_call c;
  struct srv_err err;
  struct srv_pctx pc, sub;
  const struct srv_ptable *tabs[2] = {&kind_table, &srv_ptab_output};
  static const char *const extra[] = {"also", NULL};

  call_init(&c, "{\"i\": 1, \"zz\": 2, \"a,b\": 3, \"nl\\nx\": 4, "
                "\"\\u00e9\": 5, \"p%\": 6, \"also\": 7, \"output_dtype\": "
                "\"float16\", \"encoding\": \"b64\", \"output\": \"x\", "
                "\"obj\": {\"deep/er\": 1}}");
  CHECK_EQ_I64(srv_pctx_root(&c, &pc, &err), 0);
  srv_params_unknown(&pc, c.in.params, tabs, 2, extra);
  srv_pctx_child(&pc, "obj", &sub);
  srv_params_unknown(&sub, json_object_get(c.in.params, "obj"), NULL, 0, NULL);
  CHECK_STR(ignored(&c), "zz,a%2Cb,nl%0Ax,%C3%A9,p%25,obj.deep/er");
  call_free(&c);
  return 0;
}

TEST(params_ignored_list_is_capped)
{
  struct srv_call c;
  struct srv_err err;
  struct srv_pctx pc;
  json_t *o = json_object();
  char name[32], *text;
  int i;

  for (i = 0; i < 2000; i++) {
    snprintf(name, sizeof name, "unknown_%d", i);
    json_object_set_new(o, name, json_true());
  }
  text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  call_init(&c, text);
  free(text);
  srv_pctx_root(&c, &pc, &err);
  srv_params_unknown(&pc, c.in.params, NULL, 0, NULL);
  CHECK(c.in.ignored.len < 2100);
  CHECK(c.in.ignored.len > 1000);
  CHECK(c.in.ignored.data &&
        memcmp(c.in.ignored.data + c.in.ignored.len - 4, ",...", 4) == 0);
  CHECK(strncmp(ignored(&c), "unknown_0,unknown_1,", 20) == 0);
  call_free(&c);
  return 0;
}

/* ==== the real tables against the library =============================== */

/* Every parameter with a default stores, into a struct the library
 * initialised, the value that is already there: the catalog's defaults are
 * the library's. */
static int defaults_agree(const struct srv_ptable *t, const void *init,
                          size_t size)
{
  int i;

  for (i = 0; i < t->n; i++) {
    const struct srv_param *p = &t->p[i];
    const char *f = (const char *)init + p->off;
    double have;

    if (!(p->flags & SRV_PF_DEF) || (p->flags & SRV_PF_NOSTORE))
      continue;
    switch (p->type) {
    case SRV_PT_INT: {
      int64_t x;
      if (p->off + sizeof x > size)
        goto outside;
      memcpy(&x, f, sizeof x);
      have = (double)x;
      break;
    }
    case SRV_PT_NUM:
      if (p->off + sizeof have > size)
        goto outside;
      memcpy(&have, f, sizeof have);
      break;
    default: {
      int x;
      if (p->off + sizeof x > size)
        goto outside;
      memcpy(&x, f, sizeof x);
      have = x;
      break;
    }
    }
    if (have != p->def) {
      fprintf(stderr, "  %s.%s: table default %g, library %g\n", t->name,
              p->name, p->def, have);
      return 0;
    }
  }
  return 1;
outside:
  fprintf(stderr, "  %s: a default lies outside the library struct\n",
          t->name);
  return 0;
}

TEST(params_defaults_are_the_librarys)
{
  struct srv_rope_cfg cfg;
  struct ab_bias_params bp;
  struct ab_encoding_params ep;
  int i;

  memset(&cfg, 0, sizeof cfg);
  ab_rope_params_init(&cfg.p);
  /* srv_rope_cfg's own fields have no defaults; p comes first. */
  CHECK(defaults_agree(&srv_ptab_rope_config, &cfg, sizeof cfg.p));
  CHECK(defaults_agree(&srv_ptab_rope_scaling, &cfg, sizeof cfg.p));
  for (i = 0; i < srv_ptab_rope_ntypes; i++)
    CHECK(defaults_agree(srv_ptab_rope_types[i], &cfg, sizeof cfg.p));
  ab_bias_params_init(&bp);
  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++)
    CHECK(defaults_agree(srv_bias_method_params((enum ab_bias_method)i), &bp,
                         sizeof bp));
  ab_encoding_params_init(&ep);
  for (i = 0; i < srv_ptab_enc_nmethods; i++)
    CHECK(defaults_agree(srv_ptab_enc_methods[i], &ep, sizeof ep));
  return 0;
}

TEST(params_tables_name_every_method)
{
  const struct srv_param *sel =
      srv_ptable_find(&srv_ptab_rope_scaling, "rope_type");
  const struct srv_choice *ch;
  int i;

  CHECK_EQ_I64(srv_ptab_rope_ntypes, AB_ROPE_TYPE_LAST_);
  for (i = 0; i < srv_ptab_rope_ntypes; i++)
    CHECK_STR(srv_ptab_rope_types[i]->name,
              ab_rope_type_name((enum ab_rope_type)i));
  /* Every accepted rope_type name (aliases too) means what the library's
   * own parser says. */
  CHECK(sel != NULL);
  for (ch = sel->choices; ch->name; ch++)
    CHECK_EQ_I64(ch->value, ab_rope_type_parse(ch->name));
  /* Every bias method has its parameter table and its choice of "method",
   * under the library's name, and nothing else is a choice. */
  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++) {
    const struct srv_ptable *t = srv_bias_method_params((enum ab_bias_method)i);
    CHECK(t != NULL);
    CHECK_STR(t->name, ab_bias_method_name((enum ab_bias_method)i));
    CHECK_STR(srv_param_bias_method.choices[i].name,
              ab_bias_method_name((enum ab_bias_method)i));
  }
  CHECK(srv_bias_method_params(AB_BIAS_METHOD_LAST_) == NULL);
  for (ch = srv_param_bias_method.choices; ch->name; ch++)
    CHECK_EQ_I64(ch->value, ab_bias_method_parse(ch->name));
  CHECK_EQ_I64(ch - srv_param_bias_method.choices, AB_BIAS_METHOD_LAST_);
  /* The parser's presence bits cover 64 parameters per table. */
  CHECK(srv_ptab_rope_config.n <= 64 && srv_ptab_rope_request.n <= 64);
  CHECK(srv_ptab_bias_common.n <= 64 && srv_ptab_attention.n <= 64);
  CHECK(srv_ptab_enc_common.n <= 64 && srv_ptab_rope_scaling.n <= 64);
  CHECK_EQ_I64(srv_ptab_enc_nmethods, 4);
  CHECK_STR(srv_ptab_enc_methods[AB_ENC_SINUSOIDAL]->name, "sinusoidal");
  CHECK_STR(srv_ptab_enc_methods[AB_ENC_LEARNED]->name, "learned");
  CHECK_STR(srv_ptab_enc_methods[AB_ENC_INTEGER]->name, "integer");
  CHECK_STR(srv_ptab_enc_methods[AB_ENC_BINARY]->name, "binary");
  return 0;
}

/* ==== catalog =========================================================== */

TEST(params_catalog_entries)
{
  json_t *o, *e;

  o = srv_params_catalog_param(&kind_params[1]); /* num */
  CHECK_STR(json_string_value(json_object_get(o, "type")), "number");
  CHECK(json_is_false(json_object_get(o, "required")));
  CHECK(json_number_value(json_object_get(o, "default")) == 0.5);
  CHECK(json_number_value(json_object_get(o, "exclusiveMinimum")) == 0);
  CHECK(json_number_value(json_object_get(o, "exclusiveMaximum")) == 1);
  CHECK(!json_object_get(o, "minimum"));
  CHECK_STR(json_string_value(json_array_get(json_object_get(o, "aliases"), 0)),
            "n");
  json_decref(o);

  o = srv_params_catalog_param(&kind_params[0]); /* i */
  CHECK(json_is_integer(json_object_get(o, "default")));
  CHECK_EQ_I64(json_integer_value(json_object_get(o, "minimum")), -3);
  CHECK_EQ_I64(json_integer_value(json_object_get(o, "maximum")), 100);
  json_decref(o);

  o = srv_params_catalog_param(&kind_params[4]); /* choice */
  CHECK_STR(json_string_value(json_object_get(o, "default")), "b");
  CHECK_EQ_I64(json_array_size(json_object_get(o, "enum")), 3);
  e = json_object_get(o, "enum_descriptions");
  CHECK_STR(json_string_value(json_object_get(e, "a")), "first");
  json_decref(o);

  o = srv_params_catalog_param(&kind_params[5]); /* set */
  e = json_object_get(o, "default");
  CHECK(json_is_array(e) && json_array_size(e) == 1);
  CHECK_STR(json_string_value(json_array_get(e, 0)), "a");
  json_decref(o);

  o = srv_params_catalog_param(&kind_params[7]); /* ints */
  CHECK_EQ_I64(json_integer_value(
                   json_object_get(json_object_get(o, "items"), "minimum")),
               -1);
  json_decref(o);

  o = srv_params_catalog_param(&kind_params[11]); /* req */
  CHECK(json_is_true(json_object_get(o, "required")));
  CHECK(!json_object_get(o, "default"));
  json_decref(o);
  return 0;
}

/* The whole catalog through the handler: valid JSON with every method. */
TEST(params_methods_handler)
{
  struct srv_call c;
  struct srv_err err;
  json_t *root, *rt, *e;
  size_t i;
  int found_yarn = 0;

  call_init(&c, "{}");
  CHECK_EQ_I64(srv_h_methods(&c, &err), 0);
  CHECK_STR(c.plan.custom_type, "application/json");
  root = json_loadb(c.plan.custom.data, c.plan.custom.len, 0, NULL);
  CHECK(root != NULL);
  rt = json_object_get(json_object_get(root, "rope"), "rope_types");
  CHECK_EQ_I64(json_array_size(rt), AB_ROPE_TYPE_LAST_);
  json_array_foreach(rt, i, e) {
    if (strcmp(json_string_value(json_object_get(e, "name")), "yarn") == 0) {
      json_t *ps = json_object_get(e, "parameters"), *p;
      size_t k;
      found_yarn = 1;
      json_array_foreach(ps, k, p) {
        if (strcmp(json_string_value(json_object_get(p, "name")),
                   "beta_fast") == 0)
          CHECK(json_number_value(json_object_get(p, "default")) == 32);
      }
    }
  }
  CHECK(found_yarn);
  CHECK_EQ_I64(json_array_size(json_object_get(json_object_get(root, "bias"),
                                               "methods")),
               AB_BIAS_METHOD_LAST_);
  CHECK_EQ_I64(
      json_array_size(json_object_get(json_object_get(root, "encodings"),
                                      "methods")),
      4);
  CHECK(json_is_array(
      json_object_get(json_object_get(root, "attention"), "parameters")));
  json_decref(root);
  call_free(&c);
  return 0;
}

/* ==== positions ========================================================= */

TEST(params_rope_positions_forms)
{
  struct srv_call c;
  struct srv_err err;
  int64_t *pos, n, mx;

  call_init(&c, "{\"count\": 3, \"flat\": [4, -2, 7.0], \"rows\": [[1, 2], "
                "[3, 4], [5, 9]], \"ragged\": [[1, 2], [3]], \"frac\": [1, "
                "2.5], \"huge\": [1e300]}");
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "count"),
                                  "/p", 2, 1, 0, &pos, &n, &mx, &err),
               0);
  CHECK_EQ_I64(n, 3);
  CHECK_EQ_I64(mx, 2);
  CHECK(pos[0] == 0 && pos[2] == 2 && pos[3] == 0 && pos[5] == 2);

  /* A flat list serves every axis (text tokens of multi-axis RoPE). */
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "flat"),
                                  "/p", 3, 1, 3, &pos, &n, &mx, &err),
               0);
  CHECK_EQ_I64(mx, 7);
  CHECK(pos[1] == -2 && pos[4] == -2 && pos[8] == 7);

  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "rows"),
                                  "/p", 3, 1, 0, &pos, &n, &mx, &err),
               0);
  CHECK_EQ_I64(n, 2);
  CHECK_EQ_I64(mx, 9);
  CHECK(pos[0] == 1 && pos[3] == 4 && pos[5] == 9);

  /* Errors, each naming the offending pointer. */
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "rows"),
                                  "/p", 2, 1, 0, &pos, &n, &mx, &err),
               -1);
  CHECK_STR(err.field, "/p");
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "ragged"),
                                  "/p", 2, 1, 0, &pos, &n, &mx, &err),
               -1);
  CHECK_STR(err.field, "/p/1");
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "frac"),
                                  "/p", 1, 1, 0, &pos, &n, &mx, &err),
               -1);
  CHECK_STR(err.field, "/p/1");
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "huge"),
                                  "/p", 1, 1, 0, &pos, &n, &mx, &err),
               -1);
  CHECK_STR(err.field, "/p/0");
  /* vision2d: a flat list is not [2, n]. */
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "flat"),
                                  "/p", 2, 0, 0, &pos, &n, &mx, &err),
               -1);
  CHECK_EQ_I64(err.http, 400);
  /* The tensors fix n. */
  CHECK_EQ_I64(srv_rope_positions(&c, json_object_get(c.in.params, "count"),
                                  "/p", 1, 1, 4, &pos, &n, &mx, &err),
               -1);
  CHECK(strstr(err.detail, "3 positions") != NULL);
  /* No positions: the count form of the tensors' n, on every axis. */
  CHECK_EQ_I64(srv_rope_positions(&c, NULL, "/p", 3, 1, 4, &pos, &n, &mx,
                                  &err),
               0);
  CHECK_EQ_I64(n, 4);
  CHECK_EQ_I64(mx, 3);
  CHECK(pos[0] == 0 && pos[3] == 3 && pos[4] == 0 && pos[11] == 3);
  call_free(&c);
  return 0;
}

/* /v1/rope with q but no positions rotates q at 0..n-1 along its sequence
 * axis: here [S, H, D] in bshd, so n = 3 and row s of every head turns by
 * s * inv_freq.  Without q or k, and for vision2d, positions stay
 * required. */
TEST(params_rope_default_positions)
{
  struct srv_call c;
  struct srv_err err;
  const float *got;
  double ang, want;
  int s, h, k;

  call_init(&c, "{\"layout\": \"bshd\", \"q\": [[[1, 0, 0, 0], [0, 0, 1, 0]], "
                "[[1, 0, 0, 0], [0, 0, 1, 0]], [[1, 0, 0, 0], [0, 0, 1, 0]]]}");
  CHECK_EQ_I64(srv_h_rope(&c, &err), 0);
  CHECK_EQ_I64(c.plan.njobs, 1);
  CHECK_OK(ab_job_run_all(c.plan.jobs[0]));
  got = c.plan.outputs[0].t.data;
  /* head 0 holds x0 = 1 (pair 0: x0, x2), head 1 x2 = 1. */
  for (s = 0; s < 3; s++)
    for (h = 0; h < 2; h++)
      for (k = 0; k < 4; k++) {
        ang = s * 1.0; /* pair 0: inv_freq 1 */
        want = h == 0 ? (k == 0 ? cos(ang) : k == 2 ? sin(ang) : 0)
                      : (k == 0 ? -sin(ang) : k == 2 ? cos(ang) : 0);
        CHECK_CLOSE(got[(s * 2 + h) * 4 + k], want, 1e-6, 1e-7);
      }
  call_free(&c);

  call_init(&c, "{\"head_dim\": 8}");
  CHECK_EQ_I64(srv_h_rope(&c, &err), -1);
  CHECK_STR(err.field, "/positions");
  call_free(&c);
  call_init(&c, "{\"rope_scaling\": {\"rope_type\": \"vision2d\"}, "
                "\"q\": [[1, 0, 0, 0, 0, 0, 0, 0]]}");
  CHECK_EQ_I64(srv_h_rope(&c, &err), -1);
  CHECK_STR(err.field, "/positions");
  call_free(&c);
  return 0;
}

/* ==== budgets, outputs, jobs, library errors ============================ */

TEST(params_budget_and_outputs)
{
  struct srv_call c;
  struct srv_err err;
  struct srv_config saved = srv_cfg;
  int64_t shape[2] = {4, 8}, bad[2] = {4, 0};
  float *f;
  int i;

  call_init(&c, "{}");
  srv_cfg.max_output_mb = 1;
  srv_cfg.max_gflop = 2;
  CHECK_EQ_I64(srv_check_budget(&c, 1024.0 * 1024.0, 2e9, &err), 0);
  CHECK_EQ_I64(srv_check_budget(&c, 1024.0 * 1024.0 + 1, 0, &err), -1);
  CHECK_EQ_I64(err.http, 413);
  CHECK(strstr(err.detail, "max-output-mb") != NULL);
  CHECK_EQ_I64(srv_check_budget(&c, 0, 2.1e9, &err), -1);
  CHECK_EQ_I64(err.http, 413);
  CHECK(strstr(err.detail, "max-gflop") != NULL);
  CHECK_EQ_I64(srv_check_budget(&c, NAN, 0, &err), -1);
  srv_cfg = saved;

  /* What a budget counts: the response's form and dtype, plus the float32
   * results converted from (not when they are sent as they are). */
  c.in.fmt = SRV_FMT_SAFETENSORS;
  c.in.out_dtype = AB_DTYPE_F32;
  CHECK(srv_out_bytes(&c, 10) == 40);
  c.in.out_dtype = AB_DTYPE_F16;
  CHECK(srv_out_bytes(&c, 10) == 20 + 40);
  c.in.out_dtype = AB_DTYPE_F64;
  CHECK(srv_out_bytes(&c, 10) == 80 + 40);
  c.in.fmt = SRV_FMT_JSON;
  c.in.b64 = 1; /* 30 bytes of float16 -> 40 characters */
  c.in.out_dtype = AB_DTYPE_F16;
  CHECK(srv_out_bytes(&c, 15) == 40 + 60);
  c.in.b64 = 0; /* text at its longest */
  CHECK(srv_out_bytes(&c, 10) == 10 * SRV_JSON_TXT_F32 + 40);
  c.in.out_dtype = AB_DTYPE_F64;
  CHECK(srv_out_bytes(&c, 10) == 10 * SRV_JSON_TXT_F64 + 40);
  c.in.out_dtype = AB_DTYPE_F32;

  f = srv_output_tensor(&c, "t", AB_DTYPE_F32, 2, shape, &err);
  CHECK(f != NULL);
  CHECK_EQ_I64(c.plan.noutputs, 1);
  CHECK_STR(c.plan.outputs[0].name, "t");
  CHECK_EQ_I64(c.plan.outputs[0].t.shape[1], 8);
  CHECK_EQ_I64(c.plan.outputs[0].t.stride[0], 8);
  CHECK(c.plan.outputs[0].t.data == f);
  CHECK(srv_output_tensor(&c, "z", AB_DTYPE_F32, 2, bad, &err) == NULL);
  CHECK_EQ_I64(srv_output_scalar(&c, "s", 1.5, &err), 0);
  CHECK(c.plan.outputs[1].is_scalar && c.plan.outputs[1].scalar == 1.5);
  for (i = c.plan.noutputs; i < SRV_MAX_OUTPUTS; i++)
    CHECK_EQ_I64(srv_output_scalar(&c, "more", 0, &err), 0);
  CHECK(srv_output_tensor(&c, "late", AB_DTYPE_F32, 2, shape, &err) == NULL);
  CHECK_EQ_I64(err.http, 500);
  CHECK_EQ_I64(srv_add_job(&c, NULL, &err), -1);
  call_free(&c);
  return 0;
}

TEST(params_library_errors_become_pointers)
{
  struct ab_rope_params p;
  struct srv_err err;
  int64_t rd;
  enum ab_status st;

  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rotary_dim = 7;
  st = ab_rope_check(&p, &rd, NULL, NULL);
  CHECK(st != AB_STATUS_OK);
  CHECK_EQ_I64(srv_fail_lib(&err, st, "/rope", NULL), -1);
  CHECK_EQ_I64(err.http, 400);
  CHECK_STR(err.field, "/rope/rotary_dim");
  CHECK(strstr(err.detail, "7") != NULL);

  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_LINEAR; /* factor missing */
  st = ab_rope_check(&p, &rd, NULL, NULL);
  CHECK(st != AB_STATUS_OK);
  srv_fail_lib(&err, st, "", NULL);
  CHECK_STR(err.field, "/rope_scaling/factor");
  /* A leading component equal to `strip` is dropped. */
  srv_fail_lib(&err, st, "/x", "rope_scaling");
  CHECK_STR(err.field, "/x/factor");
  return 0;
}

/* ==== two handlers end to end =========================================== */

/* Worked example 1a: sinusoidal, interleaved, d=8, positions 0..3,
 * against the formula evaluated here in double. */
TEST(params_encodings_handler_sinusoidal)
{
  struct srv_call c;
  struct srv_err err;
  double want[4 * 8];
  const float *got;
  int p, k;

  for (p = 0; p < 4; p++)
    for (k = 0; k < 4; k++) {
      double w = p * pow(10000.0, -2.0 * k / 8.0);
      want[p * 8 + 2 * k] = sin(w);
      want[p * 8 + 2 * k + 1] = cos(w);
    }
  call_init(&c, "{\"method\": \"sinusoidal\", \"positions\": 4, \"dim\": 8, "
                "\"extra\": 1}");
  CHECK_EQ_I64(srv_h_encodings(&c, &err), 0);
  CHECK_EQ_I64(c.plan.njobs, 1); /* the pool computes it */
  CHECK_OK(ab_job_run_all(c.plan.jobs[0]));
  CHECK_EQ_I64(c.plan.noutputs, 1);
  CHECK_STR(c.plan.outputs[0].name, "encoding");
  CHECK_EQ_I64(c.plan.outputs[0].t.shape[0], 4);
  CHECK_EQ_I64(c.plan.outputs[0].t.shape[1], 8);
  got = c.plan.outputs[0].t.data;
  CHECK_ARRAY(got, want, 32, 1e-6, 1e-7);
  CHECK_CLOSE(got[8 + 2], 0.09983342, 1e-6, 0); /* the example's own digits */
  CHECK_STR(ignored(&c), "extra");
  call_free(&c);

  /* Odd dim is the library's to refuse; the error names /dim. */
  call_init(&c, "{\"method\": \"sinusoidal\", \"positions\": 4, \"dim\": 7}");
  CHECK_EQ_I64(srv_h_encodings(&c, &err), -1);
  CHECK_EQ_I64(err.http, 400);
  CHECK_STR(err.field, "/dim");
  call_free(&c);
  return 0;
}

/* x + encoding through the job: x [2, 3, 4] float64, positions [0, 2, 4]. */
TEST(params_encodings_handler_adds_x)
{
  struct srv_call c;
  struct srv_err err;
  double want[24];
  const float *got;
  int b, t, k;

  call_init(&c, "{\"method\": \"sinusoidal\", \"positions\": [0, 2, 4], "
                "\"dim\": 4, \"x\": {\"shape\": [2, 3, 4], \"dtype\": "
                "\"float64\", \"data\": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,"
                "15,16,17,18,19,20,21,22,23]}}");
  CHECK_EQ_I64(srv_h_encodings(&c, &err), 0);
  CHECK_EQ_I64(c.plan.njobs, 1);
  CHECK_OK(ab_job_run_all(c.plan.jobs[0]));
  CHECK_STR(c.plan.outputs[0].name, "x");
  CHECK_EQ_I64(c.plan.outputs[0].t.ndim, 3);
  for (b = 0; b < 2; b++)
    for (t = 0; t < 3; t++)
      for (k = 0; k < 2; k++) {
        double w = 2.0 * t * pow(10000.0, -2.0 * k / 4.0);
        want[b * 12 + t * 4 + 2 * k] = b * 12 + t * 4 + 2 * k + sin(w);
        want[b * 12 + t * 4 + 2 * k + 1] = b * 12 + t * 4 + 2 * k + 1 + cos(w);
      }
  got = c.plan.outputs[0].t.data;
  CHECK_ARRAY(got, want, 24, 1e-6, 1e-6);
  call_free(&c);
  return 0;
}

/* Worked example 4: ALiBi, 4 heads, causal, head 3, run through the job the
 * handler declares. */
TEST(params_bias_handler_alibi)
{
  struct srv_call c;
  struct srv_err err;
  double want[16];
  const float *got;
  int i, j;

  call_init(&c, "{\"method\": \"alibi\", \"num_heads\": 4, \"q_len\": 4, "
                "\"causal\": true}");
  CHECK_EQ_I64(srv_h_bias(&c, &err), 0);
  CHECK_EQ_I64(c.plan.njobs, 1);
  CHECK_OK(ab_job_run_all(c.plan.jobs[0]));
  CHECK_EQ_I64(c.plan.outputs[0].t.shape[0], 4);
  got = (const float *)c.plan.outputs[0].t.data + 3 * 16;
  for (i = 0; i < 4; i++)
    for (j = 0; j < 4; j++)
      want[i * 4 + j] = j > i ? -INFINITY : -0.00390625 * (i - j);
  CHECK_ARRAY(got, want, 16, 1e-6, 1e-7);
  call_free(&c);

  /* buckets exist only for t5. */
  call_init(&c, "{\"method\": \"alibi\", \"num_heads\": 4, \"q_len\": 4, "
                "\"return\": [\"buckets\"]}");
  CHECK_EQ_I64(srv_h_bias(&c, &err), -1);
  CHECK_STR(err.field, "/return");
  call_free(&c);
  return 0;
}

/* ==== parameters that stay in double =================================== */

/* LongRoPE's factor lists reach the library with every digit the JSON
 * had, in either tensor form; inv_freq comes back as float64 (the codec
 * rounds it once to the output dtype). */
TEST(params_rope_factor_lists_stay_double)
{
  static const double lf[8] = {1.0000001, 2.2222222, 3.1415926535, 4.4,
                               7.0000007, 9.9, 13.7, 21.1};
  struct srv_call c;
  struct srv_err err;
  struct srv_pctx pc;
  struct srv_rope_cfg cfg;
  const double *inv;
  int k;

  call_init(&c, "{\"head_dim\": 16, \"positions\": [4090, 4101], "
                "\"max_position_embeddings\": 16384, \"rope_scaling\": "
                "{\"rope_type\": \"longrope\", "
                "\"original_max_position_embeddings\": 4096, "
                "\"short_factor\": [1.0000001, 1.1, 1.23456789, 1.5, "
                "2.0000003, 3.3, 4.7, 5.1], \"long_factor\": {\"shape\": [8], "
                "\"data\": [1.0000001, 2.2222222, 3.1415926535, 4.4, "
                "7.0000007, 9.9, 13.7, 21.1]}}}");
  memset(&cfg, 0, sizeof cfg);
  CHECK_EQ_I64(srv_pctx_root(&c, &pc, &err), 0);
  CHECK_EQ_I64(srv_rope_parse(&pc, c.in.params, 0, &cfg, &err), 0);
  for (k = 0; k < 8; k++)
    CHECK(cfg.p.long_factor[k] == lf[k]);
  CHECK(cfg.p.short_factor[0] == 1.0000001 && cfg.p.short_factor[2] == 1.23456789);
  CHECK_EQ_I64(srv_h_rope(&c, &err), 0);
  CHECK_STR(c.plan.outputs[0].name, "inv_freq");
  CHECK_EQ_I64(c.plan.outputs[0].t.dtype, AB_DTYPE_F64);
  inv = c.plan.outputs[0].t.data; /* seq_len 4102 > 4096: the long list */
  for (k = 0; k < 8; k++)
    CHECK_CLOSE(inv[k], 1.0 / (lf[k] * pow(10000.0, 2.0 * k / 16)), 1e-14, 0);
  call_free(&c);

  /* A list of the wrong length names itself and rotary_dim/2. */
  call_init(&c, "{\"head_dim\": 16, \"positions\": 3, \"rope_scaling\": "
                "{\"rope_type\": \"longrope\", "
                "\"original_max_position_embeddings\": 4096, "
                "\"short_factor\": [1, 2], \"long_factor\": [1, 2]}}");
  CHECK_EQ_I64(srv_h_rope(&c, &err), -1);
  CHECK_STR(err.field, "/rope_scaling/short_factor");
  CHECK(strstr(err.detail, "rotary_dim/2 = 8") != NULL);
  call_free(&c);
  return 0;
}

/* Kerple's r1/r2 and ALiBi's slopes go to the library in double (it keeps
 * Kerple's, and rounds the slopes for its float32 table). */
TEST(params_bias_head_lists_stay_double)
{
  struct srv_call c;
  struct srv_err err;
  struct srv_pctx pc;
  struct ab_bias_params p;

  call_init(&c, "{\"r1\": [0.7, 1.0000001], \"r2\": {\"shape\": [2], "
                "\"data\": [1.3, 0.1]}, \"slopes\": [0.3, 0.1]}");
  CHECK_EQ_I64(srv_pctx_root(&c, &pc, &err), 0);
  ab_bias_params_init(&p);
  p.method = AB_BIAS_KERPLE;
  p.num_heads = 2;
  p.kerple_power = 0;
  CHECK_EQ_I64(srv_bias_parse_method(&pc, c.in.params, &p, &err), 0);
  CHECK(p.r1 == NULL && p.r2 == NULL);
  CHECK(p.r1_f64[1] == 1.0000001 && p.r2_f64[0] == 1.3 && p.r2_f64[1] == 0.1);
  ab_bias_params_init(&p);
  p.method = AB_BIAS_ALIBI;
  p.num_heads = 2;
  CHECK_EQ_I64(srv_bias_parse_method(&pc, c.in.params, &p, &err), 0);
  CHECK(p.slopes == NULL && p.slopes_f64[0] == 0.3 && p.slopes_f64[1] == 0.1);
  p.num_heads = 3;
  CHECK_EQ_I64(srv_bias_parse_method(&pc, c.in.params, &p, &err), -1);
  CHECK_STR(err.field, "/slopes");
  CHECK(strstr(err.detail, "num_heads = 3") != NULL);
  call_free(&c);
  return 0;
}

/* T5 buckets need no table: 32 buckets by default (Hugging Face's), or
 * relative_attention_num_buckets.  Expected buckets from HF's
 * _relative_position_bucket (max distance 128): bidirectional 32, and
 * causal 64 (exact below 32, keys after the query in bucket 0). */
TEST(params_t5_buckets_without_table)
{
  static const struct { int rel, b32, b64c; } want[] = {
      {0, 0, 0},     {-1, 1, 1},     {1, 17, 0},     {-4, 4, 4},
      {-8, 8, 8},    {-12, 9, 12},   {-20, 10, 20},  {8, 24, 0},
      {-30, 11, 30}, {-100, 15, 58}, {-200, 15, 63}, {500, 31, 0},
      {-500, 15, 63}};
  struct srv_call c;
  struct srv_err err;
  const int32_t *b;
  size_t i;
  int pass;

  for (pass = 0; pass < 2; pass++) {
    call_init(&c, pass ? "{\"method\": \"t5\", \"num_heads\": 2, \"q_len\": 1, "
                         "\"k_len\": 1001, \"q_offset\": 500, \"return\": "
                         "[\"buckets\"], \"bidirectional\": false, "
                         "\"relative_attention_num_buckets\": 64}"
                       : "{\"method\": \"t5\", \"num_heads\": 2, \"q_len\": 1, "
                         "\"k_len\": 1001, \"q_offset\": 500, \"return\": "
                         "[\"buckets\"]}");
    CHECK_EQ_I64(srv_h_bias(&c, &err), 0);
    CHECK_EQ_I64(c.plan.njobs, 1);
    CHECK_OK(ab_job_run_all(c.plan.jobs[0]));
    CHECK_STR(c.plan.outputs[0].name, "buckets");
    b = c.plan.outputs[0].t.data;
    for (i = 0; i < sizeof want / sizeof want[0]; i++)
      if (b[500 + want[i].rel] != (pass ? want[i].b64c : want[i].b32))
        FAIL_AT("pass %d: rel %d has bucket %d, want %d", pass, want[i].rel,
                (int)b[500 + want[i].rel],
                pass ? want[i].b64c : want[i].b32);
    call_free(&c);
  }

  /* Bias values still need the table, named; so does attention. */
  call_init(&c, "{\"method\": \"t5\", \"num_heads\": 2, \"q_len\": 4, "
                "\"return\": [\"bias\", \"buckets\"]}");
  CHECK_EQ_I64(srv_h_bias(&c, &err), -1);
  CHECK_EQ_I64(err.http, 400);
  CHECK_STR(err.field, "/table");
  call_free(&c);
  return 0;
}

/* The codec lifts nested number rows out of JSON except under the members
 * of srv_codec_node_keys: every positions parameter of every table must
 * be there, or its reader would not find them in the tree. */
TEST(params_positions_are_codec_node_keys)
{
  const struct srv_ptable *tabs[64];
  int n = 0, i, j, k;

  tabs[n++] = &srv_ptab_output;
  tabs[n++] = &srv_ptab_enc_common;
  for (i = 0; i < srv_ptab_enc_nmethods; i++)
    tabs[n++] = srv_ptab_enc_methods[i];
  tabs[n++] = &srv_ptab_rope_config;
  tabs[n++] = &srv_ptab_rope_request;
  tabs[n++] = &srv_ptab_rope_attn;
  tabs[n++] = &srv_ptab_rope_scaling;
  for (i = 0; i < srv_ptab_rope_ntypes; i++)
    if (srv_ptab_rope_types[i])
      tabs[n++] = srv_ptab_rope_types[i];
  tabs[n++] = &srv_ptab_bias_common;
  for (i = 0; i < AB_BIAS_METHOD_LAST_; i++)
    if (srv_bias_method_params((enum ab_bias_method)i))
      tabs[n++] = srv_bias_method_params((enum ab_bias_method)i);
  tabs[n++] = &srv_ptab_attention;
  CHECK(n <= 64);
  for (i = 0; i < n; i++)
    for (j = 0; j < tabs[i]->n; j++) {
      const struct srv_param *p = &tabs[i]->p[j];
      int found = 0;
      if (p->type != SRV_PT_POSITIONS)
        continue;
      for (k = 0; srv_codec_node_keys[k]; k++)
        found |= strcmp(srv_codec_node_keys[k], p->name) == 0;
      if (!found)
        fprintf(stderr, "  %s.%s is not in srv_codec_node_keys\n",
                tabs[i]->name, p->name);
      CHECK(found);
    }
  return 0;
}
