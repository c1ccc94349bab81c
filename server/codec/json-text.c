/* json-text.c: JSON text in and out -- string escaping, JSON pointers, and
 * parsing request texts with jansson behind a pre-scan that (1) bounds the
 * nesting depth before jansson's recursive parser sees the text and (2)
 * lifts large "data" number arrays out of the text so that they are parsed
 * straight into a double array instead of one jansson node per number, and
 * large "b64" strings so that they are decoded from the body in place.
 *
 * How (2) stays invisible: each lifted array is fed to jansson as the
 * string "\u0000<index>" (through json_load_callback, so the body is never
 * copied) with JSON_ALLOW_NUL set.  A request cannot contain such a string
 * itself: without the `\u0000` escape no JSON string holds a NUL byte, and
 * a text that contains `\u0000` anywhere is parsed without lifting (and
 * without JSON_ALLOW_NUL), exactly as before.  Numbers are read with
 * jansson's rules (srv_codec__parse_number), arrays holding anything but
 * numbers and the strings "inf", "-inf", "nan" are left to jansson, and so
 * are strings with any character outside the base64 alphabet, so values
 * and errors are the same on both paths. */
#include "codec-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * writing JSON strings and pointers
 * ====================================================================== */

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid
 * (overlong forms, surrogates and values past U+10FFFF are invalid). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
  unsigned c = s[0];
  size_t len, i;
  uint32_t cp;

  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (n < len)
    return 0;
  for (i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

int srv_codec__json_str(struct srv_buf *b, const char *s, size_t n)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, run = 0;

  if (srv_buf_append(b, "\"", 1))
    return -1;
  while (i < n) {
    unsigned ch = p[i];
    size_t sl;
    char esc[8];
    const char *rep = NULL;
    size_t rl = 0;

    if (ch >= 0x20 && ch != '"' && ch != '\\' && ch < 0x80) {
      i++;
      continue;
    }
    if (ch >= 0x80) {
      sl = utf8_seq(p + i, n - i);
      if (sl) {
        i += sl;
        continue;
      }
      rep = "\\ufffd"; /* replacement character for an invalid byte */
      rl = 6;
    } else if (ch == '"' || ch == '\\') {
      esc[0] = '\\';
      esc[1] = (char)ch;
      rep = esc;
      rl = 2;
    } else {
      switch (ch) {
      case '\n': rep = "\\n"; rl = 2; break;
      case '\r': rep = "\\r"; rl = 2; break;
      case '\t': rep = "\\t"; rl = 2; break;
      case '\b': rep = "\\b"; rl = 2; break;
      case '\f': rep = "\\f"; rl = 2; break;
      default:
        snprintf(esc, sizeof esc, "\\u%04x", ch);
        rep = esc;
        rl = 6;
        break;
      }
    }
    /* Flush the plain run before the escaped byte. */
    if (srv_buf_append(b, s + run, i - run) || srv_buf_append(b, rep, rl))
      return -1;
    i++;
    run = i;
  }
  if (srv_buf_append(b, s + run, n - run) || srv_buf_append(b, "\"", 1))
    return -1;
  return 0;
}

void srv_codec__pointer_add(char *out, size_t cap, const char *tok, size_t n)
{
  size_t len = strlen(out), i;

  if (len + 1 >= cap)
    return;
  out[len++] = '/';
  for (i = 0; i < n && len + 1 < cap; i++) {
    if (tok[i] == '~' || tok[i] == '/') {
      if (len + 2 >= cap)
        break;
      out[len++] = '~';
      out[len++] = tok[i] == '~' ? '0' : '1';
    } else {
      out[len++] = tok[i];
    }
  }
  out[len] = '\0';
}

