"""Every job of a workflow config and the work it does: :func:`plan_jobs` lists the jobs the workflow runs
(rule, benchmark name, model), and the work functions read from the config what a job computes (perplexity and
zero-shot tokens, layers and the engine's law at the config's rank and iterations, training tokens). The job
profile (:mod:`caldera.experiments.planning.job_profile`) gives the rates that price that work
(:mod:`caldera.experiments.planning.job_costs`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from caldera.experiments.planning.regime_rows import regime_tables
from caldera.experiments.planning.rules import STAGES, Rule
from caldera.pipeline.linears import SHORT_NAMES


@dataclass(frozen=True)
class PlannedJob:
    """One job of the workflow: its rule, its benchmark file's name (``name``), its model and what it prices."""

    rule: str
    name: str
    model: str | None = None
    variant: Any = None  # caldera.experiments.planning.variants.Variant
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def stage(self) -> str:
        return STAGES.get(self.rule, self.rule)


def model_layers(config: dict[str, Any], model: str) -> list[int]:
    return list(range(int(config["models"][model]["num_layers"]))) if config.get("layers") is None \
        else list(config["layers"])


def hessian_layers_run(config: dict[str, Any], model: str) -> int:
    """The decoder layers a Hessian job of ``model`` runs: every layer up to the last one it collects (the
    hidden states pass through the ones before it)."""
    return max(model_layers(config, model)) + 1


def compressed_fraction(config: dict[str, Any], model: str) -> float:
    """The share of ``model``'s decoder layers a compressed variant replaces (the rest stay dense)."""
    return len(model_layers(config, model)) / int(config["models"][model]["num_layers"])


def _chunks(config: dict[str, Any], model: str) -> list[list[int]]:
    layers, k = model_layers(config, model), int(config.get("layers_per_job", 1))
    return [layers[i:i + k] for i in range(0, len(layers), k)]


def plan_jobs(config: dict[str, Any]) -> list[PlannedJob]:
    """Every job the workflow runs for ``config``, as its rules name them (``workflow/rules``)."""
    from caldera.experiments.planning.loraft_rows import TASKS as LORA_TASKS
    from caldera.experiments.planning.loraft_rows import lora_rows
    from caldera.experiments.planning.plan import (
        all_variants,
        has_model_plan,
        pending_tables,
        replicate_variants,
        rhtft_variants,
    )
    from caldera.experiments.planning.throughput_rows import TABLE as THROUGHPUT_TABLE
    from caldera.experiments.planning.throughput_rows import throughput_models

    variants = all_variants(config)
    reps = replicate_variants(config, variants)
    variants.update({r.id: r for rs in reps.values() for r in rs[1:]})
    ft = rhtft_variants(config)
    jobs = [PlannedJob(Rule.ASSETS, "assets")]
    jobs += [PlannedJob(Rule.HESSIANS, m, m) for m in config["models"]]
    if (config.get("eval") or {}).get("distribution"):
        jobs += [PlannedJob(Rule.DENSE_REFERENCE, m, m) for m in config["models"]]
    for v in sorted(variants.values(), key=lambda v: v.id):
        if v.method == "dense":
            jobs.append(PlannedJob(Rule.EVALUATE, v.id, v.model, v))
            continue
        chunks = _chunks(config, v.model)
        if has_model_plan(v):
            jobs += [PlannedJob(Rule.PROFILE_LAYERS, f"{v.id}_{c:03d}", v.model, v, {"layers": len(ch)})
                     for c, ch in enumerate(chunks)]
            jobs.append(PlannedJob(Rule.ALLOCATE, v.id, v.model, v))
        if len(chunks) == 1 and v.replicate_of is not None:
            jobs.append(PlannedJob(Rule.REPLICATE, v.id, v.model, v, {"layers": len(chunks[0])}))
            continue
        if len(chunks) == 1:
            jobs.append(PlannedJob(Rule.COMPRESS_VARIANT, v.id, v.model, v, {"layers": len(chunks[0])}))
        else:
            jobs += [PlannedJob(Rule.COMPRESS_LAYERS, f"{v.id}_{c:03d}", v.model, v, {"layers": len(ch)})
                     for c, ch in enumerate(chunks)]
            jobs.append(PlannedJob(Rule.ASSEMBLE_CHECKPOINT, v.id, v.model, v))
        jobs.append(PlannedJob(Rule.EVALUATE, v.id, v.model, v))
    for fv, base in (ft[k] for k in sorted(ft)):
        jobs.append(PlannedJob(Rule.RHT_FINETUNE, base.id, base.model, base))
        jobs.append(PlannedJob(Rule.EVALUATE, fv.id, fv.model, fv))
    rows = lora_rows(config)
    for row in rows:
        for task in LORA_TASKS:
            jobs.append(PlannedJob(Rule.LORA_FINETUNE, f"{row.id}_{task}", row.variant.model, row.variant,
                                   {"task": task}))
    if rows:
        jobs.append(PlannedJob(Rule.LORA_TABLE, "table5"))
    if config.get("selection"):
        jobs.append(PlannedJob(Rule.SELECTION, "selection"))
    tp = throughput_models(config, variants)
    jobs += [PlannedJob(Rule.THROUGHPUT, m, m, None, {"variants": list(vs.values())}) for m, vs in tp.items()]
    if tp:
        jobs.append(PlannedJob(Rule.THROUGHPUT_TABLE, THROUGHPUT_TABLE))
    if config.get("figures"):
        from caldera.experiments.planning.figure_plan import figure3_jobs
        from caldera.experiments.planning.settings import FiguresSettings

        fm = config["figures"]["model"]
        jobs.append(PlannedJob(Rule.WEIGHT_SPECTRA, "figure1", fm))
        jobs += [PlannedJob(Rule.ABLATION_TRACES, f"figure3_{t}", fm)
                 for t in figure3_jobs(FiguresSettings.from_block(config["figures"]))]
        jobs += [PlannedJob(Rule.FIGURE3_DATA, "figure3", fm), PlannedJob(Rule.LPLR_TRACES, "figure4", fm)]
        jobs += [PlannedJob(Rule.PLOT_FIGURE, f"figure{n}") for n in (1, 3, 4)]
    if any(has_model_plan(v) and v.replicate_of is None for v in variants.values()):
        jobs.append(PlannedJob(Rule.PLOT_FIGURE, "figure_ranks"))  # rule plot_ranks writes its benchmark there
    pending = pending_tables(config)
    jobs += [PlannedJob(Rule.MAKE_TABLE, t) for t in [*config.get("tables", []), *regime_tables(config)]
             if t not in pending]
    jobs += [PlannedJob(Rule.PENDING_TABLE, t) for t in pending]
    jobs += [PlannedJob(Rule.THEORY_REPORT, "theory"), PlannedJob(Rule.CLAIMS, "claims"),
             PlannedJob(Rule.VERDICT_PAGE, "verdicts"), PlannedJob(Rule.PARETO, "figure_pareto")]
    return jobs


