"""The compressed layer's product ``ỹ = h Qᵀ + (h Rᵀ) Lᵀ`` from stored codes, on the fastest available kernel.

Backends (:func:`select_backend`): ``"native"`` on CPU when the C kernels of :mod:`caldera.kernels.native`
built (``CompressedLinear`` then runs its whole forward, RHTs included, as one prepared C call:
:func:`fused_layer`), ``"numba"`` on CPU otherwise (:mod:`caldera.kernels.cpu`; Q and
4-bit RVQ factors read as codes, 16-bit factors converted per call; :func:`codes_linear`), ``"triton"`` on CUDA
when ``triton`` imports (:mod:`caldera.kernels.triton_e8p`; Q as codes fused with a float16 ``L t``; E8P-RVQ4
factors as three code products: ``t = h Rᵀ``, ``h Qᵀ``, ``+ t L``), or ``None`` (no kernel: the caller uses its
dequantizing reference path). No dense ``n × d`` matrix is formed or cached by any backend. Reference: ``h @ Q.T +
(h @ R.T) @ L.T`` with Q, L, R dequantized (``CompressedLinear``'s reference path; ``tests/kernels/test_kernels.py``).

This module is the kernels' one entry point from outside :mod:`caldera.kernels`: the layer
(:mod:`caldera.nn`) imports the dispatcher, never a backend.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from caldera.kernels.e8p_decode import SUPPORTED
from caldera.kernels.factors import Factors

__all__ = ["Factors", "codes_linear", "fused_layer", "native_available", "numba_available", "select_backend",
           "triton_available"]


#: batches up to this size take the CUDA-core products of :mod:`caldera.kernels.triton_e8p_gemv` where they apply
MAX_GEMV_BATCH = 4


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    try:
        import caldera.kernels.triton_e8p  # noqa: F401
    except ImportError:
        return False
    return True


def native_available() -> bool:
    """True when the C kernels of :mod:`caldera.kernels.native` built (the fused single-call layer on CPU)."""
    from caldera.kernels import native

    return native.available()


@functools.lru_cache(maxsize=1)
def numba_available() -> bool:
    try:
        import caldera.kernels.cpu  # noqa: F401
    except ImportError:
        return False
    return True


def select_backend(device: torch.device, q_quantizer: str, lr_quantizer: str | None) -> str | None:
    """``"native"``, ``"numba"``, ``"triton"`` or ``None`` for a layer with this Q quantizer and factor
    quantizer (None for 16-bit or no factors) on ``device``."""
    if q_quantizer != "e8p" or (lr_quantizer is not None and lr_quantizer not in SUPPORTED):
        return None
    if device.type == "cpu" and native_available():
        return "native"
    if device.type == "cpu" and numba_available():
        return "numba"
    if device.type == "cuda" and triton_available():
        return "triton"
    return None


def fused_layer(*args, **kwargs):
    """The ``"native"`` backend: a whole layer prepared as one C call (:func:`caldera.kernels.native.fused_layer`,
    same arguments); raises when the C extension was not built."""
    from caldera.kernels.native import fused_layer as prepare

    return prepare(*args, **kwargs)


def codes_linear(h: Tensor, Q_codes: Tensor, Q_scale: Tensor, factors: Factors | None, backend: str) -> Tensor:
    """``ỹ = h (s ⊙ Q)ᵀ + (h Rᵀ) Lᵀ`` (B, n) float32 for ``h`` (B, d) float32 in the RHT basis, ``Q_codes``
    (n, d/8) E8P codes, ``Q_scale`` () or (n, 1)."""
    if backend == "numba":
        from caldera.kernels.cpu import codes_matmul, codes_matmul_t

        y = codes_matmul(h, Q_codes, Q_scale, "e8p")
        if factors is None:
            return y
        if factors.L_codes is not None:
            t = codes_matmul(h, factors.R_codes, factors.R_scale, factors.quantizer)
            return codes_matmul_t(t, factors.L_codes, float(factors.L_scale), factors.quantizer, out=y)
        return y.addmm_(h @ factors.R.float().T, factors.L.float().T)
    if backend == "triton":
        from caldera.kernels.triton_e8p import e8p_matmul, e8p_matmul_t

        if factors is None:
            return e8p_matmul(h, Q_codes, Q_scale)
        if factors.L_codes is not None:
            t = e8p_matmul(h, factors.R_codes, factors.R_scale, quantizer=factors.quantizer)
            y = e8p_matmul(h, Q_codes, Q_scale)
            return e8p_matmul_t(t, factors.L_codes, factors.L_scale, factors.quantizer, out=y)
        if h.shape[0] <= MAX_GEMV_BATCH and factors.R.dtype == torch.float16:
            from caldera.kernels.triton_e8p_gemv import half_matmul_t

            t = half_matmul_t(h, factors.R)  # R read as stored: no float32 copy of it per call
        else:
            t = h @ factors.R.to(h.dtype).T
        if factors.L.dtype == torch.float16:  # fused into the Q product (the kernel's mma takes float16)
            return e8p_matmul(h, Q_codes, Q_scale, factors.L, t)
        return e8p_matmul(h, Q_codes, Q_scale).addmm_(t.float(), factors.L.float().T)
    raise ValueError(f"backend={backend!r}; accepted: 'numba', 'triton'")
