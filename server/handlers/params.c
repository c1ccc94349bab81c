/* params.c: the table-driven parameter parser and the catalog builder (see
 * params.h).  One description per parameter drives the type and range
 * checks, the defaults, the 400 errors naming the JSON pointer, the
 * X-Attnbias-Ignored list and the GET /v1/methods entries. */
#include "params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Integers travel as doubles in range checks; 2^53 keeps them exact. */
#define EXACT_INT_MAX 9007199254740992.0

/* ==== contexts and pointers ============================================= */

/* Append one RFC 6901 reference token to a NUL-terminated pointer. */
static void ptr_add(char *out, size_t cap, const char *tok)
{
  size_t n = strlen(out);

  if (n + 1 >= cap)
    return;
  out[n++] = '/';
  for (; *tok && n + 1 < cap; tok++) {
    if (*tok == '~' || *tok == '/') {
      if (n + 2 >= cap)
        break;
      out[n++] = '~';
      out[n++] = *tok == '~' ? '0' : '1';
    } else {
      out[n++] = *tok;
    }
  }
  out[n] = '\0';
}

static void dot_add(char *out, size_t cap, const char *name)
{
  size_t n = strlen(out);

  snprintf(out + n, cap - n, "%s%s", n ? "." : "", name);
}

int srv_pctx_root(struct srv_call *c, struct srv_pctx *pc,
                  struct srv_err *err)
{
  memset(pc, 0, sizeof *pc);
  pc->c = c;
  pc->bin_used =
      srv_arena_calloc(&c->arena, c->in.nbin > 0 ? (size_t)c->in.nbin : 1, 1);
  if (!pc->bin_used)
    return srv_fail(err, 500, NULL, "out of memory while reading parameters");
  return 0;
}

void *srv_handler_begin(struct srv_call *c, struct srv_pctx *pc, size_t size,
                        struct srv_err *err)
{
  void *state;

  if (srv_pctx_root(c, pc, err) != 0)
    return NULL;
  state = srv_arena_calloc(&c->arena, 1, size);
  if (!state) {
    srv_fail(err, 500, NULL, "out of memory");
    return NULL;
  }
  c->plan.state = state;
  return state;
}

void srv_pctx_child(const struct srv_pctx *pc, const char *name,
                    struct srv_pctx *child)
{
  *child = *pc;
  ptr_add(child->ptr, sizeof child->ptr, name);
  dot_add(child->dot, sizeof child->dot, name);
}

const char *srv_pctx_ptr(const struct srv_pctx *pc, const char *name,
                         char *buf, size_t size)
{
  srv_strcpy(buf, size, pc->ptr);
  if (name)
    ptr_add(buf, size, name);
  return buf;
}

/* What srv_params_unknown checks each member against. */
struct known {
  const struct srv_pctx *pc;
  const struct srv_ptable *const *tables;
  int n;
  const char *const *extra;
};

static void unknown_member(const char *key, const json_t *v, void *arg)
{
  const struct known *kn = arg;
  int known = 0, i, k;
  char ptr[256];

  (void)v;
  for (i = 0; i < kn->n && !known; i++)
    for (k = 0; k < kn->tables[i]->n && !known; k++) {
      const struct srv_param *p = &kn->tables[i]->p[k];
      known = strcmp(p->name, key) == 0 ||
              (p->alias && strcmp(p->alias, key) == 0);
    }
  for (i = 0; kn->extra && kn->extra[i] && !known; i++)
    known = strcmp(kn->extra[i], key) == 0;
  if (!known)
    srv_config_ignore(kn->pc->c, srv_pctx_ptr(kn->pc, key, ptr, sizeof ptr));
}

void srv_params_unknown(const struct srv_pctx *pc, const json_t *obj,
                        const struct srv_ptable *const *tables, int n,
                        const char *const *extra)
{
  struct known kn = {pc, tables, n, extra};

  srv_codec_members(pc->c, obj, unknown_member, &kn);
}

