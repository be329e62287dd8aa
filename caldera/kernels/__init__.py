"""Compressed matmul kernels: ``y = x Qᵀ`` straight from E8P / E8P-RVQ4 codes, never forming Q.

Modules:

* :mod:`caldera.kernels.fused` — the dispatcher, and the only module imported from outside this package:
  :func:`~caldera.kernels.fused.select_backend` picks ``"native"``, ``"numba"``, ``"triton"`` or none for a layer,
  :func:`~caldera.kernels.fused.codes_linear` computes the layer product ``h Qᵀ + (h Rᵀ) Lᵀ`` from the codes on
  the Numba or Triton backend, and :func:`~caldera.kernels.fused.fused_layer` prepares the whole layer
  ``y = RHT⁻¹(RHT(x) (Q + L R)ᵀ)`` as one C call (backend ``"native"``). ``CompressedLinear``
  (:mod:`caldera.nn`) calls them.
* :mod:`caldera.kernels.factors` — :class:`~caldera.kernels.factors.Factors`, the frozen low-rank part as the
  kernels read it (16-bit ``L``, ``R`` or their codes).
* :mod:`caldera.kernels.e8p_decode` — the small decode lookup arrays (derived from the E8P codebook of
  :mod:`caldera.quantizers.e8p`) and :func:`~caldera.kernels.e8p_decode.codes_matmul_reference`, the pure-torch
  reference every kernel is tested against (it dequantizes, so it is only a reference).
* :mod:`caldera.kernels.native` — the C kernels (sources in ``caldera/kernels/c/``), built at install
  time by ``setup.py`` as the optional extension ``caldera.kernels._caldera_layer`` (AVX2 or portable scalar code,
  chosen at run time) and called with one argument struct each: the int8-codebook code products and the fused
  single-call layer.
* :mod:`caldera.kernels.cpu` — Numba kernels (batch 1 and small batches): ``x Qᵀ`` from codes and the
  transposed product ``t L`` from the codes of ``Lᵀ`` (the low-rank factor's layout in ``CompressedLinear``);
  they call the C products of :mod:`caldera.kernels.native` when those built.
* :mod:`caldera.kernels.triton_e8p` — Triton kernels decoding E8P / E8P-RVQ4 codes through a 1 KiB packed
  abs-pattern lookup with the signs applied by bit operations, multiplied on tensor cores (``tl.dot``): ``x Qᵀ``
  fused with a float16 ``L t``, and the transposed product ``t L`` from the codes of ``Lᵀ`` (optional: needs
  ``triton``; tested on CPU with ``TRITON_INTERPRET=1``).
"""

from caldera.kernels.e8p_decode import E8PDecodeLookup, codes_matmul_reference, decode_lookup

__all__ = ["E8PDecodeLookup", "codes_matmul_reference", "decode_lookup"]
