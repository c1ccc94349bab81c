/* test-rope.c: the RoPE family -- every rope_type's frequencies, apply in
 * both pairings and layouts, tables, xPos, multi-axis, errors, jobs and the
 * SIMD kernels' parity with the reference.  Expected values come from
 * docs/methods.md#worked-examples (6-10) or from the float64 reference
 * written below, straight from the formulas of docs/methods.md#rope. */
#include "ab-internal.h"
#include "attnbias.h"
#include "kernels/kernels.h"
#include "test-util.h"
#include "test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define TWO_PI 6.283185307179586476925286766559
#define RTOL 1e-5
#define ATOL 1e-6

/* ==== float64 reference ================================================ */

/* Rotate one row of D channels: pair j (of r/2) turns by ang[j] and is
 * scaled by mul[j] (NULL: 1).  Channels r..D-1 pass through. */
static void ref_row(double *out, const double *x, int64_t D, int64_t r,
                    int interleaved, const double *ang, const double *mul)
{
  int64_t j, h = r / 2;

  for (j = 0; j < D; j++)
    out[j] = x[j];
  for (j = 0; j < h; j++) {
    int64_t a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + h;
    double m = mul ? mul[j] : 1.0;
    double c = cos(ang[j]) * m, s = sin(ang[j]) * m;
    out[a] = x[a] * c - x[b] * s;
    out[b] = x[b] * c + x[a] * s;
  }
}

/* Plain frequencies base^(-2f/r). */
static void ref_default(double *inv, int64_t r, double base)
{
  int64_t f;
  for (f = 0; f < r / 2; f++)
    inv[f] = 1.0 / pow(base, 2.0 * (double)f / (double)r);
}

/* YaRN per docs/methods.md#yarn. */
static double ref_yarn(double *inv, int64_t r, double base, double s,
                       double orig, double beta_fast, double beta_slow,
                       int truncate)
{
  double lo = (double)r * log(orig / (beta_fast * TWO_PI)) / (2 * log(base));
  double hi = (double)r * log(orig / (beta_slow * TWO_PI)) / (2 * log(base));
  int64_t k;

  if (truncate) {
    lo = floor(lo);
    hi = ceil(hi);
  }
  if (lo < 0)
    lo = 0;
  if (hi > (double)r - 1)
    hi = (double)r - 1;
  if (lo == hi)
    hi += 0.001;
  for (k = 0; k < r / 2; k++) {
    double extrap = 1.0 / pow(base, 2.0 * (double)k / (double)r);
    double ramp = ((double)k - lo) / (hi - lo);
    ramp = fmin(1.0, fmax(0.0, ramp));
    inv[k] = extrap / s * ramp + extrap * (1 - ramp);
  }
  return s > 1 ? 0.1 * log(s) + 1 : 1.0;
}

/* Llama-3 per docs/methods.md#llama3. */
static void ref_llama3(double *inv, int64_t r, double base, double factor,
                       double lo_f, double hi_f, double orig)
{
  int64_t k;
  for (k = 0; k < r / 2; k++) {
    double f = 1.0 / pow(base, 2.0 * (double)k / (double)r);
    double wl = TWO_PI / f;
    if (wl < orig / hi_f)
      inv[k] = f;
    else if (wl > orig / lo_f)
      inv[k] = f / factor;
    else {
      double sm = (orig / wl - lo_f) / (hi_f - lo_f);
      inv[k] = (1 - sm) * f / factor + sm * f;
    }
  }
}

/* Library apply on a rank-2 float32 [n, D] input. */
static int apply2(const struct ab_rope_params *p, int64_t seq_len,
                  const float *x, int64_t n, int64_t D, const int64_t *pos,
                  int is_key, float *out)
{
  struct ab_tensor t;
  int64_t shape[2] = {n, D};
  int st = (int)ab_tensor_init(&t, (void *)x, AB_DTYPE_F32, 2, shape);
  if (st)
    return st;
  return (int)ab_rope_apply(p, seq_len, &t, AB_LAYOUT_BHSD, pos, is_key, out);
}

/* Expected rows for one-axis RoPE: want[t*D ..] from positions and inv. */
static void ref_rows(double *want, const double *x, int64_t n, int64_t D,
                     int64_t r, int il, const int64_t *pos, const double *inv,
                     double att)
{
  double ang[256], mul[256];
  int64_t t, j;
  for (t = 0; t < n; t++) {
    for (j = 0; j < r / 2; j++) {
      ang[j] = (double)pos[t] * inv[j];
      mul[j] = att;
    }
    ref_row(want + t * D, x + t * D, D, r, il, ang, mul);
  }
}

static void fill_random(float *f, double *d, int64_t n)
{
  int64_t i;
  for (i = 0; i < n; i++) {
    f[i] = (float)test_uniform(-2, 2);
    if (d)
      d[i] = f[i];
  }
}

/* LongRoPE over head_dim D: the two lists, the original and the full
 * context length (the default factor is their ratio). */
static void longrope_params(struct ab_rope_params *p, int64_t D,
                            const double *sf, const double *lf, int64_t orig,
                            int64_t max_pos)
{
  ab_rope_params_init(p);
  p->head_dim = D;
  p->rope_type = AB_ROPE_LONGROPE;
  p->short_factor = sf;
  p->long_factor = lf;
  p->original_max_position_embeddings = orig;
  p->max_position_embeddings = max_pos;
}

static const double g_x8[8] = {1, 2, 3, 4, 5, 6, 7, 8};

/* ==== names and defaults =============================================== */

TEST(rope_type_names)
{
  int t;
  for (t = 0; t < AB_ROPE_TYPE_LAST_; t++)
    CHECK_EQ_I64(ab_rope_type_parse(ab_rope_type_name((enum ab_rope_type)t)),
                 t);
  CHECK_STR(ab_rope_type_name(AB_ROPE_LLAMA3), "llama3");
  CHECK_STR(ab_rope_type_name(AB_ROPE_VISION2D), "vision2d");
  CHECK_EQ_I64(ab_rope_type_parse("yarn"), AB_ROPE_YARN);
  CHECK_EQ_I64(ab_rope_type_parse("mrope"), AB_ROPE_DEFAULT);
  CHECK_EQ_I64(ab_rope_type_parse("su"), AB_ROPE_LONGROPE);
  CHECK_EQ_I64(ab_rope_type_parse("YaRN"), -1);
  CHECK_EQ_I64(ab_rope_type_parse(NULL), -1);
  CHECK_STR(ab_rope_type_name((enum ab_rope_type)99), "unknown");
  return 0;
}

TEST(rope_params_defaults)
{
  struct ab_rope_params p;
  int64_t r, nf;
  int na;
  ab_rope_params_init(&p);
  CHECK(p.rope_theta == 10000.0 && p.partial_rotary_factor == 1.0);
  CHECK(p.factor < 0 && p.attention_factor < 0 && p.mscale < 0);
  CHECK(p.beta_fast == 32.0 && p.beta_slow == 1.0 && p.truncate == 1);
  CHECK(p.low_freq_factor == 1.0 && p.high_freq_factor == 4.0);
  CHECK(p.scale_base == 512.0 && p.gamma == 0.4 && p.interleaved == 0);
  CHECK(p.rope_type == AB_ROPE_DEFAULT && p.n_mrope_section == 0);
  CHECK(p.rotary_offset == 0);
  p.head_dim = 10;
  p.partial_rotary_factor = 0.4;
  CHECK_OK(ab_rope_check(&p, &r, &nf, &na));
  CHECK_EQ_I64(r, 4);
  CHECK_EQ_I64(nf, 2);
  CHECK_EQ_I64(na, 1);
  return 0;
}

/* ==== frequencies (docs/methods.md worked examples 6, 7) ================= */

TEST(rope_default_inv_freq)
{
  struct ab_rope_params p;
  double inv[8], att = 0, want[8];
  static const double w8[4] = {1, 0.1, 0.01, 0.001};
  static const double w16[8] = {1,    0.3162278, 0.1,   0.03162278,
                                0.01, 0.003162278, 0.001, 0.0003162278};
  int i;
  ab_rope_params_init(&p);
  p.head_dim = 8;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, &att));
  for (i = 0; i < 4; i++)
    CHECK_CLOSE(inv[i], w8[i], RTOL, 0);
  CHECK(att == 1.0);
  p.head_dim = 16;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  ref_default(want, 16, 10000);
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], w16[i], RTOL, 0);
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  }
  return 0;
}

TEST(rope_linear_ntk_dynamic_inv_freq)
{
  struct ab_rope_params p;
  double inv[8], want[8], att;
  static const double lin[8] = {0.25,   0.07905694, 0.025,   0.007905694,
                                0.0025, 0.0007905694, 0.00025, 7.905694e-05};
  static const double ntk[8] = {1,           0.2594128,    0.06729501,
                                0.01745719,  0.004528618,  0.001174782,
                                0.0003047534, 7.905694e-05};
  static const double dyn128[8] = {1,           0.2512738,    0.0631385,
                                   0.01586505,  0.003986471,  0.001001695,
                                   0.0002516998, 6.324555e-05};
  int i;

  ab_rope_params_init(&p);
  p.head_dim = 16;
  p.rope_type = AB_ROPE_LINEAR;
  p.factor = 4;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, &att));
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], lin[i], RTOL, 0);
  CHECK(att == 1.0);

  p.rope_type = AB_ROPE_NTK;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  ref_default(want, 16, 10000 * pow(4, 16.0 / 14));
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], ntk[i], RTOL, 0);
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  }

  /* Dynamic: seq_len at the original length leaves the base alone. */
  p.rope_type = AB_ROPE_DYNAMIC;
  p.max_position_embeddings = 64;
  CHECK_OK(ab_rope_inv_freq(&p, 64, inv, NULL));
  ref_default(want, 16, 10000);
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  CHECK_OK(ab_rope_inv_freq(&p, 10, inv, NULL)); /* shorter: unchanged */
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  CHECK_OK(ab_rope_inv_freq(&p, 128, inv, NULL));
  ref_default(want, 16, 10000 * pow(4.0 * 128 / 64 - 3, 16.0 / 14));
  CHECK_CLOSE(10000 * pow(5, 16.0 / 14), 62924.95, 1e-6, 0);
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], dyn128[i], RTOL, 0);
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  }
  /* original_max_position_embeddings, when given, is the original length. */
  p.max_position_embeddings = 0;
  p.original_max_position_embeddings = 64;
  CHECK_OK(ab_rope_inv_freq(&p, 128, inv, NULL));
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], dyn128[i], RTOL, 0);
  return 0;
}

