/* ref.c: the scalar reference kernel table -- the oracle every SIMD variant
 * is checked against, and the fallback for any CPU. */
#include "../kernels.h"

void ab__kernels_ref(struct ab__kernels *k)
{
  k->isa = "ref";
  ab__rope_kernels_ref(&k->rope);
  ab__attn_kernels_ref(&k->attn);
  ab__bias_kernels_ref(&k->bias);
  ab__enc_kernels_ref(&k->enc);
}
