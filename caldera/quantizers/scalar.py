"""Scalar quantizers: deterministic uniform rounding, the paper's dithered quantizer, 16-bit pass-through.

* :class:`UniformRTN` — round to nearest on a symmetric uniform grid of ``2**B`` levels. In codebook units
  the levels are ``k − (2**B − 1)/2`` for ``k = 0 … 2**B − 1`` (spacing 1; for B = 4 this is QuIP#'s
  half-integer grid HI4B1C ``{−7.5, …, 7.5}``, quip-sharp.md section 1). With an absmax scale
  (:meth:`UniformRTN.quantize_with_scale`) the outermost levels land on ``±max|x|`` per tensor or per row,
  the classic RTN baseline (quip-sharp.md section 9).
* :class:`DitheredUniform` — the CALDERA paper's uniformly dithered scalar quantizer ``Q_{R,B}``
  (appendix "Uniformly dithered scalar quantizer", eq. ``uniform-dithered-quantizer``): ``M = 2**B``
  points ``−R, −R + Δ, …, R`` with ``Δ = 2R/(M − 1)``; ``x ∈ [q_k, q_{k+1})`` becomes ``q_{k+1}`` with
  probability ``r = (x − q_k)/Δ`` and ``q_k`` otherwise, so ``E[Q(x)] = x`` and ``E(Q(x) − x)² ≤ Δ²/4``
  for ``|x| ≤ R``; inputs beyond ``±R`` saturate to ``±R``.
* :class:`Identity16` — 16-bit pass-through (the paper's "16-bit" factors): codes are the float16 values.

Shapes: inputs ``(..., n)`` floating (any ``n``: block size 1); codes have the same shape.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from .base import Quantizer, ScaledCodes
from .e8p import check_codes, check_finite, check_values

_FLOAT16_MAX = 65504.0


def _check_bits(bits: object, lo: int = 1, hi: int = 16) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not lo <= bits <= hi:
        raise ValueError(f"bits={bits!r}: expected an integer in [{lo}, {hi}]")
    return bits


def _gaussian_mse(step: float, levels: int) -> float:
    """MSE of rounding N(0, 1) to ``levels`` points ``(k − (levels − 1)/2)·step`` (nearest, saturating).

    numpy/scipy in float64 (single-threaded and exact enough; no torch parallel regions for large grids).
    """
    from scipy.special import ndtr

    c = (np.arange(levels, dtype=np.float64) - (levels - 1) / 2) * step
    t = (c[1:] + c[:-1]) / 2  # decision thresholds

    def prim(x: np.ndarray, ck: np.ndarray) -> np.ndarray:  # ∫^x (u − ck)² φ(u) du
        return (1 + ck**2) * ndtr(x) + (2 * ck - x) * np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)

    upper = np.concatenate((prim(t, c[:-1]), 1 + c[-1:] ** 2))  # Φ(+∞) = 1, φ(±∞) = 0
    lower = np.concatenate(([0.0], prim(t, c[1:])))
    return float((upper - lower).sum())


@functools.lru_cache(maxsize=None)
def gaussian_opt_scale(bits: int) -> float:
    """``1/Δ*`` where ``Δ*`` minimises :func:`_gaussian_mse` for ``2**bits`` levels (golden-section search to a
    relative 1e-6, bracketed around the high-resolution estimate ``Δ ≈ 4·sqrt(ln M)/M``).

    This is the RMS the unit-spacing grid of :class:`UniformRTN` should see for N(0, 1)-like data (the
    analogue of QuIP#'s ``opt_scale``): B = 1, 2 give the Max (1960) steps 1.596, 0.9957; B = 4 gives
    ≈ 2.98 versus QuIP#'s 2.97 for its HI4B1C grid (quip-sharp.md section 1).
    """
    levels = 1 << _check_bits(bits)
    guess = 4 * math.sqrt(math.log(levels)) / levels
    a, b = 0.4 * guess, 1.6 * guess
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = _gaussian_mse(c, levels), _gaussian_mse(d, levels)
    while b - a > 1e-6 * b:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = _gaussian_mse(c, levels)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = _gaussian_mse(d, levels)
    return 2.0 / (a + b)


class UniformRTN(Quantizer):
    """Deterministic round-to-nearest on ``2**bits`` evenly spaced levels (block size 1).

    Codebook units: levels ``k − (2**bits − 1)/2``, codes ``k`` (uint8 for ``bits ≤ 8``, else int32).
    ``opt_scale`` is the MSE-optimal RMS for Gaussian data (:func:`gaussian_opt_scale`), used by
    :func:`~caldera.quantizers.base.quantize_scaled`; :meth:`quantize_with_scale` instead uses an absmax
    scale per tensor (``per_row=False``) or per row (``per_row=True``: one scale per index of the leading
    dimensions, shape ``(..., 1)``).
    """

    block_size = 1

    def __init__(self, bits: int, per_row: bool = False) -> None:
        self.bits = _check_bits(bits)
        if not isinstance(per_row, bool):
            raise ValueError(f"per_row={per_row!r}: expected a bool")
        self.per_row = per_row
        self.levels = self.num_codes = 1 << self.bits
        self.half = (self.levels - 1) / 2
        self.name = f"uniform-{self.bits}"
        self.bits_per_weight = float(self.bits)
        self.code_dtype = torch.uint8 if self.bits <= 8 else torch.int32

    @property
    def opt_scale(self) -> float:  # type: ignore[override]
        """MSE-optimal RMS for Gaussian data (:func:`gaussian_opt_scale`, computed on first use)."""
        return gaussian_opt_scale(self.bits)

    def __repr__(self) -> str:
        return f"UniformRTN(bits={self.bits}, per_row={self.per_row})"

    def quantize(self, x: Tensor) -> Tensor:
        """Codes of the nearest levels: float ``(..., n)`` -> ``code_dtype`` ``(..., n)`` in ``[0, 2**bits)``."""
        check_finite(x, "x")
        self.check_shape(x, "x")
        k = torch.round(x.detach().to(torch.float32) + self.half).clamp_(0, self.levels - 1)
        return k.to(self.code_dtype)

    def dequantize(self, codes: Tensor) -> Tensor:
        """Levels for integer codes ``(..., n)`` -> float32 ``(..., n)``."""
        check_codes(codes, "codes", self.levels)
        return codes.to(torch.float32) - self.half

    def absmax_scale(self, x: Tensor) -> Tensor:
        """``max|x| / ((2**bits − 1)/2)`` per tensor (scalar) or per row (``(..., 1)``), float32."""
        check_finite(x, "x")
        self.check_shape(x, "x")
        a = x.detach().to(torch.float32).abs()
        m = a.amax(dim=-1, keepdim=True) if self.per_row else a.amax()
        return m / self.half

    def quantize_with_scale(self, x: Tensor) -> ScaledCodes:
        """Absmax-scaled codes: ``x ≈ scale * dequantize(codes)``; all-zero rows get scale 0."""
        scale = self.absmax_scale(x)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        return ScaledCodes(self.quantize(x.detach().to(torch.float32) / safe), scale)

    def dequantize_with_scale(self, sc: ScaledCodes) -> Tensor:
        """``scale * dequantize(codes)`` as float32 with the codes' shape."""
        return self.dequantize(sc.codes) * sc.scale


class DitheredUniform(Quantizer):
    """The CALDERA paper's uniformly dithered scalar quantizer ``Q_{R,B}`` (appendix "Uniformly dithered
    scalar quantizer", eq. ``uniform-dithered-quantizer``, and the lemma after it).

    Args:
        R: dynamic range, finite and > 0; points ``−R + kΔ``, ``Δ = 2R/(2**B − 1)``.
        bits: B in [1, 16].

    ``quantize(x, generator)`` needs a seeded ``torch.Generator`` (CPU) for the dither; without one it
    raises ``ValueError`` (results must be reproducible). Codes are int32 level indices ``k``;
    ``dequantize`` returns ``−R + kΔ`` as float32. Works in the input's units (``opt_scale`` is 1 and has
    no tuning meaning here).
    """

    block_size = 1
    opt_scale = 1.0
    code_dtype = torch.int32

    def __init__(self, R: float, bits: int) -> None:
        if isinstance(R, bool) or not isinstance(R, (int, float)) or not math.isfinite(R) or R <= 0:
            raise ValueError(f"R={R!r}: expected a finite number > 0 (the dynamic range)")
        self.R = float(R)
        self.bits = _check_bits(bits)
        self.levels = self.num_codes = 1 << self.bits
        self.delta = 2 * self.R / (self.levels - 1)
        self.name = f"dithered-R{self.R:g}-{self.bits}"
        self.bits_per_weight = float(self.bits)

    def __repr__(self) -> str:
        return f"DitheredUniform(R={self.R!r}, bits={self.bits})"

    @staticmethod
    def _check_generator(generator: object) -> torch.Generator:
        if generator is None:
            raise ValueError(
                "generator: DitheredUniform needs a seeded torch.Generator for its dither "
                "(e.g. torch.Generator().manual_seed(0)); results must be reproducible"
            )
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator: expected a torch.Generator, got {type(generator).__name__}")
        return generator

    def quantize(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Dithered level indices: float ``(..., n)`` -> int32 ``(..., n)`` in ``[0, 2**B)``."""
        gen = self._check_generator(generator)
        check_finite(x, "x")
        self.check_shape(x, "x")
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        u = (x.detach().to(dt).clamp(-self.R, self.R) + self.R) / self.delta  # position in steps, [0, M−1]
        k = torch.floor(u).clamp_(max=self.levels - 2)  # x ∈ [q_k, q_{k+1}] (x = R uses the top cell)
        r = u - k  # P(round up) = (x − q_k)/Δ
        up = torch.rand(x.shape, generator=gen, dtype=dt, device=gen.device) < r.to(gen.device)
        return (k.to(torch.int32) + up.to(x.device)).clamp_(0, self.levels - 1)

    def dequantize(self, codes: Tensor) -> Tensor:
        """Points ``−R + kΔ`` (float32) for int codes ``k`` of any shape."""
        check_codes(codes, "codes", self.levels)
        return (codes.to(torch.float64) * self.delta - self.R).to(torch.float32)

    def round(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:  # type: ignore[override]
        """``dequantize(quantize(x, generator))``: float32, ``x``'s shape."""
        return self.dequantize(self.quantize(x, generator))


class Identity16(Quantizer):
    """16-bit pass-through: the codes are ``x`` rounded to **float16** (IEEE half, as QuIP# stores its
    low-rank factors, quip-sharp.md section 5); ``dequantize`` casts back to float32.

    float16 (10-bit mantissa) rather than bfloat16 (7-bit) because the callers scale data to RMS
    ``opt_scale`` = 1 first, so range is never an issue and precision is what matters. Values with
    ``|x| > 65504`` (float16 max) raise ``ValueError`` instead of silently becoming inf.
    """

    name = "identity"
    block_size = 1
    bits_per_weight = 16.0
    opt_scale = 1.0
    code_dtype = torch.float16

    def quantize(self, x: Tensor) -> Tensor:
        """float ``(..., n)`` -> float16 ``(..., n)``."""
        check_values(x, "x")
        check_finite(x, "x")
        self.check_shape(x, "x")
        if x.numel() and float(x.detach().abs().max()) > _FLOAT16_MAX:
            raise ValueError(f"x: |x| exceeds the float16 range {_FLOAT16_MAX:g}; scale it first")
        return x.detach().to(torch.float16)

    def dequantize(self, codes: Tensor) -> Tensor:
        """float16 codes -> float32."""
        if not isinstance(codes, Tensor) or codes.dtype != torch.float16:
            raise ValueError(f"codes: expected a float16 tensor, got {getattr(codes, 'dtype', type(codes))}")
        if codes.ndim == 0:
            raise ValueError("codes: expected at least one dimension, got a scalar")
        return codes.to(torch.float32)