TEST(rope_yarn_inv_freq)
{
  struct ab_rope_params p;
  double inv[64], want[64], att, watt;
  static const double tr[8] = {1,      0.2371708,    0.05,    0.007905694,
                               0.0025, 0.0007905694, 0.00025, 7.905694e-05};
  static const double notr[8] = {1,      0.1985835,    0.02559525,
                                 0.007905694, 0.0025, 0.0007905694,
                                 0.00025, 7.905694e-05};
  static const double d128a[4] = {1, 0.8659643, 0.7498942, 0.6493816};
  static const double d128b[6] = {0.07498942, 0.06493816, 0.05623413,
                                  0.04694086, 0.03912857, 0.03256721};
  static const double d128c[4] = {1.111425e-05, 9.624541e-06, 8.334509e-06,
                                  7.217387e-06};
  int i;

  ab_rope_params_init(&p);
  p.head_dim = 16;
  p.rope_type = AB_ROPE_YARN;
  p.factor = 4;
  p.original_max_position_embeddings = 64;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, &att));
  watt = ref_yarn(want, 16, 10000, 4, 64, 32, 1, 1);
  CHECK_CLOSE(att, 1.138629, RTOL, 0);
  CHECK_CLOSE(att, watt, 1e-12, 0);
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], tr[i], RTOL, 0);
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  }
  /* beta 0 means the defaults 32 / 1, as HF's null. */
  p.beta_fast = 0;
  p.beta_slow = 0;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], tr[i], RTOL, 0);
  p.truncate = 0;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  ref_yarn(want, 16, 10000, 4, 64, 32, 1, 0);
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], notr[i], RTOL, 0);
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  }
  /* factor absent: max_position_embeddings / original. */
  p.truncate = 1;
  p.factor = -1;
  p.max_position_embeddings = 256;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, &att));
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], tr[i], RTOL, 0);
  CHECK_CLOSE(att, 1.138629, RTOL, 0);
  /* ... and an explicit factor wins over the ratio. */
  p.factor = 2;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, &att));
  watt = ref_yarn(want, 16, 10000, 2, 64, 32, 1, 1);
  CHECK_CLOSE(att, watt, 1e-12, 0);
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);

  /* dim 128, factor 16, orig 4096: ramp (20, 46). */
  ab_rope_params_init(&p);
  p.head_dim = 128;
  p.rope_type = AB_ROPE_YARN;
  p.factor = 16;
  p.original_max_position_embeddings = 4096;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, &att));
  CHECK_CLOSE(att, 1.277259, RTOL, 0);
  ref_yarn(want, 128, 10000, 16, 4096, 32, 1, 1);
  for (i = 0; i < 64; i++)
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  for (i = 0; i < 4; i++) {
    CHECK_CLOSE(inv[i], d128a[i], RTOL, 0);
    CHECK_CLOSE(inv[60 + i], d128c[i], RTOL, 0);
  }
  for (i = 0; i < 6; i++)
    CHECK_CLOSE(inv[18 + i], d128b[i], RTOL, 0);

  /* DeepSeek: mscale / mscale_all_dim ratio; override wins over both. */
  p.factor = 40;
  p.mscale = 0.707;
  p.mscale_all_dim = 0.707;
  CHECK_OK(ab_rope_inv_freq(&p, 1, NULL, &att));
  CHECK_CLOSE(att, 1.0, 1e-12, 0);
  p.mscale = 1.0;
  CHECK_OK(ab_rope_inv_freq(&p, 1, NULL, &att));
  CHECK_CLOSE(att, 1.085726, RTOL, 0);
  CHECK_CLOSE(att, (0.1 * log(40) + 1) / (0.1 * 0.707 * log(40) + 1), 1e-12,
              0);
  p.mscale_all_dim = -1; /* only one given: the plain default */
  CHECK_OK(ab_rope_inv_freq(&p, 1, NULL, &att));
  CHECK_CLOSE(att, 0.1 * log(40) + 1, 1e-12, 0);
  p.attention_factor = 0.5;
  CHECK_OK(ab_rope_inv_freq(&p, 1, NULL, &att));
  CHECK(att == 0.5);
  return 0;
}

TEST(rope_llama3_inv_freq)
{
  struct ab_rope_params p;
  double inv[64], want[64];
  static const double w16[8] = {1,       0.2443846,    0.01304226,
                                0.003952847, 0.00125,  0.0003952847,
                                0.000125, 3.952847e-05};
  static const double a[3] = {1, 0.8146172, 0.6636012};
  static const double b[8] = {3.428102e-05, 2.792591e-05, 2.274893e-05,
                              1.853167e-05, 1.509622e-05, 1.229764e-05,
                              1.001787e-05, 8.160728e-06};
  static const double c[3] = {4.624654e-07, 3.767323e-07, 3.068926e-07};
  double wl0, wl2;
  int i;

  ab_rope_params_init(&p);
  p.head_dim = 16;
  p.rope_type = AB_ROPE_LLAMA3;
  p.factor = 8;
  p.original_max_position_embeddings = 64;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  ref_llama3(want, 16, 10000, 8, 1, 4, 64);
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], w16[i], RTOL, 0);
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  }

  /* The real Llama-3.1 configuration. */
  p.head_dim = 128;
  p.rope_theta = 500000;
  p.original_max_position_embeddings = 8192;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  ref_llama3(want, 128, 500000, 8, 1, 4, 8192);
  for (i = 0; i < 64; i++)
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  for (i = 0; i < 3; i++) {
    CHECK_CLOSE(inv[i], a[i], RTOL, 0);
    CHECK_CLOSE(inv[61 + i], c[i], RTOL, 0);
  }
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[40 + i], b[i], RTOL, 0);

  /* Thresholds placed exactly on wavelengths 0 and 2: pair 0 sits on
   * high_freq_wavelen (medium branch, smooth = 1: unchanged) and pair 2 on
   * low_freq_wavelen (medium branch, smooth = 0: divided by factor). */
  p.head_dim = 16;
  p.rope_theta = 10000;
  p.original_max_position_embeddings = 64;
  wl0 = TWO_PI;
  wl2 = TWO_PI * 10;
  p.high_freq_factor = 64 / wl0;
  p.low_freq_factor = 64 / wl2;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  ref_llama3(want, 16, 10000, 8, p.low_freq_factor, p.high_freq_factor, 64);
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], want[i], 1e-12, 0);
  CHECK_CLOSE(inv[0], 1.0, 1e-12, 0);
  CHECK_CLOSE(inv[2], 0.1 / 8, 1e-12, 0);
  CHECK_CLOSE(inv[1], /* strictly inside: smoothed */
              (1 - (64 / (TWO_PI / pow(10000, -2.0 / 16)) - 64 / wl2) /
                       (64 / wl0 - 64 / wl2)) *
                      pow(10000, -2.0 / 16) / 8 +
                  (64 / (TWO_PI / pow(10000, -2.0 / 16)) - 64 / wl2) /
                      (64 / wl0 - 64 / wl2) * pow(10000, -2.0 / 16),
              1e-12, 0);
  CHECK_CLOSE(inv[3], pow(10000, -6.0 / 16) / 8, 1e-12, 0);
  return 0;
}

TEST(rope_longrope_inv_freq)
{
  struct ab_rope_params p;
  static const double sf[8] = {1.0, 1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 4.0};
  static const double lf[8] = {1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0};
  static const double ws[8] = {1,           0.3162278,   0.09090909,
                               0.02635231,  0.006666667, 0.001581139,
                               0.0003333333, 7.905694e-05};
  static const double wlong[8] = {1,           0.2108185,   0.05,
                                  0.01054093,  0.0025,      0.0005270463,
                                  0.000125,    1.976424e-05};
  double inv[8], att;
  int i;

  longrope_params(&p, 16, sf, lf, 64, 256);
  CHECK_OK(ab_rope_inv_freq(&p, 32, inv, &att));
  CHECK_CLOSE(att, 1.154701, RTOL, 0);
  CHECK_CLOSE(att, sqrt(1 + log(4.0) / log(64.0)), 1e-12, 0);
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], ws[i], RTOL, 0);
    CHECK_CLOSE(inv[i], 1.0 / (sf[i] * pow(10000, 2.0 * i / 16)), 1e-12, 0);
  }
  CHECK_OK(ab_rope_inv_freq(&p, 64, inv, NULL)); /* == original: short */
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], ws[i], RTOL, 0);
  CHECK_OK(ab_rope_inv_freq(&p, 65, inv, NULL));
  for (i = 0; i < 8; i++)
    CHECK_CLOSE(inv[i], wlong[i], RTOL, 0);
  CHECK_OK(ab_rope_inv_freq(&p, 100, inv, NULL));
  for (i = 0; i < 8; i++) {
    CHECK_CLOSE(inv[i], wlong[i], RTOL, 0);
    CHECK_CLOSE(inv[i], 1.0 / (lf[i] * pow(10000, 2.0 * i / 16)), 1e-12, 0);
  }
  /* Explicit factor (<= 1 gives attention 1) and explicit override. */
  p.factor = 1.0;
  CHECK_OK(ab_rope_inv_freq(&p, 100, NULL, &att));
  CHECK(att == 1.0);
  p.factor = 16;
  CHECK_OK(ab_rope_inv_freq(&p, 100, NULL, &att));
  CHECK_CLOSE(att, sqrt(1 + log(16.0) / log(64.0)), 1e-12, 0);
  p.attention_factor = 1.25;
  CHECK_OK(ab_rope_inv_freq(&p, 100, NULL, &att));
  CHECK(att == 1.25);
  return 0;
}

/* ==== apply: worked examples 6 =========================================== */

TEST(rope_worked_pairings)
{
  static const double half[4][8] = {
      {1, 2, 3, 4, 5, 6, 7, 8},
      {-3.667053, 1.391008, 2.929851, 3.991998, 3.542983, 6.169692, 7.02965,
       8.003996},
      {-1.695593, 0.1375517, 2.788682, 3.975982, -4.808842, 6.323059,
       7.086837, 8.011964},
      {3.394147, 1.585984, -4.26939, 3.181349, 3.805229, -6.122471, 6.306529,
       8.359367}};
  static const double inter[4][8] = {
      {1, 2, 3, 4, 5, 6, 7, 8},
      {-1.14264, 1.922076, 2.585679, 4.279517, 4.939751, 6.049699, 6.991997,
       8.006996},
      {-1.272233, -1.838865, 1.683929, 4.707907, 4.817777, 6.147278,
       6.975969, 8.020964},
      {1.87505, 1.218272, -0.3411301, -4.988349, -2.347314, 7.449169,
       6.166362, 8.658867}};
  int64_t pos[4] = {0, 1, 3, 100};
  struct ab_rope_params p;
  float x[32], out[32];
  double xd[32], want[32], inv[4];
  int il, t, c;

  for (t = 0; t < 4; t++)
    for (c = 0; c < 8; c++)
      xd[t * 8 + c] = x[t * 8 + c] = (float)g_x8[c];
  ab_rope_params_init(&p);
  p.head_dim = 8;
  ref_default(inv, 8, 10000);
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    CHECK_OK(apply2(&p, 1, x, 4, 8, pos, 0, out));
    CHECK_ARRAY(out, il ? &inter[0][0] : &half[0][0], 32, RTOL, ATOL);
    ref_rows(want, xd, 4, 8, 8, il, pos, inv, 1.0);
    CHECK_ARRAY(out, want, 32, RTOL, ATOL);
    /* Position 0 is the identity, bit for bit. */
    for (c = 0; c < 8; c++)
      CHECK(out[c] == x[c]);
  }
  return 0;
}

TEST(rope_partial_rotary)
{
  static const double half3[8] = {-1.413353, 1.879118, -2.828857, 4.058191,
                                  5,         6,        7,         8};
  static const double inter3[8] = {-1.272233, -1.838865, 2.878668, 4.088187,
                                   5,         6,         7,        8};
  int64_t pos[1] = {3}, pos5[5] = {0, 1, 3, -4, 77};
  struct ab_rope_params p;
  float x[8], out[8], x7[35], out7[35];
  double want[35], xd7[35], inv[2];
  int il, i;

  for (i = 0; i < 8; i++)
    x[i] = (float)g_x8[i];
  ab_rope_params_init(&p);
  p.head_dim = 8;
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    p.partial_rotary_factor = 0.5;
    p.rotary_dim = 0;
    CHECK_OK(apply2(&p, 1, x, 1, 8, pos, 0, out));
    CHECK_ARRAY(out, il ? inter3 : half3, 8, RTOL, ATOL);
    p.partial_rotary_factor = 1.0;
    p.rotary_dim = 4;
    CHECK_OK(apply2(&p, 1, x, 1, 8, pos, 0, out));
    CHECK_ARRAY(out, il ? inter3 : half3, 8, RTOL, ATOL);
  }
  /* Odd head_dim 7 with rotary_dim 4: the 3 tail channels pass through. */
  fill_random(x7, xd7, 35);
  ab_rope_params_init(&p);
  p.head_dim = 7;
  p.rotary_dim = 4;
  ref_default(inv, 4, 10000);
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    CHECK_OK(apply2(&p, 1, x7, 5, 7, pos5, 0, out7));
    ref_rows(want, xd7, 5, 7, 4, il, pos5, inv, 1.0);
    CHECK_ARRAY(out7, want, 35, RTOL, ATOL);
    for (i = 0; i < 5; i++)
      CHECK(out7[i * 7 + 4] == x7[i * 7 + 4] && out7[i * 7 + 6] == x7[i * 7 + 6]);
  }
  return 0;
}

