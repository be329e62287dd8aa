"""Which broken configs a workflow refuses before any job runs: `snakemake -n` on broken variants of
config/smoke.yaml, one class of mistake each.

    python benchmarks/config_refusals.py [--repo DIR] [--out FILE.json]

``--repo``: the checkout whose Snakefile, workflow/ and config/ are tried (default: this one), with the Python
that runs this script (its caldera is what the workflow imports: run it from that checkout's environment, or
with PYTHONPATH=DIR). Each class is one edit of smoke.yaml's text; the dry run is given ``TIMEOUT_S`` seconds.
Outcome per class: ``refused`` (the dry run fails; its first error line is kept), ``accepted`` (the dry run
plans the jobs: any refusal would come from a job, after work) or ``timeout``. A dry run runs no job, so a
class accepted here is not shown to fail later: that needs the jobs themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMEOUT_S = 300


def _replace(old: str, new: str):
    """An edit that replaces the first ``old`` of the text with ``new``."""
    return lambda t: t.replace(old, new, 1)


def _sub(pattern: str, repl: str):
    """An edit that substitutes the first match of ``pattern``."""
    return lambda t: re.sub(pattern, repl, t, count=1)


#: the merge class's two edits: wiki's mapping anchored, c4 written as wiki's merged with its own values
_ANCHOR_WIKI = _replace("wiki: {source: wiki-squad", "wiki: &w {source: wiki-squad")
_MERGE_C4 = _replace("c4: {source: coqa-stories, protocol: windows, seq_len: 128, n_windows: 2, seed: 0}",
                     "c4: {<<: *w, source: coqa-stories, protocol: windows, seed: 0}")

#: class -> (description, edit of smoke.yaml's text). Each edit must change the text (checked).
CLASSES: dict[str, tuple[str, object]] = {
    "seed-beyond-64-bits": ("calibration.seed: 2**70",
                            _replace("  seed: 0\n  batch_size", "  seed: 1180591620717411303424\n  batch_size")),
    "calibration-beyond-the-text": ("calibration.n_samples: 10**12",
                                    _sub(r"(\n  n_samples:) *\d+", r"\1 1000000000000")),
    "source-folder-missing": ("a model source folder that does not exist",
                              _sub(r"(\n    source:) *\S+", r"\1 ./no/such/model")),
    "device-cuda-without-gpu": ("device: cuda on a machine with no GPU", lambda t: "device: cuda\n" + t),
    "tables-dir-unwritable": ("tables_dir under a file (not writable)",
                              _replace("tables_dir: results/smoke/tables", "tables_dir: README.md/tables")),
    "windows-beyond-the-text": ("eval.ppl.wiki.n_windows: 1e9",
                                _replace("seq_len: 128, n_windows: 2}", "seq_len: 128, n_windows: 1000000000}")),
    "new-tokens-beyond-positions": ("throughput.new_tokens: 1e9",
                                    _sub(r"new_tokens: *\d+", "new_tokens: 1000000000")),
    "windows-1e9-as-written": ("eval.ppl.wiki.n_windows: 1e9, written so (YAML reads it as text)",
                               _replace("seq_len: 128, n_windows: 2}", "seq_len: 128, n_windows: 1e9}")),
    "new-tokens-1e9-as-written": ("throughput.new_tokens: 1e9, written so (YAML reads it as text)",
                                  _sub(r"new_tokens: *\d+", "new_tokens: 1e9")),
    "replicates-seeds-empty": ("replicates.seeds: []", _replace("seeds: [1, 2]", "seeds: []")),
    "layers-per-job-float": ("layers_per_job: 30.0", _replace("layers_per_job: 30 ", "layers_per_job: 30.0 ")),
    "layers-floats": ("layers: [0.0, 1.0]", _replace("layers: [0, 1] ", "layers: [0.0, 1.0] ")),
    "merge-with-override": ("a YAML merge with an override (should be accepted)", lambda t: _MERGE_C4(_ANCHOR_WIKI(t))),
}
#: the classes a correct workflow accepts
SHOULD_ACCEPT = {"merge-with-override"}

#: what each class did at 4ff488c when its jobs ran, as the adversarial test that found the classes recorded it
#: (not re-run here: a dry run runs no job). "refused later": a job failed; "accepted": the run went on with a
#: silent change or no error.
RECORDED_LATER = {
    "seed-beyond-64-bits": ("refused later", "Overflow when unpacking long long, naming neither the input nor the fix"),
    "calibration-beyond-the-text": ("refused later", "ran for more than 300 s with no output"),
    "source-folder-missing": ("refused later", "failed inside a job"),
    "device-cuda-without-gpu": ("refused later", "failed inside a job"),
    "tables-dir-unwritable": ("refused later", "failed inside a job"),
    "windows-beyond-the-text": ("refused later", "failed inside a job"),
    "new-tokens-beyond-positions": ("refused later", "failed inside a job"),
    "windows-1e9-as-written": ("refused later", "failed inside a job"),
    "new-tokens-1e9-as-written": ("refused later", "failed inside a job"),
    "replicates-seeds-empty": ("accepted", "silently dropped the replicate jobs"),
    "layers-per-job-float": ("accepted", "silently made an integer"),
    "layers-floats": ("accepted", "silently made integers"),
    "merge-with-override": ("refused before work", "refused as a duplicate key"),
}


def summary(rows: list[dict], recorded: dict[str, tuple[str, str]] | None = None) -> dict[str, int]:
    """Counts of the issue's four columns over ``rows`` (one checkout's dry runs): tried, refused before work
    (the dry run failed), refused later and accepted. A class the dry run did not refuse (accepted, or timed
    out) is split by ``recorded`` (what its jobs did, :data:`RECORDED_LATER`); without it such a class counts as
    accepted."""
    out = {"tried": len(rows), "refused before work": 0, "refused later": 0, "accepted": 0}
    for r in rows:
        if r["outcome"] == "refused":
            out["refused before work"] += 1
        elif recorded and recorded.get(r["class"], ("accepted",))[0] == "refused later":
            out["refused later"] += 1
        else:
            out["accepted"] += 1
    return out


def first_error(text: str) -> str:
    """What a failed dry run says is wrong: the line after Snakemake's "WorkflowError in file ..." header (the
    workflow's own message), else the first line that reads like an error."""
    lines = [ln.strip() for ln in text.splitlines()]
    for i, s in enumerate(lines):
        if s.startswith("WorkflowError in file") and i + 1 < len(lines) and lines[i + 1]:
            return lines[i + 1][:300]
    for s in lines:
        if s and re.search(r"error|invalid|refus|beyond|must|cannot|unexpected", s, re.I):
            return s[:300]
    return lines[-1][:300] if lines else ""


