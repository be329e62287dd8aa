"""Plan-time checks of the workflow config that the JSON schema cannot express, and a YAML loader that refuses
duplicate keys.

:func:`plan_time_errors` is called by :func:`caldera.experiments.plan.check_config` (so ``snakemake -n`` refuses
these configs before any job runs); every message names the key's path and the fix. :func:`load_yaml_strict`
(:mod:`caldera.strict_yaml`) re-reads each ``--configfile`` (Snakemake's own loader lets the last of two equal keys
win silently).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from caldera.strict_yaml import load_yaml_strict

#: ``max_position_embeddings`` of each model's public Hugging Face config (keys of ``caldera.bits.MODEL_SHAPES``):
#: a sequence longer than this is beyond what the model was trained on (and its rotary cache).
MAX_POSITIONS = {
    "smollm2-135m": 8192,
    "gemma3-270m": 32768,
    "llama-2-7b": 4096,
    "llama-2-13b": 4096,
    "llama-2-70b": 4096,
    "llama-3-8b": 8192,
    "mistral-7b": 32768,
}


def check_config_files(paths: list[str | Path]) -> None:
    """Re-read each config file strictly (duplicate keys); raises ``ValueError`` naming the file and key."""
    for p in paths:
        load_yaml_strict(p)


def quoted_number_errors(config: dict[str, Any], schema_file: str | Path) -> list[str]:
    """Schema violations whose value is a quoted number (``bits: "2"``), each as ``path: ... write it without
    quotes``; the schema's own message ("'2' is not valid under any of the given schemas") does not say so."""
    import jsonschema

    schema = load_yaml_strict(schema_file)
    out = []
    for err in jsonschema.Draft202012Validator(schema).iter_errors(config):
        bad = [e for e in [err, *err.context] if isinstance(e.instance, str)]
        for e in bad[:1]:
            try:
                float(e.instance)
            except ValueError:
                continue
            where = ".".join(str(k) for k in e.absolute_path)
            key = where.rsplit(".", 1)[-1]
            out.append(f"{where}: {e.instance!r} is a quoted number; write it without quotes ({key}: {e.instance})")
    return sorted(set(out))


