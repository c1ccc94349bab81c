/* page.c: the explorer page -- GET / (web/index.html) and its script and
 * style sheet, embedded in the binary at build time like the OpenAPI
 * document (health.c), so that the service needs no data files.  They need
 * no API key (the API calls the page makes do), and go out with a
 * Content-Security-Policy that allows only this server's own script, style
 * and API: no inline script, nothing fetched from elsewhere. */
#include "srv.h"

/* Paths relative to the directory make runs in (the project root); the
 * Makefile makes page.o depend on the files. */
#define EMBED(sym, file)                                                       \
  __asm__(".section .rodata\n"                                                 \
          ".balign 16\n" #sym "_begin:\n"                                      \
          ".incbin \"" file "\"\n" #sym "_end:\n"                              \
          ".byte 0\n"                                                          \
          ".previous\n");                                                      \
  extern const char sym##_begin[] __attribute__((visibility("hidden")));       \
  extern const char sym##_end[] __attribute__((visibility("hidden")))

EMBED(page_html, "web/index.html");
EMBED(page_js, "web/explorer.js");
EMBED(page_css, "web/explorer.css");

/* connect-src 'self' is the API; img-src data: lets the page name an empty
 * icon (else the browser asks for /favicon.ico). */
static const char *const g_headers[][2] = {
    {"Content-Security-Policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; "
     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
     "form-action 'none'; frame-ancestors 'none'"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
    {"Cache-Control", "no-cache"},
};

static int serve(struct srv_call *c, const char *type, const char *begin,
                 const char *end, struct srv_err *err)
{
  if (srv_buf_append(&c->plan.custom, begin, (size_t)(end - begin)) != 0)
    return srv_fail(err, 500, NULL, "out of memory");
  c->plan.custom_type = type;
  c->plan.custom_headers = g_headers;
  c->plan.ncustom_headers = (int)(sizeof g_headers / sizeof g_headers[0]);
  return 0;
}

int srv_h_page(struct srv_call *c, struct srv_err *err)
{
  return serve(c, "text/html; charset=utf-8", page_html_begin, page_html_end,
               err);
}

int srv_h_page_js(struct srv_call *c, struct srv_err *err)
{
  return serve(c, "text/javascript; charset=utf-8", page_js_begin,
               page_js_end, err);
}

int srv_h_page_css(struct srv_call *c, struct srv_err *err)
{
  return serve(c, "text/css; charset=utf-8", page_css_begin, page_css_end,
               err);
}
