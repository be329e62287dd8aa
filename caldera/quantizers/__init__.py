"""Quantizers behind one interface (:class:`Quantizer`): E8P (2 bits), E8P residual VQ (4 and 3 bits),
uniform round-to-nearest, the paper's dithered scalar quantizer and a 16-bit pass-through.

``get_quantizer(name)`` and ``quantizer_for_bits(bits)`` return cached instances (quantizers are stateless;
the E8P tables are built once per process, in well under a second).
"""

from __future__ import annotations

from functools import lru_cache

from .base import Quantizer, ScaledCodes, dequantize_scaled, quantize_scaled, rms
from .e8p import E8P
from .normalfloat import NormalFloat
from .rvq import E8PRVQ3, E8PRVQ4
from .scalar import DitheredUniform, Identity16, UniformRTN

__all__ = [
    "Quantizer",
    "ScaledCodes",
    "quantize_scaled",
    "dequantize_scaled",
    "rms",
    "E8P",
    "E8PRVQ4",
    "E8PRVQ3",
    "UniformRTN",
    "DitheredUniform",
    "Identity16",
    "get_quantizer",
    "quantizer_for_bits",
    "NormalFloat",
]

_FIXED = {"e8p": E8P, "e8p-rvq4": E8PRVQ4, "e8p-rvq3": E8PRVQ3, "identity": Identity16}
_BY_BITS = {2: "e8p", 3: "e8p-rvq3", 4: "e8p-rvq4", 16: "identity"}
_ACCEPTED = "'e8p', 'e8p-rvq4', 'e8p-rvq3', 'identity', 'uniform-<B>' with B in 1..16 or 'nf-<B>' with B in 1..8"


@lru_cache(maxsize=None)
def _cached(name: str) -> Quantizer:
    if name in _FIXED:
        return _FIXED[name]()
    if name.startswith("nf-"):
        return NormalFloat(int(name[len("nf-") :]))
    return UniformRTN(int(name[len("uniform-") :]))


def get_quantizer(name: str) -> Quantizer:
    """Cached quantizer by registry name: ``e8p``, ``e8p-rvq4``, ``e8p-rvq3``, ``identity``, ``uniform-<B>``.

    ``uniform-<B>`` is :class:`UniformRTN` with ``per_row=False`` (B in 1..16). The dithered quantizer needs
    its range R and a generator, so it is constructed directly (``DitheredUniform(R, B)``).
    """
    if not isinstance(name, str):
        raise ValueError(f"name={name!r}: expected a string; accepted: {_ACCEPTED}")
    if name in _FIXED:
        return _cached(name)
    suffix = name[len("uniform-") :] if name.startswith("uniform-") else ""
    if suffix.isascii() and suffix.isdigit() and 1 <= int(suffix) <= 16 and suffix == str(int(suffix)):
        return _cached(name)
    if name in {f"nf-{b}" for b in range(1, 9)}:  # NormalFloat, absmax blocks of 64 (LoftQ)
        return _cached(name)
    raise ValueError(f"name={name!r}: unknown quantizer; accepted: {_ACCEPTED}")


def quantizer_for_bits(bits: int) -> Quantizer:
    """Backbone quantizer for a bit budget: 2 → E8P, 3 → E8P-RVQ3, 4 → E8P-RVQ4, 16 → Identity16."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in _BY_BITS:
        raise ValueError(f"bits={bits!r}: unsupported bit budget; accepted: {sorted(_BY_BITS)}")
    return get_quantizer(_BY_BITS[bits])
