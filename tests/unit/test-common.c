/* test-common.c: dtypes, conversions, tensor descriptors, errors, jobs. */
#include "attnbias.h"
#include "test-util.h"
#include "test.h"

TEST(status_strings)
{
  CHECK_STR(ab_status_str(AB_STATUS_OK), "success");
  CHECK_STR(ab_status_str(AB_STATUS_NO_MEMORY), "out of memory");
  CHECK_STR(ab_status_str((enum ab_status)999), "unknown status");
  return 0;
}

TEST(dtype_names_roundtrip)
{
  int d;
  for (d = 0; d < AB_DTYPE_LAST_; d++)
    CHECK_EQ_I64(ab_dtype_parse(ab_dtype_name((enum ab_dtype)d)), d);
  CHECK_EQ_I64(ab_dtype_parse("bf16"), AB_DTYPE_BF16);
  CHECK_EQ_I64(ab_dtype_parse("float8"), -1);
  CHECK_EQ_I64(ab_dtype_size(AB_DTYPE_F16), 2);
  return 0;
}

/* Exact values: f16 has 10 fraction bits, bf16 7. */
TEST(f16_bf16_known_values)
{
  CHECK_EQ_I64(ab_f32_to_f16(1.0f), 0x3c00);
  CHECK_EQ_I64(ab_f32_to_f16(-2.0f), 0xc000);
  CHECK_EQ_I64(ab_f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ_I64(ab_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
  CHECK_EQ_I64(ab_f32_to_f16(5.9604645e-08f), 0x0001); /* smallest subnormal */
  CHECK_EQ_I64(ab_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
  CHECK_EQ_I64(ab_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie to even */
  CHECK_EQ_I64(ab_f32_to_f16(INFINITY), 0x7c00);
  CHECK(isnan(ab_f16_to_f32(ab_f32_to_f16(NAN))));
  CHECK(ab_f16_to_f32(0x0001) == 5.9604645e-08f);
  CHECK(ab_f16_to_f32(0x3555) == 0.33325195f);
  CHECK_EQ_I64(ab_f32_to_bf16(1.0f), 0x3f80);
  CHECK_EQ_I64(ab_f32_to_bf16(3.140625f), 0x4049);
  CHECK(ab_bf16_to_f32(0x4049) == 3.140625f);
  CHECK(isnan(ab_bf16_to_f32(ab_f32_to_bf16(NAN))));
  CHECK(ab_bf16_to_f32(ab_f32_to_bf16(-INFINITY)) == -INFINITY);
  return 0;
}

/* Every f16 value survives f16 -> f32 -> f16. */
TEST(f16_all_values_roundtrip)
{
  uint32_t h;
  for (h = 0; h < 0x10000; h++) {
    float f = ab_f16_to_f32((uint16_t)h);
    if (isnan(f))
      continue;
    if (ab_f32_to_f16(f) != h)
      FAIL_AT("f16 0x%04x -> %g -> 0x%04x", h, (double)f, ab_f32_to_f16(f));
  }
  return 0;
}

TEST(tensor_init_checks_overflow)
{
  struct ab_tensor t;
  int64_t ok[3] = {2, 3, 4}, zero[2] = {2, 0}, big[4] = {1ll << 31, 1ll << 31, 4, 2};
  CHECK_OK(ab_tensor_init(&t, NULL, AB_DTYPE_F32, 3, ok));
  CHECK_EQ_I64(t.stride[0], 12);
  CHECK_EQ_I64(t.stride[2], 1);
  CHECK_EQ_I64(ab_tensor_numel(&t), 24);
  CHECK(ab_tensor_is_contiguous(&t));
  CHECK_EQ_I64(ab_tensor_init(&t, NULL, AB_DTYPE_F32, 2, zero), AB_STATUS_BAD_SHAPE);
  CHECK_STR(ab_last_error()->arg, "shape");
  CHECK_EQ_I64(ab_tensor_init(&t, NULL, AB_DTYPE_F32, 4, big), AB_STATUS_OVERFLOW);
  CHECK_EQ_I64(ab_tensor_init(&t, NULL, AB_DTYPE_F32, 5, ok), AB_STATUS_BAD_SHAPE);
  return 0;
}

TEST(tensor_to_f32_strided_and_converted)
{
  /* A transposed f64 view [3, 2] of a [2, 3] buffer. */
  double buf[6] = {0, 1, 2, 3, 4, 5};
  float out[6];
  struct ab_tensor t = {buf, AB_DTYPE_F64, 2, {3, 2}, {1, 3}};
  CHECK_OK(ab_tensor_to_f32(&t, out));
  CHECK(out[0] == 0 && out[1] == 3 && out[2] == 1 && out[3] == 4 &&
        out[4] == 2 && out[5] == 5);
  return 0;
}

/* Parameter lists the library evaluates in double are read with
 * ab_tensor_to_f64: a float64 value keeps every digit, strided or not, and
 * the narrower dtypes widen exactly. */
TEST(tensor_to_f64_keeps_float64_digits)
{
  /* 1 + 2^-40 and 0.1 have no float32 form; a transposed view again. */
  double buf[6] = {1.0 + 0x1p-40, 0.1, 2, 3, 4, 1e300}, out[6];
  struct ab_tensor t = {buf, AB_DTYPE_F64, 2, {3, 2}, {1, 3}};
  uint16_t h[2] = {ab_f32_to_f16(0.333333f), ab_f32_to_bf16(-7.5f)};
  struct ab_tensor th = {h, AB_DTYPE_F16, 1, {2}, {1}};
  int32_t ints[1] = {3};
  struct ab_tensor ti = {ints, AB_DTYPE_I32, 1, {1}, {1}};

  CHECK_OK(ab_tensor_to_f64(&t, out));
  CHECK(out[0] == 1.0 + 0x1p-40 && out[1] == 3 && out[2] == 0.1 &&
        out[3] == 4 && out[4] == 2 && out[5] == 1e300);
  /* The same buffer row-major [2, 3]: the contiguous path. */
  CHECK_OK(ab_tensor_init(&t, buf, AB_DTYPE_F64, 2, (int64_t[]){2, 3}));
  CHECK_OK(ab_tensor_to_f64(&t, out));
  CHECK(memcmp(out, buf, sizeof buf) == 0);
  CHECK_OK(ab_tensor_to_f64(&th, out));
  CHECK(out[0] == (double)ab_f16_to_f32(h[0]));
  CHECK_OK(ab_tensor_to_f64(&(struct ab_tensor){h + 1, AB_DTYPE_BF16, 1,
                                                {1}, {1}},
                            out));
  CHECK(out[0] == -7.5);
  CHECK_FAILS(ab_tensor_to_f64(&ti, out), AB_STATUS_BAD_DTYPE, "src");
  CHECK_FAILS(ab_tensor_to_f64(&th, NULL), AB_STATUS_INVALID_ARG, "dst");
  return 0;
}

TEST(convert_between_dtypes)
{
  float src[4] = {1.5f, -0.25f, 1e30f, -INFINITY}, back[4];
  uint16_t h[4], b[4];
  CHECK_OK(ab_convert(h, AB_DTYPE_F16, src, AB_DTYPE_F32, 4));
  CHECK_OK(ab_convert(back, AB_DTYPE_F32, h, AB_DTYPE_F16, 4));
  CHECK(back[0] == 1.5f && back[1] == -0.25f && isinf(back[2]) && back[3] == -INFINITY);
  CHECK_OK(ab_convert(b, AB_DTYPE_BF16, src, AB_DTYPE_F32, 4));
  CHECK_OK(ab_convert(back, AB_DTYPE_F32, b, AB_DTYPE_BF16, 4));
  CHECK(back[0] == 1.5f && back[1] == -0.25f);
  CHECK_CLOSE(back[2], 1e30, 1e-2, 0);
  CHECK_EQ_I64(ab_convert(b, AB_DTYPE_I32, src, AB_DTYPE_F32, 4), AB_STATUS_BAD_DTYPE);
  return 0;
}

/* Value of a float16 (bf16 = 0) or bfloat16 (bf16 = 1) bit pattern of
 * positive sign, decoded here by its definition; the infinity pattern
 * stands for the next value past the largest finite one (where rounding
 * to nearest goes to infinity). */
static double half_value(uint32_t h, int bf16)
{
  const uint32_t e = bf16 ? h >> 7 : h >> 10, m = bf16 ? h & 0x7f : h & 0x3ff;
  const int fb = bf16 ? 7 : 10, bias = bf16 ? 127 : 15;

  if (e == 0)
    return ldexp((double)m, 1 - bias - fb);
  return ldexp((double)((1u << fb) + m), (int)e - bias - fb);
}

/* d rounded to nearest-even float16/bfloat16 bits, by a binary search of
 * the ordered positive patterns. */
static uint16_t half_round(double d, int bf16)
{
  const uint32_t inf = bf16 ? 0x7f80 : 0x7c00, sign = 0x8000;
  uint32_t lo = 0, hi = inf, h;
  double a = fabs(d), vl, vh;

  if (isnan(d))
    return 0;
  while (hi - lo > 1) { /* val(lo) <= a < val(hi) */
    uint32_t mid = (lo + hi) / 2;
    if (half_value(mid, bf16) <= a)
      lo = mid;
    else
      hi = mid;
  }
  if (a >= half_value(inf, bf16))
    lo = hi = inf;
  vl = half_value(lo, bf16), vh = half_value(hi, bf16);
  h = a - vl < vh - a ? lo : a - vl > vh - a ? hi : (lo & 1) ? hi : lo;
  return (uint16_t)(h | (signbit(d) ? sign : 0));
}

TEST(convert_f64_rounds_once)
{
  /* Rounding to float32 first makes these ties (and rounds them to even);
   * their own nearest float16 / bfloat16 is the one above. */
  double d[2] = {1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-30};
  uint16_t h, b;
  uint64_t x = 0x2545f4914f6cdd1dull;
  int i, bf;

  CHECK_OK(ab_convert(&h, AB_DTYPE_F16, &d[0], AB_DTYPE_F64, 1));
  CHECK_EQ_I64(h, 0x3c01);
  CHECK_OK(ab_convert(&b, AB_DTYPE_BF16, &d[1], AB_DTYPE_F64, 1));
  CHECK_EQ_I64(b, 0x3f81);
  /* Near every kind of midpoint (normal, subnormal, overflow) and plain
   * random values, against the reference above. */
  for (i = 0; i < 200000; i++)
    for (bf = 0; bf < 2; bf++) {
      uint32_t top = bf ? 0x7f80 : 0x7c00, p;
      double v, mid;
      uint16_t got;
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      p = (uint32_t)(x % top);
      mid = (half_value(p, bf) + half_value(p + 1, bf)) / 2;
      switch (i % 4) {
      case 0: v = mid; break;
      case 1: v = mid * (1.0 + ldexp((double)(x >> 60) - 8.0, -45)); break;
      case 2: v = half_value(p, bf) * (1.0 + ldexp((double)(x >> 40 & 0xffff), -17)); break;
      default: v = ldexp((double)(x >> 11), (int)(x % 64) - 90); break;
      }
      if (x >> 63)
        v = -v;
      CHECK_OK(ab_convert(&got, bf ? AB_DTYPE_BF16 : AB_DTYPE_F16, &v,
                          AB_DTYPE_F64, 1));
      if (got != half_round(v, bf))
        FAIL_AT("%s of %.17g: 0x%04x, want 0x%04x", bf ? "bf16" : "f16", v,
                got, half_round(v, bf));
    }
  return 0;
}

TEST(isa_name_known)
{
  const char *isa = ab_isa_name();
  CHECK(strcmp(isa, "ref") == 0 || strcmp(isa, "avx2") == 0 ||
        strcmp(isa, "avx512") == 0);
  if (getenv("AB_ISA"))
    CHECK_STR(isa, getenv("AB_ISA"));
  return 0;
}

/* The allocator hook sees every allocation; a failing one is returned. */
TEST(allocator_hook_failure_is_returned)
{
  test_alloc_install(0, 1); /* every allocation fails */
  {
    ab_job_t *job = NULL;
    struct ab_bias_params bp;
    struct ab_geometry g;
    ab_bias_params_init(&bp);
    bp.method = AB_BIAS_ALIBI;
    bp.num_heads = 2;
    ab_geometry_init(&g, 4, 4);
    CHECK_EQ_I64(ab_bias_table_job(&bp, &g, (float[32]){0}, NULL, &job),
                 AB_STATUS_NO_MEMORY);
    CHECK(job == NULL);
  }
  test_alloc_remove();
  return 0;
}
