"""Every job of a workflow config and its predicted wall time on one machine, per rule and stage.

``caldera cost`` prices the engine from component laws (:mod:`caldera.experiments.planning.cost`); a small run's jobs
spend
most of their time elsewhere: the interpreter and imports, loading the model and the Hessians, per-layer setup and
writes, perplexity windows, zero-shot documents, fine-tuning steps. This module models each job as

    fixed part (start-up, model load) + Σ rate × work,

with the work read from the config (windows × tokens per corpus, zero-shot requests, layers, the engine's law for
a matrix at the config's rank and iterations, training tokens) and the fixed parts and rates measured on the
machine from one finished run (:func:`calibrate`: its Snakemake benchmark files and the timing files its jobs
write beside their results). :func:`plan_jobs` lists the jobs the workflow runs for a config (rule, job name,
model), :func:`predict` prices each one, and :func:`check` compares the prediction with a run's timings, per job,
rule and stage, and says where the model is off.

The profile is specific to a machine type (``benchmarks/results/jobs-cpu-<type>.json``, :func:`machine_type`); on
a type with no profile of its own another type's is used, and the reports say so. A config whose models are not in
it, or a device it was not measured on, is priced by the component laws alone.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caldera.experiments.planning.rules import STAGES, Rule
from caldera.pipeline.linears import SHORT_NAMES

FORMAT = "caldera-job-costs/1"

#: rules priced by a constant per job (the calibration run's median): they read small files and write a report
CONSTANT_RULES = (Rule.ASSETS, Rule.ALLOCATE, Rule.WEIGHT_SPECTRA, Rule.FIGURE3_DATA, Rule.PLOT_FIGURE,
                  Rule.PLOT_RANKS, Rule.MAKE_TABLE, Rule.PENDING_TABLE, Rule.THEORY_REPORT, Rule.CLAIMS,
                  Rule.THROUGHPUT, Rule.THROUGHPUT_TABLE, Rule.LORA_TABLE, Rule.TIMINGS, Rule.ASSEMBLE_CHECKPOINT)
#: what a job that the calibration run did not have costs: the median of its small report jobs
SMALL_JOB = Rule.MAKE_TABLE


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


def machine_type(cpuinfo: str | None = None) -> str:
    """This machine's type as job profiles name it: the CPU's vendor and family from ``/proc/cpuinfo``'s model name
    and the widest vector unit its flags announce (``amx``, ``avx512``, ``avx2`` or ``base``), e.g.
    ``intel-xeon-amx`` or ``amd-epyc-avx2``. The native kernels and oneDNN pick their code by that unit, so two
    machines of one type run a job at about the same speed; across types a stage differs by up to ×2.
    ``cpuinfo``: the file's text (read from the machine when None); without it, the OS and architecture."""
    import platform

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.M)
    if not model:
        return f"{platform.system()}-{platform.machine()}".lower() or "unknown"
    name = re.sub(r"\((?:r|tm)\)|\bprocessor\b|\bcpu\b|@.*$", " ", model.group(1), flags=re.I)
    family = "-".join(re.findall(r"[a-z0-9]+", name.lower())[:2]) or "cpu"
    have = set(flags.group(1).split()) if flags else set()
    unit = next((u for u, f in (("amx", "amx_tile"), ("avx512", "avx512f"), ("avx2", "avx2")) if f in have), "base")
    return f"{family}-{unit}"


def profile_file(device: str, machine: str | None = None) -> Path:
    """Where the job profile of ``device`` on a machine of type ``machine`` (:func:`machine_type`, this one's by
    default) lives, beside the component costs: ``jobs-cpu-<machine>.json``, ``jobs-<device>.json`` for a GPU."""
    from caldera.experiments.planning.cost import COSTS_DIR

    if device != "cpu":
        return COSTS_DIR / f"jobs-{device}.json"
    return COSTS_DIR / f"jobs-cpu-{machine or machine_type()}.json"


def load_profile(device: str, path: str | Path | None = None) -> dict[str, Any] | None:
    """The job profile (:func:`calibrate`) of ``device`` on this machine type, else one measured on another type
    (its ``machine`` then differs from :func:`machine_type`, and the reports say so), or None when none was
    measured; ``ValueError`` for a file of another format."""
    from caldera.experiments.planning.cost import COSTS_DIR

    if path:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"{p}: no such job profile")
    else:
        p = profile_file(device)
        if not p.is_file():
            others = sorted(COSTS_DIR.glob(f"jobs-{device}-*.json")) if device == "cpu" else []
            if not others:
                return None
            p = others[0]
    prof = json.loads(p.read_text())
    if prof.get("format") != FORMAT:
        raise ValueError(f"{p}: not a {FORMAT} file")
    return prof


def other_machine(profile: dict[str, Any]) -> str | None:
    """The machine type ``profile`` was measured on when it is not this one's (None when it is, or for a GPU
    profile, which names no type)."""
    theirs = profile.get("machine")
    return theirs if theirs and theirs != machine_type() else None


def covers(profile: dict[str, Any], config: dict[str, Any], costs: dict[str, Any]) -> str | None:
    """Why the profile cannot price ``config`` with ``costs`` (None when it can): it measured none of the
    config's models, or it was calibrated against other component costs (its engine scales are relative to
    them)."""
    if not any(m in (profile.get("models") or {}) for m in config["models"]):
        return f"the job profile ({profile.get('run')}) measured none of this config's models"
    if profile.get("costs_measured_at") != costs.get("measured_at"):
        return (f"the job profile was calibrated against the component costs of {profile.get('costs_measured_at')}, "
                f"not these ({costs.get('measured_at')}); recalibrate with --calibrate")
    return None


