/* number.c: numbers between text and binary -- the shortest round-trip
 * float32 formatter used for every number the server writes, a double
 * formatter for scalars, and the exact JSON number reader of the fast
 * "data" path.
 *
 * srv_codec_fmt_f32 follows the method of Ulf Adams, "Ryu: fast
 * float-to-string conversion" (PLDI 2018), written here for float32 only:
 * the rounding interval of the float is scaled by a power of ten with a
 * 64-bit fixed-point approximation of 5^q or 5^-q that is exact enough for
 * every float32 (the paper's bound), then digits are removed while both
 * ends of the interval still differ.  Its tables are computed exactly at
 * start-up with 128-bit integers instead of being pasted in.  Doubles go
 * through Schubfach (below), with tables built the same way. */
#include "codec-internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * Ryu tables
 * ====================================================================== */

#define POW5_INV_BITCOUNT 59 /* bits kept of 2^k / 5^q */
#define POW5_BITCOUNT 61     /* bits kept of 5^i */
#define POW5_INV_N 31        /* q = floor(log10(2^e2)) <= 30 for float32 */
#define POW5_N 50            /* i = -e2 - q <= 47 for float32 */

static uint64_t g_pow5_inv[POW5_INV_N]; /* floor(2^(bitlen(5^q)-1+59)/5^q)+1 */
static uint64_t g_pow5[POW5_N];         /* 5^i, top 61 bits */

typedef unsigned __int128 u128;

static int bitlen128(u128 x)
{
  int n = 0;
  while (x) {
    n++;
    x >>= 1;
  }
  return n;
}

/* floor(2^s / d) by binary long division: the remainder stays below d
 * (< 2^71 here), so nothing overflows although 2^s itself may not fit. */
static u128 pow2_div(int s, u128 d)
{
  u128 q = 0, r = 0;
  int i;

  for (i = s; i >= 0; i--) {
    r = (r << 1) | (u128)(i == s); /* the bits of 2^s: a one, s zeros */
    q <<= 1;
    if (r >= d) {
      r -= d;
      q |= 1;
    }
  }
  return q;
}

/* ceil(log2(5^e)) for e >= 1 and 1 for e = 0, i.e. bitlen(5^e) (valid for
 * 0 <= e <= 3528; the constructor checks it against the exact table). */
static inline int32_t pow5bits(int32_t e)
{
  return (int32_t)(((uint32_t)e * 1217359u) >> 19) + 1;
}
/* floor(log10(2^e)) and floor(log10(5^e)) for the ranges float32 needs. */
static inline uint32_t log10_pow2(int32_t e)
{
  return ((uint32_t)e * 78913u) >> 18;
}
static inline uint32_t log10_pow5(int32_t e)
{
  return ((uint32_t)e * 732923u) >> 20;
}

static int g_tables_ok;

/* Runs before main (and before any thread), so the tables are immutable
 * by the time any request is formatted. */
__attribute__((constructor)) static void ryu_tables_init(void)
{
  u128 p = 1;
  int i, ok = 1;

  for (i = 0; i < POW5_N; i++) {
    int len = bitlen128(p);
    if (len != pow5bits(i))
      ok = 0;
    g_pow5[i] = len > POW5_BITCOUNT ? (uint64_t)(p >> (len - POW5_BITCOUNT))
                                    : (uint64_t)(p << (POW5_BITCOUNT - len));
    if (i < POW5_INV_N)
      g_pow5_inv[i] =
          (uint64_t)pow2_div(len - 1 + POW5_INV_BITCOUNT, p) + 1;
    p *= 5;
  }
  g_tables_ok = ok;
}

/* floor(m * factor / 2^shift) exactly (shift > 32). */
static inline uint32_t mul_shift(uint32_t m, uint64_t factor, int32_t shift)
{
  return (uint32_t)(((u128)m * factor) >> shift);
}

static inline uint32_t pow5_factor(uint32_t v)
{
  uint32_t n = 0;
  while (v % 5 == 0) {
    v /= 5;
    n++;
  }
  return n;
}

static inline int multiple_of_pow5(uint32_t v, uint32_t p)
{
  return pow5_factor(v) >= p;
}

static inline int multiple_of_pow2(uint32_t v, uint32_t p)
{
  return (v & ((1u << p) - 1)) == 0;
}

