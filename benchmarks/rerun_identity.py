"""Is a killed and resumed run byte-identical to an uninterrupted one? Two fresh clones of this repository's HEAD
run the same workflow config on this machine: run A to the end, run B killed with SIGKILL (the whole process
group: Snakemake and its running jobs, as a power cut would) after ``--kill-after`` seconds, then resumed with
``--unlock`` (the killed Snakemake's lock stays on the folder) and ``--rerun-incomplete`` to the end. Every file
of the two runs' tables folder and results folder is compared by sha256.

    python benchmarks/rerun_identity.py --configfile config/smoke.yaml --kill-after 150 \\
        --out benchmarks/results/rerun_identity_smoke

Files that hold clock readings by design are listed apart, each with its reason (:data:`CLOCK_FILES`):
Snakemake's benchmark and log files, the jobs' ``*.timing.json``, the run's ``timings.*``, Table 6's throughput
measurements and the theory report (its runtime and the complexity exponents fitted to timings). In the claims,
the throughput rows print measured tokens/s: they are compared by verdict, every other claim byte for byte.
Every other file must be identical; the report lists any that is not, and any lock file left behind.
``--reuse-a`` / ``--reuse-b`` keep a finished run of an earlier call, so one killed run B can be compared with
uninterrupted runs of more than one commit.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: (glob on the path relative to the run's folder, why the file differs between two runs on one machine)
CLOCK_FILES = (
    ("results/*/benchmarks/*", "Snakemake's benchmark of a job: its wall time, CPU time and memory"),
    ("results/*/logs/*", "a job's log: its timestamps and durations"),
    ("*.timing.json", "a job's own timing file (wall seconds, finish time)"),
    ("*/timings.json", "the run's job timings"),
    ("*/timings.md", "the run's job timings"),
    ("*table6_throughput.*", "Table 6: measured tokens/s"),
    ("results/*/throughput/*", "a throughput job's measured tokens/s"),
    ("*/theory.md", "the theory report: its runtime and the complexity exponents fitted to timings"),
    ("*/theory.json", "the theory report: its runtime and the complexity exponents fitted to timings"),
    ("*/report.html", "Snakemake's report embeds the run's timings"),
)
THROUGHPUT_SOURCE = "Table 6"


def clock_reason(rel: str) -> str | None:
    """Why ``rel`` (a path relative to the run's folder) holds clock readings, or None."""
    for pattern, why in CLOCK_FILES:
        if fnmatch.fnmatch(rel, pattern):
            return why
    return None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hashes(run_dir: Path, folders: list[str]) -> dict[str, str]:
    """sha256 of every file under ``folders`` (relative to ``run_dir``), by relative path."""
    out = {}
    for folder in folders:
        for p in sorted((run_dir / folder).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(run_dir))] = sha256(p)
    return out


def compare_claims(a: Path, b: Path) -> dict[str, Any]:
    """Claims of two runs: every non-throughput claim equal as a whole, the throughput claims by verdict."""
    ca, cb = json.loads(a.read_text()), json.loads(b.read_text())
    if [(c["claim"], c["source"]) for c in ca] != [(c["claim"], c["source"]) for c in cb]:
        return {"same_claims": False}
    other = [i for i, c in enumerate(ca) if THROUGHPUT_SOURCE not in c["source"]]
    tp = [i for i, c in enumerate(ca) if THROUGHPUT_SOURCE in c["source"]]
    return {"same_claims": True, "claims": len(ca),
            "other_identical": sum(ca[i] == cb[i] for i in other), "other": len(other),
            "other_differing": [ca[i]["claim"] for i in other if ca[i] != cb[i]],
            "throughput_same_verdict": sum(ca[i]["verdict"] == cb[i]["verdict"] for i in tp), "throughput": len(tp),
            "throughput_verdicts": [[ca[i]["verdict"], cb[i]["verdict"]] for i in tp]}


def snakemake(run_dir: Path, configfile: str, cores: int, extra: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(run_dir)}
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile", configfile, *extra]
    with log.open("ab") as f:
        return subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)


