"""The stored form of a :class:`~caldera.nn.compressed_linear.CompressedLinear`: integer codes in their smallest
dtype, scales, ±1 signs, 16-bit factors, and the quantizer names that decode them (the table of the layer's
module docstring).

:func:`narrow_codes` stores codes losslessly in the smallest integer dtype, :func:`dequantize` turns codes and a
scale back into float32 through the quantizer registry, and the ``_infer_*`` helpers read a decomposition's
config to name the quantizers that produced its codes. Nothing here runs a forward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from caldera.decomposition import Decomposition
from caldera.quantizers.base import Quantizer

#: Version of the layer metadata (:meth:`CompressedLinear.metadata`); a checkpoint of another version is refused.
META_VERSION = 1
#: dtypes of the trainable factors ``L_ft`` / ``R_ft``, by name
#: ``meta["q_format"]`` of a Q stored as a float tensor (``Q_dense``) instead of codes
DENSE_Q_FORMATS = ("float16", "float32")
_FT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r}")
    return dt


def narrow_codes(codes: Tensor) -> Tensor:
    """The same integer values in the smallest dtype that holds them (uint8 … uint32, int32, int64)."""
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise ValueError(f"codes must be an integer tensor, got {codes.dtype}")
    if codes.numel() == 0:
        return codes.to(torch.uint8)
    lo, hi = int(codes.min()), int(codes.max())
    for dt in (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.uint32, torch.int32):
        info = torch.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return codes.to(dt).contiguous()
    return codes.to(torch.int64).contiguous()


def resolve_quantizer(name: str) -> Quantizer:
    """Quantizer instance for a registry name (``caldera.quantizers.get_quantizer``)."""
    from caldera.quantizers import get_quantizer

    return get_quantizer(name)


def quantizer_name_for_bits(bits: int) -> str:
    from caldera.quantizers import quantizer_for_bits

    return quantizer_for_bits(int(bits)).name


def dequantize(name: str, codes: Tensor, scale: Tensor, codes_dtype: str | None = None) -> Tensor:
    """``scale · quantizer(name).dequantize(codes)`` as float32 (codes restored to ``codes_dtype`` first)."""
    q = resolve_quantizer(name)
    c = codes.to(_dtype(codes_dtype)) if codes_dtype else codes
    deq = getattr(q, "dequantize_with_scale", None)
    if deq is not None and scale.ndim > 0:
        from caldera.quantizers.base import ScaledCodes

        return deq(ScaledCodes(c, scale.float())).float()
    return q.dequantize(c).float() * scale.float()


def _infer_q_quantizer(dec: Decomposition) -> str:
    if dec.q_quantizer is not None:
        return dec.q_quantizer
    cfg = dec.config or {}
    if "q_bits" in cfg:
        return quantizer_name_for_bits(cfg["q_bits"])
    if dec.method == "rtn" and "bits" in cfg:
        from caldera.quantizers import UniformRTN

        return UniformRTN(int(cfg["bits"]), per_row=bool(cfg.get("per_row", True))).name
    raise ValueError(
        f"cannot tell which quantizer produced the Q codes of a {dec.method!r} decomposition (its config has "
        "no 'q_bits'); pass q_quantizer=<registry name> to CompressedLinear.from_decomposition"
    )


def _infer_lr_quantizer(dec: Decomposition, which: str) -> str:
    cfg = dec.config or {}
    key = f"{which}_bits"
    if key in cfg:
        return quantizer_name_for_bits(cfg[key])
    raise ValueError(
        f"cannot tell which quantizer produced the {which.upper()} codes of a {dec.method!r} decomposition "
        f"(its config has no {key!r}); pass lr_quantizer=<registry name>"
    )


def _close(a: Tensor, b: Tensor) -> bool:
    tol = 1e-5 * float(b.abs().max().clamp_min(1e-30))
    return a.shape == b.shape and float((a.float() - b.float()).abs().max()) <= tol if a.numel() else True


def _signs_tensor(s: Tensor) -> Tensor:
    """±1 signs as int8 (exact); anything else (fine-tuned real signs) as float32."""
    s = s.detach().float().cpu()
    return s.to(torch.int8) if bool(((s == 1) | (s == -1)).all()) else s.contiguous()
