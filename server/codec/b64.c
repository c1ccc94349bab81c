/* b64.c: base64 (RFC 4648 section 4, standard alphabet, '=' padding) for
 * the "b64" tensor form.  Decoding writes straight into the caller's buffer
 * (the tensor's final storage), so a b64 tensor is never held twice. */
#include "codec-internal.h"

#include <string.h>

static const char g_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0..63 for alphabet characters, 0xff for everything else ('=' included:
 * padding is handled by position, never decoded as a value).  Filled from
 * the alphabet before main, so the two can never disagree. */
static uint8_t g_rev[256];

__attribute__((constructor)) static void b64_init(void)
{
  int i;

  memset(g_rev, 0xff, sizeof g_rev);
  for (i = 0; i < 64; i++)
    g_rev[(uint8_t)g_alphabet[i]] = (uint8_t)i;
}

int64_t srv_codec__b64_decoded_len(const char *s, size_t n)
{
  size_t pad = 0;

  if (n % 4 != 0)
    return -1;
  if (n == 0)
    return 0;
  if (s[n - 1] == '=')
    pad = s[n - 2] == '=' ? 2 : 1;
  if ((int64_t)(n / 4) > INT64_MAX / 3)
    return -1;
  return (int64_t)(n / 4 * 3 - pad);
}

int srv_codec__b64_decode(void *dst, const char *s, size_t n, size_t *bad)
{
  uint8_t *o = dst;
  size_t i, full, pad = 0;

  if (n % 4 != 0) {
    *bad = n;
    return -1;
  }
  if (n && s[n - 1] == '=')
    pad = s[n - 2] == '=' ? 2 : 1;
  full = n / 4 - (pad ? 1 : 0);
  for (i = 0; i < full; i++, s += 4) {
    uint32_t a = g_rev[(uint8_t)s[0]], b = g_rev[(uint8_t)s[1]],
             c = g_rev[(uint8_t)s[2]], d = g_rev[(uint8_t)s[3]];
    if ((a | b | c | d) & 0x80) {
      size_t k = 0;
      while (g_rev[(uint8_t)s[k]] != 0xff)
        k++;
      *bad = i * 4 + k;
      return -1;
    }
    a = a << 18 | b << 12 | c << 6 | d;
    o[0] = (uint8_t)(a >> 16);
    o[1] = (uint8_t)(a >> 8);
    o[2] = (uint8_t)a;
    o += 3;
  }
  if (pad) {
    /* "xx==" carries one byte, "xxx=" two; the unused low bits must be
     * zero (RFC 4648 3.5: canonical encoding), else the text is not what
     * an encoder writes and probably corrupt. */
    uint32_t a = g_rev[(uint8_t)s[0]], b = g_rev[(uint8_t)s[1]],
             c = pad == 1 ? g_rev[(uint8_t)s[2]] : 0;
    size_t base = full * 4;
    if (a & 0x80) {
      *bad = base;
      return -1;
    }
    if (b & 0x80) {
      *bad = base + 1;
      return -1;
    }
    if (c & 0x80) {
      *bad = base + 2;
      return -1;
    }
    if (pad == 2 ? (b & 0x0f) != 0 : (c & 0x03) != 0) {
      *bad = base + (pad == 2 ? 1 : 2);
      return -1;
    }
    a = a << 18 | b << 12 | c << 6;
    o[0] = (uint8_t)(a >> 16);
    if (pad == 1)
      o[1] = (uint8_t)(a >> 8);
  }
  return 0;
}

size_t srv_codec__b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

void srv_codec__b64_encode(char *dst, const void *src, size_t n)
{
  const uint8_t *p = src;
  size_t i;

  for (i = 0; i + 3 <= n; i += 3, p += 3) {
    uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
    dst[0] = g_alphabet[v >> 18];
    dst[1] = g_alphabet[(v >> 12) & 63];
    dst[2] = g_alphabet[(v >> 6) & 63];
    dst[3] = g_alphabet[v & 63];
    dst += 4;
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)p[0] << 16;
    dst[0] = g_alphabet[v >> 18];
    dst[1] = g_alphabet[(v >> 12) & 63];
    dst[2] = '=';
    dst[3] = '=';
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8;
    dst[0] = g_alphabet[v >> 18];
    dst[1] = g_alphabet[(v >> 12) & 63];
    dst[2] = g_alphabet[(v >> 6) & 63];
    dst[3] = '=';
  }
}
