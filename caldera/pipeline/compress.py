"""Whole-model compression, layer by layer, resumable, then assembly into a checkpoint.

:func:`compress_model` decomposes the seven linear layers of every decoder layer with a registered method
(``caldera.methods``) against the Hessians written by :func:`caldera.pipeline.hessians.collect_hessians`.
Matrices reading the same Hessian (q/k/v: group ``qkv``; gate/up: group ``up``) share ONE
:class:`~caldera.algorithm.decomposition.HessianContext` (regularization, RHT sign vector S_U, rotated Hessian and its
factorizations) when the method supports it; its seed is derived deterministically from the method
config's seed, the layer index and the group name (:func:`group_seed`).

Per layer two files are written, each atomically (:mod:`caldera.atomic`), the JSON last::

    layer_{l:03d}.safetensors   the CompressedLinear state of the 7 matrices
                                (``self_attn.q_proj.Q_codes``, ...)
    layer_{l:03d}.json          method + config, per-matrix metadata, relative data-aware error (raw and
                                regularized H), error trace, wall time, bits; sha256 of the safetensors file

A layer counts as done only if its JSON parses, names the same method and config, its checksum matches
the safetensors file and it was computed from the same Hessian file (sha256); anything else (a crash
mid-layer, a safetensors file without JSON, a stale JSON, Hessians recomputed since) is recomputed. A layer
done with another method or config raises ``ValueError`` (two experiments in one folder), unless
``replace_stale=True`` (the workflow: it reruns a job exactly when its config changed) deletes it and
recomputes. ``layers=[...]`` runs a subset (per-layer parallel jobs write to the same folder).

:func:`assemble_checkpoint` then builds the final checkpoint (:mod:`caldera.pipeline.checkpoint`) from the
per-layer files plus the base model's non-linear weights.

Bits (both in the returned summary and in the checkpoint config):

* ``average_bits``: the paper's budget formula :func:`caldera.bits.average_bits` over the model's actual
  linear shapes (no overheads);
* ``storage_bits_per_weight``: codes + scales + 1-bit packed sign vectors (+ trainable factors at their
  width), :func:`caldera.bits.storage_bits` summed over the compressed matrices / their parameter count;
* ``tensor_bits_per_weight``: the bytes actually stored in the safetensors payload (int8 signs, uint16
  E8P codes, ...) / parameter count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from caldera.atomic import remove_orphans, save_safetensors_atomic, sha256_file, timing_path, write_atomic
from caldera.methods import get_method
from caldera.metrics import relative_data_aware_error, relative_frobenius_error
from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint import (  # noqa: F401 - re-exported: what a compression job's callers read
    base_config_dict,
    bits_summary,
    layers_prefix,
    matrix_bits,
    model_linear_shapes,
    tied_keys,
    write_checkpoint,
)
from caldera.pipeline.hessian_files import check_hessian_files, layer_file, load_layer_hessians
from caldera.pipeline.hessians import GROUPS
from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.linears import LINEARS  # noqa: F401 - re-exported for the callers of compress_model

log = logging.getLogger("caldera.pipeline.compress")
FORMAT = "caldera-layer/1"


def group_seed(seed: int, layer: int, group: str) -> int:
    """Deterministic 31-bit seed of one (layer, Hessian group) from the method config's seed."""
    h = hashlib.sha256(f"caldera/{int(seed)}/{int(layer)}/{group}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


def layer_paths(out_dir: str | os.PathLike, layer: int) -> tuple[Path, Path]:
    base = Path(out_dir) / f"layer_{layer:03d}"
    return base.with_suffix(".safetensors"), base.with_suffix(".json")


def layer_timing_path(out_dir: str | os.PathLike, layer: int) -> Path:
    """``layer_NNN.timing.json``: the layer's wall-clock record (seconds per matrix and in all, when it finished),
    kept out of ``layer_NNN.json`` so that a rerun writes that file, and everything built from it, byte for byte.
    Nothing reads it to decide anything."""
    return timing_path(layer_paths(out_dir, layer)[1])


def _jsonable(x: Any) -> Any:
    return json.loads(
        json.dumps(x, default=lambda o: str(o).removeprefix("torch.") if isinstance(o, torch.dtype) else repr(o))
    )


def recorded_method_config(method: str, method_params: Any) -> dict[str, Any]:
    """The method config as a per-layer file and a checkpoint record it (``method_config``): the method's config
    made from ``method_params`` (a config object, or a dict for ``make_config``), as JSON values."""
    return _jsonable(dataclasses.asdict(get_method(method).make_config(method_params)))


def read_layer_result(
    out_dir: str | os.PathLike,
    layer: int,
    method: str | None = None,
    method_config: dict | None = None,
    ft_rank: int | None = None,
    hessian_sha256: str | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """The layer's JSON if the layer is done and trustworthy (see module docstring), else None.

    Raises ``ValueError`` when the layer was done with a different method or config (another experiment
    in the same folder). With ``hessian_sha256`` given, a layer computed from other Hessians is not done; with
    ``overrides`` given (a model-level method's per-matrix settings of this layer), one computed with others is
    not done either.
    """
    st, js = layer_paths(out_dir, layer)
    try:
        info = json.loads(js.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        return None
    same = info.get("method") == method and info.get("method_config") == method_config
    if method is not None and not (same and (ft_rank is None or info.get("ft_rank", 0) == ft_rank)):
        raise ValueError(
            f"{js} was computed with method {info.get('method')!r}, config {info.get('method_config')} and "
            f"ft_rank {info.get('ft_rank', 0)}, not {method!r} with {method_config} and ft_rank {ft_rank}; "
            "use another output folder or delete the old per-layer files"
        )
    if not st.is_file() or sha256_file(st) != info.get("sha256"):
        return None
    if hessian_sha256 is not None and info.get("hessian_sha256") != hessian_sha256:
        log.info("layer %d in %s was computed from other Hessians: recomputing it", layer, out_dir)
        return None
    if overrides is not None and info.get("overrides", {}) != overrides:
        log.info("layer %d in %s was computed with other per-matrix settings: recomputing it", layer, out_dir)
        return None
    return info


def discard_layer(out_dir: str | os.PathLike, layer: int) -> None:
    """Delete a layer's files, the JSON first (so no half-deleted layer is ever taken as done)."""
    for path in (*reversed(layer_paths(out_dir, layer)), layer_timing_path(out_dir, layer)):
        path.unlink(missing_ok=True)


def load_layer_tensors(out_dir: str | os.PathLike, layer: int) -> dict[str, Tensor]:
    st, _ = layer_paths(out_dir, layer)
    try:
        return load_file(str(st))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{st} cannot be read ({e}); delete it and re-run `caldera compress`") from None


def _relative_errors(W_hat: Tensor, W: Tensor, H: Tensor) -> tuple[float, float]:
    """(data-aware, Frobenius) relative errors of Ŵ, as recorded per matrix (the data-aware one's two matrix
    products in float32, its sums in float64). For an all-zero W (0/0) they are 0 when Ŵ = 0 too (an exact
    reconstruction, as :func:`caldera.algorithm.decomposition.caldera_decompose` returns) and inf otherwise."""
    if not bool(W.any()):
        e = 0.0 if not bool(W_hat.any()) else float("inf")
        return e, e
    return relative_data_aware_error(W_hat, W, H, product=torch.float32), relative_frobenius_error(W_hat, W)


def layer_matrices(layer: nn.Module, li: int, H_groups: dict[str, Tensor], spec, config,
                   device: torch.device | str = "cpu"):
    """The seven matrices of decoder layer ``li`` as a method sees them: ``(name, group, W, H, cfg, context,
    context seconds)`` with W (n, d) float32 and H (d, d) float64 on ``device``, ``cfg`` = ``config`` with the
    (layer, group) seed (:func:`group_seed`) and ``context`` shared by the matrices of one Hessian group."""
    has_seed = any(f.name == "seed" for f in dataclasses.fields(config))
    for g, (_, members) in GROUPS.items():
        H = H_groups[g].to(device=device, dtype=torch.float64)
        cfg = dataclasses.replace(config, seed=group_seed(config.seed, li, g)) if has_seed else config
        t0 = time.perf_counter()
        ctx = spec.prepare_context(H, cfg)
        ctx_s = time.perf_counter() - t0
        for name in members:
            # the model's own dtype (fp16/bf16/fp32) to float32 on the job's device, one matrix at a time
            W = layer.get_submodule(name).weight.detach().to(device=device, dtype=torch.float32)
            yield name, g, W, H, cfg, ctx, ctx_s


def _decompose_layer(
    layer: nn.Module, li: int, H_groups: dict[str, Tensor], spec, config, *, ft_rank: int, progress_cb=None,
    device: torch.device | str = "cpu", overrides: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, dict[str, float]]]:
    """``(tensors, per-matrix records, per-matrix seconds)`` of decoder layer ``li``: the layer file's tensors and
    metadata, and the wall-clock record that goes to :func:`layer_timing_path` instead."""
    tensors: dict[str, Tensor] = {}
    matrices: dict[str, Any] = {}
    timing: dict[str, dict[str, float]] = {}
    for name, g, W, H, cfg, ctx, ctx_s in layer_matrices(layer, li, H_groups, spec, config, device):
        lin = layer.get_submodule(name)
        if overrides and name in overrides:
            cfg = dataclasses.replace(cfg, **overrides[name])
        t1 = time.perf_counter()
        dec = spec.fn(W, H, cfg, context=ctx) if ctx is not None else spec.fn(W, H, cfg)
        wall = time.perf_counter() - t1
        bias = lin.bias.detach() if getattr(lin, "bias", None) is not None else None
        mod = CompressedLinear.from_decomposition(dec, bias=bias, ft_rank=ft_rank, ft_dtype=torch.float32)
        W_hat = mod.weight_reconstruction().to(W.device)  # the stored layer, rebuilt on the CPU
        err, frob = _relative_errors(W_hat, W, H)
        matrices[name] = {
            "group": g,
            "seed": getattr(cfg, "seed", None),
            "error": err,
            "error_reg": float(dec.error),
            "frobenius_error": frob,
            "best_iter": dec.best_iter,
            "error_trace": _jsonable(dec.error_trace),
            **matrix_bits(mod),
            "module": mod.metadata(),
        }
        timing[name] = {"wall_s": wall, "context_wall_s": ctx_s}
        for k, v in mod.state_dict().items():
            tensors[f"{name}.{k}"] = v.detach().cpu().contiguous()
        log.info(
            "layer %d %-18s %4dx%-4d rel. data-aware error %.4f (reg. H %.4f) %6.1fs",
            li,
            name,
            W.shape[0],
            W.shape[1],
            err,
            float(dec.error),
            wall,
        )
        if progress_cb is not None:
            progress_cb(f"L{li} {name.split('.')[-1]} err={err:.4f}")
    return tensors, matrices, timing


def compress_model(
    model: nn.Module,
    hessian_dir: str | os.PathLike,
    method: str,
    method_params: Any,
    out_dir: str | os.PathLike,
    *,
    layers: Sequence[int] | None = None,
    progress: bool = True,
    ft_rank: int = 0,
    replace_stale: bool = False,
    device: torch.device | str | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    hessian_expect: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Compress the decoder layers of ``model`` into per-layer files in ``out_dir`` (module docstring).

    ``overrides``: ``{"<layer>.<linear>": {field: value}}``, per-matrix settings of a method with a model-level
    step (:class:`caldera.methods.registry.ModelPlan`; :func:`caldera.pipeline.allocate.allocate_model` makes
    them); such a method is refused without them. Each layer's file records its overrides.

    ``device``: where each matrix and its Hessian are decomposed (default the CPU). The model's weights may
    be in any float dtype and on any device, and only the compressed layers' linear weights need to be real
    tensors (the rest may be on ``meta``: :func:`caldera.pipeline.partial.load_layer_weights`); each weight is
    converted to float32 on ``device`` when its turn comes.

    ``replace_stale``: recompute (instead of refusing) layers that were done with another method or config.

    ``hessian_expect``: what this job knows of its Hessians (``model``, ``calibration_sha256``, ``n_tokens``,
    ``dtype``); every layer's file is checked against it (and the folder's ``hessians.json``), its layer and its
    shapes before any work (:func:`caldera.pipeline.hessian_files.check_hessian_files`).

    ``method_params``: the method's config object, or a dict for ``get_method(method).make_config`` (a
    ``"preset"`` key selects a preset).
    Returns ``{"method", "method_config", "computed", "skipped", "matrices", "bits", "wall_s"}`` where
    ``matrices`` maps ``"<layer>.<linear>"`` to its error and bits, over every layer that is done (computed now or
    before), and ``wall_s`` is this call's time (each layer's own is in :func:`layer_timing_path`).
    """
    from tqdm.auto import tqdm

    spec = get_method(method)
    config = spec.make_config(method_params)
    cfg_dict = recorded_method_config(method, config)
    all_layers = decoder_layers(model)
    n_layers = len(all_layers)
    wanted = sorted(set(range(n_layers) if layers is None else (int(x) for x in layers)))
    bad = [x for x in wanted if not 0 <= x < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range; the model has {n_layers} decoder layers (0..{n_layers - 1})")
    spec.check_shapes(config, matrix_shapes(model, wanted))  # every rank and shape before any work
    per_layer = _layer_overrides(spec, config, model, wanted, overrides)
    hessian_dir = Path(hessian_dir)
    check_hessian_files(hessian_dir, wanted, model, hessian_expect)  # the right files, before any work
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for orphan in remove_orphans(out_dir):  # temporaries of a killed run (pid gone), never a live job's
        log.info("removed %s (left by an interrupted run)", orphan)
    results: dict[int, dict[str, Any]] = {}
    computed, skipped = [], []
    t_start = time.perf_counter()
    bar = tqdm(total=len(wanted) * len(LINEARS), desc=f"compress {method}", unit="matrix", disable=not progress)
    for li in wanted:
        h_sha = sha256_file(layer_file(hessian_dir, li))
        try:
            done = read_layer_result(out_dir, li, method, cfg_dict, ft_rank, hessian_sha256=h_sha,
                                     overrides=per_layer.get(li) if overrides is not None else None)
        except ValueError:
            if not replace_stale:
                raise
            log.info("layer %d in %s was done with another method or config: recomputing it", li, out_dir)
            discard_layer(out_dir, li)
            done = None
        if done is not None:
            results[li] = done
            skipped.append(li)
            bar.update(len(LINEARS))
            log.info("layer %d already compressed in %s: skipped", li, out_dir)
            continue
        t0 = time.perf_counter()
        H_groups = load_layer_hessians(layer_file(hessian_dir, li))

        def tick(msg: str) -> None:
            bar.set_postfix_str(msg)
            bar.update(1)

        try:
            with torch.no_grad():
                tensors, matrices, timing = _decompose_layer(
                    all_layers[li], li, H_groups, spec, config, ft_rank=ft_rank, progress_cb=tick,
                    device=torch.device("cpu") if device is None else torch.device(device),
                    overrides=per_layer.get(li),
                )
        except ValueError as e:  # e.g. an indefinite H: say which file it came from
            raise ValueError(f"layer {li} with the Hessians of {layer_file(hessian_dir, li)}: {e}") from e
        st, js = layer_paths(out_dir, li)
        # one metadata key (JSON, sorted): a rerun writes byte-identical files (see caldera.atomic)
        save_safetensors_atomic(tensors, st, {"caldera_layer": json.dumps({"format": FORMAT, "layer": li})})
        info = {
            "format": FORMAT,
            "layer": li,
            "method": method,
            "method_config": cfg_dict,
            "ft_rank": ft_rank,
            "hessian_file": str(layer_file(hessian_dir, li)),
            "hessian_sha256": h_sha,
            **({"overrides": per_layer[li]} if li in per_layer else {}),
            "matrices": matrices,
            "sha256": sha256_file(st),
        }
        # the timing first: a layer is done when its JSON exists, and its timing is then never missing
        write_atomic(layer_timing_path(out_dir, li), json.dumps(
            {"layer": li, "wall_s": time.perf_counter() - t0, "finished_at": time.time(), "matrices": timing},
            indent=1, sort_keys=True) + "\n")
        write_atomic(js, json.dumps(info, indent=1, sort_keys=True) + "\n")
        results[li] = info
        computed.append(li)
    bar.close()
    flat = {f"{li}.{name}": m for li, info in sorted(results.items()) for name, m in info["matrices"].items()}
    return {
        "method": method,
        "method_config": cfg_dict,
        "computed": computed,
        "skipped": skipped,
        "matrices": {
            k: {f: v[f] for f in ("shape", "error", "error_reg", "storage_bits", "rank")}
            for k, v in flat.items()
        },
        "bits": bits_summary(model, [m for info in results.values() for m in info["matrices"].values()]),
        "wall_s": time.perf_counter() - t_start,
    }


def _layer_overrides(spec, config, model: nn.Module, layers: Sequence[int],
                     overrides: dict[str, dict[str, Any]] | None) -> dict[int, dict[str, dict[str, Any]]]:
    """``overrides`` by layer (``{layer: {linear: {field: value}}}``), checked before any work: a method with a
    model-level step needs one for every matrix of ``layers``, each a valid config for the matrix's shape; a
    method without one takes none."""
    if spec.plan is None:
        if overrides:
            raise ValueError(f"method {spec.name!r} has no per-matrix settings; remove the overrides")
        return {}
    if overrides is None:
        raise ValueError(f"method {spec.name!r} chooses settings per matrix from the whole model: run "
                         "caldera.pipeline.allocate.allocate_model first and pass its overrides "
                         "(`caldera compress` does this itself)")
    all_layers = decoder_layers(model)
    out: dict[int, dict[str, dict[str, Any]]] = {}
    errors = []
    for li in layers:
        for name in LINEARS:
            key = f"{li}.{name}"
            if key not in overrides:
                errors.append(f"{key}: no allocation")
                continue
            try:
                cfg = dataclasses.replace(config, **overrides[key])
            except (TypeError, ValueError) as e:
                errors.append(f"{key}: {e}")
                continue
            n, d = all_layers[li].get_submodule(name).weight.shape
            errors += [f"{key} {n}×{d}: {p}" for p in spec.shape_problems(cfg, n, d)]
            out.setdefault(li, {})[name] = dict(overrides[key])
    if errors:
        raise ValueError(f"method {spec.name!r}: the per-matrix settings do not fit: " + "; ".join(errors[:10])
                         + (f"; … ({len(errors)} problems)" if len(errors) > 10 else ""))
    return out


def matrix_shapes(model: nn.Module, layers: Sequence[int] | None = None) -> dict[str, tuple[int, int]]:
    """``{linear name: (out, in)}`` of the decoder layers ``layers`` (default all), each distinct (name, shape)
    once (``"layer 3 mlp.up_proj"`` where a name has several shapes): what a method is checked against before
    any work (:meth:`caldera.methods.registry.MethodSpec.check_shapes`)."""
    all_layers = decoder_layers(model)
    seen: dict[str, list[tuple[int, tuple[int, int]]]] = {}
    for li in range(len(all_layers)) if layers is None else layers:
        for name in LINEARS:
            shape = tuple(all_layers[li].get_submodule(name).weight.shape)
            if all(s != shape for _, s in seen.get(name, [])):
                seen.setdefault(name, []).append((li, shape))
    return {(name if len(v) == 1 else f"layer {li} {name}"): s for name, v in seen.items() for li, s in v}


def assemble_checkpoint(
    model: nn.Module,
    layer_dir: str | os.PathLike | Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    method: str,
    params: Any,
    *,
    tokenizer: Any | None = None,
    allow_partial: bool = False,
    extra: dict[str, Any] | None = None,
    generation_config: bytes | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Build the compressed checkpoint folder ``out_dir`` from ``layer_dir``'s per-layer files (a folder, or
    several: e.g. one per compression job, each layer taken from the folder that holds it).

    Every decoder layer must be done (``allow_partial=True`` keeps the missing ones dense and records them
    as ``dense_layers``). The model itself is not modified. Returns ``(path, summary)``. ``extra``: further keys
    of ``caldera_config.json`` (``provenance``: :mod:`caldera.pipeline.checkpoint.provenance`);
    ``generation_config``: the base model's ``generation_config.json`` bytes.
    """
    cfg_dict = recorded_method_config(method, params)
    n_layers = len(decoder_layers(model))
    dirs = [layer_dir] if isinstance(layer_dir, (str, os.PathLike)) else list(layer_dir)
    if not dirs:
        raise ValueError("no per-layer folder given")
    src = {li: next((d for d in dirs if layer_paths(d, li)[1].is_file()), dirs[0]) for li in range(n_layers)}
    infos = {li: read_layer_result(src[li], li, method, cfg_dict) for li in range(n_layers)}
    layer_dir = ", ".join(map(str, dirs))
    missing = [li for li, info in infos.items() if info is None]
    if missing and not allow_partial:
        raise ValueError(
            f"layers {missing} of {n_layers} are not compressed (or their files are incomplete) "
            f"in {layer_dir}; "
            f"run `caldera compress` for them first"
        )
    if len(missing) == n_layers:
        raise ValueError(f"no compressed layer in {layer_dir}; run `caldera compress` first")
    prefix = layers_prefix(model)
    tied = tied_keys(model)
    compressed_paths = [f"{prefix}.{li}.{name}" for li, info in infos.items() if info for name in LINEARS]
    drop = {f"{p}.{w}" for p in compressed_paths for w in ("weight", "bias")}
    tensors = {k: v for k, v in model.state_dict().items() if k not in tied and k not in drop}
    modules: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    matrices = []
    for li, info in infos.items():
        if info is None:
            continue
        lt = load_layer_tensors(src[li], li)
        if sha256_file(layer_paths(src[li], li)[0]) != info["sha256"]:
            raise ValueError(f"{layer_paths(src[li], li)[0]} changed while assembling; re-run `caldera compress`")
        for k, v in lt.items():
            tensors[f"{prefix}.{li}.{k}"] = v
        for name, m in info["matrices"].items():
            modules[f"{prefix}.{li}.{name}"] = m["module"]
            errors[f"{prefix}.{li}.{name}"] = {
                f: m[f] for f in ("error", "error_reg", "frobenius_error", "best_iter", "storage_bits")
            }
            matrices.append(m)
    unread = sorted(k for k, v in tensors.items() if v.device.type == "meta")
    if unread:  # a model read without some layers' weights (caldera.pipeline.partial) whose files are not done
        raise ValueError(f"tensors {unread[:5]} were not loaded and no compressed layer replaces them in {layer_dir}; "
                         "re-run `caldera compress` for those layers")
    bits = bits_summary(model, matrices)
    config = {
        "base_config": base_config_dict(model),
        "method": method,
        "method_config": cfg_dict,
        "ft_rank": next(info for info in infos.values() if info)["ft_rank"],
        "modules": modules,
        "tied": tied,
        "bits": bits,
        "errors": errors,
        "dense_layers": missing,
        **(extra or {}),
    }
    path = write_checkpoint(out_dir, tensors, config, tokenizer, generation_config=generation_config)
    return path, {"path": str(path), "bits": bits, "dense_layers": missing, "errors": errors}
