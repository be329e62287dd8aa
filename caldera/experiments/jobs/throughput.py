"""The jobs of Table 6 (paper §5.4): batch-1 generation throughput of the dense and compressed models of this run.

One workflow job per stand-in model (:func:`step_throughput`; its variants:
:func:`caldera.experiments.planning.throughput_rows.throughput_models`, the table and its claims:
:mod:`caldera.experiments.report.table6`) loads every Table 6 variant of that model, the dense one included:
each compressed model as stored (compressed layers run as :class:`~caldera.nn.compressed_linear.CompressedLinear`
with the kernel path of ``throughput.kernel``, never materialised). Torch threads are pinned to the job's
``torch_threads`` resource (1 unless a profile sets ``set-resources: {throughput: {torch_threads: N}}``; the job
itself reserves every core of the run unless a profile sets ``set-threads: {throughput: N}``:
workflow/rules/throughput.smk). Then ``throughput.rounds`` randomized interleaved rounds
(:func:`caldera.eval.throughput.interleaved_throughput`, orders from ``throughput.seed``), each timing every
variant once per protocol:

* ``single_token``: the authors' protocol (``model(token)``, batch 1, sequence length 1, no KV cache) — what the
  paper's Table 6 reports ("batch size and sequence length of 1");
* ``decode``: ``generate`` with the KV cache, ``new_tokens`` greedy tokens from a short prompt (what a user sees).
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from typing import Any

from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import RunContext, ThroughputSettings

# ---------------------------------------------------------------------------------------------- measurement


def _cast_dense_parts(model, dtype) -> None:
    """Cast every floating parameter/buffer outside the compressed layers to ``dtype`` (their codes, scales and
    factors keep their stored types; a CompressedLinear computes in float32 and returns the input's dtype)."""
    from caldera.nn.compressed_linear import CompressedLinear

    def walk(mod):
        if isinstance(mod, CompressedLinear):
            return
        for p in list(mod.parameters(recurse=False)):
            if p.is_floating_point():
                p.data = p.data.to(dtype)
        for name, b in list(mod.named_buffers(recurse=False)):
            if b is not None and b.is_floating_point() and "inv_freq" not in name:
                setattr(mod, name, b.to(dtype))
        for child in mod.children():
            walk(child)

    walk(model)


def tensor_bytes(model) -> int:
    """Bytes of every parameter and buffer of ``model`` (with the CompressedLinear caches built so far)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + [b for b in model.buffers() if b is not None]:
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def _peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024  # bytes on macOS, KiB on Linux


def measure(models: dict[str, Any], tokenizer, settings: ThroughputSettings) -> dict[str, Any]:
    """Both protocols on loaded models (``{variant id: model}``), in ``settings.rounds`` interleaved rounds
    (``seed``, ``warmup``, ``new_tokens``, ``calls``, ``prompt``): ``{"orders": per round, "variants": {id:
    {protocol: {"times_s": one per round, "tokens_per_s": one per round, "median", "min", "max", ...}}}}``."""
    import torch

    from caldera.eval.throughput import interleaved_throughput

    s = settings
    ids = tokenizer(s.prompt, return_tensors="pt").input_ids
    r = interleaved_throughput(models, ids, rounds=s.rounds, seed=s.seed, new_tokens=s.new_tokens, calls=s.calls,
                               warmup=s.warmup)
    out: dict[str, Any] = {"orders": r["orders"], "variants": {}}
    for name, per_proto in r["models"].items():
        out["variants"][name] = {}
        for proto, m in per_proto.items():
            per = m["calls"] if proto == "single_token" else m["new_tokens"]
            tps = [per / t for t in m["times_s"]]
            out["variants"][name][proto] = {**m, "tokens_per_s": tps, "median": statistics.median(tps),
                                            "min": min(tps), "max": max(tps)}
    out["torch_threads"] = torch.get_num_threads()
    return out


def _load(v: Variant, checkpoint: str | None, run: RunContext, device, s: ThroughputSettings):
    """Variant ``v`` loaded for timing (dense, or the compressed checkpoint as stored) with its tokenizer and its
    backend name."""
    from caldera.experiments.jobs.models import load_dense, load_tokenizer

    if v.method == "dense":
        model, tok = load_dense(run, v.model, device)
        backend = "dense"
    else:
        from caldera.pipeline.checkpoint import load_compressed

        if checkpoint is None:
            raise ValueError(f"throughput: variant {v.id} is compressed but no checkpoint was given for it")
        model, tok = load_compressed(checkpoint, kernel=s.kernel)
        model.to(device)
        backend = s.kernel
    if tok is None:  # a checkpoint saved without its tokenizer: the model entry's, as load_dense loads it
        tok = load_tokenizer(run, v.model)
    return model, tok, backend


def step_throughput(settings: ThroughputSettings, run: RunContext, variants: list[Variant],
                    checkpoints: dict[str, str], out: str, torch_threads: int = 1) -> dict[str, Any]:
    """Rule ``throughput``: load every variant of ``variants`` (one model's; ``checkpoints``: the compressed
    ones' checkpoint folders by variant id; ``run``: the device and the model's entry), pin torch to
    ``torch_threads`` threads (the job's ``torch_threads`` resource), time them together in interleaved rounds
    (:func:`measure`) and write the per-round times with each variant's load time and tensor size to ``out``. A
    variant whose loading runs out of memory is recorded so (``"oom"``) and the others are timed without it."""
    import torch

    from caldera.atomic import write_json
    from caldera.experiments.jobs.models import run_device

    if not variants:
        raise ValueError("throughput: no variant to time")
    models_of = sorted({v.model for v in variants})
    if len(models_of) != 1:
        raise ValueError(f"throughput: one job times the variants of one model, got models {models_of}")
    s = settings
    torch.set_num_threads(int(torch_threads))
    device = run_device(run)
    dtype = getattr(torch, s.dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t_start = time.perf_counter()
    models, info, tok = {}, {}, None
    for v in variants:
        t0 = time.perf_counter()
        try:
            model, vtok, backend = _load(v, checkpoints.get(v.id), run, device, s)
        except torch.OutOfMemoryError as e:  # as the paper's 70B dense row: recorded, the others still timed
            import gc

            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            info[v.id] = {"variant": v.id, "model": v.model, "method": v.method, "rank": v.rank, "b_lr": v.b_lr,
                          "oom": f"out of memory loading it beside {len(models)} loaded variant(s): {e}"[:500]}
            continue
        _cast_dense_parts(model, dtype)
        models[v.id] = model
        tok = tok or vtok
        info[v.id] = {"variant": v.id, "model": v.model, "method": v.method, "rank": v.rank, "b_lr": v.b_lr,
                      "kernel": backend, "load_s": time.perf_counter() - t0}
    if not models:
        raise RuntimeError(f"throughput: no variant of {models_of[0]} could be loaded (out of memory: {sorted(info)})")
    t0 = time.perf_counter()
    res = measure(models, tok, s)
    rounds_s = time.perf_counter() - t0
    for vid, model in models.items():
        info[vid]["model_tensor_mb"] = tensor_bytes(model) / 2**20
        info[vid].update(res["variants"][vid])
        if info[vid]["method"] != "dense":
            from caldera.nn.compressed_linear import CompressedLinear

            with torch.no_grad():  # the path each compressed layer took for a batch-1 input (None: reference)
                info[vid]["kernel_backends"] = sorted({str(m.kernel_backend(torch.zeros(1, m.in_features))) for m
                                                       in model.modules() if isinstance(m, CompressedLinear)})
    out_res = {
        "model": models_of[0], "variants": info, "orders": res["orders"], "torch_threads": res["torch_threads"],
        "device": str(device), "dtype": s.dtype, "kernel": s.kernel, "settings": s.measurement_block(),
        "rounds_s": rounds_s, "peak_rss_mb": _peak_rss_mb(),
        "peak_cuda_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        "wall_s": time.perf_counter() - t_start,
    }
    write_json(out, out_res)
    return out_res