/* The shortest decimal digits*10^exp inside the rounding interval of the
 * finite, non-zero float with the given biased exponent and fraction;
 * among the shortest, the one closest to the float (ties to even). */
static void f2d(uint32_t frac, uint32_t bexp, uint32_t *digits, int32_t *exp)
{
  int32_t e2, e10;
  uint32_t m2, mv, mp, mm, mm_shift, vr, vp, vm, output;
  int accept_bounds, vm_tz = 0, vr_tz = 0, removed = 0;
  uint32_t last = 0;

  if (bexp == 0) { /* subnormal */
    e2 = 1 - 127 - 23 - 2;
    m2 = frac;
  } else {
    e2 = (int32_t)bexp - 127 - 23 - 2;
    m2 = (1u << 23) | frac;
  }
  /* Round-to-even readers accept the interval's ends when m2 is even. */
  accept_bounds = (m2 & 1) == 0;
  /* The interval [mm, mp] in units of 2^e2 around mv = 4*m2; the lower
   * gap is half as wide at a power of two (frac == 0). */
  mv = 4 * m2;
  mp = 4 * m2 + 2;
  mm_shift = frac != 0 || bexp <= 1;
  mm = 4 * m2 - 1 - mm_shift;

  if (e2 >= 0) {
    const uint32_t q = log10_pow2(e2);
    const int32_t k = POW5_INV_BITCOUNT + pow5bits((int32_t)q) - 1;
    const int32_t i = -e2 + (int32_t)q + k;
    e10 = (int32_t)q;
    vr = mul_shift(mv, g_pow5_inv[q], i);
    vp = mul_shift(mp, g_pow5_inv[q], i);
    vm = mul_shift(mm, g_pow5_inv[q], i);
    if (q != 0 && (vp - 1) / 10 <= vm / 10) {
      /* The loop below may remove no digit: compute the digit that the
       * division by 10^q dropped, for rounding. */
      const int32_t l = POW5_INV_BITCOUNT + pow5bits((int32_t)(q - 1)) - 1;
      last = mul_shift(mv, g_pow5_inv[q - 1], -e2 + (int32_t)q - 1 + l) % 10;
    }
    if (q <= 9) {
      /* Only here can 10^q divide mv, mp or mm exactly; track exactness
       * because the fixed-point quotients above are floors. */
      if (mv % 5 == 0)
        vr_tz = multiple_of_pow5(mv, q);
      else if (accept_bounds)
        vm_tz = multiple_of_pow5(mm, q);
      else
        vp -= (uint32_t)multiple_of_pow5(mp, q);
    }
  } else {
    const uint32_t q = log10_pow5(-e2);
    const int32_t i = -e2 - (int32_t)q;
    const int32_t k = pow5bits(i) - POW5_BITCOUNT;
    int32_t j = (int32_t)q - k;
    e10 = (int32_t)q + e2;
    vr = mul_shift(mv, g_pow5[i], j);
    vp = mul_shift(mp, g_pow5[i], j);
    vm = mul_shift(mm, g_pow5[i], j);
    if (q != 0 && (vp - 1) / 10 <= vm / 10) {
      j = (int32_t)q - 1 - (pow5bits(i + 1) - POW5_BITCOUNT);
      last = mul_shift(mv, g_pow5[i + 1], j) % 10;
    }
    if (q <= 1) {
      /* mv = 4*m2 has at least two trailing zero bits. */
      vr_tz = 1;
      if (accept_bounds)
        vm_tz = mm_shift == 1;
      else
        --vp;
    } else if (q < 31) {
      vr_tz = multiple_of_pow2(mv, q - 1);
    }
  }

  if (vm_tz || vr_tz) {
    /* Rare: an end of the interval or the value is an exact decimal. */
    while (vp / 10 > vm / 10) {
      vm_tz &= vm % 10 == 0;
      vr_tz &= last == 0;
      last = vr % 10;
      vr /= 10;
      vp /= 10;
      vm /= 10;
      ++removed;
    }
    if (vm_tz) {
      while (vm % 10 == 0) {
        vr_tz &= last == 0;
        last = vr % 10;
        vr /= 10;
        vp /= 10;
        vm /= 10;
        ++removed;
      }
    }
    if (vr_tz && last == 5 && vr % 2 == 0)
      last = 4; /* exactly half way: round to even */
    output = vr + ((vr == vm && (!accept_bounds || !vm_tz)) || last >= 5);
  } else {
    while (vp / 10 > vm / 10) {
      last = vr % 10;
      vr /= 10;
      vp /= 10;
      vm /= 10;
      ++removed;
    }
    output = vr + (vr == vm || last >= 5);
  }
  *digits = output;
  *exp = e10 + removed;
}

