/* rope.h: kernel slots of the RoPE family (owned by lib/src/rope.c).
 *
 * rope.c turns positions into a compact cos/sin table once per job and the
 * slots below do the two hot loops: cos/sin of many angles, and rotating
 * rows of q or k against a table row.  The reference versions live in
 * kernels/ref/rope-ref.c; SIMD variants (kernels/x86/rope-simd.c.h) match
 * them to a few float ulps (tests/unit/test-rope.c checks every ISA). */
#ifndef AB_KERNELS_ROPE_H
#define AB_KERNELS_ROPE_H

#include <math.h>
#include <stdint.h>

/* Scalar helpers shared by the reference and the SIMD tails, so every path
 * computes an element the same way. */

/* cos and sin of one angle: libm in double (exact reduction of any finite
 * argument), rounded once to float. */
static inline void ab__rope_sincos1(float *c, float *s, double theta)
{
  *c = (float)cos(theta);
  *s = (float)sin(theta);
}

/* One rotated pair: a' = a*c - b*s, b' = b*c + a*s.  Both inputs are
 * values, so the outputs may overwrite them (in place). */
static inline void ab__rope_pair(float *oa, float *ob, float a, float b,
                                 float c, float s)
{
  *oa = a * c - b * s;
  *ob = b * c + a * s;
}

/* Software prefetch of the SIMD rotations: row i + ahead of x is requested
 * while row i is rotated, ahead covering about this many bytes.  With the
 * hardware prefetcher alone, rotating q [1,32,4096,128] in place on two
 * Zen 4 threads ran near 80% of a bare in-place read+write stream; 8-16 KiB
 * ahead brought it near 90%, 4 KiB and 32 KiB helped about half as much.
 * Prefetching the table rows as well did not help (they come from L2/L3). */
#define AB__ROPE_PREFETCH_BYTES 12288

/* Rows to look ahead for rows of dim floats; 0 (no software prefetch) when
 * one row is longer than the distance: such rows are long sequential runs
 * the hardware prefetcher follows, and requesting a whole row at once
 * would only evict the row being rotated. */
static inline int64_t ab__rope_prefetch_rows(int64_t dim)
{
  return AB__ROPE_PREFETCH_BYTES / (dim * (int64_t)sizeof(float));
}

/* Ask for every cache line of the row of dim floats `skip` floats after
 * row.  A hint: it never faults, so it may run past the rows of a call or
 * the end of a tensor (merely wasted); the address is formed as an integer
 * because such a pointer could not be formed in C. */
static inline void ab__rope_prefetch_row(const float *row, int64_t skip,
                                         int64_t dim)
{
#if defined(__GNUC__)
  const uintptr_t p = (uintptr_t)row + (uintptr_t)(skip * 4);
  const int64_t bytes = dim * 4;
  int64_t o;

  for (o = 0; o < bytes; o += 64)
    __builtin_prefetch((const void *)(p + (uintptr_t)o), 0, 3);
  /* a row that does not start on a line boundary ends on one more */
  __builtin_prefetch((const void *)(p + (uintptr_t)(bytes - 1)), 0, 3);
#else
  (void)row;
  (void)skip;
  (void)dim;
#endif
}

struct ab__rope_kernels {
  /* c[k] = cos(theta[k]), s[k] = sin(theta[k]) for k < n, rounded to float.
   * theta is in double and may be any finite magnitude (positions of 1e6 and
   * more): the kernel reduces it modulo 2*pi in double before going to
   * float, so large positions keep their accuracy. */
  void (*sincos)(float *c, float *s, const double *theta, int64_t n);

  /* Rotate `rows` rows of `dim` floats.  Row i reads x + i*ldx and writes
   * out + i*ldo; out may equal x (in place, same strides).  Table row i is
   * cs + i*ldcs (ldcs 0: one table row for every row), laid out as
   * [c_0 .. c_{h-1}, s_0 .. s_{h-1}] with any attention factor already in
   * it.  Pair k is (k, k+h) (rotate-half) or (2k, 2k+1) when interleaved:
   *   a' = a*c_k - b*s_k,   b' = b*c_k + a*s_k.
   * Channels 2h .. dim-1 are copied.  nt != 0 asks for non-temporal stores
   * where the output is aligned (large outputs that will not be re-read
   * soon); such a kernel ends with a store fence. */
  void (*rotate_rows)(float *out, int64_t ldo, const float *x, int64_t ldx,
                      const float *cs, int64_t ldcs, int64_t rows, int64_t h,
                      int64_t dim, int interleaved, int nt);
};