void srv_codec__pointer(char *out, size_t cap, const char *dotted)
{
  const char *p = dotted, *dot;

  if (!cap)
    return;
  out[0] = '\0';
  if (!dotted || !*dotted)
    return;
  for (;;) {
    dot = strchr(p, '.');
    srv_codec__pointer_add(out, cap, p, dot ? (size_t)(dot - p) : strlen(p));
    if (!dot)
      break;
    p = dot + 1;
  }
}

/* Beyond this many bytes the ignored list is cut: it is a courtesy header,
 * and a request with thousands of unknown members must not grow it (or the
 * response headers) without bound. */
#define IGNORED_MAX 2048

void srv_codec_ignored_add(struct srv_ignored *ig, const char *pointer)
{
  static const char hex[] = "0123456789ABCDEF";
  struct srv_buf *b = &ig->list;
  char name[3 * 256 + 8];
  const char *p = pointer;
  size_t n = 0;

  if (b->len >= IGNORED_MAX) {
    /* Say once that the list was cut. */
    if (b->len < 3 || memcmp(b->data + b->len - 3, "...", 3) != 0)
      srv_buf_append(b, ",...", 4);
    return;
  }
  if (ig->strict && !ig->first[0])
    srv_strcpy(ig->first, sizeof ig->first, pointer);
  if (*p == '/')
    p++;
  for (; *p && n + 4 < sizeof name; p++) {
    unsigned char ch = (unsigned char)*p;

    if (ch == '/') {
      name[n++] = '.';
      continue;
    }
    if (ch == '~' && (p[1] == '0' || p[1] == '1'))
      ch = *++p == '0' ? '~' : '/';
    if (ch > 0x20 && ch < 0x7f && ch != '%' && ch != ',' && ch != '.') {
      name[n++] = (char)ch;
    } else {
      name[n++] = '%';
      name[n++] = hex[ch >> 4];
      name[n++] = hex[ch & 15];
    }
  }
  if (b->len)
    srv_buf_append(b, ",", 1);
  srv_buf_append(b, name, n);
}

void *srv_codec__alloc(struct srv_call *c, size_t n, const char *field,
                       struct srv_err *err)
{
  void *p = srv_arena_alloc(&c->arena, n);

  if (p)
    return p;
  if (c->arena.cap && (n > c->arena.cap || c->arena.used > c->arena.cap - n)) {
    srv_fail(err, 413, field && *field ? field : NULL,
             "decoding %s needs %zu more bytes than the request's memory "
             "limit allows (%zu of %zu in use)",
             field && *field ? field : "the request", n, c->arena.used,
             c->arena.cap);
    return NULL;
  }
  srv_fail(err, 500, field && *field ? field : NULL,
           "out of memory allocating %zu bytes while decoding %s", n,
           field && *field ? field : "the request");
  return NULL;
}

/* ======================================================================
 * pre-scan: depth bound and "data" spans
 * ====================================================================== */

struct frame {
  int obj;      /* 1: object, 0: array */
  int want_key; /* object: the next string is a key */
  int rows;     /* array: its number arrays may be lifted as rows */
  int64_t idx;  /* array: index of the current element */
  size_t koff, klen; /* object: the current member's raw key */
};

/* A lifted array: text[start, end) becomes the placeholder of span `index`. */
struct lift {
  size_t start, end;
  int index;
};

struct scan {
  struct srv_call *c;
  const char *t;
  size_t len;
  struct lift *lifts; /* malloc'd; freed by parse_object */
  int nlifts, cap;
  int lift_ok; /* -1: not decided yet, 0: text has \u0000, 1: lifting */
};