# ------------------------------------------------------------------------------------------ benchmarks


def read_benchmarks(bench_dir: str | Path) -> list[dict[str, Any]]:
    """One record per finished job from ``<bench_dir>/<rule>/<job>.tsv`` (the layout of the rules' ``benchmark:``):
    rule, job name, stage, wall seconds ``s``, CPU seconds, peak RSS (MB) and end time (the file's mtime)."""
    out = []
    for path in sorted(Path(bench_dir).glob("*/*.tsv")):
        lines = path.read_text().splitlines()
        if len(lines) < 2:
            continue
        row = dict(zip(lines[0].split("\t"), lines[1].split("\t")))
        try:
            s, rss = float(row["s"]), float(row.get("max_rss", "nan"))
        except (KeyError, ValueError):
            continue
        try:
            cpu = float(row.get("cpu_time", "nan"))
        except ValueError:
            cpu = math.nan
        rule = path.parent.name
        out.append({"stage": STAGES.get(rule, rule), "rule": rule, "job": path.stem, "s": s, "cpu_s": cpu,
                    "max_rss_mb": rss, "end": path.stat().st_mtime})
    return out


# ------------------------------------------------------------------------------------------ the jobs


def _layers(config: dict[str, Any], model: str) -> list[int]:
    return list(range(int(config["models"][model]["num_layers"]))) if config.get("layers") is None \
        else list(config["layers"])


def _chunks(config: dict[str, Any], model: str) -> list[list[int]]:
    layers, k = _layers(config, model), int(config.get("layers_per_job", 1))
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
    from caldera.experiments.planning.throughput_rows import throughput_variants

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
    tp = throughput_variants(config, variants)
    jobs += [PlannedJob(Rule.THROUGHPUT, vid, v.model, v) for vid, v in sorted(tp.items())]
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
    jobs += [PlannedJob(Rule.MAKE_TABLE, t) for t in config.get("tables", []) if t not in pending]
    jobs += [PlannedJob(Rule.PENDING_TABLE, t) for t in pending]
    jobs += [PlannedJob(Rule.THEORY_REPORT, "theory"), PlannedJob(Rule.CLAIMS, "claims")]
    return jobs


# ------------------------------------------------------------------------------------------ work of a job


def corpus_tokens(config: dict[str, Any], corpus: str) -> int:
    spec = config["eval"]["ppl"][corpus]
    return int(spec["n_windows"]) * int(spec["seq_len"])


def zeroshot_work(config: dict[str, Any]) -> int:
    """Zero-shot request tokens of one evaluation (:func:`caldera.experiments.planning.workload.zeroshot_tokens` over the
    tasks
    at ``eval.zeroshot.limit``): the unit zero-shot time is priced in (tasks differ in choices and length)."""
    from caldera.experiments.planning.workload import zeroshot_tokens

    zs = config["eval"].get("zeroshot") or {}
    return sum(zeroshot_tokens(t, zs.get("limit")) for t in zs.get("tasks") or [])


def eval_parts(config: dict[str, Any], v: Any) -> dict[str, Any]:
    """What one evaluation of ``v`` runs: ``{corpus: tokens}`` of its perplexity corpora (a seed replicate: those
    of ``replicates.corpora``), the corpus scored against the dense model (``kl``, compressed variants only) and
    its zero-shot work (0 for a replicate unless ``replicates.zeroshot``)."""
    rep = config.get("replicates") or {}
    corpora = list(config["eval"]["ppl"])
    if v.replicate_of is not None and rep.get("corpora"):
        corpora = [c for c in corpora if c in rep["corpora"]]
    zs = zeroshot_work(config) if v.replicate_of is None or rep.get("zeroshot", False) else 0
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


def _seq_tokens(config: dict[str, Any]) -> int:
    cal = config["calibration"]
    return int(cal["n_samples"]) * int(cal["seq_len"])


def rhtft_work(config: dict[str, Any]) -> dict[str, float]:
    """Token counts of one RHT fine-tuning: the held-out evaluation before training and after each epoch, and a
    training step's tokens, counted 3× (forward and backward)."""
    r = config["rht_ft"]
    held = int(r["held_out"]) * int(r["seq_len"])
    train = (int(r["n_samples"]) - int(r["held_out"])) * int(r["seq_len"])
    return {"tokens": held + int(r["epochs"]) * (3 * train + held)}


def lora_work(config: dict[str, Any], task: str) -> dict[str, float]:
    """A LoRA job's training tokens (epochs × sequences × block, 3× for the backward pass) and its evaluation tokens:
    the held-out set at each checkpoint and at the end, and the best and the final model on the task's evaluation
    data (the language-modelling task: the Wiki2 windows of ``eval.ppl``; a classification task: its documents
    at ``eval.zeroshot.limit``, one block each)."""
    from caldera.experiments.planning.loraft_rows import LM_TASK
    from caldera.experiments.planning.workload import ZEROSHOT_DOCS

    t = config["lora_ft"]["tasks"][task]
    n_ck = int(config["lora_ft"]["n_checkpoints"])
    block = int(t["block_size"])
    if task == LM_TASK:
        final = corpus_tokens(config, LM_TASK)
    else:
        limit = (config["eval"].get("zeroshot") or {}).get("limit")
        docs = ZEROSHOT_DOCS.get(f"caldera_{task}", (0, 0, 0))[0]
        final = (min(docs, int(limit)) if limit else docs) * block
    return {"train": 3 * int(t["epochs"]) * int(t["n_train"]) * block,
            "eval": (n_ck + 1) * int(t["n_heldout"]) * block + 2 * final}


