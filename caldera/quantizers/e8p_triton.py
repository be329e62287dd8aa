"""The E8P nearest-codeword search as one Triton kernel, and a BlockLDLQ chunk as one kernel per tile of rows.

Both run the exact search of :mod:`caldera.quantizers.e8p` (see its docstring for the derivation) on a tile of
``BLOCK`` 8-vectors per program, in float32, with no host synchronisation:

* for each shift ``s = ±¼`` (both in the same program) and ``y = x − s𝟙``: the rank of each ``|y_i|`` (descending,
  ties to the lower coordinate, as the Numba search) from the 28 pairwise comparisons of an ``(BLOCK, 8, 8)``
  tile; the 7 permutation-closed classes of the 227 short patterns scored by their closed forms on the ranked
  values, relative to ``Σ|y|``; the 29 norm-12 patterns scored exhaustively on an ``(BLOCK, 32, 8)`` tile (rows
  29..31 padding), replacing the best class where strictly better;
* the shift with the larger ``gain ± ½Σx`` wins (ties: ``+¼``).

The code layout is the module's: ``code = (k << 8) | low``, ``low`` the sign bits relative to ``S[k]`` (last
coordinate negated first when ``Σ S[k]`` is odd), the smallest ``a_i|y_i|`` flipped when the parity is odd, bit 0
XORed with the shift bit ``p``.

:func:`ldlq_chunk` runs BlockLDLQ (eq. 3 of the paper, QuIP#'s reverse block order) inside one chunk of ``c``
columns for a tile of rows per program: ``x_k = W_k + F_k + Σ_{j > k in the chunk} δ_j L_{j,k}``, the code of the
nearest codeword of ``x_k``, ``Ŵ_k`` its codeword and ``δ_k = W_k − Ŵ_k``; the in-chunk feedback is kept in a
float32 scratch ``(n, c)`` that each quantized block updates for every earlier column (right-looking). The feedback
from later chunks (``F``) stays a cuBLAS matmul in :func:`caldera.algorithm.ldlq.block_ldlq`.

On a CPU both kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, as the tests run them); without Triton
:func:`available` is false and the callers use the torch search.
"""

from __future__ import annotations

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton is optional
    triton = None

#: 8-vectors per program of :func:`search` and rows per program of :func:`ldlq_chunk`
SEARCH_BLOCK = 32
LDLQ_BLOCK_ROWS = 16


def available() -> bool:
    """True when Triton imports (the kernels then run compiled on CUDA, or in the interpreter on the CPU)."""
    return triton is not None


#: the environment variable that lets CUDA tensors take these kernels: "1" to use them. Off by default until a GPU
#: acceptance run (benchmarks/gpu_acceptance.py, which sets it) has checked them compiled against the device
#: search they replace; without it CUDA takes :func:`caldera.quantizers.e8p.encode_dense` and the block loop.
ENABLE_ON_CUDA = "CALDERA_E8P_TRITON"


def enabled_on_cuda() -> bool:
    """Whether CUDA tensors take the Triton search and BlockLDLQ chunk: Triton imports and
    :data:`ENABLE_ON_CUDA` is "1"."""
    import os

    return available() and os.environ.get(ENABLE_ON_CUDA) == "1"


