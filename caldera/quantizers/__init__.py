"""Quantizers behind one interface (:class:`Quantizer`): E8P (2 bits), E8P residual VQ (4 and 3 bits),
uniform round-to-nearest, the paper's dithered scalar quantizer and a 16-bit pass-through.

``get_quantizer(name)`` and ``quantizer_for_bits(bits)`` return cached instances (quantizers are stateless;
the E8P codebook and its lookup arrays are built once per process, in well under a second). A method with its
own storage format registers its quantizer with :func:`register_quantizer`; ``get_quantizer`` then finds it by
name, and so does the checkpoint loader (the quantizer declares what it stores: :mod:`caldera.quantizers.base`).
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any

from .base import Quantizer, ScaledCodes, dequantize_scaled, quantize_scaled, rms

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
    "register_quantizer",
    "registered_quantizers",
    "NormalFloat",
]

#: the quantizer classes, imported on first use: importing this package (or :mod:`.base`, to subclass
#: :class:`Quantizer` in a method's module) does not import torch
_CLASSES = {"E8P": "e8p", "E8PRVQ4": "rvq", "E8PRVQ3": "rvq", "UniformRTN": "scalar", "DitheredUniform": "scalar",
            "Identity16": "scalar", "NormalFloat": "normalfloat"}


def __getattr__(name: str) -> Any:
    if name in _CLASSES:
        return getattr(importlib.import_module(f"{__name__}.{_CLASSES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_FIXED = {"e8p": "E8P", "e8p-rvq4": "E8PRVQ4", "e8p-rvq3": "E8PRVQ3", "identity": "Identity16"}
_BY_BITS = {2: "e8p", 3: "e8p-rvq3", 4: "e8p-rvq4", 16: "identity"}
_ACCEPTED = "'e8p', 'e8p-rvq4', 'e8p-rvq3', 'identity', 'uniform-<B>' with B in 1..16 or 'nf-<B>' with B in 1..8"
#: quantizers registered by methods (:func:`register_quantizer`), by name
_REGISTERED: dict[str, Quantizer] = {}


def _builtin_name(name: str) -> bool:
    return name in _FIXED or name.startswith(("uniform-", "nf-"))


def register_quantizer(quantizer: Quantizer) -> Quantizer:
    """Make ``quantizer`` (an instance: quantizers are stateless) available to :func:`get_quantizer` under its
    ``name``, so a decomposition naming it (``Decomposition.q_quantizer``) is stored as its codes, scale and
    declared extras, and a checkpoint holding them loads. Returns ``quantizer``. ``ValueError`` for a name
    already taken (by this package's quantizers or an earlier registration) or a malformed declaration."""
    if not isinstance(quantizer, Quantizer):
        raise ValueError(f"register_quantizer: expected a caldera.quantizers.Quantizer instance, got "
                         f"{type(quantizer).__name__}")
    name = quantizer.name
    if not isinstance(name, str) or not name or name == Quantizer.name or name != name.strip():
        raise ValueError(f"register_quantizer: {type(quantizer).__name__}.name={name!r}; give the quantizer a "
                         "name of its own (a non-empty string)")
    if _builtin_name(name) or name in _REGISTERED:
        raise ValueError(f"register_quantizer: the name {name!r} is taken (built in: {_ACCEPTED}; registered: "
                         f"{sorted(_REGISTERED)}); choose another")
    bs, bpw = quantizer.block_size, quantizer.bits_per_weight
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"register_quantizer: {name!r} has block_size={bs!r}; expected a positive integer")
    if isinstance(bpw, bool) or not isinstance(bpw, (int, float)) or not 0 < bpw <= 32:
        raise ValueError(f"register_quantizer: {name!r} has bits_per_weight={bpw!r}; expected a number in (0, 32]")
    nc = quantizer.num_codes
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, int) or nc < 1):
        raise ValueError(f"register_quantizer: {name!r} has num_codes={nc!r}; expected a positive integer or None")
    for ex in quantizer.stored_extras(8 * bs, 8 * bs):
        if not isinstance(ex, str) or not ex.isidentifier() or ex in ("codes", "scale", "dense"):
            raise ValueError(f"register_quantizer: {name!r} declares an extra tensor {ex!r}; extras are named by "
                             "identifiers other than 'codes', 'scale' and 'dense' (stored as Q_<name>)")
    _REGISTERED[name] = quantizer
    return quantizer


def registered_quantizers() -> list[str]:
    """Names of the quantizers registered by methods (:func:`register_quantizer`)."""
    return sorted(_REGISTERED)


@lru_cache(maxsize=None)
def _cached(name: str) -> Quantizer:
    if name in _FIXED:
        return __getattr__(_FIXED[name])()
    if name.startswith("nf-"):
        return __getattr__("NormalFloat")(int(name[len("nf-") :]))
    return __getattr__("UniformRTN")(int(name[len("uniform-") :]))


def get_quantizer(name: str) -> Quantizer:
    """Cached quantizer by registry name: ``e8p``, ``e8p-rvq4``, ``e8p-rvq3``, ``identity``, ``uniform-<B>``,
    ``nf-<B>``, or a name given to :func:`register_quantizer`.

    ``uniform-<B>`` is :class:`UniformRTN` with ``per_row=False`` (B in 1..16). The dithered quantizer needs
    its range R and a generator, so it is constructed directly (``DitheredUniform(R, B)``).
    """
    if not isinstance(name, str):
        raise ValueError(f"name={name!r}: expected a string; accepted: {_ACCEPTED}")
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _FIXED:
        return _cached(name)
    suffix = name[len("uniform-") :] if name.startswith("uniform-") else ""
    if suffix.isascii() and suffix.isdigit() and 1 <= int(suffix) <= 16 and suffix == str(int(suffix)):
        return _cached(name)
    if name in {f"nf-{b}" for b in range(1, 9)}:  # NormalFloat, absmax blocks of 64 (LoftQ)
        return _cached(name)
    extra = f"; registered: {', '.join(sorted(_REGISTERED))}" if _REGISTERED else ""
    raise ValueError(f"name={name!r}: unknown quantizer; accepted: {_ACCEPTED}{extra} (a method's own quantizer "
                     "is known once its module is imported: register_quantizer)")


def quantizer_for_bits(bits: int) -> Quantizer:
    """Backbone quantizer for a bit budget: 2 → E8P, 3 → E8P-RVQ3, 4 → E8P-RVQ4, 16 → Identity16."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in _BY_BITS:
        raise ValueError(f"bits={bits!r}: unsupported bit budget; accepted: {sorted(_BY_BITS)}")
    return get_quantizer(_BY_BITS[bits])