def selection_units(config: dict[str, Any], costs: dict[str, Any]) -> float:
    """The component laws' seconds of the selection sweep: per model, its layers × matrices × (QuIP# once, each
    candidate at each factor precision and rank), at ``selection.iters``; the unit the profile scales."""
    from caldera.config import CalderaConfig
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


def _ablations_law(config: dict[str, Any], costs: dict[str, Any]) -> float:
    """The component laws' seconds of Figure 3's comparisons (rule ablation_traces' work), which the selection
    job re-runs under its chosen configuration; 0 without figures."""
    if not config.get("figures"):
        return 0.0
    from caldera.experiments.planning.cost import figure_rules

    fm = config["figures"]["model"]
    return figure_rules(config, costs, config["models"][fm]["shapes"])[Rule.ABLATION_TRACES]["total_s"]


# ------------------------------------------------------------------------------------------ calibration


def _median(xs: Iterable[float], default: float | None = None) -> float | None:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else default


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _layer_walls(results: Path, vid: str) -> tuple[int, float, float]:
    """(layers, summed per-layer wall seconds, summed per-matrix seconds) of a compressed variant's timing files."""
    n, layer_s, mat_s = 0, 0.0, 0.0
    for f in sorted((results / "compressed" / vid).glob("chunks/*/layer_*.timing.json")):
        t = _read(f) or {}
        n += 1
        layer_s += float(t.get("wall_s", 0.0))
        mat_s += sum(float(m.get("wall_s", 0.0)) for m in (t.get("matrices") or {}).values())
    return n, layer_s, mat_s


def _eval_steps(results: Path, vid: str) -> dict[str, float]:
    """Seconds of each evaluation step of ``vid`` (``ppl_<corpus>``, ``zeroshot``) from its timing files."""
    out = {}
    for f in (results / "eval" / vid).glob("*.timing.json"):
        t = _read(f)
        if t and "wall_s" in t:
            out[f.name.split(".")[0]] = float(t["wall_s"])
    return out


