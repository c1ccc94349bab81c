/* rope-simd.c.h: the x86 kernels of the RoPE family, written once over the
 * vector vocabulary (simd-*.h) and the vector math (vmath.c.h) and included
 * by rope-avx2.c and rope-avx512.c: cos/sin of the table angles, VD_W
 * doubles per step, and the rotation of rows, V_W floats per step with
 * partial vectors at the tails and streaming stores for large outputs. */

/* ==== cos / sin ========================================================= */

static void V_FN(sincos)(float *c, float *s, const double *theta, int64_t n)
{
  int64_t k = 0, i;

  for (; k + VD_W <= n; k += VD_W) {
    VD t = VD_LOADU(theta + k), sv, cv;

    /* Lanes too large for the reduction (or NaN) take libm like the
     * reference. */
    if (!sincos_vd_ok(t)) {
      for (i = k; i < k + VD_W; i++)
        ab__rope_sincos1(&c[i], &s[i], theta[i]);
      continue;
    }
    sincos_vd(t, &sv, &cv);
    VD_STOREU_F32(c + k, cv);
    VD_STOREU_F32(s + k, sv);
  }
  for (; k < n; k++)
    ab__rope_sincos1(&c[k], &s[k], theta[k]);
}

/* ==== rotation =========================================================== */

/* Whether p is aligned for V_STREAM. */
AI int stream_aligned(const void *p)
{
  return ((uintptr_t)p & (V_W * sizeof(float) - 1)) == 0;
}

/* Copy channels [from, dim) of a row (the part past rotary_dim). */
static void copy_tail(float *o, const float *x, int64_t from, int64_t dim,
                      int nt)
{
  int64_t c = from;

  for (; c + V_W <= dim; c += V_W)
    V_STORE_NT(o + c, V_LOADU(x + c), nt && stream_aligned(o + c));
  if (c < dim)
    V_STORE_PART(o + c, dim - c, V_LOAD_PART(x + c, dim - c));
}

/* rotate-half: pairs (k, k+h), V_W pairs per step. */
static void row_half(float *o, const float *x, const float *cp,
                     const float *sp, int64_t h, int nt)
{
  int64_t k = 0;
  /* Both halves stream only if both are aligned. */
  int st = nt && stream_aligned(o) && (h % V_W) == 0;

  for (; k + V_W <= h; k += V_W) {
    V a = V_LOADU(x + k), b = V_LOADU(x + k + h);
    V c = V_LOADU(cp + k), s = V_LOADU(sp + k);
    V_STORE_NT(o + k, V_FMSUB(a, c, V_MUL(b, s)), st);
    V_STORE_NT(o + k + h, V_FMADD(b, c, V_MUL(a, s)), st);
  }
  if (k < h) {
    int64_t r = h - k;
    V a = V_LOAD_PART(x + k, r), b = V_LOAD_PART(x + k + h, r);
    V c = V_LOAD_PART(cp + k, r), s = V_LOAD_PART(sp + k, r);
    V_STORE_PART(o + k, r, V_FMSUB(a, c, V_MUL(b, s)));
    V_STORE_PART(o + k + h, r, V_FMADD(b, c, V_MUL(a, s)));
  }
}

/* interleaved: pairs (2k, 2k+1), V_W/2 pairs (V_W channels) per step.  With
 * C = [c0 c0 c1 c1 ..], S likewise and X' = X with each pair swapped,
 * out = X*C -+ X'*S (subtract on even lanes, add on odd: fmaddsub). */
static void row_interleaved(float *o, const float *x, const float *cp,
                            const float *sp, int64_t h, int nt)
{
  const int64_t half = V_W / 2;
  int64_t k = 0;
  int st = nt && stream_aligned(o);

  for (; k + half <= h; k += half) {
    V xv = V_LOADU(x + 2 * k);
    V c = V_LOAD_DUP2(cp + k), s = V_LOAD_DUP2(sp + k);
    V_STORE_NT(o + 2 * k, V_FMADDSUB(xv, c, V_MUL(V_SWAP_PAIRS(xv), s)), st);
  }
  if (k < h) {
    int64_t r = h - k;
    V xv = V_LOAD_PART(x + 2 * k, 2 * r);
    V c = V_LOAD_DUP2_PART(cp + k, r), s = V_LOAD_DUP2_PART(sp + k, r);
    V_STORE_PART(o + 2 * k, 2 * r,
                 V_FMADDSUB(xv, c, V_MUL(V_SWAP_PAIRS(xv), s)));
  }
}

static void V_FN(rotate_rows)(float *out, int64_t ldo, const float *x,
                              int64_t ldx, const float *cs, int64_t ldcs,
                              int64_t rows, int64_t h, int64_t dim,
                              int interleaved, int nt)
{
  ab__rope_rows_drive(out, ldo, x, ldx, cs, ldcs, rows, h, dim, nt,
                      interleaved ? row_interleaved : row_half, copy_tail);
  if (nt) /* streaming stores are weakly ordered: publish them */
    V_SFENCE();
}
