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
