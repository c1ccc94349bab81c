/* test-encoding.c: absolute position encodings against docs/methods.md's worked
 * examples 1-2 and float64 references written here from its formulas. */
#include "ab-internal.h"
#include "attnbias.h"
#include "kernels/kernels.h"
#include "test.h"

#define RTOL 1e-5
#define ATOL 1e-6

/* ---- float64 references (docs/methods.md#sinusoidal) ------------------ */

/* Interleaved (paper): col 2k sin, 2k+1 cos, freq base^(-2k/d). */
static double ref_interleaved(double p, int64_t c, int64_t d, double base)
{
  const int64_t k = c / 2;
  const double a = p * pow(base, -(double)(2 * k) / (double)d);
  return (c % 2) ? cos(a) : sin(a);
}

/* Concat: [sin(all k) | cos(all k)], same frequencies. */
static double ref_concat(double p, int64_t c, int64_t d, double base)
{
  const int64_t half = d / 2, k = c < half ? c : c - half;
  const double a = p * pow(base, -(double)(2 * k) / (double)d);
  return c < half ? sin(a) : cos(a);
}

/* fairseq get_embedding: half = d/2, freq_k = exp(-k ln(base)/(half-1)),
 * [sin | cos], odd d gets a zero column. */
static double ref_t2t(double p, int64_t c, int64_t d, double base)
{
  const int64_t half = d / 2;
  int64_t k;
  double a;

  if (c >= 2 * half)
    return 0.0;
  k = c < half ? c : c - half;
  a = p * exp(-(double)k * log(base) / (double)(half - 1));
  return c < half ? sin(a) : cos(a);
}

static int check_sinusoidal(enum ab_sin_layout layout, int64_t d, double base,
                            const double *pos, int64_t n,
                            double (*ref)(double, int64_t, int64_t, double),
                            double rtol)
{
  struct ab_encoding_params p;
  float *out = malloc((size_t)(n * d) * sizeof *out);
  double *want = malloc((size_t)(n * d) * sizeof *want);
  int64_t t, c;
  int ok;

  ab_encoding_params_init(&p);
  p.layout = layout;
  p.dim = d;
  p.base = base;
  if (!out || !want)
    FAIL_AT("out of memory");
  for (t = 0; t < n; t++)
    for (c = 0; c < d; c++)
      want[t * d + c] = ref(pos[t], c, d, base);
  if (ab_encoding(&p, pos, n, out) != AB_STATUS_OK) {
    free(out);
    free(want);
    FAIL_AT("ab_encoding failed: %s", ab_last_error()->msg);
  }
  ok = test_array_close(__FILE__, __LINE__, "sinusoidal", out, want, n * d,
                        rtol, ATOL);
  free(out);
  free(want);
  return ok ? 0 : 1;
}

/* ---- sinusoids past the recurrence's anchors ---------------------------- */

/* The bound of kernels/enc.h: half a float ulp of a value in [-1, 1] plus
 * the double-precision part, for positions up to 10^6 in magnitude. */
#define SIN_BOUND (0x1p-25 + 0x1p-32)

/* Largest |got - sin or cos of p * w| over a block of rows written by
 * sin_rows (interleaved when cos_off is 0), against float64 evaluated
 * cell by cell. */
static double sin_rows_err(const float *out, int64_t ldo, int64_t cos_off,
                           double p0, double step, const double *freq,
                           int64_t kn, int64_t rows)
{
  double worst = 0;
  int64_t t, k;

  for (t = 0; t < rows; t++)
    for (k = 0; k < kn; k++) {
      const double a = (p0 + (double)t * step) * freq[k];
      const float *row = out + t * ldo;
      double gs = cos_off ? row[k] : row[2 * k];
      double gc = cos_off ? row[cos_off + k] : row[2 * k + 1];
      worst = fmax(worst, fmax(fabs(gs - sin(a)), fabs(gc - cos(a))));
    }
  return worst;
}

/* Every ISA's sin_rows (the SIMD ones advance by rotation between exact
 * anchors every AB__ENC_ANCHOR rows) within the stated bound of float64,
 * at positions up to 10^6 in magnitude, steps 1, 3 and 0.25, both
 * placements, pair counts that end in a partial vector, rows across three
 * anchors; the largest error seen is printed. */
