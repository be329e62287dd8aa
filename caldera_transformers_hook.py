"""Run at interpreter start by ``caldera-transformers.pth`` (installed beside the ``caldera`` package, by a wheel and
by ``pip install -e .``): registers the ``caldera`` quantization method with transformers in processes that never
``import caldera``, such as lm-eval's own CLI (``lm_eval --model hf --model_args pretrained=CKPT``).

Without it transformers does not know ``quant_method: "caldera"`` in a checkpoint's ``config.json``: it warns
"Unknown quantization type", skips the quantization and builds the dense architecture with *random* weights for
every compressed linear layer (their dense tensors are not in the checkpoint).

What runs at start-up is only this module (standard library only, nothing imported): a ``sys.meta_path`` finder
that answers for two module names (:data:`TARGETS`): ``transformers.configuration_utils`` (how transformers reads
``config.json``) and ``transformers.quantizers.auto`` (its quantizer registry, imported by every
``from_pretrained``), and returns None for every other import. When transformers imports one of them, the finder
lets the normal finder load it and then calls its function of :mod:`caldera.pipeline.hf`
(:func:`~caldera.pipeline.hf.explain_config_failures`, :func:`~caldera.pipeline.hf.register`; ``caldera``
resolved on the process's final ``sys.path``, so a checkout on ``PYTHONPATH`` wins over the installed copy).
Processes that never import transformers never import caldera. ``CALDERA_NO_TRANSFORMERS_HOOK=1`` turns the hook
off. (``caldera/__init__.py`` has the same finder for processes that do import caldera; this one must not import
caldera at start-up, so it cannot share that code.)
"""

import sys

#: transformers' modules (in import order) -> the function of caldera.pipeline.hf called once each is executed
TARGETS = {"transformers.configuration_utils": "explain_config_failures",
           "transformers.quantizers.auto": "register"}


class CalderaTransformersHook:
    """``sys.meta_path`` finder: after each module of :data:`TARGETS` is executed, call its caldera function."""

    _finding = frozenset()  # the names this finder is looking up (another hook may ask it again)

    def find_spec(self, name, path=None, target=None):
        if name not in TARGETS or name in self._finding:
            return None
        if self in sys.meta_path and all(m == name or m in sys.modules for m in TARGETS):
            sys.meta_path.remove(self)  # once per process
        self._finding = self._finding | {name}
        try:
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._finding = self._finding - {name}
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                from caldera.pipeline import hf

                getattr(hf, TARGETS[name])()
            except Exception as e:  # noqa: BLE001 - never break the user's transformers import
                import warnings

                warnings.warn(f"caldera-transformers.pth: hooking caldera into {name} failed ({type(e).__name__}: "
                              f"{e}); caldera checkpoints may not load with from_pretrained", stacklevel=2)

        spec.loader.exec_module = exec_module
        return spec


def install():
    """Put the hook first on ``sys.meta_path`` (once; not with ``CALDERA_NO_TRANSFORMERS_HOOK=1``)."""
    import os

    if os.environ.get("CALDERA_NO_TRANSFORMERS_HOOK") == "1" or any(m in sys.modules for m in TARGETS):
        return
    if not any(type(f).__name__ == "CalderaTransformersHook" for f in sys.meta_path):
        sys.meta_path.insert(0, CalderaTransformersHook())