void srv_params_unused_bin(const struct srv_pctx *pc)
{
  int i;

  for (i = 0; i < pc->c->in.nbin; i++) {
    char ptr[256], comp[192];
    const char *s = pc->c->in.bin[i].name, *dot;

    if (pc->bin_used[i] || !s)
      continue;
    /* Dotted safetensors name -> JSON pointer, one component at a time. */
    ptr[0] = '\0';
    for (;;) {
      size_t len;

      dot = strchr(s, '.');
      len = dot ? (size_t)(dot - s) : strlen(s);
      if (len >= sizeof comp)
        len = sizeof comp - 1;
      memcpy(comp, s, len);
      comp[len] = '\0';
      ptr_add(ptr, sizeof ptr, comp);
      if (!dot)
        break;
      s = dot + 1;
    }
    srv_config_ignore(pc->c, ptr);
  }
}

/* ==== value formatting for messages ===================================== */

static const char *type_name(enum srv_ptype t)
{
  switch (t) {
  case SRV_PT_INT: return "integer";
  case SRV_PT_NUM: return "number";
  case SRV_PT_BOOL: return "boolean";
  case SRV_PT_ENUM: return "string";
  case SRV_PT_STR: return "string";
  case SRV_PT_ENUMS: return "array of strings";
  case SRV_PT_TENSOR: return "tensor";
  case SRV_PT_INTS: return "array of integers";
  case SRV_PT_POSITIONS: return "integer or array";
  case SRV_PT_OBJECT: return "object";
  case SRV_PT_LAYERS: return "array of objects";
  }
  return "value";
}

/* "one of a, b, c" into buf. */
static void choices_list(const struct srv_choice *ch, char *buf, size_t size)
{
  size_t n = 0;
  int i;

  buf[0] = '\0';
  for (i = 0; ch && ch[i].name && n + 1 < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "",
                          ch[i].name);
}

/* ==== checks ============================================================ */

/* Range check of a number against p's bounds; 0 or -1 with err. */
static int check_range(const struct srv_param *p, double x, const char *ptr,
                       const char *what, struct srv_err *err)
{
  const char *nm = what ? what : p->name;

  if ((p->flags & SRV_PF_MIN) && !(x >= p->min))
    return srv_fail(err, 400, ptr, "%s must be >= %g, got %.17g", nm, p->min,
                    x);
  if ((p->flags & SRV_PF_MIN_EXCL) && !(x > p->min))
    return srv_fail(err, 400, ptr, "%s must be > %g, got %.17g", nm, p->min,
                    x);
  if ((p->flags & SRV_PF_MAX) && !(x <= p->max))
    return srv_fail(err, 400, ptr, "%s must be <= %g, got %.17g", nm, p->max,
                    x);
  if ((p->flags & SRV_PF_MAX_EXCL) && !(x < p->max))
    return srv_fail(err, 400, ptr, "%s must be < %g, got %.17g", nm, p->max,
                    x);
  return 0;
}

/* An integer, or a real with an integral value that int64 holds exactly
 * enough (|x| <= 2^53).  0 or -1. */
static int json_int(const json_t *v, int64_t *out)
{
  if (json_is_integer(v)) {
    *out = (int64_t)json_integer_value(v);
    return 0;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d == floor(d) && fabs(d) <= EXACT_INT_MAX) {
      *out = (int64_t)d;
      return 0;
    }
  }
  return -1;
}

static int type_error(const struct srv_call *c, const struct srv_param *p,
                      const json_t *v, const char *ptr, struct srv_err *err)
{
  char val[96];
  const char *tn = type_name(p->type);

  srv_codec_show(c, v, val, sizeof val);
  /* "an integer", "a number", "an array of strings", ... */
  return srv_fail(err, 400, ptr, "%s must be %s %s, got %s", p->name,
                  strchr("aeiou", tn[0]) ? "an" : "a", tn, val);
}

static const struct srv_choice *find_choice(const struct srv_choice *ch,
                                            const char *s)
{
  for (; ch && ch->name; ch++)
    if (strcmp(ch->name, s) == 0)
      return ch;
  return NULL;
}

