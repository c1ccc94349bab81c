/* prefer.c: the Prefer request header (RFC 7240) -- only its "handling"
 * preference, which attnbiasd honours: handling=strict refuses unknown
 * fields instead of listing them in X-Attnbias-Ignored. */
#include "srv.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* Skip optional whitespace. */
static const char *ows(const char *p)
{
  while (*p == ' ' || *p == '\t')
    p++;
  return p;
}

/* A token's end (RFC 9110 tchar). */
static const char *token_end(const char *p)
{
  while (*p && (isalnum((unsigned char)*p) || strchr("!#$%&'*+-.^_`|~", *p)))
    p++;
  return p;
}

/* Compare [b, e) with a lower-case word, ignoring case. */
static int word_is(const char *b, const char *e, const char *w)
{
  size_t n = strlen(w);

  return (size_t)(e - b) == n && strncasecmp(b, w, n) == 0;
}

/* Past a value: a token or a quoted string (with its escapes). */
static const char *value_end(const char *p, const char **vb, const char **ve)
{
  if (*p == '"') {
    *vb = ++p;
    while (*p && *p != '"')
      p += (*p == '\\' && p[1]) ? 2 : 1;
    *ve = p;
    return *p ? p + 1 : p;
  }
  *vb = p;
  *ve = token_end(p);
  return *ve;
}

int srv_prefer_strict(const char *value)
{
  const char *p = value;

  while (p && *p) {
    const char *nb, *ne, *vb = NULL, *ve = NULL;

    p = ows(p);
    nb = p;
    ne = p = token_end(p);
    p = ows(p);
    if (*p == '=') {
      p = value_end(ows(p + 1), &vb, &ve);
      p = ows(p);
    }
    /* The first "handling" decides (RFC 7240 section 2). */
    if (ne > nb && word_is(nb, ne, "handling"))
      return vb && word_is(vb, ve, "strict");
    /* Parameters, then on to the next preference. */
    while (*p && *p != ',') {
      if (*p == '"') {
        const char *b, *e;
        p = value_end(p, &b, &e);
      } else {
        p++;
      }
    }
    if (*p == ',')
      p++;
  }
  return 0;
}
