/* vmath.c.h: the vector math of the x86 kernels -- exp and tanh in float,
 * sine and cosine in double -- written once over the vocabulary of
 * simd-avx2.h / simd-avx512.h and included after it by each ISA's kernel
 * files.  Every function is inlined into its caller. */

/* ==== exp =============================================================== */

/* exp(x) to about 1 ulp for x in [-87.3, 88] (Cody-Waite reduction by ln 2
 * in two parts, the Cephes expf polynomial, then the exact scaling by 2^n);
 * 0 below -87.3 (where the true value is under 1.3e-38) and so exactly 0
 * for -inf; NaN stays NaN.  The clamps keep n in -126..127, so 2^n is a
 * normal number. */
AI V exp_v(V x)
{
  const V lo = V_SET1(-87.3f);
  V xc = V_MIN(V_SET1(88.0f), V_MAX(lo, x));
  V n = V_ROUND(V_MUL(xc, V_SET1(1.44269504088896341f)));
  V r = V_FNMADD(n, V_SET1(0.693359375f), xc);
  V p, y;

  r = V_FNMADD(n, V_SET1(-2.12194440e-4f), r);
  p = V_SET1(1.9875691500e-4f);
  p = V_FMADD(p, r, V_SET1(1.3981999507e-3f));
  p = V_FMADD(p, r, V_SET1(8.3334519073e-3f));
  p = V_FMADD(p, r, V_SET1(4.1665795894e-2f));
  p = V_FMADD(p, r, V_SET1(1.6666665459e-1f));
  p = V_FMADD(p, r, V_SET1(5.0000001201e-1f));
  p = V_FMADD(p, V_MUL(r, r), r);
  y = V_KEEP_NAN(V_SCALE2N(V_ADD(p, V_SET1(1.0f)), n), x);
  return V_ZERO_WHERE(V_CMP(x, lo, _CMP_LT_OQ), y);
}

/* ==== tanh ============================================================== */

/* tanh(x) to a few ulp: x + x^3 P(x^2) below 0.625 (Cephes tanhf), else
 * 1 - 2 / (exp(2|x|) + 1), sign restored. */
AI V tanh_v(V x)
{
  const V sign = V_SET1(-0.0f);
  V ax = V_ANDNOT(sign, x), z = V_MUL(ax, ax), p, big, e;

  p = V_SET1(-5.70498872745e-3f);
  p = V_FMADD(p, z, V_SET1(2.06390887954e-2f));
  p = V_FMADD(p, z, V_SET1(-5.37397155531e-2f));
  p = V_FMADD(p, z, V_SET1(1.33314422036e-1f));
  p = V_FMADD(p, z, V_SET1(-3.33332819422e-1f));
  p = V_FMADD(V_MUL(p, z), ax, ax);
  e = exp_v(V_MIN(V_SET1(88.0f), V_ADD(ax, ax)));
  big = V_SUB(V_SET1(1.0f), V_DIV(V_SET1(2.0f), V_ADD(e, V_SET1(1.0f))));
  p = V_SEL(V_CMP(ax, V_SET1(0.625f), _CMP_LT_OQ), big, p);
  return V_OR(p, V_AND(x, sign));
}

/* ==== sine and cosine in double ========================================= */

/* Whether every lane of t is small enough for sincos_vd (NaN is not). */
AI int sincos_vd_ok(VD t)
{
  return VDM_ALL(VD_CMP(VD_ABS(t), VD_SET1(AB__ROPE_SINCOS_LIMIT),
                        _CMP_LT_OQ));
}

/* sin and cos of t (|t| < AB__ROPE_SINCOS_LIMIT) to a few 1e-14 past the
 * reduction: t - q*pi/2 in three FMAs with q = round(t*2/pi)
 * (Cody-Waite, constants in rope.h), Taylor series on |r| <= pi/4, then
 * the quadrant q mod 4 (q is an integer below 2^31 in magnitude, so
 * q + 1.5 * 2^52 holds it in the low bits of its significand, two's
 * complement): odd swaps sin and cos; sin is negated for 2, 3 and cos for
 * 1, 2. */
AI void sincos_vd(VD t, VD *sin_out, VD *cos_out)
{
  const VD zero = VD_ZERO();
  VD q = VD_ROUND(VD_MUL(t, VD_SET1(AB__ROPE_2_OVER_PI)));
  VD r = VD_FNMADD(q, VD_SET1(AB__ROPE_PIO2_1), t);
  VD r2, ps, pc, qbits, sv, cv;

  r = VD_FNMADD(q, VD_SET1(AB__ROPE_PIO2_2), r);
  r = VD_FNMADD(q, VD_SET1(AB__ROPE_PIO2_3), r);
  r2 = VD_MUL(r, r);
  ps = VD_FMADD(r2, VD_SET1(AB__ROPE_S13), VD_SET1(AB__ROPE_S11));
  ps = VD_FMADD(r2, ps, VD_SET1(AB__ROPE_S9));
  ps = VD_FMADD(r2, ps, VD_SET1(AB__ROPE_S7));
  ps = VD_FMADD(r2, ps, VD_SET1(AB__ROPE_S5));
  ps = VD_FMADD(r2, ps, VD_SET1(AB__ROPE_S3));
  ps = VD_FMADD(VD_MUL(r2, r), ps, r);
  pc = VD_FMADD(r2, VD_SET1(AB__ROPE_C14), VD_SET1(AB__ROPE_C12));
  pc = VD_FMADD(r2, pc, VD_SET1(AB__ROPE_C10));
  pc = VD_FMADD(r2, pc, VD_SET1(AB__ROPE_C8));
  pc = VD_FMADD(r2, pc, VD_SET1(AB__ROPE_C6));
  pc = VD_FMADD(r2, pc, VD_SET1(AB__ROPE_C4));
  pc = VD_FMADD(r2, pc, VD_SET1(AB__ROPE_C2));
  pc = VD_FMADD(r2, pc, VD_SET1(1.0));
  qbits = VD_ADD(q, VD_SET1(0x1.8p52));
  {
    VDM swap = VDM_BIT(qbits, 1);
    VDM neg_s = VDM_BIT(qbits, 2);
    VDM neg_c = VDM_BIT(VD_ADD(qbits, VD_SET1(1.0)), 2); /* q mod 4 is 1, 2 */
    sv = VD_SEL(swap, ps, pc);
    cv = VD_SEL(swap, pc, ps);
    *sin_out = VD_SEL(neg_s, sv, VD_SUB(zero, sv));
    *cos_out = VD_SEL(neg_c, cv, VD_SUB(zero, cv));
  }
}
