"""The model-level step of a method that chooses settings per matrix (:class:`caldera.methods.registry.ModelPlan`).

Two stages, so that a cluster runs the expensive one where the compression runs:

1. :func:`profile_model` (one job per chunk of decoder layers, like the compression): the method's
   ``profile(W, H, config, context)`` for every matrix, with the same per-(layer, group) seeds and shared
   Hessian contexts as :func:`caldera.pipeline.compress.compress_model` (:func:`~caldera.pipeline.compress.
   layer_matrices`), written as ``{"method", "method_config", "profiles": {"<layer>.<linear>": …}, "wall_s"}``.
2. :func:`allocate_model` (one job per model): the method's ``allocate`` over every chunk's profiles →
   ``{"<layer>.<linear>": {field: value}}``, the ``overrides`` that ``compress_model`` applies per matrix.

Both are checked: profiles of another method or config, a matrix missing or profiled twice, and overrides
that do not cover every profiled matrix raise ``ValueError`` naming the file or key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from caldera.methods import get_method
from caldera.pipeline.compress import LINEARS, _jsonable, layer_matrices
from caldera.pipeline.hessian_files import check_hessian_files, layer_file, load_layer_hessians
from caldera.pipeline.layer_runner import decoder_layers

PROFILE_FORMAT = "caldera-profiles/1"


def _config_dict(config: Any) -> dict[str, Any]:
    """The config as its per-layer files record it (:func:`caldera.pipeline.compress.compress_model`)."""
    return _jsonable(dataclasses.asdict(config))


def profile_model(model: nn.Module, hessian_dir: str | os.PathLike, method: str, method_params: Any, *,
                  layers: Sequence[int] | None = None, device: torch.device | str | None = None,
                  progress: bool = True, hessian_expect: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stage 1 (module docstring) over decoder ``layers`` (default all) of ``model``, with the Hessians of
    ``hessian_dir`` (checked first, as by :func:`caldera.pipeline.compress.compress_model`: ``hessian_expect``).
    Returns ``{"format", "method", "method_config", "layers", "profiles", "wall_s"}``."""
    from tqdm.auto import tqdm

    spec = get_method(method)
    if spec.plan is None:
        raise ValueError(f"method {method!r} has no model-level step (ModelPlan): nothing to profile")
    config = spec.make_config(method_params)
    all_layers = decoder_layers(model)
    wanted = list(range(len(all_layers))) if layers is None else sorted({int(x) for x in layers})
    check_hessian_files(hessian_dir, wanted, model, hessian_expect)  # the right files, before any work
    dev = torch.device("cpu") if device is None else torch.device(device)
    profiles: dict[str, Any] = {}
    t0 = time.perf_counter()
    bar = tqdm(total=len(wanted) * len(LINEARS), desc=f"profile {method}", unit="matrix", disable=not progress)
    with torch.no_grad():
        for li in wanted:
            H_groups = load_layer_hessians(layer_file(hessian_dir, li))
            for name, _, W, H, cfg, ctx, _ in layer_matrices(all_layers[li], li, H_groups, spec, config, dev):
                profiles[f"{li}.{name}"] = spec.plan.profile(W, H, cfg, context=ctx)
                bar.update(1)
    bar.close()
    return {"format": PROFILE_FORMAT, "method": method, "method_config": _config_dict(config), "layers": wanted,
            "profiles": profiles, "wall_s": time.perf_counter() - t0}


def allocate_model(profile_runs: Sequence[dict[str, Any]], method: str, method_params: Any) -> dict[str, Any]:
    """Stage 2 (module docstring) from the results of :func:`profile_model` (one per chunk). Returns
    ``{"method", "method_config", "overrides": {"<layer>.<linear>": {…}}, "profile_wall_s", "allocate_wall_s"}``."""
    spec = get_method(method)
    if spec.plan is None:
        raise ValueError(f"method {method!r} has no model-level step (ModelPlan): nothing to allocate")
    config = spec.make_config(method_params)
    want = _config_dict(config)
    profiles: dict[str, Any] = {}
    for i, run in enumerate(profile_runs):
        if run.get("format") != PROFILE_FORMAT or run.get("method") != method or run.get("method_config") != want:
            raise ValueError(f"profiles #{i} were made by {run.get('method')!r} with {run.get('method_config')}, "
                             f"not {method!r} with {want}; profile the model again")
        twice = sorted(set(run["profiles"]) & set(profiles))
        if twice:
            raise ValueError(f"profiles #{i}: matrices {twice[:5]} were profiled twice (overlapping layer chunks)")
        profiles.update(run["profiles"])
    if not profiles:
        raise ValueError(f"method {method!r}: no profiles to allocate from")
    t0 = time.perf_counter()
    overrides = spec.plan.allocate(profiles, config)
    if set(overrides) != set(profiles):
        raise ValueError(f"method {method!r}: allocate() returned settings for {len(overrides)} matrices, not the "
                         f"{len(profiles)} profiled (missing: {sorted(set(profiles) - set(overrides))[:5]})")
    return {"method": method, "method_config": want, "overrides": overrides,
            "profile_wall_s": sum(float(r.get("wall_s") or 0.0) for r in profile_runs),
            "allocate_wall_s": time.perf_counter() - t0}


def read_allocation(path: str | os.PathLike, method: str, method_params: Any) -> dict[str, dict[str, Any]]:
    """The ``overrides`` of an :func:`allocate_model` result written to ``path``, checked to be this method's
    and config's (``ValueError`` naming the file otherwise)."""
    try:
        alloc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read the allocation ({e}); run the allocation again") from None
    want = _config_dict(get_method(method).make_config(method_params))
    if alloc.get("method") != method or alloc.get("method_config") != want:
        raise ValueError(f"{path} was allocated for {alloc.get('method')!r} with {alloc.get('method_config')}, not "
                         f"{method!r} with {want}; run the allocation again")
    return alloc["overrides"]


def model_allocation(model: nn.Module, hessian_dir: str | os.PathLike, method: str, method_params: Any,
                     work_dir: str | os.PathLike, *, allocation: str | os.PathLike | None = None,
                     progress: bool = True, hessian_expect: dict[str, Any] | None = None,
                     option: str = "allocation") -> dict[str, dict[str, Any]] | None:
    """The ``overrides`` :func:`caldera.pipeline.compress.compress_model` takes for ``method`` (None for a method
    without a model-level step): read from ``allocation`` (a file :func:`allocate_model`'s result was written
    to), else from ``work_dir/allocation.json`` when it was made for this method and config, else profiled over
    every decoder layer of ``model`` (:func:`profile_model`, the whole model's choice whatever layers are then
    compressed), allocated and written to that file (``allocation`` or ``work_dir/allocation.json``).

    ``ValueError`` naming ``option`` (how the caller calls ``allocation``): an ``allocation`` for a method that
    takes no per-matrix settings, or an ``allocation`` file of another method or config."""
    from caldera.atomic import write_atomic

    if get_method(method).plan is None:
        if allocation:
            raise ValueError(f"{option}: method {method!r} takes no per-matrix settings; remove it")
        return None
    path = Path(allocation) if allocation else Path(work_dir) / "allocation.json"
    if path.is_file():
        try:
            return read_allocation(path, method, method_params)
        except ValueError as e:
            if allocation:
                raise ValueError(f"{option} {path}: {e}") from None
    alloc = allocate_model([profile_model(model, hessian_dir, method, method_params, progress=progress,
                                          hessian_expect=hessian_expect)], method, method_params)
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(alloc, indent=1, sort_keys=True) + "\n")
    return alloc["overrides"]
