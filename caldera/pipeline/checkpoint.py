"""Compressed-model checkpoints: a folder of safetensors + JSON, no pickle, that transformers also loads.

Layout of a checkpoint folder (format 2)::

    model.safetensors      every tensor: the base model's non-linear weights (embeddings, norms, lm_head
                           unless tied to the embeddings) under their usual names, plus the state of every
                           CompressedLinear under its module path
                           (``model.layers.0.self_attn.q_proj.Q_codes``)
    config.json            the base model's config plus ``quantization_config: {"quant_method": "caldera",
                           "format_version": 2, "method": ...}``: ``AutoModelForCausalLM.from_pretrained`` loads
                           the folder once ``caldera`` is imported (:mod:`caldera.pipeline.hf`)
    caldera_config.json    format version, base model config dict, method name + config, per-module
                           metadata (shapes, rank, bits, quantizer names), bits summary, errors, per module the
                           fingerprint [Σ W, Σ W²] of what its tensors decode to (RHT basis), and the content
                           ``manifest``: sha256 of every tensor (:func:`tensor_digest`, RHT signs included), of the
                           base config (:func:`json_digest`) and of every other file (config.json, tokenizer)
    tokenizer files        optional (``tokenizer.save_pretrained``)
    checksums.json         sha256 of every other file

The model files (:data:`MODEL_FILES`: ``model.safetensors``, ``config.json``, ``caldera_config.json``) are what
the model computes from; any other file (a tokenizer saved later, a ``README.md`` model card, ``.gitattributes``)
cannot change it and is not refused. ``config.json``'s ``quantization_config`` states the scheme
(:func:`quantization_scheme`: method, Q and factor bits, ranks, quantizers, decoder layers kept dense), derived
from ``caldera_config.json`` and verified against it.

The folder is written under a temporary sibling name and renamed into place (:func:`caldera.atomic.atomic_dir`).
:func:`load_compressed` (and the transformers quantizer) verify before building anything (:func:`read_checkpoint`):
every model file's checksum, the config's structure (:func:`check_config`), the content manifest
(:func:`verify_manifest`, :func:`check_tensor_manifest`: checksums only prove the files are the ones listed, the
manifest that the tensors, base config and config.json are the ones written), finite tensors
(:func:`check_tensors`), what the tensors mean (:func:`check_stored_tensors`: ±1 RHT signs, finite positive scales,
codes in their quantizer's range, every tensor of the shape and dtype its module's metadata names; the uncompressed
weights in one dtype), the shapes implied by the base config, each module's fingerprint (metadata against tensors)
and the summaries that ``caldera info`` reports (:func:`check_summary`: ``bits`` recomputed from the modules,
``dense_layers``, ``errors``, ``ft_rank``, the method config's ``rank`` and bits). The manifest, fingerprints and
checksums only prove that nothing changed since they were computed (anyone can recompute them); these checks refuse
content that no writer produces. A missing manifest or fingerprint is an error; ``verify=False`` is the one,
explicit opt-out. Only then does it build ``AutoModelForCausalLM.from_config(base_config)`` (on the meta device: no
random initialization, no hub access), swap in the ``CompressedLinear`` modules and assign the stored tensors.
Every inconsistency is a ``ValueError`` naming the checkpoint and the field or file. Format 1 (no config.json, no
manifest) is read only by :func:`convert_checkpoint` (``caldera convert``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from caldera.atomic import atomic_dir, folder_files, sha256_file
from caldera.bits import average_bits
from caldera.nn.compressed_linear import KERNELS, CompressedLinear, resolve_quantizer
from caldera.pipeline.hessians import GROUPS, decoder_layers

FORMAT_VERSION = 2
#: Format 1 (before ``config.json`` and the content manifest): readable only by ``caldera convert``.
LEGACY_FORMAT = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "caldera_config.json"
HF_CONFIG_FILE = "config.json"
CHECKSUM_FILE = "checksums.json"
QUANT_METHOD = "caldera"
#: the files the model is built from: listed, unchanged and consistent, or the load is refused
MODEL_FILES = (MODEL_FILE, HF_CONFIG_FILE, CONFIG_FILE)
#: the files a tokenizer is saved as and loaded from (``save_pretrained`` / ``from_pretrained``)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "chat_template.jinja",
                   "chat_template.json")
_RERUN = "re-run `caldera compress` to rebuild the checkpoint"
_NO_VERIFY = "(to load it anyway, unverified: load_compressed(..., verify=False) / `--no-verify`)"
#: Relative tolerance of the stored reconstruction fingerprints (float64 sums of float32 values).
FINGERPRINT_RTOL = 1e-5
#: The linear layers of a decoder layer that compression replaces, in order.
LINEARS: tuple[str, ...] = tuple(m for _, members in GROUPS.values() for m in members)


def layers_prefix(model: nn.Module) -> str:
    """State-dict prefix of the decoder layers (``"model.layers"`` for LlamaForCausalLM)."""
    layers = decoder_layers(model)
    for name, mod in model.named_modules():
        if mod is layers:
            return name
    raise ValueError("decoder layers not found among the model's modules")


def model_linear_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """(out, in) of the seven linear layers of every decoder layer, in order (dense or compressed)."""
    return [(lin.out_features, lin.in_features) for layer in decoder_layers(model)
            for lin in (layer.get_submodule(name) for name in LINEARS)]


def matrix_bits(mod: CompressedLinear) -> dict[str, Any]:
    """What :func:`bits_summary` reads of one compressed matrix: shape, rank, ft_rank, bit widths
    (:meth:`CompressedLinear.bit_widths`), whether Q is stored as floats (``dense_q``), storage and tensor bits."""
    return {"shape": [mod.out_features, mod.in_features], "rank": mod.rank, "ft_rank": mod.ft_rank,
            **mod.bit_widths(), "dense_q": mod.dense_q, "storage_bits": mod.storage_bits(),
            "tensor_bits": mod.tensor_bits()}


def bits_summary(model: nn.Module, matrices: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Paper average bits over the model's linear shapes + true storage bits over the compressed matrices."""
    shapes = model_linear_shapes(model)
    out: dict[str, Any] = {"n_matrices_total": len(shapes), "n_matrices_compressed": len(matrices)}
    if not matrices:
        return out
    out["dense_q_matrices"] = sum(bool(m.get("dense_q")) for m in matrices)
    # The paper counts fine-tuned components at B_FT = 16 (BF16) bits, whatever dtype holds them here.
    keys = {(m["b_q"], m["b_lr"], m["rank"], m["ft_rank"]) for m in matrices}
    if len(keys) == 1:
        b_q, b_lr, rank, ft_rank = next(iter(keys))
        out["average_bits"] = average_bits(shapes, b_q, b_lr if rank > ft_rank else None, rank, ft_rank, 16)
        out.update(b_q=b_q, b_lr=b_lr, rank=rank, ft_rank=ft_rank)
    else:  # mixed settings: the same formula, matrix by matrix
        num = sum(
            m["b_q"] * m["shape"][0] * m["shape"][1]
            + ((m["rank"] - m["ft_rank"]) * (m["b_lr"] or 0) + m["ft_rank"] * 16) * (m["shape"][0] + m["shape"][1])
            for m in matrices
        )
        out["average_bits"] = num / sum(m["shape"][0] * m["shape"][1] for m in matrices)
    params = sum(m["shape"][0] * m["shape"][1] for m in matrices)
    out["storage_bits_per_weight"] = sum(m["storage_bits"] for m in matrices) / params
    out["tensor_bits_per_weight"] = sum(m["tensor_bits"] for m in matrices) / params
    out["compressed_params"] = params
    return out


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
    # the check leaves no dequantized float32 cache behind (a verified load of a 7B model would otherwise hold
    # a dense fp32 copy of every compressed layer, 26 GB; a forward that wants the cache builds it itself)
    caches = module._Q_cache, module._L_cache, module._R_cache
    try:
        with torch.no_grad():  # trainable L_ft / R_ft / signs (fine-tuning) must not build a graph here
            W = module.rotated_weight().detach().double()
    finally:
        module._Q_cache, module._L_cache, module._R_cache = caches
    return [float(W.sum()), float(W.pow(2).sum())]