def _non_finite(node: Any, path: str, out: list[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _non_finite(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _non_finite(v, f"{path}[{i}]", out)
    elif isinstance(node, float) and not math.isfinite(node):
        out.append(f"{path}: {node} is not a finite number; write a finite value (e.g. 1.0e-4)")


def _used_models(config: dict[str, Any]) -> list[str]:
    return sorted(set(config["stand_ins"].values()) & set(config["models"]))


def _selection_errors(config: dict[str, Any]) -> list[str]:
    from caldera.experiments.variants import method_config

    sel, models, errors = config["selection"], config["models"], []
    used = set(_used_models(config))
    run_layers = config.get("layers")
    for m, layers in sel["layers"].items():
        if m not in models:
            errors.append(f"selection.layers.{m}: not a key of models ({sorted(models)}); name a stand-in")
            continue
        n = int(models[m]["num_layers"])
        bad = [x for x in layers if not 0 <= int(x) < n]
        if bad:
            errors.append(f"selection.layers.{m}: {bad} out of range ({n} decoder layers: 0..{n - 1})")
        elif run_layers is not None and (missing := [x for x in layers if x not in run_layers]):
            errors.append(f"selection.layers.{m}: {missing} have no Hessians (not in layers {run_layers}); "
                          "pick layers among them")  # fmt: skip
    if not any(m in used for m in sel["layers"]):
        errors.append(f"selection.layers: none of {sorted(sel['layers'])} is a stand-in of this run "
                      f"({sorted(used)}); the sweep would measure nothing")  # fmt: skip
    base = sel.get("base") or {}
    iters = {"outer_iters": int(sel["iters"][0]), "inner_iters": int(sel["iters"][1])}
    try:
        method_config("caldera", {"rank": 8, **base, **iters}, "selection.base")
    except ValueError as e:
        errors.append(str(e))
        return errors
    for name, cand in sel["candidates"].items():
        try:
            method_config("caldera", {"rank": 8, **base, **cand, **iters}, f"selection.candidates.{name}")
        except ValueError as e:
            errors.append(str(e))
    return errors


def _figure_rank_errors(config: dict[str, Any]) -> list[str]:
    """Each ``figures.paper_ranks`` entry must map to a rank of the figures' model (``mapped_rank`` for every
    factor precision the figures use)."""
    from caldera.config import PRESETS, CalderaConfig
    from caldera.experiments.variants import mapped_rank

    fc, errors = config["figures"], []
    if fc["model"] not in config["models"] or config["stand_ins"].get(fc["paper_model"]) != fc["model"]:
        return []  # check_config names these
    bits = sorted({CalderaConfig.preset(a).l_bits for a in fc["ablations"] if a in PRESETS} | {16})
    for p in fc["paper_ranks"]:
        for b in bits:
            try:
                mapped_rank(config, fc["paper_model"], int(p), b)
            except ValueError as e:
                errors.append(f"figures.paper_ranks: {p} cannot be mapped to models.{fc['model']} ({b}-bit "
                              f"factors): {e}; use paper ranks a {fc['paper_model']} matrix can have")  # fmt: skip
                break
    return errors


def plan_time_errors(config: dict[str, Any]) -> list[str]:
    """Every problem of ``config`` (after the JSON schema) that this module checks, each naming its key path."""
    from caldera.experiments.variants import RHTFT_TABLES, ZERO_SHOT_TABLES
    from caldera.paper_tables import load_reference_table
    from caldera.pipeline.assets import MODEL_ASSETS

    errors: list[str] = []
    _non_finite(config, "", errors)
    models = config["models"]
    for m, spec in models.items():
        src = str(spec["source"])
        if src.startswith("asset:") and src.split(":", 1)[1] not in MODEL_ASSETS:
            errors.append(f"models.{m}.source: {src!r} is not an offline asset; accepted: "
                          f"{sorted('asset:' + k for k in MODEL_ASSETS)} (or a hub id / local folder)")  # fmt: skip
    tasks = config["eval"]["zeroshot"]["tasks"]
    norm = [t if t.startswith("caldera_") else f"caldera_{t}" for t in tasks]
    dup = sorted({t for t, n in zip(tasks, norm, strict=True) if norm.count(n) > 1})
    if dup:
        errors.append(f"eval.zeroshot.tasks: {dup} name the same task more than once; list each task once")
    keep = config.get("paper_ranks")
    if keep is not None:
        tables = {RHTFT_TABLES.get(t, t) for t in config["tables"]} & set(ZERO_SHOT_TABLES)
        have = sorted({int(r["rank"]) for t in tables for r in load_reference_table(t)
                       if r.get("rank") not in (None, "") and int(r["rank"]) > 0})  # fmt: skip
        bad = [p for p in keep if p not in have]
        if bad:
            errors.append(f"paper_ranks: {bad} are not ranks of the rows of tables {sorted(tables)} (those rows "
                          f"would all be dropped); accepted: {have}, or null for every row")  # fmt: skip
    limits = {m: MAX_POSITIONS[models[m]["shapes"]] for m in _used_models(config)
              if models[m]["shapes"] in MAX_POSITIONS}  # fmt: skip
    if limits:
        lim_model = min(limits, key=limits.get)
        lim = limits[lim_model]
        lengths = {"calibration.seq_len": config["calibration"]["seq_len"]}
        lengths.update({f"eval.ppl.{c}.seq_len": s["seq_len"] for c, s in config["eval"]["ppl"].items()})
        if config.get("rht_ft"):
            lengths["rht_ft.seq_len"] = config["rht_ft"]["seq_len"]
        for t, s in ((config.get("lora_ft") or {}).get("tasks") or {}).items():
            lengths[f"lora_ft.tasks.{t}.block_size"] = s["block_size"]
        for key, n in lengths.items():
            if isinstance(n, int) and n > lim:
                errors.append(f"{key}: {n} tokens is longer than models.{lim_model} takes ({lim} positions); "
                              f"use at most {lim}")  # fmt: skip
    if config.get("selection"):
        errors += _selection_errors(config)
    errors += _figure_rank_errors(config)
    return errors
