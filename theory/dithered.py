"""Thin helpers around the library's uniformly dithered scalar quantizer (App. F, ``DitheredUniform(R, B)``).

The paper's analysis assumes dithered scalar quantizers with a *fixed dynamic range* R (grid
q_j = −R + (j − 1)Δ, Δ = 2R/(2^B − 1)); the library's LDLQ/LPLR entry points take a :class:`Quantizer` whose
``quantize(x)`` has no generator argument, so :class:`SeededDithered` binds a ``torch.Generator`` (and counts
saturated inputs |x| > R, which the lemmas exclude).

The library's ``DitheredUniform`` accepts 1–16 bits (and dequantizes to float32). Budgets above that (the
bit budgets of Lemma C.3 are typically 9–14 bits, but grow with log(1/ε)) go through
:func:`reference_dithered_codes` — the same algorithm, the same float64 draws from the generator, float64
output; ``theory/test_dithered_quantizer.py`` checks that the two give identical codes where both apply.
"""

from __future__ import annotations

import torch
from torch import Tensor

from caldera.quantizers import DitheredUniform
from caldera.quantizers.base import Quantizer


def step(R: float, bits: int) -> float:
    """Δ = 2R / (2^B − 1)."""
    return 2.0 * R / (2**bits - 1)


#: Largest bit width the library's DitheredUniform accepts.
LIBRARY_MAX_BITS = 16


def reference_dithered_codes(x: Tensor, R: float, bits: int, g: torch.Generator) -> Tensor:
    """App. F's Q_{R,B} as integer grid indices (int64), drawing one uniform per entry from ``g``: x ∈ [q_k, q_{k+1})
    goes up with probability r = (x − q_k)/Δ; inputs beyond ±R are clamped (saturation)."""
    d = step(R, bits)
    t = (torch.clamp(x.double(), -R, R) + R) / d
    lo = torch.floor(t).clamp(max=2**bits - 2)  # x = R uses the top cell, as the library does
    up = torch.rand(x.shape, generator=g, dtype=torch.float64) < (t - lo)
    return torch.clamp(lo + up, 0, 2**bits - 1).to(torch.int64)


def dithered_round(x: Tensor, R: float, bits: int, g: torch.Generator) -> Tensor:
    """Q_{R,B}(x) entrywise with dither drawn from ``g`` (float64 out): the library's DitheredUniform up to 8 bits,
    the identical reference algorithm (float64) above."""
    if bits <= LIBRARY_MAX_BITS:
        q = DitheredUniform(R, bits)
        return q.dequantize(q.quantize(x, generator=g)).double()
    return reference_dithered_codes(x, R, bits, g).double() * step(R, bits) - R


class SeededDithered(Quantizer):
    """``DitheredUniform(R, bits)`` with a bound generator, usable by ``block_ldlq``; counts saturated entries."""

    block_size = 1

    def __init__(self, R: float, bits: int, generator: torch.Generator):
        self.inner = DitheredUniform(R, bits) if bits <= LIBRARY_MAX_BITS else None
        self.R, self.bits, self.generator = float(R), int(bits), generator
        self.name = f"dithered-{bits}"
        self.bits_per_weight = float(bits)
        self.opt_scale = 1.0
        self.saturated = 0
        self.max_abs_input = 0.0

    def quantize(self, x: Tensor) -> Tensor:
        ax = x.detach().abs()
        self.saturated += int((ax > self.R).sum())
        self.max_abs_input = max(self.max_abs_input, float(ax.max())) if ax.numel() else self.max_abs_input
        if self.inner is None:
            return reference_dithered_codes(x, self.R, self.bits, self.generator)
        return self.inner.quantize(x, generator=self.generator)

    def dequantize(self, codes: Tensor) -> Tensor:
        if self.inner is None:
            return (codes.double() * step(self.R, self.bits) - self.R).float()
        return self.inner.dequantize(codes)


def unsaturated_range(W: Tensor, L: Tensor, bits: int, seed: int, *, pilots: int = 4, headroom: float = 1.25,
                      max_iter: int = 15) -> float | None:
    """A dynamic range R for which BlockLDLQ of W (feedback L) with ``DitheredUniform(R, bits)`` kept every input
    below R/headroom in ``pilots`` draws; None when no such R was found (the feedback gain of L at this bit width
    is too large: the inputs grow with R).

    The LDLQ inputs are W plus fed-back errors of size ~Δ ∝ R, so max|input| ≈ max|W| + c·R: the iteration
    R ← headroom·max|input| converges iff c·headroom < 1.
    """
    from caldera.algorithm.ldlq import block_ldlq
    from theory.common import gen

    R = 1.2 * float(W.abs().max())
    for _ in range(max_iter):
        g = gen(seed)
        peak = 0.0
        for _ in range(pilots):
            q = SeededDithered(R, bits, g)
            block_ldlq(W.float(), L.float(), q)
            peak = max(peak, q.max_abs_input)
        if peak * headroom <= R:
            return R
        R = 1.05 * headroom * peak
    return None


def feedback_gain(W: Tensor, L: Tensor, bits: int, seed: int, draws: int = 4) -> float:
    """lim_{R→∞} max|LDLQ input| / R, estimated at R = 1e6·max|W|: < 1 is needed for an unsaturated Q_Q."""
    from caldera.algorithm.ldlq import block_ldlq
    from theory.common import gen

    R = 1e6 * float(W.abs().max())
    g = gen(seed)
    peak = 0.0
    for _ in range(draws):
        q = SeededDithered(R, bits, g)
        block_ldlq(W.float(), L.float(), q)
        peak = max(peak, q.max_abs_input)
    return peak / R
