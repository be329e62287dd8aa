"""LoftQ baseline (Li et al. 2023; facts from quip-sharp.md §9): data-free alternation of NormalFloat
quantization and an SVD of the residual, with 16-bit low-rank factors.

``res = W``; for T iterations: ``Q = NF_k(res)`` (absmax blocks of 64 weights), ``L, R = SVD_r(W − Q)`` with
``L = U_r √S_r``, ``R = √S_r V_rᵀ``, ``res = W − L R``. No Hessian is used (H only scores the result).
The NF-k levels (:class:`caldera.quantizers.NormalFloat`) are the 2^k quantiles of N(0, 1) at probabilities
(i + ½)/2^k, scaled to [−1, 1]
(QLoRA's NF4 adds an exact zero level; this symmetric variant has none).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from caldera.methods.registry import register_method

if TYPE_CHECKING:
    from torch import Tensor

    from caldera.algorithm.decomposition import Decomposition


def __getattr__(name: str) -> Any:
    """``nf_levels`` re-exported from :mod:`caldera.quantizers.normalfloat`, imported on first use (the module stays
    torch-free at import: see :mod:`caldera.methods.registry`)."""
    if name == "nf_levels":
        from caldera.quantizers.normalfloat import nf_levels

        return nf_levels
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def nf_quantize(x: Tensor, bits: int, block: int = 64) -> Tensor:
    """Round x (..., n), n % block == 0, to absmax-scaled NF levels per block of ``block`` weights."""
    from caldera.quantizers.normalfloat import NormalFloat

    q = NormalFloat(bits, block)
    return q.dequantize_with_scale(q.quantize_with_scale(x))


@dataclass(frozen=True)
class LoftQConfig:
    bits: int = 2
    rank: int = 64
    iters: int = 5
    block: int = 64

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 8 or self.iters < 1 or self.rank < 1:
            raise ValueError(f"LoftQConfig: bits in 1..8, iters >= 1, rank >= 1 required; got {self}")


def _loftq_shape(config: LoftQConfig, n: int, d: int) -> None:
    if d % config.block:
        raise ValueError(f"d={d} is not a multiple of block={config.block} (NF quantization blocks of a row)")


@register_method("loftq", LoftQConfig, check_shape=_loftq_shape)
def loftq(W: Tensor, H: Tensor, config: LoftQConfig, context=None) -> Decomposition:
    import torch

    from caldera.algorithm.decomposition import Decomposition
    from caldera.algorithm.ldl import regularize_hessian
    from caldera.metrics import relative_data_aware_error
    from caldera.quantizers.normalfloat import NormalFloat
    from caldera.validation import check_rank, checked_W_H

    W, H = checked_W_H(W, H)
    n, d = W.shape
    check_rank(config.rank, n, d)
    if d % config.block:
        raise ValueError(f"W has {d} columns, not a multiple of LoftQConfig.block={config.block}")
    W = W.float()
    H_eval = regularize_hessian(H)
    nf = NormalFloat(config.bits, config.block)
    res, trace = W, []
    for t in range(config.iters):
        sc = nf.quantize_with_scale(res)
        Q = nf.dequantize_with_scale(sc)
        U, S, Vh = torch.linalg.svd(W - Q, full_matrices=False)
        s = S[: config.rank].sqrt()
        L, R = (U[:, : config.rank] * s).half().float(), (s[:, None] * Vh[: config.rank]).half().float()
        res = W - L @ R
        trace.append({"outer": t, "step": "LR", "error": relative_data_aware_error(Q + L @ R, W, H_eval,
                                                                                        product=torch.float32)})
    return Decomposition(method="loftq", Q=Q, L=L, R=R, Q_codes=sc.codes, Q_scale=sc.scale, error_trace=trace,
                         error=trace[-1]["error"], best_iter=config.iters - 1, config=asdict(config),
                         q_quantizer=nf.name)
