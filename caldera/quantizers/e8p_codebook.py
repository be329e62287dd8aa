"""The E8P ("E8P12") codebook of QuIP# (Tseng et al., 2024) and the lookup arrays its nearest-codeword search
(:mod:`caldera.quantizers.e8p_search`) reads, built once per process on the CPU and copied once per device.

Facts used here (all from the QuIP# paper/codebase as summarised in the project's reference notes
``quip-sharp.md`` section 1, "Codebooks"; none of its code is used):

* **Abs patterns S (256 rows).** 227 rows are the distinct ``|x|`` for ``x`` in
  ``D̂8 = D8 + ½𝟙`` (half-integer 8-vectors with even coordinate sum) with ``‖x‖² ≤ 10``; 29 rows are the
  norm-12 patterns (five entries 3/2, three 1/2) of QuIP#'s ``get_norm12()``, in upstream order.
  *Our order of the 227* (upstream's order is not part of the reference notes): sort by ``‖x‖²`` ascending,
  ties in ascending lexicographic order of ``(2|x_1|, …, 2|x_8|)``. So row 0 is ``(½, …, ½)``, rows 1–8
  are ``3/2`` at position 8, 7, …, 1, and rows 227–255 are the 29 norm-12 patterns.
* **16-bit code.** ``code = (k << 8) | s``: high byte ``k`` indexes S, low byte ``s`` holds 8 sign bits
  (bit ``i``, value ``2**i``, belongs to coordinate ``i``). ``p = XOR`` of the 8 bits; bit 0 is XORed with
  ``p`` so the applied flip pattern has even weight; if ``Σ S[k]`` is odd the last coordinate is negated
  first (so the unflipped vector is in D̂8); finally ``+¼𝟙`` is added if ``p = 0`` and ``−¼𝟙`` if ``p = 1``.
  The 65,536 codewords are distinct and lie in ``E8 + ¼𝟙``.
* **Scale.** ``opt_scale = 1.03`` (QuIP# ``opt_scale``): the codebook expects data of RMS 1.03; per-coordinate
  MSE on N(0, 1) data scaled that way is ≈ 0.092.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
from torch import Tensor

# QuIP# get_norm12(): the 29 norm-12 abs patterns, written as 2|x| (3 -> 3/2, 1 -> 1/2), upstream order
# (quip-sharp.md section 1; upstream's duplicate was fixed in 2023-12 and these 29 are distinct).
NORM12_PATTERNS_2X: tuple[str, ...] = (
    "31113333 13113333 11313333 11133333 33313311 33313131 33311331 33313113 33311313 33311133 "
    "33133311 33133131 33131331 33133113 33131313 33131133 31333311 31333131 31331331 31333113 "
    "31331313 13331133 13333311 13333131 13331331 13333113 13331313 11331333 33113331"
).split()

NUM_CODES = 1 << 16

#: 4**i, 2**i (a column) and the parity of each byte, the small arrays the search reads
_POW4_F = 4.0 ** torch.arange(8, dtype=torch.float32, device="cpu")
_POW2_COL = (2 ** torch.arange(8, dtype=torch.int32, device="cpu"))[:, None]
_PARITY8 = torch.tensor([bin(i).count("1") & 1 for i in range(256)], dtype=torch.float32, device="cpu")


@dataclass(frozen=True)
class E8PLookup:
    """The E8P codebook and the lookup arrays its nearest-codeword search reads (built once, :func:`cpu_lookup`)."""

    abs2: Tensor  # (256, 8) int64, 2|x| of the abs patterns S
    abs_f: Tensor  # (256, 8) float32, the abs patterns S
    sum_odd: Tensor  # (256,) int32, 1 where sum(S[k]) is odd (last coordinate negated before flipping)
    key_to_index: Tensor  # (4**8,) float32: base-4 key of (2|x| - 1)/2 -> row of S (or -1)
    codebook: Tensor  # (65536, 8) float32
    n12_abs: Tensor  # (29, 8) float32, the norm-12 patterns (rows 227..255 of S)
    n12_mask3: Tensor  # (29, 8) float32, 1 where the norm-12 pattern is 3/2
    parity8: Tensor  # (256,) float32, parity of the byte
    pow4_f: Tensor  # (8,) float32, 4**i
    pow2_col: Tensor  # (8, 1) int32, 2**i


def _short_patterns_2x() -> Tensor:
    """The 227 distinct 2|x| for x in D̂8 with ‖x‖² ≤ 10, in this module's documented order (int64 (227, 8)).

    Every abs pattern of odd half-integers occurs in D̂8 (flipping one sign changes the sum by an odd
    integer), so these are all tuples over {1, 3, 5, 7} with Σ (2x_i)² ≤ 40.
    """
    odd = torch.tensor([1, 3, 5, 7], dtype=torch.int64, device="cpu")
    grid = torch.cartesian_prod(*([odd] * 8))  # (4**8, 8), ascending lexicographic order
    norm = (grid * grid).sum(1)
    keep = norm <= 40
    grid, norm = grid[keep], norm[keep]
    order = torch.sort(norm, stable=True).indices  # by norm; lexicographic within a norm
    return grid[order]


@functools.lru_cache(maxsize=1)
def cpu_lookup() -> E8PLookup:
    n12 = torch.tensor([[int(c) for c in s] for s in NORM12_PATTERNS_2X], dtype=torch.int64, device="cpu")
    abs2 = torch.cat((_short_patterns_2x(), n12))
    assert abs2.shape == (256, 8), abs2.shape
    abs_f = abs2.to(torch.float32) / 2
    sum_odd = (abs2.sum(1) // 2) % 2

    digits = (abs2 - 1) // 2  # 0, 1, 2 for 1/2, 3/2, 5/2
    keys = (digits * (4 ** torch.arange(8, device="cpu"))).sum(1)
    key_to_index = torch.full((4**8,), -1.0, device="cpu")
    key_to_index[keys] = torch.arange(256, dtype=torch.float32, device="cpu")

    codes = torch.arange(NUM_CODES, device="cpu")
    k = codes >> 8
    bits = (codes[:, None] >> torch.arange(8, device="cpu")) & 1  # (65536, 8) sign bits of the low byte
    p = bits.sum(1) % 2
    flips = bits.clone()
    flips[:, 0] ^= p  # even-weight flip pattern
    base = abs_f[k].clone()
    base[:, 7] *= 1 - 2 * sum_odd[k].to(torch.float32)  # odd |x| sum: negate last coordinate first
    shift = torch.full((NUM_CODES,), 0.25, device="cpu").masked_fill_(p == 1, -0.25)
    cb = base * (1 - 2 * flips).to(torch.float32) + shift[:, None]
    return E8PLookup(
        abs2=abs2,
        abs_f=abs_f,
        sum_odd=sum_odd.to(torch.int32),
        key_to_index=key_to_index,
        codebook=cb.to(torch.float32).contiguous(),
        n12_abs=abs_f[227:].contiguous(),
        n12_mask3=(abs2[227:] == 3).to(torch.float32).contiguous(),
        parity8=_PARITY8,
        pow4_f=_POW4_F,
        pow2_col=_POW2_COL,
    )


def lookup_on(device: torch.device) -> E8PLookup:
    """The E8P codebook and lookup arrays on ``device`` (built once on the CPU by :func:`cpu_lookup`, copied once per
    device and cached), so that codes on a GPU are searched and dequantized with the codebook on that GPU. The CPU
    ones are :func:`cpu_lookup` itself (never a second cache of it that could outlive ``cpu_lookup.cache_clear()``)."""
    device = torch.device(device)
    return cpu_lookup() if device.type == "cpu" else _lookup_copy(device)


@functools.lru_cache(maxsize=None)
def _lookup_copy(device: torch.device) -> E8PLookup:
    t = cpu_lookup()
    return E8PLookup(**{f.name: getattr(t, f.name).to(device) for f in dataclasses.fields(t)})
