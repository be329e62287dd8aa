"""Between-run drift of Table 6's throughput on one machine type: the same config run several times (each run a
fresh clone, alone on the machine), each variant's median tokens/s compared across the runs.

The largest max/min ratio of one variant's median across runs is how far a whole run moves a variant's speed.
Table 6's claims pair the variants round by round within one job
(:func:`caldera.experiments.report.table6.compare_rounds`), which cancels such a shift when it moves every variant
of the job alike; ``benchmarks/throughput_interleaved_drift.py`` records how those paired intervals behave across
reruns.

    python benchmarks/throughput_drift.py RUN.json [RUN.json ...] --out benchmarks/results/throughput_drift_cpu

where each ``RUN.json`` is a run's ``table6_throughput.json`` (its file name, without the suffix, labels it)."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def drift(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``runs``: label -> a run's Table 6 JSON. Per (variant, protocol) measured in every run: the median
    tokens/s of each run and their max/min ratio; ``max_ratio`` over all of them."""
    if len(runs) < 2:
        raise ValueError(f"drift needs at least two runs, got {len(runs)}")
    protocols = None
    for label, tab in runs.items():
        p = tuple(tab["protocols"])
        if protocols is not None and p != protocols:
            raise ValueError(f"run {label}: protocols {p}, the others {protocols}")
        protocols = p
    variants = sorted(set.intersection(*(set(t["measured"]) for t in runs.values())))
    if not variants:
        raise ValueError("no variant is measured in every run")
    rows = []
    for v in variants:
        for p in protocols:
            medians = {label: statistics.median(t["measured"][v][p]["tokens_per_s"]) for label, t in runs.items()}
            rows.append({"variant": v, "protocol": p, "medians": medians,
                         "ratio": max(medians.values()) / min(medians.values())})
    return {"runs": list(runs), "rows": rows, "max_ratio": max(r["ratio"] for r in rows)}


def render(d: dict[str, Any]) -> str:
    """Markdown of :func:`drift`'s result."""
    head = "| variant | protocol | " + " | ".join(d["runs"]) + " | max / min |"
    lines = [head, "|" + "---|" * (len(d["runs"]) + 3)]
    for r in d["rows"]:
        lines.append(f"| {r['variant']} | {r['protocol']} | "
                     + " | ".join(f"{r['medians'][k]:.2f}" for k in d["runs"]) + f" | ×{r['ratio']:.2f} |")
    return ("Median tokens/s of each variant in each run (Table 6's JSON of each run), and its max / min across "
            f"the runs. Largest: **×{d['max_ratio']:.2f}**.\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="table6_throughput.json of each run")
    ap.add_argument("--out", help="write OUT.json and OUT.md")
    a = ap.parse_args(argv)
    d = drift({Path(p).stem: json.loads(Path(p).read_text()) for p in a.runs})
    md = render(d)
    print(md)
    if a.out:
        Path(a.out + ".json").write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
        Path(a.out + ".md").write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