static double dot8(const float *a, const float *b)
{
  double s = 0;
  int i;
  for (i = 0; i < 8; i++)
    s += (double)a[i] * b[i];
  return s;
}

TEST(rope_relative_property)
{
  struct ab_rope_params p;
  float q[8], k[8], q5[8], k2[8], q13[8], k10[8];
  int64_t p5 = 5, p2 = 2, p13 = 13, p10 = 10;
  int i;

  for (i = 0; i < 8; i++) {
    q[i] = (float)g_x8[i];
    k[i] = (float)g_x8[7 - i];
  }
  ab_rope_params_init(&p);
  p.head_dim = 8;
  CHECK_OK(apply2(&p, 1, q, 1, 8, &p5, 0, q5));
  CHECK_OK(apply2(&p, 1, k, 1, 8, &p2, 1, k2));
  CHECK_OK(apply2(&p, 1, q, 1, 8, &p13, 0, q13));
  CHECK_OK(apply2(&p, 1, k, 1, 8, &p10, 1, k10));
  CHECK_CLOSE(dot8(q5, k2), 45.92957, RTOL, 0);
  CHECK_CLOSE(dot8(q13, k10), 45.92957, RTOL, 0);
  return 0;
}

/* docs/methods.md#pairing: permuting channels [0,2,4,..,1,3,5,..] turns the
 * interleaved pairing into rotate-half: half(P x) == P(interleaved(x)). */
TEST(rope_interleaved_half_permutation)
{
  enum { N = 6, D = 16 };
  struct ab_rope_params p;
  float x[N * D], px[N * D], oi[N * D], oh[N * D], poi[N * D];
  double want[N * D];
  int64_t pos[N] = {0, 1, 7, 42, -3, 1000};
  int t, c;

  fill_random(x, NULL, N * D);
  for (t = 0; t < N; t++)
    for (c = 0; c < D / 2; c++) {
      px[t * D + c] = x[t * D + 2 * c];
      px[t * D + D / 2 + c] = x[t * D + 2 * c + 1];
    }
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.interleaved = 1;
  CHECK_OK(apply2(&p, 1, x, N, D, pos, 0, oi));
  p.interleaved = 0;
  CHECK_OK(apply2(&p, 1, px, N, D, pos, 0, oh));
  for (t = 0; t < N; t++)
    for (c = 0; c < D / 2; c++) {
      poi[t * D + c] = oi[t * D + 2 * c];
      poi[t * D + D / 2 + c] = oi[t * D + 2 * c + 1];
    }
  for (c = 0; c < N * D; c++)
    want[c] = poi[c];
  CHECK_ARRAY(oh, want, N * D, 1e-6, 1e-6);
  return 0;
}

/* ==== scaled, multi-axis, vision, xPos (worked examples 7-10) ============ */

TEST(rope_yarn_vector)
{
  static const double w[16] = {3.787468, 9.133415, -10.23244, -1.058132,
                               3.803269, 6.196488, 7.756296,  9.036951,
                               9.589901, 7.170379, -7.989949, 14.36373,
                               15.39648, 16.19834, 17.17773,  18.25394};
  struct ab_rope_params p;
  float x[16], out[16];
  double xd[16], want[16], inv[8], att;
  int64_t pos = 50;
  int i;

  for (i = 0; i < 16; i++)
    xd[i] = x[i] = (float)(i + 1);
  ab_rope_params_init(&p);
  p.head_dim = 16;
  p.rope_type = AB_ROPE_YARN;
  p.factor = 4;
  p.original_max_position_embeddings = 64;
  CHECK_OK(apply2(&p, 1, x, 1, 16, &pos, 0, out));
  CHECK_ARRAY(out, w, 16, RTOL, ATOL);
  att = ref_yarn(inv, 16, 10000, 4, 64, 32, 1, 1);
  ref_rows(want, xd, 1, 16, 16, 0, &pos, inv, att);
  CHECK_ARRAY(out, want, 16, RTOL, ATOL);
  return 0;
}

TEST(rope_mrope_worked)
{
  static const double w[16] = {8.913981, -10.02015, 0.7548371, 3.233562,
                               4.739017, 5.688652,  6.894829,  7.964563,
                               1.594035, 1.89647,   11.37674,  12.22882,
                               13.09739, 14.12937,  15.04863,  16.01767};
  static const double wi[16] = {8.913981, -4.298114, -4.791868, 2.060633,
                                4.739017, 5.688652,  6.924913,  7.989879,
                                1.594035, 9.248038,  10.34592,  12.48014,
                                13.09739, 14.12937,  15.03481,  16.00506};
  static const int axis[8] = {0, 0, 1, 1, 1, 2, 2, 2};
  static const int axis_i[8] = {0, 1, 2, 0, 1, 2, 0, 1};
  struct ab_rope_params p;
  float x[16], out[16], cs[2][16];
  double xd[16], want[16], inv[8], ang[8], tpos[3] = {5, 2, 7};
  int64_t pos[3] = {5, 2, 7}, r;
  int i, na, il;

  for (i = 0; i < 16; i++)
    xd[i] = x[i] = (float)(i + 1);
  ab_rope_params_init(&p);
  p.head_dim = 16;
  p.n_mrope_section = 3;
  p.mrope_section[0] = 2;
  p.mrope_section[1] = 3;
  p.mrope_section[2] = 3;
  CHECK_OK(ab_rope_check(&p, &r, NULL, &na));
  CHECK_EQ_I64(na, 3);
  ref_default(inv, 16, 10000);
  for (il = 0; il < 2; il++) {
    p.mrope_interleaved = il;
    CHECK_OK(apply2(&p, 1, x, 1, 16, pos, 0, out));
    CHECK_ARRAY(out, il ? wi : w, 16, RTOL, ATOL);
    for (i = 0; i < 8; i++)
      ang[i] = tpos[il ? axis_i[i] : axis[i]] * inv[i];
    ref_row(want, xd, 16, 16, 0, ang, NULL);
    CHECK_ARRAY(out, want, 16, RTOL, ATOL);
    /* The table carries the same angles. */
    CHECK_OK(ab_rope_table(&p, 1, pos, 1, cs[0], cs[1]));
    for (i = 0; i < 16; i++) {
      CHECK_CLOSE(cs[0][i], cos(ang[i % 8]), RTOL, ATOL);
      CHECK_CLOSE(cs[1][i], sin(ang[i % 8]), RTOL, ATOL);
    }
  }
  return 0;
}

/* Text tokens (t == h == w == p) reduce M-RoPE to plain 1-D RoPE, in both
 * forms and with 4 sections. */
TEST(rope_mrope_text_reduces_to_1d)
{
  enum { N = 5, D = 24 };
  struct ab_rope_params p;
  float x[N * D], out[N * D];
  double xd[N * D], want[N * D], inv[12];
  int64_t pos1[N] = {0, 3, 17, 250, -9}, pos4[4 * N];
  int form, t, a;

  fill_random(x, xd, N * D);
  for (a = 0; a < 4; a++)
    for (t = 0; t < N; t++)
      pos4[a * N + t] = pos1[t];
  ref_default(inv, D, 10000);
  ref_rows(want, xd, N, D, D, 0, pos1, inv, 1.0);
  for (form = 0; form < 3; form++) {
    ab_rope_params_init(&p);
    p.head_dim = D;
    p.n_mrope_section = form == 2 ? 4 : 3;
    p.mrope_section[0] = form == 2 ? 3 : 4;
    p.mrope_section[1] = 4;
    p.mrope_section[2] = 4;
    p.mrope_section[3] = form == 2 ? 1 : 0;
    p.mrope_interleaved = form == 1;
    CHECK_OK(apply2(&p, 1, x, N, D, pos4, 0, out));
    CHECK_ARRAY(out, want, N * D, RTOL, ATOL);
  }
  return 0;
}

/* Qwen3-VL's interleaved sections [24, 20, 20] over 64 pairs, and ggml's
 * 4-section IMROPE (leftover frequencies on the e row). */
TEST(rope_mrope_interleaved_axes)
{
  enum { D = 128 };
  struct ab_rope_params p;
  float x[D], out[D];
  double xd[D], want[D], inv[64], ang[64];
  int64_t pos[4] = {11, 22, 33, 44};
  int j, ax;

  fill_random(x, xd, D);
  ref_default(inv, D, 1e6);
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rope_theta = 1e6;
  p.n_mrope_section = 3;
  p.mrope_section[0] = 24;
  p.mrope_section[1] = 20;
  p.mrope_section[2] = 20;
  p.mrope_interleaved = 1;
  CHECK_OK(apply2(&p, 1, x, 1, D, pos, 0, out));
  for (j = 0; j < 64; j++) {
    ax = (j % 3 == 1 && j < 60) ? 1 : (j % 3 == 2 && j < 60) ? 2 : 0;
    ang[j] = (double)pos[ax] * inv[j];
  }
  ref_row(want, xd, D, D, 0, ang, NULL);
  CHECK_ARRAY(out, want, D, RTOL, ATOL);

  p.n_mrope_section = 4; /* t 10, h 20, w 20, e 14 */
  p.mrope_section[0] = 10;
  p.mrope_section[3] = 14;
  CHECK_OK(apply2(&p, 1, x, 1, D, pos, 0, out));
  for (j = 0; j < 64; j++) {
    if (j % 3 == 1 && j < 60)
      ax = 1;
    else if (j % 3 == 2 && j < 60)
      ax = 2;
    else if (j % 3 == 0 && j < 30)
      ax = 0;
    else
      ax = 3;
    ang[j] = (double)pos[ax] * inv[j];
  }
  ref_row(want, xd, D, D, 0, ang, NULL);
  CHECK_ARRAY(out, want, D, RTOL, ATOL);
  return 0;
}

TEST(rope_vision2d)
{
  static const double w[8] = {-3.667053, 1.939901,  -7.613522, 3.839211,
                              3.542983,  6.0197,    -0.1851356, 8.078395};
  struct ab_rope_params p;
  float x[8], out[8], co[8], si[8];
  double xd[8], want[8], inv[2], ang[4];
  int64_t pos[2] = {1, 2}, r, nf;
  int i, na, il;

  for (i = 0; i < 8; i++)
    xd[i] = x[i] = (float)g_x8[i];
  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_VISION2D;
  CHECK_OK(ab_rope_check(&p, &r, &nf, &na));
  CHECK_EQ_I64(r, 8);
  CHECK_EQ_I64(nf, 2);
  CHECK_EQ_I64(na, 2);
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  CHECK_CLOSE(inv[0], 1.0, 1e-12, 0);
  CHECK_CLOSE(inv[1], 0.01, 1e-12, 0);
  CHECK_OK(apply2(&p, 1, x, 1, 8, pos, 0, out));
  CHECK_ARRAY(out, w, 8, RTOL, ATOL);
  /* angles [h f0, h f1, w f0, w f1] on pairs 0..3, in either pairing */
  ang[0] = 1;
  ang[1] = 0.01;
  ang[2] = 2;
  ang[3] = 0.02;
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    CHECK_OK(apply2(&p, 1, x, 1, 8, pos, 0, out));
    ref_row(want, xd, 8, 8, il, ang, NULL);
    CHECK_ARRAY(out, want, 8, RTOL, ATOL);
    CHECK_OK(ab_rope_table(&p, 1, pos, 1, co, si));
    for (i = 0; i < 8; i++) {
      double a = ang[il ? i / 2 : i % 4];
      CHECK_CLOSE(co[i], cos(a), RTOL, ATOL);
      CHECK_CLOSE(si[i], sin(a), RTOL, ATOL);
    }
  }
  return 0;
}

