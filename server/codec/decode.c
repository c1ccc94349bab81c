/* decode.c: srv_codec_decode_request -- Content-Type (415), Accept
 * negotiation (406), the request body into c->in.params / c->in.bin, and the
 * generic output options "encoding", "output_dtype", "output". */
#include "codec-internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ======================================================================
 * media types
 * ====================================================================== */

/* One parsed media type or media range: "type/subtype; a=b; q=0.5". */
struct media {
  const char *type, *sub;
  size_t tlen, slen;
  int q;           /* weight in thousandths; 1000 when absent */
  int q_ok;        /* 0: a malformed weight (the range is ignored) */
  const char *charset;
  size_t cslen;
};

static const char *skip_ows(const char *p, const char *e)
{
  while (p < e && (*p == ' ' || *p == '\t'))
    p++;
  return p;
}

static int is_tchar(char ch)
{
  return isalnum((unsigned char)ch) || strchr("!#$%&'*+-.^_`|~", ch);
}

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ) */
static int parse_q(const char *v, size_t n, int *q)
{
  int val, scale = 100;
  size_t i;

  if (n == 0 || (v[0] != '0' && v[0] != '1'))
    return -1;
  val = (v[0] - '0') * 1000;
  if (n == 1)
    goto done;
  if (v[1] != '.' || n > 5)
    return -1;
  for (i = 2; i < n; i++, scale /= 10) {
    if (v[i] < '0' || v[i] > '9')
      return -1;
    val += (v[i] - '0') * scale;
  }
done:
  if (val > 1000)
    return -1;
  *q = val;
  return 0;
}

/* Parse p[0..e) as one media type with parameters.  Returns 0, or -1 when
 * it is not "token/token". */
static int parse_media(const char *p, const char *e, struct media *m)
{
  memset(m, 0, sizeof *m);
  m->q = 1000;
  m->q_ok = 1;
  p = skip_ows(p, e);
  m->type = p;
  while (p < e && is_tchar(*p))
    p++;
  m->tlen = (size_t)(p - m->type);
  if (!m->tlen || p >= e || *p != '/')
    return -1;
  m->sub = ++p;
  while (p < e && is_tchar(*p))
    p++;
  m->slen = (size_t)(p - m->sub);
  if (!m->slen)
    return -1;
  for (;;) {
    const char *name, *val;
    size_t nlen, vlen;
    p = skip_ows(p, e);
    if (p >= e)
      return 0;
    if (*p != ';')
      return -1;
    p = skip_ows(p + 1, e);
    if (p >= e)
      return 0; /* a trailing ';' is harmless */
    name = p;
    while (p < e && is_tchar(*p))
      p++;
    nlen = (size_t)(p - name);
    if (!nlen || p >= e || *p != '=')
      return -1;
    val = ++p;
    if (p < e && *p == '"') { /* quoted-string */
      val = ++p;
      while (p < e && *p != '"') {
        if (*p == '\\' && p + 1 < e)
          p++;
        p++;
      }
      if (p >= e)
        return -1;
      vlen = (size_t)(p - val);
      p++;
    } else {
      while (p < e && is_tchar(*p))
        p++;
      vlen = (size_t)(p - val);
    }
    if (nlen == 1 && (name[0] == 'q' || name[0] == 'Q')) {
      if (parse_q(val, vlen, &m->q))
        m->q_ok = 0;
    } else if (nlen == 7 && strncasecmp(name, "charset", 7) == 0) {
      m->charset = val;
      m->cslen = vlen;
    }
  }
}

static int media_is(const struct media *m, const char *type, const char *sub)
{
  return m->tlen == strlen(type) && strncasecmp(m->type, type, m->tlen) == 0 &&
         m->slen == strlen(sub) && strncasecmp(m->sub, sub, m->slen) == 0;
}

/* The formats a response can take, in the server's order of preference
 * (used when the client's weights tie). */
static const struct {
  enum srv_fmt fmt;
  const char *type, *sub;
} g_offers[] = {
    {SRV_FMT_JSON, "application", "json"},
    {SRV_FMT_SAFETENSORS, "application", "vnd.safetensors"},
    {SRV_FMT_NPY, "application", "x-npy"},
    {SRV_FMT_PNG, "image", "png"},
};

/* RFC 9110 12.5.1: each offered type takes the weight of the most specific
 * range that matches it (type/subtype over type/ over any); the
 * highest weight wins, then the more specific match, then our order.
 * Returns 0 with *fmt set, or -1 when every offer has weight 0. */
