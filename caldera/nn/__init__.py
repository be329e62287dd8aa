"""The compressed layer: :class:`~caldera.nn.compressed_linear.CompressedLinear`, a drop-in ``nn.Linear`` that
stores ``W ≈ unrotate(Q + L R)`` as codes and computes from them.

* :mod:`caldera.nn.compressed_linear` — the layer: building it from a decomposition or a checkpoint's tensors,
  the forward (reference path, or a kernel), fine-tuning hooks and bit accounting.
* :mod:`caldera.nn.format` — the stored form: codes in their smallest dtype, scales, signs, and the quantizer
  names that decode them.
* :mod:`caldera.nn.dispatch` — the choice of kernel (:mod:`caldera.kernels`) and the calls into it.

Whole models (compression, checkpoints, Hugging Face loading) are :mod:`caldera.pipeline`'s.
"""

from caldera.nn.compressed_linear import CompressedLinear
from caldera.nn.dispatch import KERNEL_MAX_ROWS, KERNELS
from caldera.nn.format import META_VERSION, dequantize, narrow_codes, quantizer_name_for_bits, resolve_quantizer

__all__ = ["CompressedLinear", "KERNELS", "KERNEL_MAX_ROWS", "META_VERSION", "dequantize", "narrow_codes",
           "quantizer_name_for_bits", "resolve_quantizer"]