def clone(dest: Path, commit: str | None = None) -> str:
    """A clone of this repository at ``commit`` (default HEAD) in ``dest`` with its C extension built in place
    (the runs import the clone's package, so without it they would take the Numba kernels); its short commit."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    if commit:
        subprocess.run(["git", "-C", str(dest), "checkout", "-q", commit], check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=dest, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(["git", "-C", str(dest), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def kernels(run_dir: Path) -> str:
    """Which CPU kernels the run in ``run_dir`` used: the C extension when the clone holds it, else Numba's."""
    return "C extension" if list((run_dir / "caldera/kernels").glob("_caldera_layer*.so")) else "Numba"


def run_to_end(run_dir: Path, configfile: str, cores: int, log: Path, extra: list[str] = ()) -> float:
    t0 = time.time()
    rc = snakemake(run_dir, configfile, cores, list(extra), log).wait()
    if rc != 0:
        raise SystemExit(f"snakemake in {run_dir} exited {rc}; see {log}")
    return time.time() - t0


def kill_run_b(b: Path, configfile: str, cores: int, kill_after: float, log: Path) -> dict[str, Any]:
    """Run B: started, SIGKILLed with its whole process group after ``kill_after`` seconds, unlocked and resumed
    with ``--rerun-incomplete`` to the end; when it was killed, how many jobs had finished, the resume's wall."""
    print(f"run B in {b}, killed after {kill_after:.0f} s", flush=True)
    t0 = time.time()
    proc = snakemake(b, configfile, cores, [], log)
    try:
        rc = proc.wait(timeout=kill_after)
        raise SystemExit(f"run B ended (exit {rc}) within {kill_after} s, before the kill; "
                         + ("give a shorter --kill-after" if rc == 0 else f"see {log}"))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = time.time() - t0
    done_before = len(list((b / "results").rglob("benchmarks/*/*.tsv")))
    # a killed Snakemake leaves its lock on the folder; the resume starts as its message says, with --unlock
    run_to_end(b, configfile, cores, log, ["--unlock"])
    wall_b = run_to_end(b, configfile, cores, log, ["--rerun-incomplete"])
    return {"run_b_killed_at_s": round(killed_at, 1), "run_b_jobs_finished_before_the_kill": done_before,
            "run_b_rerun_wall_s": round(wall_b, 1)}