TEST(encoding_sin_rows_error_bound_to_1e6)
{
  static const double starts[] = {0.0, 999800.0, -1e6, 123456.0, 999950.5};
  static const double steps[] = {1.0, 3.0, 0.25, -1.0};
  static const int64_t kns[] = {256, 250, 7};
  enum { ROWS = 3 * AB__ENC_ANCHOR + 5, KMAX = AB__ENC_TILE, LDO = 2 * KMAX + 3 };
  double freq[KMAX];
  float *out = malloc(sizeof(float) * ROWS * LDO);
  const char *const *isa;
  size_t a, b, c;
  int64_t k;

  CHECK(out != NULL);
  for (k = 0; k < KMAX; k++) /* base 10000, d = 512: 1 down to 1e-4 */
    freq[k] = pow(1e4, -2.0 * (double)k / 512.0);
  for (isa = ab__isa_list(); *isa; isa++) {
    const struct ab__kernels *kn = ab__kernels_for(*isa);
    double worst = 0;
    if (!kn)
      continue;
    for (a = 0; a < sizeof starts / sizeof *starts; a++)
      for (b = 0; b < sizeof steps / sizeof *steps; b++)
        for (c = 0; c < sizeof kns / sizeof *kns; c++) {
          const int64_t cos_off = (a + b) % 2 ? kns[c] + 1 : 0;
          double p0 = starts[a], e;
          /* keep every position within +-10^6 */
          if (fabs(p0 + ROWS * steps[b]) > 1e6)
            p0 -= ROWS * steps[b];
          kn->enc.sin_rows(out, LDO, cos_off, p0, steps[b], freq, kns[c],
                           ROWS, (int)(a % 2));
          kn->bias.store_fence();
          e = sin_rows_err(out, LDO, cos_off, p0, steps[b], freq, kns[c],
                           ROWS);
          if (!(e <= SIN_BOUND))
            FAIL_AT("%s: start %g step %g pairs %lld placement %lld: error "
                    "%.3g above the bound %.3g",
                    *isa, p0, steps[b], (long long)kns[c], (long long)cos_off,
                    e, SIN_BOUND);
          worst = fmax(worst, e);
        }
    fprintf(stderr, "  %s: sinusoid rows within %.3g of float64 (bound %.3g)\n",
            *isa, worst, SIN_BOUND);
  }
  free(out);
  return 0;
}

/* The same bound through ab_encoding: a table of 300 rows near position
 * 10^6 in each layout, d = 2 * 300 (pairs past one kernel tile). */
TEST(encoding_sinusoidal_near_1e6_within_bound)
{
  enum { N = 300, D = 600 };
  static const enum ab_sin_layout layouts[3] = {
      AB_SIN_INTERLEAVED, AB_SIN_CONCAT, AB_SIN_T2T};
  double (*refs[3])(double, int64_t, int64_t, double) = {
      ref_interleaved, ref_concat, ref_t2t};
  float *out = malloc(sizeof(float) * N * D);
  double pos[N], worst = 0;
  struct ab_encoding_params p;
  int64_t t, c;
  int l;

  CHECK(out != NULL);
  for (t = 0; t < N; t++)
    pos[t] = 1e6 - (double)(N - t);
  for (l = 0; l < 3; l++) {
    ab_encoding_params_init(&p);
    p.layout = layouts[l];
    p.dim = D;
    CHECK_OK(ab_encoding(&p, pos, N, out));
    for (t = 0; t < N; t++)
      for (c = 0; c < D; c++)
        worst = fmax(worst, fabs((double)out[t * D + c] -
                                 refs[l](pos[t], c, D, 1e4)));
  }
  fprintf(stderr, "  %s: tables near 10^6 within %.3g of float64\n",
          ab_isa_name(), worst);
  CHECK(worst <= SIN_BOUND);
  free(out);
  return 0;
}

/* ---- sinusoidal: worked examples 1a-1d ---------------------------------- */

TEST(encoding_defaults)
{
  struct ab_encoding_params p;
  ab_encoding_params_init(&p);
  CHECK_EQ_I64(p.method, AB_ENC_SINUSOIDAL);
  CHECK_EQ_I64(p.layout, AB_SIN_INTERLEAVED);
  CHECK(p.base == 10000.0);
  CHECK(p.normalize == 1.0);
  CHECK_EQ_I64(p.offset, 0);
  CHECK(p.table == NULL);
  return 0;
}

TEST(sinusoidal_interleaved_worked_1a)
{
  static const double want[4 * 8] = {
      0, 1, 0, 1, 0, 1, 0, 1,
      0.841471, 0.5403023, 0.09983342, 0.9950042, 0.009999833, 0.99995,
      0.0009999998, 0.9999995,
      0.9092974, -0.4161468, 0.1986693, 0.9800666, 0.01999867, 0.9998,
      0.001999999, 0.999998,
      0.14112, -0.9899925, 0.2955202, 0.9553365, 0.0299955, 0.99955,
      0.002999996, 0.9999955};
  const double pos[4] = {0, 1, 2, 3};
  struct ab_encoding_params p;
  float out[32];

  ab_encoding_params_init(&p);
  p.dim = 8;
  CHECK_OK(ab_encoding(&p, pos, 4, out));
  /* worked examples print 7 significant digits */
  CHECK_ARRAY(out, want, 32, 1e-6, 1e-7);
  return 0;
}

