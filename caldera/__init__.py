"""CALDERA: Calibration-Aware Low-Precision DEcomposition with Low-Rank Adaptation.

Reference reproduction of Saha et al., NeurIPS 2024. The core algorithm is a pure function::

    from caldera import CalderaConfig, caldera_decompose
    dec = caldera_decompose(W, H, CalderaConfig.preset("paper", rank=64))
    W_hat = dec.reconstruction()

See ``caldera.algorithm.decomposition`` for Algorithm 1 and ``caldera.algorithm.lplr`` for Algorithm 2. A compressed
checkpoint loads for inference with ``model, tokenizer = caldera.load_compressed(path)`` (a standard transformers
model whose compressed layers run from their codes); after ``import caldera`` the same folder also loads with
``AutoModelForCausalLM.from_pretrained(path)`` (the ``caldera`` quantization method, :mod:`caldera.pipeline.hf`).
A whole model compresses from Python as the ``caldera hessians`` and ``caldera compress`` commands compress it::

    H = caldera.hessians("smollm2", "lambada-books", out="H")
    model = caldera.compress("smollm2", H, method="caldera", preset="paper", params={"rank": 64})

(:mod:`caldera.api`; its reference, generated from the docstrings, is ``docs/api.md``).
"""

from caldera.version import __version__

_LAZY = {
    "hessians": "caldera.api",  # `caldera hessians`: calibration Hessians of a whole model
    "compress": "caldera.api",  # `caldera compress`: the compressed model (or its checkpoint folder)
    "CalderaConfig": "caldera.algorithm.config",
    "Decomposition": "caldera.algorithm.decomposition",
    "HessianContext": "caldera.algorithm.decomposition",
    "caldera_decompose": "caldera.algorithm.decomposition",
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


#: transformers' modules whose import calls a function of :mod:`caldera.pipeline.hf` (in import order): its
#: config reading (then :func:`~caldera.pipeline.hf.explain_config_failures`) and its quantizer registry (then
#: :func:`~caldera.pipeline.hf.register`)
_HF_MODULES = {"transformers.configuration_utils": "explain_config_failures",
               "transformers.quantizers.auto": "register"}


class _RegisterWithTransformers:
    """Import hook (``sys.meta_path``): right after transformers imports each module of :data:`_HF_MODULES`, call
    its function of :mod:`caldera.pipeline.hf` (the ``caldera`` method registered, failures to read a checkpoint's
    ``config.json`` explained). ``import caldera`` thus never imports transformers itself (several seconds), yet
    ``from_pretrained`` on a checkpoint works in any process that imported caldera."""

    _finding: frozenset = frozenset()  # the names this finder is looking up (another hook may ask it again)

    def find_spec(self, name, path, target=None):
        if name not in _HF_MODULES or name in self._finding:
            return None
        import sys

        self._finding = self._finding | {name}
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._finding = self._finding - {name}
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if self in sys.meta_path and all(m in sys.modules for m in _HF_MODULES):
                sys.meta_path.remove(self)
            try:
                from caldera.pipeline import hf

                getattr(hf, _HF_MODULES[name])()
            except Exception as e:  # noqa: BLE001 - never break the user's transformers import
                import warnings

                warnings.warn(
                    f"caldera could not hook into transformers' {name} ({type(e).__name__}: {e}); "
                    "from_pretrained on caldera checkpoints may not work, load_compressed still does",
                    stacklevel=2,
                )

        spec.loader.exec_module = exec_module
        return spec


def _hook_transformers() -> None:
    import sys

    loaded = [m for m in _HF_MODULES if m in sys.modules]
    if loaded:
        from caldera.pipeline import hf

        for m in loaded:
            getattr(hf, _HF_MODULES[m])()
    if len(loaded) < len(_HF_MODULES) and not any(isinstance(f, _RegisterWithTransformers) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterWithTransformers())


_hook_transformers()