def tensor_digest(t: Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (the content manifest's entry for it)."""
    import hashlib

    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{_json_default(t.dtype)}|{list(t.shape)}|".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def json_digest(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys, no whitespace)."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _plain_json(obj: Any) -> Any:
    """``obj`` as it reads back from the JSON file (tuples as lists, dtypes as names)."""
    return json.loads(json.dumps(obj, default=_json_default))


def quantization_scheme(config: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint's ``caldera_config.json`` (``config``) stores, as ``config.json``'s
    ``quantization_config`` states it: ``q_bits`` / ``lr_bits`` / ``bits_per_weight`` (its ``bits`` summary, when
    it has one), ``ranks`` (the distinct ranks of its modules), the quantizers of Q, L and R, ``rht`` and
    ``dense_layers`` (decoder layers kept uncompressed)."""
    modules = config.get("modules")
    mods = [m for m in modules.values() if isinstance(m, dict)] if isinstance(modules, dict) else []

    def distinct(key: str) -> list[Any]:
        vals = {m[key] for m in mods if isinstance(m.get(key), (bool, int, float, str))}
        return sorted(vals, key=lambda v: (type(v).__name__, v))

    bits = config.get("bits") if isinstance(config.get("bits"), dict) else {}
    out: dict[str, Any] = {k: bits[b] for k, b in (("q_bits", "b_q"), ("lr_bits", "b_lr"),
                                                  ("bits_per_weight", "average_bits")) if b in bits}
    out.update({"ranks": distinct("rank"), "q_quantizers": distinct("q_quantizer"),
                "l_quantizers": distinct("l_quantizer"), "r_quantizers": distinct("r_quantizer"),
                "rht": distinct("rht"), "dense_layers": config.get("dense_layers", [])})
    return out


def hf_config_dict(base_config: dict[str, Any], method: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``config.json`` of a checkpoint: the base model's config plus ``quantization_config`` naming the
    ``caldera`` method (so ``AutoModelForCausalLM.from_pretrained`` dispatches to :mod:`caldera.pipeline.hf`) and
    stating the scheme of ``config`` (its ``caldera_config.json``: :func:`quantization_scheme`)."""
    qc = {"quant_method": QUANT_METHOD, "format_version": FORMAT_VERSION, "method": method,
          **(quantization_scheme(config) if config is not None else {})}
    return {**base_config, "quantization_config": qc}


def write_checkpoint(
    out_dir: str | os.PathLike,
    tensors: dict[str, Tensor],
    config: dict[str, Any],
    tokenizer: Any | None = None,
) -> Path:
    """Write ``tensors`` + ``config`` (+ tokenizer) + checksums to ``out_dir`` atomically (:func:`atomic_dir`).

    ``tokenizer``: a tokenizer (saved with ``save_pretrained``) or the folder it was loaded from (its
    :data:`TOKENIZER_FILES` copied byte for byte: a 262k-entry tokenizer takes seconds to load).

    ``config["modules"]`` maps module paths to :meth:`CompressedLinear.metadata`; the reconstruction
    fingerprint of every module (:func:`weight_fingerprint`) is added as ``config["fingerprints"]`` and the
    content manifest as ``config["manifest"]``: the sha256 of every tensor (:func:`tensor_digest`), of the base
    config (:func:`json_digest`) and of every other file the loader reads (``config.json``, tokenizer files).
    """
    flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    fingerprints = {
        path: weight_fingerprint(CompressedLinear.from_tensors(meta, _module_tensors(flat, path)))
        for path, meta in config.get("modules", {}).items()
    }
    config = _plain_json(config)
    with atomic_dir(out_dir) as tmp:
        # one metadata key: safetensors orders several keys randomly (see caldera.atomic)
        save_file(flat, str(tmp / MODEL_FILE), metadata={"format": "pt"})
        (tmp / HF_CONFIG_FILE).write_text(
            json.dumps(hf_config_dict(config["base_config"], config["method"], config), indent=1, sort_keys=True)
            + "\n"
        )
        if isinstance(tokenizer, (str, os.PathLike)):
            copied = [f for f in TOKENIZER_FILES if (Path(tokenizer) / f).is_file()]
            if not copied:
                raise ValueError(f"{tokenizer} holds no tokenizer file ({', '.join(TOKENIZER_FILES)})")
            for name in copied:
                (tmp / name).write_bytes((Path(tokenizer) / name).read_bytes())
        elif tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        files = {
            p.relative_to(tmp).as_posix(): sha256_file(p)
            for p in sorted(tmp.rglob("*"))
            if p.is_file() and p.name != MODEL_FILE
        }
        manifest = {
            "tensors": {k: tensor_digest(v) for k, v in sorted(flat.items())},
            "base_config": json_digest(config["base_config"]),
            "files": files,
        }
        cfg = {"format_version": FORMAT_VERSION, **config, "fingerprints": fingerprints, "manifest": manifest}
        (tmp / CONFIG_FILE).write_text(json.dumps(cfg, indent=1, sort_keys=True, default=_json_default) + "\n")
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
    """Save a model whose linear layers were (partly) replaced by :class:`CompressedLinear` modules.

    ``extra``: further keys of ``caldera_config.json``; a ``bits`` summary among them is recomputed from the
    modules (:func:`checkpoint_bits`: what the tensors store, e.g. after signs were made trainable), as loaders
    check it against them (:func:`check_summary`)."""
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
    if "bits" in config:
        config["bits"] = checkpoint_bits(model)
    return write_checkpoint(out_dir, tensors, config, tokenizer)


def verify_checksums(folder: str | os.PathLike) -> dict[str, str]:
    """Check every model file (:data:`MODEL_FILES`) against ``checksums.json``; ``ValueError`` naming the first
    bad file. Other files are not the model's (:func:`other_file_changes` lists how they differ)."""
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
    # config.json: checked here when listed, and always by the content manifest (format 1 has none)
    for name in (n for n in MODEL_FILES if n in sums):
        expected = sums[name]
        p = folder / name
        if not p.is_file():
            raise ValueError(f"checkpoint file {p} is missing; {_RERUN}")
        got = sha256_file(p)
        if got != expected:
            raise ValueError(
                f"checkpoint file {p} is corrupt or truncated (sha256 {got[:12]}… != {expected[:12]}…); {_RERUN}"
            )
    return sums


def other_file_changes(folder: str | os.PathLike, files: dict[str, str]) -> dict[str, list[str]]:
    """How the files of ``folder`` besides the model files and ``checksums.json`` differ from ``files`` (name →
    sha256, as written): ``{"added", "changed", "missing"}``, each sorted (empty lists: as written)."""
    folder = Path(folder)
    skip = set(MODEL_FILES) | {CHECKSUM_FILE}
    present = {n for n in folder_files(folder) if n not in skip}
    listed = {n: h for n, h in files.items() if n not in skip}
    return {"added": sorted(present - set(listed)),
            "changed": sorted(n for n in present & set(listed) if sha256_file(folder / n) != listed[n]),
            "missing": sorted(set(listed) - present)}


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
    "q_quantizer": (str, type(None)),  # None: a float Q (q_format float16/float32, tensor Q_dense)
    "rht": (bool,),
    "rank": (int,),
    "ft_rank": (int,),
}


def check_config(cfg: dict[str, Any], folder: str | os.PathLike, *, legacy: bool = False) -> None:
    """Validate the structure of a checkpoint config (no tensors needed): format version, required keys and
    types, a ``model_type`` this transformers knows, every module's metadata (features, ranks, quantizer
    names that resolve). ``ValueError`` naming the checkpoint and the field. Format 1 passes only with
    ``legacy=True`` (``caldera convert``)."""
    from transformers import CONFIG_MAPPING

    from caldera.nn.compressed_linear import DENSE_Q_FORMATS, META_VERSION, resolve_quantizer

    folder = Path(folder)
    cfile = CONFIG_FILE
    version = cfg.get("format_version")
    if version == LEGACY_FORMAT and not legacy:
        raise ValueError(
            f"{folder / cfile}: format_version 1 (written before config.json and the content manifest); convert it "
            f"with `caldera convert {folder} --out NEW` (verifies its checksums and fingerprints) or {_RERUN}"
        )
    if version not in (FORMAT_VERSION, LEGACY_FORMAT):
        raise ValueError(
            f"{folder / cfile}: format_version {version!r}; this library reads {FORMAT_VERSION} "
            f"(and {LEGACY_FORMAT} through `caldera convert`); {_RERUN}"
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
        if meta.get("q_quantizer") is None:
            if meta.get("q_format") not in DENSE_Q_FORMATS:
                raise _bad(folder, f"{where}.q_quantizer is None and q_format is {meta.get('q_format')!r}; a Q "
                           f"without a quantizer is stored as one of {list(DENSE_Q_FORMATS)}")
            names = []
        else:
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
    # the uncompressed weights (embeddings, norms, lm_head) were written from one model: one floating dtype
    weights = dict(model.named_parameters())
    dense = {k: v.dtype for k, v in tensors.items() if k in weights and v.is_floating_point()}
    if len(set(dense.values())) > 1:
        ref = max(dense, key=lambda k: tensors[k].numel())  # the embedding, as a rule
        odd = sorted(k for k, dt in dense.items() if dt != dense[ref])
        raise _bad(
            folder,
            f"tensor {odd[0]!r} of {MODEL_FILE} is {str(dense[odd[0]]).removeprefix('torch.')} but {ref!r} is "
            f"{str(dense[ref]).removeprefix('torch.')} (uncompressed weights in {len(set(dense.values()))} dtypes, "
            f"{len(odd)} like {odd[0]!r}); a model computes in one dtype",
        )


def check_stored_tensors(cfg: dict[str, Any], tensors: dict[str, Tensor], folder: str | os.PathLike) -> None:
    """Every compressed module's tensors against the scheme its metadata describes
    (:func:`caldera.nn.format.stored_tensor_problem`: dtypes and shapes; on real tensors also ±1 signs, finite
    positive scales, codes in their quantizer's range). ``ValueError`` naming the file, the tensor and the
    problem."""
    from caldera.nn.format import stored_tensor_problem

    for path, meta in cfg["modules"].items():
        try:
            bad = stored_tensor_problem(meta, _module_tensors(tensors, path))
        except (ValueError, KeyError, TypeError) as e:  # e.g. an unknown quantizer name
            raise _bad(Path(folder), f"modules[{path!r}] cannot be checked against its tensors ({e})") from None
        if bad is not None:
            raise _bad(Path(folder), f"tensor '{path}.{bad[0]}' of {MODEL_FILE} {bad[1]}")


def checkpoint_bits(model: nn.Module) -> dict[str, Any]:
    """The ``bits`` summary of a model with compressed layers (:func:`bits_summary` of
    its modules): what ``caldera compress`` records and ``caldera info`` reports."""
    return bits_summary(model, [matrix_bits(m) for m in model.modules() if isinstance(m, CompressedLinear)])


def check_summary(cfg: dict[str, Any], model: nn.Module, folder: str | os.PathLike) -> None:
    """The recorded summaries that tools report (``caldera info``) against the loaded modules: ``bits`` equal to
    :func:`checkpoint_bits`, ``dense_layers`` the decoder layers without a compressed module, ``errors`` one
    finite, non-negative record per compressed module, top-level ``ft_rank`` every module's, and a method
    config's ``rank`` and ``q_bits`` / ``l_bits`` / ``r_bits`` what every module stores (methods that choose
    settings per matrix excepted)."""
    folder = Path(folder)
    mods = cfg["modules"]
    if "bits" in cfg:
        want = cfg["bits"]
        try:
            got = checkpoint_bits(model)
        except ValueError as e:  # no decoder layers to count
            raise _bad(folder, f"{CONFIG_FILE} key 'bits' cannot be checked against the model ({e})") from None
        if not isinstance(want, dict):
            raise _bad(folder, f"{CONFIG_FILE} key 'bits' is {want!r}, expected the bits summary")
        for key in sorted(set(want) | set(got)):
            a, b = want.get(key), got.get(key)
            same = a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                              and not isinstance(a, bool) and math.isclose(a, b, rel_tol=1e-9))
            if not same:
                raise _bad(folder, f"{CONFIG_FILE} bits.{key} is {a!r} but the stored tensors make it {b!r}")
    try:
        prefix, n_layers = layers_prefix(model), len(decoder_layers(model))
    except ValueError:
        return
    if "dense_layers" in cfg:
        dense = [li for li in range(n_layers) if not any(p.startswith(f"{prefix}.{li}.") for p in mods)]
        if cfg["dense_layers"] != dense:
            raise _bad(folder, f"{CONFIG_FILE} dense_layers is {cfg['dense_layers']!r} but the layers without a "
                       f"compressed module are {dense}")
    if "errors" in cfg:
        errors = cfg["errors"]
        if not isinstance(errors, dict) or set(errors) != set(mods):
            raise _bad(folder, f"{CONFIG_FILE} key 'errors' does not hold one record per compressed module")
        for path, rec in errors.items():
            e = rec.get("error") if isinstance(rec, dict) else None
            if isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e < 0:
                raise _bad(folder, f"{CONFIG_FILE} errors[{path!r}].error is {e!r}; expected a finite number >= 0")
    if "ft_rank" in cfg and any(m["ft_rank"] != cfg["ft_rank"] for m in mods.values()):
        raise _bad(folder, f"{CONFIG_FILE} ft_rank is {cfg['ft_rank']!r} but its modules have ft_rank "
                   f"{sorted({m['ft_rank'] for m in mods.values()})}")
    if _rank_per_matrix(cfg["method"]):
        return
    mc = cfg["method_config"]
    rank = mc.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        other = sorted({m["rank"] for m in mods.values()} - {rank})
        if other:
            raise _bad(folder, f"{CONFIG_FILE} method_config.rank is {rank} but its modules have rank {other}")
    for key, field in (("q_bits", "q_quantizer"), ("l_bits", "l_quantizer"), ("r_bits", "r_quantizer")):
        for path, m in mods.items():
            name = m.get(field)
            if key not in mc or name is None or (key != "q_bits" and m.get("lr_format") != "quantized"):
                continue  # a float Q or float factors: no quantizer to compare
            bits = resolve_quantizer(name).bits_per_weight
            if bits != mc[key]:
                raise _bad(folder, f"{CONFIG_FILE} method_config.{key} is {mc[key]!r} but modules[{path!r}] stores "
                           f"{name} codes ({bits:g} bits per weight)")


def _rank_per_matrix(method: str) -> bool:
    """True if ``method`` chooses settings per matrix (a model-level plan) or is not registered here."""
    from caldera.methods import get_method

    try:
        return get_method(method).plan is not None
    except (ValueError, KeyError):
        return True


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


def verify_manifest(cfg: dict[str, Any], folder: str | os.PathLike) -> None:
    """The content manifest of a format-2 config (passed :func:`check_config`) against the folder: the base
    config's digest, ``config.json`` listed and unchanged, and its content: the base config plus the ``caldera``
    quantization config with the scheme of ``caldera_config.json`` (:func:`hf_config_dict`), nothing else
    (``from_pretrained`` builds the model from it). ``ValueError`` naming the file or key and the fix."""
    folder = Path(folder)
    man = cfg.get("manifest")
    if not isinstance(man, dict) or not all(isinstance(man.get(k), dict) for k in ("tensors", "files")):
        raise _bad(folder, f"{CONFIG_FILE} has no content manifest (key 'manifest' missing or malformed) {_NO_VERIFY}")
    if man.get("base_config") != json_digest(cfg["base_config"]):
        keys = sorted(cfg["base_config"])
        raise _bad(
            folder,
            f"{CONFIG_FILE} key 'base_config' differs from the one recorded when the checkpoint was written "
            f"(manifest.base_config digest; e.g. an edited hidden_act or hidden_size among {len(keys)} keys): the "
            f"model it builds would not be the one compressed",
        )
    files = man["files"]
    if HF_CONFIG_FILE not in files:
        raise _bad(folder, f"manifest.files does not list {HF_CONFIG_FILE} {_NO_VERIFY}")
    if not (folder / HF_CONFIG_FILE).is_file():
        raise _bad(folder, f"{HF_CONFIG_FILE}, listed in manifest.files, is missing")
    if sha256_file(folder / HF_CONFIG_FILE) != files[HF_CONFIG_FILE]:
        raise _bad(folder, f"{HF_CONFIG_FILE} differs from the file recorded in manifest.files")
    try:
        hf = json.loads((folder / HF_CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise _bad(folder, f"{HF_CONFIG_FILE} is not valid JSON ({e})") from None
    want = hf_config_dict(cfg["base_config"], cfg["method"], cfg)
    if not isinstance(hf, dict) or hf != want:
        diff = sorted(k for k in set(hf) | set(want) if hf.get(k) != want.get(k)) if isinstance(hf, dict) else []
        raise _bad(folder, f"{HF_CONFIG_FILE} does not match {CONFIG_FILE} (its base_config and quantization scheme; "
                           f"keys {diff[:5]})")


def check_tensor_manifest(cfg: dict[str, Any], tensors: dict[str, Tensor], folder: str | os.PathLike) -> None:
    """Every tensor (RHT signs, scales, codes, embeddings, norms) against its digest in ``manifest.tensors``; no
    tensor missing or extra; every compressed module has a reconstruction fingerprint."""
    folder = Path(folder)
    want = cfg["manifest"]["tensors"]
    for k in sorted(set(want) | set(tensors)):
        if k not in tensors:
            raise _bad(folder, f"tensor {k!r}, listed in manifest.tensors, is not in {MODEL_FILE}")
        if k not in want:
            raise _bad(folder, f"tensor {k!r} of {MODEL_FILE} is not listed in manifest.tensors")
        if tensor_digest(tensors[k]) != want[k]:
            raise _bad(folder, f"tensor {k!r} differs from the one recorded in manifest.tensors "
                       f"({MODEL_FILE} was modified after writing)")
    fps = cfg.get("fingerprints")
    missing = sorted(set(cfg["modules"]) - set(fps)) if isinstance(fps, dict) else ["all"]
    if missing:
        raise _bad(folder, f"{CONFIG_FILE} has no reconstruction fingerprint for modules {missing[:3]} "
                   f"(key 'fingerprints') {_NO_VERIFY}")


def read_checkpoint(
    folder: str | os.PathLike, *, verify: bool = True, legacy: bool = False
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, tensors)`` of a checkpoint folder, verified (``verify=True``): checksums and no unlisted file
    (:func:`verify_checksums`), the config's structure (:func:`check_config`), the content manifest
    (:func:`verify_manifest`, :func:`check_tensor_manifest`), finite tensors (:func:`check_tensors`) and what
    the compressed modules' tensors mean (:func:`check_stored_tensors`).
    ``legacy=True`` also reads format 1 (no manifest; its fingerprints are then required), for ``caldera convert``.
    ``verify=False`` (documented opt-out) keeps only the structural checks a load needs not to crash."""
    folder = Path(folder)
    if verify:
        verify_checksums(folder)
    elif not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist; run `caldera compress` first")
    cfg = read_config(folder)
    check_config(cfg, folder, legacy=legacy or not verify)
    v2 = cfg["format_version"] == FORMAT_VERSION
    if verify and v2:
        verify_manifest(cfg, folder)
    try:
        tensors = load_file(str(folder / MODEL_FILE))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint file {folder / MODEL_FILE} cannot be read ({e}); {_RERUN}") from None
    check_tensors(cfg, tensors, folder)
    if verify and v2:
        check_tensor_manifest(cfg, tensors, folder)
    elif verify:
        fps = cfg.get("fingerprints")
        if not isinstance(fps, dict) or set(cfg["modules"]) - set(fps):
            raise _bad(folder, "this format-1 checkpoint has no reconstruction fingerprints (key 'fingerprints'), "
                       "so its tensors cannot be checked against its metadata")
    if verify:
        check_stored_tensors(cfg, tensors, folder)
    return cfg, tensors


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


def build_base_model(cfg: dict[str, Any], folder: str | os.PathLike) -> tuple[Any, nn.Module]:
    """``(transformers config, model on the meta device)`` from ``base_config``; ``ValueError`` naming the
    checkpoint for anything the config classes refuse (e.g. a ``hidden_size`` the head count does not divide)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    base = dict(cfg["base_config"])
    try:
        config = AutoConfig.for_model(base.pop("model_type"), **base)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - strict-dataclass validation errors are not ValueErrors
        msg = str(e).strip().splitlines()
        raise _bad(Path(folder), f"base_config does not build a model ({type(e).__name__}: "
                   f"{' '.join(msg)[:300]})") from None
    return config, model


def check_module(
    folder: Path, path: str, meta: dict[str, Any], own: dict[str, Tensor], fingerprints: dict[str, Any] | None,
    **kw: Any,
) -> CompressedLinear:
    """The :class:`CompressedLinear` at ``path`` built from its tensors ``own``, checked against its metadata
    (no unused tensor) and its stored fingerprint (when ``fingerprints`` has one)."""
    try:
        mod = CompressedLinear.from_tensors(meta, own, **kw)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        raise _bad(folder, f"modules[{path!r}] does not match its tensors ({e})") from None
    unused = sorted(set(own) - set(mod.state_dict()))
    if unused:  # e.g. rht or lr_format flipped in the metadata: the tensors say otherwise
        raise _bad(
            folder,
            f"modules[{path!r}] has tensors {unused} that its metadata does not use (rht={meta['rht']}, "
            f"lr_format={meta.get('lr_format')!r}, ft_rank={meta['ft_rank']})",
        )
    if fingerprints:
        check_fingerprint(folder, path, mod, fingerprints)
    return mod


def check_fingerprint(folder: Path, path: str, mod: CompressedLinear, fingerprints: dict[str, Any]) -> None:
    """``mod`` decodes to the weight whose fingerprint was stored for ``path`` (:func:`weight_fingerprint`)."""
    try:
        fp = weight_fingerprint(mod)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        raise _bad(folder, f"modules[{path!r}] does not match its tensors ({e})") from None
    want = fingerprints.get(path)
    if not isinstance(want, list) or len(want) != 2:
        raise _bad(folder, f"fingerprints[{path!r}] is {want!r}, expected [sum, sum of squares] {_NO_VERIFY}")
    if not all(math.isclose(a, b, rel_tol=FINGERPRINT_RTOL, abs_tol=1e-30) for a, b in zip(fp, want)):
        raise _bad(
            folder,
            f"modules[{path!r}] decodes to a different weight than was saved (sum, sum of squares "
            f"{fp[0]:.6g}, {fp[1]:.6g} != stored {want[0]:.6g}, {want[1]:.6g}): its metadata (quantizer "
            "names, dtypes) no longer matches its tensors",
        )


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
        from transformers import AutoTokenizer

        if verify:
            diff = {k: v for k, v in other_file_changes(folder, cfg["manifest"]["files"]).items() if v}
            if diff:
                import warnings

                warnings.warn(f"checkpoint {folder}: the files beside the model are not the ones written with it "
                              f"({'; '.join(f'{k}: {v[:5]}' for k, v in diff.items())}); the model is verified, the "
                              "tokenizer is loaded from the folder as it is now", stacklevel=2)
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model, tokenizer


def _assemble(
    cfg: dict[str, Any], tensors: dict[str, Tensor], folder: Path, *, verify: bool, **kw: Any
) -> nn.Module:
    """The base model with its compressed modules, from a config and tensors that :func:`read_checkpoint`
    returned; the checkpoint's config is kept as ``model.caldera_checkpoint_config`` (``save_pretrained``)."""
    config, model = build_base_model(cfg, folder)
    _check_against_model(cfg, tensors, model, folder)
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
    attach_checkpoint_config(model, cfg)
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
                           method_config=cfg.get("method_config", {}), tokenizer=tokenizer, extra=extra)


def attach_checkpoint_config(model: nn.Module, cfg: dict[str, Any]) -> None:
    """Keep the checkpoint's config on ``model`` and make ``model.save_pretrained(DIR, tokenizer=None)`` write the
    checkpoint format (:func:`_save_pretrained`) instead of a plain transformers folder."""
    import types

    model.caldera_checkpoint_config = {k: v for k, v in cfg.items() if k not in ("fingerprints", "manifest")}
    model.save_pretrained = types.MethodType(_save_pretrained, model)


def convert_checkpoint(old: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Rewrite a format-1 checkpoint (verified as far as format 1 allows: checksums, structure, reconstruction
    fingerprints) in the current format (``config.json`` + content manifest) to the new folder ``out``."""
    old, out = Path(old), Path(out)
    if out.exists():
        raise ValueError(f"--out {out} already exists; remove it or choose a new folder")
    cfg, tensors = read_checkpoint(old, legacy=True)
    model = _assemble(cfg, tensors, old, verify=True, cache_dequantized=False, kernel="reference")
    tok = None
    if any((old / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(old), local_files_only=True)
    extra = {k: v for k, v in cfg.items() if k not in _DERIVED_KEYS}
    return save_compressed(model, out, method=cfg["method"], method_config=cfg["method_config"], tokenizer=tok,
                           extra=extra)