static inline int dec_len(uint32_t v)
{
  /* float32 needs at most 9 digits. */
  return v >= 100000000 ? 9 : v >= 10000000 ? 8 : v >= 1000000 ? 7
       : v >= 100000 ? 6 : v >= 10000 ? 5 : v >= 1000 ? 4 : v >= 100 ? 3
       : v >= 10 ? 2 : 1;
}

/* "00".."99": two digits per division when printing. */
static const char g_digits2[201] =
    "000102030405060708091011121314151617181920212223242526272829"
    "303132333435363738394041424344454647484950515253545556575859"
    "606162636465666768697071727374757677787980818283848586878889"
    "90919293949596979899";

/* Whether the integer d[0..olen) followed by exp zeros is at most
 * INT64_MAX (9223372036854775807). */
static int fits_int64(const char *d, int olen, int32_t exp)
{
  static const char max[] = "9223372036854775807";
  int i;

  if (olen + exp != 19)
    return olen + exp < 19;
  for (i = 0; i < 19; i++) {
    char c = i < olen ? d[i] : '0';
    if (c != max[i])
      return c < max[i];
  }
  return 1;
}

/* Write digits*10^exp (olen digits, printed as given) in the shorter of
 * plain and exponent notation, plain on a tie: "0.01" but "1e-3", "100"
 * but "1e3".  Plain notation without a fraction is a JSON integer, which
 * readers such as jansson (and this server's own) hold in an int64 and
 * refuse past INT64_MAX: larger whole numbers take exponent notation
 * ("12345678901234567000" reads nowhere, "1.2345678901234567e19" does).
 * Returns the length. */
static size_t write_decimal(char *buf, int neg, uint64_t digits, int olen,
                            int32_t exp)
{
  char d[20];
  int i, E = exp + olen - 1, plain, sci, ae = E < 0 ? -E : E;
  size_t n = 0;

  i = olen;
  while (i >= 2) {
    unsigned r = (unsigned)(digits % 100);
    digits /= 100;
    d[--i] = g_digits2[2 * r + 1];
    d[--i] = g_digits2[2 * r];
  }
  if (i)
    d[0] = (char)('0' + digits);
  if (exp >= 0)
    plain = olen + exp;
  else if (E >= 0)
    plain = olen + 1;
  else
    plain = 2 + (-E - 1) + olen;
  sci = olen + (olen > 1) + 1 + (E < 0) + (ae >= 100 ? 3 : ae >= 10 ? 2 : 1);
  if (exp >= 0 && !fits_int64(d, olen, exp))
    plain = sci + 1;
  if (neg)
    buf[n++] = '-';
  if (plain <= sci) {
    if (exp >= 0) {
      memcpy(buf + n, d, (size_t)olen);
      n += (size_t)olen;
      for (i = 0; i < exp; i++)
        buf[n++] = '0';
    } else if (E >= 0) {
      memcpy(buf + n, d, (size_t)E + 1);
      n += (size_t)E + 1;
      buf[n++] = '.';
      memcpy(buf + n, d + E + 1, (size_t)(olen - E - 1));
      n += (size_t)(olen - E - 1);
    } else {
      buf[n++] = '0';
      buf[n++] = '.';
      for (i = 0; i < -E - 1; i++)
        buf[n++] = '0';
      memcpy(buf + n, d, (size_t)olen);
      n += (size_t)olen;
    }
    return n;
  }
  buf[n++] = d[0];
  if (olen > 1) {
    buf[n++] = '.';
    memcpy(buf + n, d + 1, (size_t)olen - 1);
    n += (size_t)olen - 1;
  }
  buf[n++] = 'e';
  if (E < 0)
    buf[n++] = '-';
  if (ae >= 100)
    buf[n++] = (char)('0' + ae / 100);
  if (ae >= 10)
    buf[n++] = (char)('0' + ae / 10 % 10);
  buf[n++] = (char)('0' + ae % 10);
  return n;
}

