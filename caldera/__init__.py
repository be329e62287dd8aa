"""CALDERA: Calibration-Aware Low-Precision DEcomposition with Low-Rank Adaptation.

Reference reproduction of Saha et al., NeurIPS 2024. The core algorithm is a pure function::

    from caldera import CalderaConfig, caldera_decompose
    dec = caldera_decompose(W, H, CalderaConfig.preset("paper", rank=64))
    W_hat = dec.reconstruction()

See ``caldera.decomposition`` for Algorithm 1 and ``caldera.lplr`` for Algorithm 2. A compressed checkpoint
loads for inference with ``model, tokenizer = caldera.load_compressed(path)`` (a standard transformers model whose
compressed layers run from their codes); after ``import caldera`` the same folder also loads with
``AutoModelForCausalLM.from_pretrained(path)`` (the ``caldera`` quantization method, :mod:`caldera.pipeline.hf`).
"""

from caldera.version import __version__

_LAZY = {
    "CalderaConfig": "caldera.config",
    "Decomposition": "caldera.decomposition",
    "HessianContext": "caldera.decomposition",
    "caldera_decompose": "caldera.decomposition",
    "load_compressed": "caldera.pipeline.checkpoint",  # a compressed checkpoint -> (transformers model, tokenizer)
    "export_hf": "caldera.pipeline.export",  # `caldera export`: a plain Hugging Face folder
    "convert_checkpoint": "caldera.pipeline.checkpoint",  # `caldera convert`: format 1 -> the current format
}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    """Import the public API lazily, so ``import caldera.quantizers`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'caldera' has no attribute {name!r}")


_HF_REGISTRY = "transformers.quantizers.auto"


class _RegisterWithTransformers:
    """Import hook (``sys.meta_path``): right after transformers imports its quantizer registry, register the
    ``caldera`` method (:func:`caldera.pipeline.hf.register`). ``import caldera`` thus never imports transformers
    itself (several seconds), yet ``from_pretrained`` on a checkpoint works in any process that imported caldera."""

    def find_spec(self, name, path, target=None):
        if name != _HF_REGISTRY:
            return None
        import sys

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            try:
                from caldera.pipeline.hf import register

                register()
            except Exception as e:  # noqa: BLE001 - never break the user's transformers import
                import warnings

                warnings.warn(
                    f"caldera could not register its quantization method with transformers ({type(e).__name__}: "
                    f"{e}); from_pretrained on caldera checkpoints will not work, load_compressed still does",
                    stacklevel=2,
                )

        spec.loader.exec_module = exec_module
        return spec


def _hook_transformers() -> None:
    import sys

    if _HF_REGISTRY in sys.modules:
        from caldera.pipeline.hf import register

        register()
    elif not any(isinstance(f, _RegisterWithTransformers) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterWithTransformers())


_hook_transformers()
