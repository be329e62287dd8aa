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
all 227 patterns with a few O(1) formulas. The 29 norm-12 patterns are not permutation-closed; their score
is at most ``2 Σ_{5 largest}|y| − 12 (− 2 min|y| if odd)``, and only rows where that bound beats the best
class (a few percent at RMS 1.03) get an exact 29-pattern search. The result attains the brute-force
minimum distance over all 65,536 codewords (ties broken arbitrarily); ``tests/quantizers/test_e8p.py``
checks this against brute force.

Shapes and dtypes: ``quantize`` takes ``(..., n)`` floating tensors with ``n % 8 == 0`` and returns
``(..., n // 8)`` int32 codes in ``[0, 65535]``; ``dequantize`` returns float32 ``(..., n)``.
``pack_codes`` / ``unpack_codes`` convert to/from exactly 2 bytes (uint8) per code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Quantizer

# QuIP# get_norm12(): the 29 norm-12 abs patterns, written as 2|x| (3 -> 3/2, 1 -> 1/2), upstream order
# (quip-sharp.md section 1; upstream's duplicate was fixed in 2023-12 and these 29 are distinct).
NORM12_PATTERNS_2X: tuple[str, ...] = (
    "31113333 13113333 11313333 11133333 33313311 33313131 33311331 33313113 33311313 33311133 "
    "33133311 33133131 33131331 33133113 33131313 33131133 31333311 31333131 31331331 31333113 "
    "31331313 13331133 13333311 13333131 13331331 13333113 13331313 11331333 33113331"
).split()

_CHUNK_ROWS = 2040  # 8-vectors per search chunk: 8 x 2 x 2040 < 32768, see _N12_COLS
_BLOCK_ROWS = 1 << 18  # 8-vectors per block: bounds the (2, block) gain/code buffers to 6 MiB
_NUM_CODES = 1 << 16


def check_finite(x: Tensor, arg: str) -> None:
    """Raise ``ValueError`` naming ``arg`` if ``x`` is not a floating tensor or has NaN/Inf entries."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{arg}: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{arg}: expected a floating-point tensor, got dtype {x.dtype}")
    if x.numel() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{arg}: contains NaN or Inf entries; only finite values can be quantized")


def check_codes(codes: Tensor, arg: str, upper: int) -> None:
    """Raise ``ValueError`` unless ``codes`` is an integer tensor with values in ``[0, upper)``."""
    if not isinstance(codes, Tensor):
        raise ValueError(f"{arg}: expected a torch.Tensor, got {type(codes).__name__}")
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise ValueError(f"{arg}: expected an integer tensor of codes, got dtype {codes.dtype}")
    if codes.ndim == 0:
        raise ValueError(f"{arg}: expected at least one dimension, got a scalar")
    if codes.numel():
        lo, hi = int(codes.min()), int(codes.max())
        if lo < 0 or hi >= upper:
            raise ValueError(f"{arg}: code values must lie in [0, {upper - 1}], got range [{lo}, {hi}]")


@dataclass(frozen=True)
class _E8PTables:
    abs2: Tensor  # (256, 8) int64, 2|x| of the abs patterns S
    abs_f: Tensor  # (256, 8) float32, the abs patterns S
    sum_odd: Tensor  # (256,) int64, 1 where sum(S[k]) is odd (last coordinate negated before flipping)
    key_to_index: Tensor  # (4**8,) int64: base-4 key of (2|x|-1)/2 -> row of S (or -1)
    codebook: Tensor  # (65536, 8) float32
    n12_abs: Tensor  # (29, 8) float32, the norm-12 patterns (rows 227..255 of S)
    n12_mask3: Tensor  # (29, 8) float32, 1 where the norm-12 pattern is 3/2
    top5_to_norm12: Tensor  # (256,) int64: bit mask of the 3/2 positions -> norm-12 pattern 0..28 (or -1)


def _short_patterns_2x() -> Tensor:
    """The 227 distinct 2|x| for x in D̂8 with ‖x‖² ≤ 10, in this module's documented order (int64 (227, 8)).

    Every abs pattern of odd half-integers occurs in D̂8 (flipping one sign changes the sum by an odd
    integer), so these are all tuples over {1, 3, 5, 7} with Σ (2x_i)² ≤ 40.
    """
    odd = torch.tensor([1, 3, 5, 7], dtype=torch.int64)
    grid = torch.cartesian_prod(*([odd] * 8))  # (4**8, 8), ascending lexicographic order
    norm = (grid * grid).sum(1)
    keep = norm <= 40
    grid, norm = grid[keep], norm[keep]
    order = torch.sort(norm, stable=True).indices  # by norm; lexicographic within a norm
    return grid[order]


@functools.lru_cache(maxsize=1)
def _tables() -> _E8PTables:
    n12 = torch.tensor([[int(c) for c in s] for s in NORM12_PATTERNS_2X], dtype=torch.int64)
    abs2 = torch.cat((_short_patterns_2x(), n12))
    assert abs2.shape == (256, 8), abs2.shape
    abs_f = abs2.to(torch.float32) / 2
    sum_odd = (abs2.sum(1) // 2) % 2

    digits = (abs2 - 1) // 2  # 0, 1, 2 for 1/2, 3/2, 5/2
    keys = (digits * (4 ** torch.arange(8))).sum(1)
    key_to_index = torch.full((4**8,), -1, dtype=torch.int64)
    key_to_index[keys] = torch.arange(256)

    top5 = torch.full((256,), -1, dtype=torch.int64)
    top5[((abs2[227:] == 3).to(torch.int64) << torch.arange(8)).sum(1)] = torch.arange(29)

    codes = torch.arange(_NUM_CODES)
    k = codes >> 8
    bits = (codes[:, None] >> torch.arange(8)) & 1  # (65536, 8) sign bits of the low byte
    p = bits.sum(1) % 2
    flips = bits.clone()
    flips[:, 0] ^= p  # even-weight flip pattern
    base = abs_f[k].clone()
    base[:, 7] *= 1 - 2 * sum_odd[k].to(torch.float32)  # odd |x| sum: negate last coordinate first
    cb = base * (1 - 2 * flips).to(torch.float32) + torch.where(p == 0, 0.25, -0.25)[:, None]
    return _E8PTables(
        abs2=abs2,
        abs_f=abs_f,
        sum_odd=sum_odd,
        key_to_index=key_to_index,
        codebook=cb.to(torch.float32).contiguous(),
        n12_abs=abs_f[227:].contiguous(),
        n12_mask3=(abs2[227:] == 3).to(torch.float32).contiguous(),
        top5_to_norm12=top5,
    )


# Scoring constants (see the module docstring). Score rows 0..6 are the permutation-closed classes
# ½⁸, (3/2)^k ½^(8−k) for k = 1..4, 5/2 ½⁷, 5/2 3/2 ½⁶; row 7 is the upper bound for the norm-12 patterns
# (3/2)⁵ ½³. Relative to Σ|y|, class c scores  2·Σ_k (a_(k) − ½)·y(k) − ‖a‖² − 2·y(8)·odd_c  with
# odd_c = (Σa_c + #negatives) mod 2 = sa_c + q − 2·sa_c·q.
_SCORE_NORM2 = torch.tensor([2, 4, 6, 8, 10, 8, 10, 12], dtype=torch.float32)[:, None]  # ‖a‖²
_SCORE_SUM_ODD = torch.tensor([0, 1, 0, 1, 0, 0, 1, 1], dtype=torch.float32)[:, None]  # sa: Σa mod 2
_PEN_Y8 = -2 * _SCORE_SUM_ODD  # coefficient of y(8)
_PEN_QY8 = -2 * (1 - 2 * _SCORE_SUM_ODD)  # coefficient of q·y(8)
_CLASS_SUM_ODD = _SCORE_SUM_ODD[:7, 0].to(torch.int64)
# Base-4 key digits (0: 1/2, 1: 3/2, 2: 5/2) of each class on the coordinates ranked 1..4 by |y|.
_CLASS_DIGITS_T = torch.tensor(
    [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [2, 0, 0, 0], [2, 1, 0, 0]],
    dtype=torch.float32,
).T.contiguous()  # (4, 7)
_POW4_F = 4.0 ** torch.arange(8, dtype=torch.float32)
_POW2_COL = (2 ** torch.arange(8, dtype=torch.int32))[:, None]
_ROW_INDEX = torch.arange(8, dtype=torch.int32)[:, None]
_PARITY8 = torch.tensor([bin(i).count("1") & 1 for i in range(256)], dtype=torch.float32)
# Optimal 19-comparator sorting network for 8 inputs (Knuth, TAOCP vol. 3, 5.3.4); checked by the 0-1
# principle in tests/quantizers/test_e8p.py. Each pair (i, j), i < j, leaves the larger value at i.
SORT8_NETWORK: tuple[tuple[int, int], ...] = (
    (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7), (0, 1), (2, 3),
    (4, 5), (6, 7), (2, 4), (3, 5), (1, 4), (3, 6), (1, 2), (3, 4), (5, 6),
)  # fmt: skip
# torch runs an elementwise op or reduction on one thread when it has fewer than 32768 elements
# (at::internal::GRAIN_SIZE). Every op in the search works on at most 8 × (2 × _CHUNK_ROWS) or
# 29 × 8 × _N12_COLS elements, so the search never opens an OpenMP parallel region: thousands of tiny
# parallel regions are slow, and catastrophically so when other processes compete for the cores.
_N12_COLS = 128


def _sort_desc(ay: Tensor) -> tuple[Tensor, Tensor]:
    """Sort the 8 rows of ``ay`` (``(8, m)`` float32, ≥ 0) per column, descending.

    Returns ``(vals, pos)`` for ranks 1–5, 8 and 6 (in that order): ``vals`` ``(7, m)`` float32 and
    ``pos`` ``(7, m)`` int32 (the coordinate holding each rank). Non-negative float32 values order like their bit patterns
    read as int32, so each entry is packed as its bits with the 3 lowest mantissa bits replaced by the
    coordinate (distinct keys, ties broken by coordinate) and sorted with a sorting network of elementwise
    ``maximum``/``minimum`` (several times faster than ``torch.sort`` on rows of 8). ``vals`` are the packed
    values with those 3 bits cleared: they, and the order of values closer than 8 ulps, are off by at most
    a relative 2⁻²⁰, which moves a score by at most ~2⁻¹⁸·|y|, the size of float32 rounding in the
    scores themselves.
    """
    keys = (ay.view(torch.int32) & -8) | _ROW_INDEX
    r = list(keys.unbind(0))
    sel = torch.empty((7, ay.shape[1]), dtype=torch.int32)
    # Ranks 1, 8, 2..5 are final after comparators 9, 12, 17, 18; the last one (5, 6) yields rank 6.
    final = {8: (0, None), 11: (None, 5), 16: (1, 2), 17: (3, 4), 18: (6, None)}
    for n, (i, j) in enumerate(SORT8_NETWORK):
        oi, oj = final.get(n, (None, None))
        hi = torch.maximum(r[i], r[j], out=sel[oi]) if oi is not None else torch.maximum(r[i], r[j])
        if n < 18:
            r[j] = torch.minimum(r[i], r[j], out=sel[oj]) if oj is not None else torch.minimum(r[i], r[j])
        r[i] = hi
    return (sel & -8).view(torch.float32), sel & 7


def _argmax_rows(s: Tensor) -> tuple[Tensor, Tensor]:
    """Column-wise maximum and first arg-maximum of ``s`` (``(r, m)`` float32 -> ``(m,)``, ``(m,)`` int64).

    ``Tensor.max(dim=0)`` and boolean masks are slow on CPU for short columns; this uses only float
    arithmetic: ``sign(s − max) + 1`` is 1 exactly at the maxima.
    """
    best = s.amax(0)
    hit = torch.sign(s - best).add_(1)
    rank = torch.arange(s.shape[0], 0, -1, dtype=torch.float32)[:, None]  # r, r-1, ..., 1
    first = (hit * rank).amax(0)
    return best, (s.shape[0] - first).to(torch.int64)


def _pairwise_min8(v: Tensor) -> Tensor:
    """Minimum over dim 1 of a ``(k, 8, c)`` tensor -> ``(k, c)`` (three elementwise ``minimum`` steps)."""
    v = torch.minimum(v[:, :4], v[:, 4:])
    v = torch.minimum(v[:, :2], v[:, 2:])
    return torch.minimum(v[:, 0], v[:, 1])


def _norm12_gain(ay: Tensor, odd: Tensor, t: _E8PTables) -> tuple[Tensor, Tensor]:
    """Best norm-12 pattern for each column of ``ay`` (``(8, c)`` = |y|, ``c ≤ _N12_COLS``; ``odd`` ``(c,)``
    float 0/1). Returns ``(gain, k)``: gain relative to Σ|y| (float32 ``(c,)``), pattern (int64, 0..28)."""
    prod = t.n12_abs[:, :, None] * ay[None]  # (29, 8, c): a_i |y_i|
    # Σ a_i|y_i| = Σ|y|/2 + Σ_{a_i = 3/2} |y_i|, so relative to Σ|y| the gain is 2 Σ_{3/2}|y_i| − 12.
    g = (t.n12_mask3[:, :, None] * ay[None]).sum(1).mul_(2).sub_(12)
    g -= 4 * odd * _pairwise_min8(prod)  # odd parity: one sign flipped, the cheapest one
    return _argmax_rows(g)


def _signs_and_parity(y: Tensor) -> tuple[Tensor, Tensor]:
    """``(negbyte, q)`` for ``y`` ``(8, m)``: bit ``i`` of ``negbyte`` (int64) is the sign bit of ``y_i``;
    ``q`` (float32 0/1) is the parity of the number of set bits."""
    negbyte = ((y.view(torch.int32) >> 31) & _POW2_COL).sum(0)
    return negbyte, _PARITY8.index_select(0, negbyte)


def _best_points(y: Tensor, t: _E8PTables) -> tuple[Tensor, Tensor, Tensor]:
    """Best ``b ∈ B`` for each column of ``y`` (``(8, m)`` float32, one 8-vector per column).

    Returns ``(gain, code8, hard)``: ``gain = 2⟨b, y⟩ − ‖b‖²`` (float32 ``(m,)``); ``code8`` (int64 ``(m,)``)
    is ``(k << 8) | low`` for the shift ``p = 0`` convention (XOR bit 0 with ``p`` for the other shift);
    ``hard`` (int64) lists the columns where a norm-12 pattern might still win: their result is the best
    of the other 227 patterns and must be finished by :func:`_norm12_finish`.
    """
    m = y.shape[1]
    ay = y.abs()
    negbyte, q = _signs_and_parity(y)
    qi = q.to(torch.int64)
    vals, pos = _sort_desc(ay)
    y1, y2, y8, y6 = vals[0], vals[1], vals[5], vals[6]

    lin = torch.empty(8, m)  # 2 Σ_k (a_(k) − ½) y(k) for each class
    lin[0] = 0
    torch.cumsum(vals[:4], 0, out=lin[1:5])
    torch.add(lin[4], vals[4], out=lin[7])
    lin[1:5] *= 2
    lin[7] *= 2
    torch.mul(y1, 4, out=lin[5])
    torch.add(lin[5], y2, alpha=2, out=lin[6])
    # Bound for norm-12 patterns not on the five largest |y_i|: 2(y(1)+…+y(4)+y(6)) − 12 (− 2 y(8) if odd).
    ub2 = torch.add(lin[4], y6, alpha=2).sub_(12)
    y8q = y8 * q
    scores = lin.sub_(_SCORE_NORM2).addcmul_(_PEN_Y8, y8).addcmul_(_PEN_QY8, y8q)
    best, cls = _argmax_rows(scores[:7])

    # Base-4 key of the winning arrangement: the class digits sit on the top-ranked coordinates.
    pow4 = _POW4_F.index_select(0, pos[:4].reshape(-1)).view(4, m)
    key = (_CLASS_DIGITS_T.index_select(1, cls) * pow4).sum(0).to(torch.int64)  # exact: < 2**24
    index = t.key_to_index.index_select(0, key)
    odd = _CLASS_SUM_ODD.index_select(0, cls) ^ qi

    # Norm-12 patterns (3/2)⁵ ½³ (Σa = 9, odd). Score row 7 bounds their gain by putting the 3/2s on the
    # five largest |y_i|; when those five positions are one of the 29 patterns the bound is attained (the
    # 1/2s sit on ranks 6..8, so an odd parity flips rank 8, like the classes).
    ub = scores[7]
    k5 = t.top5_to_norm12.index_select(0, (1 << pos[:5]).sum(0))
    easy = (ub > best) & (k5 >= 0)
    best = torch.where(easy, ub, best)
    index = torch.where(easy, k5 + 227, index)
    odd = torch.where(easy, 1 - qi, odd)
    # Odd parity: flip the sign of the smallest |y_i| (it carries a 1/2 in every case above).
    signs = negbyte ^ (odd << pos[5])
    code8 = (index << 8) | (signs ^ (t.sum_odd.index_select(0, index) << 7))  # relative to base pattern a'
    ub2.sub_(2 * y8 - 2 * y8q)
    hard = ((k5 < 0) & (ub2 > best)).nonzero().squeeze(1)
    return ay.sum(0) + best, code8, hard


def _norm12_finish(x: Tensor, cols: Tensor, gain: Tensor, code: Tensor, t: _E8PTables) -> None:
    """Exact norm-12 search for the ``cols`` flagged by :func:`_best_points`; updates ``gain``/``code``.

    ``x`` is ``(n, 8)`` float32; ``gain`` and ``code`` are ``(2 n,)`` views (shift ``p = 0`` then ``p = 1``)
    and ``cols`` (int64) index them.
    """
    n = x.shape[0]
    for s in range(0, cols.numel(), _N12_COLS):
        h = cols[s : s + _N12_COLS]
        p = torch.div(h, n, rounding_mode="floor")
        y = x.index_select(0, h - p * n).T + (p.to(torch.float32) * 0.5 - 0.25)  # x − ¼ (p = 0), x + ¼
        ay = y.abs()
        negbyte, q = _signs_and_parity(y)
        odd = 1 - q  # Σa = 9 is odd
        g, k = _norm12_gain(ay, odd, t)
        g += ay.sum(0)
        win = (g > gain.index_select(0, h)).nonzero().squeeze(1)
        if win.numel():
            hw, kw = h[win], k[win]
            j = (t.n12_abs[kw] * ay[:, win].T).argmin(1)  # coordinate to flip if the parity is odd
            low = negbyte[win] ^ (odd[win].to(torch.int64) << j) ^ 128 ^ p[win]  # sum_odd = 1 for all 29
            gain[hw] = g[win]
            code[hw] = ((kw + 227) << 8) | low


def _encode(x: Tensor, t: _E8PTables) -> Tensor:
    """Codes (int64 ``(n,)``) of the nearest codewords to the rows of ``x`` (float32 ``(n, 8)``)."""
    n = x.shape[0]
    gain = torch.empty(2 * n)  # [:n]: shift p = 0 (x − ¼𝟙), [n:]: p = 1 (x + ¼𝟙)
    code = torch.empty(2 * n, dtype=torch.int64)
    hard = []
    for start in range(0, n, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, n)
        m = stop - start
        xc = x[start:stop]
        # Both shifts at once, one 8-vector per column: columns [:m] hold x − ¼𝟙, [m:] x + ¼𝟙.
        y = torch.empty(8, 2 * m)
        torch.sub(xc.T, 0.25, out=y[:, :m])
        torch.add(xc.T, 0.25, out=y[:, m:])
        g, c, h = _best_points(y, t)
        gain[start:stop], gain[n + start : n + stop] = g[:m], g[m:]
        code[start:stop], code[n + start : n + stop] = c[:m], c[m:] ^ 1  # p = 1: bit 0 carries the parity
        if h.numel():
            hard.append(h + torch.where(h < m, start, n + start - m))
    if hard:
        _norm12_finish(x, torch.cat(hard), gain, code, t)
    # ‖x − s𝟙 − b‖² = ‖x‖² − 2sΣx + 8s² − gain; ‖x‖² and 8s² are the same for both shifts.
    half_sx = 0.5 * x.sum(1)
    return torch.where(gain[:n] + half_sx >= gain[n:] - half_sx, code[:n], code[n:])


class E8P(Quantizer):
    """QuIP#'s E8P12 codebook: 65,536 codewords in ``E8 + ¼𝟙``, 16-bit code per 8 weights (2 bits/weight).

    ``quantize(x)``: ``x`` ``(..., n)`` floating, ``n % 8 == 0``, finite -> int32 codes ``(..., n // 8)`` in
    ``[0, 65535]`` (exact nearest codeword). ``dequantize(codes)``: integer codes -> float32 ``(..., n)``.
    """

    name = "e8p"
    block_size = 8
    bits_per_weight = 2.0
    opt_scale = 1.03  # QuIP# E8P12 opt_scale (quip-sharp.md section 1)
    code_dtype = torch.int32
    num_codes = _NUM_CODES

    def __init__(self) -> None:
        self._t = _tables()

    @property
    def codebook(self) -> Tensor:
        """``(65536, 8)`` float32; row ``i`` is the codeword of code ``i`` (a copy, safe to modify)."""
        return self._t.codebook.clone()

    @property
    def abs_patterns(self) -> Tensor:
        """``(256, 8)`` float32: the abs patterns S (row ``k`` is the high byte ``k``); a copy."""
        return self._t.abs_f.clone()

    def _flat(self, x: Tensor, arg: str) -> Tensor:
        check_finite(x, arg)
        self.check_shape(x, arg)
        return x.detach().to(torch.float32).reshape(-1, 8).contiguous()

    def quantize(self, x: Tensor) -> Tensor:
        """Nearest-codeword codes: float ``(..., n)`` -> int32 ``(..., n // 8)``."""
        xf = self._flat(x, "x")
        codes = torch.empty(xf.shape[0], dtype=torch.int32)
        for start in range(0, xf.shape[0], _BLOCK_ROWS):
            stop = min(start + _BLOCK_ROWS, xf.shape[0])
            codes[start:stop] = _encode(xf[start:stop], self._t)
        return codes.reshape(*x.shape[:-1], x.shape[-1] // 8)

    def dequantize(self, codes: Tensor) -> Tensor:
        """Codewords for int codes ``(..., m)`` in ``[0, 65535]`` -> float32 ``(..., 8 m)``."""
        check_codes(codes, "codes", _NUM_CODES)
        flat = self._t.codebook.index_select(0, codes.reshape(-1).to(torch.int64))
        return flat.reshape(*codes.shape[:-1], codes.shape[-1] * 8)

    def round(self, x: Tensor) -> Tensor:
        """Nearest codewords, float32 with ``x``'s shape."""
        xf = self._flat(x, "x")
        out = torch.empty_like(xf)
        cb = self._t.codebook
        for start in range(0, xf.shape[0], _BLOCK_ROWS):
            stop = min(start + _BLOCK_ROWS, xf.shape[0])
            torch.index_select(cb, 0, _encode(xf[start:stop], self._t), out=out[start:stop])
        return out.reshape(x.shape)

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
