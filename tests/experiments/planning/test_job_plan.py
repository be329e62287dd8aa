"""caldera.experiments.planning.job_plan: the jobs the workflow runs for a config, and the work each one does."""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys

import pytest

from caldera.experiments.planning import job_plan as JP
from tests.helpers import ROOT, workflow_config


@pytest.mark.parametrize("name", ["smoke", "mini", "mini-full"])
def test_the_planned_jobs_are_the_jobs_snakemake_plans(name, tmp_path):
    """Per rule, as many jobs as `snakemake -n` lists for the config (plot_ranks writes its benchmark beside
    plot_figure's; the `timings` and `all` jobs write none)."""
    pytest.importorskip("snakemake")
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile",
                        f"config/{name}.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    stats = r.stdout[r.stdout.index("Job stats:"):]
    want = {m.group(1): int(m.group(2)) for m in re.finditer(r"(?m)^(\w+)\s+(\d+)$", stats.split("total")[0])}
    want["plot_figure"] = want.get("plot_figure", 0) + want.pop("plot_ranks", 0)
    for rule in ("timings", "all"):
        want.pop(rule, None)
    got = collections.Counter(j.rule for j in JP.plan_jobs(workflow_config(name)))
    assert dict(got) == want


def test_the_planned_jobs_are_the_jobs_of_the_committed_default_run():
    """Per rule, the planned jobs of config/mini.yaml are the jobs the committed default run timed (its
    timings.json); job by job where it lists them: the prediction is compared job by job."""
    t = json.loads((ROOT / "paper_tables/generated/timings.json").read_text())
    plan = JP.plan_jobs(workflow_config("mini"))
    assert dict(collections.Counter(j.rule for j in plan)) == {r: v["jobs"] for r, v in t["rules"].items()}
    if "jobs" in t:
        assert {(j["rule"], j["job"]) for j in t["jobs"]} == {(j.rule, j.name) for j in plan}
