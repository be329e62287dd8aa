"""Products with a lower-triangular matrix at half the flops of a dense product.

The Hessian's square root M (H = M Mᵀ, Cholesky) and its inverse are lower triangular, and Algorithm 1 multiplies
by them in every outer iteration: ``Y = (W − Q) M`` (n·d² flops), ``R M`` in every LPLR update and error. A dense
GEMM spends half of those flops on the zeros above the diagonal. Here the columns of M are cut into ``blocks``
slices and column slice J of ``A M`` reads only the rows of M from J's first column on, so the product costs
``(½ + 1/(2·blocks))`` of the dense flops in ``blocks`` GEMMs (times: ``benchmarks/results/SETTINGS.md``). The
result equals ``A @ M`` up to float rounding (the sums are grouped differently; the zeros contribute exactly
nothing).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: column slices of M per product (more slices skip more zeros, but each GEMM gets thinner)
BLOCKS = 8
#: columns per slice at least: below 2 · this many columns a product is one dense GEMM
MIN_SLICE = 64


def slices(d: int, blocks: int = BLOCKS) -> list[tuple[int, int]]:
    """The column slices ``[(start, end), ...]`` of a d-column lower-triangular factor (one slice if d is small)."""
    nb = max(1, min(blocks, d // MIN_SLICE))
    step = -(-d // nb)
    return [(s, min(s + step, d)) for s in range(0, d, step)]


def matmul_lower(A: Tensor, M: Tensor, blocks: int = BLOCKS) -> Tensor:
    """``A @ M`` for M lower triangular: zero above the diagonal (the slices read those entries only inside the
    diagonal blocks, so the others may hold anything).

    A: (m, d), M: (d, d), the same dtype and device; returns (m, d) in that dtype, on that device.
    """
    d = M.shape[0]
    if A.shape[-1] != d or M.shape != (d, d):
        raise ValueError(f"A {tuple(A.shape)} @ M {tuple(M.shape)}: M must be (d, d) with d = A's columns")
    parts = slices(d, blocks)
    if len(parts) == 1:
        return A @ M
    out = torch.empty(A.shape[0], d, dtype=torch.result_type(A, M), device=A.device)
    for s, e in parts:
        torch.matmul(A[:, s:], M[s:, s:e], out=out[:, s:e])
    return out


def lower_matmul(M: Tensor, B: Tensor, blocks: int = BLOCKS) -> Tensor:
    """``M @ B`` for M lower triangular (d, d), B (d, m): row slice I of the product reads only the columns of M
    up to I's last (the transpose of :func:`matmul_lower`). Same dtype/device rules; returns (d, m)."""
    d = M.shape[0]
    if B.shape[0] != d or M.shape != (d, d):
        raise ValueError(f"M {tuple(M.shape)} @ B {tuple(B.shape)}: M must be (d, d) with d = B's rows")
    parts = slices(d, blocks)
    if len(parts) == 1:
        return M @ B
    out = torch.empty(d, B.shape[1], dtype=torch.result_type(M, B), device=B.device)
    for s, e in parts:
        torch.matmul(M[s:e, :e], B[:e], out=out[s:e])
    return out
