"""Residual vector quantizers on the E8P codebook: QuIP#'s E8P12RVQ4B (4 bits) and E8P12RVQ3B (3 bits).

Constants from quip-sharp.md section 1 ("E8P12RVQ4B and E8P12RVQ3B"):

* 4 bits: ``opt_scale = 1.03``, ``opt_resid_scale = 3.45``. ``q1 = E8P(x)``, ``q2 = E8P(3.45·(x − q1))``,
  ``x̂ = q1 + q2/3.45``; code ``(i1 << 16) | i2`` in int64 (32 bits per 8 weights).
* 3 bits: ``opt_scale = 0.98``, ``opt_resid_scale = 2.04``; the second stage uses the 1-bit "E81B" codebook
  of 256 entries — the E8 points with ‖x‖² ≤ 2 (1 + 112 + 128 = 241) plus 15 of the 16 points ±2e_i
  (−2e_8 left out); code ``(i1 << 8) | i2`` in int32 (24 bits per 8 weights).

E81B row order (ours; the reference notes do not give upstream's): row 0 is the origin; rows
``1 + 4·p + 2·[s_i < 0] + [s_j < 0]`` are ``s_i e_i + s_j e_j`` for the ``p``-th pair ``i < j`` in
lexicographic order; rows ``113 + b`` (``b`` = 0..127) are ``(±½)⁸`` with minus signs on the set bits of
``b`` (coordinates 1..7) and on coordinate 8 when ``b`` has odd popcount; rows ``241 + i`` are ``+2e_{i+1}``
(i = 0..7) and rows ``249 + i`` are ``−2e_{i+1}`` (i = 0..6).

E81B search: the nearest point is the best of four families, each solved in closed form on ``|r|``
(origin: 0; roots: the two largest ``|r_i|``; half-integer points: all signs of ``r``, flipping the smallest
``|r_i|`` if the number of negatives is odd; ``±2e_i``: the largest ``|r_i|``, with only ``+2e_8`` on the last
coordinate). It equals brute force over the 256 rows (checked in ``tests/quantizers/test_rvq.py``).
"""

from __future__ import annotations

import functools
import itertools

import torch
from torch import Tensor

from .base import Quantizer
from .e8p import E8P, MAX_ABS_INPUT, check_codes, check_finite, encode_residual_e8p, numba_rvq_kernel
from .e8p_search import COLS, packed_keys, sign_byte, sort8

_E81B_CHUNK = COLS  # rows per search chunk (single-threaded torch ops, see e8p_search.COLS)
_PAIRS = list(itertools.combinations(range(8), 2))
_PAIR_LUT = torch.full((64,), -1, dtype=torch.int64, device="cpu")
for _p, (_i, _j) in enumerate(_PAIRS):
    _PAIR_LUT[8 * _i + _j] = _p


@functools.lru_cache(maxsize=1)
def e81b_codebook() -> Tensor:
    """The E81B codebook, ``(256, 8)`` float32, in the row order of the module docstring."""
    cb = torch.zeros(256, 8, device="cpu")
    for p, (i, j) in enumerate(_PAIRS):
        for sbits in range(4):
            cb[1 + 4 * p + sbits, i] = -1.0 if sbits & 2 else 1.0
            cb[1 + 4 * p + sbits, j] = -1.0 if sbits & 1 else 1.0
    b = torch.arange(128, device="cpu")
    bits = (b[:, None] >> torch.arange(7, device="cpu")) & 1
    minus = torch.cat((bits, bits.sum(1, keepdim=True) % 2), dim=1)
    cb[113:241] = 0.5 - minus.to(torch.float32)
    for i in range(8):
        cb[241 + i, i] = 2.0
    for i in range(7):
        cb[249 + i, i] = -2.0
    return cb


@functools.lru_cache(maxsize=None)
def _on(device: torch.device) -> tuple[Tensor, Tensor]:
    """(codebook, pair lookup) on ``device``, copied once per device."""
    return e81b_codebook().to(device), _PAIR_LUT.to(device)


