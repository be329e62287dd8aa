"""caldera.experiments.planning.job_report: the report ``caldera cost`` prints and the plan line of a run's log."""

from __future__ import annotations

import json
import re

import pytest

from caldera.experiments.planning import job_costs as J
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning import job_report as JR
from caldera.experiments.planning.cost import load_costs
from tests.helpers import workflow_config


def test_the_plan_line_states_the_predicted_time_or_nothing(monkeypatch):
    """With the committed profile the log's first lines say how long the run should take here; a config of models
    the profile never measured gets no line (no guess)."""
    if PR.load_profile("cpu") is None:
        pytest.skip("no committed profile")
    line = JR.plan_line(workflow_config("mini"), 2)
    n = len(J.predict(workflow_config("mini"), PR.load_profile("cpu"), load_costs("cpu")))
    assert re.fullmatch(rf"predicted here: {n} jobs, [\d.]+ min of job time, about [\d.]+ min with 2 jobs at a time "
                        r"\(caldera cost(; a machine of another type differs|, with the profile of another machine "
                        r"type, [a-z0-9-]+: expect up to ×2)\)", line), line
    assert JR.plan_line(workflow_config("paper"), 2) is None


def test_the_plan_line_prices_only_the_jobs_the_record_leaves():
    """Jobs adopted from the record (their benchmark files) are counted out of the line and their time with them."""
    if PR.load_profile("cpu") is None:
        pytest.skip("no committed profile")
    cfg = workflow_config("mini")
    pred = J.predict(cfg, PR.load_profile("cpu"), load_costs("cpu"))
    done = [p for p in pred if p["rule"] == "evaluate"][:3]
    bench = [f"results/mini/benchmarks/{p['rule']}/{p['job']}.tsv" for p in done]

    def minutes(line):
        m = re.search(r", ([\d.]+) (s|min|h) of job time", line)
        return float(m.group(1)) * {"s": 1 / 60, "min": 1, "h": 60}[m.group(2)]

    full, left = JR.plan_line(cfg, 2), JR.plan_line(cfg, 2, done=bench)
    assert left.startswith(f"predicted here: {len(pred) - 3} jobs (of {len(pred)}; the others are adopted from the "
                           "record), "), left
    assert minutes(full) - minutes(left) == pytest.approx(sum(p["s"] for p in done) / 60, abs=0.15)


def test_the_report_says_what_the_runs_record_leaves_to_run(tmp_path):
    """A config whose record holds jobs: the report counts them out of the plan and prices the rest."""
    profile = PR.load_profile("cpu")
    if profile is None:
        pytest.skip("no committed profile")
    costs = load_costs("cpu")
    cfg = workflow_config("smoke")
    pred = J.predict(cfg, profile, costs)
    assert "record" not in JR.report(cfg, profile, costs)
    done = [p for p in pred if p["rule"] == "evaluate"][:2]
    index = {"format": 1, "jobs": {f"results/smoke/benchmarks/{p['rule']}/{p['job']}.tsv": {} for p in done}}
    (tmp_path / "record.json").write_text(json.dumps(index))
    text = JR.report({**cfg, "record": str(tmp_path)}, profile, costs)
    rest = sum(p["s"] for p in pred if p["s"] is not None and p not in done)
    m = re.search(r"holds 2 of these jobs; left to run: (\d+) jobs, ([\d.]+) (s|min|h) of job time", text)
    assert m and int(m.group(1)) == len(pred) - 2, text[-600:]
    assert float(m.group(2)) == pytest.approx(rest / {"s": 1, "min": 60, "h": 3600}[m.group(3)], rel=0.05)
