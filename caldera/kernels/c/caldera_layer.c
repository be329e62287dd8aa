/* CALDERA fused CPU layer and E8P code products, built by setup.py into the extension caldera.kernels._caldera_layer
   (with caldera_module.c). This file is compiled twice: as itself, the portable baseline (_scalar entry points, no
   flags beyond the build's), and through caldera_layer_avx2.c with CALDERA_AVX2 = 1, where every function carries
   the target attribute avx2,fma,f16c (_avx2 entry points). caldera_module.c picks the variant at run time from
   __builtin_cpu_supports, so a built wheel runs on any x86-64 CPU. */
#include <math.h>
#include "caldera_layer.h"

#if CALDERA_AVX2
#include <immintrin.h>
#define KFN __attribute__((target("avx2,fma,f16c")))
#define ENTRY(name) name##_avx2
#else
#define KFN
#define ENTRY(name) name##_scalar
#endif

/* w[0:8] = T[c] (int8 -> float, 4 x codeword) */
static inline KFN void dec8(const int8_t *T, uint64_t c, float *w) {
  const int8_t *r = T + 8 * (c & 0xFFFF);
  for (int t = 0; t < 8; t++) w[t] = (float)r[t];
}

#if CALDERA_AVX2
static inline KFN __m256 ld8(const int8_t *T, uint64_t c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(T + 8 * (c & 0xFFFF)))));
}
static inline KFN float hsum(__m256 a) {
  float t[8];
  _mm256_storeu_ps(t, a);
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
#endif

/* dot of x[0:8m] with row `row` of the code matrix, in units of 1/4 */
#define DOT_ROW(NAME, CT)                                                                        \
static KFN float NAME(const float *x, const CT *c, long m, const int8_t *T, int stages, float inv_rs) { \
  long j = 0;                                                                                      \
  float tot = 0.0f;                                                                                \
  DOT_SIMD(CT)                                                                                     \
  for (; j < m; j++) {                                                                             \
    uint64_t v = (uint64_t)c[j];                                                                   \
    float w[8], u[8];                                                                              \
    if (stages == 1) { dec8(T, v, w); }                                                            \
    else { dec8(T, v >> 16, w); dec8(T, v, u); for (int t = 0; t < 8; t++) w[t] += u[t] * inv_rs; } \
    for (int t = 0; t < 8; t++) tot += w[t] * x[8 * j + t];                                        \
  }                                                                                                \
  return tot;                                                                                      \
}

#if CALDERA_AVX2
#define DOT_SIMD(CT)                                                                             \
  if (stages == 1) {                                                                             \
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                                   \
    for (; j + 1 < m; j += 2) {                                                                  \
      a0 = _mm256_fmadd_ps(ld8(T, (uint64_t)c[j]), _mm256_loadu_ps(x + 8 * j), a0);              \
      a1 = _mm256_fmadd_ps(ld8(T, (uint64_t)c[j + 1]), _mm256_loadu_ps(x + 8 * j + 8), a1);      \
    }                                                                                            \
    tot = hsum(_mm256_add_ps(a0, a1));                                                           \
  } else {                                                                                       \
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), ir = _mm256_set1_ps(inv_rs);      \
    for (; j < m; j++) {                                                                         \
      uint64_t v = (uint64_t)c[j];                                                               \
      __m256 xv = _mm256_loadu_ps(x + 8 * j);                                                    \
      a0 = _mm256_fmadd_ps(ld8(T, v >> 16), xv, a0);                                             \
      a1 = _mm256_fmadd_ps(ld8(T, v), xv, a1);                                                   \
    }                                                                                            \
    tot = hsum(_mm256_fmadd_ps(a1, ir, a0));                                                     \
  }
#else
#define DOT_SIMD(CT)
#endif

DOT_ROW(dot_u16, uint16_t)
DOT_ROW(dot_u32, uint32_t)
DOT_ROW(dot_u64, uint64_t)

#if CALDERA_AVX2
/* out[q] = dot of x[0:8m] with rows q = 0..3 of single-stage uint16 codes c (row stride m), in units of 1/4:
   four independent table gathers per x load (more loads in flight than one row's two accumulators) */