TEST(rope_xpos)
{
  /* Worked values use torchscale's centring (scale exponent p - 2). */
  static const double wq[4][4] = {
      {1.004906, 2.009811, 3.005182, 4.00691},
      {-1.145439, 1.926784, 2.962406, 4.033279},
      {-2.234742, 0.07700375, 2.919405, 4.059196},
      {-1.269123, -1.834371, 2.876185, 4.08466}};
  static const double wk[4][4] = {
      {0.4975592, -0.9951183, 1.996551, 1.497413},
      {1.108906, -0.1192746, 1.983188, 1.518614},
      {0.701224, 0.8707955, 1.969602, 1.539697},
      {-0.3547432, 1.063151, 1.955794, 1.560662}};
  struct ab_rope_params p;
  float q[16], k[16], qo[16], ko[16], co[4], si[4];
  double zeta[2], wantq[16], wantk[16], l31 = 0, l20 = 0;
  int64_t pos[4] = {0, 1, 2, 3};
  int t, c;

  for (t = 0; t < 4; t++) {
    q[t * 4 + 0] = 1, q[t * 4 + 1] = 2, q[t * 4 + 2] = 3, q[t * 4 + 3] = 4;
    k[t * 4 + 0] = 0.5f, k[t * 4 + 1] = -1, k[t * 4 + 2] = 2,
              k[t * 4 + 3] = 1.5f;
  }
  zeta[0] = (0 + 0.4 * 4) / (1.4 * 4);
  zeta[1] = (2 + 0.4 * 4) / (1.4 * 4);
  CHECK_CLOSE(zeta[0], 0.2857143, RTOL, 0);
  CHECK_CLOSE(zeta[1], 0.6428571, RTOL, 0);
  ab_rope_params_init(&p);
  p.head_dim = 4;
  p.interleaved = 1;
  p.rope_type = AB_ROPE_XPOS;
  CHECK_OK(apply2(&p, 1, q, 4, 4, pos, 0, qo));
  CHECK_OK(apply2(&p, 1, k, 4, 4, pos, 1, ko));
  /* attnbias does not centre: worked * zeta^(+-2/512) per pair. */
  for (t = 0; t < 4; t++)
    for (c = 0; c < 4; c++) {
      wantq[t * 4 + c] = wq[t][c] * pow(zeta[c / 2], 2.0 / 512);
      wantk[t * 4 + c] = wk[t][c] * pow(zeta[c / 2], -2.0 / 512);
    }
  CHECK_ARRAY(qo, wantq, 16, RTOL, ATOL);
  CHECK_ARRAY(ko, wantk, 16, RTOL, ATOL);
  for (c = 0; c < 4; c++) {
    l31 += (double)qo[12 + c] * ko[4 + c];
    l20 += (double)qo[8 + c] * ko[0 + c];
  }
  CHECK_CLOSE(l31, 10.71849, RTOL, 0);
  CHECK_CLOSE(l20, 10.71849, RTOL, 0);
  /* No table form. */
  CHECK_EQ_I64(ab_rope_table(&p, 1, pos, 4, co, si), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "rope_scaling.rope_type");
  return 0;
}

/* ==== positions, layouts, dtypes ========================================= */

TEST(rope_negative_and_large_positions)
{
  enum { N = 8, D = 64 };
  struct ab_rope_params p;
  float x[N * D], out[N * D];
  double xd[N * D], want[N * D], inv[32];
  int64_t pos[N] = {-1, -7, -300, 0, 12345, 99999, 1000003, -54321};
  int il, t;

  fill_random(x, xd, N * D);
  ab_rope_params_init(&p);
  p.head_dim = D;
  ref_default(inv, D, 10000);
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    CHECK_OK(apply2(&p, 1, x, N, D, pos, 0, out));
    ref_rows(want, xd, N, D, D, il, pos, inv, 1.0);
    for (t = 0; t < N; t++) {
      int big = pos[t] > 10000 || pos[t] < -10000;
      CHECK_ARRAY(out + t * D, want + t * D, D, big ? 1e-4 : RTOL,
                  big ? 1e-5 : ATOL);
    }
  }
  return 0;
}

/* head_dim 600 spans three stack chunks of pairs in the table builders;
 * the multi-axis sections cross the chunk boundaries. */
TEST(rope_wide_head_multi_chunk)
{
  enum { N = 3, D = 600, H = 300 };
  struct ab_rope_params p;
  float *x = malloc(N * D * sizeof *x), *out = malloc(N * D * sizeof *x);
  float *co = malloc(N * D * sizeof *co), *si = malloc(N * D * sizeof *si);
  double *xd = malloc(N * D * sizeof *xd), *want = malloc(N * D * sizeof *xd);
  double inv[H], ang[H];
  int64_t pos[3 * N] = {5, 900, -12, 7, 800, -3, 1, 700, 40};
  int t, j, col, ax;

  CHECK(x && out && co && si && xd && want);
  fill_random(x, xd, N * D);
  ref_default(inv, D, 10000);
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.interleaved = 1;
  p.n_mrope_section = 3;
  p.mrope_section[0] = 100, p.mrope_section[1] = 170, p.mrope_section[2] = 30;
  CHECK_OK(apply2(&p, 1, x, N, D, pos, 0, out));
  CHECK_OK(ab_rope_table(&p, 1, pos, N, co, si));
  for (t = 0; t < N; t++) {
    for (j = 0; j < H; j++) {
      ax = j < 100 ? 0 : j < 270 ? 1 : 2;
      ang[j] = (double)pos[ax * N + t] * inv[j];
    }
    ref_row(want + t * D, xd + t * D, D, D, 1, ang, NULL);
    for (col = 0; col < D; col++) {
      CHECK_CLOSE(co[t * D + col], cos(ang[col / 2]), RTOL, ATOL);
      CHECK_CLOSE(si[t * D + col], sin(ang[col / 2]), RTOL, ATOL);
    }
  }
  CHECK_ARRAY(out, want, N * D, RTOL, ATOL);
  free(x), free(out), free(co), free(si), free(xd), free(want);
  return 0;
}

TEST(rope_layouts_bhsd_bshd)
{
  enum { B = 2, H = 3, S = 5, D = 12 };
  struct ab_rope_params p;
  float xb[B * H * S * D], xs[B * S * H * D], ob[B * H * S * D],
      os[B * S * H * D];
  double xd[B * H * S * D], want[B * H * S * D], inv[6];
  int64_t pos[S] = {4, 0, 9, -2, 31}, sh4[4] = {B, H, S, D},
          sh4s[4] = {B, S, H, D}, sh3[3] = {H, S, D}, sh3s[3] = {S, H, D};
  struct ab_tensor tb, ts;
  int b, h, s, c, il;

  fill_random(xb, xd, B * H * S * D);
  for (b = 0; b < B; b++)
    for (h = 0; h < H; h++)
      for (s = 0; s < S; s++)
        for (c = 0; c < D; c++)
          xs[((b * S + s) * H + h) * D + c] = xb[((b * H + h) * S + s) * D + c];
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rotary_dim = 8;
  ref_default(inv, 8, 10000);
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    CHECK_OK(ab_tensor_init(&tb, xb, AB_DTYPE_F32, 4, sh4));
    CHECK_OK(ab_tensor_init(&ts, xs, AB_DTYPE_F32, 4, sh4s));
    CHECK_OK(ab_rope_apply(&p, 1, &tb, AB_LAYOUT_BHSD, pos, 0, ob));
    CHECK_OK(ab_rope_apply(&p, 1, &ts, AB_LAYOUT_BSHD, pos, 0, os));
    for (b = 0; b < B * H; b++)
      ref_rows(want + b * S * D, xd + b * S * D, S, D, 8, il, pos, inv, 1.0);
    CHECK_ARRAY(ob, want, B * H * S * D, RTOL, ATOL);
    for (b = 0; b < B; b++)
      for (h = 0; h < H; h++)
        for (s = 0; s < S; s++)
          for (c = 0; c < D; c++)
            CHECK(os[((b * S + s) * H + h) * D + c] ==
                  ob[((b * H + h) * S + s) * D + c]);
    /* Rank 3: [H, S, D] and [S, H, D] (batch 1). */
    CHECK_OK(ab_tensor_init(&tb, xb, AB_DTYPE_F32, 3, sh3));
    CHECK_OK(ab_tensor_init(&ts, xs, AB_DTYPE_F32, 3, sh3s));
    CHECK_OK(ab_rope_apply(&p, 1, &tb, AB_LAYOUT_BHSD, pos, 0, ob));
    CHECK_OK(ab_rope_apply(&p, 1, &ts, AB_LAYOUT_BSHD, pos, 0, os));
    CHECK_ARRAY(ob, want, H * S * D, RTOL, ATOL);
    for (h = 0; h < H; h++)
      for (s = 0; s < S; s++)
        for (c = 0; c < D; c++)
          CHECK(os[(s * H + h) * D + c] == ob[(h * S + s) * D + c]);
  }
  return 0;
}

/* x as f16, bf16, f64 and two float32 strided views; the reference uses
 * the values the library sees (inputs rounded to their dtype). */
TEST(rope_strided_and_reduced_dtypes)
{
  enum { S = 7, H = 2, D = 10, N = S * H * D };
  struct ab_rope_params p;
  uint16_t h16[N], b16[N];
  double f64[N], xd[N], want[N], inv[5];
  float big[2 * N], out[N];
  int64_t pos[S] = {0, 1, 2, 50, -8, 700, 3}, sh[3] = {S, H, D};
  struct ab_tensor t;
  int i, dt, s, h, c;

  ab_rope_params_init(&p);
  p.head_dim = D;
  ref_default(inv, D, 10000);
  for (dt = 0; dt < 5; dt++) {
    for (i = 0; i < N; i++) {
      float v = (float)test_uniform(-3, 3);
      h16[i] = ab_f32_to_f16(v);
      b16[i] = ab_f32_to_bf16(v);
      f64[i] = test_uniform(-3, 3);
    }
    switch (dt) {
    case 0:
      CHECK_OK(ab_tensor_init(&t, h16, AB_DTYPE_F16, 3, sh));
      for (i = 0; i < N; i++)
        xd[i] = ab_f16_to_f32(h16[i]);
      break;
    case 1:
      CHECK_OK(ab_tensor_init(&t, b16, AB_DTYPE_BF16, 3, sh));
      for (i = 0; i < N; i++)
        xd[i] = ab_bf16_to_f32(b16[i]);
      break;
    case 2:
      CHECK_OK(ab_tensor_init(&t, f64, AB_DTYPE_F64, 3, sh));
      for (i = 0; i < N; i++)
        xd[i] = (float)f64[i];
      break;
    case 3: /* every other float: channel stride 2 */
    case 4: /* rows padded: token stride 2*H*D, channel stride 1 */
      fill_random(big, NULL, 2 * N);
      CHECK_OK(ab_tensor_init(&t, big, AB_DTYPE_F32, 3, sh));
      if (dt == 3) {
        t.stride[0] = 2 * H * D, t.stride[1] = 2 * D, t.stride[2] = 2;
      } else {
        t.stride[0] = 2 * H * D, t.stride[1] = D, t.stride[2] = 1;
      }
      for (s = 0; s < S; s++)
        for (h = 0; h < H; h++)
          for (c = 0; c < D; c++)
            xd[(s * H + h) * D + c] =
                big[s * t.stride[0] + h * t.stride[1] + c * t.stride[2]];
      break;
    }
    CHECK_OK(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BSHD, pos, 0, out));
    for (s = 0; s < S; s++)
      for (h = 0; h < H; h++)
        ref_rows(want + (s * H + h) * D, xd + (s * H + h) * D, 1, D, D, 0,
                 &pos[s], inv, 1.0);
    CHECK_ARRAY(out, want, N, RTOL, ATOL);
  }
  return 0;
}