static int is_ws(char ch)
{
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* Bytes that may appear in a JSON number token. */
static const uint8_t g_numch[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1,
    ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1, ['-'] = 1, ['+'] = 1,
    ['.'] = 1, ['e'] = 1, ['E'] = 1,
};

/* One of the strings "inf", "-inf", "nan" at p (with its quotes): its
 * length, and the value in *v; 0 if it is anything else. */
static size_t span_string(const char *p, const char *e, double *v)
{
  size_t room = (size_t)(e - p);

  if (room >= 5 && memcmp(p, "\"inf\"", 5) == 0) {
    *v = INFINITY;
    return 5;
  }
  if (room >= 6 && memcmp(p, "\"-inf\"", 6) == 0) {
    *v = -INFINITY;
    return 6;
  }
  if (room >= 5 && memcmp(p, "\"nan\"", 5) == 0) {
    *v = NAN;
    return 5;
  }
  return 0;
}

/* Add a lifted span for text[pos, end) to s and c: numbers v[0..n), or
 * (v NULL) the string str[0..slen). */
static int record_lift(struct scan *s, size_t pos, size_t end,
                       const double *v, int64_t n, const char *str,
                       size_t slen, struct srv_err *err)
{
  struct srv_codec_state *st = s->c->codec;

  if (!st) {
    st = srv_codec__alloc(s->c, sizeof *st, "", err);
    if (!st)
      return -1;
    memset(st, 0, sizeof *st);
    s->c->codec = st;
  }
  if (st->nspans == st->cap) {
    int ncap = st->cap ? 2 * st->cap : 16;
    struct srv_codec_span *ns;
    if (ncap > (1 << 24))
      return 0;
    ns = srv_codec__alloc(s->c, (size_t)ncap * sizeof *ns, "", err);
    if (!ns)
      return -1;
    if (st->nspans)
      memcpy(ns, st->spans, (size_t)st->nspans * sizeof *ns);
    st->spans = ns;
    st->cap = ncap;
  }
  if (s->nlifts == s->cap) {
    int ncap = s->cap ? 2 * s->cap : 16;
    struct lift *nl = realloc(s->lifts, (size_t)ncap * sizeof *nl);
    if (!nl)
      return 0;
    s->lifts = nl;
    s->cap = ncap;
  }
  st->spans[st->nspans].v = v;
  st->spans[st->nspans].n = n;
  st->spans[st->nspans].text = str;
  st->spans[st->nspans].len = slen;
  s->lifts[s->nlifts].start = pos;
  s->lifts[s->nlifts].end = end;
  s->lifts[s->nlifts].index = st->nspans;
  s->nlifts++;
  st->nspans++;
  return 1;
}

/* Try to lift the array whose '[' is at t[pos] when it holds at least min
 * numbers.  Returns 1 (lifted: *end is one past ']'), 0 (not a candidate:
 * leave it to jansson) or -1 (error, err set).  A flat number array holds
 * no ']' before its own, so the first ']' bounds it and its commas count
 * its elements; anything else in it fails the parse below and the array
 * is left alone. */
static int try_lift(struct scan *s, size_t pos, int64_t min, size_t *end,
                    struct srv_err *err)
{
  const char *t = s->t, *p = t + pos + 1, *e = t + s->len, *close, *q;
  int64_t n = 1, k;
  double *v;
  size_t tl;
  int r;

  /* One pass to the first ']', counting commas, that gives up at the first
   * '[' or '{': such an array is not flat, and stopping there keeps nested
   * candidates ("data":[{"data":[...) from each scanning -- and reserving
   * memory for -- the same inner array again. */
  for (q = p; q < e && *q != ']'; q++) {
    if (*q == '[' || *q == '{')
      return 0;
    n += *q == ',';
  }
  if (q == e)
    return 0;
  close = q;
  if (n < min || (uint64_t)n > SIZE_MAX / sizeof(double))
    return 0;
  if (s->lift_ok < 0) /* decided once, on the first candidate */
    s->lift_ok = memmem(t, s->len, "\\u0000", 6) == NULL;
  if (!s->lift_ok)
    return 0;

  v = srv_codec__alloc(s->c, (size_t)n * sizeof(double), "", err);
  if (!v)
    return -1;
  for (k = 0; k < n; k++) {
    while (is_ws(*p))
      p++;
    if (*p == '"') {
      tl = span_string(p, close, &v[k]);
      if (!tl)
        return 0;
    } else {
      for (q = p; g_numch[(uint8_t)*q]; q++)
        ;
      tl = (size_t)(q - p);
      /* Not a number jansson accepts: leave the array to jansson, which
       * says why. */
      if (!tl || srv_codec__parse_number(p, tl, &v[k]) != 0)
        return 0;
    }
    p += tl;
    while (is_ws(*p))
      p++;
    if (*p != (k + 1 < n ? ',' : ']'))
      return 0;
    p++;
  }
  *end = (size_t)(close - t) + 1;
  r = record_lift(s, pos, *end, v, n, NULL, 0, err);
  return r;
}

/* 1 for the characters of padded base64 (RFC 4648 alphabet and '='). */
static const uint8_t g_b64ch[256] = {
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
    ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1,
    ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1,
    ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1,
    ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1,
    ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1, ['0'] = 1, ['1'] = 1,
    ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['+'] = 1, ['/'] = 1, ['='] = 1,
};

/* Try to lift the string t[pos..end] (quotes included) of a "b64" member:
 * only when every character is of the base64 alphabet, so jansson would
 * have read it unchanged.  Returns 1, 0 (left to jansson) or -1. */
static int try_lift_b64(struct scan *s, size_t pos, size_t end,
                        struct srv_err *err)
{
  const char *t = s->t;
  size_t i, len = end - pos - 1;
  uint8_t all = 1;

  /* The span points into the text, so only a text that lives as long as
   * the call (the body, not a safetensors header string) qualifies. */
  if (len < SRV_CODEC_B64_MIN || !s->c->body ||
      (uintptr_t)t < (uintptr_t)s->c->body ||
      (uintptr_t)(t + s->len) > (uintptr_t)(s->c->body + s->c->body_len))
    return 0;
  for (i = pos + 1; i < end; i++)
    all &= g_b64ch[(uint8_t)t[i]];
  if (!all)
    return 0;
  if (s->lift_ok < 0)
    s->lift_ok = memmem(t, s->len, "\\u0000", 6) == NULL;
  if (!s->lift_ok)
    return 0;
  return record_lift(s, pos, end + 1, NULL, 0, t + pos + 1, len, err);
}

/* Byte offset of the closing quote of the string opening at t[pos], or
 * len when it is unterminated. */
static size_t string_end(const char *t, size_t len, size_t pos)
{
  size_t i = pos + 1;

  for (;;) {
    const char *q = memchr(t + i, '"', len - i);
    size_t bs = 0;
    if (!q)
      return len;
    i = (size_t)(q - t);
    while (i - bs > pos + 1 && t[i - bs - 1] == '\\')
      bs++;
    if (bs % 2 == 0)
      return i;
    i++;
  }
}

static int depth_error(const struct scan *s, const struct frame *fr,
                       int depth, size_t pos, const char *what,
                       struct srv_err *err)
{
  char ptr[sizeof err->field], num[24];
  int i;

  ptr[0] = '\0';
  for (i = 0; i < depth; i++) {
    if (fr[i].obj) {
      srv_codec__pointer_add(ptr, sizeof ptr, s->t + fr[i].koff, fr[i].klen);
    } else {
      snprintf(num, sizeof num, "%lld", (long long)fr[i].idx);
      srv_codec__pointer_add(ptr, sizeof ptr, num, strlen(num));
    }
  }
  return srv_fail(err, 400, ptr,
                  "%s nests arrays/objects deeper than %d levels at byte %zu "
                  "(%s)",
                  what, SRV_CODEC_MAX_DEPTH, pos, ptr[0] ? ptr : "/");
}

/* Members whose (nested) number arrays are not lifted: "data" holds a
 * flat list (lifted whole, or left for its reader to complain about), and
 * positions are read node by node, which tells integers from reals. */
const char *const srv_codec_node_keys[] = {"data", "positions", "q_positions",
                                           "k_positions", NULL};

static int node_key(const char *k, size_t n)
{
  int i;

  for (i = 0; srv_codec_node_keys[i]; i++)
    if (strlen(srv_codec_node_keys[i]) == n &&
        memcmp(srv_codec_node_keys[i], k, n) == 0)
      return 1;
  return 0;
}

/* The pre-scan.  Malformed text is not an error here: the scan stops
 * making sense and jansson reports the problem precisely. */
static int prescan(struct scan *s, const char *what, struct srv_err *err)
{
  struct frame fr[SRV_CODEC_MAX_DEPTH];
  const char *t = s->t;
  size_t pos = 0, len = s->len, end;
  int depth = 0, r;

  while (pos < len) {
    switch (t[pos]) {
    case '"':
      end = string_end(t, len, pos);
      if (end >= len)
        return 0;
      if (depth && fr[depth - 1].obj && fr[depth - 1].want_key) {
        fr[depth - 1].koff = pos + 1;
        fr[depth - 1].klen = end - pos - 1;
        fr[depth - 1].want_key = 0;
      } else if (s->c && depth && fr[depth - 1].obj &&
                 fr[depth - 1].klen == 3 &&
                 memcmp(t + fr[depth - 1].koff, "b64", 3) == 0) {
        if (try_lift_b64(s, pos, end, err) < 0)
          return -1;
      }
      pos = end + 1;
      break;
    case '[':
      r = 0;
      if (s->c && depth && fr[depth - 1].obj && !fr[depth - 1].want_key &&
          fr[depth - 1].klen == 4 &&
          memcmp(t + fr[depth - 1].koff, "data", 4) == 0)
        r = try_lift(s, pos, SRV_CODEC_SPAN_MIN, &end, err);
      else if (s->c && depth && !fr[depth - 1].obj && fr[depth - 1].rows)
        r = try_lift(s, pos, SRV_CODEC_ROW_MIN, &end, err);
      if (r < 0)
        return -1;
      if (r > 0) {
        pos = end;
        break;
      }
      /* fall through */
    case '{':
      if (depth == SRV_CODEC_MAX_DEPTH)
        return depth_error(s, fr, depth, pos, what, err);
      fr[depth].obj = t[pos] == '{';
      fr[depth].want_key = fr[depth].obj;
      fr[depth].idx = 0;
      fr[depth].koff = fr[depth].klen = 0;
      /* Rows are lifted inside an array that is a member's value (unless
       * the member is one whose arrays are read node by node) and inside
       * the arrays nested in it. */
      fr[depth].rows =
          !fr[depth].obj && depth &&
          (fr[depth - 1].obj ? !fr[depth - 1].want_key &&
                                   !node_key(t + fr[depth - 1].koff,
                                             fr[depth - 1].klen)
                             : fr[depth - 1].rows);
      depth++;
      pos++;
      break;
    case ']':
    case '}':
      if (depth)
        depth--;
      pos++;
      break;
    case ',':
      if (depth) {
        if (fr[depth - 1].obj)
          fr[depth - 1].want_key = 1;
        else
          fr[depth - 1].idx++;
      }
      pos++;
      break;
    default:
      pos++;
      break;
    }
  }
  return 0;
}

/* ======================================================================
 * parsing
 * ====================================================================== */

/* json_load_callback source: the text with lifted arrays replaced. */
struct feed {
  const struct scan *s;
  size_t pos;   /* next byte of the original text */
  int next;     /* next lift */
  char ph[24];  /* placeholder being emitted */
  size_t phlen, phpos;
};

static size_t feed_cb(void *buffer, size_t buflen, void *data)
{
  struct feed *f = data;
  char *out = buffer;
  size_t n = 0;

  while (n < buflen) {
    size_t k, stop;
    if (f->phpos < f->phlen) {
      k = f->phlen - f->phpos;
      if (k > buflen - n)
        k = buflen - n;
      memcpy(out + n, f->ph + f->phpos, k);
      f->phpos += k;
      n += k;
      continue;
    }
    if (f->next < f->s->nlifts && f->pos == f->s->lifts[f->next].start) {
      /* "\u0000<index>": 2 + 6 + digits bytes of JSON text. */
      int w = snprintf(f->ph, sizeof f->ph, "\"\\u0000%d\"",
                       f->s->lifts[f->next].index);
      f->phlen = w > 0 ? (size_t)w : 0;
      f->phpos = 0;
      f->pos = f->s->lifts[f->next].end;
      f->next++;
      continue;
    }
    stop = f->next < f->s->nlifts ? f->s->lifts[f->next].start : f->s->len;
    if (f->pos >= stop)
      break; /* end of text */
    k = stop - f->pos;
    if (k > buflen - n)
      k = buflen - n;
    memcpy(out + n, f->s->t + f->pos, k);
    f->pos += k;
    n += k;
  }
  return n;
}

/* Map an offset in the fed stream back to the original text. */
static size_t orig_offset(const struct scan *s, size_t pos)
{
  size_t shift = 0, fed_start;
  int i;
  char ph[24];

  for (i = 0; i < s->nlifts; i++) {
    size_t plen = (size_t)snprintf(ph, sizeof ph, "\"\\u0000%d\"",
                                   s->lifts[i].index);
    fed_start = s->lifts[i].start - shift;
    if (pos < fed_start)
      break;
    if (pos < fed_start + plen)
      return s->lifts[i].start;
    shift += (s->lifts[i].end - s->lifts[i].start) - plen;
  }
  return pos + shift;
}

json_t *srv_codec__parse_object(struct srv_call *c, const char *text,
                                size_t len, const char *what,
                                struct srv_err *err)
{
  struct scan s;
  json_error_t je;
  json_t *j;
  size_t flags = JSON_REJECT_DUPLICATES, off, i, line, col;

  memset(&s, 0, sizeof s);
  s.c = c;
  s.t = text;
  s.len = len;
  s.lift_ok = -1;
  if (prescan(&s, what, err) != 0) {
    free(s.lifts);
    return NULL;
  }
  if (s.nlifts) {
    struct feed f;
    memset(&f, 0, sizeof f);
    f.s = &s;
    j = json_load_callback(feed_cb, &f, flags | JSON_ALLOW_NUL, &je);
  } else {
    j = json_loadb(text, len, flags, &je);
  }
  if (!j) {
    off = (size_t)je.position;
    line = (size_t)je.line;
    col = (size_t)je.column;
    if (s.nlifts) {
      /* jansson saw placeholders: recount on the original text, the way
       * jansson counts (columns in characters, 0 after a newline). */
      off = orig_offset(&s, off);
      if (off > len)
        off = len;
      line = 1;
      col = 0;
      for (i = 0; i < off; i++) {
        if (text[i] == '\n') {
          line++;
          col = 0;
        } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
          col++;
        }
      }
    }
    free(s.lifts);
    srv_fail(err, 400, NULL, "%s is not valid JSON: %s (line %zu, column %zu, "
             "byte %zu)", what, je.text, line, col, off);
    return NULL;
  }
  free(s.lifts);
  if (!json_is_object(j)) {
    json_decref(j);
    srv_fail(err, 400, NULL, "%s must be a JSON object", what);
    return NULL;
  }
  return j;
}