TEST(sinusoidal_concat_worked_1b)
{
  static const double want[4 * 8] = {
      0, 0, 0, 0, 1, 1, 1, 1,
      0.841471, 0.09983342, 0.009999833, 0.0009999998, 0.5403023, 0.9950042,
      0.99995, 0.9999995,
      0.9092974, 0.1986693, 0.01999867, 0.001999999, -0.4161468, 0.9800666,
      0.9998, 0.999998,
      0.14112, 0.2955202, 0.0299955, 0.002999996, -0.9899925, 0.9553365,
      0.99955, 0.9999955};
  const double pos[4] = {0, 1, 2, 3};
  struct ab_encoding_params p;
  float out[32];

  ab_encoding_params_init(&p);
  p.dim = 8;
  p.layout = AB_SIN_CONCAT;
  CHECK_OK(ab_encoding(&p, pos, 4, out));
  CHECK_ARRAY(out, want, 32, 1e-6, 1e-7);
  return 0;
}

TEST(sinusoidal_t2t_worked_1c_1d)
{
  static const double want[4 * 8] = {
      0, 0, 0, 0, 1, 1, 1, 1,
      0.841471, 0.04639922, 0.002154433, 0.0001, 0.5403023, 0.998923,
      0.9999977, 1,
      0.9092974, 0.0926985, 0.004308856, 0.0002, -0.4161468, 0.9956942,
      0.9999907, 1,
      0.14112, 0.1387981, 0.006463259, 0.0003, -0.9899925, 0.9903207,
      0.9999791, 1};
  static const double want_odd[7] = {-0.9589243, 0.04997917, 0.0005,
                                     0.2836622, 0.9987503, 0.9999999, 0};
  const double pos[4] = {0, 1, 2, 3}, p5 = 5;
  struct ab_encoding_params p;
  float out[32], odd[7];

  ab_encoding_params_init(&p);
  p.dim = 8;
  p.layout = AB_SIN_T2T;
  CHECK_OK(ab_encoding(&p, pos, 4, out));
  CHECK_ARRAY(out, want, 32, 1e-6, 1e-7);
  p.dim = 7; /* odd: last column zero-padded */
  CHECK_OK(ab_encoding(&p, &p5, 1, odd));
  CHECK_ARRAY(odd, want_odd, 7, 1e-6, 1e-7);
  CHECK(odd[6] == 0.0f);
  return 0;
}

/* Many dims, fractional, negative and large positions (angles in double),
 * other bases, more than one frequency tile (d/2 > 256). */
TEST(sinusoidal_all_layouts_vs_float64)
{
  double pos[40];
  int64_t dims[] = {2, 6, 64, 518, 1030};
  int i, t;

  test_seed(11);
  for (t = 0; t < 40; t++)
    pos[t] = t < 20 ? (double)t : test_uniform(-5e4, 5e4);
  pos[20] = 0.5;
  pos[21] = 999.25; /* diffusion-style fractional timesteps */
  pos[22] = 3.0e9;  /* beyond int32 */
  for (i = 0; i < 5; i++) {
    /* angles up to ~3e9 rad: the float64 reference itself is exact, the
     * float32 output is only rounded once, so the usual tolerance holds */
    if (check_sinusoidal(AB_SIN_INTERLEAVED, dims[i], 10000.0, pos, 40,
                         ref_interleaved, RTOL))
      return 1;
    if (check_sinusoidal(AB_SIN_CONCAT, dims[i], 500.0, pos, 40, ref_concat,
                         RTOL))
      return 1;
    if (dims[i] >= 4 &&
        check_sinusoidal(AB_SIN_T2T, dims[i], 10000.0, pos, 40, ref_t2t,
                         RTOL))
      return 1;
  }
  if (check_sinusoidal(AB_SIN_T2T, 5, 10000.0, pos, 40, ref_t2t, RTOL) ||
      check_sinusoidal(AB_SIN_T2T, 1031, 10000.0, pos, 40, ref_t2t, RTOL))
    return 1;
  return 0;
}

