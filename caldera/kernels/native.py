"""C kernels for E8P / E8P-RVQ4 code products on CPU through a full 8-bit codebook table, built on first use.

Every E8P codeword is a multiple of ¼ with entries in [−2.75, 2.75], so ``4·codebook`` is exact in int8: a
table ``T8`` (65536, 8) int8 of 512 KiB (:func:`lut_table`; checked equal to the codebook at build). The
products of :mod:`caldera.kernels.cpu` then read per 8-weight code one 8-byte row of ``T8`` (widened to float32
with two AVX2 instructions) and FMA it with 8 entries of ``x``; ``y = ¼ · s · Σ``. E8P-RVQ4 codes
``(c1 << 16) | c2`` take two lookups, ``w(c1) + w(c2)/3.45``. The per-code loop of the Numba kernels could not
be vectorised by Numba's LLVM (scalar FMAs, ≈ 5 ns per code measured); this one runs ≈ 1 ns per code on
this CPU (``kernels/README.md``).

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

_SRC = r"""
#include <stdint.h>
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

/* y[b, i] = 1/4 s_i dot(x[b], codes[i]) for rows i in [r0, r1); codes (n, m) of `width` bytes */
void caldera_codes_mm(const float *x, long B, const void *codes, int width, long n, long m, const int8_t *T,
                      int stages, float inv_rs, const float *scale, int per_row, float *y, long r0, long r1) {
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
