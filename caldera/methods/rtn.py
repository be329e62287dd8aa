"""Round-to-nearest baseline: per-row absmax uniform scalar rounding, no data (quip-sharp.md §9)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from caldera.methods.registry import register_method

if TYPE_CHECKING:
    import torch

    from caldera.algorithm.decomposition import Decomposition


@dataclass(frozen=True)
class RTNConfig:
    bits: int = 2
    per_row: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 8:
            raise ValueError(f"RTNConfig.bits={self.bits!r}; accepted: 1..8")


@register_method("rtn", RTNConfig)
def rtn(W: torch.Tensor, H: torch.Tensor, config: RTNConfig, context=None) -> Decomposition:
    import torch

    from caldera.algorithm.decomposition import Decomposition
    from caldera.algorithm.ldl import regularize_hessian
    from caldera.metrics import relative_data_aware_error
    from caldera.quantizers import UniformRTN
    from caldera.validation import checked_W_H

    W, H = checked_W_H(W, H)
    q = UniformRTN(config.bits, per_row=config.per_row)
    sc = q.quantize_with_scale(W.float())
    Q = q.dequantize_with_scale(sc)
    err = relative_data_aware_error(Q, W.float(), regularize_hessian(H), product=torch.float32)
    return Decomposition(
        method="rtn", Q=Q, L=None, R=None, Q_codes=sc.codes, Q_scale=sc.scale,
        error_trace=[{"outer": 0, "step": "Q", "error": err}], error=err, best_iter=0, config=asdict(config),
        q_quantizer=q.name,
    )