def try_class(repo: Path, name: str, edit) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for item in ("Snakefile", "workflow", "config"):
            src = repo / item
            (shutil.copytree if src.is_dir() else shutil.copy)(src, work / item)
        shutil.copy(repo / "README.md", work / "README.md")
        text = (work / "config/smoke.yaml").read_text()
        broken = edit(text)
        if broken == text:
            raise SystemExit(f"class {name}: its edit does not change config/smoke.yaml; update the edit")
        (work / "config/case.yaml").write_text(broken)
        env = {**os.environ, "PYTHONPATH": str(repo)}
        cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", "config/case.yaml"]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"class": name, "outcome": "timeout", "seconds": TIMEOUT_S, "message": ""}
        out = r.stdout + r.stderr
        return {"class": name, "outcome": "accepted" if r.returncode == 0 else "refused",
                "seconds": round(time.perf_counter() - t0, 1), "message": "" if r.returncode == 0 else first_error(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--before", action="store_true",
                    help="the checkout is the workflow before the refusals: split the classes its dry run accepts "
                         "by what their jobs did (RECORDED_LATER)")
    a = ap.parse_args(argv)
    rows = []
    for name, (desc, edit) in CLASSES.items():
        row = {**try_class(a.repo.resolve(), name, edit), "edit": desc}
        row["as_it_should"] = (row["outcome"] == "accepted") == (name in SHOULD_ACCEPT)
        rows.append(row)
        print(f"{name:<30}{row['outcome']:<10}{row['seconds']:>7.1f} s  {row['message'][:110]}", flush=True)
    counts = summary(rows, RECORDED_LATER if a.before else None)
    print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    if a.out:
        a.out.write_text(json.dumps({"repo": str(a.repo), "before": a.before, "summary": counts, "classes": rows},
                                    indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
