/* json-text.c: JSON text in and out -- string escaping, JSON pointers, and
 * parsing request texts with jansson behind a pre-scan that (1) bounds the
 * nesting depth before jansson's recursive parser sees the text and (2)
 * lifts members that hold many numbers -- a long "data" array, a tensor
 * written as nested arrays -- out of the text, so that they are parsed
 * straight into a double array instead of one jansson node per number, and
 * long "b64" strings, so that they are decoded from the body in place.
 *
 * How (2) stays honest: a lifted member is left out of the text jansson
 * reads (through json_load_callback, so the body is never copied), name,
 * value and a comma, so the tree holds only what the client sent and
 * nothing in its place.  The member lives beside the tree (struct
 * srv_codec_lift), found by its JSON pointer (srv_codec_tensor) or by its
 * object and name (srv_codec_member, srv_codec_members, srv_codec_show).
 * Numbers are read with jansson's rules (srv_codec__parse_number); arrays
 * holding anything but numbers and the strings "inf", "-inf", "nan", ragged
 * ones and malformed ones are left to jansson, and so are strings with any
 * character outside the base64 alphabet, so values and errors are the same
 * on both paths.  A member whose path has an escaped key is left to jansson
 * too (its pointer could not be written from the raw text). */
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

void srv_codec_ignore(struct srv_call *c, const char *pointer)
{
  static const char hex[] = "0123456789ABCDEF";
  struct srv_buf *list = &c->in.ignored;
  char name[3 * 256 + 8];
  const char *p = pointer;
  size_t n = 0;

  if (c->req.strict && !c->in.strict_first[0])
    srv_strcpy(c->in.strict_first, sizeof c->in.strict_first, pointer);

  if (list->len >= IGNORED_MAX) {
    /* Say once that the list was cut. */
    if (list->len < 3 || memcmp(list->data + list->len - 3, "...", 3) != 0)
      srv_buf_append(list, ",...", 4);
    return;
  }
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
  if (list->len)
    srv_buf_append(list, ",", 1);
  srv_buf_append(list, name, n);
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
 * pre-scan: depth bound and lifted members
 * ====================================================================== */

struct frame {
  int obj;      /* 1: object, 0: array */
  int want_key; /* object: the next string is a key */
  int64_t idx;  /* array: index of the current element */
  int64_t nkeys; /* object: members begun so far */
  size_t koff, klen; /* object: the current member's raw key */
  size_t sep;   /* object: its '{' or the last ',' */
};

/* A lifted member: text[start, end) -- its name, value and one comma --
 * is left out of the text jansson reads. */
struct cut {
  size_t start, end;
};

struct scan {
  struct srv_call *c;
  const char *t;
  size_t len;
  struct cut *cuts; /* malloc'd; freed by parse_object */
  int ncuts, cap;
  int first; /* the first of c's lifts this text made */
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

/* Whether a raw key is the string jansson would read: no escape (jansson
 * would decode it), no control character and valid UTF-8 (jansson refuses
 * both).  A member cut out of the text is never seen by jansson, so a key
 * it would refuse must stay in the text for jansson to refuse. */
static int key_plain(const char *k, size_t n)
{
  const unsigned char *p = (const unsigned char *)k;
  size_t i = 0, sl;

  while (i < n) {
    if (p[i] == '\\' || p[i] < 0x20)
      return 0;
    sl = utf8_seq(p + i, n - i);
    if (!sl)
      return 0;
    i += sl;
  }
  return 1;
}

/* Whether the member the innermost frame is at can be found again by a
 * JSON pointer built from the raw text, every key on its path plain. */
static int path_plain(const struct scan *s, const struct frame *fr, int depth)
{
  int i;

  for (i = 0; i < depth; i++)
    if (fr[i].obj && !key_plain(s->t + fr[i].koff, fr[i].klen))
      return 0;
  return 1;
}

/* Whether t[a, b) is whitespace with `mid` (0: nothing) once in it. */
static int only_ws(const char *t, size_t a, size_t b, char mid)
{
  int seen = !mid;

  for (; a < b; a++)
    if (!seen && t[a] == mid)
      seen = 1;
    else if (!is_ws(t[a]))
      return 0;
  return seen;
}

/* The bytes to leave out for the member whose value is text[pos, vend):
 * its name and value, and one comma -- the one before it, unless every
 * member before it is left out too (then the one after it, if any).
 * 0 when the text around it is not what JSON wants there: such a member
 * is left to jansson, which says what is wrong. */
static int cut_for(const struct scan *s, const struct frame *f, size_t pos,
                   size_t vend, struct cut *k)
{
  size_t q = vend;

  while (q < s->len && is_ws(s->t[q]))
    q++;
  if (q >= s->len || (s->t[q] != ',' && s->t[q] != '}') ||
      !only_ws(s->t, f->koff + f->klen + 1, pos, ':'))
    return 0;
  k->start = f->koff - 1;
  k->end = vend;
  if (f->nkeys > 1 && !(s->ncuts && s->cuts[s->ncuts - 1].end > f->sep)) {
    k->start = f->sep;
    return s->t[f->sep] == ',' && only_ws(s->t, f->sep + 1, f->koff - 1, 0);
  }
  if (s->t[q] == ',')
    k->end = q + 1;
  return 1;
}

/* The JSON pointer of where the frames are (raw keys: see path_plain). */
static void frames_pointer(const struct scan *s, const struct frame *fr,
                           int depth, char *ptr, size_t cap)
{
  char num[24];
  int i;

  ptr[0] = '\0';
  for (i = 0; i < depth; i++) {
    if (fr[i].obj) {
      srv_codec__pointer_add(ptr, cap, s->t + fr[i].koff, fr[i].klen);
    } else {
      snprintf(num, sizeof num, "%lld", (long long)fr[i].idx);
      srv_codec__pointer_add(ptr, cap, num, strlen(num));
    }
  }
}

/* Record the member at the innermost frame, whose value is text[pos, vend),
 * as lifted: `l` holds its value.  Returns 1, 0 (not lifted: too many, or
 * malformed around it) or -1 (error). */
static int record_lift(struct scan *s, const struct frame *fr, int depth,
                       size_t pos, size_t vend, const struct srv_codec_lift *l,
                       struct srv_err *err)
{
  struct srv_codec_state *st = s->c->in.codec;
  const struct frame *f = &fr[depth - 1];
  struct srv_codec_lift *d;
  char ptr[SRV_CODEC_PTR_MAX];
  struct cut k;
  char *key;

  if (!cut_for(s, f, pos, vend, &k))
    return 0;
  if (!st) {
    st = srv_codec__alloc(s->c, sizeof *st, "", err);
    if (!st)
      return -1;
    memset(st, 0, sizeof *st);
    s->c->in.codec = st;
  }
  if (st->nlifts == st->cap) {
    int ncap = st->cap ? 2 * st->cap : 16;
    struct srv_codec_lift *nl;
    if (ncap > (1 << 24))
      return 0;
    nl = srv_codec__alloc(s->c, (size_t)ncap * sizeof *nl, "", err);
    if (!nl)
      return -1;
    if (st->nlifts)
      memcpy(nl, st->lifts, (size_t)st->nlifts * sizeof *nl);
    st->lifts = nl;
    st->cap = ncap;
  }
  if (s->ncuts == s->cap) {
    int ncap = s->cap ? 2 * s->cap : 16;
    struct cut *nc = realloc(s->cuts, (size_t)ncap * sizeof *nc);
    if (!nc)
      return 0;
    s->cuts = nc;
    s->cap = ncap;
  }
  frames_pointer(s, fr, depth, ptr, sizeof ptr);
  if (strlen(ptr) + 2 >= sizeof ptr)
    return 0; /* a pointer that may have been cut: found by no reader */
  key = srv_codec__alloc(s->c, f->klen + 1 + strlen(ptr) + 1, "", err);
  if (!key)
    return -1;
  memcpy(key, s->t + f->koff, f->klen);
  key[f->klen] = '\0';
  d = &st->lifts[st->nlifts];
  *d = *l;
  d->ptr = strcpy(key + f->klen + 1, ptr);
  d->key = key;
  d->index = f->nkeys - 1;
  d->parent = NULL;
  s->cuts[s->ncuts++] = k;
  st->nlifts++;
  return 1;
}

/* 1 for the bytes extent() must look at beyond counting commas. */
static const uint8_t g_brackets[256] = {['['] = 1, [']'] = 1, ['{'] = 1};

/* The end of the array whose '[' is at t[pos] -- one past its ']' -- and
 * an upper bound of the numbers in it (its commas + 1), by brackets and
 * commas alone: the cheap pass that sizes the buffer.  0 when it holds an
 * object or does not end.  Commas are counted without a branch: numbers
 * of varying length make a branch on each comma one the CPU keeps
 * mispredicting, and this pass reads every byte of the array. */
static int extent(const struct scan *s, size_t pos, size_t *close,
                  int64_t *most)
{
  const char *t = s->t, *e = t + s->len, *p;
  int64_t commas = 0;
  int depth = 0;

  for (p = t + pos; p < e; p++) {
    commas += *p == ',';
    if (!g_brackets[(uint8_t)*p])
      continue;
    if (*p == '{')
      return 0;
    if (*p == '[') {
      depth++;
    } else if (--depth == 0) {
      *close = (size_t)(p - t) + 1;
      *most = commas + 1;
      return 1;
    }
  }
  return 0;
}

/* The rank of the array whose '[' is at t[pos]: the brackets that open its
 * first element, and its own.  0 when that is more than max_rank. */
static int leading_rank(const struct scan *s, size_t pos, int max_rank)
{
  const char *t = s->t, *e = t + s->len, *p;
  int r = 0;

  for (p = t + pos; p < e && (*p == '[' || is_ws(*p)); p++)
    if (*p == '[' && r++ == max_rank)
      return 0;
  return r;
}

/* One element of a lifted array at p (before e): a number jansson would
 * take, or "inf", "-inf", "nan", read into *v.  Its length in the text, 0
 * when it is neither. */
static size_t read_element(const char *p, const char *e, double *v)
{
  const char *q;

  if (*p == '"')
    return span_string(p, e, v);
  for (q = p; q < e && g_numch[(uint8_t)*q]; q++)
    ;
  if (q == p || srv_codec__parse_number(p, (size_t)(q - p), v) != 0)
    return 0;
  return (size_t)(q - p);
}

/* Read the flat array whose '[' is at t[pos] and which ends at t[close - 1]
 * into v (room for `most` numbers): rank 1, every "data" array, so worth a
 * loop of its own -- a number (or "inf", "-inf", "nan"), then ',' or the
 * closing ']', with no per-element bookkeeping.  Every scan stops at that
 * ']' (neither whitespace nor part of a number), so none needs a bound.
 * 0 when it is not such an array of at least min numbers. */
static int read_flat(const struct scan *s, size_t pos, size_t close,
                     int64_t min, double *v, int64_t most, int64_t *n)
{
  const char *p = s->t + pos + 1, *last = s->t + close - 1;
  int64_t k = 0;
  size_t tl;

  for (;;) {
    while (is_ws(*p))
      p++;
    if (k == most)
      return 0;
    tl = read_element(p, last, &v[k]);
    if (!tl)
      return 0; /* not a number jansson takes, or not a number at all */
    k++;
    for (p += tl; is_ws(*p); p++)
      ;
    if (*p != ',')
      break;
    p++;
  }
  if (p != last || k < min)
    return 0; /* a missing comma, or too short */
  *n = k;
  return 1;
}

/* Read the array of rank r (leading_rank) whose '[' is at t[pos] and which
 * ends at t[close - 1] into v (room for `most` numbers): its shape and
 * numbers, when it is a rectangular array of numbers (and "inf", "-inf",
 * "nan") with commas where JSON wants them, every array nested in it as
 * deep as the first, and rows of at least min_row.  0 for anything else --
 * other values, ragged rows, deeper than r, a token jansson would not
 * accept as a number, malformed text -- which is left to jansson, which
 * says why. */
static int read_array(const struct scan *s, size_t pos, size_t close, int r,
                      int64_t min_row, double *v, int64_t most,
                      int64_t *shape, int64_t *n)
{
  const char *t = s->t, *e = t + close, *p;
  int64_t count[AB_MAX_DIMS], k = 0;
  int level = -1, i;
  /* What may come next: 0 an element or ']' (after '['), 1 an element
   * (after ','), 2 ',' or ']' (after an element). */
  int next = 0;
  size_t tl;

  for (i = 0; i < r; i++)
    shape[i] = -1;
  for (p = t + pos; p < e; p++) {
    char ch = *p;
    if (next != 2 && level == r - 1 && ch != ']' && !is_ws(ch)) {
      /* A number, or "inf", "-inf", "nan". */
      if (k == most)
        return 0;
      tl = read_element(p, e, &v[k]);
      if (!tl)
        return 0;
      k++;
      count[level]++;
      p += tl - 1;
      next = 2;
    } else if (is_ws(ch)) {
      continue;
    } else if (ch == ',') {
      if (next != 2)
        return 0;
      next = 1;
    } else if (ch == '[') {
      if (next == 2 || level == r - 1)
        return 0; /* deeper than the first element */
      if (level >= 0)
        count[level]++;
      count[++level] = 0;
      next = 0;
    } else if (ch == ']') {
      if (next == 1 || level < 0)
        return 0;
      if (shape[level] < 0)
        shape[level] = count[level];
      else if (count[level] != shape[level])
        return 0;
      next = 2;
      if (level-- == 0)
        break;
    } else {
      return 0; /* an object, a string, true, false, null, a number where
                 * an array belongs, a missing comma */
    }
  }
  if (p != e - 1 || shape[r - 1] < min_row)
    return 0;
  *n = k;
  return 1;
}

/* Try to lift the array value of the innermost frame's member, whose '['
 * is at t[pos]: a flat "data" array of at least SRV_CODEC_SPAN_MIN numbers
 * (data != 0) or a rectangular nested array of numbers whose rows hold at
 * least SRV_CODEC_ROW_MIN (rank 2 and more, within the depth bound).
 * Returns 1 (lifted: *end is one past its ']'), 0 (left to jansson) or -1
 * (error, err set). */
static int try_lift(struct scan *s, const struct frame *fr, int depth,
                    size_t pos, int data, size_t *end, struct srv_err *err)
{
  int room = SRV_CODEC_MAX_DEPTH - depth;
  int max_rank = data ? 1 : room < AB_MAX_DIMS ? room : AB_MAX_DIMS;
  int64_t min = data ? SRV_CODEC_SPAN_MIN : SRV_CODEC_ROW_MIN, most;
  int rank = leading_rank(s, pos, max_rank), ok;
  struct srv_codec_lift l;
  double *v;

  /* A flat list that is not "data" is no candidate: decided before the
   * array is measured or its memory reserved. */
  if (!rank || (!data && rank < 2) || !extent(s, pos, end, &most) ||
      most < min || (uint64_t)most > SIZE_MAX / sizeof(double) ||
      !path_plain(s, fr, depth))
    return 0;
  v = srv_codec__alloc(s->c, (size_t)most * sizeof(double), "", err);
  if (!v)
    return -1;
  memset(&l, 0, sizeof l);
  l.rank = rank;
  if (rank == 1) {
    ok = read_flat(s, pos, *end, min, v, most, &l.n);
    l.shape[0] = l.n;
  } else {
    ok = read_array(s, pos, *end, rank, min, v, most, l.shape, &l.n);
  }
  if (!ok)
    return 0;
  l.kind = data ? SRV_LIFT_DATA : SRV_LIFT_NESTED;
  l.v = v;
  return record_lift(s, fr, depth, pos, *end, &l, err);
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
static int try_lift_b64(struct scan *s, const struct frame *fr, int depth,
                        size_t pos, size_t end, struct srv_err *err)
{
  const char *t = s->t;
  struct srv_codec_lift l;
  size_t i, len = end - pos - 1;
  uint8_t all = 1;

  /* The lift points into the text, so only a text that lives as long as
   * the call (the body, not a safetensors header string) qualifies. */
  if (len < SRV_CODEC_B64_MIN || !s->c->req.body ||
      (uintptr_t)t < (uintptr_t)s->c->req.body ||
      (uintptr_t)(t + s->len) >
          (uintptr_t)(s->c->req.body + s->c->req.body_len))
    return 0;
  for (i = pos + 1; i < end; i++)
    all &= g_b64ch[(uint8_t)t[i]];
  if (!all || !path_plain(s, fr, depth))
    return 0;
  memset(&l, 0, sizeof l);
  l.kind = SRV_LIFT_B64;
  l.text = t + pos + 1;
  l.len = len;
  return record_lift(s, fr, depth, pos, end + 1, &l, err);
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
  char ptr[sizeof err->field];

  frames_pointer(s, fr, depth, ptr, sizeof ptr);
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

/* Whether the innermost frame is an object whose member `key` (n bytes)
 * has its value next. */
static int at_member(const struct frame *fr, int depth, const char *t,
                     const char *key, size_t n)
{
  const struct frame *f = &fr[depth - 1];

  return depth && f->obj && !f->want_key &&
         (!key || (f->klen == n && memcmp(t + f->koff, key, n) == 0));
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
        fr[depth - 1].nkeys++;
      } else if (s->c && at_member(fr, depth, t, "b64", 3)) {
        if (try_lift_b64(s, fr, depth, pos, end, err) < 0)
          return -1;
      }
      pos = end + 1;
      break;
    case '[':
      /* The depth bound first: an array past it is refused whether or
       * not it could be lifted, as on the path without lifting. */
      if (depth == SRV_CODEC_MAX_DEPTH)
        return depth_error(s, fr, depth, pos, what, err);
      r = 0;
      if (s->c && at_member(fr, depth, t, "data", 4))
        r = try_lift(s, fr, depth, pos, 1, &end, err);
      else if (s->c && at_member(fr, depth, t, NULL, 0) &&
               !node_key(t + fr[depth - 1].koff, fr[depth - 1].klen))
        r = try_lift(s, fr, depth, pos, 0, &end, err);
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
      fr[depth].idx = fr[depth].nkeys = 0;
      fr[depth].koff = fr[depth].klen = 0;
      fr[depth].sep = pos;
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
        if (fr[depth - 1].obj) {
          fr[depth - 1].want_key = 1;
          fr[depth - 1].sep = pos;
        } else {
          fr[depth - 1].idx++;
        }
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

/* json_load_callback source: the text without the lifted members. */
struct feed {
  const struct scan *s;
  size_t pos; /* next byte of the original text */
  int next;   /* next cut */
};

static size_t feed_cb(void *buffer, size_t buflen, void *data)
{
  struct feed *f = data;
  char *out = buffer;
  size_t n = 0;

  while (n < buflen) {
    size_t k, stop;
    if (f->next < f->s->ncuts && f->pos >= f->s->cuts[f->next].start) {
      f->pos = f->s->cuts[f->next].end;
      f->next++;
      continue;
    }
    stop = f->next < f->s->ncuts ? f->s->cuts[f->next].start : f->s->len;
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
  size_t shift = 0;
  int i;

  for (i = 0; i < s->ncuts && s->cuts[i].start - shift <= pos; i++)
    shift += s->cuts[i].end - s->cuts[i].start;
  return pos + shift;
}

/* Line and column of byte off of text, counted the way jansson counts
 * them (columns in characters, 0 after a newline). */
static void text_line_col(const char *text, size_t off, size_t *line,
                          size_t *col)
{
  size_t i;

  *line = 1;
  *col = 0;
  for (i = 0; i < off; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 0;
    } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
      (*col)++;
    }
  }
}

/* The value at the JSON pointer ptr[0..n) below root, or NULL. */
static const json_t *at_pointer(const json_t *root, const char *ptr, size_t n)
{
  char tok[SRV_CODEC_PTR_MAX];
  const char *p = ptr, *e = ptr + n;

  while (root && p < e && *p == '/') {
    size_t k = 0;
    for (p++; p < e && *p != '/' && k + 1 < sizeof tok; p++) {
      if (*p == '~' && p + 1 < e && (p[1] == '0' || p[1] == '1'))
        tok[k++] = *++p == '0' ? '~' : '/';
      else
        tok[k++] = *p;
    }
    tok[k] = '\0';
    if (json_is_object(root)) {
      root = json_object_get(root, tok);
    } else if (json_is_array(root)) {
      char *stop;
      unsigned long idx = strtoul(tok, &stop, 10);
      root = *stop ? NULL : json_array_get(root, idx);
    } else {
      root = NULL;
    }
  }
  return root;
}

/* After parsing: each member lifted from this text finds its object in the
 * tree.  A name given twice -- lifted twice, or lifted and in the tree --
 * is the duplicate key jansson refuses. */
static int place_lifts(const struct scan *s, const json_t *root,
                       const char *what, struct srv_err *err)
{
  struct srv_codec_state *st = s->c ? s->c->in.codec : NULL;
  json_t *seen;
  int i, rc = 0;

  if (!st || s->first == st->nlifts)
    return 0;
  seen = json_object(); /* the pointers lifted so far: a hash set */
  if (!seen)
    return srv_fail(err, 500, NULL, "out of memory");
  for (i = s->first; i < st->nlifts && rc == 0; i++) {
    struct srv_codec_lift *l = &st->lifts[i];
    size_t plen = strlen(l->ptr), line, col, off;
    const json_t *obj;

    /* The object's pointer: l->ptr without its last token. */
    while (plen && l->ptr[plen - 1] != '/')
      plen--;
    obj = at_pointer(root, l->ptr, plen ? plen - 1 : 0);
    if (json_is_object(obj) && !json_object_get(obj, l->key) &&
        !json_object_get(seen, l->ptr)) {
      l->parent = obj;
      if (json_object_set_new(seen, l->ptr, json_null()) != 0)
        rc = srv_fail(err, 500, NULL, "out of memory");
      continue;
    }
    off = s->cuts[i - s->first].start;
    text_line_col(s->t, off, &line, &col);
    rc = srv_fail(err, 400, NULL,
                  "%s is not valid JSON: duplicate object key \"%.64s\" "
                  "(line %zu, column %zu, byte %zu)",
                  what, l->key, line, col, off);
  }
  json_decref(seen);
  return rc;
}

json_t *srv_codec__parse_object(struct srv_call *c, const char *text,
                                size_t len, const char *what,
                                struct srv_err *err)
{
  struct srv_codec_state *st = c ? c->in.codec : NULL;
  struct scan s;
  json_error_t je;
  json_t *j;
  const char *nul;
  size_t flags = JSON_REJECT_DUPLICATES, off, line, col;

  /* JSON text holds no NUL byte, but jansson takes one that follows a
   * number as the end of the token and then passes over it, so
   * {"a": [1<NUL>, 2]} would be read as [1, 2] -- and its errors placed a
   * column apart with lifted arrays and without.  Refused here, at its
   * byte. */
  nul = memchr(text, '\0', len);
  if (nul) {
    off = (size_t)(nul - text);
    text_line_col(text, off, &line, &col);
    srv_fail(err, 400, NULL, "%s is not valid JSON: a NUL byte (line %zu, "
             "column %zu, byte %zu)", what, line, col, off);
    return NULL;
  }

  memset(&s, 0, sizeof s);
  s.c = c;
  s.t = text;
  s.len = len;
  s.first = st ? st->nlifts : 0;
  if (prescan(&s, what, err) != 0) {
    free(s.cuts);
    return NULL;
  }
  if (s.ncuts) {
    struct feed f;
    memset(&f, 0, sizeof f);
    f.s = &s;
    j = json_load_callback(feed_cb, &f, flags, &je);
  } else {
    j = json_loadb(text, len, flags, &je);
  }
  if (!j) {
    off = (size_t)je.position;
    line = (size_t)je.line;
    col = (size_t)je.column;
    if (s.ncuts) {
      /* jansson read the text without the lifted members: count again on
       * the original, the way jansson counts. */
      off = orig_offset(&s, off);
      if (off > len)
        off = len;
      text_line_col(text, off, &line, &col);
    }
    free(s.cuts);
    srv_fail(err, 400, NULL, "%s is not valid JSON: %s (line %zu, column %zu, "
             "byte %zu)", what, je.text, line, col, off);
    return NULL;
  }
  if (!json_is_object(j)) {
    free(s.cuts);
    json_decref(j);
    srv_fail(err, 400, NULL, "%s must be a JSON object", what);
    return NULL;
  }
  if (place_lifts(&s, j, what, err) != 0) {
    free(s.cuts);
    json_decref(j);
    return NULL;
  }
  free(s.cuts);
  return j;
}

/* ======================================================================
 * the lifted members
 * ====================================================================== */

const struct srv_codec_lift *srv_codec__lift_at(const struct srv_call *c,
                                                const char *ptr)
{
  const struct srv_codec_state *st = c ? c->in.codec : NULL;
  int i;

  for (i = 0; st && i < st->nlifts; i++)
    if (st->lifts[i].parent && strcmp(st->lifts[i].ptr, ptr) == 0)
      return &st->lifts[i];
  return NULL;
}

/* The member `key` of obj that the codec lifted, or NULL. */
static struct srv_codec_lift *lift_of(const struct srv_call *c,
                                      const json_t *obj, const char *key)
{
  struct srv_codec_state *st = c ? c->in.codec : NULL;
  int i;

  for (i = 0; st && i < st->nlifts; i++)
    if (st->lifts[i].parent == obj && strcmp(st->lifts[i].key, key) == 0)
      return &st->lifts[i];
  return NULL;
}

int srv_codec_beside(const struct srv_call *c, const json_t *obj,
                     const char *key)
{
  return obj && lift_of(c, obj, key) != NULL;
}

/* The lifted numbers v[*k...] of dimension d and on, as JSON arrays. */
static json_t *nested_json(const struct srv_codec_lift *l, int d, int64_t *k)
{
  json_t *a = json_array();
  int64_t i;

  for (i = 0; a && i < l->shape[d]; i++) {
    json_t *e;
    if (d + 1 < l->rank) {
      e = nested_json(l, d + 1, k);
    } else {
      double v = l->v[(*k)++];
      e = isnan(v) ? json_string("nan")
          : isinf(v) ? json_string(v > 0 ? "inf" : "-inf")
                     : json_real(v);
    }
    if (json_array_append_new(a, e) != 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

const json_t *srv_codec_member(struct srv_call *c, const json_t *obj,
                               const char *key)
{
  struct srv_codec_lift *l;
  json_t *v;
  int64_t k = 0;

  if (!obj || !json_is_object(obj))
    return NULL;
  v = json_object_get(obj, key);
  if (v || !(l = lift_of(c, obj, key)))
    return v;
  if (l->kind == SRV_LIFT_B64) {
    v = json_stringn(l->text, l->len);
  } else {
    struct srv_codec_lift flat = *l;
    if (l->kind == SRV_LIFT_DATA)
      flat.rank = 1, flat.shape[0] = l->n;
    v = nested_json(&flat, 0, &k);
  }
  if (!v || json_object_set_new((json_t *)obj, key, v) != 0)
    return NULL;
  l->parent = NULL; /* in the tree now */
  return v;
}

void srv_codec_members(const struct srv_call *c, const json_t *obj,
                       void (*fn)(const char *key, const json_t *v,
                                  void *arg),
                       void *arg)
{
  const struct srv_codec_state *st = c ? c->in.codec : NULL;
  const char *key;
  json_t *v;
  int64_t at = 0;
  int i = 0, n = st ? st->nlifts : 0;

  if (!obj || !json_is_object(obj))
    return;
  /* The tree keeps the members in the order sent; a lifted one goes back
   * at its place among them. */
  json_object_foreach((json_t *)obj, key, v) {
    for (; i < n; i++)
      if (st->lifts[i].parent == obj && st->lifts[i].index <= at)
        fn(st->lifts[i].key, NULL, arg), at++;
      else if (st->lifts[i].parent == obj)
        break;
    fn(key, v, arg);
    at++;
  }
  for (; i < n; i++)
    if (st->lifts[i].parent == obj)
      fn(st->lifts[i].key, NULL, arg);
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

/* The lifted numbers v[*k...] of dimension d and on, as sent. */
static void show_numbers(const struct srv_codec_lift *l, int d, int64_t *k,
                         struct show_out *o)
{
  int64_t i, n = l->kind == SRV_LIFT_DATA ? l->n : l->shape[d];
  char num[40];

  show_put(o, "[", 1);
  for (i = 0; i < n && !o->cut; i++) {
    if (i)
      show_put(o, ",", 1);
    if (l->kind == SRV_LIFT_NESTED && d + 1 < l->rank)
      show_numbers(l, d + 1, k, o);
    else
      show_put(o, num, srv_codec__fmt_f64(num, l->v[(*k)++]));
  }
  show_put(o, "]", 1);
}

static void show_value(const struct srv_call *c, const json_t *v,
                       struct show_out *o, int depth);

/* One member of an object being shown (srv_codec_members' callback). */
struct show_member {
  const struct srv_call *c;
  const json_t *obj;
  struct show_out *o;
  int depth, first;
};

static void show_member(const char *key, const json_t *v, void *arg)
{
  struct show_member *m = arg;
  json_t *ks = json_string(key);
  char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;

  if (m->o->cut)
    goto out;
  if (!m->first)
    show_put(m->o, ",", 1);
  m->first = 0;
  show_put(m->o, kt ? kt : "\"?\"", kt ? strlen(kt) : 3);
  show_put(m->o, ":", 1);
  if (v) {
    show_value(m->c, v, m->o, m->depth + 1);
  } else {
    const struct srv_codec_lift *l = lift_of(m->c, m->obj, key);
    int64_t k = 0;
    if (l && l->kind == SRV_LIFT_B64) {
      show_put(m->o, "\"", 1);
      show_put(m->o, l->text, l->len);
      show_put(m->o, "\"", 1);
    } else if (l) {
      show_numbers(l, 0, &k, m->o);
    }
  }
out:
  free(kt);
  json_decref(ks);
}

static void show_value(const struct srv_call *c, const json_t *v,
                       struct show_out *o, int depth)
{
  char num[40];
  size_t i;

  if (o->cut)
    return;
  if (json_is_array(v) && depth < 8) {
    show_put(o, "[", 1);
    for (i = 0; i < json_array_size(v) && !o->cut; i++) {
      if (i)
        show_put(o, ",", 1);
      show_value(c, json_array_get(v, i), o, depth + 1);
    }
    show_put(o, "]", 1);
  } else if (json_is_object(v) && depth < 8) {
    struct show_member m = {c, v, o, depth, 1};
    show_put(o, "{", 1);
    srv_codec_members(c, v, show_member, &m);
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
