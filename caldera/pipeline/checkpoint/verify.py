"""Verifying a checkpoint before anything is built from it: checksums, the config's structure, the content
manifest, finite tensors, what the tensors mean, the fingerprints and the reported summaries."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from caldera.atomic import folder_files, sha256_file
from caldera.nn.compressed_linear import CompressedLinear
from caldera.nn.format import resolve_quantizer
from caldera.pipeline.checkpoint.format import (
    _NO_VERIFY,
    _RERUN,
    CHECKSUM_FILE,
    CONFIG_FILE,
    FINGERPRINT_RTOL,
    FORMAT_VERSION,
    GUARD_KEY,
    HF_CONFIG_FILE,
    LEGACY_FORMAT,
    MODEL_FILE,
    MODEL_FILES,
    _module_tensors,
    bad,
    checkpoint_bits,
    hf_config_dict,
    json_digest,
    layers_prefix,
    tensor_digest,
    weight_fingerprint,
)
from caldera.pipeline.layer_runner import decoder_layers


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

    from caldera.nn.format import DENSE_Q_FORMATS, META_VERSION

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
            raise bad(folder, f"{cfile} key {key!r} is {got}, expected a {typ.__name__}")
    if not cfg["modules"]:
        raise bad(folder, f"{cfile} lists no compressed modules")
    mt = cfg["base_config"].get("model_type")
    if not isinstance(mt, str) or mt not in CONFIG_MAPPING:
        raise bad(
            folder,
            f"base_config.model_type {mt!r} is not a model type this transformers version knows "
            "(e.g. 'llama', 'gemma3_text')",
        )
    tied = cfg.get("tied", {})
    if not isinstance(tied, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tied.items()):
        raise bad(folder, f"{cfile} key 'tied' must map tensor names to tensor names")
    for path, meta in cfg["modules"].items():
        where = f"modules[{path!r}]"
        if not isinstance(meta, dict):
            raise bad(folder, f"{where} is not an object")
        for field, types in _MODULE_FIELDS.items():
            v = meta.get(field)
            if not isinstance(v, types) or (types == (int,) and isinstance(v, bool)):
                got = "missing" if field not in meta else repr(v)
                raise bad(folder, f"{where}.{field} is {got}, expected {'/'.join(t.__name__ for t in types)}")
        if meta["version"] != META_VERSION:
            raise bad(folder, f"{where}.version is {meta['version']}; this library reads {META_VERSION}")
        if meta["in_features"] < 1 or meta["out_features"] < 1 or not 0 <= meta["ft_rank"] <= meta["rank"]:
            raise bad(
                folder,
                f"{where}: in_features={meta['in_features']}, out_features={meta['out_features']}, "
                f"rank={meta['rank']}, ft_rank={meta['ft_rank']} (need features >= 1, 0 <= ft_rank <= rank)",
            )
        if meta.get("q_quantizer") is None:
            if meta.get("q_format") not in DENSE_Q_FORMATS:
                raise bad(folder, f"{where}.q_quantizer is None and q_format is {meta.get('q_format')!r}; a Q "
                           f"without a quantizer is stored as one of {list(DENSE_Q_FORMATS)}")
            names = []
        else:
            names = [("q_quantizer", meta["q_quantizer"])]
        if meta["rank"] > meta["ft_rank"]:
            fmt = meta.get("lr_format")
            if fmt not in ("quantized", "float16", "float32"):
                raise bad(folder, f"{where}.lr_format is {fmt!r}; expected 'quantized', 'float16' or 'float32'")
            if fmt == "quantized":
                names += [(f, meta.get(f)) for f in ("l_quantizer", "r_quantizer")]
        for field, name in names:
            try:
                resolve_quantizer(name)
            except (ValueError, KeyError, TypeError) as e:
                raise bad(folder, f"{where}.{field} {name!r} is not a known quantizer ({e})") from None


def check_tensors(cfg: dict[str, Any], tensors: dict[str, Tensor], folder: str | os.PathLike) -> None:
    """Every floating tensor finite (what they are and where they belong: :func:`check_structure`)."""
    folder = Path(folder)
    nonfinite = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if nonfinite:
        raise bad(folder, f"{len(nonfinite)} tensors hold NaN/Inf values, e.g. {sorted(nonfinite)[:3]}")


def header_tensors(folder: str | os.PathLike) -> dict[str, Tensor]:
    """Every tensor of ``model.safetensors`` as an empty tensor on the meta device, of the shape and dtype its
    header names: what the structure checks read (no value is read). ``ValueError`` naming the file when it
    cannot be read (truncated, not safetensors) or names a dtype no checkpoint stores."""
    from safetensors import safe_open

    from caldera.pipeline.hessian_files import SAFETENSORS_DTYPES

    path = Path(folder) / MODEL_FILE
    out: dict[str, Tensor] = {}
    try:
        with safe_open(str(path), "pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                dt = SAFETENSORS_DTYPES.get(sl.get_dtype())
                if dt is None:
                    raise bad(Path(folder), f"tensor {k!r} of {MODEL_FILE} has dtype {sl.get_dtype()}, which no "
                               "checkpoint stores")
                out[k] = torch.empty(sl.get_shape(), dtype=dt, device="meta")
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint file {path} cannot be read ({e}); {_RERUN}") from None
    return out


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
        raise bad(Path(folder), f"base_config of {CONFIG_FILE} (the base config of {HF_CONFIG_FILE}) does not build a "
                  f"model ({type(e).__name__}: {' '.join(msg)[:300]})") from None
    return config, model


def architecture_ties(model: nn.Module) -> dict[str, str]:
    """``{alias: source}`` of the parameters ``model``'s architecture shares (the same parameter under two names,
    e.g. ``lm_head.weight`` of a model with ``tie_word_embeddings``): what a checkpoint's ``tied`` map must be.
    Read from the architecture's declaration and its config (transformers' ``get_expanded_tied_weights_keys``)
    where the model has one, so it holds inside ``from_pretrained``, which ties only after loading; else from
    the parameters the model shares."""
    declared = getattr(model, "get_expanded_tied_weights_keys", None)
    if callable(declared):
        try:
            return dict(declared(all_submodels=True))
        except TypeError:
            return dict(declared())
    seen: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            out[name] = seen[id(p)]
        else:
            seen[id(p)] = name
    return out


def check_manifest_names(cfg: dict[str, Any], names: Any, folder: str | os.PathLike) -> None:
    """The tensors of ``model.safetensors`` (``names``) are exactly those listed in ``manifest.tensors``."""
    want = cfg["manifest"]["tensors"]
    for k in sorted(set(want) ^ set(names)):
        if k not in names:
            raise bad(Path(folder), f"tensor {k!r}, listed in manifest.tensors, is not in {MODEL_FILE}")
        raise bad(Path(folder), f"tensor {k!r} of {MODEL_FILE} is not listed in manifest.tensors")


def check_structure(cfg: dict[str, Any], tensors: dict[str, Tensor], model: nn.Module, folder: str | os.PathLike,
                    *, manifest: bool = True) -> dict[str, CompressedLinear]:
    """What a checkpoint's structure must be for both loaders (``load_compressed`` and ``from_pretrained``) to
    build the same model, checked on ``tensors`` (the real ones or :func:`header_tensors`' meta shells) and the
    model ``base_config`` builds (:func:`build_base_model`): every module and tensor shape against the
    architecture (:func:`check_against_model`); the ``tied`` map equal to the weights the architecture ties
    (nothing a loader would leave random or share where the other does not), every tied source stored and no
    tied alias; every other weight of the model stored, nothing stored that is not the model's or a compressed
    module's; the names in ``manifest.tensors`` (``manifest``); every compressed module's tensors of the dtypes
    and shapes its metadata names (:func:`check_stored_tensors`) and no tensor it does not use
    (:func:`check_module`). Returns the :class:`CompressedLinear` modules built from ``tensors``."""
    folder = Path(folder)
    check_against_model(cfg, tensors, model, folder)
    tied, ties = cfg.get("tied", {}), architecture_ties(model)
    if tied != ties:
        raise bad(folder, f"{CONFIG_FILE} key 'tied' is {tied} but the {type(model).__name__} that base_config builds "
                  f"(tie_word_embeddings {cfg['base_config'].get('tie_word_embeddings')!r}) ties "
                  f"{ties or 'no weights'}; a tied weight is one the architecture ties")
    for alias, source in tied.items():
        if alias in tensors:
            raise bad(folder, f"tensor {alias!r} is stored in {MODEL_FILE} but tied to {source!r} (key 'tied' of "
                      f"{CONFIG_FILE}); a tied weight is stored once, under its source")
        if source not in tensors:
            raise bad(folder, f"tied tensor {alias!r} points to {source!r}, which {MODEL_FILE} does not hold")
    compressed = tuple(p + "." for p in cfg["modules"])
    needed = [k for k in model.state_dict() if k not in tied and not k.startswith(compressed)]
    missing = [k for k in needed if k not in tensors]
    if missing:
        raise bad(folder, f"tensor {missing[0]!r}, a weight of the model base_config builds, is not in {MODEL_FILE} "
                  f"({len(missing)} missing)")
    extra = sorted(set(tensors) - set(needed) - {k for k in tensors if k.startswith(compressed)})
    if extra:
        raise bad(folder, f"tensor {extra[0]!r} of {MODEL_FILE} is neither a weight of the model base_config builds "
                  f"nor a compressed module's ({len(extra)} such)")
    if manifest:
        check_manifest_names(cfg, tensors, folder)
    check_stored_tensors(cfg, tensors, folder)
    return {path: check_module(folder, path, meta, _module_tensors(tensors, path), None)
            for path, meta in cfg["modules"].items()}


def read_structure(folder: str | os.PathLike, *, verify: bool = True, legacy: bool = False
                   ) -> tuple[dict[str, Any], dict[str, Tensor], dict[str, CompressedLinear]]:
    """The one reading of a checkpoint's structure that both loaders start from, before any tensor value is read:
    checksums (:func:`verify_checksums`), the config (:func:`read_config`, :func:`check_config`), the content
    manifest against the folder (:func:`verify_manifest`), the safetensors header (:func:`header_tensors`) and
    :func:`check_structure` against the model ``base_config`` builds. Returns ``(config, meta tensors, modules
    on the meta device)``. ``verify=False`` skips the checksums and the manifest; ``legacy`` reads format 1."""
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
    shells = header_tensors(folder)
    _, model = build_base_model(cfg, folder)
    modules = check_structure(cfg, shells, model, folder, manifest=verify and v2)
    return cfg, shells, modules


def check_values(cfg: dict[str, Any], tensors: dict[str, Tensor], folder: str | os.PathLike, *,
                 verify: bool = True) -> None:
    """What both loaders check of the tensors' values once they are read: finite (:func:`check_tensors`) and,
    verified, each equal to its digest in the manifest (:func:`check_tensor_manifest`; format 1: its
    fingerprints present) and meaning what the scheme says (:func:`check_stored_tensors`: ±1 signs, positive
    scales, codes in range and in the dtype the writer stores them in)."""
    folder = Path(folder)
    check_tensors(cfg, tensors, folder)
    if not verify:
        return
    if cfg["format_version"] == FORMAT_VERSION:
        check_tensor_manifest(cfg, tensors, folder)
    else:
        fps = cfg.get("fingerprints")
        if not isinstance(fps, dict) or set(cfg["modules"]) - set(fps):
            raise bad(folder, "this format-1 checkpoint has no reconstruction fingerprints (key 'fingerprints'), "
                       "so its tensors cannot be checked against its metadata")
    check_stored_tensors(cfg, tensors, folder)


def check_against_model(cfg: dict[str, Any], tensors: dict[str, Tensor], model: nn.Module, folder: Path) -> None:
    """Every compressed module replaces a linear of the base architecture with the same shape; every other
    tensor has the shape the base config implies."""
    for path, meta in cfg["modules"].items():
        try:
            lin = model.get_submodule(path)
        except AttributeError:
            raise bad(folder, f"modules[{path!r}] is not a module of the {type(model).__name__} that base_config "
                       "describes") from None
        shape = (getattr(lin, "out_features", None), getattr(lin, "in_features", None))
        if shape != (meta["out_features"], meta["in_features"]):
            raise bad(
                folder,
                f"modules[{path!r}] is {meta['out_features']}x{meta['in_features']} but base_config makes it "
                f"{shape[0]}x{shape[1]} (hidden_size {cfg['base_config'].get('hidden_size')!r})",
            )
    params = dict(model.named_parameters(remove_duplicate=False))  # tied or not (inside from_pretrained: not yet)
    params.update(dict(model.named_buffers()))
    for k, v in tensors.items():
        if k in params and tuple(params[k].shape) != tuple(v.shape):
            raise bad(
                folder,
                f"{k} has shape {tuple(v.shape)} in {MODEL_FILE} but {tuple(params[k].shape)} per base_config "
                f"(hidden_size {cfg['base_config'].get('hidden_size')!r})",
            )
    # the uncompressed weights (embeddings, norms, lm_head) were written from one model: one floating dtype
    weights = dict(model.named_parameters(remove_duplicate=False))
    for k, v in sorted(tensors.items()):
        if k in weights and not v.is_floating_point():
            raise bad(folder, f"tensor {k!r} of {MODEL_FILE} has dtype {str(v.dtype).removeprefix('torch.')}; the "
                      f"uncompressed weights of the {type(model).__name__} are floating point")
    dense = {k: v.dtype for k, v in tensors.items() if k in weights and v.is_floating_point()}
    if len(set(dense.values())) > 1:
        ref = max(dense, key=lambda k: tensors[k].numel())  # the embedding, as a rule
        odd = sorted(k for k, dt in dense.items() if dt != dense[ref])
        raise bad(
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
            problem = stored_tensor_problem(meta, _module_tensors(tensors, path))
        except (ValueError, KeyError, TypeError) as e:  # e.g. an unknown quantizer name
            raise bad(Path(folder), f"modules[{path!r}] cannot be checked against its tensors ({e})") from None
        if problem is not None:
            raise bad(Path(folder), f"tensor '{path}.{problem[0]}' of {MODEL_FILE} {problem[1]}")


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
            raise bad(folder, f"{CONFIG_FILE} key 'bits' cannot be checked against the model ({e})") from None
        if not isinstance(want, dict):
            raise bad(folder, f"{CONFIG_FILE} key 'bits' is {want!r}, expected the bits summary")
        for key in sorted(set(want) | set(got)):
            a, b = want.get(key), got.get(key)
            same = a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                              and not isinstance(a, bool) and math.isclose(a, b, rel_tol=1e-9))
            if not same:
                raise bad(folder, f"{CONFIG_FILE} bits.{key} is {a!r} but the stored tensors make it {b!r}")
    try:
        prefix, n_layers = layers_prefix(model), len(decoder_layers(model))
    except ValueError:
        return
    if "dense_layers" in cfg:
        dense = [li for li in range(n_layers) if not any(p.startswith(f"{prefix}.{li}.") for p in mods)]
        if cfg["dense_layers"] != dense:
            raise bad(folder, f"{CONFIG_FILE} dense_layers is {cfg['dense_layers']!r} but the layers without a "
                       f"compressed module are {dense}")
    if "errors" in cfg:
        errors = cfg["errors"]
        if not isinstance(errors, dict) or set(errors) != set(mods):
            raise bad(folder, f"{CONFIG_FILE} key 'errors' does not hold one record per compressed module")
        for path, rec in errors.items():
            e = rec.get("error") if isinstance(rec, dict) else None
            if isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e < 0:
                raise bad(folder, f"{CONFIG_FILE} errors[{path!r}].error is {e!r}; expected a finite number >= 0")
    if "ft_rank" in cfg and any(m["ft_rank"] != cfg["ft_rank"] for m in mods.values()):
        raise bad(folder, f"{CONFIG_FILE} ft_rank is {cfg['ft_rank']!r} but its modules have ft_rank "
                   f"{sorted({m['ft_rank'] for m in mods.values()})}")
    if _rank_per_matrix(cfg["method"]):
        return
    mc = cfg["method_config"]
    rank = mc.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        other = sorted({m["rank"] for m in mods.values()} - {rank})
        if other:
            raise bad(folder, f"{CONFIG_FILE} method_config.rank is {rank} but its modules have rank {other}")
    for key, field in (("q_bits", "q_quantizer"), ("l_bits", "l_quantizer"), ("r_bits", "r_quantizer")):
        for path, m in mods.items():
            name = m.get(field)
            if key not in mc or name is None or (key != "q_bits" and m.get("lr_format") != "quantized"):
                continue  # a float Q or float factors: no quantizer to compare
            bits = resolve_quantizer(name).bits_per_weight
            if bits != mc[key]:
                raise bad(folder, f"{CONFIG_FILE} method_config.{key} is {mc[key]!r} but modules[{path!r}] stores "
                           f"{name} codes ({bits:g} bits per weight)")


def _rank_per_matrix(method: str) -> bool:
    """True if ``method`` chooses settings per matrix (a model-level plan) or is not registered here."""
    from caldera.methods import get_method

    try:
        return get_method(method).plan is not None
    except (ValueError, KeyError):
        return True


def verify_manifest(cfg: dict[str, Any], folder: str | os.PathLike) -> None:
    """The content manifest of a format-2 config (passed :func:`check_config`) against the folder: the base
    config's digest, ``config.json`` listed and unchanged, and its content: the base config plus the ``caldera``
    quantization config with the scheme of ``caldera_config.json`` and the guard against loading without caldera
    (:func:`hf_config_dict`; a ``config.json`` written before the guard may lack it), nothing else
    (``from_pretrained`` builds the model from it). ``ValueError`` naming the file or key and the fix."""
    folder = Path(folder)
    man = cfg.get("manifest")
    if not isinstance(man, dict) or not all(isinstance(man.get(k), dict) for k in ("tensors", "files")):
        raise bad(folder, f"{CONFIG_FILE} has no content manifest (key 'manifest' missing or malformed) {_NO_VERIFY}")
    if man.get("base_config") != json_digest(cfg["base_config"]):
        keys = sorted(cfg["base_config"])
        raise bad(
            folder,
            f"{CONFIG_FILE} key 'base_config' differs from the one recorded when the checkpoint was written "
            f"(manifest.base_config digest; e.g. an edited hidden_act or hidden_size among {len(keys)} keys): the "
            f"model it builds would not be the one compressed",
        )
    files = man["files"]
    if HF_CONFIG_FILE not in files:
        raise bad(folder, f"manifest.files does not list {HF_CONFIG_FILE} {_NO_VERIFY}")
    if not (folder / HF_CONFIG_FILE).is_file():
        raise bad(folder, f"{HF_CONFIG_FILE}, listed in manifest.files, is missing")
    if sha256_file(folder / HF_CONFIG_FILE) != files[HF_CONFIG_FILE]:
        raise bad(folder, f"{HF_CONFIG_FILE} differs from the file recorded in manifest.files")
    try:
        hf = json.loads((folder / HF_CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise bad(folder, f"{HF_CONFIG_FILE} is not valid JSON ({e})") from None
    want = hf_config_dict(cfg["base_config"], cfg["method"], cfg)
    if isinstance(hf, dict) and GUARD_KEY not in hf:  # written before the guard: plain transformers only warned
        del want[GUARD_KEY]
    if not isinstance(hf, dict) or hf != want:
        diff = sorted(k for k in set(hf) | set(want) if hf.get(k) != want.get(k)) if isinstance(hf, dict) else []
        raise bad(folder, f"{HF_CONFIG_FILE} does not match {CONFIG_FILE} (its base_config and quantization scheme; "
                           f"keys {diff[:5]})")


def check_tensor_manifest(cfg: dict[str, Any], tensors: dict[str, Tensor], folder: str | os.PathLike) -> None:
    """Every tensor (RHT signs, scales, codes, embeddings, norms) against its digest in ``manifest.tensors``; no
    tensor missing or extra; every compressed module has a reconstruction fingerprint."""
    folder = Path(folder)
    want = cfg["manifest"]["tensors"]
    check_manifest_names(cfg, tensors, folder)
    for k in sorted(set(want) & set(tensors)):
        if tensor_digest(tensors[k]) != want[k]:
            raise bad(folder, f"tensor {k!r} differs from the one recorded in manifest.tensors "
                       f"({MODEL_FILE} was modified after writing)")
    fps = cfg.get("fingerprints")
    missing = sorted(set(cfg["modules"]) - set(fps)) if isinstance(fps, dict) else ["all"]
    if missing:
        raise bad(folder, f"{CONFIG_FILE} has no reconstruction fingerprint for modules {missing[:3]} "
                   f"(key 'fingerprints') {_NO_VERIFY}")


def read_checkpoint(
    folder: str | os.PathLike, *, verify: bool = True, legacy: bool = False
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, tensors)`` of a checkpoint folder: its structure (:func:`read_structure`, what
    ``from_pretrained`` reads too), then every tensor and its values (:func:`check_values`).
    ``legacy=True`` also reads format 1 (no manifest; its fingerprints are then required), for ``caldera convert``.
    ``verify=False`` (documented opt-out) skips the checksums, the manifest and the values' meaning."""
    folder = Path(folder)
    cfg, _, _ = read_structure(folder, verify=verify, legacy=legacy)
    try:
        tensors = load_file(str(folder / MODEL_FILE))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint file {folder / MODEL_FILE} cannot be read ({e}); {_RERUN}") from None
    check_values(cfg, tensors, folder, verify=verify)
    return cfg, tensors


def check_module(
    folder: Path, path: str, meta: dict[str, Any], own: dict[str, Tensor], fingerprints: dict[str, Any] | None,
    **kw: Any,
) -> CompressedLinear:
    """The :class:`CompressedLinear` at ``path`` built from its tensors ``own``, checked against its metadata
    (no unused tensor) and its stored fingerprint (when ``fingerprints`` has one)."""
    try:
        mod = CompressedLinear.from_tensors(meta, own, **kw)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        raise bad(folder, f"modules[{path!r}] does not match its tensors ({e})") from None
    unused = sorted(set(own) - set(mod.state_dict()))
    if unused:  # e.g. rht or lr_format flipped in the metadata: the tensors say otherwise
        raise bad(
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
        raise bad(folder, f"modules[{path!r}] does not match its tensors ({e})") from None
    want = fingerprints.get(path)
    if not isinstance(want, list) or len(want) != 2:
        raise bad(folder, f"fingerprints[{path!r}] is {want!r}, expected [sum, sum of squares] {_NO_VERIFY}")
    if not all(math.isclose(a, b, rel_tol=FINGERPRINT_RTOL, abs_tol=1e-30) for a, b in zip(fp, want)):
        raise bad(
            folder,
            f"modules[{path!r}] decodes to a different weight than was saved (sum, sum of squares "
            f"{fp[0]:.6g}, {fp[1]:.6g} != stored {want[0]:.6g}, {want[1]:.6g}): its metadata (quantizer "
            "names, dtypes) no longer matches its tensors",
        )