def _e81b_chunk(x: Tensor) -> Tensor:
    """E81B codes (int64 ``(m,)``) for the rows of ``x`` (float32 ``(m, 8)``, ``m < 32768``).

    Works on the 8 coordinate columns as separate rows (see ``e8p_search.COLS``: single-threaded torch ops).
    """
    r = list(x.T.unbind(0))
    ar = [v.abs() for v in r]
    negbyte, q = sign_byte(r)
    negbyte = negbyte.to(torch.int64)
    keys = packed_keys(ar)
    s = sort8(keys)
    v1, v2, v8 = [(s[k] & -8).view(torch.float32) for k in (0, 1, 7)]
    p1, p2, p8 = [(s[k] & 7).to(torch.int64) for k in (0, 1, 7)]
    # ±2e_i: the largest |r_i|, except that the last coordinate only offers +2e_8 (gain 4·r_8 − 4); a
    # negative r_8 packs to a negative key, below every other key.
    kmax = (r[7].view(torch.int32) & -8).bitwise_or_(7)
    for k in keys[:7]:
        kmax = torch.maximum(kmax, k)
    pe = (kmax & 7).to(torch.int64)
    total = ar[0] + ar[1]
    for a in ar[2:]:
        total += a
    gains = (
        torch.add(v1, v2).mul_(2).sub_(2),  # s_i e_i + s_j e_j on the two largest |r_i|
        total.sub_(2 * q * v8).sub_(2),  # (±½)⁸ with the signs of r (flip the smallest if the parity is odd)
        (kmax & -8).view(torch.float32).mul(4).sub_(4),  # ±2e_i
    )
    best = torch.zeros_like(v1)  # the origin
    family = torch.zeros(v1.shape, dtype=torch.int64, device=v1.device)
    for f, g in enumerate(gains, start=1):
        family.masked_fill_(g > best, f)
        torch.maximum(best, g, out=best)
    a, b = torch.minimum(p1, p2), torch.maximum(p1, p2)
    root = 1 + 4 * _on(a.device)[1].index_select(0, 8 * a + b) + 2 * ((negbyte >> a) & 1) + ((negbyte >> b) & 1)
    half = 113 + ((negbyte ^ (q.to(torch.int64) << p8)) & 127)
    two = torch.where(pe == 7, 248, 241 + pe + 8 * ((negbyte >> pe) & 1))
    out = torch.where(family == 1, root, torch.where(family == 2, half, two))
    return torch.where(family == 0, 0, out)