TEST(rope_in_place)
{
  enum { H = 3, S = 9, D = 32 };
  struct ab_rope_params p;
  float x[H * S * D], ref[H * S * D];
  int64_t pos[S] = {0, 1, 2, 3, 4, 5, 6, 7, 1 << 20}, sh[3] = {H, S, D};
  struct ab_tensor t;
  int i;

  fill_random(x, NULL, H * S * D);
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rotary_dim = 24;
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 3, sh));
  CHECK_OK(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, ref));
  CHECK_OK(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, x));
  for (i = 0; i < H * S * D; i++)
    CHECK(x[i] == ref[i]);
  return 0;
}

/* DeepSeek-V2/V3 as their own code writes it: a head is [q_nope | q_pe];
 * q_pe, viewed as complex numbers (adjacent channel pairs), is multiplied by
 * e^(i*pos*inv_freq) and the two parts are concatenated again.  Written
 * here from that description, not from ref_row, so that rotary_offset is
 * checked against the model and not against attnbias's own pairing code. */
static void ref_deepseek_row(double *out, const double *x, int64_t nope,
                             int64_t rope, double pos, const double *inv)
{
  int64_t j;

  for (j = 0; j < nope; j++)
    out[j] = x[j];
  for (j = 0; j < rope / 2; j++) {
    double re = x[nope + 2 * j], im = x[nope + 2 * j + 1];
    double c = cos(pos * inv[j]), s = sin(pos * inv[j]);
    out[nope + 2 * j] = re * c - im * s;
    out[nope + 2 * j + 1] = re * s + im * c;
  }
}

TEST(rope_rotary_offset_deepseek)
{
  /* DeepSeek-V2-Lite's rope part in miniature: YaRN factor 40 over 4096
   * with mscale == mscale_all_dim (attention factor 1), 6 channels without
   * RoPE before 8 with it. */
  enum { S = 5, H = 3, NOPE = 6, ROPE = 8, D = NOPE + ROPE, N = S * H * D };
  struct ab_rope_params p;
  float x[N], out[N], inplace[N];
  uint16_t b16[N];
  double xd[N], want[N], inv[ROPE / 2], att;
  int64_t pos[S] = {0, 1, 7, 4095, 100000};
  int64_t bhsd[3] = {H, S, D}, bshd[3] = {S, H, D};
  struct ab_tensor t;
  int h, s, i;

  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rotary_dim = ROPE;
  p.rotary_offset = NOPE;
  p.interleaved = 1;
  p.rope_type = AB_ROPE_YARN;
  p.factor = 40;
  p.original_max_position_embeddings = 4096;
  p.mscale = 0.707;
  p.mscale_all_dim = 0.707;
  att = ref_yarn(inv, ROPE, 10000, 40, 4096, 32, 1, 1);
  (void)att; /* DeepSeek's ratio form: mscale(0.707) / mscale(0.707) = 1 */
  fill_random(x, NULL, N);
  for (i = 0; i < N; i++)
    xd[i] = x[i];

  /* [H, S, D] */
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 3, bhsd));
  CHECK_OK(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, out));
  for (h = 0; h < H; h++)
    for (s = 0; s < S; s++)
      ref_deepseek_row(want + (h * S + s) * D, xd + (h * S + s) * D, NOPE,
                       ROPE, (double)pos[s], inv);
  CHECK_ARRAY(out, want, N, RTOL, ATOL);
  /* In place: the q_nope channels stay as they are. */
  memcpy(inplace, x, sizeof x);
  CHECK_OK(ab_tensor_init(&t, inplace, AB_DTYPE_F32, 3, bhsd));
  CHECK_OK(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, inplace));
  CHECK_ARRAY(inplace, want, N, RTOL, ATOL);

  /* [S, H, D] from bfloat16 (the gathered path). */
  for (i = 0; i < N; i++) {
    b16[i] = ab_f32_to_bf16(x[i]);
    xd[i] = ab_bf16_to_f32(b16[i]);
  }
  CHECK_OK(ab_tensor_init(&t, b16, AB_DTYPE_BF16, 3, bshd));
  CHECK_OK(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BSHD, pos, 0, out));
  for (s = 0; s < S; s++)
    for (h = 0; h < H; h++)
      ref_deepseek_row(want + (s * H + h) * D, xd + (s * H + h) * D, NOPE,
                       ROPE, (double)pos[s], inv);
  CHECK_ARRAY(out, want, N, RTOL, ATOL);

  /* The tables do not depend on where the rotated channels sit. */
  {
    float co[S * ROPE], si[S * ROPE], co0[S * ROPE], si0[S * ROPE];
    CHECK_OK(ab_rope_table(&p, 1, pos, S, co, si));
    p.rotary_offset = 0;
    CHECK_OK(ab_rope_table(&p, 1, pos, S, co0, si0));
    CHECK(memcmp(co, co0, sizeof co) == 0 && memcmp(si, si0, sizeof si) == 0);
  }

  /* The rotated channels must fit: offset + rotary_dim <= head_dim. */
  p.rotary_offset = NOPE + 1;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rotary_offset");
  CHECK(strstr(ab_last_error()->msg, "0..6") != NULL);
  p.rotary_offset = -1;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rotary_offset");
  return 0;
}

/* ==== tables ============================================================== */

TEST(rope_tables_layout)
{
  enum { N = 5, D = 16, R = 12 };
  struct ab_rope_params p;
  float co[N * R], si[N * R], x[N * D], out[N * D];
  double inv[6], att, want[N * D];
  int64_t pos[N] = {0, 3, 50, -2, 4096}, r;
  int il, t, col;

  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rotary_dim = R;
  p.rope_type = AB_ROPE_YARN;
  p.factor = 8;
  p.original_max_position_embeddings = 128;
  att = ref_yarn(inv, R, 10000, 8, 128, 32, 1, 1);
  CHECK(att > 1.2);
  CHECK_OK(ab_rope_check(&p, &r, NULL, NULL));
  CHECK_EQ_I64(r, R);
  for (il = 0; il < 2; il++) {
    p.interleaved = il;
    CHECK_OK(ab_rope_table(&p, 1, pos, N, co, si));
    for (t = 0; t < N; t++)
      for (col = 0; col < R; col++) {
        int j = il ? col / 2 : col % (R / 2);
        CHECK_CLOSE(co[t * R + col], att * cos((double)pos[t] * inv[j]), RTOL,
                    ATOL);
        CHECK_CLOSE(si[t * R + col], att * sin((double)pos[t] * inv[j]), RTOL,
                    ATOL);
      }
    /* HF's formula with these tables is what apply computes:
     * half: x*cos + rotate_half(x)*sin; interleaved: x*cos + rot2(x)*sin. */
    fill_random(x, NULL, N * D);
    CHECK_OK(apply2(&p, 1, x, N, D, pos, 0, out));
    for (t = 0; t < N; t++)
      for (col = 0; col < D; col++) {
        const float *xr = x + t * D;
        double rot;
        if (col >= R) {
          want[t * D + col] = xr[col];
          continue;
        }
        if (il)
          rot = col % 2 ? xr[col - 1] : -xr[col + 1];
        else
          rot = col < R / 2 ? -xr[col + R / 2] : xr[col - R / 2];
        want[t * D + col] =
            xr[col] * (double)co[t * R + col] + rot * (double)si[t * R + col];
      }
    CHECK_ARRAY(out, want, N * D, RTOL, ATOL);
  }
  return 0;
}

/* ==== errors ============================================================== */

TEST(rope_errors)
{
  struct ab_rope_params p;
  double inv[8], sf[4] = {1, 1, 1, 1}, lf[4] = {1, 2, 3, -1};
  float x[16], co[16], si[16];
  int64_t pos[4] = {0, 1, 2, 3}, sh[2] = {2, 8};
  struct ab_tensor t;
  ab_job_t *job = (ab_job_t *)&p;

  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rotary_dim = 7;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rotary_dim");
  CHECK(strstr(ab_last_error()->msg, "7") != NULL);
  p.rotary_dim = 10;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rotary_dim");
  CHECK(strstr(ab_last_error()->msg, "10") != NULL);
  p.rotary_dim = -2;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rotary_dim");
  p.rotary_dim = 0;
  p.head_dim = 10;
  p.partial_rotary_factor = 0.5; /* int(10 * 0.5) = 5: odd */
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "partial_rotary_factor");
  p.partial_rotary_factor = 1.5;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "partial_rotary_factor");
  p.partial_rotary_factor = 1;
  p.head_dim = 7; /* the whole head rotates: the odd head_dim is to blame */
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "head_dim");
  p.head_dim = 0;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "head_dim");
  p.head_dim = 8;
  p.rope_theta = 0;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_theta");
  {
    /* Frequencies past float32 (a base far below 1, a factor near 0):
     * angles would be NaN. */
    double fr[4];
    p.rope_theta = 1e-300;
    CHECK_FAILS(ab_rope_inv_freq(&p, 16, fr, NULL), AB_STATUS_OUT_OF_RANGE,
                "rope_theta");
    p.rope_theta = 10000;
    p.rope_type = AB_ROPE_LINEAR;
    p.factor = 1e-320;
    CHECK_FAILS(ab_rope_inv_freq(&p, 16, fr, NULL), AB_STATUS_OUT_OF_RANGE,
                "rope_theta");
    p.factor = 2;
    CHECK_OK(ab_rope_inv_freq(&p, 16, fr, NULL));
    p.rope_type = AB_ROPE_DEFAULT;
  }
  p.rope_type = (enum ab_rope_type)42;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.rope_type");
  CHECK_FAILS(ab_rope_check(NULL, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope");

  /* multi-axis */
  ab_rope_params_init(&p);
  p.head_dim = 16;
  p.n_mrope_section = 3;
  p.mrope_section[0] = 2, p.mrope_section[1] = 3, p.mrope_section[2] = 2;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.mrope_section");
  CHECK(strstr(ab_last_error()->msg, "7") && strstr(ab_last_error()->msg, "8"));
  p.n_mrope_section = 2;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.mrope_section");
  p.n_mrope_section = 3;
  p.mrope_section[2] = 3;
  p.rope_type = AB_ROPE_VISION2D;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.mrope_section");
  p.rope_type = AB_ROPE_DEFAULT;
  CHECK_OK(ab_rope_check(&p, NULL, NULL, NULL));
  p.n_mrope_section = 0;
  p.mrope_interleaved = 1;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.mrope_interleaved");
  ab_rope_params_init(&p);
  p.head_dim = 12;
  p.rotary_dim = 6;
  p.rope_type = AB_ROPE_VISION2D;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rotary_dim");

  /* scaling parameters */
  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_LINEAR;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.factor");
  p.factor = 0;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.factor");
  p.factor = NAN;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.factor");
  p.factor = 2;
  p.rope_type = AB_ROPE_DYNAMIC;
  CHECK_FAILS(ab_rope_inv_freq(&p, 100, inv, NULL), AB_STATUS_INVALID_ARG,
              "max_position_embeddings");
  p.max_position_embeddings = 64;
  CHECK_FAILS(ab_rope_inv_freq(&p, 0, inv, NULL), AB_STATUS_INVALID_ARG,
              "seq_len");
  CHECK_FAILS(ab_rope_table(&p, -5, pos, 4, co, si), AB_STATUS_INVALID_ARG,
              "seq_len");
  p.rotary_dim = 2;
  CHECK_FAILS(ab_rope_inv_freq(&p, 10, inv, NULL), AB_STATUS_INVALID_ARG,
              "rotary_dim");
  p.rotary_dim = 0;
  /* yarn without factor and without lengths */
  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_YARN;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.original_max_position_embeddings");
  p.original_max_position_embeddings = 64;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.factor");
  p.factor = 4;
  p.attention_factor = 0;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.attention_factor");
  p.attention_factor = -1;
  p.rope_theta = 1;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_theta");
  /* llama3 */
  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_LLAMA3;
  p.factor = 8;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.original_max_position_embeddings");
  p.original_max_position_embeddings = 64;
  p.high_freq_factor = 1;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.high_freq_factor");
  /* longrope */
  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_LONGROPE;
  p.original_max_position_embeddings = 64;
  p.max_position_embeddings = 128;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.short_factor");
  p.short_factor = sf;
  p.long_factor = lf;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.long_factor.3");
  lf[3] = 4;
  CHECK_OK(ab_rope_inv_freq(&p, 1, inv, NULL));
  p.max_position_embeddings = 0;
  CHECK_FAILS(ab_rope_inv_freq(&p, 1, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.factor");
  CHECK_FAILS(ab_rope_inv_freq(&p, 0, inv, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.factor");
  p.factor = 2;
  CHECK_FAILS(ab_rope_inv_freq(&p, 0, inv, NULL), AB_STATUS_INVALID_ARG,
              "seq_len");
  /* xpos */
  ab_rope_params_init(&p);
  p.head_dim = 8;
  p.rope_type = AB_ROPE_XPOS;
  p.gamma = 0;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.gamma");
  p.gamma = 0.4;
  p.scale_base = -1;
  CHECK_FAILS(ab_rope_check(&p, NULL, NULL, NULL), AB_STATUS_INVALID_ARG,
              "rope_scaling.scale_base");

  /* apply / table arguments */
  ab_rope_params_init(&p);
  p.head_dim = 8;
  memset(x, 0, sizeof x);
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 2, sh));
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, (enum ab_layout)7, pos, 0, co),
              AB_STATUS_INVALID_ARG, "layout");
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, NULL, 0, co),
              AB_STATUS_INVALID_ARG, "positions");
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, NULL),
              AB_STATUS_INVALID_ARG, "out");
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, x + 1),
              AB_STATUS_INVALID_ARG, "out");
  CHECK_FAILS(ab_rope_apply(&p, 1, NULL, AB_LAYOUT_BHSD, pos, 0, co),
              AB_STATUS_INVALID_ARG, "x");
  p.head_dim = 6;
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, co),
              AB_STATUS_BAD_SHAPE, "x");
  CHECK(strstr(ab_last_error()->msg, "6") && strstr(ab_last_error()->msg, "8"));
  p.head_dim = 8;
  t.ndim = 1;
  t.shape[0] = 8, t.stride[0] = 1;
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, co),
              AB_STATUS_BAD_SHAPE, "x");
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_I32, 2, sh));
  CHECK_FAILS(ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, co),
              AB_STATUS_BAD_DTYPE, "x");
  CHECK_FAILS(ab_rope_apply_job(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, co, &job),
              AB_STATUS_BAD_DTYPE, "x");
  CHECK(job == NULL);
  CHECK_FAILS(ab_rope_table(&p, 1, pos, 0, co, si), AB_STATUS_INVALID_ARG,
              "positions");
  CHECK_FAILS(ab_rope_table(&p, 1, NULL, 2, co, si), AB_STATUS_INVALID_ARG,
              "positions");
  CHECK_FAILS(ab_rope_table(&p, 1, pos, 2, co, NULL), AB_STATUS_INVALID_ARG,
              "sin");
  job = (ab_job_t *)&p;
  CHECK_FAILS(ab_rope_table_job(&p, 1, pos, 2, NULL, si, &job),
              AB_STATUS_INVALID_ARG, "cos");
  CHECK(job == NULL);
  CHECK_FAILS(ab_rope_table_job(&p, 1, pos, 2, co, si, NULL),
              AB_STATUS_INVALID_ARG, "job");
  return 0;
}

