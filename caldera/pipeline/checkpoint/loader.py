"""Loading a verified checkpoint into the base transformers model with its ``CompressedLinear`` layers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from caldera.nn.compressed_linear import KERNELS, CompressedLinear
from caldera.pipeline.checkpoint.format import (
    _RERUN,
    FORMAT_VERSION,
    GENERATION_CONFIG_FILE,
    MODEL_FILE,
    _module_tensors,
    bad,
    load_tokenizer_files,
    replace_module,
)
from caldera.pipeline.checkpoint.verify import (
    build_base_model,
    check_module,
    check_summary,
    other_file_changes,
    read_checkpoint,
)
from caldera.pipeline.checkpoint.writer import save_compressed


def materialize(model: nn.Module, dtype: torch.dtype | None = None) -> int:
    """Replace every :class:`CompressedLinear` of ``model`` in place by its dense reconstruction
    (:meth:`CompressedLinear.to_linear`); returns how many were replaced. Used by evaluation with
    ``eval.weights: reconstructed`` (same scores up to float rounding, faster on CPUs). ``dtype``: the dense
    layers' dtype (default float32); each float32 Ŵ is cast as it is made, so with ``dtype=torch.float16``
    no float32 copy of the model is ever held (one layer's at a time)."""
    paths = [name for name, mod in model.named_modules() if isinstance(mod, CompressedLinear)]
    for path in paths:
        lin = model.get_submodule(path).to_linear()
        replace_module(model, path, lin if dtype is None else lin.to(dtype))
    return len(paths)


#: vocabulary of the small model :func:`reference_buffers` builds first (its non-persistent buffers do not depend on
#: the vocabulary; a full Gemma-3 270M, 262,144 entries, takes ~8 s to build and initialise on one CPU thread)
REFERENCE_VOCAB = 16


def reference_buffers(config: Any, wanted: dict[str, Tensor]) -> dict[str, Tensor]:
    """Values of the non-persistent buffers ``wanted`` (name -> the meta tensor) of a model of ``config``, from a
    model built on the CPU: first one with a :data:`REFERENCE_VOCAB`-entry vocabulary (embedding and LM head are
    the bulk of a small model's parameters), else, when that one lacks a buffer, gives it another shape or dtype,
    or cannot be built, the model itself."""
    import copy

    from transformers import AutoModelForCausalLM

    small = copy.deepcopy(config)
    try:
        small.vocab_size = REFERENCE_VOCAB
        got = dict(AutoModelForCausalLM.from_config(small).named_buffers())
        if all(n in got and got[n].shape == b.shape and got[n].dtype == b.dtype for n, b in wanted.items()):
            return {n: got[n] for n in wanted}
    except Exception:  # noqa: BLE001 - any refusal of the altered config: build the model itself
        pass
    got = dict(AutoModelForCausalLM.from_config(config).named_buffers())
    return {n: got[n] for n in wanted}


def resolve_checkpoint(name: str | os.PathLike, revision: str | None = None) -> Path:
    """A local checkpoint folder for ``name``: the folder itself, or a Hugging Face hub id (``org/name``)
    downloaded (or found in the hub cache) with ``huggingface_hub.snapshot_download``."""
    p = Path(name).expanduser()
    if p.exists() or os.path.isabs(str(name)) or str(name).startswith(".") or str(name).count("/") != 1:
        return p
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name), revision=revision))
    except Exception as e:  # noqa: BLE001 - offline, unknown repo, auth: one message
        raise FileNotFoundError(
            f"checkpoint {name!r} is neither a local folder nor a hub repository that could be fetched "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); check the path or the repo id"
        ) from None


def cast_dense(model: nn.Module, dtype: torch.dtype) -> None:
    """Cast the floating parameters and buffers outside :class:`CompressedLinear` modules (embeddings, norms,
    lm_head) to ``dtype``; compressed layers keep their stored dtypes (they compute in float32 and return the
    input's dtype)."""
    for mod in model.modules():
        if isinstance(mod, CompressedLinear):
            continue
        for t in mod._parameters.values():
            if t is not None and t.is_floating_point():
                t.data = t.data.to(dtype)


