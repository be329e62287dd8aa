"""Compiled (Numba) nearest-codeword search for E8P: the same exact search as the torch path of
:mod:`caldera.quantizers.e8p`, one 8-vector at a time.

Why: BlockLDLQ quantizes 8 columns at a time, i.e. a few hundred 8-vectors per call, thousands of calls per
layer. The torch search costs ~200 small tensor ops per call (~4 ms at 576 vectors, almost all dispatch
overhead); this kernel does the same arithmetic in a loop (~0.1 ms at 576 vectors), so the quantizer does not
dominate compression time. The torch path stays as the reference and the fallback
(``E8P(backend="torch")``); ``tests/quantizers/test_e8p.py`` checks both against brute force over all
65,536 codewords.

Search (see the docstring of :mod:`caldera.quantizers.e8p` for the derivation): for each shift ``s = ±¼``
and ``y = x − s𝟙``, sort ``|y|`` descending; the 227 short abs patterns form 7 permutation-closed classes
whose best member is scored by a closed form on the sorted values (parity fixed by flipping the smallest
``|y|``); the 29 norm-12 patterns are searched exhaustively whenever their common upper bound
``2 Σ_{5 largest}|y| − 12`` (relative to ``Σ|y|``) beats the best class. The shift with the larger
``gain ± ½Σx`` wins (ties: ``+¼``). Arithmetic is float64 on float32 inputs.

Code layout (as in the torch path): ``code = (k << 8) | low``; ``low`` = sign-flip pattern relative to
``S[k]`` (last coordinate negated first when ``Σ S[k]`` is odd) with bit 0 XORed with the shift bit ``p``.
"""

from __future__ import annotations

import numba
import numpy as np

