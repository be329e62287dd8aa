"""The exact nearest-codeword search of the E8P codebook (:mod:`caldera.quantizers.e8p_codebook`), vectorised in
torch: :func:`encode_rows` (the CPU search, single-threaded torch ops), :func:`encode_dense` (no host
synchronisation, any device) and :func:`search_on_device` (the Triton kernel on CUDA where it is enabled); the
elementwise pieces :func:`sign_byte`, :func:`packed_keys` and :func:`sort8` also serve the E81B search of
:mod:`caldera.quantizers.rvq`.

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
``tests/quantizers/test_e8p.py`` and ``tests/quantizers/test_e8p_search.py`` check this against brute force on
Gaussian, adversarial and random inputs.

(The Conway–Sloane decoder of D̂8 followed by a membership test of ``|b|`` in S, the other obvious design,
falls back for 17 % / 32 % / 95 % of pairs at RMS 0.9 / 1.03 / 2: at the design RMS the nearest D̂8 point is
often outside the codebook, so the exact fallback would dominate the cost.)

**Implementation.** Pure torch on CPU. The 8 coordinates are held as 8 separate rows of up to ``COLS``
(8-vector, shift) columns, so that every op has fewer than 32768 elements and runs on the calling thread
(torch's OpenMP grain size): ~200 small ops per 16k 8-vectors, no ``torch.sort`` (a 19-comparator sorting
network on packed int32 keys), no boolean masks in the hot path (float 0/1 masks and arithmetic
selection). Large inputs are split into blocks on ``torch.get_num_threads()`` Python threads by the caller
(:class:`caldera.quantizers.e8p.E8P`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from caldera.quantizers.e8p_codebook import E8PLookup, lookup_on

# Class scores (see the module docstring). Classes 0..6 are the permutation-closed classes ½⁸,
# (3/2)^k ½^(8−k) for k = 1..4, 5/2 ½⁷ and 5/2 3/2 ½⁶. Relative to Σ|y| (|y| sorted: y(1) ≥ … ≥ y(8)),
# class c scores  2·Σ_k (a_(k) − ½)·y(k) − ‖a‖² − 2·y(8)·odd_c,  odd_c = (Σa_c + #negatives) mod 2.
# A pattern is identified by its base-4 key Σ_i d_i 4^i, digit d_i = (2|x_i| − 1)/2 (0, 1, 2 for ½, 3/2, 5/2).

# Optimal 19-comparator sorting network for 8 inputs (Knuth, TAOCP vol. 3, 5.3.4); checked by the 0-1
# principle in tests/quantizers/test_e8p_search.py. Each pair (i, j), i < j, leaves the larger value at i.
SORT8_NETWORK: tuple[tuple[int, int], ...] = (
    (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7), (0, 1), (2, 3),
    (4, 5), (6, 7), (2, 4), (3, 5), (1, 4), (3, 6), (1, 2), (3, 4), (5, 6),
)  # fmt: skip
# torch runs an elementwise op on one thread when it has fewer than 32768 elements
# (at::internal::GRAIN_SIZE) and opens an OpenMP parallel region otherwise. The search keeps the 8
# coordinates as 8 separate rows of COLS columns (one column per (8-vector, shift) pair) and every op
# works on one row, so it never opens a parallel region: thousands of small parallel regions are slow,
# and catastrophically so when other processes compete for the cores. Rows of ~32k elements keep the
# per-op Python/dispatch overhead small relative to the arithmetic.
COLS = 32640
CHUNK_ROWS = COLS // 2  # 8-vectors per search chunk (both shifts of each vector are searched at once)
_N12_COLS = 128  # columns per exact norm-12 batch: 29 x 8 x 128 < 32768


def sign_byte(rows: list[Tensor]) -> tuple[Tensor, Tensor]:
    """``(negbyte, q)`` for 8 rows ``y_i`` (float32, same shape): bit ``i`` of ``negbyte`` (int32) is the sign
    bit of ``y_i``; ``q`` (float32 0/1) is the parity of the number of set bits."""
    negbyte = (rows[0].view(torch.int32) >> 31) & 1
    for i in range(1, 8):
        # arithmetic shift: bit i of (v >> (31 − i)) is the sign bit of v
        negbyte |= (rows[i].view(torch.int32) >> (31 - i)) & (1 << i)
    return negbyte, lookup_on(negbyte.device).parity8.index_select(0, negbyte)


def sort8(rows: list[Tensor]) -> list[Tensor]:
    """Elementwise descending sort of 8 same-shape tensors with :data:`SORT8_NETWORK` (ranks 1..8)."""
    r = list(rows)
    for i, j in SORT8_NETWORK:
        r[i], r[j] = torch.maximum(r[i], r[j]), torch.minimum(r[i], r[j])
    return r


def packed_keys(abs_rows: list[Tensor]) -> list[Tensor]:
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


def _norm12_gain(ay: Tensor, odd: Tensor, t: E8PLookup) -> tuple[Tensor, Tensor]:
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


def _class_best(y: list[Tensor], t: E8PLookup) -> _ClassBest:
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
    r = sort8(packed_keys(ay))
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


def _best_points(y: list[Tensor], t: E8PLookup) -> tuple[Tensor, Tensor, Tensor]:
    """Best ``b ∈ B`` for each column of the 8 coordinate rows ``y`` (float32 ``(M,)`` each, ``M ≤ COLS``).

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


