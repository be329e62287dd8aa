"""C kernels for E8P / E8P-RVQ4 code products on CPU through a full 8-bit codebook table, built on first use.

Every E8P codeword is a multiple of ¼ with entries in [−2.75, 2.75], so ``4·codebook`` is exact in int8: a
table ``T8`` (65536, 8) int8 of 512 KiB (:func:`lut_table`; checked equal to the codebook at build). The
products of :mod:`caldera.kernels.cpu` then read per 8-weight code one 8-byte row of ``T8`` (widened to float32
with two AVX2 instructions) and FMA it with 8 entries of ``x``; ``y = ¼ · s · Σ``. E8P-RVQ4 codes
``(c1 << 16) | c2`` take two lookups, ``w(c1) + w(c2)/3.45``. The per-code loop of the Numba kernels could not
be vectorised by Numba's LLVM (scalar FMAs, ≈ 5 ns per code measured); this one runs ≈ 1 ns per code on
this CPU (``kernels/README.md``). The E8P product takes four rows per pass over ``x`` (four independent
table reads in flight); a row's arithmetic does not depend on its group, so a thread split changes no bit.

``caldera_layer_fwd`` (:func:`fused_layer`, :class:`FusedLayer`) is a whole ``CompressedLinear`` forward in one
call: ``x ⊙ S_U`` → ``U_dᵀ`` (in-place fast Walsh–Hadamard transform of the ``2^p`` part, the K × K Hadamard
factor of :mod:`caldera.hadamard` as a small dense product) → E8P product → factor products (float16 read with
F16C, float32, or E8P-RVQ4 codes) and ``L_ft R_ft`` → ``U_n`` → ``⊙ S_V`` → bias. Per decoded token this
replaces ≈ 10 torch calls per layer (two Kronecker-Hadamard transforms, conversions, adds) by one.

The source below is compiled once per machine with the system C compiler (``$CC`` or ``cc``,
``-O3 -march=native``) into ``kernels/`` of the asset cache (``$CALDERA_CACHE`` or ``~/.cache/caldera``; file
named by a hash of the source, flags and CPU model, moved into place atomically) and loaded with :mod:`ctypes`
(which releases the GIL during a call, so :mod:`caldera.kernels.cpu` splits rows over threads as for Numba).
Without a compiler (or with ``$CALDERA_NO_NATIVE`` set), :func:`available` is False and
:mod:`caldera.kernels.cpu` uses its Numba kernels. Without AVX2 the same source compiles to a scalar loop.
Reference: :func:`caldera.kernels.tables.codes_matmul_reference`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from caldera.kernels.fused import Factors

_SRC = r"""
#include <stdint.h>
#include <math.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

/* w[0:8] = T[c] (int8 -> float, 4 x codeword) */
static inline void dec8(const int8_t *T, uint64_t c, float *w) {
  const int8_t *r = T + 8 * (c & 0xFFFF);
  for (int t = 0; t < 8; t++) w[t] = (float)r[t];
}

