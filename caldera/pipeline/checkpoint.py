"""Compressed-model checkpoints: a folder of safetensors + JSON, no pickle.

Layout of a checkpoint folder::

    model.safetensors      every tensor: the base model's non-linear weights (embeddings, norms, lm_head
                           unless tied to the embeddings) under their usual names, plus the state of every
                           CompressedLinear under its module path
                           (``model.layers.0.self_attn.q_proj.Q_codes``)
    caldera_config.json    format version, base model config dict, method name + config, per-module
                           metadata (shapes, rank, bits, quantizer names), bits summary, errors, and per
                           module the fingerprint [Σ W, Σ W²] of what its tensors decode to (RHT basis)
    tokenizer files        optional (``tokenizer.save_pretrained``)
    checksums.json         sha256 of every other file

The folder is written under a temporary sibling name and renamed into place (:func:`caldera.atomic.atomic_dir`).
:func:`load_compressed` verifies every checksum first, then checks the content (checksums only prove the
files are the ones written, not that they agree with each other): the config's structure and module metadata
(:func:`check_config`), finite tensors (:func:`check_tensors`), the shapes implied by the base config, and
each module's fingerprint. Only then does it build ``AutoModelForCausalLM.from_config(base_config)`` (on
the meta device: no random initialization, no hub access), swap in the ``CompressedLinear`` modules and
assign the stored tensors. Every inconsistency is a ``ValueError`` naming the checkpoint and the field.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from caldera.atomic import atomic_dir, sha256_file
from caldera.pipeline.compressed_linear import KERNELS, CompressedLinear

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "caldera_config.json"
CHECKSUM_FILE = "checksums.json"
_RERUN = "re-run `caldera compress` to rebuild the checkpoint"
#: Relative tolerance of the stored reconstruction fingerprints (float64 sums of float32 values).
FINGERPRINT_RTOL = 1e-5


def replace_module(root: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent_path), name, new)


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


def _module_tensors(tensors: dict[str, Tensor], path: str) -> dict[str, Tensor]:
    prefix = path + "."
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def weight_fingerprint(module: CompressedLinear) -> list[float]:
    """``[Σ W_ij, Σ W_ij²]`` (float64) of the module's rotated weight ``Q + L R (+ L_ft R_ft)``: what the stored
    codes, scales and factors decode to with the stored metadata (quantizer names, code dtypes). Stored in the
    checkpoint config and compared at load, so metadata that no longer matches the tensors (another quantizer
    name, a changed scale) is refused instead of decoding to a different model. (The RHT signs are tensors,
    covered by the checksums; the basis is skipped because it would cost two transforms per module.)"""
    with torch.no_grad():  # trainable L_ft / R_ft / signs (fine-tuning) must not build a graph here
        W = module.rotated_weight().detach().double()
    return [float(W.sum()), float(W.pow(2).sum())]


def write_checkpoint(
    out_dir: str | os.PathLike,
    tensors: dict[str, Tensor],
    config: dict[str, Any],
    tokenizer: Any | None = None,
) -> Path:
    """Write ``tensors`` + ``config`` (+ tokenizer) + checksums to ``out_dir`` atomically (:func:`atomic_dir`).

    ``config["modules"]`` maps module paths to :meth:`CompressedLinear.metadata`; the reconstruction
    fingerprint of every module (:func:`weight_fingerprint`) is added as ``config["fingerprints"]``.
    """
    flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    fingerprints = {
        path: weight_fingerprint(CompressedLinear.from_tensors(meta, _module_tensors(flat, path)))
        for path, meta in config.get("modules", {}).items()
    }
    with atomic_dir(out_dir) as tmp:
        # one metadata key: safetensors orders several keys randomly (see caldera.atomic)
        save_file(flat, str(tmp / MODEL_FILE), metadata={"format": f"caldera-checkpoint/{FORMAT_VERSION}"})
        cfg = {"format_version": FORMAT_VERSION, **config, "fingerprints": fingerprints}
        (tmp / CONFIG_FILE).write_text(json.dumps(cfg, indent=1, sort_keys=True, default=_json_default) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        sums = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / CHECKSUM_FILE).write_text(json.dumps({"sha256": sums}, indent=1, sort_keys=True) + "\n")
    return Path(out_dir)


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
    """The parsed ``caldera_config.json``; ``ValueError`` if it is missing or not a JSON object."""
    path = Path(folder) / CONFIG_FILE
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is missing or not valid JSON ({e}); {_RERUN}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} holds a {type(cfg).__name__}, not a JSON object; {_RERUN}")
    return cfg


def _bad(folder: Path, what: str) -> ValueError:
    return ValueError(f"checkpoint {folder} is inconsistent: {what}; {_RERUN}")


_MODULE_FIELDS: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "in_features": (int,),
    "out_features": (int,),
    "q_quantizer": (str,),
    "rht": (bool,),
    "rank": (int,),
    "ft_rank": (int,),
}


def check_config(cfg: dict[str, Any], folder: str | os.PathLike) -> None:
    """Validate the structure of a checkpoint config (no tensors needed): format version, required keys and
    types, a ``model_type`` this transformers knows, every module's metadata (features, ranks, quantizer
    names that resolve). ``ValueError`` naming the checkpoint and the field."""
    from transformers import CONFIG_MAPPING

    from caldera.pipeline.compressed_linear import META_VERSION, resolve_quantizer

    folder = Path(folder)
    cfile = CONFIG_FILE
    if cfg.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{folder / cfile}: format_version {cfg.get('format_version')!r}; this library reads {FORMAT_VERSION}; "
            f"{_RERUN}"
        )
    for key, typ in (("base_config", dict), ("method", str), ("method_config", dict), ("modules", dict)):
        if not isinstance(cfg.get(key), typ):
            got = "missing" if key not in cfg else f"a {type(cfg[key]).__name__}"
            raise _bad(folder, f"{cfile} key {key!r} is {got}, expected a {typ.__name__}")
    if not cfg["modules"]:
        raise _bad(folder, f"{cfile} lists no compressed modules")
    mt = cfg["base_config"].get("model_type")
    if not isinstance(mt, str) or mt not in CONFIG_MAPPING:
        raise _bad(
            folder,
            f"base_config.model_type {mt!r} is not a model type this transformers version knows "
            "(e.g. 'llama', 'gemma3_text')",
        )
    tied = cfg.get("tied", {})
    if not isinstance(tied, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tied.items()):
        raise _bad(folder, f"{cfile} key 'tied' must map tensor names to tensor names")
    for path, meta in cfg["modules"].items():
        where = f"modules[{path!r}]"
        if not isinstance(meta, dict):
            raise _bad(folder, f"{where} is not an object")
        for field, types in _MODULE_FIELDS.items():
            v = meta.get(field)
            if not isinstance(v, types) or (types == (int,) and isinstance(v, bool)):
                got = "missing" if field not in meta else repr(v)
                raise _bad(folder, f"{where}.{field} is {got}, expected {'/'.join(t.__name__ for t in types)}")
        if meta["version"] != META_VERSION:
            raise _bad(folder, f"{where}.version is {meta['version']}; this library reads {META_VERSION}")
        if meta["in_features"] < 1 or meta["out_features"] < 1 or not 0 <= meta["ft_rank"] <= meta["rank"]:
            raise _bad(
                folder,
                f"{where}: in_features={meta['in_features']}, out_features={meta['out_features']}, "
                f"rank={meta['rank']}, ft_rank={meta['ft_rank']} (need features >= 1, 0 <= ft_rank <= rank)",
            )
        names = [("q_quantizer", meta["q_quantizer"])]
        if meta["rank"] > meta["ft_rank"]:
            fmt = meta.get("lr_format")
            if fmt not in ("quantized", "float16", "float32"):
                raise _bad(folder, f"{where}.lr_format is {fmt!r}; expected 'quantized', 'float16' or 'float32'")
            if fmt == "quantized":
                names += [(f, meta.get(f)) for f in ("l_quantizer", "r_quantizer")]
        for field, name in names:
            try:
                resolve_quantizer(name)
            except (ValueError, KeyError, TypeError) as e:
                raise _bad(folder, f"{where}.{field} {name!r} is not a known quantizer ({e})") from None


def check_tensors(cfg: dict[str, Any], tensors: dict[str, Tensor], folder: str | os.PathLike) -> None:
    """Tensors against a config that passed :func:`check_config`: every floating tensor finite, every tied
    source present, no tensor of a compressed module outside its known names."""
    folder = Path(folder)
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise _bad(folder, f"{len(bad)} tensors hold NaN/Inf values, e.g. {sorted(bad)[:3]}")
    for alias, source in cfg.get("tied", {}).items():
        if source not in tensors:
            raise _bad(folder, f"tied tensor {alias!r} points to {source!r}, which {MODEL_FILE} does not hold")


def _check_against_model(cfg: dict[str, Any], tensors: dict[str, Tensor], model: nn.Module, folder: Path) -> None:
    """Every compressed module replaces a linear of the base architecture with the same shape; every other
    tensor has the shape the base config implies."""
    for path, meta in cfg["modules"].items():
        try:
            lin = model.get_submodule(path)
        except AttributeError:
            raise _bad(folder, f"modules[{path!r}] is not a module of the {type(model).__name__} that base_config "
                       "describes") from None
        shape = (getattr(lin, "out_features", None), getattr(lin, "in_features", None))
        if shape != (meta["out_features"], meta["in_features"]):
            raise _bad(
                folder,
                f"modules[{path!r}] is {meta['out_features']}x{meta['in_features']} but base_config makes it "
                f"{shape[0]}x{shape[1]} (hidden_size {cfg['base_config'].get('hidden_size')!r})",
            )
    params = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    for k, v in tensors.items():
        if k in params and tuple(params[k].shape) != tuple(v.shape):
            raise _bad(
                folder,
                f"{k} has shape {tuple(v.shape)} in {MODEL_FILE} but {tuple(params[k].shape)} per base_config "
                f"(hidden_size {cfg['base_config'].get('hidden_size')!r})",
            )


def materialize(model: nn.Module) -> int:
    """Replace every :class:`CompressedLinear` of ``model`` in place by its dense reconstruction
    (:meth:`CompressedLinear.to_linear`); returns how many were replaced. Used by evaluation with
    ``eval.weights: reconstructed`` (same scores up to float rounding, faster on CPUs)."""
    paths = [name for name, mod in model.named_modules() if isinstance(mod, CompressedLinear)]
    for path in paths:
        replace_module(model, path, model.get_submodule(path).to_linear())
    return len(paths)


def load_compressed(
    folder: str | os.PathLike, *, load_tokenizer: bool = True, cache_dequantized: bool = True, kernel: str = "auto"
) -> tuple[nn.Module, Any | None]:
    """Load a checkpoint written by :func:`save_compressed` / ``assemble_checkpoint``.

    Returns ``(model, tokenizer or None)``; the model is the base architecture (``LlamaForCausalLM``,
    ``Gemma3ForCausalLM``, ...) in eval mode whose compressed linear layers are :class:`CompressedLinear`.
    Checksums are verified before anything is parsed; then the metadata is checked against the tensors
    (:func:`check_config`, :func:`check_tensors`, the base architecture's shapes, the stored reconstruction
    fingerprints): a checkpoint whose files are intact but whose content is inconsistent is refused with a
    ``ValueError`` naming the field, never loaded silently.

    ``kernel`` (``auto`` | ``kernel`` | ``reference``) and ``cache_dequantized`` choose how every compressed layer
    computes (:class:`CompressedLinear`; ``auto``: the measured-faster path on the device the model is moved to).
    This is the one call that loads a compressed checkpoint for inference (``caldera.load_compressed``); for a
    folder that needs no ``caldera`` import use ``caldera export`` (:func:`caldera.pipeline.export.export_hf`).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r}; accepted: {', '.join(KERNELS)}")
    folder = Path(folder)
    verify_checksums(folder)
    cfg = read_config(folder)
    check_config(cfg, folder)
    try:
        tensors = load_file(str(folder / MODEL_FILE))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint file {folder / MODEL_FILE} cannot be read ({e}); {_RERUN}") from None
    check_tensors(cfg, tensors, folder)

    base = dict(cfg["base_config"])
    try:
        config = AutoConfig.for_model(base.pop("model_type"), **base)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise _bad(folder, f"base_config does not build a model ({type(e).__name__}: {e})") from None
    _check_against_model(cfg, tensors, model, folder)
    fingerprints = cfg.get("fingerprints") or {}  # absent in checkpoints written before they were recorded
    for path, meta in cfg["modules"].items():
        try:
            own = _module_tensors(tensors, path)
            mod = CompressedLinear.from_tensors(meta, own, cache_dequantized=cache_dequantized, kernel=kernel)
            fp = weight_fingerprint(mod) if path in fingerprints else None
        except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
            raise _bad(folder, f"modules[{path!r}] does not match its tensors ({e})") from None
        unused = sorted(set(own) - set(mod.state_dict()))
        if unused:  # e.g. rht or lr_format flipped in the metadata: the tensors say otherwise
            raise _bad(
                folder,
                f"modules[{path!r}] has tensors {unused} that its metadata does not use (rht={meta['rht']}, "
                f"lr_format={meta.get('lr_format')!r}, ft_rank={meta['ft_rank']})",
            )
        if fp is not None:
            want = fingerprints[path]
            if not all(math.isclose(a, b, rel_tol=FINGERPRINT_RTOL, abs_tol=1e-30) for a, b in zip(fp, want)):
                raise _bad(
                    folder,
                    f"modules[{path!r}] decodes to a different weight than was saved (sum, sum of squares "
                    f"{fp[0]:.6g}, {fp[1]:.6g} != stored {want[0]:.6g}, {want[1]:.6g}): its metadata (quantizer "
                    "names, dtypes) no longer matches its tensors",
                )
        replace_module(model, path, mod)
    compressed_keys = {k for k in tensors if any(k.startswith(p + ".") for p in cfg["modules"])}
    rest = {k: v for k, v in tensors.items() if k not in compressed_keys}
    try:
        missing, unexpected = model.load_state_dict(rest, strict=False, assign=True)
    except RuntimeError as e:
        raise _bad(folder, f"{MODEL_FILE} does not fit the base architecture ({e})") from None
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
    meta_buffers = [n for n, b in model.named_buffers() if b.device.type == "meta"]
    if meta_buffers:
        reference = dict(AutoModelForCausalLM.from_config(config).named_buffers())
        for name in meta_buffers:
            owner, _, attr = name.rpartition(".")
            model.get_submodule(owner).register_buffer(attr, reference[name].clone(), persistent=False)
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