def load_compressed(
    folder: str | os.PathLike,
    *,
    load_tokenizer: bool = True,
    cache_dequantized: bool = True,
    kernel: str = "auto",
    verify: bool = True,
    device_map: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    revision: str | None = None,
) -> tuple[nn.Module, Any | None]:
    """Load a checkpoint written by :func:`save_compressed` / ``assemble_checkpoint``.

    Returns ``(model, tokenizer or None)``; the model is the base architecture (``LlamaForCausalLM``,
    ``Gemma3ForCausalLM``, ...) in eval mode whose compressed linear layers are :class:`CompressedLinear`.
    ``folder`` is a local folder or a hub id (``org/name``, fetched with ``huggingface_hub``; ``revision``).
    Everything is verified before the model is built (:func:`read_checkpoint`): checksums, no file the loader
    would read unlisted, the content manifest (every tensor's digest, the base config's, the tokenizer files'),
    the metadata against the tensors and each module's reconstruction fingerprint. A checkpoint that fails any
    of it is refused with a ``ValueError`` naming the file or key; ``verify=False`` is the explicit opt-out
    (structural checks only). Format-1 checkpoints are refused with a pointer to ``caldera convert``.

    ``kernel`` (``auto`` | ``kernel`` | ``reference``) and ``cache_dequantized`` choose how every compressed layer
    computes (:class:`CompressedLinear`; ``auto``: the measured-faster path on the device the model is moved to).
    ``device_map``: one device (``"cpu"``, ``"cuda:0"``) the model is moved to (for ``"auto"`` or a per-module
    map use ``AutoModelForCausalLM.from_pretrained(folder, device_map=...)`` after ``import caldera``).
    ``dtype``: the dtype of the uncompressed parameters (embeddings, norms, lm_head; :func:`cast_dense`).
    The same checkpoint loads with ``AutoModelForCausalLM.from_pretrained(folder)`` once ``caldera`` is imported
    (:mod:`caldera.pipeline.hf`); for a folder that needs no ``caldera`` import use ``caldera export``.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r}; accepted: {', '.join(KERNELS)}")
    if isinstance(dtype, str):
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype, dtype)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype={dtype!r}; accepted: float32, bfloat16, float16 (or a torch.dtype)")
    if isinstance(device_map, dict) or device_map == "auto":
        raise ValueError(
            f"device_map={device_map!r}: load_compressed moves the whole model to one device (e.g. 'cuda:0'); for "
            "'auto' or a per-module map use AutoModelForCausalLM.from_pretrained(CKPT, device_map=...) after "
            "`import caldera`"
        )
    folder = resolve_checkpoint(folder, revision)
    cfg, tensors = read_checkpoint(folder, verify=verify)
    model = _assemble(cfg, tensors, folder, verify=verify, cache_dequantized=cache_dequantized, kernel=kernel)
    if dtype is not None:
        cast_dense(model, dtype)
    if device_map is not None:
        model.to(device_map)
    tokenizer = None
    if load_tokenizer and any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        if verify:
            diff = {k: v for k, v in other_file_changes(folder, cfg["manifest"]["files"]).items() if v}
            if diff:
                import warnings

                warnings.warn(f"checkpoint {folder}: the files beside the model are not the ones written with it "
                              f"({'; '.join(f'{k}: {v[:5]}' for k, v in diff.items())}); the model is verified, the "
                              "tokenizer is loaded from the folder as it is now", stacklevel=2)
        tokenizer = load_tokenizer_files(folder)
    return model, tokenizer


def _assemble(
    cfg: dict[str, Any], tensors: dict[str, Tensor], folder: Path, *, verify: bool, **kw: Any
) -> nn.Module:
    """The base model with its compressed modules, from a config and tensors that :func:`read_checkpoint`
    returned; the checkpoint's config is kept as ``model.caldera_checkpoint_config`` (``save_pretrained``)."""
    config, model = build_base_model(cfg, folder)  # read_checkpoint checked the tensors against it
    fingerprints = cfg.get("fingerprints") if verify else None
    for path, meta in cfg["modules"].items():
        mod = check_module(folder, path, meta, _module_tensors(tensors, path), fingerprints, **kw)
        replace_module(model, path, mod)
    if verify and cfg["format_version"] == FORMAT_VERSION:  # format 1: caldera convert recomputes the summary
        check_summary(cfg, model, folder)
    compressed_keys = {k for k in tensors if any(k.startswith(p + ".") for p in cfg["modules"])}
    rest = {k: v for k, v in tensors.items() if k not in compressed_keys}
    try:
        missing, unexpected = model.load_state_dict(rest, strict=False, assign=True)
    except RuntimeError as e:
        raise bad(folder, f"{MODEL_FILE} does not fit the base architecture ({e})") from None
    tied = cfg.get("tied", {})
    missing = [k for k in missing if k not in tied and not any(k.startswith(p + ".") for p in cfg["modules"])]
    if missing or unexpected:
        raise ValueError(
            f"{folder / MODEL_FILE} does not match its config: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}; {_RERUN}"
        )
    for alias, source in tied.items():
        a_owner, _, a_name = alias.rpartition(".")
        s_owner, _, s_name = source.rpartition(".")
        setattr(model.get_submodule(a_owner), a_name, getattr(model.get_submodule(s_owner), s_name))
    # Non-persistent buffers (rotary inv_freq, Gemma's embed_scale) were created on the meta device: rebuild
    # rotary modules from the config; take any other such buffer from a model built on the CPU.
    for mpath, mod in list(model.named_modules()):
        if any(b is not None and b.device.type == "meta" for b in mod.buffers(recurse=False)):
            if "RotaryEmbedding" in type(mod).__name__:
                replace_module(model, mpath, type(mod)(config=config))
    meta_buffers = {n: b for n, b in model.named_buffers() if b.device.type == "meta"}
    if meta_buffers:
        reference = reference_buffers(config, meta_buffers)
        for name in meta_buffers:
            owner, _, attr = name.rpartition(".")
            model.get_submodule(owner).register_buffer(attr, reference[name].clone(), persistent=False)
        del reference
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.device.type == "meta"]
    if left:
        raise ValueError(f"{folder}: tensors {left[:5]} were not restored; {_RERUN}")
    model.eval()
    attach_checkpoint_config(model, cfg, folder)
    return model