# digit (2|x| − 1)/2 of the abs pattern per class and rank: classes ½⁸, (3/2)^k ½^(8−k) (k = 1..4),
# 5/2 ½⁷, 5/2 3/2 ½⁶; Σa mod 2 of each class. (Their ‖a‖², 2 4 6 8 10 8 10, and these digits are written out
# in the scores of ``_nearest``; a test checks those against brute force over the codebook.)
_CLASS_DIGITS = np.array(
    [
        [0, 0, 0, 0, 0, 0, 0, 0],
        [1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [2, 0, 0, 0, 0, 0, 0, 0],
        [2, 1, 0, 0, 0, 0, 0, 0],
    ],
    dtype=np.int64,
)
_CLASS_ODD = np.array([0, 1, 0, 1, 0, 0, 1], dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _nearest(xv, ay, rank, pos, key_to_index, sum_odd, n12_abs):  # pragma: no cover - compiled (tested via E8P)
    """Code of the nearest E8P codeword of one 8-vector ``xv`` (float64 ``(8,)`` holding float32 values);
    ``ay`` (float64 ``(8,)``), ``rank`` and ``pos`` (int64 ``(8,)``) are scratch."""
    digits = _CLASS_DIGITS
    codd = _CLASS_ODD
    sx = 0.0
    for i in range(8):
        sx += xv[i]
    best_obj = 0.0
    best_code = 0
    for p in range(2):
        shift = 0.25 if p == 0 else -0.25
        negbits = 0
        q = 0
        sum_ay = 0.0
        for i in range(8):
            v = xv[i] - shift
            if v < 0.0:
                negbits |= 1 << i
                q ^= 1
                v = -v
            ay[i] = v
            sum_ay += v
        # coordinates by |y| descending, ties: the lower coordinate first (a strict total order, so the ranks
        # are those of a stable sort); each of the 28 pairs is compared once, without branches
        for i in range(8):
            pos[i] = 0
        for i in range(7):
            for j in range(i + 1, 8):
                b = 1 if ay[j] > ay[i] else 0
                pos[i] += b
                pos[j] += 1 - b
        for i in range(8):
            rank[pos[i]] = i
        y1 = ay[rank[0]]
        y2 = ay[rank[1]]
        p4 = y1 + y2 + ay[rank[2]] + ay[rank[3]]
        y8 = ay[rank[7]]
        # gains relative to Σ|y| (½ on every coordinate gives 2·½·Σ|y|); parity penalty 4·½·y(8). The 7 classes
        # written out (digits as in _CLASS_DIGITS; the same additions in the same order, so the same floats)
        y3 = ay[rank[2]]
        y4 = ay[rank[3]]
        pen = 2.0 * y8
        even = q == 0  # classes with Σa odd (1, 3, 6) pay the penalty when q = 0, the others when q = 1
        best = -2.0 if even else -2.0 - pen
        best_c = 0
        g = -4.0 + 2.0 * y1
        if even:
            g -= pen
        if g > best:
            best, best_c = g, 1
        g2 = -6.0 + 2.0 * y1 + 2.0 * y2
        g = g2 if even else g2 - pen
        if g > best:
            best, best_c = g, 2
        g = -8.0 + 2.0 * y1 + 2.0 * y2 + 2.0 * y3
        if even:
            g -= pen
        if g > best:
            best, best_c = g, 3
        g = -10.0 + 2.0 * y1 + 2.0 * y2 + 2.0 * y3 + 2.0 * y4
        if not even:
            g -= pen
        if g > best:
            best, best_c = g, 4
        g = -8.0 + 4.0 * y1
        if not even:
            g -= pen
        if g > best:
            best, best_c = g, 5
        g = -10.0 + 4.0 * y1 + 2.0 * y2
        if even:
            g -= pen
        if g > best:
            best, best_c = g, 6
        key = 0
        for k in range(4):
            key += digits[best_c, k] << (2 * rank[k])
        k_best = key_to_index[key]
        flip = rank[7] if (codd[best_c] ^ q) == 1 else -1
        # norm-12 patterns (3/2)⁵ ½³: Σa = 9 (odd), ‖a‖² = 12; bound without the parity penalty
        ub = 2.0 * (p4 + ay[rank[4]]) - 12.0
        if ub > best:
            for j in range(n12_abs.shape[0]):
                g = -12.0
                m = 1e300
                am = 0
                for i in range(8):
                    t = n12_abs[j, i] * ay[i]
                    g += 2.0 * t
                    if t < m:
                        m = t
                        am = i
                g -= sum_ay  # relative to Σ|y|
                if q == 0:  # Σa odd and an even number of negatives: one sign must flip
                    g -= 4.0 * m
                if g > best:
                    best = g
                    k_best = 227 + j
                    flip = am if q == 0 else -1
        obj = sum_ay + best + (0.5 * sx if p == 0 else -0.5 * sx)
        bits = negbits
        if flip >= 0:
            bits ^= 1 << flip
        low = bits ^ (sum_odd[k_best] << 7) ^ p
        if p == 0 or obj > best_obj:
            best_obj = obj
            best_code = (k_best << 8) | low
    return best_code


@numba.njit(cache=True, nogil=True)
def _encode_rows(x, key_to_index, sum_odd, n12_abs, out):  # pragma: no cover - compiled (tested via E8P)
    """Codes of the nearest E8P codewords of the rows of ``x`` (float32 ``(n, 8)``) into ``out`` (int32 ``(n,)``).

    ``key_to_index`` (int64 ``(4**8,)``): base-4 key of an abs pattern -> row of S (−1 if none);
    ``sum_odd`` (int64 ``(256,)``); ``n12_abs`` (float64 ``(29, 8)``, rows 227..255 of S).
    """
    n = x.shape[0]
    xv = np.empty(8)
    ay = np.empty(8)
    rank = np.empty(8, dtype=np.int64)
    pos = np.empty(8, dtype=np.int64)
    for r in range(n):
        for i in range(8):
            xv[i] = np.float64(x[r, i])
        out[r] = _nearest(xv, ay, rank, pos, key_to_index, sum_odd, n12_abs)


@numba.njit(cache=True, nogil=True)
def _encode_rvq_rows(
    x, resid_scale, stage2_bits, codebook, key_to_index, sum_odd, n12_abs, out
):  # pragma: no cover - compiled (tested via E8PRVQ4)
    """Two-stage residual E8P codes of the rows of ``x`` (float32 ``(n, 8)``) into ``out`` (int64 ``(n,)``), both
    searches in one pass over the rows: ``c1`` = the nearest E8P codeword of the row, ``c2`` = the nearest E8P
    codeword of ``resid_scale · (x − codebook[c1])`` (``resid_scale`` float32; the subtraction and the product
    rounded to float32, as :class:`caldera.quantizers.rvq.E8PRVQ4` forms the residual with torch), and
    ``out = (c1 << stage2_bits) | c2``. ``codebook`` float32 ``(65536, 8)``; the other lookup arrays as in
    :func:`_encode_rows`."""
    n = x.shape[0]
    xv = np.empty(8)
    ay = np.empty(8)
    rank = np.empty(8, dtype=np.int64)
    pos = np.empty(8, dtype=np.int64)
    for r in range(n):
        for i in range(8):
            xv[i] = np.float64(x[r, i])
        c1 = _nearest(xv, ay, rank, pos, key_to_index, sum_odd, n12_abs)
        for i in range(8):
            d = x[r, i] - codebook[c1, i]  # float32 − float32: float32
            xv[i] = np.float64(d * resid_scale)  # float32 · float32: float32
        c2 = _nearest(xv, ay, rank, pos, key_to_index, sum_odd, n12_abs)
        out[r] = (np.int64(c1) << stage2_bits) | np.int64(c2)


@numba.njit(cache=True, nogil=True)
def _ldlq_chunk(
    F, has_F, Lc, W, codebook, key_to_index, sum_odd, n12_abs, W_hat, delta, codes
):  # pragma: no cover - compiled (tested via caldera.algorithm.ldlq)
    """BlockLDLQ inside one chunk of c columns (c % 8 == 0), rows independent, blocks last to first.

    ``W`` (float32 ``(n, c)``): the chunk's own columns; ``F`` (float32 ``(n, c)``, read only when ``has_F``):
    the feedback of the later chunks, ``Σ_{j after the chunk} δ_j L_{j,·}``; ``Lc`` (float32 ``(c, c)``): the
    chunk's diagonal block of the LDL factor. Per row and block k, from the last block:
    ``x = (W_k + F_k) + Σ_{j > k in the chunk} δ_j L_{j,k}`` (``W + F`` added in float32, the in-chunk sum in
    float64, rounded to float32), code = the nearest E8P codeword of x, ``Ŵ_k`` = that codeword,
    ``δ_k = W_k − Ŵ_k``. Writes ``W_hat`` and ``delta`` (float32 ``(n, c)``) and ``codes`` (int32
    ``(n, c // 8)``). Every array may be a strided view (a column slice of the whole matrix: nothing is copied).

    The in-chunk sum is right-looking: once block k is quantized, its 8 errors are added to the running sums
    of every earlier column of the row at once (a contiguous loop over columns, which the compiler
    vectorizes), so a sum collects its terms from the last block down rather than from the nearest block up:
    float64 sums in another order, which can move the float32 x only when the float64 sum lies within
    float64 rounding of a float32 rounding boundary.
    """
    n, c = W.shape
    nb = c // 8
    xv = np.empty(8)
    ay = np.empty(8)
    rank = np.empty(8, dtype=np.int64)
    pos = np.empty(8, dtype=np.int64)
    L64 = np.empty((c, c))  # Lc in float64 once (row j: the weights of δ_j on the earlier columns)
    for j in range(c):
        for i in range(c):
            L64[j, i] = np.float64(Lc[j, i])
    acc = np.empty(c)  # the row's in-chunk feedback sums, float64
    d8 = np.empty(8)
    for r in range(n):
        for i in range(c):
            acc[i] = 0.0
        for b in range(nb - 1, -1, -1):
            lo = 8 * b
            for i in range(8):
                w = W[r, lo + i]
                if has_F:
                    w = w + F[r, lo + i]  # float32 + float32: as the loop's W + feedback
                xv[i] = np.float64(np.float32(np.float64(w) + acc[lo + i]))
            code = _nearest(xv, ay, rank, pos, key_to_index, sum_odd, n12_abs)
            codes[r, b] = code
            for i in range(8):
                q = codebook[code, i]
                W_hat[r, lo + i] = q
                dq = W[r, lo + i] - q
                delta[r, lo + i] = dq
                d8[i] = np.float64(dq)
            if lo > 0:
                r0 = L64[lo]
                r1 = L64[lo + 1]
                r2 = L64[lo + 2]
                r3 = L64[lo + 3]
                r4 = L64[lo + 4]
                r5 = L64[lo + 5]
                r6 = L64[lo + 6]
                r7 = L64[lo + 7]
                e0, e1, e2, e3, e4, e5, e6, e7 = d8[0], d8[1], d8[2], d8[3], d8[4], d8[5], d8[6], d8[7]
                for i in range(lo):  # each sum independent: vectorized across i; terms in t order
                    acc[i] = (
                        acc[i] + e0 * r0[i] + e1 * r1[i] + e2 * r2[i] + e3 * r3[i] + e4 * r4[i] + e5 * r5[i]
                        + e6 * r6[i] + e7 * r7[i]
                    )
