/* init-avx2.c: installs the AVX2+FMA kernels over the reference table.  Every
 * family with an AVX2 file adds its call here. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "build this file with -mavx2 -mfma (see Makefile)"
#endif
#include "../kernels.h"

void ab__kernels_avx2(struct ab__kernels *k)
{
  k->isa = "avx2";
  ab__rope_kernels_avx2(&k->rope);
  ab__bias_kernels_avx2(&k->bias);
  ab__enc_kernels_avx2(&k->enc);
  ab__attn_kernels_avx2(&k->attn);
}
