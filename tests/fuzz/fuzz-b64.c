/* fuzz-b64.c: base64 as the "b64" tensor form reads it -- strict: the
 * standard alphabet, '=' padding only at the end, no whitespace, the
 * unused bits of the last character zero (RFC 4648 3.5).
 *
 * Input: byte 0 bit 0 chooses.
 *   0  the rest is a text: the decoder accepts it exactly when this file's
 *      own reading of the rules does, names the same first bad character
 *      when it refuses, and when it accepts, encoding the bytes gives the
 *      text back (a strict decoder accepts only what an encoder writes);
 *   1  the rest is bytes: their encoding is padded base64 of the announced
 *      length that decodes to them. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec-internal.h"

static int alpha(unsigned char ch)
{
  return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
         (ch >= '0' && ch <= '9') || ch == '+' || ch == '/';
}

static int value(unsigned char ch)
{
  return ch >= 'a' ? ch - 'a' + 26
         : ch >= 'A' ? ch - 'A'
         : ch >= '0' ? ch - '0' + 52
         : ch == '+' ? 62
                     : 63;
}

/* The padding of a text of n characters (a multiple of 4): '=' as its last
 * one or two characters. */
static size_t padding(const char *s, size_t n)
{
  if (n && s[n - 1] == '=')
    return n >= 2 && s[n - 2] == '=' ? 2 : 1;
  return 0;
}

/* Offset of the first character that makes s[0..n) invalid, n % 4 == 0;
 * -1 when it is valid. */
static long first_bad(const char *s, size_t n)
{
  size_t pad = padding(s, n), i;

  for (i = 0; i < n - pad; i++)
    if (!alpha((unsigned char)s[i]))
      return (long)i;
  /* Valid characters; the last one before the padding must leave the
   * bits it does not fill zero. */
  if (pad == 2 && (value((unsigned char)s[n - 3]) & 0x0f))
    return (long)(n - 3);
  if (pad == 1 && (value((unsigned char)s[n - 2]) & 0x03))
    return (long)(n - 2);
  return -1;
}

static void check_text(const char *s, size_t n)
{
  int64_t len = srv_codec__b64_decoded_len(s, n);
  size_t bad = (size_t)-1;
  long want;
  unsigned char *dst;
  int rc;

  if (n % 4) {
    FUZZ_CHECK(len == -1, "%zu characters decode to %lld bytes", n,
               (long long)len);
    return;
  }
  FUZZ_CHECK(len == (int64_t)(n / 4 * 3 - padding(s, n)),
             "%zu characters with padding %zu: %lld bytes", n,
             padding(s, n), (long long)len);
  /* A text whose padding is itself misplaced ("a===") still has a
   * length; exactly that many bytes, so ASan sees any write past them. */
  dst = malloc(len ? (size_t)len : 1);
  FUZZ_CHECK(dst != NULL, "out of memory");
  rc = srv_codec__b64_decode(dst, s, n, &bad);
  want = first_bad(s, n);
  if (want < 0) {
    char *again = malloc(n ? n : 1);
    FUZZ_CHECK(rc == 0, "valid text refused at %zu", bad);
    FUZZ_CHECK(again != NULL, "out of memory");
    FUZZ_CHECK(srv_codec__b64_encoded_len((size_t)len) == n,
               "%lld bytes encode to %zu characters, not %zu",
               (long long)len, srv_codec__b64_encoded_len((size_t)len), n);
    srv_codec__b64_encode(again, dst, (size_t)len);
    FUZZ_CHECK(memcmp(again, s, n) == 0, "decode then encode differs");
    free(again);
  } else {
    FUZZ_CHECK(rc != 0, "invalid text (bad at %ld) accepted", want);
    FUZZ_CHECK(bad == (size_t)want, "refused at %zu, first bad at %ld", bad,
               want);
  }
  free(dst);
}

static void check_bytes(const uint8_t *p, size_t n)
{
  size_t tn = srv_codec__b64_encoded_len(n), i, bad = 0;
  char *t = malloc(tn ? tn : 1);
  unsigned char *back = malloc(n ? n : 1);

  FUZZ_CHECK(t && back, "out of memory");
  FUZZ_CHECK(tn == (n + 2) / 3 * 4, "%zu bytes: %zu characters", n, tn);
  srv_codec__b64_encode(t, p, n);
  for (i = 0; i < tn; i++)
    FUZZ_CHECK(alpha((unsigned char)t[i]) || (t[i] == '=' && i + 2 >= tn),
               "character 0x%02x at %zu", (unsigned char)t[i], i);
  FUZZ_CHECK(srv_codec__b64_decoded_len(t, tn) == (int64_t)n,
             "the encoding of %zu bytes announces %lld", n,
             (long long)srv_codec__b64_decoded_len(t, tn));
  FUZZ_CHECK(srv_codec__b64_decode(back, t, tn, &bad) == 0,
             "own encoding refused at %zu", bad);
  FUZZ_CHECK(n == 0 || memcmp(back, p, n) == 0, "round trip differs");
  free(t);
  free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (!size)
    return 0;
  if (data[0] & 1) {
    check_bytes(data + 1, size - 1);
  } else if (size == 1) {
    check_text("", 0);
  } else {
    /* Exactly the text, in a block of its own size. */
    char *s = malloc(size - 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    memcpy(s, data + 1, size - 1);
    check_text(s, size - 1);
    free(s);
  }
  return 0;
}
