"""The jobs of ``workflow/rules/evaluate.smk``: a variant's perplexity and zero-shot accuracy (``evaluate``) and the
dense model's reference distributions (``dense_reference``). Results are small JSON files, so that tables and
figures never recompute anything."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from caldera.atomic import write_json, write_result
from caldera.experiments.jobs.models import load_dense, load_tokenizer, model_dtype, model_source, run_device
from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import EvalSettings, RunContext


def load_variant(run: RunContext, v: Variant, checkpoint: str | None, reconstructed: bool = False):
    """The dense or compressed model of a variant, on :func:`run_device`, with its tokenizer (``run``: the run's
    ``device``, ``dtype`` and ``models``). With ``reconstructed``
    (``eval.weights: reconstructed``) the compressed layers are replaced by their dense Ŵ (:func:`materialize`).
    Dtypes: :func:`model_dtype` (float32 on the CPU; on an accelerator the model's own, see
    :func:`load_compressed_for`)."""
    device = run_device(run)
    dtype = model_dtype(run, device)
    if v.method == "dense":
        return load_dense(run, v.model, device, dtype)
    mdl, tok = load_compressed_for(checkpoint, device, reconstructed=reconstructed, dtype=dtype)
    if tok is None:
        _, tok = load_dense(run, v.model)
    return mdl, tok


def load_compressed_for(checkpoint: str, device: torch.device | str, *, reconstructed: bool = False,
                        dtype: torch.dtype | str = torch.float32, lean: bool | None = None, kernel: str = "auto"):
    """A compressed checkpoint loaded for evaluation on ``device``: ``(model, tokenizer or None)``.

    On the CPU (``lean`` false, its default there) as always: float32 dequantized caches, and with
    ``reconstructed`` float32 dense layers. Lean (the default on any other device) never holds a float32
    dense copy of the model: no dequantized cache (the forward decodes from the codes; verification leaves
    none either), the uncompressed parameters in ``dtype`` (``"auto"``: the base model's own), and with
    ``reconstructed`` each Ŵ made on ``device`` and cast to that dtype at once. ``kernel``: as
    :func:`~caldera.pipeline.checkpoint.load_compressed`'s."""
    from caldera.pipeline.checkpoint import cast_dense, load_compressed, materialize

    device = torch.device(device)
    lean = device.type != "cpu" if lean is None else lean
    if not lean:
        mdl, tok = load_compressed(checkpoint, kernel=kernel)
        if reconstructed:
            materialize(mdl)
        return mdl.to(device), tok
    mdl, tok = load_compressed(checkpoint, cache_dequantized=False, kernel=kernel)
    if dtype == "auto":
        own = getattr(mdl.config, "dtype", None) or getattr(mdl.config, "torch_dtype", None) or torch.float32
        dtype = getattr(torch, own) if isinstance(own, str) else own
    cast_dense(mdl, dtype)
    mdl.to(device)
    if reconstructed:
        materialize(mdl, dtype)
    return mdl, tok


def dense_weight_bytes(run: RunContext, model: str, dtype: torch.dtype | str) -> int:
    """Bytes of the dense model ``run.models[model]``'s parameters in ``dtype`` (``"auto"``: its config's
    dtype, float32 when it names none), counted on its ``meta`` architecture (nothing is read)."""
    from caldera.pipeline.partial import meta_model

    mdl = meta_model(model_source(run, model))
    if dtype == "auto":
        own = getattr(mdl.config, "dtype", None) or getattr(mdl.config, "torch_dtype", None) or torch.float32
        dtype = getattr(torch, own) if isinstance(own, str) else own
    n = sum(p.numel() for p in {id(p): p for p in mdl.parameters()}.values())  # a tied head counted once
    return n * torch.empty((), dtype=dtype).element_size()


def device_budget(device: torch.device | str) -> int:
    """Bytes the evaluation may fill on ``device``: the free memory of a CUDA device, or on the CPU the
    available RAM (psutil, else ``MemAvailable`` of ``/proc/meminfo``)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("cannot tell the available memory (no psutil, no /proc/meminfo); set eval.stream_layers: "
                       "always or never")


def streams(settings: EvalSettings, run: RunContext, v: Variant, budget_bytes: int | None = None) -> bool:
    """Whether :func:`step_evaluate` evaluates variant ``v`` layer-streamed: a dense variant whose weights
    (in the run's dtype) do not fit ``budget_bytes`` (default: :func:`device_budget` of the run's device) under
    ``settings.stream_layers`` (:func:`caldera.eval.streamed.should_stream`). Compressed variants are always
    loaded whole."""
    if v.method != "dense" or settings.stream_layers == "never":
        return False
    if settings.stream_layers == "always":
        return True
    device = run_device(run)
    budget = device_budget(device) if budget_bytes is None else budget_bytes
    from caldera.eval.streamed import should_stream

    return should_stream("auto", dense_weight_bytes(run, v.model, model_dtype(run, device)), budget)


def ppl_data(settings: EvalSettings, corpus: str, tok):
    """The token ids that corpus ``corpus`` of ``settings.ppl`` scores: a ``(1, N)`` stream cut to its windows or
    ``(n, seq_len)`` windows (:mod:`caldera.eval.perplexity`)."""
    from caldera.pipeline.text import perplexity_stream, random_windows

    spec = settings.ppl[corpus]
    if spec.protocol == "stream":
        data = perplexity_stream(tok, spec.source)
        return data[:, : spec.n_windows * spec.seq_len] if spec.n_windows else data
    return random_windows(tok, spec.source, spec.seq_len, spec.n_windows, seed=spec.seed)


def eval_ppl(settings: EvalSettings, v: Variant, mdl, tok, outs: dict[str, str], *, loader=None,
             offload: bool = False, reference: str | None = None) -> dict[str, dict]:
    """Perplexity of the loaded model of variant ``v`` on each corpus ``c`` of ``outs`` (keys of
    ``settings.ppl``), each written to ``outs[c]``. Returns ``{corpus: result}``. With a ``loader``
    (:class:`~caldera.pipeline.partial.LazyLayers` of ``mdl``) the perplexity is computed layer-streamed
    (:func:`caldera.eval.streamed.perplexity`, ``offload``: hidden states on the host): the same numbers.
    ``reference``: the dense model's :class:`~caldera.eval.distribution.DenseReference` on corpus
    ``settings.distribution`` (:func:`step_reference`), whose result then carries the paired distribution
    metrics."""
    from caldera.eval import streamed
    from caldera.eval.perplexity import perplexity

    results = {}
    for corpus, out in outs.items():
        spec = settings.ppl[corpus]
        t0 = time.perf_counter()
        data = ppl_data(settings, corpus, tok)
        if reference is not None and corpus == settings.distribution:
            if loader is not None:
                raise ValueError("eval.distribution: a layer-streamed model is the dense one, which has no paired "
                                 "metrics against itself")
            res = perplexity(mdl, data, spec.seq_len, reference=reference)
        elif loader is None:
            res = perplexity(mdl, data, spec.seq_len)
        else:
            res = streamed.perplexity(mdl, data, spec.seq_len, loader=loader, offload=offload)
        res.update({"variant": v.id, "corpus": corpus, "source": spec.source})
        write_result(out, res, {"wall_s": time.perf_counter() - t0})
        results[corpus] = res
    return results


def eval_zeroshot(settings: EvalSettings, v: Variant, mdl, tok, out: str, *, loader=None,
                  offload: bool = False, limit: dict[str, int | None] | None = None) -> dict:
    """lm-eval zero-shot accuracies of the loaded model of variant ``v`` (``settings.zeroshot``; ``limit``: the
    documents per task in place of its ``limit``, as
    :func:`caldera.experiments.planning.regime_rows.regime_zeroshot_limit` gives them), written to ``out``. With a
    ``loader`` (as :func:`eval_ppl`) every request runs layer-streamed: the same scores."""
    from caldera.eval.zeroshot import zeroshot

    zs = settings.zeroshot
    t0 = time.perf_counter()
    stream = {}
    if loader is not None:
        from caldera.eval.streamed import streamed_lm_class

        stream = {"lm_class": streamed_lm_class(), "lm_kwargs": {"loader": loader, "offload": offload}}
    limit = zs.limit if limit is None else limit
    res = zeroshot(mdl, tok, tasks=zs.tasks, limit=limit, batch_size=zs.batch_size, **stream)
    res = {"variant": v.id, "limit": limit, "results": res}
    write_result(out, res, {"wall_s": time.perf_counter() - t0})
    return res


def step_reference(settings: EvalSettings, run: RunContext, model: str, out: str) -> str:
    """The dense ``model``'s next-token distributions on corpus ``settings.distribution`` (its windows as
    :func:`eval_ppl` scores them), kept in folder ``out`` for the compressed variants' paired metrics
    (:func:`caldera.eval.distribution.write_reference`)."""
    from caldera.eval.distribution import write_reference
    from caldera.eval.perplexity import make_windows

    if settings.distribution is None:
        raise ValueError("eval.distribution is not set: no corpus to keep the dense distributions of")
    mdl, tok = load_dense(run, model, run_device(run), model_dtype(run, run_device(run)))
    spec = settings.ppl[settings.distribution]
    return str(write_reference(mdl, make_windows(ppl_data(settings, settings.distribution, tok), spec.seq_len),
                               out))


def step_evaluate(settings: EvalSettings, run: RunContext, v: Variant, checkpoint: str | None,
                  ppl_outs: dict[str, str], zeroshot_out: str, replicate_zeroshot: bool = False, *,
                  budget_bytes: int | None = None, reference: str | None = None,
                  replicate_corpora: list[str] | None = None,
                  zeroshot_limit: dict[str, int | None] | None = None) -> dict[str, Any]:
    """Every evaluation of one variant in one job (the model is loaded once; ``run``: its model's entry, the
    device and dtype) with ``settings``: perplexity on each corpus of ``ppl_outs`` (:func:`eval_ppl`), then
    zero-shot (:func:`eval_zeroshot`). A seed replicate (``v.replicate_of``) is scored on perplexity only unless
    ``replicate_zeroshot`` (config ``replicates.zeroshot``) is true: its zero-shot file then records that it was
    skipped (no results), so the tables use the seeds that have them. Likewise a replicate is scored only on the
    perplexity corpora of ``replicate_corpora`` (config ``replicates.corpora``; None: all): the file of any other
    corpus records that it was skipped. ``zeroshot_limit``: the zero-shot documents per task in place of
    ``settings.zeroshot.limit`` (a regime row's:
    :func:`~caldera.experiments.planning.regime_rows.regime_zeroshot_limit`).

    A dense variant too large for the device (``settings.stream_layers``, :func:`streams`; ``budget_bytes``:
    the memory it may fill, default the device's free memory) is evaluated layer-streamed: its decoder layers
    are read from the checkpoint one at a time (:class:`~caldera.pipeline.partial.LazyLayers`) for each pass,
    the hidden states held on the host off the CPU; the results are the same. ``reference``: the dense
    model's reference folder (:func:`step_reference`) for a compressed variant's paired metrics."""
    stream: dict[str, Any] = {}
    if streams(settings, run, v, budget_bytes):
        from caldera.pipeline.partial import LazyLayers

        device = run_device(run)
        dtype = model_dtype(run, device)
        torch.manual_seed(0)  # as load_dense seeds it (reading consumes none)
        lazy = LazyLayers.open(model_source(run, v.model), device=device,
                               dtype=None if dtype == "auto" else dtype)
        mdl, tok = lazy.model, load_tokenizer(run, v.model)
        stream = {"loader": lazy, "offload": device.type != "cpu"}
    else:
        mdl, tok = load_variant(run, v, checkpoint, reconstructed=settings.weights == "reconstructed")
    skip = [c for c in ppl_outs if v.replicate_of is not None and replicate_corpora is not None
            and c not in replicate_corpora]
    for c in skip:
        write_json(ppl_outs[c], {"variant": v.id, "corpus": c, "skipped": "seed replicate scored on the corpora of "
                                 f"replicates.corpora ({', '.join(replicate_corpora or [])}) only"})
    ppl = eval_ppl(settings, v, mdl, tok, {c: o for c, o in ppl_outs.items() if c not in skip}, reference=reference,
                   **stream)
    if v.replicate_of is not None and not replicate_zeroshot:
        res = {"variant": v.id, "skipped": "seed replicate scored on perplexity only (replicates.zeroshot: false)",
               "results": {"tasks": {}}}
        write_json(zeroshot_out, res)
        return {"ppl": ppl, "zeroshot": res}
    return {"ppl": ppl, "zeroshot": eval_zeroshot(settings, v, mdl, tok, zeroshot_out, limit=zeroshot_limit,
                                                  **stream)}
