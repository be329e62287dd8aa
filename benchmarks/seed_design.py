"""The seed design of a run, from committed spreads at 80 % power (``caldera.experiments.planning.seed_design``).

Reads, all committed and none of them the run being designed:

* ``--run``: a finished run's tables folder (its table JSONs and ``timings.json``): which pairs its perplexity
  claims compare, their window half-widths at its windows, the paper's ratio of the two rows, and what one
  replicate job of each variant costs (its replicate job where it had one, else its compression job plus the
  mean evaluation part of its model's replicate jobs);
* ``--spreads``: table folders with seed blocks (e.g. ``paper_tables/mini-seeds``, six seeds of every SmolLM2 row):
  per stand-in, the per-seed paired log-ratio spread of each pair, the larger of the pair's own and the block's
  ``2 σ̂²`` (as :func:`caldera.stats.paired_seed_part` decides); a pair absent from the spreads takes its
  stand-in's block.

and writes the design (seeds per variant within ``--budget-min`` of replicate jobs) with every comparison's
need, its power at the design and whether it is within reach::

    python benchmarks/seed_design.py --run paper_tables/generated --spreads paper_tables/mini-seeds \\
        paper_tables/mini-full --budget-min 27 --out benchmarks/results/seed_design_mini.md
"""

from __future__ import annotations

import argparse
import glob
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from caldera.atomic import write_atomic, write_json
from caldera.experiments.planning.seed_design import POWER, Comparison, allocate
from caldera.experiments.report.realization_pool import attach_pools, blocks, per_seed_log_ppl
from caldera.experiments.report.table_claims import extra_method_claims, table_claims

RHTFT = ("table3_", "table4_")


def _tables(folder: str) -> dict[str, dict[str, Any]]:
    return {Path(p).stem: json.loads(Path(p).read_text()) for p in sorted(glob.glob(f"{folder}/table*_*.json"))
            if not Path(p).stem.startswith(RHTFT) and Path(p).stem.startswith(("table1", "table2", "table7"))}


