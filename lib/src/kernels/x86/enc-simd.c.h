/* enc-simd.c.h: the x86 sinusoidal rows (kernels/enc.h), written once over
 * the vector vocabulary (simd-*.h) and vmath.c.h's sincos_vd, included by
 * enc-avx2.c and enc-avx512.c: an exact anchor every AB__ENC_ANCHOR rows,
 * rotations in double between them, 2*VD_W pairs (one float vector of
 * each kind) per step; pairs past the last whole step take libm like the
 * reference. */

/* sin and cos of `scale * freq[k]` for k < kn (a multiple of VD_W), in
 * double; lanes beyond the reduction's range take libm. */
static void anchor(double *s, double *c, double scale, const double *freq,
                   int64_t kn)
{
  int64_t k, i;

  for (k = 0; k < kn; k += VD_W) {
    VD t = VD_MUL(VD_SET1(scale), VD_LOADU(freq + k)), sv, cv;
    if (sincos_vd_ok(t)) {
      sincos_vd(t, &sv, &cv);
      VD_STOREU(s + k, sv);
      VD_STOREU(c + k, cv);
    } else {
      for (i = k; i < k + VD_W; i++) {
        s[i] = sin(scale * freq[i]);
        c[i] = cos(scale * freq[i]);
      }
    }
  }
}

static void V_FN(sin_rows)(float *out, int64_t ldo, int64_t cos_off,
                           double p0, double step, const double *freq,
                           int64_t kn, int64_t rows, int stream)
{
  /* state: the current row's sin and cos; the step's */
  double s[AB__ENC_TILE], c[AB__ENC_TILE], ss[AB__ENC_TILE], cs[AB__ENC_TILE];
  const int64_t kv = kn / (2 * VD_W) * (2 * VD_W);
  int64_t t, k;

  if (kv)
    anchor(ss, cs, step, freq, kv);
  for (t = 0; t < rows; t++) {
    float *row = out + t * ldo;
    const int st = stream && ((uintptr_t)row & (V_W * 4 - 1)) == 0 &&
                   (cos_off & (V_W - 1)) == 0;

    if (t % AB__ENC_ANCHOR == 0 && kv)
      anchor(s, c, p0 + (double)t * step, freq, kv);
    for (k = 0; k < kv; k += 2 * VD_W) {
      VD s0 = VD_LOADU(s + k), s1 = VD_LOADU(s + k + VD_W);
      VD c0 = VD_LOADU(c + k), c1 = VD_LOADU(c + k + VD_W);
      VD S0 = VD_LOADU(ss + k), S1 = VD_LOADU(ss + k + VD_W);
      VD C0 = VD_LOADU(cs + k), C1 = VD_LOADU(cs + k + VD_W);
      if (cos_off) {
        V_STORE_NT(row + k, VD_PACK_F32(s0, s1), st);
        V_STORE_NT(row + cos_off + k, VD_PACK_F32(c0, c1), st);
      } else {
        V_STORE_NT(row + 2 * k, VD_INTERLEAVE_F32(s0, c0), st);
        V_STORE_NT(row + 2 * k + V_W, VD_INTERLEAVE_F32(s1, c1), st);
      }
      /* one step further: rotate (c, s) by the step's angle */
      VD_STOREU(s + k, VD_FMADD(s0, C0, VD_MUL(c0, S0)));
      VD_STOREU(s + k + VD_W, VD_FMADD(s1, C1, VD_MUL(c1, S1)));
      VD_STOREU(c + k, VD_FMSUB(c0, C0, VD_MUL(s0, S0)));
      VD_STOREU(c + k + VD_W, VD_FMSUB(c1, C1, VD_MUL(s1, S1)));
    }
    for (k = kv; k < kn; k++) {
      float cf, sf;
      ab__rope_sincos1(&cf, &sf, (p0 + (double)t * step) * freq[k]);
      ab__enc_put(row, cos_off, k, sf, cf);
    }
  }
}