/* "0", and "-0.0" for negative zero: "-0" is the JSON integer 0, which
 * integer-aware readers (jansson, Python's json) take as +0. */
static size_t write_zero(char *buf, int neg)
{
  if (!neg) {
    *buf = '0';
    return 1;
  }
  memcpy(buf, "-0.0", 4);
  return 4;
}

static size_t write_nonfinite(char *buf, int is_nan, int neg)
{
  const char *s = is_nan ? "\"nan\"" : neg ? "\"-inf\"" : "\"inf\"";
  size_t n = strlen(s);
  memcpy(buf, s, n);
  return n;
}

size_t srv_codec_fmt_f32(char *buf, float v)
{
  uint32_t bits, frac, bexp, digits;
  int32_t exp;
  int neg;

  memcpy(&bits, &v, 4);
  neg = (int)(bits >> 31);
  bexp = (bits >> 23) & 0xff;
  frac = bits & 0x7fffffu;
  if (bexp == 0xff)
    return write_nonfinite(buf, frac != 0, neg);
  if (bexp == 0 && frac == 0)
    return write_zero(buf, neg);
  if (!g_tables_ok) /* cannot happen; keeps a wrong table from lying */
    return srv_codec__fmt_f32_simple(buf, v);
  f2d(frac, bexp, &digits, &exp);
  return write_decimal(buf, neg, digits, dec_len(digits), exp);
}

/* ======================================================================
 * float64: Schubfach
 * ====================================================================== */

/* srv_codec__fmt_f64 follows Raffaello Giulietti, "The Schubfach way to
 * render doubles" (2020).  With v = c * 2^q, k = floor(log10(2^q)) (or of
 * 3/4 * 2^q where the lower half-interval is the narrower one) puts the
 * rounding interval's width between 10^k and 10^(k+1), so it holds at most
 * one multiple of 10^(k+1) and at least one multiple of 10^k: the multiple
 * of 10^(k+1) if there is one, else the nearer multiple of 10^k, is the
 * shortest.  v and both ends are scaled by 10^-k with a 128-bit
 * approximation from above of 10^-k, rounded to odd so that the comparisons
 * below stay exact.  The 617 approximations are computed once, exactly,
 * with a small big-number long division the first time a double is
 * written. */

#define P10_MIN (-292) /* -k over every double: k in [-324, 292] */
#define P10_MAX 324

static const uint64_t g_pow10_u64[17] = {
    1ull,           10ull,           100ull,           1000ull,
    10000ull,       100000ull,       1000000ull,       10000000ull,
    100000000ull,   1000000000ull,   10000000000ull,   100000000000ull,
    1000000000000ull, 10000000000000ull, 100000000000000ull,
    1000000000000000ull, 10000000000000000ull};

static uint64_t g_pow10_128[P10_MAX - P10_MIN + 1][2]; /* {high, low} */
static pthread_once_t g_pow10_once = PTHREAD_ONCE_INIT;
static int g_pow10_ok;

/* floor(e * log2(10)), floor(e * log10(2)) and floor(log10(3/4 * 2^e)) by
 * fixed-point multiplication, exact for |e| <= 1700 (the table build and a
 * test check them); >> of a negative int is arithmetic in GCC and Clang. */
static inline int32_t floor_log2_pow10(int32_t e)
{
  return (e * 1741647) >> 19;
}
static inline int32_t floor_log10_pow2(int32_t e)
{
  return (e * 315653) >> 20;
}
static inline int32_t floor_log10_3q_pow2(int32_t e)
{
  return (e * 315653 - 131237) >> 20;
}

int32_t srv_codec__floor_log10_pow2(int32_t e, int three_quarters)
{
  return three_quarters ? floor_log10_3q_pow2(e) : floor_log10_pow2(e);
}

/* Unsigned big numbers of up to 18 64-bit limbs (10^324 has 1077 bits),
 * least significant first. */
#define BN_LIMBS 18
struct bn {
  uint64_t w[BN_LIMBS];
};

static int bn_bitlen(const struct bn *a)
{
  int i;
  for (i = BN_LIMBS - 1; i >= 0; i--)
    if (a->w[i])
      return 64 * i + 64 - __builtin_clzll(a->w[i]);
  return 0;
}