#ifdef __AVX2__
static inline __m256 ld8(const int8_t *T, uint64_t c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(T + 8 * (c & 0xFFFF)))));
}
static inline float hsum(__m256 a) {
  float t[8];
  _mm256_storeu_ps(t, a);
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
#endif

/* dot of x[0:8m] with row `row` of the code matrix, in units of 1/4 */
#define DOT_ROW(NAME, CT)                                                                        \
static float NAME(const float *x, const CT *c, long m, const int8_t *T, int stages, float inv_rs) { \
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

#ifdef __AVX2__
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

#ifdef __AVX2__
/* out[q] = dot of x[0:8m] with rows q = 0..3 of single-stage uint16 codes c (row stride m), in units of 1/4:
   four independent table gathers per x load (more loads in flight than one row's two accumulators) */
static void dot4_u16(const float *x, const uint16_t *c, long m, const int8_t *T, float *out) {
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
static void dotx4_u16(const float *x, const uint16_t *c, long m, const int8_t *T, float *out) {
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
static float dot1_u16(const float *x, const uint16_t *c, long m, const int8_t *T) {
  __m256 a0 = _mm256_setzero_ps();
  for (long j = 0; j < m; j++) a0 = _mm256_fmadd_ps(ld8(T, c[j]), _mm256_loadu_ps(x + 8 * j), a0);
  return hsum(a0);
}
#endif

/* y[b, i] = 1/4 s_i dot(x[b], codes[i]) for rows i in [r0, r1); codes (n, m) of `width` bytes */
void caldera_codes_mm(const float *x, long B, const void *codes, int width, long n, long m, const int8_t *T,
                      int stages, float inv_rs, const float *scale, int per_row, float *y, long r0, long r1) {
#ifdef __AVX2__
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

static inline uint64_t code_at(const void *codes, int width, long idx) {
  if (width == 2) return ((const uint16_t *)codes)[idx];
  if (width == 4) return ((const uint32_t *)codes)[idx];
  return ((const uint64_t *)codes)[idx];
}

/* y[b, 8j:8j+8] += 1/4 s sum_r t[b, r] w(codes[r, j]) for column blocks j in [j0, j1); codes (k, m) */
void caldera_codes_mm_t(const float *t, long B, long k, const void *codes, int width, long m, const int8_t *T,
                        int stages, float inv_rs, float scale, float *y, long j0, long j1) {
  float w[8], u[8];
#ifdef __AVX2__
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

static inline float h2f(uint16_t h) {
  union { uint32_t u; float f; } r;
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) { float v = (float)m * (1.0f / 16777216.0f); return (h & 0x8000u) ? -v : v; }
  r.u = e == 31 ? (s | 0x7F800000u | (m << 13)) : (s | ((e + 112u) << 23) | (m << 13));
  return r.f;
}

/* dot of a float16 row with x, length len */
static float dot_h(const uint16_t *a, const float *x, long len) {
  long j = 0;
  float tot = 0.0f;
#if defined(__AVX2__) && defined(__F16C__)
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= len; j += 8)
    acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + j))), _mm256_loadu_ps(x + j), acc);
  tot = hsum(acc);
#endif
  for (; j < len; j++) tot += h2f(a[j]) * x[j];
  return tot;
}

static float dot_f(const float *a, const float *x, long len) {
  float tot = 0.0f;
  for (long j = 0; j < len; j++) tot += a[j] * x[j];
  return tot;
}

/* unnormalised Sylvester-Hadamard transform of v[0:P] in place (P a power of two) */
static void fwht(float *v, long P) {
  for (long h = 1; h < P; h <<= 1)
    for (long i = 0; i < P; i += 2 * h)
      for (long j = i; j < i + h; j++) { float a = v[j], b = v[j + h]; v[j] = a + b; v[j + h] = a - b; }
}

