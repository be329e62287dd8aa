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


def random_compressed_layer(n: int, d: int, rank: int, lr_format: str | None, *, rht: bool = True,
                            bias: bool = True, seed: int = 0, q_scale: float = 0.25,
                            factor_scale: float = 0.125) -> tuple[dict, dict[str, Tensor]]:
    """``(meta, tensors)`` for :meth:`caldera.nn.compressed_linear.CompressedLinear.from_tensors`: an (n, d)
    CALDERA layer with uniform random E8P codes (uint16), per-row scales uniform in [0, ``q_scale``), random RHT
    signs (``rht``), a bias (``bias``) and rank-``rank`` factors: ``"float16"`` / ``"float32"`` ``L``, ``R``
    (Gaussian times ``factor_scale``), ``"quantized"`` (uniform random E8P-RVQ4 codes, int64, scales 0.05 / 0.07)
    or none (``None``, rank 0). A layer's forward time does not depend on the code values, so this times the
    compressed path of any shape without compressing anything."""
    if (lr_format is None) != (rank == 0) or lr_format not in (None, "float16", "float32", "quantized"):
        raise ValueError(f"lr_format={lr_format!r} with rank {rank}: float16 | float32 | quantized with rank > 0, "
                         "or None with rank 0")
    g = torch.Generator().manual_seed(seed)
    meta = {
        "version": 1, "method": "caldera", "in_features": d, "out_features": n, "q_quantizer": "e8p",
        "q_codes_dtype": "int32", "rht": rht, "rank": rank, "ft_rank": 0, "lr_format": lr_format,
        "l_quantizer": None, "r_quantizer": None, "lr_codes_dtype": None, "signs_trainable": False, "bias": bias,
        "ft_dtype": None,
    }  # fmt: skip
    ts = {"Q_codes": torch.randint(0, 1 << 16, (n, d // 8), generator=g).to(torch.uint16),
          "Q_scale": torch.rand(n, 1, generator=g) * q_scale}  # fmt: skip
    if rht:
        ts["S_U"] = (torch.randint(0, 2, (d,), generator=g) * 2 - 1).to(torch.int8)
        ts["S_V"] = (torch.randint(0, 2, (n,), generator=g) * 2 - 1).to(torch.int8)
    if lr_format == "quantized":
        meta.update(l_quantizer="e8p-rvq4", r_quantizer="e8p-rvq4", lr_codes_dtype="int64")
        codes = lambda m: torch.randint(0, 1 << 32, (rank, m), generator=g)
        ts.update(L_codes=codes(n // 8), L_scale=torch.tensor(0.05), R_codes=codes(d // 8), R_scale=torch.tensor(0.07))
    elif lr_format:
        dt = torch.float16 if lr_format == "float16" else torch.float32
        ts["L_16"] = (torch.randn(n, rank, generator=g) * factor_scale).to(dt)
        ts["R_16"] = (torch.randn(rank, d, generator=g) * factor_scale).to(dt)
    if bias:
        ts["bias"] = torch.randn(n, generator=g)
    return meta, ts