static int negotiate(const char *accept, int png_ok, enum srv_fmt *fmt)
{
  int best_q = 0, best_spec = -1;
  size_t o;

  for (o = 0; o < sizeof g_offers / sizeof g_offers[0]; o++) {
    const char *p = accept, *end;
    int q = -1, spec = -1;
    if (g_offers[o].fmt == SRV_FMT_PNG && !png_ok)
      continue;
    while (*p) {
      struct media m;
      int s;
      end = strchr(p, ',');
      if (!end)
        end = p + strlen(p);
      if (parse_media(p, end, &m) == 0 && m.q_ok) {
        if (m.tlen == 1 && m.type[0] == '*' && m.slen == 1 && m.sub[0] == '*')
          s = 0;
        else if (m.tlen == strlen(g_offers[o].type) &&
                 strncasecmp(m.type, g_offers[o].type, m.tlen) == 0 &&
                 m.slen == 1 && m.sub[0] == '*')
          s = 1;
        else if (media_is(&m, g_offers[o].type, g_offers[o].sub))
          s = 2;
        else
          s = -1;
        if (s > spec) {
          spec = s;
          q = m.q;
        }
      }
      p = *end ? end + 1 : end;
    }
    if (spec >= 0 && q > 0 &&
        (q > best_q || (q == best_q && spec > best_spec))) {
      best_q = q;
      best_spec = spec;
      *fmt = g_offers[o].fmt;
    }
  }
  return best_spec >= 0 ? 0 : -1;
}

static int blank(const char *s)
{
  if (!s)
    return 1;
  while (*s == ' ' || *s == '\t')
    s++;
  return *s == '\0';
}

enum body_kind { BODY_JSON, BODY_SAFETENSORS };

/* The magic string that starts every .npy file. */
static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* A .npy body -- by its media type (decided with the headers), or by its
 * first bytes whatever the type says -- is refused with the one line that
 * sends safetensors instead: a .npy file holds one array, and a request
 * has several fields. */
static int refuse_npy(const char *ct, struct srv_err *err)
{
  return srv_fail(err, 415, NULL,
                  "a .npy body is not read (Content-Type \"%.60s\"): send "
                  "safetensors (Content-Type: application/vnd.safetensors), "
                  "each array named as its field and the other fields as "
                  "JSON in __metadata__[\"params\"]; in Python: body = "
                  "safetensors.numpy.save({\"q\": q, \"k\": k, \"v\": v}, "
                  "metadata={\"params\": json.dumps({\"causal\": True})})",
                  blank(ct) ? "none" : ct);
}

static int is_npy(const char *body, size_t len)
{
  return body && len >= sizeof NPY_MAGIC &&
         memcmp(body, NPY_MAGIC, sizeof NPY_MAGIC) == 0;
}

static int classify_content_type(const char *ct, enum body_kind *kind,
                                 struct srv_err *err)
{
  struct media m;

  *kind = BODY_JSON;
  if (blank(ct))
    return 0; /* absent: JSON */
  if (parse_media(ct, ct + strlen(ct), &m) == 0) {
    if (media_is(&m, "application", "json")) {
      /* JSON is UTF-8 (RFC 8259 8.1); any other charset is not JSON. */
      if (m.charset && !(m.cslen == 5 && strncasecmp(m.charset, "utf-8", 5) == 0) &&
          !(m.cslen == 4 && strncasecmp(m.charset, "utf8", 4) == 0))
        return srv_fail(err, 415, NULL,
                        "Content-Type \"%.100s\": JSON bodies must be UTF-8",
                        ct);
      return 0;
    }
    if (media_is(&m, "application", "vnd.safetensors")) {
      *kind = BODY_SAFETENSORS;
      return 0;
    }
    if (media_is(&m, "application", "x-npy") ||
        media_is(&m, "application", "npy"))
      return refuse_npy(ct, err);
  }
  return srv_fail(err, 415, NULL,
                  "Content-Type \"%.100s\" is not supported; send "
                  "application/json or application/vnd.safetensors",
                  ct);
}

/* ======================================================================
 * output options
 * ====================================================================== */

int srv_codec__read_options(struct srv_call *c, struct srv_err *err)
{
  const json_t *j;

  j = json_object_get(c->in.params, "encoding");
  if (j) {
    const char *s = json_string_value(j);
    if (s && strcmp(s, "json") == 0)
      c->in.b64 = 0;
    else if (s && strcmp(s, "b64") == 0)
      c->in.b64 = 1;
    else
      return srv_fail(err, 400, "/encoding",
                      "encoding %s%.40s%s is not \"json\" or \"b64\"",
                      s ? "\"" : "", s ? s : "(not a string)", s ? "\"" : "");
  }
  j = json_object_get(c->in.params, "output_dtype");
  if (j) {
    const char *s = json_string_value(j);
    int d = s ? ab_dtype_parse(s) : -1;
    if (d < 0 || d == AB_DTYPE_I32)
      return srv_fail(err, 400, "/output_dtype",
                      "output_dtype %s%.40s%s is not one of \"float32\", "
                      "\"float16\", \"bfloat16\", \"float64\"",
                      s ? "\"" : "", s ? s : "(not a string)", s ? "\"" : "");
    c->in.out_dtype = d;
  }
  j = json_object_get(c->in.params, "output");
  if (j) {
    if (!json_is_string(j))
      return srv_fail(err, 400, "/output",
                      "output must be a string naming one output");
    c->in.pick = srv_arena_strdup(&c->arena, json_string_value(j));
    if (!c->in.pick)
      return srv_fail(err, 500, "/output", "out of memory");
  }
  return 0;
}