static int parse_enum_value(const struct srv_call *c,
                            const struct srv_param *p, const json_t *v,
                            const char *ptr, int *out, struct srv_err *err)
{
  const struct srv_choice *ch;
  char val[96], list[256];

  if (!json_is_string(v)) {
    if (p->type != SRV_PT_ENUMS)
      return type_error(c, p, v, ptr, err);
    srv_codec_show(c, v, val, sizeof val); /* one element of the array */
    return srv_fail(err, 400, ptr, "%s: each element must be a string, got %s",
                    p->name, val);
  }
  ch = find_choice(p->choices, json_string_value(v));
  if (!ch) {
    srv_codec_show(c, v, val, sizeof val);
    choices_list(p->choices, list, sizeof list);
    return srv_fail(err, 400, ptr, "%s must be one of %s, got %s", p->name,
                    list, val);
  }
  *out = ch->value;
  return 0;
}

/* Validate (and store, unless NOSTORE) one present, non-null member. */
static int parse_value(const struct srv_call *c, const struct srv_param *p,
                       const json_t *v, const char *ptr, void *dst,
                       struct srv_err *err)
{
  char *field = (char *)dst + p->off;
  int store = !(p->flags & SRV_PF_NOSTORE) && dst;
  char val[96];

  switch (p->type) {
  case SRV_PT_INT: {
    int64_t x;
    if (json_int(v, &x) != 0)
      return type_error(c, p, v, ptr, err);
    if (check_range(p, (double)x, ptr, NULL, err) != 0)
      return -1;
    if (store)
      memcpy(field, &x, sizeof x);
    return 0;
  }
  case SRV_PT_NUM: {
    double x;
    if (!json_is_number(v) && !json_is_string(v))
      return type_error(c, p, v, ptr, err);
    if (srv_codec_number(v, &x) != 0)
      return type_error(c, p, v, ptr, err);
    if (!isfinite(x)) {
      srv_codec_show(c, v, val, sizeof val);
      return srv_fail(err, 400, ptr, "%s must be a finite number, got %s",
                      p->name, val);
    }
    if ((p->flags & SRV_PF_ZERO_DEF) && x == 0 && (p->flags & SRV_PF_DEF))
      x = p->def;
    if (check_range(p, x, ptr, NULL, err) != 0)
      return -1;
    if (store)
      memcpy(field, &x, sizeof x);
    return 0;
  }
  case SRV_PT_BOOL: {
    int x;
    if (!json_is_boolean(v))
      return type_error(c, p, v, ptr, err);
    x = json_is_true(v);
    if (store)
      memcpy(field, &x, sizeof x);
    return 0;
  }
  case SRV_PT_ENUM: {
    int x;
    if (parse_enum_value(c, p, v, ptr, &x, err) != 0)
      return -1;
    if (store)
      memcpy(field, &x, sizeof x);
    return 0;
  }
  case SRV_PT_STR: {
    const char *x;
    if (!json_is_string(v))
      return type_error(c, p, v, ptr, err);
    x = json_string_value(v);
    if (store)
      memcpy(field, &x, sizeof x);
    return 0;
  }
  case SRV_PT_ENUMS: {
    unsigned mask = 0;
    size_t i;
    char eptr[256];
    if (!json_is_array(v) || json_array_size(v) == 0) {
      srv_codec_show(c, v, val, sizeof val);
      return srv_fail(err, 400, ptr,
                      "%s must be a non-empty array of strings, got %s",
                      p->name, val);
    }
    for (i = 0; i < json_array_size(v); i++) {
      int x;
      char idx[24];
      snprintf(eptr, sizeof eptr, "%s", ptr);
      snprintf(idx, sizeof idx, "%zu", i);
      ptr_add(eptr, sizeof eptr, idx);
      if (parse_enum_value(c, p, json_array_get(v, i), eptr, &x, err) != 0)
        return -1;
      mask |= 1u << x;
    }
    if (store)
      memcpy(field, &mask, sizeof mask);
    return 0;
  }
  case SRV_PT_INTS: {
    size_t i;
    char eptr[256], what[96];
    if (!json_is_array(v)) {
      srv_codec_show(c, v, val, sizeof val);
      return srv_fail(err, 400, ptr, "%s must be an array of integers, got %s",
                      p->name, val);
    }
    for (i = 0; i < json_array_size(v); i++) {
      const json_t *e = json_array_get(v, i);
      int64_t x;
      char idx[24];
      snprintf(eptr, sizeof eptr, "%s", ptr);
      snprintf(idx, sizeof idx, "%zu", i);
      ptr_add(eptr, sizeof eptr, idx);
      if (json_int(e, &x) != 0) {
        srv_codec_show(c, e, val, sizeof val);
        return srv_fail(err, 400, eptr, "%s[%zu] must be an integer, got %s",
                        p->name, i, val);
      }
      snprintf(what, sizeof what, "%s[%zu]", p->name, i);
      if (check_range(p, (double)x, eptr, what, err) != 0)
        return -1;
    }
    if (store)
      memcpy(field, &v, sizeof v);
    return 0;
  }
  case SRV_PT_POSITIONS: {
    int64_t x;
    if (json_is_array(v)) {
      if (json_array_size(v) == 0)
        return srv_fail(err, 400, ptr, "%s must not be empty", p->name);
    } else if (json_int(v, &x) == 0) {
      if (x < 1)
        return srv_fail(err, 400, ptr,
                        "%s as a count must be >= 1, got %lld", p->name,
                        (long long)x);
    } else {
      srv_codec_show(c, v, val, sizeof val);
      return srv_fail(err, 400, ptr,
                      "%s must be a count n or a list of positions, got %s",
                      p->name, val);
    }
    if (store)
      memcpy(field, &v, sizeof v);
    return 0;
  }
  case SRV_PT_OBJECT:
    if (!json_is_object(v))
      return type_error(c, p, v, ptr, err);
    if (store)
      memcpy(field, &v, sizeof v);
    return 0;
  case SRV_PT_LAYERS: {
    size_t i;
    if (!json_is_array(v) || json_array_size(v) == 0) {
      srv_codec_show(c, v, val, sizeof val);
      return srv_fail(err, 400, ptr,
                      "%s must be a non-empty array of objects, got %s",
                      p->name, val);
    }
    for (i = 0; i < json_array_size(v); i++)
      if (!json_is_object(json_array_get(v, i))) {
        char eptr[256], idx[24];
        snprintf(eptr, sizeof eptr, "%s", ptr);
        snprintf(idx, sizeof idx, "%zu", i);
        ptr_add(eptr, sizeof eptr, idx);
        srv_codec_show(c, json_array_get(v, i), val, sizeof val);
        return srv_fail(err, 400, eptr, "%s[%zu] must be an object, got %s",
                        p->name, i, val);
      }
    if (store)
      memcpy(field, &v, sizeof v);
    return 0;
  }
  case SRV_PT_TENSOR:
    break; /* handled by the caller (srv_params_tensor) */
  }
  return 0;
}