def calibrate(results_dir: str | Path, config: dict[str, Any], costs: dict[str, Any], *,
              source: str = "") -> dict[str, Any]:
    """The machine profile from one finished run of ``config`` in ``results_dir`` (``results/<name>``): per model,
    the fixed seconds of each kind of job and the rates of its work (module docstring); per constant rule the
    median job. ``costs``: the component costs the engine laws use (their relative scale is what is calibrated).
    ``ValueError`` when the run has no benchmark files."""
    results = Path(results_dir)
    bench = read_benchmarks(results / "benchmarks")
    if not bench:
        raise ValueError(f"{results}/benchmarks holds no benchmark files: calibrate on a finished run")
    jobs = {(j["rule"], j["job"]): j for j in bench}
    planned = {(p.rule, p.name): p for p in plan_jobs(config)}
    models: dict[str, dict[str, Any]] = {}

    def by_model(rule: str) -> dict[str, list[tuple[PlannedJob, dict[str, Any]]]]:
        out: dict[str, list] = {}
        for key, j in jobs.items():
            p = planned.get(key)
            if key[0] == rule and p is not None and p.model is not None:
                out.setdefault(p.model, []).append((p, j))
        return out

    # evaluation: the dense job's two corpora give a corpus's fixed part and the per-token rate (the same
    # forward for both); the compressed jobs' distribution corpus adds the paired-metrics rate; zero-shot per
    # request token; the rest of the job (start-up, load, building the weights) is its fixed part
    for model, pairs in by_model(Rule.EVALUATE).items():
        dense = [(p, j) for p, j in pairs if p.variant.method == "dense"]
        comp = [(p, j) for p, j in pairs if p.variant.method != "dense"]
        prof = models.setdefault(model, {})
        corpus_fixed, token_s = 0.0, None
        if dense:
            p, _ = dense[0]
            steps = _eval_steps(results, p.name)
            pts = [(corpus_tokens(config, c), steps[f"ppl_{c}"]) for c in config["eval"]["ppl"]
                   if f"ppl_{c}" in steps]
            if len(pts) >= 2 and pts[0][0] != pts[1][0]:
                (t0, s0), (t1, s1) = sorted(pts)[:2]
                token_s = max((s1 - s0) / (t1 - t0), 0.0)
                corpus_fixed = max(s0 - token_s * t0, 0.0)
            elif pts:
                token_s = sum(s for _, s in pts) / sum(t for t, _ in pts)
        kl_s, zs_s, fixed = [], [], []
        for p, j in comp + dense:
            steps = _eval_steps(results, p.name)
            parts = eval_parts(config, p.variant)
            if parts["kl"] and f"ppl_{parts['kl']}" in steps and token_s is not None:
                t = parts["corpora"][parts["kl"]]
                kl_s.append((steps[f"ppl_{parts['kl']}"] - corpus_fixed - token_s * t) / t)
            if "zeroshot" in steps and parts["zeroshot"]:
                zs_s.append(steps["zeroshot"] / parts["zeroshot"])
            fixed.append(j["s"] - sum(steps.values()))
        prof.update(eval_fixed_s=_median(fixed, 0.0), corpus_fixed_s=corpus_fixed, token_s=token_s or 0.0,
                    kl_token_s=max(_median(kl_s, 0.0), 0.0), zeroshot_token_s=_median(zs_s, 0.0))

    # compression: fixed = job − its layers' walls; per-layer setup = layer wall − its matrices; the matrices
    # scale the component laws per method (measured / law at the run's settings)
    for model, pairs in by_model(Rule.COMPRESS_VARIANT).items():
        prof = models.setdefault(model, {})
        fixed, per_layer, scales = [], [], {}
        for p, j in pairs:
            n, layer_s, mat_s = _layer_walls(results, p.name)
            if not n:
                continue
            fixed.append(j["s"] - layer_s)
            per_layer.append((layer_s - mat_s) / n)
            law = law_layer_seconds(costs, config, p.variant)
            if law > 0:
                scales.setdefault(p.variant.method, []).append(mat_s / n / law)
        prof.update(compress_fixed_s=_median(fixed, 0.0), layer_setup_s=_median(per_layer, 0.0),
                    matrix_scale={m: _median(s) for m, s in sorted(scales.items())},
                    matrix_scale_default=_median([x for s in scales.values() for x in s], 1.0))
    for model, pairs in by_model(Rule.REPLICATE).items():
        fixed = []
        for p, j in pairs:
            n, layer_s, _ = _layer_walls(results, p.name)
            fixed.append(j["s"] - layer_s - sum(_eval_steps(results, p.name).values()))
        models.setdefault(model, {})["replicate_fixed_s"] = _median(fixed, 0.0)
    for model, pairs in by_model(Rule.PROFILE_LAYERS).items():
        prof = models.setdefault(model, {})
        f = prof.get("compress_fixed_s", 0.0)
        prof["profile_layer_s"] = _median((j["s"] - f) / max(p.extra["layers"], 1) for p, j in pairs)
    for model, pairs in by_model(Rule.HESSIANS).items():
        prof = models.setdefault(model, {})
        f = prof.get("compress_fixed_s", 0.0)
        prof["hessian_token_layer_s"] = _median((j["s"] - f) / (_seq_tokens(config) * len(_layers(config, model)))
                                                for _, j in pairs)
    dist = (config.get("eval") or {}).get("distribution")
    for model, pairs in by_model(Rule.DENSE_REFERENCE).items():  # loads the dense model as a compression job does
        prof = models.setdefault(model, {})
        f = prof.get("compress_fixed_s", 0.0)
        prof["reference_token_s"] = _median((j["s"] - f) / corpus_tokens(config, dist) for _, j in pairs)
    for model, pairs in by_model(Rule.RHT_FINETUNE).items():
        prof = models.setdefault(model, {})
        rate, fixed = [], []
        for p, j in pairs:
            t = _read(results / "rhtft" / p.name / "rhtft.timing.json") or {}
            ep = sum(t.get("epoch_wall_s") or [])
            if ep:
                rate.append(ep / rhtft_work(config)["tokens"])
                fixed.append(j["s"] - ep)
        prof.update(rhtft_token_s=_median(rate, 0.0), rhtft_fixed_s=_median(fixed, 0.0))
    for model, pairs in by_model(Rule.LORA_FINETUNE).items():
        prof = models.setdefault(model, {})
        train, rest = {}, []
        for p, j in pairs:
            row, task = p.name.rsplit("_", 1)
            t = _read(results / "lora" / row / f"{task}.timing.json") or {}
            if "train_s" not in t:
                continue
            w = lora_work(config, task)
            train.setdefault(task, []).append(t["train_s"] / w["train"])
            rest.append((w["eval"], j["s"] - t["train_s"]))
        # the rest of a job: its start-up and model load (as a compression job's) + its evaluations
        fixed = prof.get("compress_fixed_s", 0.0)
        prof.update(lora_train_token_s={k: _median(v) for k, v in sorted(train.items())}, lora_fixed_s=fixed,
                    lora_eval_token_s=max(_median(((s - fixed) / w for w, s in rest if w), 0.0), 0.0))
    # the engine outside compression: the selection sweep (start-up, per swept layer its Hessians and contexts,
    # the decompositions by their law) and the figure traces (start-up + the law at the compression's scale)
    other: dict[str, Any] = {}
    sel = jobs.get((Rule.SELECTION, "selection"))
    sel_t = _read(results / "selection" / "selection.timing.json") if sel else None
    if sel and sel_t and config.get("selection"):
        from caldera.experiments.planning.settings import SelectionSettings

        layers = SelectionSettings.from_block(config["selection"]).layers
        cpu = sel_t.get("cpu_s") or {}
        recs = sel_t.get("records") or []
        rec_s = sum(float(r.get("seconds", 0.0)) for r in recs)
        units = selection_units(config, costs)
        start = statistics.median([j["s"] for (r, _), j in jobs.items() if r == SMALL_JOB] or [0.0])
        ablations = float(cpu.get("ablations", 0.0))
        n_layers = sum(len(v) for v in layers.values())
        # a job's start-up as the small jobs'; what is neither the decompositions nor the ablations (reading each
        # swept layer's Hessians, its contexts, the sweep's bookkeeping) per swept layer
        other.update(selection_start_s=start, selection_ablations_s=ablations,
                     selection_ablations_law=_ablations_law(config, costs),
                     selection_layer_s=max((sel["s"] - start - ablations - rec_s) / n_layers, 0.0),
                     selection_scale=rec_s / units if units else 0.0)
    if config.get("figures"):
        from caldera.experiments.planning.cost import figure_rules

        fm = config["figures"]["model"]
        fig = figure_rules(config, costs, config["models"][fm]["shapes"])
        scale = (models.get(fm) or {}).get("matrix_scale_default", 1.0)
        for rule in (Rule.ABLATION_TRACES, Rule.LPLR_TRACES):
            ran = [j["s"] for (r, _), j in jobs.items() if r == rule]
            law = fig[rule]["total_s"] / fig[rule]["jobs"] if "total_s" in fig[rule] else fig[rule]["s_per_job"]
            if ran:
                other[f"{rule}_fixed_s"] = max(statistics.median(ran) - scale * law, 0.0)
    constants = {}
    for rule in CONSTANT_RULES:
        xs = [j["s"] for (r, _), j in jobs.items() if r == rule]
        if xs:
            constants[rule] = statistics.median(xs)
    return {"format": FORMAT, "source": source or str(results), "run": config.get("name"),
            "calibrated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine_type() if costs.get("device", "cpu") == "cpu" else None,
            "costs_measured_at": costs.get("measured_at"), "models": models, "engine": other,
            "constants": constants}


