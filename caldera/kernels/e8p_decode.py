"""Decode lookup arrays for computing with E8P codes, and the pure-torch reference product.

An E8P code ``c`` (16 bits, :mod:`caldera.quantizers.e8p`) decodes as ``w_t = A[c >> 8, t] · G[c & 255, t] +
h[c & 255]`` (t = 0..7) with three small lookup arrays:

* ``A`` (256, 8): the abs pattern ``S[k]`` with its last coordinate negated when ``Σ S[k]`` is odd,
* ``G`` (256, 8): ``±1`` signs of the even-weight flip pattern (bit 0 XORed with the parity ``p`` of the byte),
* ``h`` (256,): ``+¼`` when ``p = 0`` and ``−¼`` when ``p = 1``.

So a kernel reads 2 bytes per 8 weights from memory plus lookup arrays of 8 KiB + 8 KiB + 1 KiB that stay in L1.
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
class E8PDecodeLookup:
    """The decode lookup arrays ``A``, ``G``, ``h`` of the module docstring and the float16 codebook."""

    A: Tensor  # (256, 8) float32 signed abs patterns
    G: Tensor  # (256, 8) float32 ±1
    h: Tensor  # (256,) float32 ±1/4
    codebook_f16: Tensor  # (65536, 8) float16, exact (all entries are multiples of 1/4 below 8)


@functools.lru_cache(maxsize=1)
def decode_lookup() -> E8PDecodeLookup:
    from caldera.quantizers.e8p import lookup_on

    t = lookup_on(torch.device("cpu"))
    A = t.abs_f.clone()
    A[:, 7] *= 1 - 2 * t.sum_odd.to(torch.float32)
    s = torch.arange(256)
    bits = (s[:, None] >> torch.arange(8)) & 1
    p = bits.sum(1) % 2
    flips = bits.clone()
    flips[:, 0] ^= p
    G = (1 - 2 * flips).to(torch.float32)
    h = torch.where(p == 0, 0.25, -0.25).to(torch.float32)
    return E8PDecodeLookup(A.contiguous(), G.contiguous(), h.contiguous(), t.codebook.to(torch.float16).contiguous())


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


#: the offset of the 3-bit nibbles of :func:`abs_nibbles`: nibble ``u = A + 3.5`` for ``A`` in {−3.5, …, 3.5}
NIBBLE_OFFSET = 3.5


@functools.lru_cache(maxsize=1)
def abs_nibbles() -> Tensor:
    """The 1 KiB abs-pattern lookup of the Triton decode: (256,) int32, nibble ``t`` (bits ``4t..4t+2``) of entry ``k``
    holding ``u = A[k, t] + 3.5`` ∈ {0, …, 7} (``A`` of :func:`decode_lookup`; the top bit of each nibble is 0).

    Negating a coordinate is ``u ↦ u ^ 7`` (``7 − u``), so code ``c`` decodes as ``w_t = ((abs_nibbles[c >> 8] ^
    sign_nibble_mask(c & 255)) >> 4t & 7) − 3.5 + h[c & 255]`` (:func:`nibble_decode`): one 4-byte lookup per
    code, the signs applied to all 8 coordinates by one XOR."""
    u = (decode_lookup().A + NIBBLE_OFFSET).to(torch.int64)
    if not bool(((u >= 0) & (u <= 7)).all()):
        raise AssertionError("E8P abs patterns outside {-3.5, ..., 3.5}")
    return (u << (4 * torch.arange(8))).sum(1).to(torch.int32)


def sign_nibble_mask(low: Tensor) -> Tensor:
    """int64 XOR masks (same shape as ``low``, the codes' low bytes 0..255): ``7 << 4t`` for each coordinate
    ``t`` the code negates (bit ``t`` of ``low``, bit 0 XORed with the byte's parity, as :func:`decode_lookup`'s
    ``G``). Bit operations only, as the Triton kernel computes it."""
    s = low.to(torch.int64) & 255
    p = s ^ (s >> 4)
    p = p ^ (p >> 2)
    p = (p ^ (p >> 1)) & 1
    m = s ^ p
    m = (m | (m << 12)) & 0x000F000F
    m = (m | (m << 6)) & 0x03030303
    m = (m | (m << 3)) & 0x11111111
    return m * 7


def nibble_decode(codes: Tensor) -> Tensor:
    """E8P codes (…,) -> float32 (…, 8) by the Triton kernel's decode, in torch (checked against the codebook):
    the nibbles of :func:`abs_nibbles` with the signs XORed in, each nibble ``u`` put in the top mantissa bits of
    the float16 ``8.0`` (bits ``0x4800 | u << 7``: the float16 ``8 + u``), minus the float16 offset ``8 + 3.5 −
    h`` (11.25 or 11.75), all in float16 arithmetic."""
    c = codes.to(torch.int64) & 0xFFFF
    packed = abs_nibbles().to(torch.int64)[c >> 8] ^ sign_nibble_mask(c & 255)
    u7 = ((packed[..., None] >> (4 * torch.arange(8))) & 7) << 7
    v = (u7 | 0x4800).to(torch.int16).view(torch.float16)
    off = (8 + NIBBLE_OFFSET - decode_lookup().h[c & 255]).to(torch.float16)
    return (v - off[..., None]).to(torch.float32)