TEST(sinusoidal_rejects_bad_dims)
{
  struct ab_encoding_params p;
  const double pos[1] = {5};
  float out[16] = {0};

  ab_encoding_params_init(&p);
  p.dim = 7; /* worked example 1e exists, but the API requires even dims */
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "dim");
  CHECK(strstr(ab_last_error()->msg, "7") != NULL);
  p.layout = AB_SIN_CONCAT;
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "dim");
  p.layout = AB_SIN_T2T;
  p.dim = 3;
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "dim");
  p.dim = 0;
  p.layout = AB_SIN_INTERLEAVED;
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "dim");
  p.dim = 4;
  p.layout = (enum ab_sin_layout)9;
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "layout");
  p.layout = AB_SIN_INTERLEAVED;
  p.base = -1.0;
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "base");
  p.base = 10000.0;
  {
    const double bad[2] = {1.0, NAN};
    CHECK_EQ_I64(ab_encoding(&p, bad, 2, out), AB_STATUS_INVALID_ARG);
    CHECK_STR(ab_last_error()->arg, "positions.1");
  }
  CHECK_EQ_I64(ab_encoding(&p, pos, 0, out), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "positions");
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, NULL), AB_STATUS_INVALID_ARG);
  CHECK_EQ_I64(ab_encoding(NULL, pos, 1, out), AB_STATUS_INVALID_ARG);
  p.method = (enum ab_enc_method)17;
  CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "method");
  /* failures write nothing */
  for (int i = 0; i < 16; i++)
    CHECK(out[i] == 0.0f);
  return 0;
}

/* ---- learned: worked example 2 ----------------------------------------- */

TEST(learned_worked_2_offsets)
{
  double W[7 * 4]; /* W[p, c] = (4p + c)/10, 7 rows (5 + offset 2) */
  static const double want0[12] = {1.2, 1.3, 1.4, 1.5, 0, 0.1,
                                   0.2, 0.3, 1.6, 1.7, 1.8, 1.9};
  static const double want2[12] = {0.8, 0.9, 1, 1.1, 1.2, 1.3,
                                   1.4, 1.5, 1.6, 1.7, 1.8, 1.9};
  const double pos0[3] = {3, 0, 4}, pos2[3] = {0, 1, 2};
  const int64_t shape5[2] = {5, 4}, shape7[2] = {7, 4};
  struct ab_encoding_params p;
  struct ab_tensor tb;
  float out[12];
  int i;

  for (i = 0; i < 28; i++)
    W[i] = (double)i / 10.0;
  CHECK_OK(ab_tensor_init(&tb, W, AB_DTYPE_F64, 2, shape5));
  ab_encoding_params_init(&p);
  p.method = AB_ENC_LEARNED;
  p.table = &tb;
  p.dim = 4;
  CHECK_OK(ab_encoding(&p, pos0, 3, out));
  CHECK_ARRAY(out, want0, 12, RTOL, ATOL);

  CHECK_OK(ab_tensor_init(&tb, W, AB_DTYPE_F64, 2, shape7));
  p.offset = 2;
  CHECK_OK(ab_encoding(&p, pos2, 3, out));
  CHECK_ARRAY(out, want2, 12, RTOL, ATOL);
  return 0;
}

TEST(learned_out_of_range_and_bad_input)
{
  double W[5 * 4] = {0};
  const int64_t shape[2] = {5, 4};
  struct ab_encoding_params p;
  struct ab_tensor tb;
  float out[12];

  CHECK_OK(ab_tensor_init(&tb, W, AB_DTYPE_F64, 2, shape));
  ab_encoding_params_init(&p);
  p.method = AB_ENC_LEARNED;
  p.table = &tb;
  p.dim = 4;
  {
    const double pos[3] = {0, 5, 1}; /* 5 is one past the last row */
    CHECK_EQ_I64(ab_encoding(&p, pos, 3, out), AB_STATUS_OUT_OF_RANGE);
    CHECK_STR(ab_last_error()->arg, "positions.1");
    CHECK(strstr(ab_last_error()->msg, "5") != NULL);
  }
  {
    const double pos[2] = {3, 1}; /* with offset 2: rows 5 and 3 */
    p.offset = 2;
    CHECK_EQ_I64(ab_encoding(&p, pos, 2, out), AB_STATUS_OUT_OF_RANGE);
    CHECK_STR(ab_last_error()->arg, "positions.0");
    p.offset = 0;
  }
  {
    const double pos[2] = {1, -1};
    CHECK_EQ_I64(ab_encoding(&p, pos, 2, out), AB_STATUS_OUT_OF_RANGE);
    CHECK_STR(ab_last_error()->arg, "positions.1");
  }
  {
    const double pos[2] = {1, 2.5}; /* rows are integral */
    CHECK_EQ_I64(ab_encoding(&p, pos, 2, out), AB_STATUS_INVALID_ARG);
    CHECK_STR(ab_last_error()->arg, "positions.1");
  }
  {
    const double pos[1] = {1e30};
    CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_OUT_OF_RANGE);
    CHECK_STR(ab_last_error()->arg, "positions.0");
  }
  {
    const double pos[1] = {1};
    p.dim = 3;
    CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_BAD_SHAPE);
    CHECK_STR(ab_last_error()->arg, "dim");
    p.dim = 4;
    p.table = NULL;
    CHECK_EQ_I64(ab_encoding(&p, pos, 1, out), AB_STATUS_INVALID_ARG);
    CHECK_STR(ab_last_error()->arg, "table");
  }
  return 0;
}