def _signs_and_parity(y: Tensor, t: E8PLookup) -> tuple[Tensor, Tensor]:
    """:func:`sign_byte` for a small ``(8, c)`` tensor: ``(negbyte int64 (c,), q float32 (c,))``."""
    negbyte = ((y.view(torch.int32) >> 31) & t.pow2_col).sum(0)
    return negbyte, t.parity8.index_select(0, negbyte)


def _norm12_finish(x: Tensor, cols: Tensor, obj: Tensor, code: Tensor, t: E8PLookup) -> None:
    """Exact norm-12 search for the ``cols`` flagged by :func:`_best_points`; updates ``obj``/``code``.

    ``x`` is ``(n, 8)`` float32; ``obj`` and ``code`` are ``(2 n,)`` (shift ``p = 0`` then ``p = 1``; ``obj``
    is the gain plus ``(½ − p)·Σx``, see :func:`encode_rows`) and ``cols`` (int64) index them.
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


def encode_rows(x: Tensor, t: E8PLookup, out: Tensor, chunk: int = CHUNK_ROWS) -> None:
    """Write the codes of the nearest codewords to the rows of ``x`` (float32 ``(n, 8)``) into ``out``
    (integer ``(n,)``), all on ``x``'s device (``t`` must be :func:`lookup_on` that device).

    On the CPU every torch op here works on at most ``COLS`` elements (single-threaded, see ``COLS``),
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


def _best_points_dense(y: list[Tensor], t: E8PLookup) -> tuple[Tensor, Tensor]:
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


def encode_dense(x: Tensor, t: E8PLookup, chunk: int | None = None) -> Tensor:
    """Codes of the nearest E8P codewords of the rows of ``x`` (float32 ``(n, 8)``, finite) as int32 ``(n,)``, on
    ``x``'s device with no host synchronisation: the same exact search as :func:`encode_rows` (both shifts
    ``s = ±¼``; the shift with the larger ``gain ± ½Σx`` wins, ties to ``+¼``) with the norm-12 patterns scored
    on every column (:func:`_best_points_dense`), so that no tensor size depends on the data. ``t`` is
    :func:`lookup_on` ``x``'s device. Codes can differ from :func:`encode_rows`'s and the Numba search's only at
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


def search_on_device(x: Tensor, t: E8PLookup) -> Tensor:
    """Nearest-codeword codes, int32 ``(n,)``, of the rows of a checked float32 ``(n, 8)`` ``x`` on any device,
    without host synchronisation: the one-kernel Triton search (:func:`caldera.quantizers.e8p_triton.search`) on
    CUDA where it is enabled (:func:`caldera.quantizers.e8p_triton.enabled_on_cuda`), else :func:`encode_dense`
    (``t``: :func:`lookup_on` ``x``'s device)."""
    if x.device.type == "cuda":
        from caldera.quantizers import e8p_triton

        if e8p_triton.enabled_on_cuda():
            return e8p_triton.search(x, t)
    return encode_dense(x, t)
