"""QuIP# baselines at matrix level (quip-sharp.md §2, §3, §5).

* ``quip#``: RHT + BlockLDLQ with the E8P 2-bit codebook (+ optional greedy passes), no low rank.
* ``quip#-lr``: QuIP#'s own fp16 low-rank correction (its ``lora_rank`` path), computed once:
  1. top-r SVD of W̃ M (H̃ = M Mᵀ): H̃ ← H̃ − M V_r V_rᵀ Mᵀ + σ·mean(diag H̃)·I, W̃ ← W̃ − U_r U_rᵀ W̃;
  2. BlockLDLQ of that residual with the downdated Hessian;
  3. the H-weighted Eckart–Young optimum A B of W̃ − Ŵ (rank r), rebalanced and stored in fp16.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from caldera.methods.caldera_method import hadamard_ldlq_shape
from caldera.methods.registry import register_method

if TYPE_CHECKING:
    import torch

    from caldera.algorithm.decomposition import HessianContext


@dataclass(frozen=True)
class QuipSharpConfig:
    """q_bits: backbone bits (2 → E8P); lr_rank: rank of QuIP#'s fp16 correction (0 = plain QuIP#)."""

    q_bits: int = 2
    lr_rank: int = 0
    rht: bool = True
    refine_passes: int = 0
    sigma_reg: float = 0.01
    seed: int = 0
    svd: str = "exact"  # top-k SVDs of the LR part: "exact" or "randomized" (seeded by ``seed``)

    def __post_init__(self) -> None:
        if self.q_bits not in (2, 3, 4):
            raise ValueError(f"QuipSharpConfig.q_bits={self.q_bits!r}; accepted: 2, 3, 4")
        if self.svd not in ("exact", "randomized"):
            raise ValueError(f"QuipSharpConfig.svd={self.svd!r}; accepted: 'exact', 'randomized'")
        if self.lr_rank < 0 or self.refine_passes < 0:
            raise ValueError("QuipSharpConfig.lr_rank and refine_passes must be >= 0")


def quip_sharp(W: torch.Tensor, H: torch.Tensor, config: QuipSharpConfig, context: HessianContext | None = None):
    """QuIP# (with ``config.lr_rank`` > 0: QuIP# + its fp16 LR). W (n, d), H (d, d) → Decomposition."""
    import torch

    from caldera.algorithm.decomposition import Decomposition, HessianContext
    from caldera.algorithm.hadamard import RHT, random_signs
    from caldera.algorithm.ldl import cholesky_or_raise
    from caldera.algorithm.ldlq import ldlq_quantize
    from caldera.algorithm.regression import rank_constrained_regression_pd, top_k_svd
    from caldera.metrics import relative_data_aware_error
    from caldera.quantizers import quantizer_for_bits
    from caldera.validation import check_rank, checked_W_H

    W, H = checked_W_H(W, H)
    n, d = W.shape
    if config.lr_rank:
        check_rank(config.lr_rank, n, d)
    ctx = context or HessianContext.prepare(H, rht=config.rht, seed=config.seed, sigma_reg=config.sigma_reg)
    rht = RHT(S_U=ctx.S_U, S_V=random_signs(n, torch.Generator().manual_seed(config.seed + 1))) if config.rht else None
    Wr = rht.rotate_W(W.float()) if rht is not None else W.float()
    Hr = ctx.H_rot
    q = quantizer_for_bits(config.q_bits)
    r = config.lr_rank
    if r == 0:
        Qb = ldlq_quantize(Wr, Hr, q, refine_passes=config.refine_passes, ldl=ctx.ldl)
        L = R = None
    else:
        M = cholesky_or_raise(Hr)
        gen = torch.Generator().manual_seed(config.seed + 2)
        U, _, V = top_k_svd(Wr.double() @ M, r, method=config.svd, generator=gen)
        MV = M @ V
        H_down = Hr - MV @ MV.T
        H_down.diagonal().add_(config.sigma_reg * float(Hr.diagonal().mean()))
        W_res = Wr - (U @ (U.T @ Wr.double())).float()
        Qb = ldlq_quantize(W_res, H_down, q, refine_passes=config.refine_passes)
        L, R, _ = rank_constrained_regression_pd(Wr - Qb.Q, ctx.sqrt, r, svd=config.svd, generator=gen)
        s = (R.norm(dim=1) / L.norm(dim=0).clamp_min(1e-12)).sqrt()  # equal column/row scale
        L, R = (L * s).half().float(), (R / s[:, None]).half().float()
    W_hat_r = Qb.Q if L is None else Qb.Q + L @ R
    err = relative_data_aware_error(W_hat_r, Wr, Hr, product=torch.float32)
    name = "quip#" if r == 0 else "quip#-lr"
    return Decomposition(
        method=name, Q=Qb.Q, L=L, R=R, Q_codes=Qb.codes, Q_scale=Qb.scale, rht=rht,
        error_trace=[{"outer": 0, "step": "Q", "error": err}], error=err, best_iter=0, config=asdict(config),
        q_quantizer=q.name,
    )


register_method("quip#", QuipSharpConfig, shares_hessian_context=True, check_shape=hadamard_ldlq_shape)(quip_sharp)


@dataclass(frozen=True)
class QuipSharpLRConfig(QuipSharpConfig):
    lr_rank: int = 64


register_method("quip#-lr", QuipSharpLRConfig, shares_hessian_context=True, check_shape=hadamard_ldlq_shape,
                family="quip#")(
    quip_sharp
)