# ------------------------------------------------------------------------------------------ work of a job


def corpus_tokens(config: dict[str, Any], corpus: str) -> int:
    spec = config["eval"]["ppl"][corpus]
    return int(spec["n_windows"]) * int(spec["seq_len"])


def zeroshot_work(config: dict[str, Any], limit: dict[str, int | None] | None = None) -> int:
    """Zero-shot request tokens of one evaluation (:func:`caldera.experiments.planning.workload.zeroshot_tokens` over
    the tasks at ``eval.zeroshot.limit``, or at ``limit`` per task where given): the unit zero-shot time is priced
    in (tasks differ in choices and length)."""
    from caldera.experiments.planning.workload import zeroshot_tokens

    zs = config["eval"].get("zeroshot") or {}
    if limit is not None:
        return sum(zeroshot_tokens(t, n) for t, n in limit.items())
    return sum(zeroshot_tokens(t, zs.get("limit")) for t in zs.get("tasks") or [])


def eval_parts(config: dict[str, Any], v: Any) -> dict[str, Any]:
    """What one evaluation of ``v`` runs: ``{corpus: tokens}`` of its perplexity corpora (a seed replicate: those
    of ``replicates.corpora``), the corpus scored against the dense model (``kl``, compressed variants only) and
    its zero-shot work (0 for a replicate unless ``replicates.zeroshot`` or ``regime.run.zeroshot.replicates``; a
    regime row at its own documents per task)."""
    from caldera.experiments.planning.regime_rows import regime_zeroshot_limit

    rep = config.get("replicates") or {}
    corpora = list(config["eval"]["ppl"])
    if v.replicate_of is not None and rep.get("corpora"):
        corpora = [c for c in corpora if c in rep["corpora"]]
    limit = regime_zeroshot_limit(config, v)  # a regime row's own documents (and its replicates' when set)
    scored = v.replicate_of is None or rep.get("zeroshot", False) or limit is not None
    zs = zeroshot_work(config, limit) if scored else 0
    dist = (config.get("eval") or {}).get("distribution")
    return {"corpora": {c: corpus_tokens(config, c) for c in corpora},
            "kl": dist if v.method != "dense" and dist in corpora else None, "zeroshot": zs}


def law_layer_seconds(costs: dict[str, Any], config: dict[str, Any], v: Any) -> float:
    """The component laws' seconds for one decoder layer of variant ``v`` (its four Hessian contexts and seven
    matrices at the config's rank and iterations): the relative cost of one layer, which the profile scales to
    the machine."""
    from caldera.experiments.planning.cost import method_matrix_seconds, predict
    from caldera.experiments.planning.workload import shapes_of

    shapes = shapes_of(config["models"][v.model]["shapes"])[0]
    groups = (shapes[0][1], shapes[3][1], shapes[4][1], shapes[6][1])
    return sum(predict(costs, "prepare", 0, d, 0) for d in groups) + sum(
        method_matrix_seconds(costs, v.method, v.config, n, d) for n, d in shapes)


