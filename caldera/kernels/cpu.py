"""Numba CPU kernels: products with a matrix held as E8P / E8P-RVQ4 codes, decoded on the fly.

* :func:`codes_matmul` — ``y = x (s ⊙ Q)ᵀ``: ``x`` (B, 8m) float32, codes (n, m) of Q's rows, ``s`` scalar or
  per row. One pass over the codes (2 bytes per 8 weights for E8P, 4 for RVQ4); each code is decoded once into
  8 floats from the L1-resident decode lookup arrays of :mod:`caldera.kernels.e8p_decode` and used for all B rows of x.
* :func:`codes_matmul_t` — ``y = t (s · M)`` for M given by the codes of its rows (k, n/8): the product with
  ``L`` when the codes are those of ``Lᵀ`` (``CompressedLinear``'s layout of the left factor).

Rows (resp. column blocks) are split over ``torch.get_num_threads()`` Python threads; the kernels release the
GIL. No dense matrix is formed or cached. Reference: :func:`caldera.kernels.e8p_decode.codes_matmul_reference`.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import torch
from torch import Tensor

from caldera.kernels.e8p_decode import check_quantizer, decode_lookup

_MIN_CODES_PER_THREAD = 1 << 16  # below this, one thread (thread hand-off costs ~10-50 µs)


@numba.njit(cache=True, nogil=True, fastmath=True)
def _decode(c, A, G, h, w, add):  # pragma: no cover - compiled
    # w = decode(c) (add=False) or w += decode(c) (add=True)
    k = (c >> 8) & 255
    s = c & 255
    sh = h[s]
    for t in range(8):
        v = A[k, t] * G[s, t] + sh
        w[t] = w[t] + v if add else v


@numba.njit(cache=True, nogil=True, fastmath=True)
def _decode_code(c, stages, inv_rs, A, G, h, w):  # pragma: no cover - compiled
    if stages == 1:
        _decode(c, A, G, h, w, False)
    else:
        _decode(c & 0xFFFF, A, G, h, w, False)
        for t in range(8):
            w[t] *= inv_rs
        _decode((c >> 16) & 0xFFFF, A, G, h, w, True)


@numba.njit(cache=True, nogil=True, fastmath=True)
def _mm_rows_e8p_b1(x, xs, codes, scale, A, G, h, y, r0, r1):  # pragma: no cover - compiled
    # single-stage E8P, one row of x: w_t = A[k,t] G[s,t] + h[s], so x·w = Σ_t x_t A[k,t] G[s,t] + h[s] Σ_t x_t
    # (xs: block sums of x). 1-D accumulators: a (B, 8) version measured ~10x slower per code (not vectorised),
    # so batches call this once per row.
    m = codes.shape[1]
    x0 = x[0]
    xs0 = xs[0]
    per_row = scale.shape[0] > 1
    for i in range(r0, r1):
        a = np.zeros(8, np.float32)
        sh = np.float32(0.0)
        for j in range(m):
            c = codes[i, j]
            k = c >> 8
            s = c & 255
            sh += h[s] * xs0[j]
            for t in range(8):
                a[t] += A[k, t] * G[s, t] * x0[8 * j + t]
        sc = scale[i] if per_row else scale[0]
        y[0, i] = (a.sum() + sh) * sc


@numba.njit(cache=True, nogil=True, fastmath=True)
def _mm_rows(x, codes, scale, stages, inv_rs, A, G, h, y, r0, r1):  # pragma: no cover - compiled
    B = x.shape[0]
    m = codes.shape[1]
    w = np.empty(8, np.float32)
    acc = np.empty((B, 8), np.float32)
    per_row = scale.shape[0] > 1
    for i in range(r0, r1):
        acc[:, :] = 0.0
        for j in range(m):
            _decode_code(np.int64(codes[i, j]), stages, inv_rs, A, G, h, w)
            base = 8 * j
            for b in range(B):
                for t in range(8):
                    acc[b, t] += w[t] * x[b, base + t]
        s = scale[i] if per_row else scale[0]
        for b in range(B):
            tot = np.float32(0.0)
            for t in range(8):
                tot += acc[b, t]
            y[b, i] = tot * s


@numba.njit(cache=True, nogil=True, fastmath=True)
def _mm_t_cols(t_in, codes, scale, stages, inv_rs, A, G, h, y, j0, j1):  # pragma: no cover - compiled
    B = t_in.shape[0]
    k = codes.shape[0]
    w = np.empty(8, np.float32)
    acc = np.empty((B, 8), np.float32)
    for j in range(j0, j1):
        acc[:, :] = 0.0
        for r in range(k):
            _decode_code(np.int64(codes[r, j]), stages, inv_rs, A, G, h, w)
            for b in range(B):
                tb = t_in[b, r]
                for t in range(8):
                    acc[b, t] += tb * w[t]
        for b in range(B):
            for t in range(8):
                y[b, 8 * j + t] += acc[b, t] * scale


@functools.lru_cache(maxsize=1)
def _np_decode_lookup():
    t = decode_lookup()
    return t.A.numpy(), t.G.numpy(), t.h.numpy()


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="caldera-kernels")


def _np_codes(codes: Tensor) -> np.ndarray:
    if codes.is_floating_point() or codes.device.type != "cpu":
        raise ValueError(f"codes: expected an integer CPU tensor, got {codes.dtype} on {codes.device}")
    return codes.contiguous().numpy()


def _split(total: int, work_per_item: int) -> list[tuple[int, int]]:
    workers = torch.get_num_threads()
    if workers <= 1 or total * work_per_item < 2 * _MIN_CODES_PER_THREAD:
        return [(0, total)]
    parts = min(4 * workers, max(1, total * work_per_item // _MIN_CODES_PER_THREAD))
    step = -(-total // parts)
    return [(a, min(total, a + step)) for a in range(0, total, step)]


def _run(kernel, ranges, *args) -> None:
    if len(ranges) == 1:
        kernel(*args, *ranges[0])
        return
    for f in [_pool(torch.get_num_threads()).submit(kernel, *args, a, b) for a, b in ranges]:
        f.result()


def _x2d(x: Tensor, width: int, name: str) -> np.ndarray:
    if x.ndim != 2 or x.shape[1] != width:
        raise ValueError(f"{name}: expected shape (B, {width}), got {tuple(x.shape)}")
    return x.detach().to(torch.float32).contiguous().numpy()


IMPLS = ("auto", "native", "numba")


def _use_native(impl: str) -> bool:
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r}; accepted: {', '.join(IMPLS)}")
    if impl == "numba":
        return False
    from caldera.kernels import native

    if impl == "native" and not native.available():
        raise RuntimeError(f"impl='native': the C extension was not built; use impl='numba', or build it: {native.FIX}")
    return native.available()


def codes_matmul(x: Tensor, codes: Tensor, scale: Tensor | float, quantizer: str = "e8p", impl: str = "auto") -> Tensor:
    """``y = x (s ⊙ Q)ᵀ`` (B, n) float32 for ``x`` (B, 8m), ``codes`` (n, m) of Q, ``scale`` scalar or (n, 1).

    ``impl``: ``"native"`` (the int8-LUT C kernel of :mod:`caldera.kernels.native`), ``"numba"``, or ``"auto"``
    (native when it built, else Numba)."""
    stages, rs = check_quantizer(quantizer)
    n, m = codes.shape
    xn = _x2d(x, 8 * m, "x")
    sc = torch.as_tensor(scale, dtype=torch.float32).detach().reshape(-1).contiguous().numpy()
    if sc.shape[0] not in (1, n):
        raise ValueError(f"scale: expected a scalar or ({n}, 1), got {sc.shape[0]} values")
    y = np.empty((xn.shape[0], n), np.float32)
    if _use_native(impl):
        from caldera.kernels.native import codes_mm_rows

        _run(codes_mm_rows, _split(n, m), xn, _np_codes(codes), stages, 1.0 / rs, sc, y)
        return torch.from_numpy(y)
    A, G, h = _np_decode_lookup()
    if stages == 1:
        xs = xn.reshape(xn.shape[0], m, 8).sum(-1)
        c = _np_codes(codes)
        for b in range(xn.shape[0]):
            _run(_mm_rows_e8p_b1, _split(n, m), xn[b : b + 1], xs[b : b + 1], c, sc, A, G, h, y[b : b + 1])
    else:
        _run(_mm_rows, _split(n, m), xn, _np_codes(codes), sc, stages, np.float32(1.0 / rs), A, G, h, y)
    return torch.from_numpy(y)


def codes_matmul_t(
    t_in: Tensor, codes: Tensor, scale: float, quantizer: str = "e8p", out: Tensor | None = None, impl: str = "auto"
):
    """``y (+)= t (s · M)`` (B, 8m) float32 for ``t`` (B, k), ``codes`` (k, m) of M's rows, scalar ``s``.

    With ``out`` (B, 8m) float32 contiguous CPU, the product is added to it in place and ``out`` is returned.
    ``impl`` as for :func:`codes_matmul`.
    """
    stages, rs = check_quantizer(quantizer)
    k, m = codes.shape
    tn = _x2d(t_in, k, "t")
    if out is None:
        out = torch.zeros(tn.shape[0], 8 * m)
    elif out.shape != (tn.shape[0], 8 * m) or out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError(f"out: expected a contiguous float32 ({tn.shape[0]}, {8 * m}) tensor")
    if _use_native(impl):
        from caldera.kernels.native import codes_mm_t_cols

        _run(codes_mm_t_cols, _split(m, k), tn, _np_codes(codes), stages, 1.0 / rs, float(scale), out.numpy())
        return out
    A, G, h = _np_decode_lookup()
    _run(
        _mm_t_cols,
        _split(m, k),
        tn,
        _np_codes(codes),
        np.float32(scale),
        stages,
        np.float32(1.0 / rs),
        A,
        G,
        h,
        out.numpy(),
    )
    return out
