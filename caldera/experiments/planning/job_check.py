"""The job-level prediction (:func:`caldera.experiments.planning.job_costs.predict`) against a run's measured jobs:
per job, rule and stage, where the model is off, and the text ``caldera cost --check`` prints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from caldera.experiments.planning.job_profile import read_benchmarks
from caldera.experiments.planning.rules import STAGES


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


def check_report(res: dict[str, Any]) -> str:
    """The text ``caldera cost --check`` prints: per stage and rule predicted vs measured, and the jobs furthest
    off."""
    from caldera.experiments.planning.cost import CHECK_MARGIN, duration

    def rows(items: list[dict[str, Any]], key: str, width: int) -> list[str]:
        out = [f"{key:<{width}}{'jobs':>6}{'predicted':>12}{'measured':>12}{'ratio':>8}"]
        for r in items:
            flag = "" if r["within"] else f"  off by more than ±{CHECK_MARGIN:.0%}"
            out.append(f"{r[key]:<{width}}{r['jobs']:>6}{duration(r['predicted_s']):>12}{duration(r['measured_s']):>12}"
                       f"{r['ratio']:>8.2f}{flag}")
        return out

    t = res["total"]
    lines = rows(res["stages"], "stage", 44) + [""] + rows(res["rules"], "rule", 20) + [
        "", f"total: {t['jobs']} jobs, predicted {duration(t['predicted_s'])}, measured {duration(t['measured_s'])}, "
        f"ratio {t['ratio']:.2f}" + ("" if t["within"] else f"  off by more than ±{CHECK_MARGIN:.0%}")]
    worst = sorted((j for j in res["jobs"] if j["job"] != "*"), key=lambda j: -abs(math.log(max(j["ratio"], 1e-9))))
    if worst:
        lines += ["", "furthest off (job: predicted / measured):"]
        lines += [f"  {j['rule']}/{j['job']}: {duration(j['s'])} / {duration(j['measured_s'])} (×{j['ratio']:.2f})"
                  for j in worst[:8]]
    for key, what in (("not_run", "predicted, not in the run"), ("not_predicted", "in the run, not predicted"),
                      ("unpriced", "in the run, unpriced")):
        if res[key]:
            lines.append(f"{what}: {len(res[key])} ({', '.join(res[key][:6])}{', …' if len(res[key]) > 6 else ''})")
    return "\n".join(lines)
