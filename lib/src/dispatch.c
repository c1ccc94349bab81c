/* dispatch.c: resolves the kernel table once per process (pthread_once):
 * reference in every slot, then AVX2, then AVX-512 overrides as the CPU
 * and AB_ISA allow.  AB_ISA_DEBUG=1 prints the choice to stderr. */
#include "ab-internal.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#define AB_HAVE_X86 1
#else
#define AB_HAVE_X86 0
#endif

enum { ISA_REF, ISA_AVX2, ISA_AVX512, ISA_COUNT };
static const char *const g_isa_names[ISA_COUNT + 1] = {"ref", "avx2",
                                                      "avx512", NULL};

static struct ab__kernels g_tables[ISA_COUNT];
static int g_usable[ISA_COUNT];
static int g_chosen;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Rank of the ISA named by AB_ISA; unknown or absent means no cap. */
static int isa_cap(void)
{
  const char *want = getenv("AB_ISA");
  int i;

  if (!want || !*want)
    return ISA_COUNT - 1;
  for (i = 0; i < ISA_COUNT; i++)
    if (strcmp(want, g_isa_names[i]) == 0)
      return i;
  fprintf(stderr, "attnbias: AB_ISA=%s is not one of ref, avx2, avx512; "
                  "ignoring it\n", want);
  return ISA_COUNT - 1;
}

static void resolve(void)
{
  int cap = isa_cap(), i;

  ab__kernels_ref(&g_tables[ISA_REF]);
  g_usable[ISA_REF] = 1;
#if AB_HAVE_X86
  if (ab__cpu_has_avx2_fma()) {
    g_tables[ISA_AVX2] = g_tables[ISA_REF];
    ab__kernels_avx2(&g_tables[ISA_AVX2]);
    g_usable[ISA_AVX2] = 1;
  }
  if (ab__cpu_has_avx512()) {
    g_tables[ISA_AVX512] = g_tables[ISA_AVX2];
    ab__kernels_avx512(&g_tables[ISA_AVX512], ab__cpu_has_avx512_bf16(),
                       ab__cpu_bf16_dot_fast());
    g_usable[ISA_AVX512] = 1;
  }
#endif
  g_chosen = ISA_REF;
  for (i = 0; i <= cap; i++)
    if (g_usable[i])
      g_chosen = i;
  if (getenv("AB_ISA_DEBUG"))
    fprintf(stderr, "attnbias: using %s kernels\n", g_tables[g_chosen].isa);
}

const struct ab__kernels *ab__kernels(void)
{
  pthread_once(&g_once, resolve);
  return &g_tables[g_chosen];
}

const struct ab__kernels *ab__kernels_for(const char *isa)
{
  int i;

  pthread_once(&g_once, resolve);
  for (i = 0; i < ISA_COUNT; i++)
    if (isa && strcmp(isa, g_isa_names[i]) == 0)
      return g_usable[i] ? &g_tables[i] : NULL;
  return NULL;
}

const char *const *ab__isa_list(void) { return g_isa_names; }

const char *ab_isa_name(void) { return ab__kernels()->isa; }