/* Any float dtype and strides: a float16 table seen transposed. */
TEST(learned_f16_strided_table)
{
  uint16_t raw[4 * 6]; /* storage [dim=4][rows=6]; the view is [6, 4] */
  struct ab_tensor tb;
  struct ab_encoding_params p;
  const double pos[3] = {5, 0, 2};
  double want[12];
  float out[12];
  int r, c;

  for (c = 0; c < 4; c++)
    for (r = 0; r < 6; r++)
      raw[c * 6 + r] = ab_f32_to_f16((float)(r * 0.25 - c * 1.5));
  memset(&tb, 0, sizeof tb);
  tb.data = raw;
  tb.dtype = AB_DTYPE_F16;
  tb.ndim = 2;
  tb.shape[0] = 6;
  tb.shape[1] = 4;
  tb.stride[0] = 1;
  tb.stride[1] = 6;
  for (r = 0; r < 3; r++)
    for (c = 0; c < 4; c++)
      want[r * 4 + c] = pos[r] * 0.25 - c * 1.5; /* exact in f16 */
  ab_encoding_params_init(&p);
  p.method = AB_ENC_LEARNED;
  p.table = &tb;
  p.dim = 4;
  CHECK_OK(ab_encoding(&p, pos, 3, out));
  CHECK_ARRAY(out, want, 12, 0, 0);
  return 0;
}

/* ---- integer and binary ------------------------------------------------- */

TEST(integer_encoding)
{
  const double pos[4] = {0, 3, 7.5, 4.0e9};
  struct ab_encoding_params p;
  double want[4 * 3];
  float out[12];
  int t, c;

  ab_encoding_params_init(&p);
  p.method = AB_ENC_INTEGER;
  p.dim = 3;
  p.normalize = 8.0;
  for (t = 0; t < 4; t++)
    for (c = 0; c < 3; c++)
      want[t * 3 + c] = pos[t] / 8.0;
  CHECK_OK(ab_encoding(&p, pos, 4, out));
  CHECK_ARRAY(out, want, 12, RTOL, ATOL);
  p.normalize = 0.0;
  CHECK_EQ_I64(ab_encoding(&p, pos, 4, out), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "normalize");
  return 0;
}

TEST(binary_encoding)
{
  /* 2^40 + 5 exceeds int32; bit c of each position, LSB first */
  const double pos[4] = {0, 5, 12, 1099511627781.0};
  struct ab_encoding_params p;
  double want[4 * 70];
  float out[4 * 70];
  int t, c;

  ab_encoding_params_init(&p);
  p.method = AB_ENC_BINARY;
  p.dim = 70; /* past 64 bits: zeros */
  for (t = 0; t < 4; t++) {
    double v = pos[t];
    for (c = 0; c < 70; c++) { /* repeated halving: independent of shifts */
      want[t * 70 + c] = fmod(v, 2.0);
      v = floor(v / 2.0);
    }
  }
  CHECK_OK(ab_encoding(&p, pos, 4, out));
  CHECK_ARRAY(out, want, 4 * 70, 0, 0);
  CHECK(out[70 + 0] == 1.0f && out[70 + 1] == 0.0f && out[70 + 2] == 1.0f);
  CHECK(out[3 * 70 + 40] == 1.0f);
  {
    const double neg[2] = {1, -3};
    CHECK_EQ_I64(ab_encoding(&p, neg, 2, out), AB_STATUS_OUT_OF_RANGE);
    CHECK_STR(ab_last_error()->arg, "positions.1");
  }
  {
    const double frac[1] = {2.5};
    CHECK_EQ_I64(ab_encoding(&p, frac, 1, out), AB_STATUS_INVALID_ARG);
    CHECK_STR(ab_last_error()->arg, "positions.0");
  }
  return 0;
}

/* ---- encoding_add ------------------------------------------------------- */

TEST(encoding_add_broadcasts)
{
  /* x [2, 3, 4] += enc [3, 4] */
  float x[24], enc[12];
  double want[24];
  int i;

  for (i = 0; i < 12; i++)
    enc[i] = (float)(i * 0.5 - 2.0);
  for (i = 0; i < 24; i++) {
    x[i] = (float)(i * 0.125);
    want[i] = i * 0.125 + ((i % 12) * 0.5 - 2.0);
  }
  CHECK_OK(ab_encoding_add(x, 6, enc, 3, 4));
  CHECK_ARRAY(x, want, 24, 0, 1e-7);
  CHECK_EQ_I64(ab_encoding_add(x, 5, enc, 3, 4), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "x");
  CHECK_EQ_I64(ab_encoding_add(NULL, 6, enc, 3, 4), AB_STATUS_INVALID_ARG);
  CHECK_STR(ab_last_error()->arg, "x");
  CHECK_EQ_I64(ab_encoding_add(x, 6, enc, 3, 0), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "dim");
  return 0;
}

