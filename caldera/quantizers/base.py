"""The one quantizer interface every method in this package uses.

A :class:`Quantizer` maps real vectors to integer codes and back. It works in *codebook units*: the
caller chooses a scale (usually ``rms(x) / opt_scale``) so that the data the codebook sees has the RMS
the codebook was designed for. :func:`quantize_scaled` / :func:`dequantize_scaled` wrap that convention
for whole matrices (one scalar scale per matrix, as QuIP# and the CALDERA authors do).

Shapes: ``x`` is ``(..., n)`` float32 with ``n % block_size == 0``; codes are ``(..., n // block_size)``
integer tensors (the dtype is the quantizer's ``code_dtype``). ``dequantize(quantize(x))`` has ``x``'s
shape and is float32.

**Storage declaration.** What a checkpoint keeps of one (rows, features) matrix quantized by a quantizer is
declared by the quantizer: its codes (``bits_per_weight`` each weight), a float32 scale of one of the shapes
:meth:`Quantizer.scale_shapes` accepts (one per matrix or one per row by default; one per group of weights for
a group quantizer), and any tensors :meth:`Quantizer.stored_extras` names (a per-matrix codebook, say).
:meth:`Quantizer.decode` rebuilds the matrix from exactly those tensors; the loader checks each against the
declaration and the bit count (``CompressedLinear.storage_bits``) counts each as stored.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: a method's module subclasses Quantizer torch-free
    import torch
    from torch import Tensor


class Quantizer(ABC):
    """Nearest-point quantizer over a fixed codebook, in codebook units.

    Attributes:
        name: registry name (``"e8p"``, ``"e8p-rvq4"``, ...).
        block_size: weights per code (8 for the E8 lattice codebooks, 1 for scalar quantizers).
        bits_per_weight: storage cost of a code divided by ``block_size``.
        opt_scale: RMS of the input the codebook is tuned for (E8P: 1.03, QuIP# ``opt_scale``).
        num_codes: how many integer codes there are (valid codes: ``0 .. num_codes - 1``); None for a quantizer
            whose codes are not integers (:class:`~caldera.quantizers.scalar.Identity16`: float16 values).
    """

    name: str = "abstract"
    block_size: int = 1
    bits_per_weight: float = 0.0
    opt_scale: float = 1.0
    num_codes: int | None = None

    @abstractmethod
    def quantize(self, x: Tensor) -> Tensor:
        """Return integer codes of the nearest codewords to ``x`` (shape ``(..., n)``)."""

    @abstractmethod
    def dequantize(self, codes: Tensor) -> Tensor:
        """Return the float32 codewords for ``codes`` (shape ``(..., n)``)."""

    def round(self, x: Tensor) -> Tensor:
        """``dequantize(quantize(x))``; subclasses may provide a faster fused path."""
        return self.dequantize(self.quantize(x))

    def scale_shapes(self, rows: int, features: int) -> tuple[tuple[int, ...], ...]:
        """The shapes a stored float32 scale of a (rows, features) matrix's codes may have: one per matrix ``()``
        or one per row ``(rows, 1)``. A quantizer with a scale per group of weights returns that shape alone."""
        return ((), (rows, 1))

    def stored_extras(self, rows: int, features: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Tensors stored beside the codes and the scale of a (rows, features) matrix, which :meth:`decode`
        reads: ``{name: (shape, dtype)}`` (a codebook of the matrix's own, say). None by default."""
        return {}

    def decode(self, codes: Tensor, scale: Tensor, extras: Mapping[str, Tensor] | None = None) -> Tensor:
        """The float32 (rows, features) matrix from its stored tensors: ``codes`` (rows, features // block_size),
        ``scale`` of a shape of :meth:`scale_shapes` and the tensors of :meth:`stored_extras`. By default
        ``scale · dequantize(codes)`` (a scale per row broadcast along its row)."""
        return self.dequantize(codes).float() * scale.float()

    def check_shape(self, x: Tensor, arg: str = "x") -> None:
        if x.ndim == 0 or x.shape[-1] % self.block_size != 0:
            raise ValueError(
                f"{arg}: last dimension {tuple(x.shape)[-1:]} must be a multiple of the {self.name} block size "
                f"{self.block_size}; pad or choose a quantizer with a smaller block"
            )

    def fused_ldlq_available(self, x: Tensor) -> bool:
        """Whether :meth:`fused_ldlq_chunk` runs for tensors like ``x``. BlockLDLQ
        (:func:`caldera.algorithm.ldlq.block_ldlq`) then quantizes each chunk of columns in one call instead of one
        :meth:`quantize` per block. The base class has no fused chunk."""
        return False

    def fused_ldlq_chunk(
        self, F: Tensor | None, Lc: Tensor, W: Tensor, W_hat: Tensor, delta: Tensor, codes: Tensor
    ) -> None:
        """BlockLDLQ inside one chunk of ``c`` columns, in place: ``W``, ``W_hat``, ``delta`` ``(n, c)``, ``F``
        ``(n, c)`` the later chunks' feedback or None, ``Lc`` ``(c, c)``, ``codes`` ``(n, c // block_size)``
        (:meth:`caldera.quantizers.e8p.E8P.fused_ldlq_chunk` documents the recurrence). Only called where
        :meth:`fused_ldlq_available` is true."""
        raise NotImplementedError(f"{type(self).__name__} has no fused BlockLDLQ chunk")


@dataclass(frozen=True)
class ScaledCodes:
    """Codes of ``x / scale`` plus the scale: ``x ≈ scale * quantizer.dequantize(codes)``."""

    codes: Tensor
    scale: Tensor  # float32 scalar (or broadcastable per-row scale)


def rms(x: Tensor) -> Tensor:
    """Root mean square of all entries, as a float32 scalar tensor (0 maps to 1 to avoid 0/0)."""
    import torch

    r = x.float().pow(2).mean().sqrt()
    return torch.where(r > 0, r, torch.ones_like(r))


def quantize_scaled(quantizer: Quantizer, x: Tensor) -> ScaledCodes:
    """Quantize a matrix with one scalar scale ``rms(x) / opt_scale`` (QuIP#/CALDERA convention)."""
    scale = rms(x) / quantizer.opt_scale
    return ScaledCodes(quantizer.quantize(x / scale), scale)


def dequantize_scaled(quantizer: Quantizer, sc: ScaledCodes) -> Tensor:
    return quantizer.dequantize(sc.codes) * sc.scale
