"""Error metrics of the paper, accumulated in float64.

The data-aware error of App. G.1 is ``‖(Ŵ − W)Xᵀ‖_F / ‖WXᵀ‖_F``. With ``H = XᵀX / m`` it equals
``sqrt(tr(ΔHΔᵀ) / tr(WHWᵀ))`` with ``Δ = Ŵ − W``, which is how it is computed here (no X needed).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: elements per float64 slice in :func:`sq_frobenius` (a slice and its float64 copy stay in the caches)
SQ_CHUNK = 1 << 18


def sq_frobenius(x: Tensor) -> float:
    """``‖x‖_F²`` accumulated in float64, for x of any float dtype and shape on any device.

    ``torch.linalg.vector_norm(x, dtype=float64)`` converts the whole tensor first (a float64 copy of a 4096×4096
    float32 matrix: 41 ms here); this converts and sums one ``SQ_CHUNK``-element slice at a time instead, every
    product and sum in float64 (3.3 ms), the total equal to the whole-tensor float64 norm's square up to float64
    rounding.
    """
    flat = x.detach().reshape(-1)
    total = 0.0
    for s in range(0, flat.numel(), SQ_CHUNK):
        c = flat[s : s + SQ_CHUNK].double()
        total += float(torch.dot(c, c))
    return total


def data_aware_sq_error(delta: Tensor, H: Tensor, product: torch.dtype = torch.float64) -> float:
    """``tr(Δ H Δᵀ)`` for Δ (n, d) and H (d, d): the product ``Δ H`` in ``product``, the elementwise products
    and the sum in float64."""
    D = delta.double()
    return float(((delta.to(product) @ H.to(product)).double() * D).sum())


def relative_data_aware_error(W_hat: Tensor, W: Tensor, H: Tensor, *, product: torch.dtype = torch.float64) -> float:
    """``‖(Ŵ − W)Xᵀ‖_F / ‖WXᵀ‖_F`` computed through H = XᵀX/m. Shapes: (n, d), (n, d), (d, d).

    The difference and every sum are float64; ``product`` is the dtype of the two ``(n, d) × (d, d)`` products
    (float32 halves their time on a CPU and moves a reported error by about 1e-9 of itself)."""
    if W_hat.shape != W.shape:
        raise ValueError(f"W_hat has shape {tuple(W_hat.shape)} but W has shape {tuple(W.shape)}")
    denom = data_aware_sq_error(W, H, product)
    if denom <= 0:
        raise ValueError("tr(W H Wᵀ) is zero: W is zero or lies in the null space of H")
    return (data_aware_sq_error(W_hat.double() - W.double(), H, product) / denom) ** 0.5


def relative_frobenius_error(W_hat: Tensor, W: Tensor) -> float:
    return float((W_hat.double() - W.double()).norm() / W.double().norm())