/* Store p's default into dst. */
static void store_default(const struct srv_param *p, void *dst)
{
  char *field = (char *)dst + p->off;

  switch (p->type) {
  case SRV_PT_INT: {
    int64_t x = (int64_t)p->def;
    memcpy(field, &x, sizeof x);
    break;
  }
  case SRV_PT_NUM: {
    double x = p->def;
    memcpy(field, &x, sizeof x);
    break;
  }
  case SRV_PT_BOOL:
  case SRV_PT_ENUM: {
    int x = (int)p->def;
    memcpy(field, &x, sizeof x);
    break;
  }
  case SRV_PT_ENUMS: {
    unsigned x = (unsigned)p->def;
    memcpy(field, &x, sizeof x);
    break;
  }
  default:
    break;
  }
}

/* ==== tensors =========================================================== */

/* Index of the safetensors entry named `dotted`, or -1. */
static int bin_find(const struct srv_call *c, const char *dotted)
{
  int i;

  for (i = 0; i < c->in.nbin; i++)
    if (c->in.bin[i].name && strcmp(c->in.bin[i].name, dotted) == 0)
      return i;
  return -1;
}

/* 1 when a safetensors entry lies below member `name` of pc's object. */
static int bin_below(const struct srv_pctx *pc, const char *name)
{
  char prefix[256];
  size_t n;
  int i;

  snprintf(prefix, sizeof prefix, "%s", pc->dot);
  dot_add(prefix, sizeof prefix, name);
  n = strlen(prefix);
  if (n + 1 < sizeof prefix) {
    prefix[n++] = '.';
    prefix[n] = '\0';
  }
  for (i = 0; i < pc->c->in.nbin; i++)
    if (pc->c->in.bin[i].name && strncmp(pc->c->in.bin[i].name, prefix, n) == 0)
      return 1;
  return 0;
}

