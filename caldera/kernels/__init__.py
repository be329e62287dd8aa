"""Compressed matmul kernels: ``y = x Qᵀ`` straight from E8P / E8P-RVQ4 codes, never forming Q.

Modules:

* :mod:`caldera.kernels.tables` — the small decode tables (derived from the E8P codebook of
  :mod:`caldera.quantizers.e8p`) and :func:`~caldera.kernels.tables.codes_matmul_reference`, the pure-torch
  reference every kernel is tested against (it dequantizes, so it is only a reference).
* :mod:`caldera.kernels.cpu` — Numba kernels (batch 1 and small batches): ``x Qᵀ`` from codes and the
  transposed product ``t L`` from the codes of ``Lᵀ`` (the low-rank factor's layout in ``CompressedLinear``).
* :mod:`caldera.kernels.triton_e8p` — a Triton kernel fusing E8P decode, the matrix–vector product and the
  16-bit low-rank part ``L t`` (optional: needs ``triton``; tested on CPU with ``TRITON_INTERPRET=1``).
* :mod:`caldera.kernels.fused` — :func:`~caldera.kernels.fused.compressed_forward`, the whole layer
  ``y = RHT⁻¹(RHT(x) (Q + L R)ᵀ)`` from the stored tensors, choosing the fastest available kernel.
"""

from caldera.kernels.tables import E8PDecodeTables, codes_matmul_reference, decode_tables

__all__ = ["E8PDecodeTables", "codes_matmul_reference", "decode_tables"]
