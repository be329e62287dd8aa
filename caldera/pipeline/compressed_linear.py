"""Moved to :mod:`caldera.nn` (the compressed layer's own package: :mod:`caldera.nn.compressed_linear`,
:mod:`caldera.nn.format`, :mod:`caldera.nn.dispatch`). This module re-exports its names so that existing imports
(``from caldera.pipeline.compressed_linear import CompressedLinear``) keep working."""

from caldera.nn.compressed_linear import (  # noqa: F401 - re-exported
    KERNEL_MAX_ROWS,
    KERNELS,
    META_VERSION,
    CompressedLinear,
    dequantize,
    narrow_codes,
    quantizer_name_for_bits,
    resolve_quantizer,
)
