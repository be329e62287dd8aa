/* The AVX2 + FMA + F16C variant of caldera_layer.c (its _avx2 entry points), x86 only: the same source with every
   function compiled for target("avx2,fma,f16c"); the extension calls it only on CPUs that have all three. */
#if defined(__x86_64__) || defined(__i386__)
#define CALDERA_AVX2 1
#include "caldera_layer.c"
#else
typedef int caldera_no_avx2_variant; /* ISO C wants a non-empty translation unit */
#endif