def tables_dir(run_dir: Path, configfile: str) -> str:
    from caldera.strict_yaml import load_yaml_strict

    return str(load_yaml_strict(run_dir / configfile)["tables_dir"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="config/smoke.yaml")
    ap.add_argument("--kill-after", type=float, required=True, help="seconds into run B at which it is killed")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--workdir", help="where the two clones go (default: a new temporary folder)")
    ap.add_argument("--out", required=True, help="write OUT.json and OUT.md")
    ap.add_argument("--reuse-a", action="store_true",
                    help="keep run A of an earlier call in WORKDIR/a (finished, same config) and redo only run B, "
                         "at run A's commit unless --commit-b says otherwise (the report names both)")
    ap.add_argument("--commit-b", help="the commit run B clones (default: run A's with --reuse-a, else HEAD)")
    ap.add_argument("--reuse-b", action="store_true",
                    help="keep the killed and resumed run B of an earlier call in WORKDIR/b (its kill and resume "
                         "in WORKDIR/b.run.json) and compare it with WORKDIR/a")
    args = ap.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="rerun-identity-"))
    work.mkdir(parents=True, exist_ok=True)
    a, b = work / "a", work / "b"
    if args.reuse_a:
        if not (a / "results").is_dir():
            raise SystemExit(f"--reuse-a: {a} holds no finished run; run without --reuse-a first")
        commit = subprocess.run(["git", "-C", str(a), "rev-parse", "--short", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        try:
            wall_a = float(json.loads((work / "a.run.json").read_text())["run_a_wall_s"])
        except (OSError, ValueError, KeyError):
            wall_a = float("nan")
    else:
        commit = clone(a)
    if args.reuse_b:
        try:
            run_b = json.loads((work / "b.run.json").read_text())
        except (OSError, ValueError):
            raise SystemExit(f"--reuse-b: {work / 'b.run.json'} is missing or unreadable; run without --reuse-b "
                             "first") from None
    else:
        if b.exists():
            subprocess.run(["rm", "-rf", str(b)], check=True)
        run_b = {"commit_b": clone(b, args.commit_b or (commit if args.reuse_a else None))}
    if not args.reuse_a:
        print(f"run A (uninterrupted) in {a}", flush=True)
        wall_a = run_to_end(a, args.configfile, args.cores, work / "a.log")
        (work / "a.run.json").write_text(json.dumps({"run_a_wall_s": round(wall_a, 1)}) + "\n")
    if not args.reuse_b:
        run_b.update(kill_run_b(b, args.configfile, args.cores, args.kill_after, work / "b.log"))
        (work / "b.run.json").write_text(json.dumps(run_b, indent=1) + "\n")
        print(f"run B resumed to the end in {run_b['run_b_rerun_wall_s']:.0f} s", flush=True)

    td = tables_dir(a, args.configfile)
    folders = ["results"] + ([] if td.startswith("results/") else [td])
    ha, hb = hashes(a, folders), hashes(b, folders)
    differ, clock = [], {}
    for rel in sorted(set(ha) | set(hb)):
        if ha.get(rel) == hb.get(rel):
            continue
        why = clock_reason(rel)
        if why:
            clock[rel] = why
        else:
            differ.append({"path": rel, "a": ha.get(rel), "b": hb.get(rel)})
    claims = f"{tables_dir(a, args.configfile)}/claims.json"
    differ = [d for d in differ if d["path"] not in (claims, claims.replace(".json", ".md"))]
    res = {"config": args.configfile, "commit": commit, "commit_b": run_b["commit_b"],
           "machine": os.uname().nodename, "cores": args.cores, "kernels_a": kernels(a), "kernels_b": kernels(b),
           "run_a_wall_s": round(wall_a, 1),
           "run_b_killed_at_s": run_b["run_b_killed_at_s"],
           "run_b_jobs_finished_before_the_kill": run_b["run_b_jobs_finished_before_the_kill"],
           "run_b_rerun_wall_s": run_b["run_b_rerun_wall_s"],
           "files": len(set(ha) | set(hb)), "identical": sum(ha.get(p) == hb.get(p) for p in set(ha) | set(hb)),
           "clock_files_differing": clock, "differing": differ,
           "claims": compare_claims(a / claims, b / claims),
           "locks_left": [str(p.relative_to(w)) for w in (a, b) for p in w.rglob("*.lock")
                          if not {".snakemake", ".venv"} & set(p.parts)]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(res))
    print(render(res))
    return 0 if not differ and res["claims"].get("other_differing") == [] and not res["locks_left"] else 1


def render(r: dict[str, Any]) -> str:
    c = r["claims"]
    kept = " (not recorded: kept from an earlier call)" if r["run_a_wall_s"] != r["run_a_wall_s"] else ""
    at = r["commit"] if r.get("commit_b", r["commit"]) == r["commit"] else f"{r['commit']} (A) and {r['commit_b']} (B)"
    lines = [f"# Kill and rerun against an uninterrupted run: `{r['config']}` at {at}", "",
             f"- Run A, uninterrupted: {r['run_a_wall_s']:.0f} s{kept}. Run B: SIGKILL to the whole process group at "
             f"{r['run_b_killed_at_s']:.0f} s ({r['run_b_jobs_finished_before_the_kill']} jobs finished), then "
             f"`--rerun-incomplete` to the end in {r['run_b_rerun_wall_s']:.0f} s ({r['cores']} cores).",
             f"- Files compared by sha256: {r['files']}; identical: {r['identical']}; differing clock files: "
             f"{len(r['clock_files_differing'])}; **other differing files: {len(r['differing'])}**.",
             f"- Claims: {c.get('other_identical')}/{c.get('other')} non-throughput claims identical; throughput "
             f"claims with the same verdict: {c.get('throughput_same_verdict')}/{c.get('throughput')}.",
             f"- CPU kernels: {r.get('kernels_a', '?')} (A), {r.get('kernels_b', '?')} (B).",
             f"- Lock files left: {len(r['locks_left'])}."]
    if r["differing"]:
        lines += ["", "Differing files that hold no clock reading:", *(f"- `{d['path']}`" for d in r["differing"])]
    if c.get("other_differing"):
        lines += ["", "Differing claims:", *(f"- {x}" for x in c["other_differing"])]
    by_reason: dict[str, int] = {}
    for why in r["clock_files_differing"].values():
        by_reason[why] = by_reason.get(why, 0) + 1
    if by_reason:
        lines += ["", "Differing clock files, by reason:", *(f"- {n}: {why}" for why, n in by_reason.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
