/* cors.c: browsers allowed in, on purpose (--cors-origin; the Fetch
 * standard's CORS protocol).  Off by default: without --cors-origin no
 * answer carries a CORS header and OPTIONS is a 405 like any other method.
 *
 * With it, a preflight (OPTIONS with Origin and Access-Control-Request-
 * Method) is answered before the API key and the method checks -- a
 * browser never sends credentials on a preflight -- with the path's
 * methods and the request headers a client may send; every other answer
 * to a listed origin names it in Access-Control-Allow-Origin and exposes
 * the headers clients read.  Vary: Origin goes on every answer, since the
 * answer depends on it (caches must not hand one origin's to another). */
#include "http/http.h"
#include "util/config.h"

#include <microhttpd.h>
#include <string.h>

/* Request headers a page may send beside the CORS-safelisted ones. */
#define ALLOW_HEADERS                                                          \
  "Authorization, Content-Type, Accept, Prefer, "                              \
  "Inference-Header-Content-Length"
/* Response headers a page may read beside the safelisted ones. */
#define EXPOSE_HEADERS                                                         \
  "X-Attnbias-Ignored, Server-Timing, Retry-After, Allow, "                    \
  "WWW-Authenticate, Preference-Applied, Inference-Header-Content-Length, "    \
  "X-Attnbias-Config-Used, X-Attnbias-Config-Upstream, "                       \
  "X-Attnbias-Config-Layer"
/* How long a browser may keep a preflight's answer, in seconds. */
#define MAX_AGE "600"

int srv_cors_enabled(void) { return srv_cfg.cors_origins[0] != '\0'; }

/* The Access-Control-Allow-Origin value for a request from origin, or NULL
 * when it is not allowed (or not a cross-origin request). */
static const char *allowed(const char *origin)
{
  if (!srv_cors_enabled() || !origin || !*origin)
    return NULL;
  if (srv_config_origin_listed(srv_cfg.cors_origins, origin, strlen(origin)))
    return origin;
  if (srv_config_origin_listed(srv_cfg.cors_origins, "*", 1))
    return "*";
  return NULL;
}

int srv_cors_is_preflight(const char *method, const char *origin,
                          const char *request_method)
{
  return srv_cors_enabled() && strcmp(method, "OPTIONS") == 0 && origin &&
         request_method;
}

void srv_cors_headers(struct MHD_Response *r, const char *origin,
                      const char *preflight_methods)
{
  const char *allow = allowed(origin);

  if (!srv_cors_enabled())
    return;
  MHD_add_response_header(r, "Vary", "Origin");
  if (!allow)
    return;
  MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
  if (preflight_methods) {
    MHD_add_response_header(r, "Access-Control-Allow-Methods",
                            preflight_methods);
    MHD_add_response_header(r, "Access-Control-Allow-Headers", ALLOW_HEADERS);
    MHD_add_response_header(r, "Access-Control-Max-Age", MAX_AGE);
  } else {
    MHD_add_response_header(r, "Access-Control-Expose-Headers",
                            EXPOSE_HEADERS);
  }
}

int srv_cors_preflight(const char *path, const char *origin,
                       struct srv_err *err, char *methods, size_t cap)
{
  struct srv_err e;

  /* The path's methods: the router's 405 lists them (OPTIONS is no
   * route's method). */
  if (srv_route_find("OPTIONS", path, &e) || e.http != 405) {
    *err = e;
    return -1;
  }
  if (!allowed(origin))
    return srv_fail(err, 403, NULL,
                    "origin '%.200s' is not among this server's "
                    "--cors-origin",
                    origin);
  srv_strcpy(methods, cap, e.allow);
  return 0;
}
