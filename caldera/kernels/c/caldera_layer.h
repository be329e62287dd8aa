/* CALDERA CPU kernels: the argument structs of the three entry points.

   caldera/kernels/native.py mirrors each struct as a ctypes.Structure (same fields, same order); the extension
   module (caldera_module.c) exports every field's offset and size, and native.py refuses a build whose layout
   differs from its mirror. Integers are int64_t / int32_t and pointers void-sized, so the mirror is exact. */
#ifndef CALDERA_LAYER_H
#define CALDERA_LAYER_H

#include <stdint.h>

/* y[b, i] = 1/4 s_i dot(x[b], codes[i]) for rows i in [r0, r1); x (B, 8m), codes (n, m) of `width` bytes,
   scale (1) or (n) (per_row), y (B, n); stages 1 (E8P) or 2 (E8P-RVQ4, second stage scaled by inv_rs) */
typedef struct {
  const float *x;
  float *y;
  const void *codes;
  const int8_t *T; /* 4 x the E8P codebook as int8, (65536, 8) */
  const float *scale;
  int64_t B, n, m, r0, r1;
  int32_t width, stages, per_row;
  float inv_rs;
} caldera_mm_args;

/* y[b, 8j:8j+8] += 1/4 s sum_r t[b, r] w(codes[r, j]) for column blocks j in [j0, j1); t (B, k), codes (k, m),
   y (B, 8m) */
typedef struct {
  const float *t;
  float *y;
  const void *codes;
  const int8_t *T;
  int64_t B, k, m, j0, j1;
  int32_t width, stages;
  float inv_rs, scale;
} caldera_mm_t_args;

/* One CompressedLinear forward, prepared once per layer (the per-call rows B, x, y and work are separate):
   y = unrotate(rotate(x) (s Q)^T + (rotate(x) R^T) L^T [+ (rotate(x) R_ft^T) L_ft^T]) (+ bias).
   su/sv NULL: no RHT; Md/Mn: the K x K Hadamard factors (NULL when K = 1). lr_mode: 0 none, 1 float16 L (n, k)
   R (k, d), 2 float32 L R, 3 codes of L^T (k, n/8) and R (k, d/8) of lrw bytes. */
typedef struct {
  const float *su, *sv, *Md, *Mn;
  const void *qc;
  const float *qs;
  const int8_t *T;
  const void *Lp, *Rp;
  const float *Lft, *Rft, *bias;
  int64_t d, n, Kd, Kn, k, r;
  int32_t qw, q_per_row, lr_mode, lrw, stages;
  float inv_rs, ls, rs;
} caldera_layer_args;

/* Each entry point exists twice: _scalar (portable baseline, any CPU) and, on x86, _avx2 (AVX2 + FMA + F16C,
   chosen at run time by caldera_module.c when the CPU has them). work: B*d + B*k + B*r + max(n, d) floats. */
#define CALDERA_DECLARE(V)                                                                                  \
  void caldera_codes_mm_##V(const caldera_mm_args *a);                                                       \
  void caldera_codes_mm_t_##V(const caldera_mm_t_args *a);                                                   \
  void caldera_layer_fwd_##V(const caldera_layer_args *a, int64_t B, const float *x, float *y, float *work);
CALDERA_DECLARE(scalar)
#if defined(__x86_64__) || defined(__i386__)
#define CALDERA_HAVE_AVX2_VARIANT 1
CALDERA_DECLARE(avx2)
#endif

#endif