/* ==== jobs ================================================================= */

static void shuffle(int64_t *order, int64_t n)
{
  int64_t i;
  for (i = 0; i < n; i++)
    order[i] = i;
  for (i = n - 1; i > 0; i--) {
    int64_t j = test_randint(0, i), tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
}

TEST(rope_jobs_piecewise_shuffled)
{
  enum { B = 2, H = 4, S = 300, D = 64, N = B * H * S * D };
  struct ab_rope_params p;
  float *x = malloc(N * sizeof *x), *one = malloc(N * sizeof *x),
        *pieces = malloc(N * sizeof *x);
  uint16_t *xh = malloc(N * sizeof *xh);
  int64_t sh[4] = {B, H, S, D}, shs[4] = {B, S, H, D}, pos[3 * S],
          order[4096], i, np;
  float *co1 = malloc(S * D * sizeof *co1), *si1 = malloc(S * D * sizeof *si1),
        *co2 = malloc(S * D * sizeof *co2), *si2 = malloc(S * D * sizeof *si2);
  struct ab_tensor t;
  ab_job_t *job;
  size_t f32_scratch = 0;
  int form;

  CHECK(x && one && pieces && xh && co1 && si1 && co2 && si2);
  fill_random(x, NULL, N);
  for (i = 0; i < N; i++)
    xh[i] = ab_f32_to_f16(x[i]);
  for (i = 0; i < 3 * S; i++)
    pos[i] = test_randint(-100, 5000);
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rope_type = AB_ROPE_YARN;
  p.factor = 4;
  p.original_max_position_embeddings = 1024;
  for (form = 0; form < 4; form++) {
    p.interleaved = form & 1;
    if (form < 2)
      CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 4, form ? shs : sh));
    else /* f16 goes through the per-piece scratch */
      CHECK_OK(ab_tensor_init(&t, xh, AB_DTYPE_F16, 4, form == 3 ? shs : sh));
    CHECK_OK(ab_rope_apply(&p, 1, &t,
                           form & 1 ? AB_LAYOUT_BSHD : AB_LAYOUT_BHSD, pos, 0,
                           one));
    memset(pieces, 0xff, N * sizeof *pieces);
    CHECK_OK(ab_rope_apply_job(&p, 1, &t,
                               form & 1 ? AB_LAYOUT_BSHD : AB_LAYOUT_BHSD, pos,
                               0, pieces, &job));
    np = ab_job_pieces(job);
    CHECK(np > 4 && np <= 4096);
    /* Every apply job asks for scratch (a private table block, for a piece
     * that finds a block busy); f16 also for its converted rows. */
    if (form == 0)
      f32_scratch = ab_job_scratch_size(job);
    CHECK(ab_job_scratch_size(job) > 0);
    CHECK((ab_job_scratch_size(job) > f32_scratch) == (form >= 2));
    CHECK(ab_job_flops(job) > 0);
    shuffle(order, np);
    for (i = 0; i < np; i++)
      CHECK_OK(ab_job_run(job, order[i], NULL));
    CHECK_EQ_I64(ab_job_run(job, np, NULL), AB_STATUS_OUT_OF_RANGE);
    ab_job_free(job);
    CHECK(memcmp(one, pieces, N * sizeof *one) == 0);
  }

  /* Table job, multi-axis positions [3, S]. */
  p.n_mrope_section = 3;
  p.mrope_section[0] = 8, p.mrope_section[1] = 12, p.mrope_section[2] = 12;
  p.interleaved = 1;
  CHECK_OK(ab_rope_table(&p, 1, pos, S, co1, si1));
  CHECK_OK(ab_rope_table_job(&p, 1, pos, S, co2, si2, &job));
  np = ab_job_pieces(job);
  CHECK(np > 1);
  shuffle(order, np);
  for (i = 0; i < np; i++)
    CHECK_OK(ab_job_run(job, order[i], NULL));
  ab_job_free(job);
  CHECK(memcmp(co1, co2, S * D * sizeof *co1) == 0);
  CHECK(memcmp(si1, si2, S * D * sizeof *si1) == 0);
  free(x), free(one), free(pieces), free(xh);
  free(co1), free(si1), free(co2), free(si2);
  return 0;
}

/* LongRoPE's factors are doubles end to end: lists that float32 cannot
 * hold, at positions near 4096, where a float32 rounding of a factor
 * (relative 6e-8) would move an angle by about 2e-4 -- twenty times the
 * tolerance (checked here, so the comparison can fail).  Both lists (the
 * switch at seq_len > original), tables and rotation.  The tables' only
 * errors are float32's: cos and sin rounded, then multiplied by the
 * float32 attention factor -- a few roundings of values near 1, so 2.5e-7
 * absolute (the spec's tolerance is 1e-6 + 1e-5 relative). */
TEST(rope_longrope_factors_in_double_near_4096)
{
  enum { N = 12, D = 16, H = D / 2 };
  static const double sf[H] = {1.0000001, 1.1, 1.23456789, 1.5,
                               2.0000003, 3.3, 4.7, 5.1};
  static const double lf[H] = {1.0000001, 2.2222222, 3.1415926535, 4.4,
                               7.0000007, 9.9, 13.7, 21.1};
  struct ab_rope_params p;
  float co[N * D], si[N * D], x[N * D], out[N * D];
  double xd[N * D], want[N * D], inv[H], ang, att, moved = 0;
  int64_t pos[N], seq_len, t, j;
  int lng;

  fill_random(x, xd, N * D);
  longrope_params(&p, D, sf, lf, 4096, 16384);
  att = sqrt(1.0 + log(4.0) / log(4096.0));
  for (lng = 0; lng < 2; lng++) {
    seq_len = lng ? 4102 : 4096;
    for (t = 0; t < N; t++)
      pos[t] = seq_len - N + t;
    for (j = 0; j < H; j++)
      inv[j] = 1.0 / ((lng ? lf : sf)[j] * pow(10000.0, 2.0 * j / D));
    CHECK_OK(ab_rope_table(&p, seq_len, pos, N, co, si));
    for (t = 0; t < N; t++)
      for (j = 0; j < D; j++) {
        ang = (double)pos[t] * inv[j % H];
        CHECK_CLOSE(co[t * D + j], cos(ang) * att, 0, 2.5e-7);
        CHECK_CLOSE(si[t * D + j], sin(ang) * att, 0, 2.5e-7);
        moved = fmax(moved, fabs(cos((double)pos[t] /
                                     ((double)(float)(lng ? lf : sf)[j % H] *
                                      pow(10000.0, 2.0 * (j % H) / D))) -
                                 cos(ang)));
      }
    CHECK_OK(apply2(&p, seq_len, x, N, D, pos, 0, out));
    ref_rows(want, xd, N, D, D, 0, pos, inv, att);
    CHECK_ARRAY(out, want, N * D, RTOL, ATOL);
  }
  CHECK(moved > 10 * ATOL);
  return 0;
}

/* The job copies what its table needs: positions and LongRoPE's factor
 * lists may change (or be freed) between ab_rope_apply_job and the pieces,
 * which fill the table then. */
TEST(rope_job_outlives_its_inputs)
{
  enum { H = 3, S = 200, D = 16, N = H * S * D };
  struct ab_rope_params p;
  static float x[N], one[N], pieces[N];
  int64_t sh[3] = {H, S, D}, *pos = malloc(S * sizeof *pos), i, np;
  double sf[D / 2], lf[D / 2];
  struct ab_tensor t;
  ab_job_t *job;

  CHECK(pos != NULL);
  fill_random(x, NULL, N);
  for (i = 0; i < S; i++)
    pos[i] = test_randint(0, 3000);
  for (i = 0; i < D / 2; i++) {
    sf[i] = test_uniform(1.0, 2.0);
    lf[i] = test_uniform(2.0, 8.0);
  }
  longrope_params(&p, D, sf, lf, 100, 400);
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 3, sh));
  CHECK_OK(ab_rope_apply(&p, S, &t, AB_LAYOUT_BHSD, pos, 0, one));
  CHECK_OK(ab_rope_apply_job(&p, S, &t, AB_LAYOUT_BHSD, pos, 0, pieces, &job));
  for (i = 0; i < S; i++)
    pos[i] = -1;
  free(pos);
  for (i = 0; i < D / 2; i++)
    sf[i] = lf[i] = 1e9;
  np = ab_job_pieces(job);
  for (i = np - 1; i >= 0; i--) /* last first: blocks built out of order */
    CHECK_OK(ab_job_run(job, i, NULL));
  ab_job_free(job);
  CHECK(memcmp(one, pieces, sizeof one) == 0);
  return 0;
}

