"""CALDERA: Calibration-Aware Low-Precision DEcomposition with Low-Rank Adaptation.

Reference reproduction of Saha et al., NeurIPS 2024. The core algorithm is a pure function::

    from caldera import CalderaConfig, caldera_decompose
    dec = caldera_decompose(W, H, CalderaConfig.preset("paper", rank=64))
    W_hat = dec.reconstruction()

See ``caldera.decomposition`` for Algorithm 1 and ``caldera.lplr`` for Algorithm 2. A compressed checkpoint
loads for inference with ``model, tokenizer = caldera.load_compressed(path)`` (a standard transformers model whose
compressed layers run from their codes).
"""

__version__ = "0.1.0"

_LAZY = {
    "CalderaConfig": "caldera.config",
    "Decomposition": "caldera.decomposition",
    "HessianContext": "caldera.decomposition",
    "caldera_decompose": "caldera.decomposition",
    "load_compressed": "caldera.pipeline.checkpoint",  # a compressed checkpoint -> (transformers model, tokenizer)
    "export_hf": "caldera.pipeline.export",  # `caldera export`: a plain Hugging Face folder
}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    """Import the public API lazily, so ``import caldera.quantizers`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'caldera' has no attribute {name!r}")
