"""Input checks shared by the algorithm's entry points. Each raises ValueError naming the argument."""

from __future__ import annotations

import torch
from torch import Tensor


def check_finite(x: Tensor, name: str) -> None:
    # a finite sum means every entry is finite (a NaN or an infinite entry makes the sum NaN or infinite): one
    # reduction, a tenth of isfinite's time; a sum that overflows or is non-finite is decided by the exact test
    if x.numel() and bool(torch.isfinite(x.sum())):
        return
    if not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} NaN/Inf entries; clean the input (e.g. reload the weights)")


def check_values(x: Tensor | None, name: str) -> None:
    """``x`` holds values: a tensor on the meta device has a shape and no values (a model built on ``meta``, or
    read lazily without its weights), so nothing can be computed from it."""
    if isinstance(x, Tensor) and x.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device: it has a shape {tuple(x.shape)} but no values (a model built with "
            "device='meta' or whose weights were not loaded); load the weights first (from_pretrained, or "
            "caldera.pipeline.partial.load_layer_weights)"
        )


def check_matrix(x: Tensor, name: str) -> None:
    if not isinstance(x, Tensor) or x.ndim != 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a 2-D tensor, got {shape}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {x.dtype}")
    check_values(x, name)
    check_finite(x, name)


def check_W_H(W: Tensor, H: Tensor) -> None:
    """W (n, d) and H (d, d) symmetric, finite."""
    check_matrix(W, "W")
    check_matrix(H, "H")
    d = W.shape[1]
    if H.shape != (d, d):
        raise ValueError(f"H must be (d, d) = ({d}, {d}) to match W of shape {tuple(W.shape)}, got {tuple(H.shape)}")
    Hd = H.detach().double()
    asym = float((Hd - Hd.T).abs().max())
    scale = float(Hd.abs().max()) or 1.0
    if asym > 1e-5 * scale:
        raise ValueError(
            f"H is not symmetric (max |H − Hᵀ| = {asym:.3g}, relative {asym / scale:.3g}); "
            "pass the symmetric second moment XᵀX/m"
        )



def checked_W_H(W: Tensor, H: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`check_W_H`, then ``(W, H)`` detached, for a method's entry point (``W, H = checked_W_H(W, H)``): the
    codes are not differentiable, so a W or H that requires grad (a model's parameter) is read as data, and the
    result holds no autograd graph (a graph would follow the codes into the checkpoint writer, which refuses it)."""
    check_W_H(W, H)
    return W.detach(), H.detach()

def check_rank(rank: int, n: int, d: int) -> None:
    if not (1 <= rank < min(n, d)):
        raise ValueError(f"rank={rank} is impossible for a {n}×{d} matrix; accepted: 1 <= rank < {min(n, d)}")
