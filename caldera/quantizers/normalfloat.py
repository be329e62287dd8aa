"""NormalFloat block quantizer (LoftQ / QLoRA style): levels at N(0, 1) quantiles, one absmax scale per block.

Levels: the 2^B quantiles of N(0, 1) at probabilities (i + ½)/2^B, scaled to [−1, 1] (a symmetric variant of
QLoRA's NF4, which adds an exact zero). Codes are level indices (..., n); scales are per block of ``block``
consecutive weights along the last dimension, shape (..., n // block).
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from caldera.quantizers.base import Quantizer, ScaledCodes
from caldera.quantizers.e8p import check_codes


@lru_cache(maxsize=None)
def nf_levels(bits: int, device: torch.device | str = "cpu") -> Tensor:
    """The 2**bits NormalFloat levels in [−1, 1] (float32), built on the CPU and cached per device."""
    if torch.device(device).type != "cpu":
        return nf_levels(bits).to(device)
    p = (torch.arange(2**bits, dtype=torch.float64, device="cpu") + 0.5) / 2**bits
    v = torch.special.ndtri(p)
    return (v / v.abs().max()).float()


class NormalFloat(Quantizer):
    block_size = 1
    opt_scale = 1.0
    code_dtype = torch.uint8

    def __init__(self, bits: int, block: int = 64) -> None:
        if not 1 <= bits <= 8 or block < 1:
            raise ValueError(f"NormalFloat(bits={bits!r}, block={block!r}); accepted: bits 1..8, block >= 1")
        self.bits, self.block = bits, block
        self.num_codes = 1 << bits
        self.name = f"nf-{bits}"
        self.bits_per_weight = float(bits)

    def quantize(self, x: Tensor) -> Tensor:
        """Indices of the nearest levels to x (already in [−1, 1] units)."""
        return ((x.float()[..., None] - nf_levels(self.bits, x.device)).abs().argmin(-1)).to(self.code_dtype)

    def dequantize(self, codes: Tensor) -> Tensor:
        check_codes(codes, "codes", self.num_codes)  # a negative code would index from the end
        return nf_levels(self.bits, codes.device)[codes.long()]

    def quantize_with_scale(self, x: Tensor) -> ScaledCodes:
        if x.shape[-1] % self.block:
            raise ValueError(f"x: last dimension {x.shape[-1]} is not a multiple of the NF block {self.block}")
        blocks = x.float().reshape(*x.shape[:-1], -1, self.block)
        amax = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-12)
        codes = self.quantize(blocks / amax).reshape(x.shape)
        return ScaledCodes(codes, amax[..., 0])

    def dequantize_with_scale(self, sc: ScaledCodes) -> Tensor:
        return self.dequantize(sc.codes) * sc.scale.repeat_interleave(self.block, dim=-1)

    def scale_shapes(self, rows: int, features: int) -> tuple[tuple[int, ...], ...]:
        """One absmax scale per block of ``block`` weights along a row: (rows, features // block)."""
        return ((rows, features // self.block),)

    def decode(self, codes: Tensor, scale: Tensor, extras=None) -> Tensor:
        return self.dequantize_with_scale(ScaledCodes(codes, scale.float())).float()
