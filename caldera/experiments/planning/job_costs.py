"""Every job of a workflow config and its predicted wall time on one machine, per rule and stage.

``caldera cost`` prices the engine from component laws (:mod:`caldera.experiments.planning.cost`); a small run's
jobs spend most of their time elsewhere: the interpreter and imports, loading the model and the Hessians, per-layer
setup and writes, perplexity windows, zero-shot documents, fine-tuning steps. This module models each job as

    fixed part (start-up, model load) + Σ rate × work,

with the jobs and their work read from the config (:mod:`caldera.experiments.planning.job_plan`: windows × tokens
per corpus, zero-shot requests, layers, the engine's law for a matrix at the config's rank and iterations, training
tokens) and the fixed parts and rates from the machine type's job profile
(:mod:`caldera.experiments.planning.job_profile`, measured from one finished run). :func:`predict` prices each job,
and :func:`check` compares the prediction with a run's timings, per job, rule and stage, and says where the model
is off. A config whose models are not in the profile, or a device it was not measured on, is priced by the
component laws alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from caldera.experiments.planning import job_profile
from caldera.experiments.planning.job_plan import (
    PlannedJob,
    ablations_law,
    compressed_fraction,
    corpus_tokens,
    eval_parts,
    hessian_layers_run,
    law_layer_seconds,
    lora_work,
    model_layers,
    plan_jobs,
    rhtft_work,
    selection_units,
    seq_tokens,
    throughput_work,
)
from caldera.experiments.planning.job_profile import (
    CONSTANT_RULES,
    SMALL_JOB,
    covers,
    load_profile,
    other_machine,
    read_benchmarks,
)
from caldera.experiments.planning.rules import STAGES, Rule

# ------------------------------------------------------------------------------------------ prediction


class MissingCalibration(KeyError):
    """The profile has no measurement for what a job needs (a model or a kind of job it never ran)."""


def _get(prof: dict[str, Any], key: str, model: str) -> Any:
    if key not in prof:
        raise MissingCalibration(f"the profile has no {key!r} for model {model!r}")
    return prof[key]


def _dense_fixed(prof: dict[str, Any], model: str) -> float:
    """The fixed part of a job that loads the dense model alone (Hessians, the dense reference)."""
    return prof["dense_fixed_s"] if "dense_fixed_s" in prof else _get(prof, "compress_fixed_s", model)


def _mixed(rates: dict[str, float], f: float) -> float:
    """A throughput figure of a variant whose share ``f`` of decoder layers is compressed: the dense figure and
    the all-compressed one, mixed in proportion (the dense one alone for the dense variant, ``f`` = 0)."""
    return (1.0 - f) * rates["dense"] + f * rates["compressed"]


def throughput_seconds(job: PlannedJob, config: dict[str, Any], prof: dict[str, Any]) -> float:
    """A throughput job (one model, all of its Table 6 variants): its fixed part + per variant, loading it and the
    forwards of its timed rounds and warm-up calls (:func:`throughput_work`) at the measured seconds per decoded
    token and per single-token call, each mixed between the dense and the compressed figure by the share of
    layers the variant compresses."""
    w = throughput_work(config)
    total = prof["throughput_fixed_s"]
    for v in job.extra.get("variants") or [job.variant]:
        f = 0.0 if v is None or v.method == "dense" else compressed_fraction(config, job.model)
        total += (_mixed(prof["throughput_load_s"], f)
                  + w["decode_tokens"] * _mixed(prof["throughput_decode_token_s"], f)
                  + w["calls"] * _mixed(prof["throughput_call_s"], f))
    return total


def job_seconds(job: PlannedJob, config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any]) -> float:
    """Predicted wall seconds of one job (module docstring). ``MissingCalibration`` when the profile lacks what it
    needs (then the job is priced by the component laws alone, or not at all, by the caller)."""
    consts = profile.get("constants", {})
    tp_prof = (profile.get("models") or {}).get(job.model) if job.rule == Rule.THROUGHPUT else None
    if tp_prof and "throughput_fixed_s" in tp_prof:
        return throughput_seconds(job, config, tp_prof)
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
            abl = eng["selection_ablations_s"] * ablations_law(config, costs) / eng["selection_ablations_law"]
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
        fixed = prof["hessian_fixed_s"] if "hessian_fixed_s" in prof else _dense_fixed(prof, model)
        return fixed + seq_tokens(config) * hessian_layers_run(config, model) * _get(
            prof, "hessian_token_layer_s", model)
    if job.rule == Rule.DENSE_REFERENCE:
        return _dense_fixed(prof, model) + corpus_tokens(config, config["eval"]["distribution"]) * _get(
            prof, "reference_token_s", model)
    if job.rule == Rule.RHT_FINETUNE:
        return _get(prof, "rhtft_fixed_s", model) + rhtft_work(config)["tokens"] * _get(prof, "rhtft_token_s", model)
    if job.rule == Rule.LORA_FINETUNE:
        task = job.extra["task"]
        w = lora_work(config, task)
        train = (prof.get("lora_train_token_s") or {}).get(task)
        if train is None:
            raise MissingCalibration(f"the profile has no LoRA {task!r} rate for model {model!r}")
        evals = 1.0 + (prof.get("lora_second_eval") or {}).get(task, 0.5)
        return (_get(prof, "lora_fixed_s", model) + w["train"] * train
                + evals * w["final"] * _get(prof, "lora_eval_token_s", model))
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
    return (a["hessian_token_layer_s"] * len(model_layers(config, model))) / (
        b["hessian_token_layer_s"] * len(model_layers(config, like)))


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
        lines += ["", f"This machine's type is {job_profile.machine_type()}, and no profile of that type is "
                  f"committed: these predictions use the {theirs}'s. A stage can differ by ×2 across machine "
                  "types; measure this one with `caldera cost --configfile config/mini.yaml --calibrate "
                  "results/mini` after a default run."]
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
        done = list(read_index(config["record"])["jobs"])
    except (OSError, ValueError):
        return None
    if not done:
        return None
    rest = jobs_left(pred, done)
    return len(pred) - len(rest), rest


def jobs_left(pred: list[dict[str, Any]], done: Iterable[str]) -> list[dict[str, Any]]:
    """The predicted jobs (:func:`predict`) whose benchmark file (``…/benchmarks/<rule>/<job>.tsv``, a job's key
    in the run's record) is not among ``done``."""
    finished = {(Path(b).parent.name, Path(b).stem) for b in done}
    return [p for p in pred if (p["rule"], p["job"]) not in finished]


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
    rest = jobs_left(pred, done)
    s = sum(p["s"] for p in rest if p["s"] is not None)
    unpriced = sum(p["s"] is None for p in rest)
    par = max(1, int(cores or 1))
    left = f" (of {len(pred)}; the others are adopted from the record)" if len(rest) < len(pred) else ""
    return (f"predicted here: {len(rest)} jobs{left}, {_dur(s)} of job time, about {_dur(s / par)} with {par} "
            f"job{'s' if par > 1 else ''} at a time" + (f" ({unpriced} jobs unpriced)" if unpriced else "")
            + (f" (caldera cost, with the profile of another machine type, {theirs}: expect up to ×2)"
               if (theirs := other_machine(profile)) else " (caldera cost; a machine of another type differs)"))