/* Threads running the pieces of one job at once.  Each thread takes the
 * pieces of its own head in token order, all released together, so they
 * want the same table blocks at the same moment; xPos makes building a
 * block slow (an exp per pair), so some piece finds a block still being
 * built and uses a private copy.  The result must be bit-identical to one
 * thread's. */
#define CONC_THREADS 4
struct conc_arg {
  ab_job_t *job;
  atomic_int *ready;
  int64_t first, count;
  enum ab_status st;
};

static void *conc_main(void *v)
{
  struct conc_arg *a = v;
  int64_t i;

  a->st = AB_STATUS_OK;
  /* Poll rather than sleep in a barrier: sleepers wake one by one. */
  atomic_fetch_add(a->ready, 1);
  while (atomic_load(a->ready) < CONC_THREADS)
    sched_yield();
  for (i = a->first; i < a->first + a->count && !a->st; i++)
    a->st = ab_job_run(a->job, i, NULL);
  return NULL;
}

TEST(rope_job_concurrent_pieces)
{
  enum { H = CONC_THREADS, S = 2048, D = 128, N = H * S * D };
  float *x = malloc(N * sizeof *x), *one = malloc(N * sizeof *x),
        *many = malloc(N * sizeof *x);
  int64_t sh[3] = {H, S, D}, pos[S], i, np;
  struct conc_arg arg[CONC_THREADS];
  pthread_t th[CONC_THREADS];
  atomic_int ready;
  struct ab_rope_params p;
  struct ab_tensor t;
  ab_job_t *job;
  int rep, k;

  CHECK(x && one && many);
  fill_random(x, NULL, N);
  for (i = 0; i < S; i++)
    pos[i] = i;
  ab_rope_params_init(&p);
  p.head_dim = D;
  p.rope_type = AB_ROPE_XPOS;
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 3, sh));
  CHECK_OK(ab_rope_apply(&p, S, &t, AB_LAYOUT_BHSD, pos, 1, one));
  for (rep = 0; rep < 3; rep++) {
    memset(many, 0, N * sizeof *many);
    CHECK_OK(ab_rope_apply_job(&p, S, &t, AB_LAYOUT_BHSD, pos, 1, many, &job));
    np = ab_job_pieces(job);
    CHECK(np % H == 0); /* pieces do not straddle heads here */
    atomic_init(&ready, 0);
    for (k = 0; k < CONC_THREADS; k++) {
      arg[k].job = job;
      arg[k].ready = &ready;
      arg[k].first = k * (np / H);
      arg[k].count = np / H;
      CHECK(pthread_create(&th[k], NULL, conc_main, &arg[k]) == 0);
    }
    for (k = 0; k < CONC_THREADS; k++)
      pthread_join(th[k], NULL);
    ab_job_free(job);
    for (k = 0; k < CONC_THREADS; k++)
      CHECK_OK(arg[k].st);
    CHECK(memcmp(one, many, N * sizeof *one) == 0);
  }
  free(x), free(one), free(many);
  return 0;
}

/* Every allocation failing in turn gives NO_MEMORY, never a crash. */
TEST(rope_allocation_failure)
{
  struct ab_rope_params p;
  float x[4 * 8], out[4 * 8];
  int64_t pos[4] = {0, 1, 2, 3}, sh[2] = {4, 8};
  struct ab_tensor t;
  int k, st = -1;

  fill_random(x, NULL, 32);
  ab_rope_params_init(&p);
  p.head_dim = 8;
  CHECK_OK(ab_tensor_init(&t, x, AB_DTYPE_F32, 2, sh));
  for (k = 0; k < 10 && st != AB_STATUS_OK; k++) {
    test_alloc_install(k, 0); /* only allocation k fails */
    st = ab_rope_apply(&p, 1, &t, AB_LAYOUT_BHSD, pos, 0, out);
    if (st != AB_STATUS_OK && st != AB_STATUS_NO_MEMORY)
      break;
  }
  test_alloc_remove();
  CHECK_EQ_I64(st, AB_STATUS_OK);
  CHECK(k > 1); /* at least one failure was seen and reported */
  return 0;
}

/* ==== analysis (docs/methods.md#analysis) ================================ */

/* Llama 3.1 (theta 500000, d 128, factor 8, original 8192): every pair's
 * frequencies before and after, the factor, and the band from the
 * wavelength thresholds orig/high = 2048 and orig/low = 8192. */
TEST(rope_pairs_llama3)
{
  struct ab_rope_params p;
  struct ab_rope_pair pr[64];
  struct ab_rope_scaling_info info;
  double want[64];
  int k, kept = 0, interp = 0;

  ab_rope_params_init(&p);
  p.head_dim = 128;
  p.rope_theta = 500000;
  p.rope_type = AB_ROPE_LLAMA3;
  p.factor = 8;
  p.original_max_position_embeddings = 8192;
  CHECK_OK(ab_rope_pairs(&p, 131072, pr, &info));
  ref_llama3(want, 128, 500000, 8, 1, 4, 8192);
  CHECK_EQ_I64(info.rotary_dim, 128);
  CHECK_EQ_I64(info.n_freq, 64);
  CHECK_EQ_I64(info.original_max_position_embeddings, 8192);
  CHECK_CLOSE(info.factor, 8, 0, 0);
  CHECK_CLOSE(info.attention_factor, 1, 0, 0);
  CHECK(isnan(info.yarn_low) && isnan(info.yarn_high));
  for (k = 0; k < 64; k++) {
    double orig = 1.0 / pow(500000.0, 2.0 * k / 128.0), wl = TWO_PI / orig;
    int band = wl < 2048   ? AB_ROPE_BAND_KEPT
               : wl > 8192 ? AB_ROPE_BAND_INTERPOLATED
                           : AB_ROPE_BAND_RAMP;
    CHECK_CLOSE(pr[k].inv_freq_original, orig, 1e-14, 0);
    CHECK_CLOSE(pr[k].inv_freq, want[k], 1e-12, 0);
    CHECK_CLOSE(pr[k].scale, want[k] / orig, 1e-12, 0);
    CHECK_EQ_I64(pr[k].band, band);
    if (band == AB_ROPE_BAND_RAMP) /* 1 - smooth */
      CHECK_CLOSE(pr[k].ramp, 1 - (8192 / wl - 1) / 3, 1e-12, 0);
    else
      CHECK_CLOSE(pr[k].ramp, band == AB_ROPE_BAND_KEPT ? 0 : 1, 0, 0);
    kept += band == AB_ROPE_BAND_KEPT;
    interp += band == AB_ROPE_BAND_INTERPOLATED;
  }
  /* The split Meta's scaling is known for: the fast pairs kept, the slow
   * ones divided by 8, a handful between. */
  CHECK(kept == 29 && interp == 29);
  return 0;
}

/* YaRN's bands against the paper's own rule (Peng et al. 2023, section
 * 3.2): with r = orig / wavelength the rotations a pair makes over the
 * original length, r > beta_fast keeps the pair, r < beta_slow
 * interpolates it, and between it blends.  HF's ramp runs over the pair
 * index (rounded outwards); its ends fall on the same pairs, truncated or
 * not -- except where HF clamps the range's low end at pair 0 (a head
 * whose fastest pair turns fewer than beta_fast times): that pair is kept
 * where the paper would blend it (the third case). */
TEST(rope_pairs_yarn_bands_match_the_paper)
{
  static const int64_t dims[3] = {128, 64, 16};
  static const double thetas[3] = {10000, 1e6, 10000};
  static const double facs[3] = {16, 4, 4};
  static const int64_t origs[3] = {4096, 32768, 64};
  struct ab_rope_params p;
  struct ab_rope_pair pr[64];
  struct ab_rope_scaling_info info;
  double want[64];
  int c, tr, k;

  for (c = 0; c < 3; c++)
    for (tr = 0; tr < 2; tr++) {
      int64_t d = dims[c];
      double att;
      ab_rope_params_init(&p);
      p.head_dim = d;
      p.rope_theta = thetas[c];
      p.rope_type = AB_ROPE_YARN;
      p.factor = facs[c];
      p.original_max_position_embeddings = origs[c];
      p.truncate = tr;
      CHECK_OK(ab_rope_pairs(&p, 1, pr, &info));
      att = ref_yarn(want, d, thetas[c], facs[c], (double)origs[c], 32, 1, tr);
      CHECK_CLOSE(info.attention_factor, att, 1e-15, 0);
      CHECK(info.yarn_low >= 0 && info.yarn_high > info.yarn_low);
      for (k = 0; k < d / 2; k++) {
        double base = 1.0 / pow(thetas[c], 2.0 * k / (double)d);
        double rot = (double)origs[c] / (TWO_PI / base);
        int band = rot > 32  ? AB_ROPE_BAND_KEPT
                   : rot < 1 ? AB_ROPE_BAND_INTERPOLATED
                             : AB_ROPE_BAND_RAMP;
        if (c == 2 && k == 0) /* r = 10.2 < 32, low clamped to 0 */
          band = AB_ROPE_BAND_KEPT;
        if (pr[k].band != band)
          FAIL_AT("case %d truncate %d pair %d: band %d, the paper's %d "
                  "(r = %g)",
                  c, tr, k, pr[k].band, band, rot);
        CHECK_CLOSE(pr[k].inv_freq, want[k], 1e-12, 0);
        /* h = (1 - ramp) theta + ramp theta / s: the factor is the blend. */
        CHECK_CLOSE(pr[k].scale, 1 - pr[k].ramp + pr[k].ramp / facs[c],
                    1e-12, 0);
      }
    }
  return 0;
}

/* Every other type: linear interpolates all, NTK and dynamic blend in
 * log-frequency by 2k/(r-2) of the (effective) factor, LongRoPE by its
 * divisors, default keeps all. */