/* Encoding then add equals adding the float64 encoding. */
TEST(encoding_then_add_matches_reference)
{
  const double pos[5] = {0, 1, 2, 3, 4};
  struct ab_encoding_params p;
  float enc[5 * 6], x[3 * 5 * 6];
  double want[3 * 5 * 6];
  int b, t, c;

  ab_encoding_params_init(&p);
  p.dim = 6;
  CHECK_OK(ab_encoding(&p, pos, 5, enc));
  for (b = 0; b < 3; b++)
    for (t = 0; t < 5; t++)
      for (c = 0; c < 6; c++) {
        x[(b * 5 + t) * 6 + c] = (float)b;
        want[(b * 5 + t) * 6 + c] = b + ref_interleaved(pos[t], c, 6, 1e4);
      }
  CHECK_OK(ab_encoding_add(x, 15, enc, 5, 6));
  CHECK_ARRAY(x, want, 90, RTOL, ATOL);
  return 0;
}

/* The job form: pieces in reverse order, with x given as a strided float64
 * view (a transposed buffer), equals x + the float64 reference encoding. */
TEST(encoding_job_pieces_with_strided_x)
{
  enum { B = 3, N = 37, D = 10 };
  static double xbuf[N][B][D]; /* x[b][t][c] lives at xbuf[t][b][c] */
  static float out[B * N * D], enc[N * D];
  static double want[B * N * D], wenc[N * D];
  double pos[N];
  struct ab_encoding_params p;
  struct ab_tensor x = {xbuf, AB_DTYPE_F64, 3, {B, N, D}, {D, B * D, 1}};
  ab_job_t *job = NULL;
  int64_t b, t, c, k;

  ab_encoding_params_init(&p);
  p.dim = D;
  for (t = 0; t < N; t++)
    pos[t] = (double)(3 * t) - 7.5;
  for (b = 0; b < B; b++)
    for (t = 0; t < N; t++)
      for (c = 0; c < D; c++) {
        xbuf[t][b][c] = test_uniform(-1, 1);
        want[(b * N + t) * D + c] =
            (double)(float)xbuf[t][b][c] + ref_interleaved(pos[t], c, D, 1e4);
      }
  for (t = 0; t < N * D; t++)
    wenc[t] = ref_interleaved(pos[t / D], t % D, D, 1e4);

  CHECK_OK(ab_encoding_job(&p, pos, N, &x, out, &job));
  CHECK(ab_job_pieces(job) >= 1);
  for (k = ab_job_pieces(job) - 1; k >= 0; k--)
    CHECK_OK(ab_job_run(job, k, NULL));
  ab_job_free(job);
  CHECK_ARRAY(out, want, B * N * D, 1e-5, 1e-6);

  /* Without x the job writes the encoding itself; 2000 rows of 10 take
   * several pieces. */
  CHECK_OK(ab_encoding_job(&p, pos, N, NULL, enc, &job));
  CHECK_OK(ab_job_run_all(job));
  ab_job_free(job);
  CHECK_ARRAY(enc, wenc, N * D, 1e-5, 1e-6);

  /* x whose trailing dims do not match [n, dim] names x. */
  x.shape[1] = N - 1;
  CHECK_EQ_I64(ab_encoding_job(&p, pos, N, &x, out, &job), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "x");
  CHECK(job == NULL);
  return 0;
}

/* With x, pieces are blocks of positions x blocks of leading rows: a
 * shape whose positions (69 = 64 + 5; sinusoid blocks are multiples of 64
 * rows) and leading rows (5 x 7 = 35 = 4 x 8 + 3, 256 KiB of encoding
 * added to blocks of up to 1 MiB of x) both end in partial blocks, every
 * piece in reverse order, against x + the float64 reference. */
TEST(encoding_job_x_blocks_of_positions_and_batches)
{
  enum { L0 = 5, L1 = 7, N = 69, D = 1024 };
  const int64_t shape[4] = {L0, L1, N, D};
  const int64_t cells = (int64_t)L0 * L1 * N * D;
  float *x = malloc(sizeof(float) * (size_t)cells);
  float *out = malloc(sizeof(float) * (size_t)cells);
  double *want = malloc(sizeof(double) * (size_t)cells);
  double pos[N];
  struct ab_encoding_params p;
  struct ab_tensor tx;
  ab_job_t *job = NULL;
  int64_t i, k;

  CHECK(x && out && want);
  ab_encoding_params_init(&p);
  p.dim = D;
  for (i = 0; i < N; i++)
    pos[i] = (double)(5 * i) + 0.25;
  for (i = 0; i < cells; i++) {
    int64_t t = i / D % N, c = i % D;
    x[i] = (float)test_uniform(-1, 1);
    want[i] = (double)x[i] + ref_interleaved(pos[t], c, D, 1e4);
  }
  CHECK_OK(ab_tensor_init(&tx, x, AB_DTYPE_F32, 4, shape));
  CHECK_OK(ab_encoding_job(&p, pos, N, &tx, out, &job));
  CHECK(ab_job_pieces(job) == 2 * 9);
  for (k = ab_job_pieces(job) - 1; k >= 0; k--)
    CHECK_OK(ab_job_run(job, k, NULL));
  ab_job_free(job);
  CHECK_ARRAY(out, want, cells, 1e-5, 1e-6);
  free(x), free(out), free(want);
  return 0;
}

