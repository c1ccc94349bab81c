/* router.c: the route table built from routes.def and method+path
 * matching.  Knows nothing about MHD: it maps two strings to a route or to
 * a 404/405 error. */
#include "srv.h"

#include <stdio.h>
#include <string.h>

static const struct srv_route g_routes[] = {
#define SRV_ROUTE(method, path, name, prepare, finish, flags)                  \
  {#method, path, #name, prepare, finish, flags},
#include "routes.def"
#undef SRV_ROUTE
};

#define NROUTES (sizeof g_routes / sizeof g_routes[0])

const struct srv_route *srv_route_table(size_t *n)
{
  if (n)
    *n = NROUTES;
  return g_routes;
}

#define V2_MODELS "/v2/models/"
#define V2_VERSION "/versions/1"

/* "/v2/models/<m>/versions/1[/...]" is "/v2/models/<m>[/...]": version 1
 * is the only one, and the Open Inference Protocol lets a client name it or
 * not.  Returns path, or buf holding the path without the version. */
static const char *v2_unversioned(const char *path, char *buf, size_t cap)
{
  const char *m, *slash;
  size_t vl = sizeof V2_VERSION - 1;

  if (strncmp(path, V2_MODELS, sizeof V2_MODELS - 1) != 0)
    return path;
  m = path + sizeof V2_MODELS - 1;
  slash = strchr(m, '/');
  if (!slash || slash == m || strncmp(slash, V2_VERSION, vl) != 0 ||
      (slash[vl] != '\0' && slash[vl] != '/') || strlen(path) - vl >= cap)
    return path;
  memcpy(buf, path, (size_t)(slash - path));
  strcpy(buf + (slash - path), slash + vl);
  return buf;
}

int srv_route_path_index(const char *path)
{
  char alias[256];
  size_t i;

  if (path)
    path = v2_unversioned(path, alias, sizeof alias);
  for (i = 0; path && i < NROUTES; i++)
    if (strcmp(g_routes[i].path, path) == 0)
      return (int)i;
  return -1;
}

/* HEAD is answered by the GET route (MHD sends the headers only). */
static int method_matches(const struct srv_route *r, const char *method)
{
  if (strcmp(r->method, method) == 0)
    return 1;
  return strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0;
}

const struct srv_route *srv_route_find(const char *method, const char *path,
                                       struct srv_err *err)
{
  size_t i, n = 0;
  int path_known = 0;
  char allow[sizeof err->allow], alias[256];

  if (!method || !path) {
    srv_fail(err, 400, NULL, "the request has no method or path");
    return NULL;
  }
  path = v2_unversioned(path, alias, sizeof alias);
  /* A few dozen routes: a linear scan of short strings beats any index
   * (their first bytes mostly differ). */
  for (i = 0; i < NROUTES; i++) {
    if (strcmp(g_routes[i].path, path) != 0)
      continue;
    if (method_matches(&g_routes[i], method))
      return &g_routes[i];
    path_known = 1;
  }
  if (!path_known) {
    srv_fail(err, 404, NULL, "no route for path '%.200s'", path);
    return NULL;
  }
  /* 405: list every method the path answers, for the Allow header. */
  allow[0] = '\0';
  for (i = 0; i < NROUTES; i++) {
    if (strcmp(g_routes[i].path, path) != 0)
      continue;
    n += (size_t)snprintf(allow + n, sizeof allow - n, "%s%s",
                          n ? ", " : "", g_routes[i].method);
    if (n < sizeof allow && strcmp(g_routes[i].method, "GET") == 0)
      n += (size_t)snprintf(allow + n, sizeof allow - n, ", HEAD");
    if (n >= sizeof allow)
      n = sizeof allow - 1;
  }
  srv_fail(err, 405, NULL, "method %.32s is not allowed on %.200s (allowed: %s)",
           method, path, allow);
  memcpy(err->allow, allow, sizeof err->allow);
  return NULL;
}