TEST(rope_pairs_other_types)
{
  struct ab_rope_params p;
  struct ab_rope_pair pr[8];
  struct ab_rope_scaling_info info;
  static const double sf[8] = {1, 1, 1.1, 1.2, 1.5, 2, 3, 4};
  static const double lf[8] = {1, 1.5, 2, 3, 4, 6, 8, 16};
  int k;

  ab_rope_params_init(&p);
  p.head_dim = 16;
  CHECK_OK(ab_rope_pairs(&p, 1, pr, &info));
  for (k = 0; k < 8; k++)
    CHECK(pr[k].band == AB_ROPE_BAND_KEPT && pr[k].scale == 1 &&
          pr[k].ramp == 0);
  CHECK(info.factor == 1 && info.rope_theta == 10000 &&
        info.original_max_position_embeddings == 0);

  p.rope_type = AB_ROPE_LINEAR;
  p.factor = 4;
  CHECK_OK(ab_rope_pairs(&p, 1, pr, NULL));
  for (k = 0; k < 8; k++) {
    CHECK(pr[k].band == AB_ROPE_BAND_INTERPOLATED && pr[k].ramp == 1);
    CHECK_CLOSE(pr[k].scale, 0.25, 1e-15, 0);
  }

  p.rope_type = AB_ROPE_NTK;
  CHECK_OK(ab_rope_pairs(&p, 1, pr, &info));
  CHECK_CLOSE(info.rope_theta, 10000 * pow(4, 16.0 / 14.0), 1e-14, 0);
  for (k = 0; k < 8; k++) {
    CHECK_CLOSE(pr[k].scale, pow(4, -2.0 * k / 14.0), 1e-13, 0);
    CHECK_CLOSE(pr[k].ramp, 2.0 * k / 14.0, 1e-15, 0);
    CHECK_EQ_I64(pr[k].band, k == 0   ? AB_ROPE_BAND_KEPT
                             : k == 7 ? AB_ROPE_BAND_INTERPOLATED
                                      : AB_ROPE_BAND_RAMP);
  }

  /* Dynamic: nothing moves up to the original length; at 128 of 64 with
   * factor 4 the effective factor is 4*2 - 3 = 5. */
  p.rope_type = AB_ROPE_DYNAMIC;
  p.max_position_embeddings = 64;
  CHECK_OK(ab_rope_pairs(&p, 64, pr, &info));
  for (k = 0; k < 8; k++)
    CHECK(pr[k].band == AB_ROPE_BAND_KEPT && pr[k].scale == 1);
  CHECK_CLOSE(info.factor, 1, 0, 0);
  CHECK_OK(ab_rope_pairs(&p, 128, pr, &info));
  CHECK_CLOSE(info.factor, 5, 1e-15, 0);
  CHECK_CLOSE(info.rope_theta, 10000 * pow(5, 16.0 / 14.0), 1e-14, 0);
  for (k = 0; k < 8; k++)
    CHECK_CLOSE(pr[k].scale, pow(5, -2.0 * k / 14.0), 1e-13, 0);

  longrope_params(&p, 16, sf, lf, 64, 256);
  CHECK_OK(ab_rope_pairs(&p, 100, pr, &info));
  CHECK_CLOSE(info.factor, 4, 0, 0);
  for (k = 0; k < 8; k++) {
    CHECK_CLOSE(pr[k].scale, 1 / lf[k], 1e-15, 0);
    CHECK_CLOSE(pr[k].ramp, k == 0 ? 0 : log(lf[k]) / log(4), 1e-15, 0);
  }
  CHECK(pr[0].band == AB_ROPE_BAND_KEPT && pr[2].band == AB_ROPE_BAND_RAMP &&
        pr[4].band == AB_ROPE_BAND_INTERPOLATED &&
        pr[7].band == AB_ROPE_BAND_INTERPOLATED);
  CHECK_OK(ab_rope_pairs(&p, 64, pr, NULL)); /* the short list */
  CHECK_CLOSE(pr[3].scale, 1 / 1.2, 1e-15, 0);

  /* Errors are ab_rope_inv_freq's. */
  ab_rope_params_init(&p);
  p.head_dim = 7;
  CHECK_FAILS(ab_rope_pairs(&p, 1, pr, NULL), AB_STATUS_INVALID_ARG,
              "head_dim");
  return 0;
}

/* RoFormer's bound, written from its definition with each partial sum
 * formed afresh (quadratic), and the mean cosine. */
static void ref_decay(const double *inv, int64_t P, double r, double *bound,
                      double *mean)
{
  double sum = 0, mc = 0;
  int64_t j, k;

  for (j = 1; j <= P; j++) {
    double re = 0, im = 0;
    for (k = 0; k < j; k++) {
      re += cos(r * inv[k]);
      im += sin(r * inv[k]);
    }
    sum += sqrt(re * re + im * im);
  }
  for (k = 0; k < P; k++)
    mc += cos(r * inv[k]);
  *bound = sum / (double)P;
  *mean = mc / (double)P;
}

TEST(rope_decay_matches_its_definition)
{
  double inv[64], r[7] = {0, 1, 2, 10, 100, 1000, 65535.5};
  double bound[7], mean[7], b2[7], m2[7], wb, wm;
  ab_job_t *job = NULL;
  int i;

  ref_default(inv, 128, 10000);
  CHECK_OK(ab_rope_decay(inv, 64, r, 7, bound, mean));
  for (i = 0; i < 7; i++) {
    ref_decay(inv, 64, r[i], &wb, &wm);
    CHECK_CLOSE(bound[i], wb, 1e-12, 1e-14);
    CHECK_CLOSE(mean[i], wm, 1e-12, 1e-14);
  }
  /* At distance 0 every partial sum is j: the bound is (P+1)/2. */
  CHECK_CLOSE(bound[0], 32.5, 1e-15, 0);
  CHECK_CLOSE(mean[0], 1, 1e-15, 0);
  /* It decays (RoFormer's figure 2): far below its start at 1000. */
  CHECK(bound[5] < 0.25 * bound[0]);

  /* The job, pieces in reverse, one output only. */
  CHECK_OK(ab_rope_decay_job(inv, 64, r, 7, b2, NULL, &job));
  CHECK(ab_job_pieces(job) >= 1 && ab_job_flops(job) > 0);
  for (i = (int)ab_job_pieces(job) - 1; i >= 0; i--)
    CHECK_OK(ab_job_run(job, i, NULL));
  ab_job_free(job);
  CHECK_OK(ab_rope_decay_job(inv, 64, r, 7, NULL, m2, &job));
  CHECK_OK(ab_job_run_all(job));
  ab_job_free(job);
  for (i = 0; i < 7; i++)
    CHECK(b2[i] == bound[i] && m2[i] == mean[i]);

  CHECK_FAILS(ab_rope_decay(inv, 0, r, 7, bound, mean), AB_STATUS_INVALID_ARG,
              "inv_freq");
  CHECK_FAILS(ab_rope_decay(inv, 64, r, 0, bound, mean),
              AB_STATUS_INVALID_ARG, "r");
  CHECK_FAILS(ab_rope_decay(inv, 64, r, 7, NULL, NULL), AB_STATUS_INVALID_ARG,
              "bound");
  r[3] = NAN;
  CHECK_FAILS(ab_rope_decay_job(inv, 64, r, 7, bound, mean, &job),
              AB_STATUS_INVALID_ARG, "r");
  CHECK(job == NULL);
  return 0;
}

/* ==== SIMD kernels vs the reference ======================================= */

/* Every ISA this CPU runs: cos/sin of random, boundary and huge angles
 * (huge ones take libm, NaN stays NaN), within one float rounding. */
TEST(rope_parity_sincos)
{
  const struct ab__kernels *ref = ab__kernels_for("ref");
  const char *const *isa;
  enum { N = 203 };
  double th[N];
  float c0[N], s0[N], c1[N], s1[N];
  const float sentinel = 12345.0f;
  int64_t i, len;
  int tested = 0;

  CHECK(ref != NULL);
  for (i = 0; i < N; i++) {
    switch (i % 7) {
    case 0: th[i] = test_uniform(-4, 4); break;
    case 1: th[i] = test_uniform(-1e4, 1e4); break;
    case 2: th[i] = (double)test_randint(-200, 200) * TWO_PI / 8; break;
    case 3: th[i] = test_uniform(-1e8, 1e8); break;
    case 4: th[i] = (double)test_randint(-1000000, 1000000) * 0.0001; break;
    case 5: th[i] = test_uniform(1e9, 1e12) * (i % 2 ? -1 : 1); break;
    default: th[i] = (double)test_randint(0, 1 << 20); break;
    }
  }
  th[10] = NAN;
  th[11] = 0.0;
  th[12] = -0.0;
  th[13] = TWO_PI / 8;
  th[14] = -TWO_PI / 8;
  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    if (!k)
      continue;
    tested++;
    for (len = 0; len <= N; len += len < 20 ? 1 : 61) {
      int64_t n = len < N ? len : N;
      for (i = 0; i < N; i++)
        c1[i] = sentinel;
      ref->rope.sincos(c0, s0, th, n);
      k->rope.sincos(c1, s1, th, n);
      for (i = 0; i < n; i++) {
        if (isnan(th[i])) {
          CHECK(isnan(c1[i]) && isnan(s1[i]));
          continue;
        }
        if (fabs(c1[i] - c0[i]) > 1.2e-7 || fabs(s1[i] - s0[i]) > 1.2e-7)
          FAIL_AT("%s sincos(%.17g) = (%.9g, %.9g), ref (%.9g, %.9g)", *isa,
                  th[i], (double)c1[i], (double)s1[i], (double)c0[i],
                  (double)s0[i]);
      }
      if (n < N) /* nothing written past n */
        CHECK(memcmp(&c1[n], &sentinel, sizeof sentinel) == 0);
    }
  }
  CHECK(tested >= 1);
  return 0;
}

/* Rows of every shape class: one pair, odd pair counts, tails below one
 * vector, passthrough channels, strided rows, a shared table row, in
 * place, streaming on and off with aligned and unaligned outputs. */
TEST(rope_parity_rotate_rows)
{
  const struct ab__kernels *ref = ab__kernels_for("ref");
  static const int64_t hs[] = {1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64};
  static const int64_t extra[] = {0, 1, 5, 20};
  enum { MAXR = 5, MAXD = 160, LDMAX = MAXD + 19 };
  float *x = aligned_alloc(64, 64 * 48 * 4), *cs = aligned_alloc(64, 64 * 48 * 4);
  float *o0 = aligned_alloc(64, 64 * 48 * 4), *o1 = aligned_alloc(64, 64 * 48 * 4);
  const char *const *isa;
  int tested = 0;

  CHECK(ref && x && cs && o0 && o1);
  fill_random(x, NULL, MAXR * LDMAX);
  fill_random(cs, NULL, MAXR * 2 * 64);
  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *k = ab__kernels_for(*isa);
    size_t hi, ei;
    if (!k || strcmp(*isa, "ref") == 0)
      continue;
    tested++;
    for (hi = 0; hi < sizeof hs / sizeof hs[0]; hi++)
      for (ei = 0; ei < sizeof extra / sizeof extra[0]; ei++) {
        int64_t h = hs[hi], dim = 2 * h + extra[ei], rows, i, c;
        int v;
        for (v = 0; v < 32; v++) {
          int il = v & 1, nt = (v >> 1) & 1, shared = (v >> 2) & 1;
          int strided = (v >> 3) & 1, unaligned = (v >> 4) & 1;
          int64_t ldx = dim + (strided ? 19 : 0), ldcs = shared ? 0 : 2 * h;
          int64_t off = unaligned ? 1 : 0;
          rows = 1 + (v % 5);
          memset(o0, 0, 64 * 48 * 4);
          memset(o1, 0, 64 * 48 * 4);
          ref->rope.rotate_rows(o0 + off, dim, x, ldx, cs, ldcs, rows, h, dim,
                                il, nt);
          k->rope.rotate_rows(o1 + off, dim, x, ldx, cs, ldcs, rows, h, dim,
                              il, nt);
          for (i = 0; i < rows * dim + 2 * off + 8; i++) {
            double d = fabs((double)o1[i] - o0[i]);
            if (d > 1e-6 + 1e-6 * fabs(o0[i]) ||
                (i - off >= 0 && (i - off) % dim >= 2 * h && o1[i] != o0[i]))
              FAIL_AT("%s h=%lld dim=%lld rows=%lld il=%d nt=%d shared=%d "
                      "strided=%d off=%lld: [%lld] %.9g vs ref %.9g",
                      *isa, (long long)h, (long long)dim, (long long)rows, il,
                      nt, shared, strided, (long long)off, (long long)i,
                      (double)o1[i], (double)o0[i]);
          }
          /* In place: x rows copied to o1 and rotated there. */
          for (i = 0; i < rows; i++)
            for (c = 0; c < dim; c++)
              o1[i * dim + c] = x[i * ldx + c];
          k->rope.rotate_rows(o1, dim, o1, dim, cs, ldcs, rows, h, dim, il,
                              nt);
          for (i = 0; i < rows * dim; i++)
            if (fabs((double)o1[i] - o0[i + off]) >
                1e-6 + 1e-6 * fabs(o0[i + off]))
              FAIL_AT("%s in place h=%lld dim=%lld il=%d: [%lld] %.9g vs %.9g",
                      *isa, (long long)h, (long long)dim, il, (long long)i,
                      (double)o1[i], (double)o0[i + off]);
        }
      }
  }
  free(x), free(cs), free(o0), free(o1);
  if (!tested)
    fprintf(stderr, "  (no SIMD kernel set runs on this CPU; parity skipped)\n");
  return 0;
}
