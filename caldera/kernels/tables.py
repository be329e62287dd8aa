"""Decode tables for computing with E8P codes, and the pure-torch reference product.

An E8P code ``c`` (16 bits, :mod:`caldera.quantizers.e8p`) decodes as ``w_t = A[c >> 8, t] · G[c & 255, t] +
h[c & 255]`` (t = 0..7) with three small tables:

* ``A`` (256, 8): the abs pattern ``S[k]`` with its last coordinate negated when ``Σ S[k]`` is odd,
* ``G`` (256, 8): ``±1`` signs of the even-weight flip pattern (bit 0 XORed with the parity ``p`` of the byte),
* ``h`` (256,): ``+¼`` when ``p = 0`` and ``−¼`` when ``p = 1``.

So a kernel reads 2 bytes per 8 weights from memory plus tables of 8 KiB + 8 KiB + 1 KiB that stay in L1.
``tests/kernels/test_kernels.py`` checks ``A·G + h`` against all 65,536 rows of the E8P codebook.

An E8P-RVQ4 code (32 bits) is ``(c1 << 16) | c2`` and decodes as ``w(c1) + w(c2) / 3.45``
(:class:`caldera.quantizers.rvq.E8PRVQ4`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

#: Quantizer names whose codes the kernels read: name -> (stages, residual scale).
SUPPORTED = {"e8p": (1, 1.0), "e8p-rvq4": (2, 3.45)}


@dataclass(frozen=True)
class E8PDecodeTables:
    A: Tensor  # (256, 8) float32 signed abs patterns
    G: Tensor  # (256, 8) float32 ±1
    h: Tensor  # (256,) float32 ±1/4
    codebook_f16: Tensor  # (65536, 8) float16, exact (all entries are multiples of 1/4 below 8)


@functools.lru_cache(maxsize=1)
def decode_tables() -> E8PDecodeTables:
    from caldera.quantizers.e8p import tables_on

    t = tables_on(torch.device("cpu"))
    A = t.abs_f.clone()
    A[:, 7] *= 1 - 2 * t.sum_odd.to(torch.float32)
    s = torch.arange(256)
    bits = (s[:, None] >> torch.arange(8)) & 1
    p = bits.sum(1) % 2
    flips = bits.clone()
    flips[:, 0] ^= p
    G = (1 - 2 * flips).to(torch.float32)
    h = torch.where(p == 0, 0.25, -0.25).to(torch.float32)
    return E8PDecodeTables(A.contiguous(), G.contiguous(), h.contiguous(), t.codebook.to(torch.float16).contiguous())


def check_quantizer(name: str) -> tuple[int, float]:
    if name not in SUPPORTED:
        raise ValueError(f"no compressed-matmul kernel for quantizer {name!r}; supported: {sorted(SUPPORTED)}")
    return SUPPORTED[name]


def dequantize_codes(codes: Tensor, quantizer: str) -> Tensor:
    """Codes ``(n, m)`` -> float32 ``(n, 8 m)`` through the quantizer's own ``dequantize`` (the oracle)."""
    from caldera.quantizers import get_quantizer

    check_quantizer(quantizer)
    return get_quantizer(quantizer).dequantize(codes.to(torch.int64)).float()


def codes_matmul_reference(x: Tensor, codes: Tensor, scale: Tensor | float, quantizer: str = "e8p") -> Tensor:
    """Reference ``y = x (s ⊙ Q)ᵀ`` in float32: ``x`` (B, 8m), ``codes`` (n, m), ``scale`` scalar or (n, 1)
    -> (B, n). Dequantizes Q densely (reference only)."""
    Q = dequantize_codes(codes, quantizer)
    s = torch.as_tensor(scale, dtype=torch.float32).reshape(-1, 1) if torch.is_tensor(scale) else float(scale)
    return x.float() @ (Q * s).T
