/* elem.h: the element types kernels read besides float32 -- bfloat16 and
 * IEEE half -- and their exact widening to float, one element at a time.
 * The library's public converters (ab_bf16_to_f32, ab_f16_to_f32) are these
 * functions; the SIMD kernels widen whole vectors with the same results
 * (V_LOADU_BF16, V_LOADU_F16 in kernels/x86/simd-*.h). */
#ifndef AB_KERNELS_ELEM_H
#define AB_KERNELS_ELEM_H

#include <stdint.h>
#include <string.h>

/* What a kernel input holds.  16-bit inputs are read as they are, widened
 * to float a tile or a vector at a time (every bf16 and half value is a
 * float exactly, so nothing is rounded). */
enum ab__elem {
  AB__ELEM_F32 = 0,
  AB__ELEM_BF16 = 1,
  AB__ELEM_F16 = 2
};

static inline size_t ab__elem_size(enum ab__elem e)
{
  return e == AB__ELEM_F32 ? 4 : 2;
}

/* bfloat16 is the high half of a float. */
static inline float ab__bf16_to_float(uint16_t h)
{
  uint32_t x = (uint32_t)h << 16;
  float f;

  memcpy(&f, &x, 4);
  return f;
}

/* IEEE half -> single: subnormals normalised, inf and NaN kept. */
static inline float ab__half_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  float f;

  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else { /* subnormal: normalise */
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        exp--;
      }
      mant &= 0x3ffu;
      x = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  memcpy(&f, &x, 4);
  return f;
}

/* Element i of a kernel input of type e, as float. */
static inline float ab__elem_load(const void *p, enum ab__elem e, int64_t i)
{
  switch (e) {
  case AB__ELEM_BF16: return ab__bf16_to_float(((const uint16_t *)p)[i]);
  case AB__ELEM_F16: return ab__half_to_float(((const uint16_t *)p)[i]);
  case AB__ELEM_F32: break;
  }
  return ((const float *)p)[i];
}

#endif /* AB_KERNELS_ELEM_H */