/* srv_params_tensor with JSON numbers stored as json_dtype. */
static int tensor_as(const struct srv_pctx *pc, const char *name,
                     int required, enum ab_dtype json_dtype,
                     struct ab_tensor *out, struct srv_err *err)
{
  char dotted[256];
  int i;

  snprintf(dotted, sizeof dotted, "%s", pc->dot);
  dot_add(dotted, sizeof dotted, name);
  i = bin_find(pc->c, dotted);
  if (i >= 0)
    pc->bin_used[i] = 1;
  memset(out, 0, sizeof *out);
  return srv_codec_tensor_as(pc->c, dotted, required, json_dtype, out, err);
}

int srv_params_tensor(const struct srv_pctx *pc, const char *name,
                      int required, struct ab_tensor *out,
                      struct srv_err *err)
{
  return tensor_as(pc, name, required, AB_DTYPE_F32, out, err);
}

int srv_params_list(const struct srv_pctx *pc, const char *name,
                    const struct ab_tensor *t, int64_t want, const char *what,
                    const double **out, struct srv_err *err)
{
  char ptr[256];
  double *d;
  enum ab_status st;

  srv_pctx_ptr(pc, name, ptr, sizeof ptr);
  if (t->ndim != 1 || t->shape[0] != want)
    return srv_fail(err, 400, ptr,
                    "%s must be a list of %s = %lld numbers, got %lld in %d "
                    "dimension(s)",
                    name, what, (long long)want,
                    (long long)ab_tensor_numel(t), (int)t->ndim);
  d = srv_arena_alloc(&pc->c->arena, (size_t)want * sizeof *d);
  if (!d)
    return srv_fail(err, 500, ptr, "out of memory reading %s", name);
  st = ab_tensor_to_f64(t, d);
  if (st != AB_STATUS_OK) /* an int32 safetensors entry: the list's fault */
    return srv_fail_lib(err, st, ptr, "src");
  *out = d;
  return 0;
}

/* ==== the parser ======================================================== */

/* The member of obj for p (by name, else alias); both present and
 * different -> 400.  *where receives the name used. */
static int member(const struct srv_pctx *pc, const json_t *obj,
                  const struct srv_param *p, const json_t **out,
                  const char **where, struct srv_err *err)
{
  /* Not a tensor: a member the codec read beside the tree (a nested array
   * of numbers) comes as JSON, for the error that follows. */
  const json_t *a = srv_codec_member(pc->c, obj, p->name);
  const json_t *b = p->alias ? srv_codec_member(pc->c, obj, p->alias) : NULL;
  char ptr[256];

  if (a && json_is_null(a))
    a = NULL;
  if (b && json_is_null(b))
    b = NULL;
  if (a && b && !json_equal((json_t *)a, (json_t *)b))
    return srv_fail(err, 400, srv_pctx_ptr(pc, p->alias, ptr, sizeof ptr),
                    "%s and %s are the same parameter and disagree",
                    p->name, p->alias);
  *out = a ? a : b;
  *where = a ? p->name : p->alias;
  return 0;
}

