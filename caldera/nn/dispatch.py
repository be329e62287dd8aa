"""Which kernel a :class:`~caldera.nn.compressed_linear.CompressedLinear` runs on, and the calls into it.

The layer asks :func:`choose_backend` once per placement (``"native"``, ``"numba"``, ``"triton"`` or None for the
reference path; the choice is :func:`caldera.kernels.fused.select_backend`'s for the layer's quantizers, except
that ``kernel="auto"`` never takes the Numba products: the reference path is faster than they are). With a
backend, the forward runs as :func:`fused_call` (``"native"``: the whole layer, RHTs included, one prepared C
call) or :func:`codes_product` (``ỹ = h Qᵀ + (h Rᵀ) Lᵀ`` from the codes, in the RHT basis). This is the only module
of :mod:`caldera.nn` that imports :mod:`caldera.kernels`, and it imports only the dispatcher
:mod:`caldera.kernels.fused`. The functions read the layer's tensors and ``meta``; they keep no state (the layer
caches its choice and its prepared call).
"""

from __future__ import annotations

from torch import Tensor, nn

#: ``"auto"``: the measured-faster path (module docstring); ``"kernel"``: a :mod:`caldera.kernels` kernel whenever
#: one applies; ``"reference"``: always dequantize (and cache, with ``cache_dequantized``).
KERNELS = ("auto", "kernel", "reference")
#: Inputs with more rows (tokens) than this take the reference path (dequantize + GEMM, as QuIP# does for
#: batch > 1): the kernels are matrix-vector kernels for decoding.
KERNEL_MAX_ROWS = 16


def choose_backend(layer: nn.Module) -> str | None:
    """The backend for ``layer``'s tensors and ``kernel`` setting, for inputs that may use a kernel."""
    from caldera.kernels.fused import select_backend

    if layer.dense_q:
        return None  # no kernel reads a float Q: the reference path
    k_q = layer.rank - layer.ft_rank
    lrq = None
    if k_q and layer.meta["lr_format"] == "quantized":
        if (
            layer.L_scale.numel() != 1
            or layer.R_scale.numel() != 1
            or layer.meta["l_quantizer"] != layer.meta["r_quantizer"]
        ):
            return None
        lrq = layer.meta["l_quantizer"]
    backend = select_backend(layer.Q_codes.device, layer.meta["q_quantizer"], lrq)
    if layer.kernel == "auto" and backend == "numba":
        return None  # the reference path is faster than the Numba products (module docstring)
    return backend


def kernel_factors(layer: nn.Module):
    """``layer``'s frozen low-rank part as the kernels read it (:class:`caldera.kernels.fused.Factors`: 16-bit
    ``L``, ``R`` or their codes), or None when every factor column is trainable (or there are none)."""
    from caldera.kernels.fused import Factors

    if layer.rank - layer.ft_rank == 0:
        return None
    if layer.meta["lr_format"] == "quantized":
        return Factors(
            L_codes=layer.L_codes, L_scale=layer.L_scale, R_codes=layer.R_codes, R_scale=layer.R_scale,
            quantizer=layer.meta["l_quantizer"],
        )  # fmt: skip
    return Factors(L=layer.L_16, R=layer.R_16)


def fused_call(layer: nn.Module):
    """The whole forward of ``layer`` prepared as one C call (:func:`caldera.kernels.fused.fused_layer`, backend
    ``"native"``): signs, Q codes and scale, frozen factors, trainable ``L_ft R_ft`` and bias."""
    from caldera.kernels.fused import fused_layer

    return fused_layer(
        layer.Q_codes, layer.Q_scale, getattr(layer, "S_U", None) if layer.meta["rht"] else None,
        getattr(layer, "S_V", None) if layer.meta["rht"] else None, kernel_factors(layer),
        (layer.L_ft, layer.R_ft) if layer.ft_rank else None, layer._buffers.get("bias"),
    )  # fmt: skip


def codes_product(layer: nn.Module, h: Tensor, backend: str) -> Tensor:
    """``ỹ = h Qᵀ + (h Rᵀ) Lᵀ`` (B, n) float32 for ``h`` (B, d) in the RHT basis, from ``layer``'s codes on the
    Numba or Triton ``backend`` (:func:`caldera.kernels.fused.codes_linear`); the trainable part is the caller's."""
    from caldera.kernels.fused import codes_linear

    return codes_linear(h, layer.Q_codes, layer.Q_scale, kernel_factors(layer), backend)