TEST(encoding_job_many_pieces)
{
  enum { N = 5000, D = 32 };
  static double pos[N], want[N * D];
  static float out[N * D];
  struct ab_encoding_params p;
  ab_job_t *job = NULL;
  int64_t t, k;

  ab_encoding_params_init(&p);
  p.dim = D;
  p.layout = AB_SIN_T2T;
  for (t = 0; t < N; t++)
    pos[t] = (double)t;
  for (t = 0; t < N * D; t++)
    want[t] = ref_t2t(pos[t / D], t % D, D, 1e4);
  CHECK_OK(ab_encoding_job(&p, pos, N, NULL, out, &job));
  CHECK(ab_job_pieces(job) > 1);
  for (k = 0; k < ab_job_pieces(job); k += 2)
    CHECK_OK(ab_job_run(job, k, NULL));
  for (k = 1; k < ab_job_pieces(job); k += 2)
    CHECK_OK(ab_job_run(job, k, NULL));
  ab_job_free(job);
  CHECK_ARRAY(out, want, N * D, 1e-5, 1e-6);
  return 0;
}

/* ---- outputs past the cache (written with streaming stores) ------------ */

/* Max |got - want| / max(1, |want|) over rows 0..3, n/2 and n-1 entirely
 * and `extra` random cells, want from ref (docs/methods.md#sinusoidal). */
static double sampled_err(const float *got, const double *pos, int64_t n,
                          int64_t d, double (*ref)(double, int64_t, int64_t,
                                                   double),
                          const float *x, int extra)
{
  const int64_t rows[6] = {0, 1, 2, 3, n / 2, n - 1};
  double err = 0;
  int64_t i, c;

  for (i = 0; i < 6 + extra; i++) {
    int64_t t = i < 6 ? rows[i] : (int64_t)test_uniform(0, (double)n);
    int64_t c0 = i < 6 ? 0 : (int64_t)test_uniform(0, (double)d);
    int64_t c1 = i < 6 ? d : c0 + 1;

    if (t >= n)
      t = n - 1;
    for (c = c0; c < c1 && c < d; c++) {
      double want = ref(pos[t], c, d, 1e4) + (x ? (double)x[t * d + c] : 0.0);
      err = fmax(err, fabs(want - (double)got[t * d + c]) / fmax(1.0, fabs(want)));
    }
  }
  return err;
}

/* Outputs of 16 MiB and more take the streaming path.  Rows of 2050
 * floats start at every 8-byte offset of a cache line, and one output is
 * itself 4 bytes off: every layout, by one call and as a job (pieces in
 * reverse), against float64; the two must agree bit for bit.  Then the
 * learned table's direct copy, the integer fill, and x + PE with float32 x
 * of the same size. */