def _paper_ratio(tables: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    for tab in tables.values():
        rows = [r for r in tab.get("rows", []) if r.get("variant") in (a, b)]
        for pm in dict.fromkeys(r["paper_model"] for r in rows):
            pa = [r["paper"].get("wiki2_ppl") for r in rows if r["paper_model"] == pm and r["variant"] == a]
            pb = [r["paper"].get("wiki2_ppl") for r in rows if r["paper_model"] == pm and r["variant"] == b]
            if pa and pb and pa[0] and pb[0]:
                return pa[0] / pb[0]
    return None


def pair_spreads(spread_tables: dict[str, dict[str, Any]]) -> tuple[dict, dict]:
    """``({(a, b): var of one per-seed log ratio}, {stand-in: 2 σ̂² of its block})`` from committed seed blocks."""
    blk = blocks(spread_tables)
    logs: dict[str, tuple[list, np.ndarray]] = {}
    for tab in spread_tables.values():
        for v, info in tab.get("realizations", {}).items():
            y = per_seed_log_ppl(tab, v)
            if v not in logs and info.get("random") and y is not None and y.size >= 2:
                logs[v] = (list(info["seeds"])[:y.size], y)
    own = {}
    for a, (sa, ya) in logs.items():
        for b, (sb, yb) in logs.items():
            common = [s for s in sa if s in sb]
            if a != b and len(common) >= 2:
                d = np.array([ya[sa.index(s)] - yb[sb.index(s)] for s in common])
                own[(a, b)] = float(d.var(ddof=1))
    return own, {st: 2.0 * b["var"] for st, b in blk.items()}


def job_costs(timings: dict[str, Any], variants: list[str]) -> dict[str, float]:
    """Seconds of one more realization of each variant, from a run's ``timings.json``."""
    jobs = timings["jobs"]
    rep = {j["job"].rsplit("-seed", 1)[0]: [] for j in jobs if j["rule"] == "replicate"}
    for j in jobs:
        if j["rule"] == "replicate":
            rep[j["job"].rsplit("-seed", 1)[0]].append(j["s"])
    comp = {j["job"]: j["s"] for j in jobs if j["rule"] == "compress_variant"}
    eval_part: dict[str, list[float]] = {}
    for v, ts in rep.items():
        if v in comp:
            eval_part.setdefault(v.split("-")[0], []).append(float(np.mean(ts)) - comp[v])
    out = {}
    for v in variants:
        if v in rep:
            out[v] = float(np.mean(rep[v]))
        elif v in comp and eval_part.get(v.split("-")[0]):
            out[v] = comp[v] + float(np.mean(eval_part[v.split("-")[0]]))
        else:
            raise ValueError(f"{v}: no replicate or compression job in the timings to price it")
    return out


def comparisons(run_tables: dict[str, dict[str, Any]], own: dict, block: dict) -> list[Comparison]:
    """The perplexity comparisons of the run's claims, each with the paper's effect and its spreads."""
    tables = attach_pools(run_tables)
    seen, out = set(), []
    for c in table_claims(tables) + extra_method_claims(tables):
        for iv in c.get("intervals", []):
            if iv.get("kind") != "ppl ratio":
                continue
            a, b = iv["pair"]
            paper = _paper_ratio(run_tables, a, b)
            if paper is None or (a, b) in seen:
                continue
            seen.add((a, b))
            stand = next(r["stand_in"] for t in run_tables.values() for r in t["rows"] if r.get("variant") == a)
            var = max(own.get((a, b), 0.0), block.get(stand, 0.0))
            if var == 0.0:
                continue  # no committed spread for this stand-in: nothing to design from
            out.append(Comparison(c["claim"], a, b, stand, math.log(paper), iv["window_half"], math.sqrt(var)))
    return out


def render(design: dict[str, Any], args: argparse.Namespace) -> str:
    lines = ["# Seed design at 80 % power, from committed spreads", "",
             f"Command: `python benchmarks/seed_design.py --run {args.run} --spreads {' '.join(args.spreads)} "
             f"--budget-min {args.budget_min:g}`. Effects: the paper's own Wiki2 ratio of the two rows; window "
             "half-widths: the run's paired window interval; per-seed spread: the larger of the pair's own and its "
             "stand-in's block variance in the spreads folders (never this run's outcome). Power "
             f"{100 * POWER:.0f} % by the normal approximation of the report's paired interval "
             "(`caldera.experiments.planning.seed_design`).", "",
             f"Budget {design['budget_s'] / 60:.1f} min of replicate jobs, spent {design['spent_s'] / 60:.1f} min.", "",
             "| variant | seeds |", "|---|---|"]
    lines += [f"| {v} | {s} |" for v, s in design["seeds"].items()] or ["| — | every variant once |"]
    lines += ["", "| claim | pair | paper ratio | window ±% | per-seed sd ±% | seeds for 80 % | funded | power at the "
              "design |", "|---|---|---|---|---|---|---|---|"]
    for r in design["comparisons"]:
        lines.append(f"| {r['claim']} | {r['a']} / {r['b']} | ×{math.exp(r['effect']):.3f} | "
                     f"{100 * math.expm1(r['window_half']):.1f} | {100 * math.expm1(r['sd_pair']):.1f} | "
                     f"{r['need'] if r['need'] is not None else 'out of reach'} | {'yes' if r['funded'] else 'no'} "
                     f"| {r['power_at_design']:.2f} ({r['seeds']} seed{'s' if r['seeds'] > 1 else ''}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a finished run's tables folder (table JSONs, timings.json)")
    ap.add_argument("--spreads", nargs="+", required=True, help="committed table folders with seed blocks")
    ap.add_argument("--budget-min", type=float, required=True, help="minutes of replicate jobs to spend")
    ap.add_argument("--out", required=True, help="the record (.md; a .json beside it)")
    args = ap.parse_args(argv)
    if args.budget_min < 0:
        ap.error("--budget-min must be >= 0")
    spread_tables: dict[str, dict[str, Any]] = {}
    for i, folder in enumerate(args.spreads):
        spread_tables.update({f"{i}:{k}": t for k, t in _tables(folder).items()})
    own, block = pair_spreads(spread_tables)
    run_tables = _tables(args.run)
    comps = comparisons(run_tables, own, block)
    costs = job_costs(json.loads((Path(args.run) / "timings.json").read_text()),
                      sorted({v for c in comps for v in (c.a, c.b)}))
    design = allocate(comps, costs, 60.0 * args.budget_min)
    write_atomic(args.out, render(design, args))
    write_json(str(Path(args.out).with_suffix(".json")), {**design, "job_seconds": costs})
    print(render(design, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
