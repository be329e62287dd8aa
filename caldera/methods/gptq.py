"""GPTQ/OPTQ baseline (Frantar et al. 2023; facts from quip-sharp.md §9).

Dead input columns (H_ii = 0) get H_ii = 1 and W[:, i] = 0; optional act-order (columns by decreasing diag H);
damping ``percdamp · mean(diag H)``; ``Hinv`` = upper Cholesky factor of H⁻¹; each column is rounded with a
per-row asymmetric min–max grid (optionally per group of columns) and its error ``(w − q) / Hinv_ii`` is
propagated to the remaining columns, lazily in 128-column blocks. GPTQ is LDLQ with g = 1 in forward order.

The grid is GPTQ's symmetric per-row variant (``sym=True``): the absmax half-integer grid of
:class:`caldera.quantizers.UniformRTN`, the same as the RTN baseline, so the codes store in ``CompressedLinear``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from caldera.methods.registry import register_method

if TYPE_CHECKING:
    from torch import Tensor

    from caldera.algorithm.decomposition import Decomposition


@dataclass(frozen=True)
class GPTQConfig:
    bits: int = 2
    act_order: bool = False
    percdamp: float = 0.01
    block: int = 128

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 8:
            raise ValueError(f"GPTQConfig.bits={self.bits!r}; accepted: 1..8")
        if self.block < 1 or not 0 <= self.percdamp < 1:
            raise ValueError("GPTQConfig: block >= 1 and 0 <= percdamp < 1 are required")


def _row_scale(w: Tensor, bits: int) -> Tensor:
    """Per-row absmax scale (n, 1) of the symmetric grid with 2^bits half-integer levels."""
    import torch

    amax = w.abs().amax(dim=1, keepdim=True)
    return torch.where(amax > 0, amax, torch.ones_like(amax)) / ((2**bits - 1) / 2)


def _codes(w: Tensor, scale: Tensor, bits: int) -> Tensor:
    import torch

    return torch.clamp(torch.round(w / scale + (2**bits - 1) / 2), 0, 2**bits - 1)


def _round(w: Tensor, scale: Tensor, bits: int) -> Tensor:
    return (_codes(w, scale, bits) - (2**bits - 1) / 2) * scale


@register_method("gptq", GPTQConfig)
def gptq(W: Tensor, H: Tensor, config: GPTQConfig, context=None) -> Decomposition:
    """W (n, d), H (d, d) → Decomposition with Q = the GPTQ-rounded weights (original basis, no low rank)."""
    import torch

    from caldera.algorithm.decomposition import Decomposition
    from caldera.algorithm.ldl import regularize_hessian
    from caldera.metrics import relative_data_aware_error
    from caldera.validation import checked_W_H

    W, H = checked_W_H(W, H)
    n, d = W.shape
    Wq = W.double().clone()
    Hd = H.double().clone()
    dead = Hd.diagonal() == 0
    Hd[dead, dead] = 1
    Wq[:, dead] = 0
    perm = torch.argsort(Hd.diagonal(), descending=True) if config.act_order else torch.arange(d)
    Wq, Hd = Wq[:, perm], Hd[perm][:, perm]
    Hd.diagonal().add_(config.percdamp * float(Hd.diagonal().mean()))
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(Hd)), upper=True)
    Q = torch.zeros_like(Wq)
    scale = _row_scale(Wq, config.bits)
    for b0 in range(0, d, config.block):
        b1 = min(b0 + config.block, d)
        W1, Err = Wq[:, b0:b1].clone(), torch.zeros(n, b1 - b0, dtype=Wq.dtype)
        for i in range(b1 - b0):
            col = b0 + i
            w = W1[:, i]
            q = _round(w[:, None], scale, config.bits)[:, 0]
            Q[:, col] = q
            e = (w - q) / Hinv[col, col]
            W1[:, i:] -= e[:, None] * Hinv[col, col:b1][None, :]
            Err[:, i] = e
        Wq[:, b1:] -= Err @ Hinv[b0:b1, b1:]
    Q = Q[:, torch.argsort(perm)]
    codes = _codes(Q, scale, config.bits).to(torch.int32)
    Q = Q.float()
    err = relative_data_aware_error(Q, W.float(), regularize_hessian(H), product=torch.float32)
    return Decomposition(method="gptq", Q=Q, L=None, R=None, Q_codes=codes, Q_scale=scale.float(),
                         error_trace=[{"outer": 0, "step": "Q", "error": err}], error=err, best_iter=0,
                         config=asdict(config), q_quantizer=f"uniform-{config.bits}")