/* Constants of the SIMD cos/sin (x86/vmath.c.h): pi/2 in three parts for a
 * Cody-Waite reduction with FMA (exact to double rounding while the
 * quadrant count fits in int32), the limit above which lanes go to libm,
 * and the Taylor coefficients on |r| <= pi/4: sin to r^13, cos to r^14,
 * truncation below 3e-14 -- under the float rounding of a table value by a
 * factor of 10^6, and small enough that the sinusoidal encodings, which
 * advance these values by rotation over up to AB__ENC_ANCHOR rows (enc.h),
 * stay within 2^-32 of the double-precision value. */
#define AB__ROPE_PIO2_1 1.5707963267948966
#define AB__ROPE_PIO2_2 6.123233995736766e-17
#define AB__ROPE_PIO2_3 -1.4973849048591698e-33
#define AB__ROPE_2_OVER_PI 0.6366197723675814
#define AB__ROPE_SINCOS_LIMIT 1e9
#define AB__ROPE_S3 -1.6666666666666666e-01
#define AB__ROPE_S5 8.333333333333333e-03
#define AB__ROPE_S7 -1.984126984126984e-04
#define AB__ROPE_S9 2.7557319223985893e-06
#define AB__ROPE_S11 -2.505210838544172e-08
#define AB__ROPE_S13 1.6059043836821613e-10
#define AB__ROPE_C2 -0.5
#define AB__ROPE_C4 4.1666666666666664e-02
#define AB__ROPE_C6 -1.388888888888889e-03
#define AB__ROPE_C8 2.48015873015873e-05
#define AB__ROPE_C10 -2.755731922398589e-07
#define AB__ROPE_C12 2.08767569878681e-09
#define AB__ROPE_C14 -1.1470745597729725e-11

/* The rotate_rows driver shared by the SIMD files: prefetch ahead, rotate
 * one row with the ISA's row kernel for the pairing, copy the channels past
 * rotary_dim with its tail copy.  Static inline with constant function
 * arguments, so each ISA file gets its own direct-call copy.  The caller
 * fences streaming stores. */
typedef void (*ab__rope_row_fn)(float *o, const float *x, const float *cp,
                                const float *sp, int64_t h, int nt);
typedef void (*ab__rope_tail_fn)(float *o, const float *x, int64_t from,
                                 int64_t dim, int nt);
static inline void ab__rope_rows_drive(float *out, int64_t ldo,
                                       const float *x, int64_t ldx,
                                       const float *cs, int64_t ldcs,
                                       int64_t rows, int64_t h, int64_t dim,
                                       int nt, ab__rope_row_fn row,
                                       ab__rope_tail_fn tail)
{
  const int64_t ahead = ab__rope_prefetch_rows(dim);
  int64_t i;

  for (i = 0; i < rows; i++) {
    const float *xr = x + i * ldx, *c = cs + i * ldcs;
    float *o = out + i * ldo;

    /* Also past this call's last row: in bshd the next call rotates the
     * rows that follow (the next token's heads), and a piece of bhsd rows
     * is long enough that the few rows past its end cost nothing. */
    if (ahead)
      ab__rope_prefetch_row(xr, ahead * ldx, dim);
    row(o, xr, c, c + h, h, nt);
    if (dim > 2 * h && o != xr)
      tail(o, xr, 2 * h, dim, nt);
  }
}

void ab__rope_kernels_ref(struct ab__rope_kernels *k);
/* Installed by kernels/x86/init-avx2.c and init-avx512.c. */
void ab__rope_kernels_avx2(struct ab__rope_kernels *k);
void ab__rope_kernels_avx512(struct ab__rope_kernels *k);

#endif
