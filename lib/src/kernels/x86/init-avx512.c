/* init-avx512.c: installs the AVX-512 kernels over the AVX2 table (dispatch
 * applies avx2 first).  Every family with an AVX-512 file adds its call. */
#if !defined(__AVX512F__)
#error "build this file with -mavx512f -mavx512bw -mavx512vl (see Makefile)"
#endif
#include "../kernels.h"

void ab__kernels_avx512(struct ab__kernels *k, int bf16, int bf16_fast)
{
  k->isa = "avx512";
  ab__rope_kernels_avx512(&k->rope);
  ab__bias_kernels_avx512(&k->bias);
  ab__enc_kernels_avx512(&k->enc);
  ab__attn_kernels_avx512(&k->attn);
  if (bf16)
    ab__attn_kernels_avx512bf16(&k->attn, bf16_fast);
}