static KFN void dot4_u16(const float *x, const uint16_t *c, long m, const int8_t *T, float *out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  const uint16_t *c1 = c + m, *c2 = c + 2 * m, *c3 = c + 3 * m;
  for (long j = 0; j < m; j++) {
    __m256 xv = _mm256_loadu_ps(x + 8 * j);
    a0 = _mm256_fmadd_ps(ld8(T, c[j]), xv, a0);
    a1 = _mm256_fmadd_ps(ld8(T, c1[j]), xv, a1);
    a2 = _mm256_fmadd_ps(ld8(T, c2[j]), xv, a2);
    a3 = _mm256_fmadd_ps(ld8(T, c3[j]), xv, a3);
  }
  out[0] = hsum(a0); out[1] = hsum(a1); out[2] = hsum(a2); out[3] = hsum(a3);
}

/* out[q] = dot of x_q = x + q * 8m (q = 0..3) with ONE row of codes: each code decoded once for four rows of x
   (batches), one accumulator per x row, the arithmetic of dot1_u16 */
static KFN void dotx4_u16(const float *x, const uint16_t *c, long m, const int8_t *T, float *out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  const float *x1 = x + 8 * m, *x2 = x + 16 * m, *x3 = x + 24 * m;
  for (long j = 0; j < m; j++) {
    __m256 w = ld8(T, c[j]);
    a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + 8 * j), a0);
    a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x1 + 8 * j), a1);
    a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x2 + 8 * j), a2);
    a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x3 + 8 * j), a3);
  }
  out[0] = hsum(a0); out[1] = hsum(a1); out[2] = hsum(a2); out[3] = hsum(a3);
}

/* one row with exactly the arithmetic of one row of dot4_u16 (so a row's result does not depend on its group) */
static KFN float dot1_u16(const float *x, const uint16_t *c, long m, const int8_t *T) {
  __m256 a0 = _mm256_setzero_ps();
  for (long j = 0; j < m; j++) a0 = _mm256_fmadd_ps(ld8(T, c[j]), _mm256_loadu_ps(x + 8 * j), a0);
  return hsum(a0);
}
#endif

/* y[b, i] = 1/4 s_i dot(x[b], codes[i]) for rows i in [r0, r1); codes (n, m) of `width` bytes */
static KFN void codes_mm(const float *x, long B, const void *codes, int width, long n, long m, const int8_t *T,
                      int stages, float inv_rs, const float *scale, int per_row, float *y, long r0, long r1) {
#if CALDERA_AVX2
  if (width == 2 && stages == 1 && B >= 4) {  /* E8P backbone, a batch: each code decoded once per 4 x rows */
    for (long i = r0; i < r1; i++) {
      const uint16_t *ci = (const uint16_t *)codes + i * m;
      float s = per_row ? scale[i] : scale[0], d4[4];
      long b = 0;
      for (; b + 4 <= B; b += 4) {
        dotx4_u16(x + b * 8 * m, ci, m, T, d4);
        for (int q = 0; q < 4; q++) y[(b + q) * n + i] = d4[q] * 0.25f * s;
      }
      for (; b < B; b++) y[b * n + i] = dot1_u16(x + b * 8 * m, ci, m, T) * 0.25f * s;
    }
    return;
  }
  if (width == 2 && stages == 1) {  /* E8P backbone: four rows at a time */
    for (; r0 + 4 <= r1; r0 += 4)
      for (long b = 0; b < B; b++) {
        float d4[4];
        dot4_u16(x + b * 8 * m, (const uint16_t *)codes + r0 * m, m, T, d4);
        for (int q = 0; q < 4; q++) y[b * n + r0 + q] = d4[q] * 0.25f * (per_row ? scale[r0 + q] : scale[0]);
      }
    for (; r0 < r1; r0++)
      for (long b = 0; b < B; b++)
        y[b * n + r0] = dot1_u16(x + b * 8 * m, (const uint16_t *)codes + r0 * m, m, T) * 0.25f *
                        (per_row ? scale[r0] : scale[0]);
  }
#endif
  for (long i = r0; i < r1; i++) {
    float s = 0.25f * (per_row ? scale[i] : scale[0]);
    for (long b = 0; b < B; b++) {
      const float *xb = x + b * 8 * m;
      float d;
      if (width == 2) d = dot_u16(xb, (const uint16_t *)codes + i * m, m, T, stages, inv_rs);
      else if (width == 4) d = dot_u32(xb, (const uint32_t *)codes + i * m, m, T, stages, inv_rs);
      else d = dot_u64(xb, (const uint64_t *)codes + i * m, m, T, stages, inv_rs);
      y[b * n + i] = d * s;
    }
  }
}