int srv_params_parse(const struct srv_pctx *pc, const json_t *obj,
                     struct srv_pbind *b, struct srv_err *err)
{
  int i;
  char ptr[256];

  b->seen = 0;
  if (obj && !json_is_object(obj))
    obj = NULL;
  for (i = 0; i < b->t->n; i++) {
    const struct srv_param *p = &b->t->p[i];
    const json_t *v;
    const char *where;

    if (p->type == SRV_PT_TENSOR) {
      int r;
      struct ab_tensor *t = (struct ab_tensor *)((char *)b->dst + p->off);
      const json_t *jv = obj ? json_object_get(obj, p->name) : NULL;
      char dotted[256];

      snprintf(dotted, sizeof dotted, "%s", pc->dot);
      dot_add(dotted, sizeof dotted, p->name);
      /* null stands for "absent", as for every other parameter, unless a
       * safetensors entry of that name carries the tensor. */
      if (jv && json_is_null(jv) && bin_find(pc->c, dotted) < 0) {
        memset(t, 0, sizeof *t);
        if (p->flags & SRV_PF_REQ)
          return srv_fail(err, 400, srv_pctx_ptr(pc, p->name, ptr, sizeof ptr),
                          "%s is required", p->name);
        continue;
      }
      r = tensor_as(pc, p->name, (p->flags & SRV_PF_REQ) != 0,
                    (p->flags & SRV_PF_F64) ? AB_DTYPE_F64 : AB_DTYPE_F32, t,
                    err);
      if (r < 0)
        return -1;
      if (r > 0 && i < 64)
        b->seen |= (uint64_t)1 << i;
      continue;
    }
    if (member(pc, obj, p, &v, &where, err) != 0)
      return -1;
    if (!v && p->type == SRV_PT_LAYERS && bin_below(pc, p->name)) {
      /* Given only as safetensors entries ("layers.0.weight", ...): present,
       * with no JSON of its own. */
      if (i < 64)
        b->seen |= (uint64_t)1 << i;
      continue;
    }
    if (!v) {
      if (p->flags & SRV_PF_REQ)
        return srv_fail(err, 400, srv_pctx_ptr(pc, p->name, ptr, sizeof ptr),
                        "%s is required", p->name);
      if ((p->flags & SRV_PF_DEF) && !(p->flags & SRV_PF_NOSTORE) && b->dst)
        store_default(p, b->dst);
      continue;
    }
    if (parse_value(pc->c, p, v, srv_pctx_ptr(pc, where, ptr, sizeof ptr),
                    b->dst, err) != 0)
      return -1;
    if (i < 64)
      b->seen |= (uint64_t)1 << i;
  }
  return 0;
}

int srv_pbind_seen(const struct srv_pbind *b, const char *name)
{
  int i;

  for (i = 0; i < b->t->n && i < 64; i++)
    if (strcmp(b->t->p[i].name, name) == 0)
      return (b->seen >> i) & 1;
  return 0;
}

int srv_params_enum(const struct srv_pctx *pc, const json_t *obj,
                    const struct srv_param *p, int *value,
                    struct srv_err *err)
{
  const json_t *v;
  const char *where;
  char ptr[256];

  if (member(pc, obj, p, &v, &where, err) != 0)
    return -1;
  if (!v) {
    if (p->flags & SRV_PF_REQ)
      return srv_fail(err, 400, srv_pctx_ptr(pc, p->name, ptr, sizeof ptr),
                      "%s is required", p->name);
    if (p->flags & SRV_PF_DEF) {
      *value = (int)p->def;
      return 1;
    }
    return 0;
  }
  if (parse_enum_value(pc->c, p, v, srv_pctx_ptr(pc, where, ptr, sizeof ptr),
                       value, err) != 0)
    return -1;
  return 1;
}