# ------------------------------------------------------------------------------------------ prediction


class MissingCalibration(KeyError):
    """The profile has no measurement for what a job needs (a model or a kind of job it never ran)."""


def _get(prof: dict[str, Any], key: str, model: str) -> Any:
    if key not in prof:
        raise MissingCalibration(f"the profile has no {key!r} for model {model!r}")
    return prof[key]


def job_seconds(job: PlannedJob, config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any]) -> float:
    """Predicted wall seconds of one job (module docstring). ``MissingCalibration`` when the profile lacks what it
    needs (then the job is priced by the component laws alone, or not at all, by the caller)."""
    consts = profile.get("constants", {})
    if job.rule in CONSTANT_RULES:
        return float(consts.get(job.rule, consts.get(SMALL_JOB, 0.0)))
    model = job.model
    prof = (profile.get("models") or {}).get(model)
    eng = profile.get("engine") or {}
    if job.rule == Rule.SELECTION:
        from caldera.experiments.planning.settings import SelectionSettings

        sel = SelectionSettings.from_block(config["selection"])
        abl = 0.0
        if sel.ablations and eng.get("selection_ablations_law"):
            abl = eng["selection_ablations_s"] * _ablations_law(config, costs) / eng["selection_ablations_law"]
        return (_get(eng, "selection_start_s", "") + abl
                + sum(len(v) for v in sel.layers.values()) * eng.get("selection_layer_s", 0.0)
                + _get(eng, "selection_scale", "") * selection_units(config, costs))
    if job.rule in (Rule.ABLATION_TRACES, Rule.LPLR_TRACES):
        from caldera.experiments.planning.cost import figure_rules

        fig = figure_rules(config, costs, config["models"][model]["shapes"])[job.rule]
        law = fig["total_s"] / fig["jobs"] if "total_s" in fig else fig["s_per_job"]
        scale = ((profile.get("models") or {}).get(model) or {}).get("matrix_scale_default")
        if scale is None:
            raise MissingCalibration(f"the profile has no compression scale for model {model!r}")
        return _get(eng, f"{job.rule}_fixed_s", "") + scale * law
    if prof is None:
        raise MissingCalibration(f"the profile has no model {model!r}")

    def compression(layers: int) -> float:
        scale = (prof.get("matrix_scale") or {}).get(job.variant.method, prof.get("matrix_scale_default"))
        if scale is None:
            raise MissingCalibration(f"the profile has no compression scale for model {model!r}")
        return layers * (_get(prof, "layer_setup_s", model) + scale * law_layer_seconds(costs, config, job.variant))

    def evaluation() -> float:
        parts = eval_parts(config, job.variant)
        s = sum(prof["corpus_fixed_s"] + t * prof["token_s"] for t in parts["corpora"].values())
        if parts["kl"]:
            s += parts["corpora"][parts["kl"]] * prof["kl_token_s"]
        return s + parts["zeroshot"] * prof["zeroshot_token_s"]

    if job.rule == Rule.EVALUATE:
        return _get(prof, "eval_fixed_s", model) + evaluation()
    if job.rule in (Rule.COMPRESS_VARIANT, Rule.COMPRESS_LAYERS):  # a chunk of layers (the whole variant, or one chunk)
        return _get(prof, "compress_fixed_s", model) + compression(job.extra["layers"])
    if job.rule == Rule.REPLICATE:
        return _get(prof, "replicate_fixed_s", model) + compression(job.extra["layers"]) + evaluation()
    if job.rule == Rule.PROFILE_LAYERS:
        return _get(prof, "compress_fixed_s", model) + job.extra["layers"] * _get(prof, "profile_layer_s", model)
    if job.rule == Rule.HESSIANS:
        return _get(prof, "compress_fixed_s", model) + _seq_tokens(config) * len(_layers(config, model)) * _get(
            prof, "hessian_token_layer_s", model)
    if job.rule == Rule.DENSE_REFERENCE:
        return _get(prof, "compress_fixed_s", model) + corpus_tokens(config, config["eval"]["distribution"]) * _get(
            prof, "reference_token_s", model)
    if job.rule == Rule.RHT_FINETUNE:
        return _get(prof, "rhtft_fixed_s", model) + rhtft_work(config)["tokens"] * _get(prof, "rhtft_token_s", model)
    if job.rule == Rule.LORA_FINETUNE:
        task = job.extra["task"]
        w = lora_work(config, task)
        train = (prof.get("lora_train_token_s") or {}).get(task)
        if train is None:
            raise MissingCalibration(f"the profile has no LoRA {task!r} rate for model {model!r}")
        return (_get(prof, "lora_fixed_s", model) + w["train"] * train
                + w["eval"] * _get(prof, "lora_eval_token_s", model))
    raise MissingCalibration(f"no model for rule {job.rule!r}")


