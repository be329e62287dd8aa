"""Run at interpreter start by ``caldera-transformers.pth`` (installed beside the ``caldera`` package, by a wheel and
by ``pip install -e .``): registers the ``caldera`` quantization method with transformers in processes that never
``import caldera``, such as lm-eval's own CLI (``lm_eval --model hf --model_args pretrained=CKPT``).

Without it transformers does not know ``quant_method: "caldera"`` in a checkpoint's ``config.json``: it warns
"Unknown quantization type", skips the quantization and builds the dense architecture with *random* weights for
every compressed linear layer (their dense tensors are not in the checkpoint).

What runs at start-up is only this module (standard library only, nothing imported): a ``sys.meta_path`` finder
that answers for one module name, ``transformers.quantizers.auto`` (transformers' quantizer registry, imported
by every ``from_pretrained``), and returns None for every other import. When transformers imports that module,
the finder lets the normal finder load it and then calls :func:`caldera.pipeline.hf.register` (``caldera``
resolved on the process's final ``sys.path``, so a checkout on ``PYTHONPATH`` wins over the installed copy).
Processes that never import transformers never import caldera. ``CALDERA_NO_TRANSFORMERS_HOOK=1`` turns the hook
off. (``caldera/__init__.py`` has the same finder for processes that do import caldera; this one must not import
caldera at start-up, so it cannot share that code.)
"""

import sys

TARGET = "transformers.quantizers.auto"


class CalderaTransformersHook:
    """``sys.meta_path`` finder: after ``transformers.quantizers.auto`` is executed, ``import caldera``."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once per process
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                from caldera.pipeline.hf import register

                register()
            except Exception as e:  # noqa: BLE001 - never break the user's transformers import
                import warnings

                warnings.warn(f"caldera-transformers.pth: registering caldera failed ({type(e).__name__}: {e}); "
                              "caldera checkpoints will not load with from_pretrained", stacklevel=2)

        spec.loader.exec_module = exec_module
        return spec


def install():
    """Put the hook first on ``sys.meta_path`` (once; not with ``CALDERA_NO_TRANSFORMERS_HOOK=1``)."""
    import os

    if os.environ.get("CALDERA_NO_TRANSFORMERS_HOOK") == "1" or TARGET in sys.modules:
        return
    if not any(type(f).__name__ == "CalderaTransformersHook" for f in sys.meta_path):
        sys.meta_path.insert(0, CalderaTransformersHook())
