"""The ``caldera`` quantization method of transformers: ``AutoModelForCausalLM.from_pretrained(CKPT)`` on a
compressed checkpoint.

A checkpoint folder (:mod:`caldera.pipeline.checkpoint`) carries ``config.json``: the base model's config plus
``quantization_config: {"quant_method": "caldera", "format_version": 2, "method": ...}``. transformers reads the
``quant_method`` and dispatches to :class:`CalderaHfQuantizer` once :func:`register` has run; ``import caldera``
arranges that (``caldera/__init__.py``: at once if transformers' quantizer registry is already imported, else by
an import hook that registers right after transformers imports it, so ``import caldera`` stays light).

What the quantizer does, in transformers' loading order:

0. transformers reads ``config.json`` (``PreTrainedConfig.get_config_dict``, wrapped by
   :func:`explain_config_failures`): when it cannot read a checkpoint folder's ``config.json`` or build a config
   from it, the checkpoint is read as :func:`~caldera.pipeline.checkpoint.load_compressed` reads it and refused
   with the same message (naming the file and the fix) instead of transformers' own ``OSError`` / ``TypeError``;
1. as soon as transformers hands the quantizer the config (:meth:`CalderaHfQuantizer.update_attn_implementation`,
   before transformers reads any tensor file, e.g. ``model.safetensors``' header for a config without ``dtype``),
   or else before the weights are read (:meth:`CalderaHfQuantizer._process_model_before_weight_loading`): the one
   reading of the checkpoint's structure that :func:`~caldera.pipeline.checkpoint.load_compressed` starts from too
   (:func:`~caldera.pipeline.checkpoint.verify.read_structure`: checksums, the config, the content manifest, the
   safetensors header against the model ``base_config`` builds: shapes, dtypes against the scheme, the ``tied``
   map equal to what the architecture ties, every weight stored once, no foreign tensor), so a checkpoint one
   loader refuses the other refuses with the same message; then every compressed ``nn.Linear`` is replaced by the
   :class:`~caldera.nn.compressed_linear.CompressedLinear` shell that reading built (tensors on the meta device);
2. transformers fills every tensor from ``model.safetensors`` (stored dtypes kept: :meth:`get_new_dtype`) and ties
   the weights the architecture ties;
3. after (:meth:`_process_model_after_weight_loading`): no tensor left on the meta device, every tied alias the
   same tensor as its source, then what ``load_compressed`` checks of the values
   (:func:`~caldera.pipeline.checkpoint.verify.check_values`: every tensor against its digest in the manifest,
   so nothing randomly initialised or cast; ±1 signs, positive scales, codes in range), each module's
   reconstruction fingerprint, the recorded summaries (:func:`~caldera.pipeline.checkpoint.check_summary`), and
   ``save_pretrained`` bound to the checkpoint writer (:func:`~caldera.pipeline.checkpoint.attach_checkpoint_config`).

Without the method registered transformers refuses the folder before building anything: ``config.json`` names as
its weights file (``transformers_weights``) a text that is no file, ``NEEDS_CALDERA`` of
:mod:`caldera.pipeline.checkpoint.format`, which says that caldera is needed and how to install it (without that key
transformers would warn "Unknown quantization type" and build a dense model with randomly initialised linear
layers); the quantizer removes the key as it first sees the config
(:meth:`CalderaHfQuantizer.update_attn_implementation`). Processes that never
``import caldera`` (``lm_eval --model hf --model_args pretrained=CKPT``) get it from the start-up hook an installed
caldera ships (``caldera-transformers.pth`` → ``caldera_transformers_hook.py``: imports caldera when transformers
loads its quantizer registry); without an install (caldera only on ``PYTHONPATH``) use ``caldera lm-eval``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from caldera.pipeline.checkpoint import FORMAT_VERSION, QUANT_METHOD
from caldera.pipeline.checkpoint.format import GUARD_KEY

_REGISTERED = False


def _classes() -> tuple[type, type]:
    from transformers.quantizers.base import HfQuantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    class CalderaQuantizationConfig(QuantizationConfigMixin):
        """``quantization_config`` of a caldera checkpoint's ``config.json``: the method and its scheme
        (:func:`~caldera.pipeline.checkpoint.quantization_scheme`: bits, ranks, quantizers, layers kept dense);
        the per-module metadata lives in ``caldera_config.json``, read and verified by the quantizer."""

        def __init__(self, format_version: int = FORMAT_VERSION, method: str | None = None, **kwargs: Any):
            self.quant_method = QUANT_METHOD
            self.format_version = format_version
            self.method = method
            self.scheme = {k: v for k, v in kwargs.items() if k != "quant_method"}

        def to_dict(self) -> dict[str, Any]:
            return {"quant_method": QUANT_METHOD, "format_version": self.format_version, "method": self.method,
                    **self.scheme}

    class CalderaHfQuantizer(HfQuantizer):
        """Loads a pre-compressed caldera checkpoint (module docstring); it cannot quantize a dense model (use
        ``caldera compress``)."""

        requires_calibration = True

        def __init__(self, quantization_config: Any, **kwargs: Any):
            super().__init__(quantization_config, **kwargs)
            self._cfg: dict[str, Any] | None = None
            self._folder: Path | None = None
            self._structure: tuple[Path, Any] | None = None  # (folder, read_structure's result) read early

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            if self.quantization_config.format_version != FORMAT_VERSION:
                raise ValueError(
                    f"config.json: quantization_config.format_version {self.quantization_config.format_version!r}; "
                    f"this caldera reads {FORMAT_VERSION} (convert older checkpoints with `caldera convert`)"
                )

        def update_attn_implementation(self, config: Any) -> Any:
            # the first look this quantizer gets at config.json's base config, before transformers uses its dtype
            # and looks up the weights file: the guard that refuses the folder without caldera goes
            # (format.NEEDS_CALDERA), so transformers reads model.safetensors; verify_manifest checks config.json
            vars(config).pop(GUARD_KEY, None)
            dt = getattr(config, "dtype", None)
            if dt is not None and not isinstance(dt, torch.dtype) and not (
                    isinstance(dt, str) and isinstance(getattr(torch, dt, None), torch.dtype)):
                raise ValueError(f"config.json: dtype {dt!r} is not a torch dtype name (e.g. 'float32'); a caldera "
                                 "checkpoint's config.json states the base config it was written with: re-run "
                                 "`caldera compress` to rebuild the checkpoint")
            folder = local_checkpoint(getattr(config, "name_or_path", None))
            if folder is not None:  # read before transformers reads a tensor file itself
                self._structure = (folder.resolve(), read_structure_on_cpu(folder))
            return super().update_attn_implementation(config)

        def get_new_dtype(self, converter: Any, param: Any, dtype: Any) -> None:
            return None  # keep every stored dtype: codes are integers, scales/signs must not be rounded

        def _process_model_before_weight_loading(self, model: Any, checkpoint_files: Any = None, **kwargs: Any):
            return _before(self, model, checkpoint_files)

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any):
            return _after(self, model)

        @property
        def is_trainable(self) -> bool:
            return False

        def is_serializable(self) -> bool:
            return True

    return CalderaQuantizationConfig, CalderaHfQuantizer


def local_checkpoint(name: Any, subfolder: str = "") -> Path | None:
    """The local checkpoint folder ``name`` (joined with ``subfolder``) names, when it is one (it holds
    ``caldera_config.json``); None for a hub id, a plain model folder or no name."""
    from caldera.pipeline.checkpoint.format import CONFIG_FILE

    if not isinstance(name, (str, Path)) or not str(name):
        return None
    folder = Path(name) / (subfolder or "")
    return folder if (folder / CONFIG_FILE).is_file() else None


def read_structure_on_cpu(folder: Path) -> Any:
    """:func:`~caldera.pipeline.checkpoint.verify.read_structure` of ``folder`` under a float32 default dtype on the
    CPU: transformers builds the model under a meta-device and ``dtype`` default, and the lookup arrays a quantizer
    builds on first use (E8P's codebook) must be real float32 tensors (the shells are explicitly meta)."""
    from caldera.pipeline.checkpoint.verify import read_structure

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.device("cpu"):
            return read_structure(folder)
    finally:
        torch.set_default_dtype(old)


def explain_config_failures() -> None:
    """Wrap ``PreTrainedConfig.get_config_dict`` (how ``AutoConfig`` and every ``from_pretrained`` read
    ``config.json``; idempotent): for a local checkpoint folder (:func:`local_checkpoint`) the config is also built
    from what was read, and when reading or building fails (``config.json`` truncated, not JSON, a base config the
    config class refuses) the checkpoint is read as ``load_compressed`` reads it (:func:`read_structure_on_cpu`),
    whose ``ValueError`` names the file and the fix. Nothing changes for other folders, hub ids, or a checkpoint
    in which that reading finds nothing wrong (transformers' own error stands)."""
    import functools

    from transformers.configuration_utils import PreTrainedConfig

    if getattr(PreTrainedConfig.get_config_dict, "caldera_explains_failures", False):
        return
    original = PreTrainedConfig.get_config_dict.__func__

    @functools.wraps(original)
    def get_config_dict(cls: type, pretrained_model_name_or_path: Any, **kwargs: Any) -> Any:
        folder = local_checkpoint(pretrained_model_name_or_path, kwargs.get("subfolder", ""))
        if folder is None:
            return original(cls, pretrained_model_name_or_path, **kwargs)
        try:
            config_dict, unused = original(cls, pretrained_model_name_or_path, **kwargs)
            build_config(config_dict)
            return config_dict, unused
        except Exception as e:  # noqa: BLE001 - whatever transformers raises, the checkpoint's own reading explains it
            failure = e
        read_structure_on_cpu(folder)  # raises what is wrong with the checkpoint (not chained to transformers' error)
        raise failure

    get_config_dict.caldera_explains_failures = True  # type: ignore[attr-defined]
    PreTrainedConfig.get_config_dict = classmethod(get_config_dict)


def build_config(config_dict: Any) -> Any:
    """The transformers config of the class ``config_dict``'s ``model_type`` names, built from it (what
    ``AutoConfig`` builds next); None when ``config_dict`` names no known model type (transformers says so)."""
    import copy

    from transformers import CONFIG_MAPPING

    model_type = config_dict.get("model_type") if isinstance(config_dict, dict) else None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None
    return CONFIG_MAPPING[model_type].from_dict(copy.deepcopy(config_dict))  # transformers' own dict untouched


def register() -> None:
    """Register the ``caldera`` quantization config and quantizer with transformers (idempotent), and explain
    failures to read a checkpoint's ``config.json`` (:func:`explain_config_failures`)."""
    global _REGISTERED
    explain_config_failures()
    if _REGISTERED:
        return
    from transformers.quantizers import auto

    cfg_cls, q_cls = _classes()
    if QUANT_METHOD not in auto.AUTO_QUANTIZATION_CONFIG_MAPPING:
        auto.register_quantization_config(QUANT_METHOD)(cfg_cls)
    if QUANT_METHOD not in auto.AUTO_QUANTIZER_MAPPING:
        auto.register_quantizer(QUANT_METHOD)(q_cls)
    _REGISTERED = True


def _before(quantizer: Any, model: Any, checkpoint_files: Any) -> Any:
    from caldera.pipeline.checkpoint.format import CONFIG_FILE, replace_module

    if not checkpoint_files:
        raise ValueError("the caldera quantization method loads a compressed checkpoint folder; none was resolved")
    folder = Path(checkpoint_files[0]).parent
    if not (folder / CONFIG_FILE).is_file():
        raise ValueError(
            f"{folder} has a caldera config.json but no {CONFIG_FILE}: for a hub repository load it with "
            "caldera.load_compressed('org/name') (downloads the whole folder), or download the whole repository "
            "(huggingface_hub.snapshot_download) and pass its folder"
        )
    early = quantizer._structure
    if early is not None and early[0] == folder.resolve():
        cfg, _, modules = early[1]  # read when transformers handed over the config
    else:
        cfg, _, modules = read_structure_on_cpu(folder)  # what load_compressed reads first, with the same checks
    quantizer._structure = None
    for path, mod in modules.items():
        replace_module(model, path, mod)
    quantizer._cfg, quantizer._folder = cfg, folder
    return model


def _after(quantizer: Any, model: Any) -> Any:
    from caldera.pipeline.checkpoint.format import bad
    from caldera.pipeline.checkpoint.loader import attach_checkpoint_config
    from caldera.pipeline.checkpoint.verify import check_fingerprint, check_summary, check_values

    cfg, folder = quantizer._cfg, quantizer._folder
    tied = cfg.get("tied", {})
    loaded = dict(model.state_dict(keep_vars=True))
    state = {k: v.detach() for k, v in loaded.items() if k not in tied}
    on_meta = sorted(k for k, v in state.items() if v.device.type == "meta")
    if on_meta:
        raise bad(folder, f"tensors {on_meta[:5]} were not loaded")
    for alias, source in tied.items():  # the architecture ties them (read_structure): one tensor under two names
        if loaded[alias] is not loaded[source]:
            raise bad(folder, f"tensor {alias!r} is not tied to {source!r} after loading")
    check_values(cfg, state, folder)  # what was loaded, bit for bit: nothing missing, initialised or cast
    for path in cfg["modules"]:
        check_fingerprint(folder, path, model.get_submodule(path), cfg["fingerprints"])
    check_summary(cfg, model, folder)
    attach_checkpoint_config(model, cfg, folder)
    return model