static void bn_mul10(struct bn *a)
{
  u128 carry = 0;
  int i;
  for (i = 0; i < BN_LIMBS; i++) {
    carry += (u128)a->w[i] * 10;
    a->w[i] = (uint64_t)carry;
    carry >>= 64;
  }
}

static void bn_shl1(struct bn *a)
{
  int i;
  for (i = BN_LIMBS - 1; i > 0; i--)
    a->w[i] = a->w[i] << 1 | a->w[i - 1] >> 63;
  a->w[0] <<= 1;
}

/* a -= b if a >= b; returns whether it did. */
static int bn_sub_if_ge(struct bn *a, const struct bn *b)
{
  uint64_t borrow = 0;
  int i;
  for (i = BN_LIMBS - 1; i >= 0; i--)
    if (a->w[i] != b->w[i]) {
      if (a->w[i] < b->w[i])
        return 0;
      break;
    }
  for (i = 0; i < BN_LIMBS; i++) {
    uint64_t x = a->w[i], y = b->w[i];
    a->w[i] = x - y - borrow;
    borrow = x < y || (x == y && borrow);
  }
  return 1;
}

/* The 128 bits of a starting at bit `from` (which may be negative: the
 * bits below bit 0 are zeros). */
static u128 bn_bits128(const struct bn *a, int from)
{
  u128 r = 0;
  int b;
  for (b = from + 127; b >= from; b--)
    r = r << 1 | (u128)(b >= 0 && (a->w[b / 64] >> (b % 64) & 1));
  return r;
}

static void pow10_128_set(int32_t k, u128 g, int *ok)
{
  g += 1; /* floor(beta) + 1: from above, never exact */
  if (g >> 127 == 0)
    *ok = 0; /* beta must lie in [2^127, 2^128) */
  g_pow10_128[k - P10_MIN][0] = (uint64_t)(g >> 64);
  g_pow10_128[k - P10_MIN][1] = (uint64_t)g;
}

/* g_pow10_128[k] = floor(10^k * 2^(127 - floor_log2_pow10(k))) + 1. */
static void pow10_128_init(void)
{
  struct bn p = {{1}};
  int32_t k;
  int ok = 1;

  for (k = 0; k <= P10_MAX; k++, bn_mul10(&p)) {
    const int len = bn_bitlen(&p);
    if (floor_log2_pow10(k) != len - 1)
      ok = 0;
    /* 10^k * 2^(127 - (len - 1)): its top 128 bits. */
    pow10_128_set(k, bn_bits128(&p, len - 128), &ok);
    if (k > 0 && -k >= P10_MIN) {
      /* 10^-k * 2^(127 + len) = 2^(127 + len) / 10^k (10^k is no power of
       * two, so floor(log2(10^-k)) = -len): binary long division, starting
       * from the remainder 2^(len-1) < 10^k of the top bits. */
      struct bn r = {{0}};
      u128 q = 0;
      int i;
      if (floor_log2_pow10(-k) != -len)
        ok = 0;
      r.w[(len - 1) / 64] = 1ull << ((len - 1) % 64);
      for (i = 0; i < 128; i++) {
        bn_shl1(&r);
        q = q << 1 | (u128)bn_sub_if_ge(&r, &p);
      }
      pow10_128_set(-k, q, &ok);
    }
  }
  g_pow10_ok = ok;
}

/* floor(g * cp / 2^128), its lowest bit set when the discarded part is
 * not zero (round to odd). */
static inline uint64_t round_to_odd(const uint64_t g[2], uint64_t cp)
{
  const u128 x = (u128)cp * g[1], y = (u128)cp * g[0] + (x >> 64);
  return (uint64_t)(y >> 64) | ((uint64_t)y > 1);
}

/* The shortest digits*10^exp in the rounding interval of the finite,
 * non-zero double with the given biased exponent and fraction; among
 * them the nearest (ties to even digits). */
