"""The job profile of a machine type: the fixed seconds of each kind of job and the rates of its work, measured
from one finished run (:func:`calibrate`: its Snakemake benchmark files and the timing files its jobs write beside
their results), stored as ``benchmarks/results/jobs-cpu-<type>.json`` (:func:`machine_type`). On a type with no
profile of its own another type's is used, and the reports say so."""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from caldera.atomic import timing_path
from caldera.experiments.planning.job_plan import (
    PlannedJob,
    ablations_law,
    compressed_fraction,
    corpus_tokens,
    eval_parts,
    hessian_layers_run,
    law_layer_seconds,
    lora_work,
    plan_jobs,
    rhtft_work,
    selection_units,
    seq_tokens,
    throughput_work,
)
from caldera.experiments.planning.rules import STAGES, Rule

FORMAT = "caldera-job-costs/1"

#: rules priced by a constant per job (the calibration run's median): they read small files and write a report
CONSTANT_RULES = (Rule.ASSETS, Rule.ALLOCATE, Rule.WEIGHT_SPECTRA, Rule.FIGURE3_DATA, Rule.PLOT_FIGURE,
                  Rule.PLOT_RANKS, Rule.MAKE_TABLE, Rule.PENDING_TABLE, Rule.THEORY_REPORT, Rule.CLAIMS,
                  Rule.VERDICT_PAGE, Rule.PARETO, Rule.THROUGHPUT, Rule.THROUGHPUT_TABLE, Rule.LORA_TABLE,
                  Rule.TIMINGS, Rule.ASSEMBLE_CHECKPOINT)
#: what a job that the calibration run did not have costs: the median of its small report jobs
SMALL_JOB = Rule.MAKE_TABLE


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


# ------------------------------------------------------------------------------------------ calibration


def _median(xs: Iterable[float], default: float | None = None) -> float | None:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else default


def _line(points: list[tuple[float, float]], fixed: float) -> tuple[float, float]:
    """``(intercept, slope)`` of the least-squares line through ``(x, y)`` points, both kept >= 0; with fewer
    than two distinct x, the slope through the points above the intercept ``fixed``."""
    pts = [(x, y) for x, y in points if x > 0]
    if len({x for x, _ in pts}) >= 2:
        mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        if slope >= 0 and my - slope * mx >= 0:
            return my - slope * mx, slope
        if slope < 0:
            return max(my, 0.0), 0.0
        return 0.0, sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)
    return fixed, max(_median(((y - fixed) / x for x, y in pts), 0.0), 0.0)


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
        # start-up and loading the dense model alone: the dense evaluation's fixed part
        dense_fixed = [j["s"] - sum(_eval_steps(results, p.name).values()) for p, j in dense]
        if dense_fixed:
            prof["dense_fixed_s"] = max(_median(dense_fixed), 0.0)

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
    # Hessians: the collection's own seconds (its timing file: the embedding of the calibration batches and
    # every decoder layer up to the last one collected) per token and layer run; the rest of the job (start-up,
    # the tokenizer, the calibration text, opening the checkpoint, writing) is its fixed part. A run whose job
    # recorded no collection time: the dense evaluation's fixed part stands in for it.
    for model, pairs in by_model(Rule.HESSIANS).items():
        prof = models.setdefault(model, {})
        tokens = seq_tokens(config)
        timed = [(j["s"], t) for _, j in pairs
                 if (t := _read(timing_path(results / "hessians" / model / "hessians.json"))) and t.get("computed")]
        if timed:
            prof["hessian_fixed_s"] = max(_median(s - t["collect_s"] for s, t in timed), 0.0)
            prof["hessian_token_layer_s"] = _median(t["collect_s"] / (tokens * t["layers_run"]) for _, t in timed)
        else:
            f = prof.get("dense_fixed_s", prof.get("compress_fixed_s", 0.0))
            work = tokens * hessian_layers_run(config, model)
            prof["hessian_token_layer_s"] = _median((j["s"] - f) / work for _, j in pairs)
    # throughput: a job times every variant of a model; its fixed part (start-up, the tokenizer) is what the
    # variants' loads and calls leave of its time; per variant, the load and the seconds per decoded token and per
    # single-token call are kept for the dense model and for the all-compressed one (a variant compressing a share
    # f of the layers is measured as (1 - f) dense + f compressed, and solved for the all-compressed figure)
    w = throughput_work(config)
    for model, pairs in by_model(Rule.THROUGHPUT).items():
        fixed, kinds = [], {"dense": [], "compressed": []}
        for p, j in pairs:
            r = _read(results / "throughput" / f"{p.name}.json") or {}
            scale = (w["rounds"] + w["warmup"]) / w["rounds"]  # the warm-up calls, as many forwards each
            try:
                per = [(m["method"], float(m["load_s"]), sum(m["decode"]["times_s"]), sum(m["single_token"]["times_s"]))
                       for m in r["variants"].values() if "oom" not in m]  # one that did not fit ran nothing
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if not per:
                continue
            fixed.append(j["s"] - sum(load + scale * (dec + one) for _, load, dec, one in per))
            for method, load, dec, one in per:
                kind = "dense" if method == "dense" else "compressed"
                kinds[kind].append((load, scale * dec / w["decode_tokens"], scale * one / w["calls"]))
        if not fixed or not kinds["dense"]:
            continue
        prof = models.setdefault(model, {})
        dense = [_median(x[i] for x in kinds["dense"]) for i in range(3)]
        f = compressed_fraction(config, model)
        comp = [(_median(x[i] for x in kinds["compressed"]) - (1 - f) * dense[i]) / f if kinds["compressed"]
                else dense[i] for i in range(3)]
        prof["throughput_fixed_s"] = max(_median(fixed), 0.0)
        for i, key in enumerate(("throughput_load_s", "throughput_decode_token_s", "throughput_call_s")):
            prof[key] = {"dense": dense[i], "compressed": max(comp[i], 0.0)}
    dist = (config.get("eval") or {}).get("distribution")
    for model, pairs in by_model(Rule.DENSE_REFERENCE).items():  # loads the dense model and runs it
        prof = models.setdefault(model, {})
        f = prof.get("dense_fixed_s", prof.get("compress_fixed_s", 0.0))
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
    # LoRA: the training loop (training blocks and held-out scoring) per token and task; the rest of the job is
    # its start-up and model load plus its final evaluations (one, or two when the best held-out checkpoint is an
    # earlier one), fitted as fixed + rate × evaluated tokens; each task's share of jobs that evaluate twice
    for model, pairs in by_model(Rule.LORA_FINETUNE).items():
        prof = models.setdefault(model, {})
        train, rest, twice = {}, [], {}
        for p, j in pairs:
            row, task = p.name.rsplit("_", 1)
            t = _read(results / "lora" / row / f"{task}.timing.json") or {}
            r = _read(results / "lora" / row / f"{task}.json") or {}
            if "train_s" not in t or "best_step" not in r:
                continue
            w = lora_work(config, task)
            train.setdefault(task, []).append(t["train_s"] / w["train"])
            n_eval = 1 if r["best_step"] == r["final_step"] else 2
            twice.setdefault(task, []).append(n_eval - 1)
            rest.append((n_eval * w["final"], j["s"] - t["train_s"]))
        fixed, rate = _line(rest, prof.get("compress_fixed_s", 0.0))
        prof.update(lora_train_token_s={k: _median(v) for k, v in sorted(train.items())}, lora_fixed_s=fixed,
                    lora_eval_token_s=rate,
                    lora_second_eval={k: sum(v) / len(v) for k, v in sorted(twice.items())})
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
                     selection_ablations_law=ablations_law(config, costs),
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