if triton is not None:

    @triton.jit
    def _shift_best(x, shift, key_to_index, sum_odd, n12, BLOCK: tl.constexpr):
        """Best ``b`` in B for ``y = x − shift`` of a ``(BLOCK, 8)`` float32 tile: ``(gain + Σ|y|, code8)``,
        ``code8`` for the shift bit ``p = 0`` (the caller XORs bit 0 for ``p = 1``)."""
        col = tl.arange(0, 8)
        y = x - shift
        ay = tl.abs(y)
        negb = (y < 0).to(tl.int32)
        neg = tl.sum(negb << col[None, :], axis=1)
        q = tl.sum(negb, axis=1) & 1
        # rank of |y_i| (0 = largest; equal values: the lower coordinate first)
        ai = ay[:, :, None]
        aj = ay[:, None, :]
        before = (aj > ai) | ((aj == ai) & (col[None, None, :] < col[None, :, None]))
        rank = tl.sum(before.to(tl.int32), axis=2)  # (BLOCK, 8)
        y1 = tl.sum(tl.where(rank == 0, ay, 0.0), axis=1)
        y2 = tl.sum(tl.where(rank == 1, ay, 0.0), axis=1)
        y3 = tl.sum(tl.where(rank == 2, ay, 0.0), axis=1)
        y4 = tl.sum(tl.where(rank == 3, ay, 0.0), axis=1)
        y8 = tl.sum(tl.where(rank == 7, ay, 0.0), axis=1)
        c1 = tl.sum(tl.where(rank == 0, col[None, :], 0), axis=1)
        c2 = tl.sum(tl.where(rank == 1, col[None, :], 0), axis=1)
        c3 = tl.sum(tl.where(rank == 2, col[None, :], 0), axis=1)
        c4 = tl.sum(tl.where(rank == 3, col[None, :], 0), axis=1)
        c8 = tl.sum(tl.where(rank == 7, col[None, :], 0), axis=1)
        w1 = 1 << (2 * c1)
        w2 = 1 << (2 * c2)
        w3 = 1 << (2 * c3)
        w4 = 1 << (2 * c4)
        pen = 2.0 * y8
        even = q == 0  # classes with Σa odd (1, 3, 6) pay the penalty when q = 0, the others when q = 1
        pen_o = tl.where(even, pen, 0.0)
        pen_e = tl.where(even, 0.0, pen)
        # classes 0..6 (½⁸, (3/2)^k ½^(8−k) for k = 1..4, 5/2 ½⁷, 5/2 3/2 ½⁶): gain relative to Σ|y|, key, Σa odd
        best = -2.0 - pen_e
        key = tl.zeros_like(c1)
        sodd = tl.zeros_like(c1)
        g = -4.0 + 2.0 * y1 - pen_o
        win = g > best
        best = tl.where(win, g, best)
        key = tl.where(win, w1, key)
        sodd = tl.where(win, 1, sodd)
        g = -6.0 + 2.0 * y1 + 2.0 * y2 - pen_e
        win = g > best
        best = tl.where(win, g, best)
        key = tl.where(win, w1 + w2, key)
        sodd = tl.where(win, 0, sodd)
        g = -8.0 + 2.0 * y1 + 2.0 * y2 + 2.0 * y3 - pen_o
        win = g > best
        best = tl.where(win, g, best)
        key = tl.where(win, w1 + w2 + w3, key)
        sodd = tl.where(win, 1, sodd)
        g = -10.0 + 2.0 * y1 + 2.0 * y2 + 2.0 * y3 + 2.0 * y4 - pen_e
        win = g > best
        best = tl.where(win, g, best)
        key = tl.where(win, w1 + w2 + w3 + w4, key)
        sodd = tl.where(win, 0, sodd)
        g = -8.0 + 4.0 * y1 - pen_e
        win = g > best
        best = tl.where(win, g, best)
        key = tl.where(win, 2 * w1, key)
        sodd = tl.where(win, 0, sodd)
        g = -10.0 + 4.0 * y1 + 2.0 * y2 - pen_o
        win = g > best
        best = tl.where(win, g, best)
        key = tl.where(win, 2 * w1 + w2, key)
        sodd = tl.where(win, 1, sodd)
        k = tl.load(key_to_index + key).to(tl.int32)
        flip = tl.where((sodd ^ q) == 1, c8, -1)
        # the 29 norm-12 patterns (3/2)⁵ ½³ (Σa = 9, odd), all scored: 2 Σ_{3/2}|y| − 12, minus 4 min a_i|y_i|
        # when the number of negatives is even (one sign must flip: the first smallest a_i|y_i|)
        j = tl.arange(0, 32)
        A = tl.load(n12 + j[:, None] * 8 + col[None, :], mask=j[:, None] < 29, other=0.0)  # (32, 8), 29.. zero
        prod = A[None, :, :] * ay[:, None, :]  # (BLOCK, 32, 8)
        mn = tl.min(prod, axis=2)
        g12 = 2.0 * tl.sum(tl.where(A[None, :, :] > 1.0, ay[:, None, :], 0.0), axis=2) - 12.0
        g12 = g12 - tl.where(even[:, None], 4.0 * mn, 0.0)
        g12 = tl.where(j[None, :] < 29, g12, float("-inf"))
        gb = tl.max(g12, axis=1)
        jb = tl.argmax(g12, axis=1, tie_break_left=True)
        sel = j[None, :] == jb[:, None]
        am = tl.argmin(prod, axis=2, tie_break_left=True)  # (BLOCK, 32)
        amb = tl.sum(tl.where(sel, am, 0), axis=1)
        win = gb > best
        best = tl.where(win, gb, best)
        k = tl.where(win, 227 + jb, k)
        flip = tl.where(win, tl.where(even, amb, -1), flip)
        bits = tl.where(flip >= 0, neg ^ (1 << tl.maximum(flip, 0)), neg)
        low = bits ^ (tl.load(sum_odd + k) << 7)
        return tl.sum(ay, axis=1) + best, (k << 8) | low

    @triton.jit
    def _nearest_tile(x, key_to_index, sum_odd, n12, BLOCK: tl.constexpr):
        """Codes (int32 ``(BLOCK,)``) of the nearest E8P codewords of the rows of a float32 ``(BLOCK, 8)`` tile.
        Entries that are not finite or exceed ``1e36`` (which callers check out) are read as 0, so that every code
        is a valid index whatever the input."""
        x = tl.where(tl.abs(x) <= 1e36, x, 0.0)
        g0, c0 = _shift_best(x, 0.25, key_to_index, sum_odd, n12, BLOCK)
        g1, c1 = _shift_best(x, -0.25, key_to_index, sum_odd, n12, BLOCK)
        half_sx = 0.5 * tl.sum(x, axis=1)
        return tl.where(g0 + half_sx >= g1 - half_sx, c0, c1 ^ 1)

    @triton.jit
    def _search_kernel(x_ptr, out_ptr, n, key_to_index, sum_odd, n12, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        col = tl.arange(0, 8)
        mask = rows < n
        x = tl.load(x_ptr + rows[:, None] * 8 + col[None, :], mask=mask[:, None], other=0.0)
        code = _nearest_tile(x, key_to_index, sum_odd, n12, BLOCK)
        tl.store(out_ptr + rows, code, mask=mask)

    @triton.jit
    def _ldlq_chunk_kernel(
        W_ptr, sw, sw1, F_ptr, sf, sf1, Lc_ptr, sl, sl1, Wh_ptr, swh, swh1, D_ptr, sd, sd1, C_ptr, sc, sc1,
        acc_ptr, n, c,
        key_to_index, sum_odd, n12, codebook, HAS_F: tl.constexpr, BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        col = tl.arange(0, 8)
        mask = (rows < n)[:, None]
        r2 = rows[:, None]
        nb = c // 8
        for bi in range(nb):
            b = nb - 1 - bi
            cols = 8 * b + col[None, :]
            w = tl.load(W_ptr + r2 * sw + cols * sw1, mask=mask, other=0.0)
            if HAS_F:
                w = w + tl.load(F_ptr + r2 * sf + cols * sf1, mask=mask, other=0.0)
            x = w + tl.load(acc_ptr + r2 * c + cols, mask=mask, other=0.0)
            code = _nearest_tile(x, key_to_index, sum_odd, n12, BLOCK)
            tl.store(C_ptr + rows * sc + b * sc1, code, mask=rows < n)
            qv = tl.load(codebook + code[:, None] * 8 + col[None, :])
            tl.store(Wh_ptr + r2 * swh + cols * swh1, qv, mask=mask)
            d = tl.load(W_ptr + r2 * sw + cols * sw1, mask=mask, other=0.0) - qv
            tl.store(D_ptr + r2 * sd + cols * sd1, d, mask=mask)
            # right-looking: δ_b L_{b, j} into the running sums of every earlier block j
            for j in range(b):
                Lt = tl.load(Lc_ptr + (8 * b + col[:, None]) * sl + (8 * j + col[None, :]) * sl1)  # L[b rows, j cols]
                upd = tl.sum(d[:, :, None] * Lt[None, :, :], axis=1)
                aj = acc_ptr + r2 * c + 8 * j + col[None, :]
                tl.store(aj, tl.load(aj, mask=mask, other=0.0) + upd, mask=mask)
            # the next block reads these sums back: its threads need not be the ones that wrote them
            tl.debug_barrier()


def search(x: Tensor, t, block: int = SEARCH_BLOCK) -> Tensor:
    """Codes (int32 ``(n,)``) of the nearest E8P codewords of the rows of a float32 ``(n, 8)`` ``x`` (finite,
    checked by the caller), one program per ``block`` rows, both shifts in the program; no host synchronisation.
    ``t``: the E8P lookup arrays on ``x``'s device (:func:`caldera.quantizers.e8p.lookup_on`: ``key_to_index``
    float32 ``(4**8,)``, ``sum_odd`` int32 ``(256,)``, ``n12_abs`` float32 ``(29, 8)``). Needs Triton
    (:func:`available`)."""
    x = x.contiguous()
    n = x.shape[0]
    out = torch.empty(n, dtype=torch.int32, device=x.device)
    if n:
        _search_kernel[(triton.cdiv(n, block),)](x, out, n, t.key_to_index, t.sum_odd, t.n12_abs, BLOCK=block)
    return out


def ldlq_chunk(
    F: Tensor | None, Lc: Tensor, W: Tensor, W_hat: Tensor, delta: Tensor, codes: Tensor, t,
    block: int = LDLQ_BLOCK_ROWS,
) -> None:
    """BlockLDLQ inside one chunk of ``c`` columns (``c % 8 == 0``), in place, one program per ``block`` rows:
    float32 ``W``, ``W_hat``, ``delta`` ``(n, c)``, ``F`` ``(n, c)`` (the later chunks' feedback ``Σ δ_j L_{j,·}``)
    or None, ``Lc`` ``(c, c)`` the chunk's diagonal block of L, int32 ``codes`` ``(n, c // 8)``; each may be any
    strided view (a column slice of a larger matrix). Same contract as
    :meth:`caldera.quantizers.e8p.E8P.fused_ldlq_chunk`; the in-chunk feedback is summed in float32. ``t``: the
    lookup arrays as in :func:`search`, with the ``codebook`` float32 ``(65536, 8)``."""
    n, c = W.shape
    acc = torch.zeros(n, c, device=W.device)
    Fp = F if F is not None else W
    _ldlq_chunk_kernel[(triton.cdiv(n, block),)](
        W, *W.stride(), Fp, *Fp.stride(), Lc, *Lc.stride(), W_hat, *W_hat.stride(), delta, *delta.stride(),
        codes, *codes.stride(), acc, n, c, t.key_to_index, t.sum_odd, t.n12_abs, t.codebook, HAS_F=F is not None,
        BLOCK=block,
    )