static void d2d(uint64_t frac, uint32_t bexp, uint64_t *digits, int32_t *exp)
{
  const uint64_t c = bexp ? frac | 1ull << 52 : frac;
  const int32_t q = bexp ? (int32_t)bexp - 1075 : -1074;
  const int closer = frac == 0 && bexp > 1, even = (c & 1) == 0;
  const int32_t k = closer ? floor_log10_3q_pow2(q) : floor_log10_pow2(q);
  const int h = q + floor_log2_pow10(-k) + 1; /* 1..4 */
  const uint64_t *g = g_pow10_128[-k - P10_MIN];
  /* The value and its interval's ends, times 4 * 10^-k. */
  const uint64_t vb = round_to_odd(g, 4 * c << h),
                 lower = round_to_odd(g, (4 * c - 2 + closer) << h) + !even,
                 upper = round_to_odd(g, (4 * c + 2) << h) - !even;
  const uint64_t s = vb >> 2;

  if (s >= 10) { /* a multiple of 10^(k+1) inside? */
    const uint64_t sp = s / 10;
    const int u_in = lower <= 40 * sp, w_in = 40 * sp + 40 <= upper;
    if (u_in != w_in) {
      *digits = sp + w_in;
      *exp = k + 1;
      return;
    }
  }
  {
    const int u_in = lower <= 4 * s, w_in = 4 * s + 4 <= upper;
    if (u_in != w_in) {
      *digits = s + w_in;
      *exp = k;
      return;
    }
    /* Both inside: the nearer, ties to even. */
    *digits = s + (vb > 4 * s + 2 || (vb == 4 * s + 2 && (s & 1)));
    *exp = k;
  }
}

size_t srv_codec__fmt_f64(char *buf, double v)
{
  uint64_t bits, frac, digits;
  uint32_t bexp;
  int32_t exp;
  int neg, olen;

  memcpy(&bits, &v, 8);
  neg = (int)(bits >> 63);
  bexp = (uint32_t)(bits >> 52) & 0x7ff;
  frac = bits & ((1ull << 52) - 1);
  if (bexp == 0x7ff)
    return write_nonfinite(buf, frac != 0, neg);
  if (bexp == 0 && frac == 0)
    return write_zero(buf, neg);
  pthread_once(&g_pow10_once, pow10_128_init);
  if (!g_pow10_ok) /* cannot happen; keeps a wrong table from lying */
    return srv_codec__fmt_f64_simple(buf, v);
  d2d(frac, bexp, &digits, &exp);
  while (digits % 10 == 0) {
    digits /= 10;
    exp++;
  }
  for (olen = 1; olen < 17 && digits >= g_pow10_u64[olen]; olen++)
    ; /* at most 17 digits */
  return write_decimal(buf, neg, digits, olen, exp);
}

/* ======================================================================
 * reference formatters (printf + read back)
 * ====================================================================== */

/* Re-emit a printf %e/%g string as digits*10^exp through write_decimal so
 * that both formatters choose notation the same way. */
static size_t from_printf(char *buf, const char *s)
{
  uint64_t digits = 0;
  int olen = 0, neg = 0, seen_point = 0, frac_digits = 0, started = 0;
  int32_t e = 0;

  if (*s == '-') {
    neg = 1;
    s++;
  }
  for (; *s && *s != 'e' && *s != 'E'; s++) {
    if (*s == '.') {
      seen_point = 1;
      continue;
    }
    if (*s == '0' && !started) {
      if (seen_point)
        frac_digits++;
      continue;
    }
    started = 1;
    digits = digits * 10 + (uint64_t)(*s - '0');
    olen++;
    if (seen_point)
      frac_digits++;
  }
  if (*s)
    e = (int32_t)strtol(s + 1, NULL, 10);
  if (!started)
    return write_zero(buf, neg);
  e -= frac_digits;
  /* Drop trailing zeros so the digit count is minimal. */
  while (olen > 1 && digits % 10 == 0) {
    digits /= 10;
    olen--;
    e++;
  }
  return write_decimal(buf, neg, digits, olen, e);
}

size_t srv_codec__fmt_f32_simple(char *buf, float v)
{
  char tmp[48];
  int p;

  if (!isfinite(v))
    return write_nonfinite(buf, isnan(v), signbit(v) != 0);
  for (p = 1; p <= 9; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, (double)v);
    if (strtof(tmp, NULL) == v)
      break;
  }
  return from_printf(buf, tmp);
}

size_t srv_codec__fmt_f64_simple(char *buf, double v)
{
  char tmp[48];
  int p;

  if (!isfinite(v))
    return write_nonfinite(buf, isnan(v), signbit(v) != 0);
  for (p = 1; p <= 17; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
    if (strtod(tmp, NULL) == v)
      break;
  }
  return from_printf(buf, tmp);
}

