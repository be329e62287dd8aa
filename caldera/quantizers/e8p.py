"""E8P ("E8P12"): the 2-bit, 8-dimensional lattice codebook of QuIP# (Tseng et al., 2024).

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

**Nearest-codeword search (exact).** The codebook is ``{b ± ¼𝟙 : b ∈ B}`` with
``B = {b ∈ D̂8 : |b| ∈ S}``, so for each shift ``s = ±¼`` we find the best ``b ∈ B`` for ``y = x − s𝟙`` and
keep the better shift. Maximising ``2⟨b, y⟩ − ‖b‖²`` over ``b`` with ``|b| = a`` gives
``2 Σ a_i |y_i| − ‖a‖²`` if the signs of ``y`` already give an even coordinate sum, and otherwise that minus
``4 min_i a_i |y_i|`` (one coordinate flipped). The parity of ``Σ_i a_i sign(y_i)`` is
``(Σ a_i + #{y_i < 0}) mod 2`` (each ``2a_i`` is odd), so it is the same for all permutations of ``a``.
The 227 short patterns are exactly 7 permutation-closed classes ``{½⁸}, {3/2^k ½^(8−k)} (k = 1…4),
{5/2 ½⁷}, {5/2 3/2 ½⁶}`` (1 + 8 + 28 + 56 + 70 + 8 + 56), each containing a ``½``; by the rearrangement
inequality the best member of a class puts its largest entries on the largest ``|y_i|`` and, when the
parity is odd, flips the smallest ``|y_i|`` (which carries a ``½``). So sorting ``|y|`` once per shift scores
all 227 patterns with a few O(1) formulas. The 29 norm-12 patterns (3/2)⁵ ½³ are not permutation-closed:
their gain is at most ``ub = 2 Σ_{5 largest}|y| − 12`` (``− 2 min|y|`` if the parity is odd). Where ``ub``
beats the best class (4 % / 8 % / 43 % of (vector, shift) pairs at RMS 0.9 / 1.03 / 2 for Gaussian data)
and the five largest coordinates form one of the 29 patterns, ``ub`` is attained; otherwise the five 3/2s
cover at most ranks 1–4 and 6, a second bound, and only where that one still beats the best (0.6 % / 1.4 % /
12 %) an exact search over the 29 patterns runs, batched after the main pass. The result attains the
brute-force minimum distance over all 65,536 codewords up to float32 rounding (ties broken arbitrarily);
``tests/quantizers/test_e8p.py`` checks this against brute force on Gaussian, adversarial and random inputs.

(The Conway–Sloane decoder of D̂8 followed by a membership test of ``|b|`` in S, the other obvious design,
falls back for 17 % / 32 % / 95 % of pairs at RMS 0.9 / 1.03 / 2: at the design RMS the nearest D̂8 point is
often outside the codebook, so the exact fallback would dominate the cost.)

**Implementation.** Pure torch on CPU. The 8 coordinates are held as 8 separate rows of up to ``_COLS``
(8-vector, shift) columns, so that every op has fewer than 32768 elements and runs on the calling thread
(torch's OpenMP grain size): ~200 small ops per 16k 8-vectors, no ``torch.sort`` (a 19-comparator sorting
network on packed int32 keys), no boolean masks in the hot path (float 0/1 masks and arithmetic
selection). Large inputs are split into blocks on ``torch.get_num_threads()`` Python threads.

Shapes and dtypes: ``quantize`` takes ``(..., n)`` floating tensors with ``n % 8 == 0`` and returns
``(..., n // 8)`` int32 codes in ``[0, 65535]``; ``dequantize`` returns float32 ``(..., n)``.
``pack_codes`` / ``unpack_codes`` convert to/from exactly 2 bytes (uint8) per code.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from caldera.validation import check_values

from .base import Quantizer

# QuIP# get_norm12(): the 29 norm-12 abs patterns, written as 2|x| (3 -> 3/2, 1 -> 1/2), upstream order
# (quip-sharp.md section 1; upstream's duplicate was fixed in 2023-12 and these 29 are distinct).
NORM12_PATTERNS_2X: tuple[str, ...] = (
    "31113333 13113333 11313333 11133333 33313311 33313131 33311331 33313113 33311313 33311133 "
    "33133311 33133131 33131331 33133113 33131313 33131133 31333311 31333131 31331331 31333113 "
    "31331313 13331133 13333311 13333131 13331331 13333113 13331313 11331333 33113331"
).split()

# Inputs are searched in float32; beyond this magnitude sums of |x| in the scores could overflow.
MAX_ABS_INPUT = 1e36
_BLOCK_ROWS = 1 << 18  # 8-vectors per block: bounds the (2, block) objective/code buffers to 6 MiB
_NUM_CODES = 1 << 16


def check_finite(x: Tensor, arg: str, bound: float | None = None) -> None:
    """Raise ``ValueError`` naming ``arg`` unless ``x`` is a floating tensor of finite values (and, if
    ``bound`` is given, ``max|x| ≤ bound``). One pass over ``x`` (``amax`` propagates NaN). Tensors on the
    ``meta`` device carry no values: only their dtype is checked."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{arg}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{arg}: expected a floating-point tensor, got dtype {x.dtype}")
    if x.numel() and x.device.type != "meta":
        m = float(x.detach().abs().amax())
        if not math.isfinite(m):
            raise ValueError(f"{arg}: contains NaN or Inf entries; only finite values can be quantized")
        if bound is not None and m > bound:
            raise ValueError(f"{arg}: max |{arg}| = {m:g} exceeds {bound:g}; scale the input first")


