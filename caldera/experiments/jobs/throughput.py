"""The jobs of Table 6 (paper §5.4): batch-1 generation throughput of one dense or compressed model of this run.

One workflow job per variant (:func:`step_throughput`; the rows: :mod:`caldera.experiments.planning.throughput_rows`,
the table and its claims: :mod:`caldera.experiments.report.table6`): the model is loaded as stored (compressed
layers run as :class:`~caldera.nn.compressed_linear.CompressedLinear` with the kernel path of
``throughput.kernel``, never materialised), torch threads pinned to the job's ``torch_threads`` resource (1 unless a
profile sets ``set-resources: {throughput: {torch_threads: N}}``; the job itself reserves every core of the run
unless a profile sets ``set-threads: {throughput: N}``: workflow/rules/throughput.smk), then both protocols of
:mod:`caldera.eval.throughput` with ``throughput.runs`` timed repeats each:

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


def measure(model, tokenizer, settings: ThroughputSettings) -> dict[str, Any]:
    """Both protocols on a loaded model (``settings.runs`` timed repeats each, ``warmup``, ``new_tokens``,
    ``calls``, ``prompt``); per-repeat tokens/s in ``{protocol: {"tokens_per_s": [..], "median", "min", "max",
    ...}}``."""
    import torch

    from caldera.eval.throughput import decode_throughput, single_token_throughput

    s = settings
    ids = tokenizer(s.prompt, return_tensors="pt").input_ids
    dec = decode_throughput(model, ids, new_tokens=s.new_tokens, runs=s.runs, warmup=s.warmup)
    one = single_token_throughput(model, int(ids[0, -1]), calls=s.calls, runs=s.runs, warmup=s.warmup)
    out = {}
    for proto, r, per in (("decode", dec, dec["new_tokens"]), ("single_token", one, one["calls"])):
        tps = [per / t for t in r["times_s"]]
        out[proto] = {**{k: v for k, v in r.items() if k != "tokens_per_s"}, "tokens_per_s": tps,
                      "median": statistics.median(tps), "min": min(tps), "max": max(tps)}
    out["torch_threads"] = torch.get_num_threads()
    return out


def step_throughput(settings: ThroughputSettings, run: RunContext, v: Variant, checkpoint: str | None, out: str,
                    torch_threads: int = 1) -> dict[str, Any]:
    """Rule ``throughput``: load variant ``v`` (dense, or the compressed checkpoint as stored; ``run``: the
    device and the model's entry), pin torch to ``torch_threads`` threads (the job's ``torch_threads``
    resource), measure both protocols with ``settings`` (:func:`measure`) and write them with the memory
    figures to ``out``."""
    import torch

    from caldera.atomic import write_json
    from caldera.experiments.jobs.models import load_dense, load_tokenizer, run_device

    s, config = settings, run.as_config()
    torch.set_num_threads(int(torch_threads))
    device = run_device(config)
    dtype = getattr(torch, s.dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    if v.method == "dense":
        model, tok = load_dense(config, v.model, device)
        backend = "dense"
    else:
        from caldera.pipeline.checkpoint import load_compressed

        model, tok = load_compressed(checkpoint, kernel=s.kernel)
        model.to(device)
        backend = s.kernel
    if tok is None:  # a checkpoint saved without its tokenizer: the model entry's, as load_dense loads it
        tok = load_tokenizer(config, v.model)
    _cast_dense_parts(model, dtype)
    load_s = time.perf_counter() - t0
    res = measure(model, tok, s)
    res.update({
        "variant": v.id, "model": v.model, "method": v.method, "rank": v.rank, "b_lr": v.b_lr,
        "device": str(device), "dtype": s.dtype, "kernel": backend, "settings": s.measurement_block(), "load_s": load_s,
        "model_tensor_mb": tensor_bytes(model) / 2**20, "peak_rss_mb": _peak_rss_mb(),
        "peak_cuda_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        "wall_s": time.perf_counter() - t0,
    })
    if v.method != "dense":
        from caldera.nn.compressed_linear import CompressedLinear

        with torch.no_grad():  # the path each compressed layer took for a batch-1 input (None: reference)
            res["kernel_backends"] = sorted({str(m.kernel_backend(torch.zeros(1, m.in_features))) for m in
                                             model.modules() if isinstance(m, CompressedLinear)})
    write_json(out, res)
    return res
