"""Seeded LLM-like test matrices: decaying weight spectra and ill-conditioned calibration Hessians.

Used by the tests, the theory checks and the matrix-level report. Every draw comes from a
``torch.Generator`` seeded by the arguments, so a (shape, seed) pair always gives the same matrices.
"""

from __future__ import annotations

import torch
from torch import Tensor


def decaying_weight(n: int, d: int, *, seed: int, decay: float = 0.5, outlier_cols: int = 0) -> Tensor:
    """W (n, d) float32 with singular values σ_i ∝ i^(−decay), RMS 1, and optionally a few large columns
    (the "outlier features" of LLM weights that make RHT matter)."""
    g = torch.Generator().manual_seed(seed)
    r = min(n, d)
    U, _ = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(d, r, generator=g, dtype=torch.float64))
    s = torch.arange(1, r + 1, dtype=torch.float64) ** -decay
    W = (U * s) @ V.T
    if outlier_cols:
        idx = torch.randperm(d, generator=g)[:outlier_cols]
        W[:, idx] *= 8.0
    return (W / W.pow(2).mean().sqrt()).float()


def calibration_hessian(d: int, *, seed: int, cond: float = 1e3, m: int | None = None, outlier_dims: int = 0) -> Tensor:
    """H = XᵀX/m (d, d) float64 with eigenvalues log-spaced over ``cond``; with ``m`` the sample Hessian of
    m Gaussian rows (rank min(m, d)); ``outlier_dims`` coordinates get 10× larger activations."""
    g = torch.Generator().manual_seed(seed + 7919)
    Qm, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    lam = torch.logspace(0, -float(torch.log10(torch.tensor(cond))), d, dtype=torch.float64)
    C = (Qm * lam.sqrt()) @ Qm.T  # covariance square root
    if outlier_dims:
        idx = torch.randperm(d, generator=g)[:outlier_dims]
        C[idx, :] *= 10.0
    if m is None:
        H = C.T @ C
    else:
        X = torch.randn(m, d, generator=g, dtype=torch.float64) @ C
        H = X.T @ X / m
    return (H + H.T) / 2


def llm_like(n: int, d: int, seed: int = 0, decay: float = 0.5, cond: float = 1e3, m: int | None = None,
             outliers: int = 0) -> tuple[Tensor, Tensor]:
    """(W (n, d) float32, H (d, d) float64) — see :func:`decaying_weight` and :func:`calibration_hessian`."""
    return (decaying_weight(n, d, seed=seed, decay=decay, outlier_cols=outliers),
            calibration_hessian(d, seed=seed, cond=cond, m=m, outlier_dims=outliers))
