"""The frozen low-rank part of a compressed layer, as the kernels read it (shared by the dispatcher and the
backends, so that none of them imports another for it)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Factors:
    """Frozen low-rank part: 16-bit ``L`` (n, k) and ``R`` (k, d), or codes of ``Lᵀ`` (k, n/8) and ``R`` (k, d/8)
    with scalar scales and a quantizer name from :data:`caldera.kernels.e8p_decode.SUPPORTED`."""

    L: Tensor | None = None
    R: Tensor | None = None
    L_codes: Tensor | None = None
    L_scale: Tensor | None = None
    R_codes: Tensor | None = None
    R_scale: Tensor | None = None
    quantizer: str | None = None
