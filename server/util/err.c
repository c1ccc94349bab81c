/* err.c: building struct srv_err values -- the one path by which every
 * failure in the server becomes a problem+json body. */
#include "srv.h"

#include <stdio.h>
#include <string.h>

/* Slug and title per status.  The slug is the last segment of the problem
 * type URI (https://attnbias.dev/errors/<slug>), the title the RFC 9110
 * reason phrase, so that both stay fixed for a given status as RFC 9457
 * asks of `title`. */
static const struct {
  int http;
  const char *slug, *title;
} g_kinds[] = {
    {400, "bad-request", "Bad Request"},
    {401, "unauthorized", "Unauthorized"},
    {403, "forbidden", "Forbidden"},
    {404, "not-found", "Not Found"},
    {405, "method-not-allowed", "Method Not Allowed"},
    {406, "not-acceptable", "Not Acceptable"},
    {408, "request-timeout", "Request Timeout"},
    {413, "content-too-large", "Content Too Large"},
    {415, "unsupported-media-type", "Unsupported Media Type"},
    {500, "internal-error", "Internal Server Error"},
    {501, "not-implemented", "Not Implemented"},
    {503, "service-unavailable", "Service Unavailable"},
};

void srv_strcpy(char *dst, size_t cap, const char *src)
{
  size_t n = src ? strlen(src) : 0;

  if (n >= cap)
    n = cap - 1;
  if (n)
    memcpy(dst, src, n);
  dst[n] = '\0';
}

int srv_fail(struct srv_err *e, int http, const char *field, const char *fmt,
             ...)
{
  va_list ap;
  size_t i;

  memset(e, 0, sizeof *e);
  e->http = http;
  srv_strcpy(e->slug, sizeof e->slug, "error");
  srv_strcpy(e->title, sizeof e->title, "Error");
  for (i = 0; i < sizeof g_kinds / sizeof g_kinds[0]; i++) {
    if (g_kinds[i].http == http) {
      srv_strcpy(e->slug, sizeof e->slug, g_kinds[i].slug);
      srv_strcpy(e->title, sizeof e->title, g_kinds[i].title);
      break;
    }
  }
  srv_strcpy(e->field, sizeof e->field, field);
  va_start(ap, fmt);
  vsnprintf(e->detail, sizeof e->detail, fmt, ap);
  va_end(ap);
  return -1;
}

void srv_err_slug(struct srv_err *e, const char *slug, const char *title)
{
  if (slug)
    srv_strcpy(e->slug, sizeof e->slug, slug);
  if (title)
    srv_strcpy(e->title, sizeof e->title, title);
}

int srv_fail_lib(struct srv_err *e, enum ab_status st, const char *prefix,
                 const char *strip)
{
  const struct ab_error *le = ab_last_error();
  /* The recorded error belongs to this call only when the statuses agree;
   * otherwise it is stale and only the status can be reported. */
  int fresh = le && le->status == st && st != AB_STATUS_OK;
  const char *arg = fresh ? le->arg : "";
  size_t sl = strip ? strlen(strip) : 0;
  char field[sizeof e->field];
  size_t n = 0, i;
  int http;

  /* The library names arguments as the attention request does
   * ("bias.table"); below the object `prefix` points at, its own name
   * goes. */
  if (sl && strncmp(arg, strip, sl) == 0 && (arg[sl] == '.' || !arg[sl]))
    arg += sl + (arg[sl] ? 1 : 0);

  switch (st) {
  case AB_STATUS_OVERFLOW:
    http = 413;
    break;
  case AB_STATUS_NO_MEMORY:
    http = 500;
    break;
  default:
    http = 400;
    break;
  }
  /* field = prefix + "/" + arg, the argument's dots becoming the JSON
   * pointer's slashes ("rope.rotary_dim" -> "/rope/rotary_dim"). */
  field[0] = '\0';
  if (prefix && *prefix) {
    n = strlen(prefix);
    if (n >= sizeof field)
      n = sizeof field - 1;
    memcpy(field, prefix, n);
    field[n] = '\0';
  }
  if (*arg && n + 1 < sizeof field) {
    field[n++] = '/';
    for (i = 0; arg[i] && n + 1 < sizeof field; i++)
      field[n++] = arg[i] == '.' ? '/' : arg[i];
    field[n] = '\0';
  }
  if (fresh && le->msg[0])
    return srv_fail(e, http, field[0] ? field : NULL, "%s", le->msg);
  return srv_fail(e, http, field[0] ? field : NULL, "%s",
                  ab_status_str(st));
}