def borrow_rates(profile: dict[str, Any], model: str, like: str, ratio: float | None = None) -> dict[str, Any]:
    """``model``'s profile with what it lacks taken from model ``like``'s, its per-token rates scaled by ``ratio``
    (default: the two models' per-token evaluation rates, LM head included); a LoRA job of a model the calibration
    run fine-tuned only on another, say."""
    a, b = profile["models"].get(model, {}), profile["models"][like]
    if ratio is None:
        ratio = a["token_s"] / b["token_s"] if a.get("token_s") and b.get("token_s") else 1.0
    out = dict(a)
    for k, v in b.items():
        if k in out:
            continue
        if isinstance(v, dict):
            out[k] = {kk: vv * ratio if "token" in k else vv for kk, vv in v.items()}
        elif isinstance(v, (int, float)):
            out[k] = v * ratio if "token" in k else v
        else:
            out[k] = v
    return out


def _headless(job: PlannedJob) -> bool:
    """A job whose model runs without its language-model head: LoRA on a classification task (a two-way head)."""
    from caldera.experiments.planning.loraft_rows import LM_TASK

    return job.rule == Rule.LORA_FINETUNE and job.extra.get("task") != LM_TASK


def _body_ratio(config: dict[str, Any], profile: dict[str, Any], model: str, like: str) -> float | None:
    """How much slower ``model``'s decoder layers are per token than ``like``'s, all layers together (from the
    Hessian jobs' per-layer rates: no LM head, whose vocabulary makes Gemma-3's evaluation 3x SmolLM2's)."""
    a, b = profile["models"].get(model, {}), profile["models"].get(like, {})
    if not a.get("hessian_token_layer_s") or not b.get("hessian_token_layer_s") or like not in config["models"]:
        return None
    return (a["hessian_token_layer_s"] * len(_layers(config, model))) / (
        b["hessian_token_layer_s"] * len(_layers(config, like)))


