"""The job-level prediction as text: the report ``caldera cost`` prints (per stage and rule, the total, the wall
clock on a number of cores, what the run's record leaves to run) and the line at the start of a run's log."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from caldera.experiments.planning import job_profile
from caldera.experiments.planning.job_costs import predict
from caldera.experiments.planning.job_profile import covers, load_profile, other_machine


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