class E81B(Quantizer):
    """The 256-entry, 1-bit-per-weight E81B codebook (stage 2 of :class:`E8PRVQ3`); exact nearest search.

    ``quantize``: float ``(..., n)``, ``n % 8 == 0`` -> int32 codes ``(..., n // 8)`` in ``[0, 255]``;
    ``dequantize``: -> float32 ``(..., n)``. ``opt_scale`` is not tuned (only used as a residual stage).
    """

    name = "e81b"
    block_size = 8
    bits_per_weight = 1.0
    opt_scale = 1.0
    code_dtype = torch.int32
    num_codes = 256

    def __init__(self) -> None:
        self._cb = e81b_codebook()

    @property
    def codebook(self) -> Tensor:
        """``(256, 8)`` float32 (a copy)."""
        return self._cb.clone()

    def quantize(self, x: Tensor) -> Tensor:
        check_finite(x, "x")
        self.check_shape(x, "x")
        xf = x.detach().to(torch.float32).reshape(-1, 8)
        codes = torch.empty(xf.shape[0], dtype=torch.int32, device=xf.device)
        for s in range(0, xf.shape[0], _E81B_CHUNK):
            codes[s : s + _E81B_CHUNK] = _e81b_chunk(xf[s : s + _E81B_CHUNK])
        return codes.reshape(*x.shape[:-1], x.shape[-1] // 8)

    def dequantize(self, codes: Tensor) -> Tensor:
        check_codes(codes, "codes", self.num_codes)
        idx = codes.reshape(-1).to(torch.int64)
        flat = _on(idx.device)[0].index_select(0, idx)
        return flat.reshape(*codes.shape[:-1], codes.shape[-1] * 8)


class _ResidualE8P(Quantizer):
    """Two-stage residual VQ: ``x̂ = q1 + q2 / resid_scale``, ``q1 = E8P(x)``, ``q2 = stage2(resid_scale·(x − q1))``."""

    block_size = 8
    resid_scale: float = 1.0
    stage2_bits: int = 16

    def __init__(self) -> None:
        self.stage1 = E8P()
        self.stage2: Quantizer = E8P()

    @property
    def num_codes(self) -> int:  # type: ignore[override]
        """Codes ``(i1 << stage2_bits) | i2``: ``2**(16 + stage2_bits)`` of them."""
        return 1 << (16 + self.stage2_bits)

    def quantize(self, x: Tensor) -> Tensor:
        """Codes ``(i1 << stage2_bits) | i2``: float ``(..., n)`` -> ``code_dtype`` ``(..., n // 8)``.

        Both stages E8P on a CPU tensor with the Numba backend: one compiled pass does both searches
        (:func:`caldera.quantizers.e8p.encode_residual_e8p`; the same codes: the residual is rounded to float32
        as below), unless ``max|x|`` is near the range where the residual's own validation could refuse it (then
        the stages below run and raise as they always did)."""
        if self._fused_available(x):
            xf = self.stage1._flat(x, "x")  # validates x
            if float(xf.abs().max()) <= MAX_ABS_INPUT / (2 * self.resid_scale):
                codes = encode_residual_e8p(xf, self.resid_scale, self.stage2_bits)
                return codes.to(self.code_dtype).reshape(*x.shape[:-1], x.shape[-1] // 8)
        c1 = self.stage1.quantize(x)  # validates x
        resid = (x.detach().to(torch.float32) - self.stage1.dequantize(c1)) * self.resid_scale
        c2 = self.stage2.quantize(resid)
        return (c1.to(self.code_dtype) << self.stage2_bits) | c2.to(self.code_dtype)

    def _fused_available(self, x: Tensor) -> bool:
        return (
            type(self.stage1) is E8P and type(self.stage2) is E8P and self.stage1.backend == "numba"
            and self.stage2.backend == "numba" and x.device.type == "cpu" and numba_rvq_kernel() is not None
        )

    def dequantize(self, codes: Tensor) -> Tensor:
        """``q1 + q2 / resid_scale`` (float32 ``(..., 8 m)``) for codes ``(..., m)``."""
        check_codes(codes, "codes", self.num_codes)
        c = codes.to(torch.int64)
        q1 = self.stage1.dequantize(c >> self.stage2_bits)
        q2 = self.stage2.dequantize(c & ((1 << self.stage2_bits) - 1))
        return q1 + q2 / self.resid_scale


class E8PRVQ4(_ResidualE8P):
    """4 bits/weight (QuIP# E8P12RVQ4B): E8P twice, residual scale 3.45, opt_scale 1.03; int64 codes."""

    name = "e8p-rvq4"
    bits_per_weight = 4.0
    opt_scale = 1.03
    resid_scale = 3.45
    stage2_bits = 16
    code_dtype = torch.int64


class E8PRVQ3(_ResidualE8P):
    """3 bits/weight (QuIP# E8P12RVQ3B): E8P then E81B, residual scale 2.04, opt_scale 0.98; int32 codes."""

    name = "e8p-rvq3"
    bits_per_weight = 3.0
    opt_scale = 0.98
    resid_scale = 2.04
    stage2_bits = 8
    code_dtype = torch.int32

    def __init__(self) -> None:
        super().__init__()
        self.stage2 = E81B()