void srv_params_ints(const json_t *a, int64_t *out)
{
  size_t i;

  for (i = 0; i < json_array_size(a); i++)
    if (json_int(json_array_get(a, i), &out[i]) != 0)
      out[i] = 0; /* unreachable after srv_params_parse checked it */
}

int64_t srv_positions_count(const json_t *j)
{
  int64_t n = 0;

  if (json_is_array(j)) {
    const json_t *first = json_array_get(j, 0);
    return (int64_t)json_array_size(json_is_array(first) ? first : j);
  }
  if (json_int(j, &n) != 0)
    return 0;
  return n;
}

const struct srv_param *srv_ptable_find(const struct srv_ptable *t,
                                        const char *name)
{
  int i;

  for (i = 0; i < t->n; i++)
    if (strcmp(t->p[i].name, name) == 0)
      return &t->p[i];
  return NULL;
}

/* ==== catalog =========================================================== */

static json_t *num_json(enum srv_ptype t, double x)
{
  if (t == SRV_PT_INT || t == SRV_PT_INTS || t == SRV_PT_POSITIONS)
    return json_integer((json_int_t)x);
  return json_real(x);
}

static const char *choice_name(const struct srv_choice *ch, int value)
{
  for (; ch && ch->name; ch++)
    if (ch->value == value)
      return ch->name;
  return NULL;
}

/* Bounds as JSON Schema 2020-12 keywords on object o. */
static void add_bounds(json_t *o, const struct srv_param *p)
{
  if (p->flags & SRV_PF_MIN)
    json_object_set_new(o, "minimum", num_json(p->type, p->min));
  if (p->flags & SRV_PF_MIN_EXCL)
    json_object_set_new(o, "exclusiveMinimum", num_json(p->type, p->min));
  if (p->flags & SRV_PF_MAX)
    json_object_set_new(o, "maximum", num_json(p->type, p->max));
  if (p->flags & SRV_PF_MAX_EXCL)
    json_object_set_new(o, "exclusiveMaximum", num_json(p->type, p->max));
}

json_t *srv_params_catalog_param(const struct srv_param *p)
{
  json_t *o = json_object();
  const struct srv_choice *ch;

  if (!o)
    return NULL;
  json_object_set_new(o, "name", json_string(p->name));
  json_object_set_new(o, "type", json_string(type_name(p->type)));
  json_object_set_new(o, "required", json_boolean(p->flags & SRV_PF_REQ));
  if (p->flags & SRV_PF_DEF) {
    switch (p->type) {
    case SRV_PT_BOOL:
      json_object_set_new(o, "default", json_boolean(p->def != 0));
      break;
    case SRV_PT_ENUM: {
      const char *nm = choice_name(p->choices, (int)p->def);
      json_object_set_new(o, "default", nm ? json_string(nm) : json_null());
      break;
    }
    case SRV_PT_ENUMS: {
      json_t *a = json_array();
      for (ch = p->choices; ch && ch->name; ch++)
        if (((unsigned)p->def >> ch->value) & 1)
          json_array_append_new(a, json_string(ch->name));
      json_object_set_new(o, "default", a);
      break;
    }
    default:
      json_object_set_new(o, "default", num_json(p->type, p->def));
      break;
    }
  }
  if (p->def_rule)
    json_object_set_new(o, "default_rule", json_string(p->def_rule));
  if (p->type == SRV_PT_INTS) {
    json_t *items = json_object();
    add_bounds(items, p);
    json_object_set_new(items, "type", json_string("integer"));
    json_object_set_new(o, "items", items);
  } else {
    add_bounds(o, p);
  }
  if (p->flags & SRV_PF_ZERO_DEF)
    json_object_set_new(o, "zero_means_default", json_true());
  if (p->choices) {
    json_t *names = json_array(), *descs = json_object();
    for (ch = p->choices; ch->name; ch++) {
      json_array_append_new(names, json_string(ch->name));
      if (ch->desc)
        json_object_set_new(descs, ch->name, json_string(ch->desc));
    }
    json_object_set_new(o, "enum", names);
    if (json_object_size(descs))
      json_object_set_new(o, "enum_descriptions", descs);
    else
      json_decref(descs);
  }
  if (p->alias) {
    json_t *a = json_array();
    json_array_append_new(a, json_string(p->alias));
    json_object_set_new(o, "aliases", a);
  }
  json_object_set_new(o, "description", json_string(p->desc ? p->desc : ""));
  return o;
}

