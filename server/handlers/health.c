/* health.c: the operational routes -- liveness, readiness, metrics and the
 * OpenAPI document, which is embedded in the binary at build time so that
 * the runtime image needs no data files. */
#include "srv.h"

/* The assembler includes the file relative to the directory make runs in
 * (the project root); the Makefile makes health.o depend on it. */
#define OPENAPI_FILE "api/openapi.yaml"

__asm__(".section .rodata\n"
        ".balign 16\n"
        "openapi_begin:\n"
        ".incbin \"" OPENAPI_FILE "\"\n"
        "openapi_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char openapi_begin[] __attribute__((visibility("hidden")));
extern const char openapi_end[] __attribute__((visibility("hidden")));

struct srv_probe srv_probe;

static int reply(struct srv_call *c, const char *type, const char *body,
                 size_t n, struct srv_err *err)
{
  if (srv_buf_append(&c->plan.custom, body, n) != 0)
    return srv_fail(err, 500, NULL, "out of memory");
  c->plan.custom_type = type;
  return 0;
}

int srv_h_healthz(struct srv_call *c, struct srv_err *err)
{
  static const char ok[] = "{\"status\":\"ok\"}";

  return reply(c, "application/json", ok, sizeof ok - 1, err);
}

int srv_h_readyz(struct srv_call *c, struct srv_err *err)
{
  static const char ok[] = "{\"status\":\"ok\"}";

  if (srv_probe.draining && srv_probe.draining()) {
    srv_fail(err, 503, NULL, "the server is draining and accepts no work");
    err->retry_after = 1;
    return -1;
  }
  return reply(c, "application/json", ok, sizeof ok - 1, err);
}

int srv_h_metrics(struct srv_call *c, struct srv_err *err)
{
  if (!srv_probe.metrics || srv_probe.metrics(&c->plan.custom) != 0)
    return srv_fail(err, 500, NULL, "out of memory rendering the metrics");
  c->plan.custom_type = "text/plain; version=0.0.4; charset=utf-8";
  return 0;
}

int srv_h_openapi(struct srv_call *c, struct srv_err *err)
{
  return reply(c, "application/yaml", openapi_begin,
               (size_t)(openapi_end - openapi_begin), err);
}
