"""CALDERA itself (Algorithm 1) in the method registry."""

from caldera.config import CalderaConfig
from caldera.decomposition import caldera_decompose
from caldera.methods.registry import register_method

register_method("caldera", CalderaConfig, shares_hessian_context=True)(
    lambda W, H, config, context=None: caldera_decompose(W, H, config, context=context)
)