/* ======================================================================
 * the request
 * ====================================================================== */

/* An Open Inference Protocol body: JSON, or JSON followed by binary
 * tensors, which clients send as application/octet-stream or without a
 * Content-Type.  The answer's form is the request's to choose (its
 * outputs' binary_data), so Accept is not read. */
static int v2_media(const char *ct, struct srv_err *err)
{
  struct media m;

  if (blank(ct))
    return 0;
  if (parse_media(ct, ct + strlen(ct), &m) == 0 &&
      media_is(&m, "application", "octet-stream"))
    return 0;
  if (parse_media(ct, ct + strlen(ct), &m) == 0 &&
      media_is(&m, "application", "json")) {
    enum body_kind kind;
    return classify_content_type(ct, &kind, err); /* the charset rule */
  }
  return srv_fail(err, 415, NULL,
                  "Content-Type \"%.100s\" is not supported on /v2; send "
                  "application/json, application/octet-stream (JSON "
                  "followed by binary tensors) or none",
                  ct);
}

/* The body's kind from Content-Type (415) and the answer's format from
 * Accept (406). */
static int media(const struct srv_route *route, const char *content_type,
                 const char *accept, enum body_kind *kind, enum srv_fmt *fmt,
                 struct srv_err *err)
{
  int png_ok = route && (route->flags & SRV_ROUTE_PNG);

  *fmt = SRV_FMT_JSON;
  if (route && (route->flags & SRV_ROUTE_V2)) {
    *kind = BODY_JSON;
    return v2_media(content_type, err);
  }
  if (classify_content_type(content_type, kind, err))
    return -1;
  if (!blank(accept) && negotiate(accept, png_ok, fmt) != 0) {
    /* Routes without a body answer one fixed type (health, metrics,
     * openapi): RFC 9110 12.5.1 lets them disregard Accept. */
    if (!route || (route->flags & SRV_ROUTE_BODY))
      return srv_fail(err, 406, NULL,
                      "Accept \"%.120s\" cannot be met; this route answers "
                      "application/json, application/vnd.safetensors, "
                      "application/x-npy%s",
                      accept, png_ok ? " or image/png" : "");
    *fmt = SRV_FMT_JSON;
  }
  return 0;
}

int srv_codec_check_media(const struct srv_route *route,
                          const char *content_type, const char *accept,
                          struct srv_err *err)
{
  enum body_kind kind;
  enum srv_fmt fmt;

  return media(route, content_type, accept, &kind, &fmt, err);
}

int srv_codec_decode_request(struct srv_call *c, struct srv_err *err)
{
  enum body_kind kind;

  c->in.params = NULL;
  c->in.bin = NULL;
  c->in.nbin = 0;
  c->in.fmt = SRV_FMT_JSON;
  c->in.out_dtype = AB_DTYPE_F32;
  c->in.b64 = 0;
  c->in.pick = NULL;
  c->in.codec = NULL;

  if (media(c->req.route, c->req.content_type, c->req.accept, &kind, &c->in.fmt,
            err))
    return -1;
  if (c->req.route && (c->req.route->flags & SRV_ROUTE_V2))
    return srv_codec__v2_decode(c, err);
  if (is_npy(c->req.body, c->req.body_len))
    return refuse_npy(c->req.content_type, err);

  /* Early (c->req.body_avail): only safetensors can be read in part. */
  if (c->req.body_avail && kind != BODY_SAFETENSORS)
    return srv_fail(err, 415, NULL,
                    "only a safetensors body can be read before it is "
                    "complete");
  if (c->req.body_len == 0) {
    if (kind == BODY_SAFETENSORS)
      return srv_fail(err, 400, NULL,
                      "the safetensors body is empty; it needs at least the "
                      "8-byte header length");
    c->in.params = json_object();
    if (!c->in.params)
      return srv_fail(err, 500, NULL, "out of memory");
  } else if (kind == BODY_SAFETENSORS) {
    if (srv_codec__st_decode(c, err))
      return -1;
  } else {
    c->in.params = srv_codec__parse_object(c, c->req.body, c->req.body_len,
                                           "the request body", err);
    if (!c->in.params)
      return -1;
  }
  return srv_codec__read_options(c, err);
}