TEST(encoding_large_outputs_stream)
{
  enum { N = 2100, D = 2050 };
  const size_t cells = (size_t)N * D;
  static const enum ab_sin_layout layouts[3] = {
      AB_SIN_INTERLEAVED, AB_SIN_CONCAT, AB_SIN_T2T};
  double (*refs[3])(double, int64_t, int64_t, double) = {
      ref_interleaved, ref_concat, ref_t2t};
  float *a = malloc((cells + 1) * sizeof *a), *b = malloc(cells * sizeof *b);
  float *x = malloc(cells * sizeof *x);
  double *pos = malloc(N * sizeof *pos);
  struct ab_encoding_params p;
  struct ab_tensor tt, tx;
  const int64_t tshape[2] = {N, D}, xshape[3] = {1, N, D};
  ab_job_t *job = NULL;
  int64_t t, k;
  size_t i;
  double err;
  int l;

  CHECK(a && b && x && pos);
  CHECK(cells * sizeof(float) >= ((size_t)16 << 20));
  test_seed(5);
  for (t = 0; t < N; t++)
    pos[t] = t < N / 2 ? (double)t : test_uniform(-3e4, 3e4);
  for (l = 0; l < 3; l++) {
    float *one = l == 1 ? a + 1 : a; /* 4 bytes off a line */

    ab_encoding_params_init(&p);
    p.dim = D;
    p.layout = layouts[l];
    CHECK_OK(ab_encoding(&p, pos, N, one));
    err = sampled_err(one, pos, N, D, refs[l], NULL, 20000);
    if (err > 1e-6)
      FAIL_AT("layout %d: ab_encoding off by %g", l, err);
    CHECK_OK(ab_encoding_job(&p, pos, N, NULL, b, &job));
    for (k = ab_job_pieces(job) - 1; k >= 0; k--)
      CHECK_OK(ab_job_run(job, k, NULL));
    ab_job_free(job);
    if (memcmp(one, b, cells * sizeof *b) != 0)
      FAIL_AT("layout %d: the job and the single call differ", l);
  }

  /* learned: row t is table row pos + offset, exactly. */
  for (i = 0; i < cells; i++)
    x[i] = (float)test_uniform(-2, 2);
  for (t = 0; t < N; t++)
    pos[t] = (double)((t * 7) % N) - 3.0;
  CHECK_OK(ab_tensor_init(&tt, x, AB_DTYPE_F32, 2, tshape));
  ab_encoding_params_init(&p);
  p.method = AB_ENC_LEARNED;
  p.dim = D;
  p.table = &tt;
  p.offset = 3;
  CHECK_OK(ab_encoding_job(&p, pos, N, NULL, b, &job));
  CHECK_OK(ab_job_run_all(job));
  ab_job_free(job);
  for (t = 0; t < N; t++)
    if (memcmp(b + t * D, x + ((t * 7) % N) * D, D * sizeof *b) != 0)
      FAIL_AT("learned row %lld is not table row %lld", (long long)t,
              (long long)((t * 7) % N));

  /* integer: every cell of row t is pos / normalize. */
  p.method = AB_ENC_INTEGER;
  p.table = NULL;
  p.normalize = 4.0;
  CHECK_OK(ab_encoding(&p, pos, N, a + 1));
  for (i = 0; i < cells; i++)
    if (a[1 + i] != (float)(pos[i / D] / 4.0))
      FAIL_AT("integer cell %zu is %g", i, (double)a[1 + i]);

  /* x + PE, x float32 [1, N, D]. */
  for (t = 0; t < N; t++)
    pos[t] = (double)t * 0.5;
  CHECK_OK(ab_tensor_init(&tx, x, AB_DTYPE_F32, 3, xshape));
  ab_encoding_params_init(&p);
  p.dim = D;
  CHECK_OK(ab_encoding_job(&p, pos, N, &tx, b, &job));
  for (k = ab_job_pieces(job) - 1; k >= 0; k--)
    CHECK_OK(ab_job_run(job, k, NULL));
  ab_job_free(job);
  err = sampled_err(b, pos, N, D, ref_interleaved, x, 20000);
  if (err > 2e-6)
    FAIL_AT("x + PE off by %g", err);
  free(a), free(b), free(x), free(pos);
  return 0;
}

/* x of another dtype, rows wider than add_row's chunk of 512 columns:
 * float16 x [2, 3, 1030] + PE against float64 of the float16 values. */
TEST(encoding_job_f16_x_wide_rows)
{
  enum { L = 2, N = 3, D = 1030 };
  static uint16_t xh[L * N * D];
  static float out[L * N * D];
  static double want[L * N * D];
  const int64_t shape[3] = {L, N, D};
  const double pos[N] = {0.0, 17.0, 4096.5};
  struct ab_encoding_params p;
  struct ab_tensor tx;
  ab_job_t *job = NULL;
  int64_t i;

  test_seed(9);
  for (i = 0; i < L * N * D; i++) {
    float f = (float)test_uniform(-3, 3);
    xh[i] = ab_f32_to_f16(f);
    want[i] = (double)ab_f16_to_f32(xh[i]) +
              ref_interleaved(pos[i / D % N], i % D, D, 1e4);
  }
  ab_encoding_params_init(&p);
  p.dim = D;
  CHECK_OK(ab_tensor_init(&tx, xh, AB_DTYPE_F16, 3, shape));
  CHECK_OK(ab_encoding_job(&p, pos, N, &tx, out, &job));
  CHECK_OK(ab_job_run_all(job));
  ab_job_free(job);
  CHECK_ARRAY(out, want, L * N * D, 1e-5, 1e-6);
  return 0;
}

/* A dim whose frequencies alone would not fit in memory is refused, naming
 * dim, before anything is allocated or written. */
TEST(encoding_job_huge_dim_refused)
{
  struct ab_encoding_params p;
  const double pos[1] = {1.0};
  float out[1];
  ab_job_t *job = NULL;

  ab_encoding_params_init(&p);
  p.dim = ((int64_t)1 << 62) - 2;
  CHECK_EQ_I64(ab_encoding_job(&p, pos, 1, NULL, out, &job),
               AB_STATUS_OVERFLOW);
  CHECK_STR(ab_last_error()->arg, "dim");
  CHECK(job == NULL);
  return 0;
}