def seq_tokens(config: dict[str, Any]) -> int:
    cal = config["calibration"]
    return int(cal["n_samples"]) * int(cal["seq_len"])


def throughput_work(config: dict[str, Any]) -> dict[str, int]:
    """What a throughput job runs for each of its variants (``config["throughput"]``): per protocol, the forwards
    of its timed rounds and of its warm-up calls, ``{"decode_tokens", "calls", "rounds", "warmup"}`` (decode:
    ``new_tokens`` per call; single-token: ``calls`` per call). The job runs this once per variant it times."""
    from caldera.experiments.planning.throughput_rows import throughput_settings

    s = throughput_settings(config)
    n = s.rounds + s.warmup
    return {"decode_tokens": n * s.new_tokens, "calls": n * s.calls, "rounds": s.rounds, "warmup": s.warmup}


def rhtft_work(config: dict[str, Any]) -> dict[str, float]:
    """Token counts of one RHT fine-tuning: the held-out evaluation before training and after each epoch, and a
    training step's tokens, counted 3× (forward and backward)."""
    r = config["rht_ft"]
    held = int(r["held_out"]) * int(r["seq_len"])
    train = (int(r["n_samples"]) - int(r["held_out"])) * int(r["seq_len"])
    return {"tokens": held + int(r["epochs"]) * (3 * train + held)}


def lora_work(config: dict[str, Any], task: str) -> dict[str, float]:
    """A LoRA job's work in tokens. ``train``: what its training loop runs, the training blocks (epochs ×
    sequences × block, 3× for the backward pass) and the held-out set, scored at each of the loop's checkpoints
    (:func:`caldera.finetune.lora.checkpoint_steps`).
    ``final``: one evaluation of a trained model on the task's evaluation data (the language-modelling task: the
    Wiki2 windows of ``eval.ppl``; a classification task: its documents at ``eval.zeroshot.limit``, one block
    each). The job evaluates the final model, and the best-on-held-out one too when that is an earlier
    checkpoint."""
    from caldera.experiments.planning.loraft_rows import LM_TASK
    from caldera.experiments.planning.workload import ZEROSHOT_DOCS
    from caldera.finetune.lora import checkpoint_steps

    t = config["lora_ft"]["tasks"][task]
    block, epochs, n_train = int(t["block_size"]), int(t["epochs"]), int(t["n_train"])
    per_epoch = math.ceil(math.ceil(n_train / int(t["batch_size"])) / int(t["grad_acc"]))
    scored = len(checkpoint_steps(epochs * per_epoch, int(config["lora_ft"]["n_checkpoints"]), per_epoch))
    if task == LM_TASK:
        final = corpus_tokens(config, LM_TASK)
    else:
        limit = (config["eval"].get("zeroshot") or {}).get("limit")
        docs = ZEROSHOT_DOCS.get(f"caldera_{task}", (0, 0, 0))[0]
        final = (min(docs, int(limit)) if limit else docs) * block
    return {"train": (3 * epochs * n_train + scored * int(t["n_heldout"])) * block, "final": final}


def selection_units(config: dict[str, Any], costs: dict[str, Any]) -> float:
    """The component laws' seconds of the selection sweep: per model, its layers × matrices × (QuIP# once, each
    candidate at each factor precision and rank), at ``selection.iters``; the unit the profile scales."""
    from caldera.algorithm.config import CalderaConfig
    from caldera.experiments.planning.cost import decompose_seconds, method_matrix_seconds, predict
    from caldera.experiments.planning.settings import SelectionSettings
    from caldera.experiments.planning.workload import shapes_of

    sel = SelectionSettings.from_block(config["selection"])
    names = SHORT_NAMES
    bits = sel.bits if isinstance(sel.bits, list) else [sel.bits]
    n_ranks = 2 if sel.ranks == "extremes" else 4
    total = 0.0
    for model, layers in sel.layers.items():
        shapes = dict(zip(names, shapes_of(config["models"][model]["shapes"])[0]))
        mats = sel.matrices or list(names)
        for m in mats:
            n, d = shapes[m]
            cfg = CalderaConfig.preset("paper", rank=8, outer_iters=sel.iters[0], inner_iters=sel.iters[1])
            per = predict(costs, "prepare", 0, d, 0) + method_matrix_seconds(costs, "quip#", None, n, d)
            per += len(sel.candidates) * len(bits) * n_ranks * decompose_seconds(costs, n, d, cfg)
            total += len(layers) * per
    return total


def ablations_law(config: dict[str, Any], costs: dict[str, Any]) -> float:
    """The component laws' seconds of Figure 3's comparisons (rule ablation_traces' work), which the selection
    job re-runs under its chosen configuration; 0 without figures."""
    if not config.get("figures"):
        return 0.0
    from caldera.experiments.planning.cost import figure_rules

    fm = config["figures"]["model"]
    return figure_rules(config, costs, config["models"][fm]["shapes"])[Rule.ABLATION_TRACES]["total_s"]
