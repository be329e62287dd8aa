"""``caldera cost`` against mini-full's committed record: the jobs' measured seconds (their Snakemake benchmarks,
kept in ``paper_tables/mini-full/record/``) beside the prediction of this machine type's job profile, per stage,
for the jobs that ran with nothing heavy beside them and for each sitting as a whole.

    python benchmarks/mini_full_cost_check.py [--profile benchmarks/results/jobs-cpu-intel-xeon-amx.json]

A job counts as clean when its sitting ran alone (the record's sitting note says "nothing heavy ran beside it"),
or when it ran in the third sitting outside the two windows in which the full test suite ran beside it
(:data:`BUSY`, UTC, from the suite's logs of that session).
"""

from __future__ import annotations

import argparse
import calendar
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "paper_tables/mini-full/record"
#: (sitting commit, [(start, end) UTC]) : the windows in which the full test suite ran beside mini-full
BUSY = {"9eef729": [("2026-11-29T02:39:50Z", "2026-11-29T02:40:34Z"), ("2026-11-29T02:47:58Z", "2026-11-29T03:18:35Z")]}


def _utc(s: str) -> float:
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))


def recorded_jobs(record: Path = RECORD) -> list[dict[str, Any]]:
    """Every recorded job with its files: rule, job, seconds, sitting commit (7 digits), start and end."""
    rec = json.loads((record / "record.json").read_text())
    out = []
    for key, e in sorted(rec["jobs"].items()):
        tsv = record / "files" / key
        if not tsv.is_file():
            continue
        s = float(tsv.read_text().splitlines()[1].split("\t")[0])
        out.append({"rule": Path(key).parent.name, "job": Path(key).stem, "s": s, "sitting": e["commit"][:7],
                    "end": float(e["finished_at"]), "start": float(e["finished_at"]) - s})
    return out


def clean(jobs: list[dict[str, Any]], record: Path = RECORD) -> list[dict[str, Any]]:
    """The jobs that ran with nothing heavy beside them (module docstring)."""
    rec = json.loads((record / "record.json").read_text())
    alone = {s["commit"][:7] for s in rec["sittings"] if "nothing heavy ran beside it" in s["machine"]}
    out = []
    for j in jobs:
        busy = [(_utc(a), _utc(b)) for a, b in BUSY.get(j["sitting"], [])]
        if j["sitting"] in alone or (busy and not any(j["start"] < b and j["end"] > a for a, b in busy)):
            out.append(j)
    return out


def main(argv: list[str] | None = None) -> int:
    from caldera.experiments.planning import job_check, job_costs, job_profile
    from caldera.experiments.planning.cost import load_costs, load_workflow_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="a job profile (default: this machine type's)")
    args = ap.parse_args(argv)
    config = load_workflow_config(ROOT / "config/mini-full.yaml")
    costs = load_costs("cpu")
    profile = job_profile.load_profile("cpu", args.profile)
    pred = job_costs.predict(config, profile, costs)
    jobs = recorded_jobs()
    groups = [("clean jobs", clean(jobs))]
    groups += [(f"sitting at {c}, all its jobs", [j for j in jobs if j["sitting"] == c])
               for c in dict.fromkeys(j["sitting"] for j in jobs)]
    print(f"mini-full's record against the profile of `{profile['machine']}` ({profile['source']})\n")
    for name, group in groups:
        print(f"## {name}\n")
        print(job_check.check_report(job_check.check_runs(pred, group)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