/* v (n = K P) <- (M kron H_P / sqrt(P)) v, v viewed as (K, P) row-major; M (K, K) already orthonormal; tmp (n) */
static void had(float *v, long n, long K, const float *M, float *tmp) {
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
void caldera_layer_fwd(long B, const float *x, float *y, float *work, long d, long n, const float *su,
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
  caldera_codes_mm(h, B, qc, qw, n, d / 8, T, 1, 1.0f, qs, q_per_row, y, 0, n);
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
    caldera_codes_mm(h, B, Rp, lrw, k, d / 8, T, stages, inv_rs, &rs, 0, t, 0, k);
    caldera_codes_mm_t(t, B, k, Lp, lrw, n / 8, T, stages, inv_rs, ls, y, 0, n / 8);
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
"""

_FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-std=c99"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor()


def _cache_dir() -> Path:
    from caldera.pipeline.assets import cache_dir

    return Path(cache_dir()) / "kernels"


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or os.environ.get("CALDERA_NO_NATIVE"):  # the switch forces the Numba fallback
        return None
    key = hashlib.sha256("\0".join([_SRC, cc, *_FLAGS, _cpu_model(), platform.machine()]).encode()).hexdigest()
    so = _cache_dir() / f"e8p_lut_{key[:16]}.so"
    if not so.exists():
        try:
            so.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
                src, out = Path(tmp) / "e8p_lut.c", Path(tmp) / "e8p_lut.so"
                src.write_text(_SRC)
                subprocess.run([cc, *_FLAGS, str(src), "-o", str(out)], check=True, capture_output=True, timeout=120)
                os.replace(out, so)  # atomic: a concurrent build writes the same bytes
        except (OSError, subprocess.SubprocessError):
            return None
    lib = ctypes.CDLL(str(so))
    p, i, f = ctypes.c_void_p, ctypes.c_long, ctypes.c_float
    ci = ctypes.c_int
    lib.caldera_codes_mm.argtypes = [p, i, p, ci, i, i, p, ci, f, p, ci, p, i, i]
    lib.caldera_codes_mm.restype = None
    lib.caldera_codes_mm_t.argtypes = [p, i, i, p, ci, i, p, ci, f, f, p, i, i]
    lib.caldera_codes_mm_t.restype = None
    L = ctypes.c_long
    lib.caldera_layer_fwd.argtypes = [L, p, p, p, L, L, p, p, L, p, L, p, p, ci, p, ci, p, ci, L, p, p, ci, ci, f, f, f,
                                      L, p, p, p]  # fmt: skip
    lib.caldera_layer_fwd.restype = None
    return lib


def available() -> bool:
    """True when the C kernels compiled (or were cached) and loaded on this machine."""
    return _lib() is not None


@functools.lru_cache(maxsize=1)
def lut_table() -> np.ndarray:
    """``4 ·`` the E8P codebook as int8 (65536, 8), C-contiguous; raises if any codeword is not exact."""
    from caldera.quantizers.e8p import _tables

    cb = _tables().codebook.to(torch.float32)
    t8 = torch.round(cb * 4)
    if not torch.equal(t8 / 4, cb) or t8.abs().max() > 127:
        raise RuntimeError("E8P codebook is not a set of multiples of 1/4 in int8 range; the LUT kernel cannot hold it")
    return np.ascontiguousarray(t8.to(torch.int8).numpy())


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _width(codes: np.ndarray) -> int:
    if codes.dtype.itemsize not in (2, 4, 8):
        raise ValueError(f"codes: the C kernel reads 2-, 4- or 8-byte integer codes, got {codes.dtype}")
    return codes.dtype.itemsize


def codes_mm_rows(x, codes, stages, inv_rs, scale, y, r0, r1) -> None:  # noqa: PLR0913 - mirrors the C call
    """``y[:, r0:r1] = x (s ⊙ Q[r0:r1])ᵀ``: numpy ``x`` (B, 8m) float32, ``codes`` (n, m), ``scale`` (1,)|(n,)."""
    n, m = codes.shape
    _lib().caldera_codes_mm(
        _ptr(x), x.shape[0], _ptr(codes), _width(codes), n, m, _ptr(lut_table()), stages, inv_rs,
        _ptr(scale), int(scale.shape[0] > 1), _ptr(y), r0, r1,
    )  # fmt: skip


def codes_mm_t_cols(t, codes, stages, inv_rs, scale, y, j0, j1) -> None:  # noqa: PLR0913
    """``y[:, 8j0:8j1] += t (s · M)[:, 8j0:8j1]``: numpy ``t`` (B, k) float32, ``codes`` (k, m), ``y`` (B, 8m)."""
    k, m = codes.shape
    _lib().caldera_codes_mm_t(
        _ptr(t), t.shape[0], k, _ptr(codes), _width(codes), m, _ptr(lut_table()), stages, inv_rs, scale, _ptr(y),
        j0, j1,
    )  # fmt: skip


class FusedLayer:
    """One layer's arguments to ``caldera_layer_fwd``, prepared once (:func:`fused_layer`).

    The C call computes, for ``h`` (B, d) float32 rows, ``y = ((H_n-rotate of h̃ Qᵀ + (h̃ Rᵀ) Lᵀ [+ (h̃ R_ftᵀ)
    L_ftᵀ]) ⊙ S_V) + bias`` with ``h̃ = U_dᵀ (h ⊙ S_U)``: the whole of ``CompressedLinear.forward`` in one call,
    reading Q (and quantized factors) as codes and 16-bit factors as float16; the transforms are the Kronecker
    Hadamard ``U_n = (M_K ⊗ H_{2^p}) / √(K 2^p)`` of :mod:`caldera.hadamard` (in-place fast Walsh–Hadamard
    transform for the ``2^p`` part, the K × K factor as a small dense product). Holds references to every
    tensor it points at.
    """

    def __init__(self, d: int, n: int, k: int, r: int, keep: tuple, args: tuple):
        self.d, self.n, self.k, self.r = d, n, k, r
        self._keep = keep
        self._args = args

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``y`` (B, n) float32 for ``h`` (B, d) float32 contiguous CPU."""
        B = h.shape[0]
        y = torch.empty(B, self.n, dtype=torch.float32)
        work = torch.empty(B * (self.d + self.k + self.r) + max(self.n, self.d), dtype=torch.float32)
        _lib().caldera_layer_fwd(B, h.data_ptr(), y.data_ptr(), work.data_ptr(), *self._args)
        return y


def _code_tensor(c: torch.Tensor) -> torch.Tensor:
    """Codes in a 2-, 4- or 8-byte integer dtype (the widths the C kernels read), contiguous."""
    if c.element_size() not in (2, 4, 8) or c.dtype == torch.int16:
        c = c.to(torch.int32)
    return c.contiguous()


def fused_layer(  # noqa: PLR0913 - one argument per stored tensor of the layer
    Q_codes: torch.Tensor,
    Q_scale: torch.Tensor,
    S_U: torch.Tensor | None,
    S_V: torch.Tensor | None,
    factors: Factors | None,
    ft: tuple[torch.Tensor, torch.Tensor] | None,
    bias: torch.Tensor | None,
) -> FusedLayer:
    """Prepare :class:`FusedLayer` for a layer with ``Q_codes`` (n, d/8) E8P, ``Q_scale`` () or (n, 1), RHT signs
    ``S_U`` (d,), ``S_V`` (n,) (None: no RHT), the frozen low-rank part ``factors``
    (:class:`caldera.kernels.fused.Factors`: float16/float32 ``L`` (n, k), ``R`` (k, d), or codes of ``Lᵀ``
    (k, n/8) and ``R`` (k, d/8) with scalar scales; None: no factors), ``ft`` = ``(L_ft (n, r), R_ft (r, d))``
    or None, ``bias`` (n,) or None. Raises when the C kernels did not build."""
    from caldera.hadamard import _factor_matrix, hadamard_factor
    from caldera.kernels.tables import SUPPORTED

    lib = _lib()
    if lib is None:
        raise RuntimeError("the C kernels did not build (no C compiler?); the fused layer needs them")
    n, m = Q_codes.shape
    d = 8 * m
    keep: list[torch.Tensor] = []

    def hold(t: torch.Tensor | None) -> int:
        if t is None:
            return 0
        keep.append(t)
        return t.data_ptr()

    qc = _code_tensor(Q_codes)
    qs = Q_scale.detach().float().reshape(-1).contiguous()
    if qs.numel() not in (1, n):
        raise ValueError(f"Q_scale: expected a scalar or ({n}, 1), got {qs.numel()} values")
    su = sv = Md = Mn = None
    Kd = Kn = 1
    if S_U is not None:
        su, sv = S_U.detach().float().contiguous(), S_V.detach().float().contiguous()
        Kd, Kn = hadamard_factor(d)[0], hadamard_factor(n)[0]
        if Kd > 1:
            Md = _factor_matrix(Kd, True, True, torch.float32, torch.device("cpu"))
        if Kn > 1:
            Mn = _factor_matrix(Kn, True, False, torch.float32, torch.device("cpu"))
    mode, k, Lp, Rp, lrw, stages, inv_rs, ls, rs = 0, 0, None, None, 2, 1, 1.0, 0.0, 0.0
    if factors is not None and factors.L_codes is None:
        L, R = factors.L.detach(), factors.R.detach()
        dt = torch.float16 if L.dtype == torch.float16 else torch.float32
        mode, k = (1 if dt == torch.float16 else 2), L.shape[1]
        Lp, Rp = L.to(dt).contiguous(), R.to(dt).contiguous()
    elif factors is not None:
        stages, res = SUPPORTED[factors.quantizer]
        Lc, Rc = _code_tensor(factors.L_codes), _code_tensor(factors.R_codes)
        if Lc.element_size() != Rc.element_size():
            Lc, Rc = Lc.to(torch.int64), Rc.to(torch.int64)
        mode, k, Lp, Rp, lrw = 3, Lc.shape[0], Lc, Rc, Lc.element_size()
        inv_rs, ls, rs = 1.0 / res, float(factors.L_scale), float(factors.R_scale)
    r, Lft, Rft = 0, None, None
    if ft is not None:
        Lft, Rft = ft[0].detach().float().contiguous(), ft[1].detach().float().contiguous()
        r = Lft.shape[1]
    b = None if bias is None else bias.detach().float().contiguous()
    T = torch.from_numpy(lut_table())
    args = (
        d, n, hold(su), hold(sv), Kd, hold(Md), Kn, hold(Mn), hold(qc), qc.element_size(), hold(qs),
        int(qs.numel() > 1), hold(T), mode, k, hold(Lp), hold(Rp), lrw, stages, inv_rs, ls, rs, r, hold(Lft),
        hold(Rft), hold(b),
    )  # fmt: skip
    return FusedLayer(d, n, k, r, tuple(keep), args)