static inline KFN uint64_t code_at(const void *codes, int width, long idx) {
  if (width == 2) return ((const uint16_t *)codes)[idx];
  if (width == 4) return ((const uint32_t *)codes)[idx];
  return ((const uint64_t *)codes)[idx];
}

/* y[b, 8j:8j+8] += 1/4 s sum_r t[b, r] w(codes[r, j]) for column blocks j in [j0, j1); codes (k, m) */
static KFN void codes_mm_t(const float *t, long B, long k, const void *codes, int width, long m, const int8_t *T,
                        int stages, float inv_rs, float scale, float *y, long j0, long j1) {
  float w[8], u[8];
#if CALDERA_AVX2
  __m256 ir = _mm256_set1_ps(inv_rs), sc = _mm256_set1_ps(0.25f * scale);
  for (; j0 < j1; j0++) {
    for (long b = 0; b < B; b++) {
      __m256 acc = _mm256_setzero_ps();
      for (long r = 0; r < k; r++) {
        uint64_t v = code_at(codes, width, r * m + j0);
        __m256 wv = stages == 1 ? ld8(T, v) : _mm256_fmadd_ps(ld8(T, v), ir, ld8(T, v >> 16));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(t[b * k + r]), wv, acc);
      }
      float *yb = y + b * 8 * m + 8 * j0;
      _mm256_storeu_ps(yb, _mm256_fmadd_ps(acc, sc, _mm256_loadu_ps(yb)));
    }
  }
#endif
  for (long j = j0; j < j1; j++) {
    for (long b = 0; b < B; b++) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (long r = 0; r < k; r++) {
        uint64_t v = code_at(codes, width, r * m + j);
        float tb = t[b * k + r];
        if (stages == 1) { dec8(T, v, w); }
        else { dec8(T, v >> 16, w); dec8(T, v, u); for (int q = 0; q < 8; q++) w[q] += u[q] * inv_rs; }
        for (int q = 0; q < 8; q++) acc[q] += tb * w[q];
      }
      float *yb = y + b * 8 * m + 8 * j;
      for (int q = 0; q < 8; q++) yb[q] += acc[q] * 0.25f * scale;
    }
  }
}

/* ---- fused layer: y = unrotate(rotate(x) (s Q)^T + (rotate(x) R^T) L^T [+ ft part]) (+ bias) ---- */

static inline KFN float h2f(uint16_t h) {
  union { uint32_t u; float f; } r;
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) { float v = (float)m * (1.0f / 16777216.0f); return (h & 0x8000u) ? -v : v; }
  r.u = e == 31 ? (s | 0x7F800000u | (m << 13)) : (s | ((e + 112u) << 23) | (m << 13));
  return r.f;
}

/* dot of a float16 row with x, length len */
static KFN float dot_h(const uint16_t *a, const float *x, long len) {
  long j = 0;
  float tot = 0.0f;
#if CALDERA_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= len; j += 8)
    acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + j))), _mm256_loadu_ps(x + j), acc);
  tot = hsum(acc);
#endif
  for (; j < len; j++) tot += h2f(a[j]) * x[j];
  return tot;
}

static KFN float dot_f(const float *a, const float *x, long len) {
  float tot = 0.0f;
  for (long j = 0; j < len; j++) tot += a[j] * x[j];
  return tot;
}

/* unnormalised Sylvester-Hadamard transform of v[0:P] in place (P a power of two) */
static KFN void fwht(float *v, long P) {
  for (long h = 1; h < P; h <<= 1)
    for (long i = 0; i < P; i += 2 * h)
      for (long j = i; j < i + h; j++) { float a = v[j], b = v[j + h]; v[j] = a + b; v[j + h] = a - b; }
}

/* v (n = K P) <- (M kron H_P / sqrt(P)) v, v viewed as (K, P) row-major; M (K, K) already orthonormal; tmp (n) */
static KFN void had(float *v, long n, long K, const float *M, float *tmp) {
  long P = n / K;
  float sc = 1.0f / sqrtf((float)P);
  for (long a = 0; a < K; a++) fwht(v + a * P, P);
  if (K == 1) { for (long j = 0; j < n; j++) v[j] *= sc; return; }
  for (long a = 0; a < K; a++) {
    float *o = tmp + a * P;
    for (long j = 0; j < P; j++) o[j] = 0.0f;
    for (long b = 0; b < K; b++) {
      float w = M[a * K + b] * sc;
      const float *src = v + b * P;
      for (long j = 0; j < P; j++) o[j] += w * src[j];
    }
  }
  for (long j = 0; j < n; j++) v[j] = tmp[j];
}

