"""Hessian regularization and the block LDL decomposition used by BlockLDLQ.

Facts from QuIP# (quip-sharp.md §2): ``regularize_H`` divides H by its mean diagonal and adds
``sigma_reg · I``; ``block_LDL`` takes the lower Cholesky factor L_c, and with DL_k the k-th b×b diagonal
block of L_c sets ``D_k = DL_k DL_kᵀ`` and ``L = L_c · blockdiag(DL_k)⁻¹``, so that ``H = L D Lᵀ`` with L unit
block-lower-triangular. A failed float32 Cholesky is retried in float64 (QuIP# does this; the CALDERA
authors' code aborts instead).
"""

from __future__ import annotations

import torch
from torch import Tensor

from caldera.validation import check_matrix

#: the name errors give the regularized Hessian (:func:`regularize_hessian`)
REGULARIZED = "H (after regularization)"


def regularize_hessian(H: Tensor, sigma_reg: float = 0.01, *, check_pd: bool = True) -> Tensor:
    """``H / mean(diag H) + sigma_reg · I`` (float64 out), after checking H is finite, symmetric, PSD-ish.

    Args:
        H: (d, d) symmetric positive semi-definite, any float dtype.
        check_pd: test positive definiteness by a Cholesky factorization here. A caller that factors the result
            (or an orthogonal rotation of it) anyway passes False and calls :func:`cholesky_or_raise` with the name
            ``"H (after regularization)"`` on what it factors: the same test and error, one factorization.
    Returns:
        (d, d) float64, positive definite when sigma_reg > 0 and H is PSD.
    Raises:
        ValueError: naming H when it is not square/finite/symmetric, has a non-positive mean diagonal,
            or is not positive definite after regularization (a non-PSD input).
    """
    check_matrix(H, "H")
    if H.shape[0] != H.shape[1]:
        raise ValueError(f"H must be square, got {tuple(H.shape)}")
    Hd = H.double()
    Hd = (Hd + Hd.T) / 2
    mean_diag = float(Hd.diagonal().mean())
    if mean_diag <= 0:
        raise ValueError(f"H has mean diagonal {mean_diag:.3g} <= 0; a Hessian XᵀX/m has a positive diagonal")
    Hd = Hd / mean_diag
    Hd.diagonal().add_(sigma_reg)
    if check_pd:
        cholesky_or_raise(Hd, REGULARIZED)
    return Hd


def cholesky_or_raise(H: Tensor, name: str = "H") -> Tensor:
    """Lower Cholesky factor; retried in float64; ValueError naming ``name`` if H is not positive definite."""
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) == 0:
        return L
    if H.dtype != torch.float64:
        L, info = torch.linalg.cholesky_ex(H.double())
        if int(info) == 0:
            return L.to(H.dtype)
    lam_min = float(torch.linalg.eigvalsh(H.double())[0])
    raise ValueError(
        f"{name} is not positive definite (smallest eigenvalue {lam_min:.3g}); "
        "pass a PSD Hessian XᵀX/m or increase sigma_reg"
    )


def block_ldl(H: Tensor, block: int = 8) -> tuple[Tensor, Tensor]:
    """Block LDL of a positive-definite H: ``H = L D Lᵀ``.

    Args:
        H: (d, d) positive definite; d % block == 0.
        block: block size b (8 for the E8 lattice).
    Returns:
        L: (d, d) unit block-lower-triangular (identity b×b diagonal blocks), H's dtype.
        D: (d // b, b, b) the symmetric positive-definite diagonal blocks, H's dtype.
    """
    return block_ldl_of_cholesky(cholesky_or_raise(H), block)


def block_ldl_of_cholesky(Lc: Tensor, block: int = 8) -> tuple[Tensor, Tensor]:
    """:func:`block_ldl` from H's lower Cholesky factor ``Lc`` (d, d), when the caller already holds it (the
    engine factors H once for its square root and its LDL). ``Lc`` is overwritten with the returned L."""
    d = Lc.shape[0]
    if d % block != 0:
        raise ValueError(f"H has size {d}, not a multiple of the quantizer block size {block}")
    nb = d // block
    DL = Lc.reshape(nb, block, nb, block).diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # (nb, b, b), a view
    D = DL @ DL.transpose(1, 2)
    eye = torch.eye(block, dtype=Lc.dtype, device=Lc.device).expand(nb, block, block)
    DL_inv = torch.linalg.solve_triangular(DL, eye, upper=False)
    # L = Lc · blockdiag(DL)⁻¹ in place, one column block at a time over its nonzero rows (Lc is ours): half the
    # work of a batched product over every row, and no reshaped copies of the (d, d) factor
    for j in range(nb):
        s = j * block
        Lc[s:, s : s + block] = Lc[s:, s : s + block] @ DL_inv[j]
    return Lc, D