/* The span a placeholder string names, of either kind, or NULL. */
static const struct srv_codec_span *span_any(const struct srv_call *c,
                                             const json_t *j)
{
  const struct srv_codec_state *st = c ? c->codec : NULL;
  const char *s;
  size_t n, i;
  long idx = 0;

  if (!st || !json_is_string(j))
    return NULL;
  s = json_string_value(j);
  n = json_string_length(j);
  if (n < 2 || n > 12 || s[0] != '\0')
    return NULL;
  for (i = 1; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return NULL;
    idx = idx * 10 + (s[i] - '0');
  }
  if (idx >= st->nspans)
    return NULL;
  return &st->spans[idx];
}

const struct srv_codec_span *srv_codec__span(const struct srv_call *c,
                                             const json_t *j)
{
  const struct srv_codec_span *sp = span_any(c, j);
  return sp && sp->v ? sp : NULL;
}

const struct srv_codec_span *srv_codec__span_str(const struct srv_call *c,
                                                 const json_t *j)
{
  const struct srv_codec_span *sp = span_any(c, j);
  return sp && !sp->v ? sp : NULL;
}

/* ---- values in messages ------------------------------------------------ */

struct show_out {
  char *p;
  size_t left; /* bytes left before the terminator */
  int cut;
};

static void show_put(struct show_out *o, const char *s, size_t n)
{
  if (o->cut)
    return;
  if (n > o->left) {
    n = o->left;
    o->cut = 1;
  }
  memcpy(o->p, s, n);
  o->p += n;
  o->left -= n;
}

