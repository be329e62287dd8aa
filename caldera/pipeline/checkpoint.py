"""Compressed-model checkpoints: a folder of safetensors + JSON, no pickle.

Layout of a checkpoint folder::

    model.safetensors      every tensor: the base model's non-linear weights (embeddings, norms, lm_head
                           unless tied to the embeddings) under their usual names, plus the state of every
                           CompressedLinear under its module path
                           (``model.layers.0.self_attn.q_proj.Q_codes``)
    caldera_config.json    format version, base model config dict, method name + config, per-module
                           metadata (shapes, rank, bits, quantizer names), bits summary, errors
    tokenizer files        optional (``tokenizer.save_pretrained``)
    checksums.json         sha256 of every other file

The folder is written under a temporary sibling name and renamed into place. :func:`load_compressed`
verifies every checksum first, then builds ``AutoModelForCausalLM.from_config(base_config)`` (on the meta
device: no random initialization, no hub access), swaps in the ``CompressedLinear`` modules and assigns the
stored tensors.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from caldera.pipeline.compressed_linear import CompressedLinear

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "caldera_config.json"
CHECKSUM_FILE = "checksums.json"
_RERUN = "re-run `caldera compress` to rebuild the checkpoint"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _get_module(root: nn.Module, path: str) -> nn.Module:
    m = root
    for part in path.split("."):
        m = getattr(m, part)
    return m


def replace_module(root: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = _get_module(root, parent_path) if parent_path else root
    setattr(parent, name, new)


def tied_keys(model: nn.Module) -> dict[str, str]:
    """``{alias: source}`` for state-dict entries that share storage with an earlier entry (tied lm_head)."""
    seen: dict[tuple, str] = {}
    out = {}
    for k, v in model.state_dict(keep_vars=True).items():
        if v.device.type == "meta" or v.numel() == 0:
            continue
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()), v.dtype)
        if key in seen:
            out[k] = seen[key]
        else:
            seen[key] = k
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, torch.dtype):
        return str(o).removeprefix("torch.")
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def base_config_dict(model: nn.Module) -> dict[str, Any]:
    cfg = model.config.to_dict()
    for k in ("_name_or_path", "quantization_config", "transformers_version"):
        cfg.pop(k, None)
    return cfg


def write_checkpoint(
    out_dir: str | os.PathLike,
    tensors: dict[str, Tensor],
    config: dict[str, Any],
    tokenizer: Any | None = None,
) -> Path:
    """Write ``tensors`` + ``config`` (+ tokenizer) + checksums to ``out_dir`` atomically (tmp + rename)."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f"{out.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
    try:
        flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        save_file(flat, str(tmp / MODEL_FILE), metadata={"format": f"caldera-checkpoint/{FORMAT_VERSION}"})
        cfg = {"format_version": FORMAT_VERSION, **config}
        (tmp / CONFIG_FILE).write_text(json.dumps(cfg, indent=1, sort_keys=True, default=_json_default) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        sums = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / CHECKSUM_FILE).write_text(json.dumps({"sha256": sums}, indent=1, sort_keys=True) + "\n")
        mask = os.umask(0)
        os.umask(mask)
        for p in tmp.rglob("*"):
            if p.is_file():
                os.chmod(p, 0o666 & ~mask)  # safetensors and mkdtemp create owner-only files
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
        os.chmod(tmp, 0o777 & ~mask)
        old = None
        if out.exists():
            old = out.with_name(f"{out.name}.tmp-old-{os.getpid()}")
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def save_compressed(
    model: nn.Module,
    out_dir: str | os.PathLike,
    *,
    method: str,
    method_config: dict[str, Any],
    tokenizer: Any | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Save a model whose linear layers were (partly) replaced by :class:`CompressedLinear` modules."""
    tied = tied_keys(model)
    tensors = {k: v for k, v in model.state_dict().items() if k not in tied}
    modules = {name: m.metadata() for name, m in model.named_modules() if isinstance(m, CompressedLinear)}
    if not modules:
        raise ValueError("the model has no CompressedLinear modules; compress it first")
    config = {
        "base_config": base_config_dict(model),
        "method": method,
        "method_config": method_config,
        "modules": modules,
        "tied": tied,
        **(extra or {}),
    }
    return write_checkpoint(out_dir, tensors, config, tokenizer)


def verify_checksums(folder: str | os.PathLike) -> dict[str, str]:
    """Check every file listed in ``checksums.json``; ``ValueError`` naming the first bad file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist; run `caldera compress` first")
    cpath = folder / CHECKSUM_FILE
    try:
        sums = json.loads(cpath.read_text())["sha256"]
        if not isinstance(sums, dict) or MODEL_FILE not in sums or CONFIG_FILE not in sums:
            raise ValueError("incomplete file list")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{cpath} is missing or corrupt ({e}); the checkpoint cannot be trusted: {_RERUN}") from None
    for name, expected in sums.items():
        p = folder / name
        if not p.is_file():
            raise ValueError(f"checkpoint file {p} is missing; {_RERUN}")
        got = sha256_file(p)
        if got != expected:
            raise ValueError(
                f"checkpoint file {p} is corrupt or truncated (sha256 {got[:12]}… != {expected[:12]}…); {_RERUN}"
            )
    return sums


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    return json.loads((Path(folder) / CONFIG_FILE).read_text())


def materialize(model: nn.Module) -> int:
    """Replace every :class:`CompressedLinear` of ``model`` in place by its dense reconstruction
    (:meth:`CompressedLinear.to_linear`); returns how many were replaced. Used by evaluation with
    ``eval.weights: reconstructed`` (same scores up to float rounding, faster on CPUs)."""
    paths = [name for name, mod in model.named_modules() if isinstance(mod, CompressedLinear)]
    for path in paths:
        replace_module(model, path, _get_module(model, path).to_linear())
    return len(paths)


def load_compressed(
    folder: str | os.PathLike, *, load_tokenizer: bool = True, cache_dequantized: bool = True
) -> tuple[nn.Module, Any | None]:
    """Load a checkpoint written by :func:`save_compressed` / ``assemble_checkpoint``.

    Returns ``(model, tokenizer or None)``; the model is the base architecture (``LlamaForCausalLM``,
    ``Gemma3ForCausalLM``, ...) in eval mode whose compressed linear layers are :class:`CompressedLinear`.
    Checksums are verified before anything is parsed.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    verify_checksums(folder)
    cfg = read_config(folder)
    if cfg.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{folder / CONFIG_FILE}: format_version {cfg.get('format_version')!r}; this library "
            f"reads {FORMAT_VERSION}; {_RERUN}"
        )
    try:
        tensors = load_file(str(folder / MODEL_FILE))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint file {folder / MODEL_FILE} cannot be read ({e}); {_RERUN}") from None

    base = dict(cfg["base_config"])
    config = AutoConfig.for_model(base.pop("model_type", "llama"), **base)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    for path, meta in cfg["modules"].items():
        prefix = path + "."
        own = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        replace_module(model, path, CompressedLinear.from_tensors(meta, own, cache_dequantized=cache_dequantized))
    compressed_keys = {k for k in tensors if any(k.startswith(p + ".") for p in cfg["modules"])}
    rest = {k: v for k, v in tensors.items() if k not in compressed_keys}
    missing, unexpected = model.load_state_dict(rest, strict=False, assign=True)
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
        setattr(_get_module(model, a_owner), a_name, getattr(_get_module(model, s_owner), s_name))
    # Non-persistent buffers (rotary inv_freq, Gemma's embed_scale) were created on the meta device: rebuild
    # rotary modules from the config; take any other such buffer from a model built on the CPU.
    for mpath, mod in list(model.named_modules()):
        if any(b is not None and b.device.type == "meta" for b in mod.buffers(recurse=False)):
            if "RotaryEmbedding" in type(mod).__name__:
                replace_module(model, mpath, type(mod)(config=config))
    meta_buffers = [n for n, b in model.named_buffers() if b.device.type == "meta"]
    if meta_buffers:
        reference = dict(AutoModelForCausalLM.from_config(config).named_buffers())
        for name in meta_buffers:
            owner, _, attr = name.rpartition(".")
            _get_module(model, owner).register_buffer(attr, reference[name].clone(), persistent=False)
        del reference
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.device.type == "meta"]
    if left:
        raise ValueError(f"{folder}: tensors {left[:5]} were not restored; {_RERUN}")
    model.eval()
    tokenizer = None
    if load_tokenizer and any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model, tokenizer