json_t *srv_params_catalog_list(const struct srv_ptable *const *tables, int n)
{
  json_t *a = json_array();
  int i, k;

  for (i = 0; a && i < n; i++)
    for (k = 0; k < tables[i]->n; k++)
      json_array_append_new(a, srv_params_catalog_param(&tables[i]->p[k]));
  return a;
}

/* ==== the output options =============================================== */

/* Read by the codec (srv_codec_decode_request); described here so that the
 * catalog lists them and no route reports them as ignored. */
static const struct srv_choice out_encodings[] = {
    {"json", 0, "tensor data as a JSON array of numbers"},
    {"b64", 1, "tensor data as base64 of little-endian bytes (member b64)"},
    {NULL, 0, NULL}};
static const struct srv_choice out_dtypes[] = {
    {"float32", AB_DTYPE_F32, NULL},
    {"float16", AB_DTYPE_F16, NULL},
    {"bfloat16", AB_DTYPE_BF16, "not available as .npy"},
    {"float64", AB_DTYPE_F64, NULL},
    {NULL, 0, NULL}};
static const struct srv_param out_params[] = {
    {.name = "output_dtype", .type = SRV_PT_ENUM,
     .flags = SRV_PF_NOSTORE | SRV_PF_DEF, .def = AB_DTYPE_F32,
     .choices = out_dtypes,
     .desc = "dtype of float outputs (integer outputs stay int32)"},
    {.name = "encoding", .type = SRV_PT_ENUM,
     .flags = SRV_PF_NOSTORE | SRV_PF_DEF, .def = 0,
     .choices = out_encodings,
     .desc = "how JSON responses carry tensor data"},
    {.name = "output", .type = SRV_PT_STR, .flags = SRV_PF_NOSTORE,
     .desc = "the one output to send as application/x-npy when the route "
             "returns several"},
};
const struct srv_ptable srv_ptab_output =
    SRV_PTABLE("output options", "how the response carries its tensors "
               "(every compute route)", out_params);

/* ==== shared helpers ==================================================== */

double srv_out_bytes(const struct srv_call *c, double numel)
{
  const int dt = c->in.out_dtype;
  size_t sz = ab_dtype_size((enum ab_dtype)dt);
  double sent;

  if (!sz)
    sz = 4;
  if (c->in.fmt != SRV_FMT_JSON)
    sent = numel * (double)sz;
  else if (c->in.b64)
    sent = ceil(numel * (double)sz / 3.0) * 4.0;
  else
    sent = numel * (dt == AB_DTYPE_F64 ? SRV_JSON_TXT_F64 : SRV_JSON_TXT_F32);
  /* The library computes float32; only a float32 binary answer is sent
   * from those very bytes. */
  if (c->in.fmt == SRV_FMT_JSON || dt != AB_DTYPE_F32)
    sent += 4.0 * numel;
  return sent;
}

int srv_reply_json(struct srv_call *c, json_t *root, const char *what,
                   struct srv_err *err)
{
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  int rc;

  json_decref(root);
  if (!text)
    return srv_fail(err, 500, NULL, "out of memory building %s", what);
  rc = srv_buf_append(&c->plan.custom, text, strlen(text));
  free(text);
  if (rc != 0)
    return srv_fail(err, 500, NULL, "out of memory sending %s", what);
  c->plan.custom_type = "application/json";
  return 0;
}

double srv_numel_d(const struct ab_tensor *t)
{
  double n = 1;
  int i;

  for (i = 0; i < t->ndim; i++)
    n *= (double)t->shape[i];
  return n;
}