static void show_value(const struct srv_call *c, const json_t *v,
                       struct show_out *o, int depth)
{
  const struct srv_codec_span *sp = span_any(c, v);
  char num[40];
  size_t i;

  if (o->cut)
    return;
  if (sp && sp->v) { /* a lifted row or "data": its numbers */
    show_put(o, "[", 1);
    for (i = 0; i < (size_t)sp->n && !o->cut; i++) {
      if (i)
        show_put(o, ",", 1);
      show_put(o, num, srv_codec__fmt_f64(num, sp->v[i]));
    }
    show_put(o, "]", 1);
  } else if (sp) { /* a lifted base64 string */
    show_put(o, "\"", 1);
    show_put(o, sp->text, sp->len);
    show_put(o, "\"", 1);
  } else if (json_is_array(v) && depth < 8) {
    show_put(o, "[", 1);
    for (i = 0; i < json_array_size(v) && !o->cut; i++) {
      if (i)
        show_put(o, ",", 1);
      show_value(c, json_array_get(v, i), o, depth + 1);
    }
    show_put(o, "]", 1);
  } else if (json_is_object(v) && depth < 8) {
    const char *key;
    json_t *m;
    int first = 1;
    show_put(o, "{", 1);
    json_object_foreach((json_t *)v, key, m) {
      json_t *ks = json_string(key);
      char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
      if (!first)
        show_put(o, ",", 1);
      first = 0;
      show_put(o, kt ? kt : "\"?\"", kt ? strlen(kt) : 3);
      show_put(o, ":", 1);
      free(kt);
      json_decref(ks);
      show_value(c, m, o, depth + 1);
      if (o->cut)
        break;
    }
    show_put(o, "}", 1);
  } else if (json_is_real(v)) { /* as sent: 1e300, not 1.0000000000000001e300 */
    show_put(o, num, srv_codec__fmt_f64(num, json_real_value(v)));
  } else {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s) {
      show_put(o, s, strlen(s));
      free(s);
    } else {
      show_put(o, "...", 3);
    }
  }
}

void srv_codec_show(const struct srv_call *c, const json_t *v, char *buf,
                    size_t size)
{
  struct show_out o;

  if (size < 8) {
    if (size)
      buf[0] = '\0';
    return;
  }
  if (!v) {
    snprintf(buf, size, "nothing");
    return;
  }
  o.p = buf;
  o.left = size - 4; /* room for "..." and the terminator */
  o.cut = 0;
  show_value(c, v, &o, 0);
  if (o.cut)
    memcpy(o.p, "...", 3), o.p += 3;
  *o.p = '\0';
}

int srv_codec_lifted(const struct srv_call *c, const json_t *v)
{
  return span_any(c, v) != NULL;
}
