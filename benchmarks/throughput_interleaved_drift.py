"""How Table 6's interleaved rounds behave across reruns: the throughput job
(:func:`caldera.experiments.jobs.throughput.step_throughput`) run twice, each time in a fresh process, on the same
checkpoints, and every pair that Table 6's claims compare decided on each run (the paired interval of the per-round
log ratio, :func:`caldera.experiments.report.table6.compare_rounds`).

    python benchmarks/throughput_interleaved_drift.py --config config/smoke.yaml --results results/smoke \\
        --settings config/mini.yaml --runs 2 --out benchmarks/results/throughput_interleaved_drift_cpu

``--config``: the workflow config whose Table 6 variants and checkpoints (``<results>/compressed/<id>/checkpoint``)
are timed; ``--settings``: the config whose ``throughput`` block times them (default: ``--config``'s). Each run
is a subprocess of this script (``--measure``) that calls the job's step function alone, so the runs share no
process state. The record names the machine (lscpu's model name and whether it has AVX-512), the load average
around each run and the commit."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _load(path: str) -> dict[str, Any]:
    from caldera.experiments.planning.cost import load_workflow_config

    return load_workflow_config(Path(path))


def measure(config_path: str, results: str, settings_path: str, out: str) -> None:
    """One run: the throughput job of every Table 6 model of ``config_path`` (settings of ``settings_path``),
    its results written to ``out`` as ``{model: the job's result}``."""
    from caldera.experiments.jobs.throughput import step_throughput
    from caldera.experiments.planning.settings import RunContext, ThroughputSettings
    from caldera.experiments.planning.throughput_rows import throughput_models

    cfg = _load(config_path)
    tp = ThroughputSettings.from_block(yaml.safe_load(Path(settings_path).read_text()).get("throughput"))
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, variants in throughput_models(cfg).items():
            ck = {v: str(Path(results) / "compressed" / v / "checkpoint") for v, s in variants.items()
                  if s.method != "dense"}
            res[model] = step_throughput(tp, RunContext.from_config(cfg, [model]), list(variants.values()), ck,
                                         str(Path(tmp) / f"{model}.json"), torch_threads=1)
    Path(out).write_text(json.dumps(res))


def decide_pairs(config: dict[str, Any], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of Table 6's claims (:func:`caldera.experiments.report.table6.claim_pairs`) decided on each run,
    paper's protocol first: ``[{"claim", "a", "b", "paper", "protocol", "runs": [compare_rounds of each run]}]``."""
    from caldera.experiments.planning.throughput_rows import PROTOCOLS
    from caldera.experiments.report.claim_registry import THROUGHPUT, entries
    from caldera.experiments.report.table6 import (
        ThroughputTablePlan,
        build_throughput_table,
        claim_pairs,
        compare_rounds,
    )

    plan = ThroughputTablePlan.from_config(config)
    tabs = []
    for r in runs:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "throughput").mkdir()
            for model, res in r.items():
                (Path(tmp) / "throughput" / f"{model}.json").write_text(json.dumps(res))
            tabs.append(build_throughput_table(tmp, plan))
    out = []
    for e in entries(THROUGHPUT):
        for p in claim_pairs(tabs[0], *e.compares):
            for proto in PROTOCOLS:
                cmp = [compare_rounds(t["measured"][p["a"]][proto]["tokens_per_s"],
                                      t["measured"][p["b"]][proto]["tokens_per_s"]) for t in tabs]
                out.append({"claim": e.claim, "a": p["a"], "b": p["b"], "paper": p["paper"], "protocol": proto,
                            "runs": cmp})
    return out


def _machine() -> dict[str, Any]:
    try:
        txt = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        txt = ""
    info = dict(line.split(":", 1) for line in txt.splitlines() if ":" in line)
    flags = info.get("Flags", "")
    return {"model_name": info.get("Model name", platform.processor()).strip(), "cpus": os.cpu_count(),
            "avx512f": "avx512f" in flags.split()}


def _commit() -> str:
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def render(rec: dict[str, Any]) -> str:
    """Markdown of the record."""
    from caldera.experiments.planning.throughput_rows import PROTOCOL_LABEL

    def iv(c):
        word = {1: "faster", -1: "slower", 0: "undecided"}[c["direction"]]
        return f"×{c['ratio']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] {word}"

    m, s = rec["machine"], rec["settings"]
    lines = [
        f"# Table 6: interleaved rounds, two runs on the same checkpoints ({m['model_name']})", "",
        f"Made with `{rec['command']}` at commit {rec['commit']}.", "",
        f"Machine: {m['model_name']}, {m['cpus']} CPUs, AVX-512 {'yes' if m['avx512f'] else 'no'} (lscpu). "
        f"{rec['beside']}", "",
        f"Checkpoints: `{rec['results']}` (the workflow run of `{rec['config']}`); settings: the `throughput` block "
        f"of `{rec['settings_config']}`: {s['rounds']} rounds, seed {s['seed']}, {s['warmup']} warm-up call(s), "
        f"{s['calls']} single-token forwards and {s['new_tokens']} generated tokens per round, 1 torch thread. Each "
        "run is a separate process that loads every variant and times them in the job's randomized interleaved "
        "rounds; both runs use the same seed, so the same orders.", "",
        "| run | wall (s) | loading (s) | rounds (s) | load average before → after |", "|---|---|---|---|---|",
    ]
    for i, r in enumerate(rec["runs"], 1):
        lines.append(f"| {i} | {r['wall_s']:.1f} | {r['load_s']:.1f} | {r['rounds_s']:.1f} | "
                     f"{r['loadavg_before']} → {r['loadavg_after']} |")
    lines += ["", "Per pair (A claimed faster than B): the geometric mean of the per-round tokens/s ratio A / B with "
              "its 95 % paired Student-t interval over the rounds, and the verdict it gives; the paper's ratio for "
              "the same rows beside.", "",
              "| claim | A / B | protocol | paper | " + " | ".join(f"run {i}" for i in range(1, len(rec["runs"]) + 1))
              + " | same verdict |",
              "|---|---|---|---|" + "---|" * len(rec["runs"]) + "---|"]
    for p in rec["pairs"]:
        paper = ", ".join(f"×{x:.2f} ({mm})" for mm, x in p["paper"]) or "—"
        same = len({c["direction"] for c in p["runs"]}) == 1
        lines.append(f"| {p['claim'].split(' (')[0]} | {p['a']} / {p['b']} | {PROTOCOL_LABEL[p['protocol']]} | "
                     f"{paper} | " + " | ".join(iv(c) for c in p["runs"]) + f" | {'yes' if same else 'no'} |")
    lines += ["", rec["summary"], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="workflow config of the checkpoints")
    ap.add_argument("--results", required=True, help="that run's results folder (results/<name>)")
    ap.add_argument("--settings", help="config whose throughput block times them (default: --config)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--beside", default="", help="what ran beside the runs on the machine, for the record")
    ap.add_argument("--out", help="write OUT.json and OUT.md")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # one run, in this process: its results to this file
    a = ap.parse_args(argv)
    settings = a.settings or a.config
    if a.measure:
        measure(a.config, a.results, settings, a.measure)
        return 0
    if a.runs < 2:
        raise SystemExit("--runs: at least 2 runs are needed to compare them")
    runs, meta = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            out = Path(tmp) / f"run{i}.json"
            before = " ".join(f"{x:.2f}" for x in os.getloadavg())
            subprocess.run([sys.executable, __file__, "--config", a.config, "--results", a.results, "--settings",
                            settings, "--measure", str(out)], check=True, cwd=ROOT)
            after = " ".join(f"{x:.2f}" for x in os.getloadavg())
            r = json.loads(out.read_text())
            runs.append(r)
            meta.append({"wall_s": sum(j["wall_s"] for j in r.values()),
                         "rounds_s": sum(j["rounds_s"] for j in r.values()),
                         "load_s": sum(v["load_s"] for j in r.values() for v in j["variants"].values()),
                         "loadavg_before": before, "loadavg_after": after})
    pairs = decide_pairs(_load(a.config), runs)
    paper_proto = [p for p in pairs if p["protocol"] == "single_token"]
    same = sum(len({c["direction"] for c in p["runs"]}) == 1 for p in paper_proto)
    overlap = sum(max(c["lo"] for c in p["runs"]) <= min(c["hi"] for c in p["runs"]) for p in paper_proto)
    summary = (f"Paper's protocol: {same} of {len(paper_proto)} pairs get the same verdict in every run; the runs' "
               f"intervals overlap for {overlap} of {len(paper_proto)}.")
    rec = {"command": shlex.join(["python", "benchmarks/throughput_interleaved_drift.py", *(argv or sys.argv[1:])]),
           "commit": _commit(), "machine": _machine(), "beside": a.beside, "config": a.config,
           "results": a.results, "settings_config": settings,
           "settings": next(iter(runs[0].values()))["settings"], "runs": meta, "pairs": pairs, "summary": summary,
           "raw": runs}
    if a.out:  # the JSON keeps both runs' per-round figures ("raw") beside the decided pairs
        Path(a.out + ".json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        Path(a.out + ".md").write_text(render(rec))
    print(render(rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
