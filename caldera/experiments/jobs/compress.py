"""The jobs of ``workflow/rules/compress.smk``: a variant's layers compressed in chunks (``compress_layers``,
``profile_layers`` and ``allocate`` for a method that chooses settings per matrix), assembled into a checkpoint
(``assemble_checkpoint``), both in one job (``compress_variant``), and a seed replicate compressed and evaluated
(``replicate``). Each writes its outputs atomically and returns a small dict."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from caldera.atomic import read_json, timing_path, write_json, write_result
from caldera.experiments.jobs.calibrate import hessian_expect
from caldera.experiments.jobs.evaluate import step_evaluate
from caldera.experiments.jobs.models import load_layers, load_tokenizer, model_source, run_device
from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import EvalSettings, RunContext


def layer_chunks(run: RunContext, model: str) -> list[list[int]]:
    """Decoder layers to compress (``run.layers`` or all of ``model``'s), split into jobs of
    ``run.layers_per_job``."""
    layers = list(range(run.models[model].num_layers)) if run.layers is None else list(run.layers)
    k = run.layers_per_job
    return [layers[i : i + k] for i in range(0, len(layers), k)]


def step_profile_layers(run: RunContext, v: Variant, hessian_dir: str, chunk: int, out: str) -> dict:
    """The model-level step's profiles (:func:`caldera.pipeline.allocate.profile_model`) of chunk ``chunk`` of
    :func:`layer_chunks`, written to ``out``; read and run like :func:`step_compress_layers`."""
    from caldera.pipeline.allocate import profile_model

    layers = layer_chunks(run, v.model)[chunk]
    device = run_device(run)
    mdl = load_layers(run, v.model, layers, device)
    res = profile_model(mdl, hessian_dir, v.method, v.config, layers=layers, device=device,
                        hessian_expect=hessian_expect(run, v.model))
    write_result(out, {k: x for k, x in res.items() if k != "wall_s"}, {"wall_s": res["wall_s"]})
    return res


def step_allocate(v: Variant, profiles: list[str], out: str) -> dict:
    """The per-matrix settings of variant ``v`` from every chunk's profiles
    (:func:`caldera.pipeline.allocate.allocate_model`), written to ``out``."""
    from caldera.pipeline.allocate import allocate_model

    res = allocate_model([json.loads(Path(p).read_text()) for p in profiles], v.method, v.config)
    clocks = ("profile_wall_s", "allocate_wall_s")
    seconds = {"allocate_wall_s": res["allocate_wall_s"],
               "profile_wall_s": sum(float(read_json(timing_path(p)).get("wall_s") or 0.0)
                                     for p in profiles if timing_path(p).is_file())}
    write_result(out, {k: x for k, x in res.items() if k not in clocks}, seconds)
    return res


def step_compress_layers(run: RunContext, v: Variant, hessian_dir: str, chunk: int, out: str,
                         allocation: str | None = None) -> dict:
    """Compress chunk ``chunk`` of :func:`layer_chunks` into ``<dir of out>`` (per-layer files) and write a
    summary to ``out`` (its layers; the layers computed and kept go to its timing file). ``v.config``: the
    method's typed config, built when the plan was made; ``allocation``:
    the :func:`step_allocate` file of a method that chooses settings per matrix.

    Only the chunk's linear weights are read (:func:`caldera.pipeline.partial.load_layer_weights`: the shards
    that hold them, in the checkpoint's own dtype, on :func:`run_device`); the decomposition runs there."""
    from caldera.pipeline.allocate import read_allocation
    from caldera.pipeline.compress import compress_model

    layers = layer_chunks(run, v.model)[chunk]
    device = run_device(run)
    mdl = load_layers(run, v.model, layers, device)
    overrides = read_allocation(allocation, v.method, v.config) if allocation else None
    # Snakemake reruns this job exactly when its inputs or declared config changed: layers left from an
    # earlier config are replaced, not refused.
    res = compress_model(mdl, hessian_dir, v.method, v.config, os.path.dirname(out), layers=layers,
                         progress=True, replace_stale=True, device=device, overrides=overrides,
                         hessian_expect=hessian_expect(run, v.model))
    # which layers this process computed and which an earlier, interrupted attempt left is how the job ran, not
    # what it made: it goes to the timing file, so a resumed job writes the same summary as an uninterrupted one
    how = {"computed": res.get("computed"), "skipped": res.get("skipped")}
    write_result(out, {"layers": layers}, {"wall_s": res.get("wall_s"), **how})
    return {"layers": layers, **how}


def step_compress_variant(run: RunContext, v: Variant, hessian_dir: str, layer_dir: str, out_dir: str,
                          allocation: str | None = None) -> dict[str, Any]:
    """The whole of a variant whose decoder layers are one chunk of :func:`layer_chunks`, in one job: its per-layer
    files in ``layer_dir`` (:func:`step_compress_layers`, resumable: layers already there are kept), then its
    checkpoint in ``out_dir`` (:func:`step_assemble`). Returns the checkpoint's summary. One process instead of
    two saves a job's start-up (interpreter, imports, the model's skeleton), which is most of an assembly's time
    at the stand-ins' size."""
    if len(layer_chunks(run, v.model)) != 1:
        raise ValueError(f"variant {v.id}: its layers are {len(layer_chunks(run, v.model))} chunks; "
                         "step_compress_variant takes a variant of one chunk (layers_per_job >= its layers)")
    step_compress_layers(run, v, hessian_dir, 0, os.path.join(layer_dir, "chunk.json"), allocation)
    return step_assemble(run, v, [layer_dir], out_dir, hessian_dir)


def step_assemble(run: RunContext, v: Variant, layer_dir: str | list[str], out_dir: str,
                  hessian_dir: str | None = None) -> dict[str, Any]:
    """The checkpoint of variant ``v`` in ``out_dir`` from the per-layer files in ``layer_dir`` (a folder or the
    list of the chunk jobs' folders); returns its summary. It records its provenance (the stand-in and its weight
    files' digest, the calibration of ``hessian_dir``, caldera's version and commit:
    :mod:`caldera.pipeline.checkpoint.provenance`) and keeps the base model's ``generation_config.json``, as
    ``caldera compress`` does."""
    from caldera.pipeline.checkpoint import base_generation_config, checkpoint_provenance
    from caldera.pipeline.compress import LINEARS, assemble_checkpoint, layer_paths
    from caldera.pipeline.layer_runner import decoder_layers
    from caldera.pipeline.partial import LazyLayers, local_folder

    # everything but the linear layers the per-layer files replace, in float32 as load_dense gave it (the
    # checkpoint's uncompressed tensors are unchanged); a compressed layer's dense weights are never read
    dirs = [layer_dir] if isinstance(layer_dir, (str, os.PathLike)) else list(layer_dir)
    lazy = LazyLayers.open(model_source(run, v.model), dtype=torch.float32)
    for li in range(len(decoder_layers(lazy.model))):
        done = any(layer_paths(d, li)[1].is_file() for d in dirs)
        lazy.load(li, skip=LINEARS if done else ())
    mdl = lazy.model
    # a local model's tokenizer files are copied as they are; a hub model's tokenizer is loaded and saved
    tok = local_folder(model_source(run, v.model)) or load_tokenizer(run, v.model)
    source = model_source(run, v.model)
    extra = {"provenance": checkpoint_provenance(v.model, source, hessian_dir)} if hessian_dir is not None else None
    _, summary = assemble_checkpoint(mdl, layer_dir, out_dir, v.method, v.config, tokenizer=tok,
                                     allow_partial=run.layers is not None, extra=extra,
                                     generation_config=base_generation_config(source))
    return summary


def step_replicate(run: RunContext, settings: EvalSettings, v: Variant, hessian_dir: str, layer_dir: str,
                   out_dir: str, summary_out: str, ppl_outs: dict[str, str], zeroshot_out: str,
                   replicate_zeroshot: bool = False, *, allocation: str | None = None, reference: str | None = None,
                   replicate_corpora: list[str] | None = None,
                   zeroshot_limit: dict[str, int | None] | None = None) -> dict[str, Any]:
    """One seed realization of a variant of one chunk, in one job: its compression and checkpoint
    (:func:`step_compress_variant`, summary written to ``summary_out``), then the evaluation of that checkpoint
    as stored (:func:`step_evaluate`, read back from ``out_dir``). The two steps' results are those of the two
    separate jobs; one process saves the second job's start-up (interpreter, imports, the model classes)."""
    summary = step_compress_variant(run, v, hessian_dir, layer_dir, out_dir, allocation)
    write_json(summary_out, summary)
    ev = step_evaluate(settings, run, v, out_dir, ppl_outs, zeroshot_out, replicate_zeroshot, reference=reference,
                       replicate_corpora=replicate_corpora, zeroshot_limit=zeroshot_limit)
    return {"summary": summary, **ev}