#: Keys of a checkpoint config that :func:`save_compressed` recomputes; every other key is carried over.
_DERIVED_KEYS = ("format_version", "base_config", "method", "method_config", "modules", "tied", "fingerprints",
                 "manifest")


def _save_pretrained(model: nn.Module, save_directory: str | os.PathLike, *, tokenizer: Any | None = None,
                     **kwargs: Any) -> Path:
    """``save_pretrained`` of a model with compressed layers: the checkpoint format again (:func:`save_compressed`:
    ``config.json`` with the ``caldera`` quantization config, ``model.safetensors``, ``caldera_config.json``
    with the content manifest, ``checksums.json``), written atomically to a new folder. After
    :func:`materialize` (no compressed layer left) it is transformers' own ``save_pretrained`` of the dense model,
    without the quantization config."""
    if not any(isinstance(m, CompressedLinear) for m in model.modules()):  # materialize()d: a dense model now
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        elif getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config
        type(model).save_pretrained(model, save_directory, **kwargs)
        if tokenizer is not None:
            tokenizer.save_pretrained(save_directory)
        return Path(save_directory)
    ignored = {"safe_serialization", "is_main_process", "max_shard_size"}
    unsupported = sorted(k for k, v in kwargs.items() if k not in ignored and v not in (None, False))
    if unsupported:
        raise ValueError(
            f"save_pretrained of a caldera-compressed model does not support {unsupported}: it writes one verified "
            "checkpoint folder (safetensors, no sharding, no hub push); push the folder with huggingface_hub"
        )
    out = Path(save_directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(
            f"save_pretrained({out}): the folder exists and is not empty; a caldera checkpoint is written as a "
            "whole (and would replace it): choose a new folder or remove it"
        )
    cfg = getattr(model, "caldera_checkpoint_config", {})
    extra = {k: v for k, v in cfg.items() if k not in _DERIVED_KEYS}
    return save_compressed(model, out, method=cfg.get("method", "unknown"),
                           method_config=cfg.get("method_config", {}), tokenizer=tokenizer, extra=extra,
                           generation_config=getattr(model, "caldera_generation_config", None))


def attach_checkpoint_config(model: nn.Module, cfg: dict[str, Any], folder: str | os.PathLike | None = None) -> None:
    """Keep the checkpoint's config on ``model`` (and the bytes of the ``generation_config.json`` of ``folder``, the
    checkpoint it was loaded from, when it has one) and make ``model.save_pretrained(DIR, tokenizer=None)`` write
    the checkpoint format (:func:`_save_pretrained`: provenance and generation config carried over) instead of a
    plain transformers folder."""
    import types

    model.caldera_checkpoint_config = {k: v for k, v in cfg.items() if k not in ("fingerprints", "manifest")}
    gen = Path(folder) / GENERATION_CONFIG_FILE if folder is not None else None
    model.caldera_generation_config = gen.read_bytes() if gen is not None and gen.is_file() else None
    model.save_pretrained = types.MethodType(_save_pretrained, model)