/* ======================================================================
 * reading numbers
 * ====================================================================== */

int srv_codec_number(const json_t *j, double *out)
{
  const char *s;

  if (json_is_number(j)) {
    *out = json_number_value(j);
    return 0;
  }
  if (!json_is_string(j))
    return -1;
  s = json_string_value(j);
  if (json_string_length(j) == 3 && strcmp(s, "inf") == 0)
    *out = INFINITY;
  else if (json_string_length(j) == 4 && strcmp(s, "-inf") == 0)
    *out = -INFINITY;
  else if (json_string_length(j) == 3 && strcmp(s, "nan") == 0)
    *out = NAN;
  else
    return -1;
  return 0;
}

/* Powers of ten that are exact doubles (10^22 < 2^53 * 2^22). */
static const double g_p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,
                                 1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17,
                                 1e18, 1e19, 1e20, 1e21, 1e22};

/* strtod on a copy of s[0..n) (the body is not NUL-terminated). */
static int slow_strtod(const char *s, size_t n, double *out)
{
  char small[128], *p = small, *end;
  double v;

  if (n >= sizeof small) {
    p = malloc(n + 1);
    if (!p)
      return -1;
  }
  memcpy(p, s, n);
  p[n] = '\0';
  errno = 0;
  v = strtod(p, &end);
  /* jansson rejects only overflow ("real number overflow"); underflow to
   * a subnormal or zero is accepted. */
  if ((v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE)
    end = NULL;
  if (p != small)
    free(p);
  if (!end)
    return -1;
  *out = v;
  return 0;
}

int srv_codec__parse_number(const char *s, size_t n, double *out)
{
  const char *p = s, *e = s + n;
  uint64_t m = 0;
  int neg = 0, sig = 0, is_real = 0, dropped = 0;
  int32_t e10 = 0, ex = 0;

  if (p < e && *p == '-') {
    neg = 1;
    p++;
  }
  if (p >= e || *p < '0' || *p > '9')
    return -1;
  if (*p == '0') {
    p++;
  } else {
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
      if (sig < 19) {
        m = m * 10 + (uint64_t)(*p - '0');
        sig++;
      } else {
        dropped = 1;
        e10++;
      }
    }
  }
  if (p < e && *p == '.') {
    is_real = 1;
    p++;
    if (p >= e || *p < '0' || *p > '9')
      return -1;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
      if (m == 0 && *p == '0') { /* leading zeros are not significant */
        e10--;
        continue;
      }
      if (sig < 19) {
        m = m * 10 + (uint64_t)(*p - '0');
        sig++;
        e10--;
      } else if (*p != '0') {
        dropped = 1;
      }
    }
  }
  if (p < e && (*p == 'e' || *p == 'E')) {
    int eneg = 0;
    is_real = 1;
    p++;
    if (p < e && (*p == '+' || *p == '-'))
      eneg = *p++ == '-';
    if (p >= e || *p < '0' || *p > '9')
      return -1;
    for (; p < e && *p >= '0' && *p <= '9'; p++)
      if (ex < 100000) /* beyond this only overflow or zero remain */
        ex = ex * 10 + (*p - '0');
    e10 += eneg ? -ex : ex;
  }
  if (p != e)
    return -1;

  if (!is_real) {
    /* jansson: strtoll, ERANGE -> "too big integer"; the value is then
     * converted to double (so "-0" is +0). */
    int64_t iv;
    if (dropped)
      return -1;
    if (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX)
      return -1;
    iv = neg ? (int64_t)(0 - m) : (int64_t)m;
    *out = (double)iv;
    return 0;
  }
  /* Clinger's fast path: m and 10^|e10| are exact doubles, so one IEEE
   * multiplication or division rounds correctly, like strtod. */
  if (!dropped && m <= (1ull << 53) && e10 >= -22 && e10 <= 22) {
    double v = (double)m;
    v = e10 < 0 ? v / g_p10[-e10] : v * g_p10[e10];
    *out = neg ? -v : v;
    return 0;
  }
  if (m == 0) { /* 0.000e5 and the like: a signed zero */
    *out = neg ? -0.0 : 0.0;
    return 0;
  }
  return slow_strtod(s, n, out);
}