/* lr_mode: 0 none, 1 float16 L (n,k) R (k,d), 2 float32 L R, 3 codes of L^T (k, n/8) and R (k, d/8).
   su/sv NULL: no RHT. work: B*d + B*k + B*r + max(n, d) floats. */
static KFN void layer_fwd(long B, const float *x, float *y, float *work, long d, long n, const float *su,
                       const float *sv, long Kd, const float *Md, long Kn, const float *Mn, const void *qc, int qw,
                       const float *qs, int q_per_row, const int8_t *T, int lr_mode, long k, const void *Lp,
                       const void *Rp, int lrw, int stages, float inv_rs, float ls, float rs, long r,
                       const float *Lft, const float *Rft, const float *bias) {
  float *h = work, *t = h + B * d, *tf = t + B * k, *tmp = tf + B * r;
  for (long b = 0; b < B; b++) {
    float *hb = h + b * d;
    const float *xb = x + b * d;
    if (su) { for (long j = 0; j < d; j++) hb[j] = xb[j] * su[j]; had(hb, d, Kd, Md, tmp); }
    else for (long j = 0; j < d; j++) hb[j] = xb[j];
  }
  codes_mm(h, B, qc, qw, n, d / 8, T, 1, 1.0f, qs, q_per_row, y, 0, n);
  if (lr_mode == 1 || lr_mode == 2) {
    for (long b = 0; b < B; b++)
      for (long j = 0; j < k; j++)
        t[b * k + j] = lr_mode == 1 ? dot_h((const uint16_t *)Rp + j * d, h + b * d, d)
                                    : dot_f((const float *)Rp + j * d, h + b * d, d);
    for (long b = 0; b < B; b++)
      for (long i = 0; i < n; i++)
        y[b * n + i] += lr_mode == 1 ? dot_h((const uint16_t *)Lp + i * k, t + b * k, k)
                                     : dot_f((const float *)Lp + i * k, t + b * k, k);
  } else if (lr_mode == 3) {
    codes_mm(h, B, Rp, lrw, k, d / 8, T, stages, inv_rs, &rs, 0, t, 0, k);
    codes_mm_t(t, B, k, Lp, lrw, n / 8, T, stages, inv_rs, ls, y, 0, n / 8);
  }
  if (r > 0) {
    for (long b = 0; b < B; b++)
      for (long j = 0; j < r; j++) tf[b * r + j] = dot_f(Rft + j * d, h + b * d, d);
    for (long b = 0; b < B; b++)
      for (long i = 0; i < n; i++) y[b * n + i] += dot_f(Lft + i * r, tf + b * r, r);
  }
  for (long b = 0; b < B; b++) {
    float *yb = y + b * n;
    if (sv) { had(yb, n, Kn, Mn, tmp); for (long i = 0; i < n; i++) yb[i] *= sv[i]; }
    if (bias) for (long i = 0; i < n; i++) yb[i] += bias[i];
  }
}

/* ---- entry points: one argument struct each (caldera_layer.h) ---- */

KFN void ENTRY(caldera_codes_mm)(const caldera_mm_args *a) {
  codes_mm(a->x, a->B, a->codes, a->width, a->n, a->m, a->T, a->stages, a->inv_rs, a->scale, a->per_row, a->y,
           a->r0, a->r1);
}

KFN void ENTRY(caldera_codes_mm_t)(const caldera_mm_t_args *a) {
  codes_mm_t(a->t, a->B, a->k, a->codes, a->width, a->m, a->T, a->stages, a->inv_rs, a->scale, a->y, a->j0, a->j1);
}

KFN void ENTRY(caldera_layer_fwd)(const caldera_layer_args *a, int64_t B, const float *x, float *y, float *work) {
  layer_fwd(B, x, y, work, a->d, a->n, a->su, a->sv, a->Kd, a->Md, a->Kn, a->Mn, a->qc, a->qw, a->qs, a->q_per_row,
            a->T, a->lr_mode, a->k, a->Lp, a->Rp, a->lrw, a->stages, a->inv_rs, a->ls, a->rs, a->r, a->Lft, a->Rft,
            a->bias);
}