_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def check_codes(codes: Tensor, arg: str, upper: int) -> None:
    """Raise ``ValueError`` unless ``codes`` is an integer tensor (any signed or unsigned width) with values
    in ``[0, upper)`` (values are not checked on the ``meta`` device, which holds none)."""
    if not isinstance(codes, Tensor):
        raise ValueError(f"{arg}: expected a torch.Tensor, got {type(codes).__name__}")
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise ValueError(f"{arg}: expected an integer tensor of codes, got dtype {codes.dtype}")
    if codes.ndim == 0:
        raise ValueError(f"{arg}: expected at least one dimension, got a scalar")
    if codes.numel() and codes.device.type != "meta":
        # torch implements no min/max for uint16/uint32/uint64 (the dtypes checkpoints store codes in); the
        # values are widened first (uint64 above 2**63 wraps negative and is reported out of range)
        c = codes.to(torch.int64) if codes.dtype in _WIDE_UNSIGNED else codes
        lo, hi = int(c.min()), int(c.max())
        if lo < 0 or hi >= upper:
            raise ValueError(f"{arg}: code values must lie in [0, {upper - 1}], got range [{lo}, {hi}]")


@dataclass(frozen=True)
class _E8PLookup:
    """The E8P codebook and the lookup arrays its nearest-codeword search reads (built once, :func:`_lookup`)."""

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
def _lookup() -> _E8PLookup:
    n12 = torch.tensor([[int(c) for c in s] for s in NORM12_PATTERNS_2X], dtype=torch.int64, device="cpu")
    abs2 = torch.cat((_short_patterns_2x(), n12))
    assert abs2.shape == (256, 8), abs2.shape
    abs_f = abs2.to(torch.float32) / 2
    sum_odd = (abs2.sum(1) // 2) % 2

    digits = (abs2 - 1) // 2  # 0, 1, 2 for 1/2, 3/2, 5/2
    keys = (digits * (4 ** torch.arange(8, device="cpu"))).sum(1)
    key_to_index = torch.full((4**8,), -1.0, device="cpu")
    key_to_index[keys] = torch.arange(256, dtype=torch.float32, device="cpu")

    codes = torch.arange(_NUM_CODES, device="cpu")
    k = codes >> 8
    bits = (codes[:, None] >> torch.arange(8, device="cpu")) & 1  # (65536, 8) sign bits of the low byte
    p = bits.sum(1) % 2
    flips = bits.clone()
    flips[:, 0] ^= p  # even-weight flip pattern
    base = abs_f[k].clone()
    base[:, 7] *= 1 - 2 * sum_odd[k].to(torch.float32)  # odd |x| sum: negate last coordinate first
    shift = torch.full((_NUM_CODES,), 0.25, device="cpu").masked_fill_(p == 1, -0.25)
    cb = base * (1 - 2 * flips).to(torch.float32) + shift[:, None]
    return _E8PLookup(
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


def lookup_on(device: torch.device) -> _E8PLookup:
    """The E8P codebook and lookup arrays on ``device`` (built once on the CPU by :func:`_lookup`, copied once per
    device and cached), so that codes on a GPU are searched and dequantized with the codebook on that GPU. The CPU
    ones are :func:`_lookup` itself (never a second cache of it that could outlive ``_lookup.cache_clear()``)."""
    device = torch.device(device)
    return _lookup() if device.type == "cpu" else _lookup_copy(device)


@functools.lru_cache(maxsize=None)
def _lookup_copy(device: torch.device) -> _E8PLookup:
    t = _lookup()
    return _E8PLookup(**{f.name: getattr(t, f.name).to(device) for f in dataclasses.fields(t)})


# Class scores (see the module docstring). Classes 0..6 are the permutation-closed classes ½⁸,
# (3/2)^k ½^(8−k) for k = 1..4, 5/2 ½⁷ and 5/2 3/2 ½⁶. Relative to Σ|y| (|y| sorted: y(1) ≥ … ≥ y(8)),
# class c scores  2·Σ_k (a_(k) − ½)·y(k) − ‖a‖² − 2·y(8)·odd_c,  odd_c = (Σa_c + #negatives) mod 2.
# A pattern is identified by its base-4 key Σ_i d_i 4^i, digit d_i = (2|x_i| − 1)/2 (0, 1, 2 for ½, 3/2, 5/2).
_POW4_F = 4.0 ** torch.arange(8, dtype=torch.float32, device="cpu")
_POW2_COL = (2 ** torch.arange(8, dtype=torch.int32, device="cpu"))[:, None]
_PARITY8 = torch.tensor([bin(i).count("1") & 1 for i in range(256)], dtype=torch.float32, device="cpu")
# Optimal 19-comparator sorting network for 8 inputs (Knuth, TAOCP vol. 3, 5.3.4); checked by the 0-1
# principle in tests/quantizers/test_e8p.py. Each pair (i, j), i < j, leaves the larger value at i.
SORT8_NETWORK: tuple[tuple[int, int], ...] = (
    (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7), (0, 1), (2, 3),
    (4, 5), (6, 7), (2, 4), (3, 5), (1, 4), (3, 6), (1, 2), (3, 4), (5, 6),
)  # fmt: skip
# torch runs an elementwise op on one thread when it has fewer than 32768 elements
# (at::internal::GRAIN_SIZE) and opens an OpenMP parallel region otherwise. The search keeps the 8
# coordinates as 8 separate rows of _COLS columns (one column per (8-vector, shift) pair) and every op
# works on one row, so it never opens a parallel region: thousands of small parallel regions are slow,
# and catastrophically so when other processes compete for the cores. Rows of ~32k elements keep the
# per-op Python/dispatch overhead small relative to the arithmetic.
_COLS = 32640
_CHUNK_ROWS = _COLS // 2  # 8-vectors per search chunk (both shifts of each vector are searched at once)
_N12_COLS = 128  # columns per exact norm-12 batch: 29 x 8 x 128 < 32768


def _sign_byte(rows: list[Tensor]) -> tuple[Tensor, Tensor]:
    """``(negbyte, q)`` for 8 rows ``y_i`` (float32, same shape): bit ``i`` of ``negbyte`` (int32) is the sign
    bit of ``y_i``; ``q`` (float32 0/1) is the parity of the number of set bits."""
    negbyte = (rows[0].view(torch.int32) >> 31) & 1
    for i in range(1, 8):
        # arithmetic shift: bit i of (v >> (31 − i)) is the sign bit of v
        negbyte |= (rows[i].view(torch.int32) >> (31 - i)) & (1 << i)
    return negbyte, lookup_on(negbyte.device).parity8.index_select(0, negbyte)


def _sort8(rows: list[Tensor]) -> list[Tensor]:
    """Elementwise descending sort of 8 same-shape tensors with :data:`SORT8_NETWORK` (ranks 1..8)."""
    r = list(rows)
    for i, j in SORT8_NETWORK:
        r[i], r[j] = torch.maximum(r[i], r[j]), torch.minimum(r[i], r[j])
    return r


def _packed_keys(abs_rows: list[Tensor]) -> list[Tensor]:
    """int32 sort keys of non-negative float32 rows: the value's bits with the 3 lowest mantissa bits
    replaced by the row (coordinate) index.

    Non-negative float32 values order like their bit patterns read as int32, so sorting the keys sorts the
    values and carries the coordinate along (distinct keys; ties broken by coordinate). ``key & -8`` read as
    float32 is the value to within a relative 2⁻²⁰ (8 ulps): values that close may come out in either order
    and the scores move by at most ~2⁻¹⁸·|y|, the size of float32 rounding in the scores themselves.
    """
    return [(a.view(torch.int32) & -8).bitwise_or_(i) for i, a in enumerate(abs_rows)]


def _argmax_rows(s: Tensor) -> tuple[Tensor, Tensor]:
    """Column-wise maximum and first arg-maximum of ``s`` (``(r, m)`` float32 -> ``(m,)``, ``(m,)`` int64).

    ``Tensor.max(dim=0)`` and boolean masks are slow on CPU for short columns; this uses only float
    arithmetic: ``sign(s − max) + 1`` is 1 exactly at the maxima.
    """
    best = s.amax(0)
    hit = torch.sign(s - best).add_(1)
    rank = torch.arange(s.shape[0], 0, -1, dtype=torch.float32, device=s.device)[:, None]  # r, r-1, ..., 1
    first = (hit * rank).amax(0)
    return best, (s.shape[0] - first).to(torch.int64)


def _pairwise_min8(v: Tensor) -> Tensor:
    """Minimum over dim 1 of a ``(k, 8, c)`` tensor -> ``(k, c)`` (three elementwise ``minimum`` steps)."""
    v = torch.minimum(v[:, :4], v[:, 4:])
    v = torch.minimum(v[:, :2], v[:, 2:])
    return torch.minimum(v[:, 0], v[:, 1])


def _norm12_gain(ay: Tensor, odd: Tensor, t: _E8PLookup) -> tuple[Tensor, Tensor]:
    """Best norm-12 pattern for each column of ``ay`` (``(8, c)`` = |y|, ``c ≤ _N12_COLS``; ``odd`` ``(c,)``
    float 0/1). Returns ``(gain, k)``: gain relative to Σ|y| (float32 ``(c,)``), pattern (int64, 0..28)."""
    prod = t.n12_abs[:, :, None] * ay[None]  # (29, 8, c): a_i |y_i|
    # Σ a_i|y_i| = Σ|y|/2 + Σ_{a_i = 3/2} |y_i|, so relative to Σ|y| the gain is 2 Σ_{3/2}|y_i| − 12.
    g = (t.n12_mask3[:, :, None] * ay[None]).sum(1).mul_(2).sub_(12)
    g -= 4 * odd * _pairwise_min8(prod)  # odd parity: one sign flipped, the cheapest one
    return _argmax_rows(g)


class _ClassBest(NamedTuple):
    """The best of the 227 short patterns per column (:func:`_class_best`); every field ``(M,)`` unless noted."""

    ay: list[Tensor]  # |y_i|, 8 rows, float32
    neg: Tensor  # int32 sign byte (bit i: y_i < 0)
    q: Tensor  # float 0/1: parity of the number of negative coordinates
    r: list[Tensor]  # 8 rows of packed int32 sort keys, |y| descending (coordinate in the 3 low bits)
    w: list[Tensor]  # 5 rows, float32 4**(coordinate of rank k+1), k = 0..4
    k3: Tensor  # float32 base-4 key of ranks 1..3 carrying digit 1
    p4: Tensor  # float32 sum of the 4 largest |y|
    neg_o: Tensor  # float32 minus the parity penalty of the classes with odd Σa
    best: Tensor  # float32 best class gain relative to Σ|y|
    index: Tensor  # float32 row of S of the best class
    odd: Tensor  # float 0/1: flip the smallest |y| (rank 8)


def _class_best(y: list[Tensor], t: _E8PLookup) -> _ClassBest:
    """The best of the 227 short patterns (the 7 permutation-closed classes, see the module docstring) for each
    column of the 8 coordinate rows ``y`` (float32 ``(M,)`` each): the first part of :func:`_best_points` and of
    :func:`_best_points_dense`. Selections use float 0/1 masks and arithmetic (see :func:`_best_points`)."""
    M = y[0].shape[0]
    ay = [v.abs() for v in y]
    dev = y[0].device
    tmp = torch.empty(M, device=dev)
    negf = torch.lt(y[0], 0, out=torch.empty(M, device=dev))  # bit i: y_i < 0 (−0.0 counts as positive)
    for i in range(1, 8):
        negf.add_(torch.lt(y[i], 0, out=tmp), alpha=1 << i)
    neg = negf.to(torch.int32)
    q = t.parity8.index_select(0, neg)  # parity of the number of negative coordinates (float 0/1)
    r = _sort8(_packed_keys(ay))
    y1, y2, y3, y4, y5, y6, _, y8 = [(k & -8).view(torch.float32) for k in r]
    w = [t.pow4_f.index_select(0, r[k] & 7) for k in range(5)]  # 4**(coordinate of rank k+1)

    p2 = y1 + y2
    p3 = p2 + y3
    p4 = p3 + y4
    y8q = y8 * q
    neg_e = y8q * -2  # minus the parity penalty of classes with even Σa (odd iff q = 1)
    neg_o = torch.sub(y8q, y8).mul_(2)  # ... and of classes with odd Σa (odd iff q = 0)
    # (score, base-4 key of the arrangement, Σa mod 2) of classes 1..6; class 0 (½⁸) has key 0, Σa even.
    k2 = w[0] + w[1]
    k3 = k2 + w[2]
    classes = (
        (torch.add(neg_o, y1, alpha=2).sub_(4), w[0], 1),
        (torch.add(neg_e, p2, alpha=2).sub_(6), k2, 0),
        (torch.add(neg_o, p3, alpha=2).sub_(8), k3, 1),
        (torch.add(neg_e, p4, alpha=2).sub_(10), k3 + w[3], 0),
        (torch.add(neg_e, y1, alpha=4).sub_(8), w[0] * 2, 0),
        (torch.add(neg_o, y1, alpha=4).add_(y2, alpha=2).sub_(10), torch.add(w[1], w[0], alpha=2), 1),
    )
    best = neg_e - 2
    key = torch.zeros(M, device=dev)
    sa = torch.zeros(M, device=dev)
    for score, k, odd_sum in classes:
        better = torch.gt(score, best, out=tmp)  # strict: the first best class wins ties
        torch.maximum(best, score, out=best)
        key.addcmul_(better, k - key)
        sa.addcmul_(better, (1 - sa) if odd_sum else -sa)
    index = t.key_to_index.index_select(0, key.to(torch.int32))  # keys < 2**16 are exact in float32
    odd = (sa - q).abs_()  # (Σa + #negatives) mod 2: flip one sign
    return _ClassBest(ay, neg, q, r, w, k3, p4, neg_o, best, index, odd)


def _best_points(y: list[Tensor], t: _E8PLookup) -> tuple[Tensor, Tensor, Tensor]:
    """Best ``b ∈ B`` for each column of the 8 coordinate rows ``y`` (float32 ``(M,)`` each, ``M ≤ _COLS``).

    Returns ``(gain, code8, hard)``: ``gain = 2⟨b, y⟩ − ‖b‖²`` (float32 ``(M,)``); ``code8`` (int32 ``(M,)``)
    is ``(k << 8) | low`` for the shift ``p = 0`` convention (XOR bit 0 with ``p`` for the other shift);
    ``hard`` (int64) lists the columns where a norm-12 pattern might still win: their result is the best
    of the other 227 patterns and must be finished by :func:`_norm12_finish`.

    Selections use float 0/1 masks and arithmetic (``a += m·(b − a)``): boolean masks, ``masked_fill_`` and
    ``where`` with scalars cost several times more per element in torch's CPU kernels.
    """
    ay, neg, q, r, w, k3, p4, neg_o, best, index, odd = _class_best(y, t)
    M = y[0].shape[0]
    dev = y[0].device
    tmp = torch.empty(M, device=dev)
    y5, y6 = [(k & -8).view(torch.float32) for k in r[4:6]]

    # Norm-12 patterns (3/2)⁵ ½³ (Σa = 9, odd). Putting the 3/2s on the five largest |y_i| bounds their gain
    # by ub; when those five coordinates form one of the 29 patterns (its base-4 key is then in S) the bound
    # is attained (the 1/2s sit on ranks 6..8, so an odd parity flips rank 8, as for the classes).
    # Otherwise the 3/2s cover at most ranks 1-4 and 6, which bounds the gain by ub2; columns where that
    # beats the best are "hard".
    ub = torch.add(neg_o, p4, alpha=2).add_(y5, alpha=2).sub_(12)
    ub2 = torch.add(neg_o, p4, alpha=2).add_(y6, alpha=2).sub_(12)
    k5 = t.key_to_index.index_select(0, (k3 + w[3] + w[4]).to(torch.int32))  # 227..255, or -1
    valid = torch.gt(k5, 0, out=torch.empty(M, device=dev))
    easy = torch.gt(ub, best, out=tmp).mul_(valid)
    best.addcmul_(easy, ub - best)
    index.addcmul_(easy, k5 - index)
    odd.addcmul_(easy, (1 - q).sub_(odd))
    hard = torch.gt(ub2, best, out=tmp).mul_(valid.neg_().add_(1)).nonzero().squeeze(1)

    # Code: high byte = row of S; low byte = sign bits relative to the base pattern a' (last coordinate
    # negated when Σa is odd), with the smallest |y_i| (rank 8) flipped when the parity is odd.
    idx = index.to(torch.int32)
    low = neg ^ (odd.to(torch.int32) << (r[7] & 7)) ^ (t.sum_odd.index_select(0, idx) << 7)
    code8 = (idx << 8).bitwise_or_(low)
    total = ay[0] + ay[1]
    for a in ay[2:]:
        total += a
    return total.add_(best), code8, hard


def _signs_and_parity(y: Tensor, t: _E8PLookup) -> tuple[Tensor, Tensor]:
    """:func:`_sign_byte` for a small ``(8, c)`` tensor: ``(negbyte int64 (c,), q float32 (c,))``."""
    negbyte = ((y.view(torch.int32) >> 31) & t.pow2_col).sum(0)
    return negbyte, t.parity8.index_select(0, negbyte)


def _norm12_finish(x: Tensor, cols: Tensor, obj: Tensor, code: Tensor, t: _E8PLookup) -> None:
    """Exact norm-12 search for the ``cols`` flagged by :func:`_best_points`; updates ``obj``/``code``.

    ``x`` is ``(n, 8)`` float32; ``obj`` and ``code`` are ``(2 n,)`` (shift ``p = 0`` then ``p = 1``; ``obj``
    is the gain plus ``(½ − p)·Σx``, see :func:`_encode`) and ``cols`` (int64) index them.
    """
    n = x.shape[0]
    for s in range(0, cols.numel(), _N12_COLS):
        h = cols[s : s + _N12_COLS]
        p = torch.div(h, n, rounding_mode="floor")
        xs = x.index_select(0, h - p * n)  # (c, 8)
        pf = p.to(torch.float32)
        y = xs.T + (pf * 0.5 - 0.25)  # x − ¼𝟙 (p = 0) or x + ¼𝟙 (p = 1), (8, c)
        ay = y.abs()
        negbyte, q = _signs_and_parity(y, t)
        odd = 1 - q  # Σa = 9 is odd
        g, k = _norm12_gain(ay, odd, t)
        g += ay.sum(0) + (0.5 - pf) * xs.sum(1)
        win = (g > obj.index_select(0, h)).nonzero().squeeze(1)
        if win.numel():
            hw, kw = h[win], k[win]
            j = (t.n12_abs[kw] * ay[:, win].T).argmin(1)  # coordinate to flip if the parity is odd
            low = negbyte[win] ^ (odd[win].to(torch.int64) << j) ^ 128 ^ p[win]  # sum_odd = 1 for all 29
            obj[hw] = g[win]
            code[hw] = (((kw + 227) << 8) | low).to(code.dtype)


def _encode(x: Tensor, t: _E8PLookup, out: Tensor, chunk: int = _CHUNK_ROWS) -> None:
    """Write the codes of the nearest codewords to the rows of ``x`` (float32 ``(n, 8)``) into ``out``
    (integer ``(n,)``), all on ``x``'s device (``t`` must be :func:`lookup_on` that device).

    On the CPU every torch op here works on at most ``_COLS`` elements (single-threaded, see ``_COLS``),
    except the rare exact norm-12 batches which are smaller still; other devices pass a larger ``chunk``
    (8-vectors per pass) so that each op fills the device.
    """
    n = x.shape[0]
    dev = x.device
    # ‖x − s𝟙 − b‖² = ‖x‖² − 2sΣx + 8s² − gain, and ‖x‖², 8s² do not depend on the shift s = ±¼, so the
    # shift with the larger obj = gain + 2sΣx = gain ± ½Σx wins. [:n]: p = 0 (x − ¼𝟙), [n:]: p = 1 (x + ¼𝟙).
    obj = torch.empty(2 * n, device=dev)
    code = torch.empty(2 * n, dtype=torch.int32, device=dev)
    hard = []
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        m = stop - start
        xc = x[start:stop]
        # Both shifts at once: row i holds coordinate i, columns [:m] of x − ¼𝟙 and [m:] of x + ¼𝟙.
        y = torch.empty(8, 2 * m, device=dev)
        half_sx = torch.mul(xc[:, 0], 0.5)
        for i in range(8):
            torch.sub(xc[:, i], 0.25, out=y[i, :m])
            torch.add(xc[:, i], 0.25, out=y[i, m:])
            if i:
                half_sx.add_(xc[:, i], alpha=0.5)
        g, c, h = _best_points(list(y.unbind(0)), t)
        torch.add(g[:m], half_sx, out=obj[start:stop])
        torch.sub(g[m:], half_sx, out=obj[n + start : n + stop])
        code[start:stop] = c[:m]
        torch.bitwise_xor(c[m:], 1, out=code[n + start : n + stop])  # p = 1: bit 0 carries the parity
        if h.numel():
            hard.append(h + torch.where(h < m, start, n + start - m))
    if hard:
        _norm12_finish(x, torch.cat(hard), obj, code, t)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        plus = obj[start:stop] >= obj[n + start : n + stop]
        out[start:stop] = torch.where(plus, code[start:stop], code[n + start : n + stop])


def _best_points_dense(y: list[Tensor], t: _E8PLookup) -> tuple[Tensor, Tensor]:
    """:func:`_best_points` with every norm-12 pattern scored on every column: ``(gain, code8)``, same meaning,
    no list of hard columns (its size would depend on the data, a host round trip on a device).

    The 29 norm-12 patterns ``(3/2)⁵ ½³`` (Σa = 9, odd) are scored exhaustively (:func:`_norm12_gain`, a
    ``(29, 8, M)`` product) and replace the best class where strictly better; the sign to flip when the parity
    is odd is then the coordinate with the smallest ``a_i |y_i|`` (the first such), as in
    :func:`_norm12_finish`. Every index is in range whatever the input (NaN included), so the codes are always
    valid 16-bit codes.
    """
    c = _class_best(y, t)
    ay = torch.stack(c.ay)  # (8, M)
    odd12 = 1 - c.q  # Σa = 9 is odd: flip a sign when the number of negatives is even
    g12, k12 = _norm12_gain(ay, odd12, t)
    win = torch.gt(g12, c.best)  # strict: the short patterns win ties, as in the Numba search
    best = torch.maximum(c.best, g12)
    idx = torch.where(win, k12.to(torch.int32) + 227, c.index.to(torch.int32))
    j12 = (t.n12_abs.index_select(0, k12) * ay.T).argmin(1).to(torch.int32)  # first smallest a_i |y_i|
    flip = torch.where(win, j12, c.r[7] & 7)
    odd = torch.where(win, odd12, c.odd).to(torch.int32)
    low = c.neg ^ (odd << flip) ^ (t.sum_odd.index_select(0, idx) << 7)
    return ay.sum(0).add_(best), (idx << 8).bitwise_or_(low)


#: 8-vectors per pass of :func:`encode_dense`: its largest temporary, the (29, 8, 2 · rows) norm-12 product, is then
#: 61 MiB; one pass covers a BlockLDLQ step at the LLaMa-2 7B shapes (n ≤ 11008 8-vectors)
_DENSE_CHUNK_ROWS = 1 << 15


def encode_dense(x: Tensor, t: _E8PLookup, chunk: int | None = None) -> Tensor:
    """Codes of the nearest E8P codewords of the rows of ``x`` (float32 ``(n, 8)``, finite) as int32 ``(n,)``, on
    ``x``'s device with no host synchronisation: the same exact search as :func:`_encode` (both shifts
    ``s = ±¼``; the shift with the larger ``gain ± ½Σx`` wins, ties to ``+¼``) with the norm-12 patterns scored
    on every column (:func:`_best_points_dense`), so that no tensor size depends on the data. ``t`` is
    :func:`lookup_on` ``x``'s device. Codes can differ from :func:`_encode`'s and the Numba search's only at
    float ties (``tests/quantizers/test_e8p.py`` checks all three against brute force). ``chunk``: 8-vectors per
    pass (default ``_DENSE_CHUNK_ROWS``)."""
    n = x.shape[0]
    chunk = chunk or _DENSE_CHUNK_ROWS
    out = torch.empty(n, dtype=torch.int32, device=x.device)
    for start in range(0, n, chunk):
        xc = x[start : start + chunk]
        m = xc.shape[0]
        y = torch.cat((xc - 0.25, xc + 0.25)).T  # (8, 2m): columns [:m] shift p = 0, [m:] p = 1
        g, code8 = _best_points_dense(list(y.unbind(0)), t)
        half_sx = xc.sum(1).mul_(0.5)
        plus = (g[:m] + half_sx) >= (g[m:] - half_sx)
        out[start : start + m] = torch.where(plus, code8[:m], code8[m:] ^ 1)  # p = 1: bit 0 carries the parity
    return out


def search_on_device(x: Tensor, t: _E8PLookup) -> Tensor:
    """Nearest-codeword codes, int32 ``(n,)``, of the rows of a checked float32 ``(n, 8)`` ``x`` on any device,
    without host synchronisation: the one-kernel Triton search (:func:`caldera.quantizers.e8p_triton.search`) on
    CUDA where it is enabled (:func:`caldera.quantizers.e8p_triton.enabled_on_cuda`), else :func:`encode_dense`
    (``t``: :func:`lookup_on` ``x``'s device)."""
    if x.device.type == "cuda":
        from caldera.quantizers import e8p_triton

        if e8p_triton.enabled_on_cuda():
            return e8p_triton.search(x, t)
    return encode_dense(x, t)


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="caldera-e8p")


#: Search backends: "numba" (compiled loop, :mod:`caldera.quantizers.e8p_kernel`, CPU tensors only) and
#: "torch" (the vectorised search above, any device). "auto" picks numba when it imports; tensors on any
#: other device than the CPU always use "torch" (on their own device: no host round trip, :func:`search_on_device`).
#: the Numba kernel splits inputs of at least this many 8-vectors over the job's threads (it releases the
#: GIL; a BlockLDLQ step quantizes n 8-vectors, n = 4096 or 11008 at LLaMa-2 7B shapes)
_NUMBA_SPLIT_ROWS = 2048
BACKENDS = ("auto", "numba", "torch")


def _with_codebook(name: str):
    """``(kernel, codebook, key_to_index, sum_odd, n12_abs)`` for the compiled kernel ``name`` of
    :mod:`caldera.quantizers.e8p_kernel` that also reads the codebook, or ``None`` without Numba."""
    if _numba_kernel() is None:
        return None
    from . import e8p_kernel

    _, key_to_index, sum_odd, n12_abs = _numba_kernel()
    return getattr(e8p_kernel, name), _lookup().codebook.numpy(), key_to_index, sum_odd, n12_abs


@functools.lru_cache(maxsize=1)
def _numba_ldlq_kernel():
    """The fused BlockLDLQ chunk (``_ldlq_chunk``) with its codebook and lookup arrays (:func:`_with_codebook`),
    or ``None``."""
    return _with_codebook("_ldlq_chunk")


@functools.lru_cache(maxsize=1)
def _numba_kernel():
    """``(kernel, key_to_index, sum_odd, n12_abs)`` for the compiled search, or ``None`` without Numba."""
    try:
        from .e8p_kernel import _encode_rows
    except ImportError:
        return None
    t = _lookup()
    return (
        _encode_rows,
        t.key_to_index.to(torch.int64).numpy(),
        t.sum_odd.to(torch.int64).numpy(),
        t.n12_abs.to(torch.float64).numpy(),
    )


@functools.lru_cache(maxsize=1)
def _numba_rvq_kernel():
    """The compiled two-stage search (``_encode_rvq_rows``) with its codebook and lookup arrays
    (:func:`_with_codebook`), or ``None``."""
    return _with_codebook("_encode_rvq_rows")


def encode_residual_e8p(x: Tensor, resid_scale: float, stage2_bits: int) -> Tensor:
    """Codes ``(c1 << stage2_bits) | c2`` of two-stage residual E8P (``c1`` = E8P(x), ``c2`` = E8P(resid_scale ·
    (x − codeword(c1))), the residual in float32) for a flat float32 CPU ``x`` ``(n, 8)``, already validated, by the
    compiled kernel (:func:`caldera.quantizers.e8p_kernel._encode_rvq_rows`): both searches in one pass, split over
    ``torch.get_num_threads()`` threads from ``_NUMBA_SPLIT_ROWS`` rows (every row independent: the split does not
    change the result). Returns int64 ``(n,)``. Needs Numba (:func:`_numba_rvq_kernel` is not None)."""
    import numpy as np  # with Numba, which needs it

    kernel, cb, key_to_index, sum_odd, n12_abs = _numba_rvq_kernel()
    n = x.shape[0]
    out = torch.empty(n, dtype=torch.int64, device=x.device)  # x's device (the CPU), whatever torch's default
    xs, os_ = x.numpy(), out.numpy()
    rs = np.float32(resid_scale)
    workers = torch.get_num_threads()
    if workers <= 1 or n < _NUMBA_SPLIT_ROWS:
        kernel(xs, rs, stage2_bits, cb, key_to_index, sum_odd, n12_abs, os_)
        return out
    step = -(-n // workers)
    jobs = [
        _pool(workers).submit(kernel, xs[a : a + step], rs, stage2_bits, cb, key_to_index, sum_odd, n12_abs,
                              os_[a : a + step])
        for a in range(0, n, step)
    ]
    for job in jobs:
        job.result()
    return out


def _resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"E8P backend={backend!r}; accepted: {', '.join(BACKENDS)}")
    if backend == "torch":
        return "torch"
    if _numba_kernel() is None:
        if backend == "numba":
            raise ImportError("E8P backend='numba' needs the numba package: pip install numba")
        return "torch"
    return "numba"


def _encode_numba(x: Tensor, t: _E8PLookup, out: Tensor) -> None:
    """:func:`_encode` with the compiled kernel (same contract; ``t`` is unused, the kernel's lookup arrays
    are derived from it once)."""
    kernel, key_to_index, sum_odd, n12_abs = _numba_kernel()
    kernel(x.numpy(), key_to_index, sum_odd, n12_abs, out.numpy())


def _encode_all(x: Tensor, t: _E8PLookup, out: Tensor, backend: str = "torch") -> None:
    """:func:`_encode` over ``x`` (``(n, 8)`` float32) in blocks, writing int32 codes into ``out`` ``(n,)``.

    On the CPU the search itself is single-threaded (see ``_COLS``; the Numba kernel releases the GIL);
    large inputs are split into blocks that run on ``torch.get_num_threads()`` Python threads (torch
    releases the GIL inside its kernels, so the blocks overlap); the Numba kernel is split from
    ``_NUMBA_SPLIT_ROWS`` 8-vectors on (the size of one BlockLDLQ step). Every 8-vector is searched
    independently, so the result does not depend on the split. Other devices search on ``x``'s device without
    host synchronisation (:func:`search_on_device`; ``backend`` must be "torch" there).
    """
    n = x.shape[0]
    if x.device.type != "cpu":
        if backend != "torch":
            raise ValueError(f"E8P backend={backend!r} runs on CPU tensors only; got a tensor on {x.device}")
        out.copy_(search_on_device(x, t))
        return
    encode = _encode_numba if backend == "numba" else _encode
    workers = torch.get_num_threads()
    if backend == "numba" and workers > 1 and _NUMBA_SPLIT_ROWS <= n < 2 * _CHUNK_ROWS:
        step = -(-n // workers)
        jobs = [
            _pool(workers).submit(encode, x[start : start + step], t, out[start : start + step])
            for start in range(0, n, step)
        ]
        for job in jobs:
            job.result()
        return
    if workers <= 1 or n < 2 * _CHUNK_ROWS:
        for start in range(0, n, _BLOCK_ROWS):
            encode(x[start : start + _BLOCK_ROWS], t, out[start : start + _BLOCK_ROWS])
        return
    step = min(_BLOCK_ROWS, max(_CHUNK_ROWS, -(-n // (4 * workers))))  # ≥ 4 blocks per worker if possible
    jobs = [
        _pool(workers).submit(encode, x[start : start + step], t, out[start : start + step])
        for start in range(0, n, step)
    ]
    for job in jobs:
        job.result()


class E8P(Quantizer):
    """QuIP#'s E8P12 codebook: 65,536 codewords in ``E8 + ¼𝟙``, 16-bit code per 8 weights (2 bits/weight).

    ``quantize(x)``: ``x`` ``(..., n)`` floating (any float dtype, searched in float32), ``n % 8 == 0``,
    finite with ``max|x| ≤ 1e36`` -> int32 codes ``(..., n // 8)`` in ``[0, 65535]`` of the nearest codewords
    (exact search, see the module docstring). ``dequantize(codes)``: integer codes ``(..., m)`` -> float32
    ``(..., 8 m)``. ``round(x)`` = ``dequantize(quantize(x))``. Codes are stored as int32 but carry exactly
    16 bits; :meth:`pack_codes` gives the 2-bytes-per-code form. Instances are stateless and share the
    codebook and its lookup arrays, which are built once per process (~20 ms).

    ``backend``: ``"auto"`` (default: the compiled Numba search when Numba imports, else torch), ``"numba"``
    or ``"torch"`` (the vectorised reference). Both are exact; they can differ only on float ties. The
    backend applies to CPU tensors; tensors on another device (CUDA, ...) are searched by the torch path on
    that device, and codes on a device are dequantized with the codebook copied there once (cached).
    """

    name = "e8p"
    block_size = 8
    bits_per_weight = 2.0
    opt_scale = 1.03  # QuIP# E8P12 opt_scale (quip-sharp.md section 1)
    code_dtype = torch.int32
    num_codes = _NUM_CODES

    def __init__(self, backend: str = "auto") -> None:
        self._t = _lookup()
        self.backend = _resolve_backend(backend)

    @property
    def codebook(self) -> Tensor:
        """``(65536, 8)`` float32; row ``i`` is the codeword of code ``i`` (a copy, safe to modify)."""
        return self._t.codebook.clone()

    @property
    def abs_patterns(self) -> Tensor:
        """``(256, 8)`` float32: the abs patterns S (row ``k`` is the high byte ``k``); a copy."""
        return self._t.abs_f.clone()

    def _flat(self, x: Tensor, arg: str) -> Tensor:
        check_values(x, arg)
        check_finite(x, arg, MAX_ABS_INPUT)
        self.check_shape(x, arg)
        return x.detach().to(torch.float32).reshape(-1, 8).contiguous()

    def quantize(self, x: Tensor) -> Tensor:
        """Nearest-codeword codes: float ``(..., n)`` -> int32 ``(..., n // 8)``."""
        xf = self._flat(x, "x")
        codes = torch.empty(xf.shape[0], dtype=torch.int32, device=xf.device)
        cpu = xf.device.type == "cpu"
        _encode_all(xf, lookup_on(xf.device), codes, self.backend if cpu else "torch")
        return codes.reshape(*x.shape[:-1], x.shape[-1] // 8)

    def quantize_validated(self, x: Tensor) -> Tensor:
        """:meth:`quantize` of a float32 ``x`` ``(..., n)`` (``n % 8 == 0``) that the caller has already checked
        (finite: BlockLDLQ checks its matrix once, not each block): no checks, hence no host synchronisation on a
        device. CPU tensors with the Numba backend take the same search as :meth:`quantize`; every other tensor
        takes :func:`search_on_device` (on the CPU the torch search of :func:`encode_dense`). Returns int32
        ``(..., n // 8)``."""
        xf = x.detach().to(torch.float32).reshape(-1, 8).contiguous()
        if xf.device.type == "cpu" and self.backend == "numba":
            codes = torch.empty(xf.shape[0], dtype=torch.int32, device=xf.device)
            _encode_all(xf, self._t, codes, "numba")
        else:
            codes = search_on_device(xf, lookup_on(xf.device))
        return codes.reshape(*x.shape[:-1], x.shape[-1] // 8)

    def dequantize_validated(self, codes: Tensor) -> Tensor:
        """:meth:`dequantize` of int32 or int64 codes known to lie in ``[0, 65535]`` (those of
        :meth:`quantize_validated`): no range check, hence no host synchronisation. Returns float32
        ``(..., 8 m)``."""
        flat = lookup_on(codes.device).codebook.index_select(0, codes.reshape(-1))
        return flat.reshape(*codes.shape[:-1], codes.shape[-1] * 8)

    def fused_ldlq_available(self, x: Tensor) -> bool:
        """Whether :meth:`fused_ldlq_chunk` runs for tensors like ``x``: CPU tensors with the Numba backend (the
        compiled chunk), CUDA tensors where the Triton kernels are enabled (the chunk kernel of
        :func:`caldera.quantizers.e8p_triton.ldlq_chunk`; :func:`caldera.quantizers.e8p_triton.enabled_on_cuda`)."""
        if x.device.type == "cuda":
            from caldera.quantizers import e8p_triton

            return e8p_triton.enabled_on_cuda()
        return self.backend == "numba" and x.device.type == "cpu" and _numba_ldlq_kernel() is not None

    def fused_ldlq_chunk(
        self, F: Tensor | None, Lc: Tensor, W: Tensor, W_hat: Tensor, delta: Tensor, codes: Tensor
    ) -> None:
        """BlockLDLQ inside one chunk of columns, compiled (:func:`caldera.quantizers.e8p_kernel._ldlq_chunk`;
        the shapes and the recurrence are documented there). CPU tensors: float32 ``W``, ``W_hat``, ``delta``
        ``(n, c)``, ``F`` ``(n, c)`` (the later chunks' feedback) or None (none yet), ``Lc`` ``(c, c)``, int32
        ``codes`` ``(n, c // 8)``; each may be a strided view with unit stride along its rows (a column slice of
        the whole matrix), written in place. Rows are independent: they are split over
        ``torch.get_num_threads()`` threads (the kernel releases the GIL), which does not change the result.
        Tensors off the CPU, or with the torch backend, take the Triton chunk kernel
        (:func:`caldera.quantizers.e8p_triton.ldlq_chunk`: one program per tile of rows, the in-chunk feedback
        summed in float32; same contract).
        """
        if W.device.type != "cpu" or self.backend != "numba":
            from caldera.quantizers import e8p_triton

            e8p_triton.ldlq_chunk(F, Lc, W, W_hat, delta, codes, lookup_on(W.device))
            return
        kernel, cb, key_to_index, sum_odd, n12_abs = _numba_ldlq_kernel()
        n = W.shape[0]
        has_F = F is not None
        arrays = [t.numpy() for t in (F if has_F else W, Lc, W, W_hat, delta, codes)]
        workers = torch.get_num_threads()
        if workers <= 1 or n < _NUMBA_SPLIT_ROWS:
            kernel(arrays[0], has_F, arrays[1], arrays[2], cb, key_to_index, sum_odd, n12_abs, *arrays[3:])
            return
        step = -(-n // workers)
        jobs = [
            _pool(workers).submit(
                kernel, arrays[0][a : a + step], has_F, arrays[1], arrays[2][a : a + step], cb, key_to_index,
                sum_odd, n12_abs, arrays[3][a : a + step], arrays[4][a : a + step], arrays[5][a : a + step],
            )
            for a in range(0, n, step)
        ]
        for job in jobs:
            job.result()

    def dequantize(self, codes: Tensor) -> Tensor:
        """Codewords for integer codes ``(..., m)`` in ``[0, 65535]`` (any integer dtype, e.g. the uint16 a
        checkpoint stores) -> float32 ``(..., 8 m)``."""
        check_codes(codes, "codes", _NUM_CODES)
        idx = codes.reshape(-1)
        if idx.dtype not in (torch.int32, torch.int64):
            idx = idx.to(torch.int64)
        flat = lookup_on(idx.device).codebook.index_select(0, idx)
        return flat.reshape(*codes.shape[:-1], codes.shape[-1] * 8)

    def round(self, x: Tensor) -> Tensor:
        """Nearest codewords, float32 with ``x``'s shape (``dequantize(quantize(x))``)."""
        return self.dequantize(self.quantize(x)).reshape(x.shape)

    @staticmethod
    def pack_codes(codes: Tensor) -> Tensor:
        """``(..., m)`` integer codes in ``[0, 65535]`` -> ``(..., 2 m)`` uint8, little-endian (low byte first)."""
        check_codes(codes, "codes", _NUM_CODES)
        c = codes.to(torch.int32)
        packed = torch.stack(((c & 0xFF), (c >> 8)), dim=-1).to(torch.uint8)
        return packed.reshape(*codes.shape[:-1], codes.shape[-1] * 2)

    @staticmethod
    def unpack_codes(packed: Tensor) -> Tensor:
        """Inverse of :meth:`pack_codes`: ``(..., 2 m)`` uint8 -> ``(..., m)`` int32 codes."""
        if not isinstance(packed, Tensor) or packed.dtype != torch.uint8:
            raise ValueError(f"packed: expected a uint8 tensor, got {getattr(packed, 'dtype', type(packed))}")
        if packed.ndim == 0 or packed.shape[-1] % 2:
            raise ValueError(f"packed: last dimension must be even (2 bytes per code), got {tuple(packed.shape)}")
        p = packed.reshape(*packed.shape[:-1], packed.shape[-1] // 2, 2).to(torch.int32)
        return p[..., 0] | (p[..., 1] << 8)
