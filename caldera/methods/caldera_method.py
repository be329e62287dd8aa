"""CALDERA itself (Algorithm 1) in the method registry."""

from caldera.algorithm.config import CalderaConfig
from caldera.methods.registry import register_method


def hadamard_ldlq_shape(config, n: int, d: int, *, quantized_factors: bool = False) -> None:
    """``ValueError`` when an n×d matrix does not fit an RHT + BlockLDLQ method (what ``caldera_decompose`` and
    QuIP# refuse mid-run): d a multiple of the LDLQ block, n too when the factors are quantized (codes of Lᵀ),
    and with ``config.rht`` both sizes of a supported Hadamard form."""
    from caldera.algorithm.hadamard import hadamard_factor
    from caldera.algorithm.ldlq import LDL_BLOCK

    if d % LDL_BLOCK:
        raise ValueError(f"d={d} is not a multiple of {LDL_BLOCK} (BlockLDLQ quantizes blocks of {LDL_BLOCK} columns)")
    if quantized_factors and n % LDL_BLOCK:
        raise ValueError(f"n={n} is not a multiple of {LDL_BLOCK}, which quantized factors need (use 16-bit factors)")
    if getattr(config, "rht", False):
        for size in (n, d):
            hadamard_factor(size)


def caldera(W, H, config: CalderaConfig, context=None):
    """Algorithm 1: :func:`caldera.algorithm.decomposition.caldera_decompose` (imported here: the module stays
    torch-free)."""
    from caldera.algorithm.decomposition import caldera_decompose

    return caldera_decompose(W, H, config, context=context)


register_method(
    "caldera", CalderaConfig, shares_hessian_context=True,
    check_shape=lambda c, n, d: hadamard_ldlq_shape(c, n, d, quantized_factors=c.factors_quantized),
)(caldera)