def predict(config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every job of ``config`` (:func:`plan_jobs`) with its predicted seconds: ``{"rule", "job", "model", "stage",
    "s", "how"}``; ``how`` is "measured" (the profile prices it), "borrowed" (another model's rates, scaled) or
    "unpriced" (``s`` None: nothing in the profile says)."""
    out = []
    models = profile.get("models") or {}
    for job in plan_jobs(config):
        how, s = "measured", None
        try:
            s = job_seconds(job, config, profile, costs)
        except MissingCalibration:
            like = next((m for m in models if m != job.model), None)
            if like is not None and job.model is not None:
                ratio = _body_ratio(config, profile, job.model, like) if _headless(job) else None
                borrowed = {**profile, "models": {**models, job.model: borrow_rates(profile, job.model, like, ratio)}}
                try:
                    s, how = job_seconds(job, config, borrowed, costs), "borrowed"
                except MissingCalibration:
                    s, how = None, "unpriced"
            else:
                how = "unpriced"
        out.append({"rule": job.rule, "job": job.name, "model": job.model, "stage": job.stage, "s": s, "how": how})
    return out


def totals(jobs: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """Jobs and summed seconds per ``key`` ("rule" or "stage") of predicted or measured job records."""
    out: dict[str, dict[str, Any]] = {}
    for j in jobs:
        t = out.setdefault(j[key], {"jobs": 0, "s": 0.0, "unpriced": 0})
        t["jobs"] += 1
        if j.get("s") is None:
            t["unpriced"] += 1
        else:
            t["s"] += j["s"]
    return out


def check(predicted: list[dict[str, Any]], measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The prediction against a run's measured jobs (:func:`read_benchmarks`), on the jobs both have (a partial run
    is compared on what it ran): per job, per rule, per stage and in total, each with its ratio and whether it is
    within :data:`caldera.experiments.planning.cost.CHECK_MARGIN`; plus the jobs predicted and not run, and run and not
    predicted."""
    from caldera.experiments.planning.cost import CHECK_MARGIN

    pred = {(p["rule"], p["job"]): p for p in predicted}
    meas = {(m["rule"], m["job"]): m for m in measured}
    both = sorted(set(pred) & set(meas))
    pairs = [{**pred[k], "measured_s": meas[k]["s"], "cpu_s": meas[k].get("cpu_s")} for k in both
             if pred[k]["s"] is not None]

    def group(key: str) -> list[dict[str, Any]]:
        g: dict[str, dict[str, Any]] = {}
        for p in pairs:
            r = g.setdefault(p[key], {key: p[key], "jobs": 0, "predicted_s": 0.0, "measured_s": 0.0})
            r["jobs"] += 1
            r["predicted_s"] += p["s"]
            r["measured_s"] += p["measured_s"]
        for r in g.values():
            r["ratio"] = r["predicted_s"] / r["measured_s"] if r["measured_s"] > 0 else math.inf
            r["within"] = abs(r["ratio"] - 1) <= CHECK_MARGIN
        return sorted(g.values(), key=lambda r: -r["measured_s"])

    p_all, m_all = sum(p["s"] for p in pairs), sum(p["measured_s"] for p in pairs)
    for p in pairs:
        p["ratio"] = p["s"] / p["measured_s"] if p["measured_s"] > 0 else math.inf
    return {"jobs": pairs, "rules": group("rule"), "stages": group("stage"),
            "total": {"jobs": len(pairs), "predicted_s": p_all, "measured_s": m_all,
                      "ratio": p_all / m_all if m_all else math.inf,
                      "within": m_all > 0 and abs(p_all / m_all - 1) <= CHECK_MARGIN},
            "not_run": sorted(f"{r}/{j}" for r, j in set(pred) - set(meas)),
            "not_predicted": sorted(f"{r}/{j}" for r, j in set(meas) - set(pred)),
            "unpriced": sorted(f"{k[0]}/{k[1]}" for k in both if pred[k]["s"] is None)}


def measured_jobs(path: str | Path) -> list[dict[str, Any]]:
    """A run's measured jobs: from its results folder (``results/<name>``, its ``benchmarks/``) or from the
    ``timings.json`` its ``timings`` rule wrote (per job when it lists them, else one record per rule, which
    :func:`check` then compares per rule and stage only)."""
    p = Path(path)
    if p.is_dir():
        bench = p / "benchmarks" if (p / "benchmarks").is_dir() else p
        return read_benchmarks(bench)
    try:
        t = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a results folder nor a readable timings.json ({e})") from None
    if t.get("jobs"):
        return [{"rule": j["rule"], "job": j["job"], "stage": STAGES.get(j["rule"], j["rule"]), "s": j["s"]}
                for j in t["jobs"]]
    if "rules" not in t:
        raise ValueError(f"{p}: these timings have no per-rule records (key 'rules'); rerun the `timings` rule")
    return [{"rule": r, "job": "*", "stage": STAGES.get(r, r), "s": v["job_s"], "jobs": v["jobs"]}
            for r, v in t["rules"].items()]


def check_runs(predicted: list[dict[str, Any]], measured: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`check` per job when ``measured`` names its jobs, else per rule (every predicted job of a rule
    against the rule's measured total)."""
    if measured and all(m.get("job") == "*" for m in measured):
        agg = {}
        for p in predicted:
            a = agg.setdefault(p["rule"], {**p, "job": "*", "s": 0.0})
            a["s"] = None if a["s"] is None or p["s"] is None else a["s"] + p["s"]
        return check(list(agg.values()), measured)
    return check(predicted, measured)


def _dur(seconds: float) -> str:
    from caldera.experiments.planning.cost import duration

    return duration(seconds)


def report(config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any], cores: int = 2) -> str:
    """The job-level prediction ``caldera cost`` prints: per stage and per rule, the total, a wall-clock estimate
    on ``cores`` cores, and where the numbers come from."""
    pred = predict(config, profile, costs)
    priced = [p for p in pred if p["s"] is not None]
    total = sum(p["s"] for p in priced)
    where = f" on machine type {profile['machine']}" if profile.get("machine") else ""
    lines = [f"Predicted job time of `{config.get('name', '?')}` on this machine (profile calibrated on run "
             f"`{profile.get('run')}`{where}, {profile.get('calibrated_at')}): {_dur(total)} of job time in "
             f"{len(pred)} jobs; about {_dur(total / cores)} on the wall clock with {cores} jobs side by side", "",
             f"{'stage':<44}{'jobs':>6}{'job time':>12}"]
    for name, t in sorted(totals(pred, "stage").items(), key=lambda kv: -kv[1]["s"]):
        lines.append(f"{name:<44}{t['jobs']:>6}{_dur(t['s']):>12}" + (f"  ({t['unpriced']} unpriced)"
                                                                        if t["unpriced"] else ""))
    lines += ["", f"{'rule':<20}{'jobs':>6}{'mean per job':>14}{'longest':>10}{'job time':>12}"]
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for p in pred:
        by_rule.setdefault(p["rule"], []).append(p)
    for rule, ps in sorted(by_rule.items(), key=lambda kv: -sum(p["s"] or 0 for p in kv[1])):
        s = [p["s"] for p in ps if p["s"] is not None]
        hows = sorted({p["how"] for p in ps} - {"measured"})
        lines.append(f"{rule:<20}{len(ps):>6}{_dur(sum(s) / len(s)) if s else '—':>14}"
                     f"{_dur(max(s)) if s else '—':>10}{_dur(sum(s)):>12}" + (f"  ({', '.join(hows)})" if hows else ""))
    left = _left_after_record(config, pred)
    if left is not None:
        n_rec, rest = left
        s_rest = sum(p["s"] for p in rest if p["s"] is not None)
        lines += ["", f"The run's record ({config['record']}) holds {n_rec} of these jobs; left to run: {len(rest)} "
                  f"jobs, {_dur(s_rest)} of job time, about {_dur(s_rest / cores)} on the wall clock (a recorded "
                  "job whose configuration changed, or whose checkpoint a job left to run reads, runs again)."]
    theirs = other_machine(profile)
    if theirs:
        lines += ["", f"This machine's type is {machine_type()}, and no profile of that type is committed: these "
                  f"predictions use the {theirs}'s. A stage can differ by ×2 across machine types; measure this "
                  "one with `caldera cost --configfile config/mini.yaml --calibrate results/mini` after a default "
                  "run."]
    lines += ["", "Each job: its fixed part (start-up, model load) + its work (perplexity tokens, zero-shot requests, "
              "layers and the engine's law at the config's rank and iterations, training tokens) at the rates "
              f"measured on run `{profile.get('run')}` (caldera.experiments.planning.job_costs). borrowed: another "
              "model's rates scaled by the two models' forward speed; unpriced: nothing measured prices it."]
    return "\n".join(lines)


def _left_after_record(config: dict[str, Any], pred: list[dict[str, Any]]):
    """``(recorded, the predicted jobs not in it)`` when the config's ``record`` folder holds jobs, else None."""
    from caldera.experiments.planning.record import read_index

    if not config.get("record"):
        return None
    try:
        done = {(Path(b).parent.name, Path(b).stem) for b in read_index(config["record"])["jobs"]}
    except (OSError, ValueError):
        return None
    if not done:
        return None
    rest = [p for p in pred if (p["rule"], p["job"]) not in done]
    return len(pred) - len(rest), rest


def check_report(res: dict[str, Any]) -> str:
    """The text ``caldera cost --check`` prints: per stage and rule predicted vs measured, and the jobs furthest
    off."""
    from caldera.experiments.planning.cost import CHECK_MARGIN

    def rows(items: list[dict[str, Any]], key: str, width: int) -> list[str]:
        out = [f"{key:<{width}}{'jobs':>6}{'predicted':>12}{'measured':>12}{'ratio':>8}"]
        for r in items:
            flag = "" if r["within"] else f"  off by more than ±{CHECK_MARGIN:.0%}"
            out.append(f"{r[key]:<{width}}{r['jobs']:>6}{_dur(r['predicted_s']):>12}{_dur(r['measured_s']):>12}"
                       f"{r['ratio']:>8.2f}{flag}")
        return out

    t = res["total"]
    lines = rows(res["stages"], "stage", 44) + [""] + rows(res["rules"], "rule", 20) + [
        "", f"total: {t['jobs']} jobs, predicted {_dur(t['predicted_s'])}, measured {_dur(t['measured_s'])}, "
        f"ratio {t['ratio']:.2f}" + ("" if t["within"] else f"  off by more than ±{CHECK_MARGIN:.0%}")]
    worst = sorted((j for j in res["jobs"] if j["job"] != "*"), key=lambda j: -abs(math.log(max(j["ratio"], 1e-9))))
    if worst:
        lines += ["", "furthest off (job: predicted / measured):"]
        lines += [f"  {j['rule']}/{j['job']}: {_dur(j['s'])} / {_dur(j['measured_s'])} (×{j['ratio']:.2f})"
                  for j in worst[:8]]
    for key, what in (("not_run", "predicted, not in the run"), ("not_predicted", "in the run, not predicted"),
                      ("unpriced", "in the run, unpriced")):
        if res[key]:
            lines.append(f"{what}: {len(res[key])} ({', '.join(res[key][:6])}{', …' if len(res[key]) > 6 else ''})")
    return "\n".join(lines)


def plan_line(config: dict[str, Any], cores: int | None, device: str = "cpu",
              done: Iterable[str] = ()) -> str | None:
    """One line for the start of a run's log: its predicted job time and wall time on ``cores`` jobs side by side
    (:func:`predict` with this machine type's profile), or None when no profile prices this config. ``done``: the
    benchmark files (``…/benchmarks/<rule>/<job>.tsv``) of jobs adopted from the run's record; the line then prices
    the jobs left."""
    from caldera.experiments.planning.cost import load_costs

    try:
        profile = load_profile(device)
        costs = load_costs(device)
    except (OSError, ValueError):
        return None
    if profile is None or covers(profile, config, costs):
        return None
    pred = predict(config, profile, costs)
    finished = {(Path(b).parent.name, Path(b).stem) for b in done}
    rest = [p for p in pred if (p["rule"], p["job"]) not in finished]
    s = sum(p["s"] for p in rest if p["s"] is not None)
    unpriced = sum(p["s"] is None for p in rest)
    par = max(1, int(cores or 1))
    left = f" (of {len(pred)}; the others are adopted from the record)" if len(rest) < len(pred) else ""
    return (f"predicted here: {len(rest)} jobs{left}, {_dur(s)} of job time, about {_dur(s / par)} with {par} "
            f"job{'s' if par > 1 else ''} at a time" + (f" ({unpriced} jobs unpriced)" if unpriced else "")
            + (f" (caldera cost, with the profile of another machine type, {theirs}: expect up to ×2)"
               if (theirs := other_machine(profile)) else " (caldera cost; a machine of another type differs)"))
