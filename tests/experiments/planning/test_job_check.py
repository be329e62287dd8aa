"""caldera.experiments.planning.job_check: the prediction against a measured run, per job, rule and stage, and the
text ``caldera cost --check`` prints."""

from __future__ import annotations

import json
import re

import pytest

from caldera.experiments.planning import job_check as JC
from tests.helpers import bench_file


def test_check_compares_job_by_job_and_names_what_is_off():
    pred = [{"rule": "evaluate", "job": "a", "stage": "evaluation", "s": 100.0, "how": "measured"},
            {"rule": "evaluate", "job": "b", "stage": "evaluation", "s": 100.0, "how": "measured"},
            {"rule": "hessians", "job": "m", "stage": "calibration (Hessians)", "s": 30.0, "how": "measured"},
            {"rule": "claims", "job": "claims", "stage": "tables and reports", "s": 4.0, "how": "measured"}]
    meas = [{"rule": "evaluate", "job": "a", "s": 90.0}, {"rule": "evaluate", "job": "b", "s": 110.0},
            {"rule": "hessians", "job": "m", "s": 100.0}, {"rule": "assets", "job": "assets", "s": 4.0}]
    res = JC.check(pred, meas)
    by = {r["rule"]: r for r in res["rules"]}
    assert by["evaluate"]["ratio"] == pytest.approx(1.0) and by["evaluate"]["within"]
    assert by["hessians"]["ratio"] == pytest.approx(0.3) and not by["hessians"]["within"]
    assert res["total"]["ratio"] == pytest.approx(230 / 300) and res["total"]["within"]
    assert res["not_run"] == ["claims/claims"] and res["not_predicted"] == ["assets/assets"]
    text = JC.check_report(res)
    assert re.search(r"(?m)^hessians .*0\.30  off by more than ±30%$", text)
    assert "hessians/m: 30 s / 100 s (×0.30)" in text
    per_rule = JC.check_runs(pred, [{"rule": "evaluate", "job": "*", "s": 250.0, "stage": "evaluation"}])
    assert per_rule["rules"][0]["ratio"] == pytest.approx(0.8) and per_rule["rules"][0]["jobs"] == 1


def test_measured_jobs_reads_a_results_folder_or_a_timings_file(tmp_path):
    bench_file(tmp_path / "r", "evaluate", "x", 12.5)
    assert [(j["rule"], j["job"], j["s"]) for j in JC.measured_jobs(tmp_path / "r")] == [("evaluate", "x", 12.5)]
    (tmp_path / "t.json").write_text(json.dumps({"rules": {"evaluate": {"jobs": 2, "job_s": 30.0}}}))
    assert JC.measured_jobs(tmp_path / "t.json") == [
        {"rule": "evaluate", "job": "*", "stage": "evaluation", "s": 30.0, "jobs": 2}]
    (tmp_path / "t.json").write_text(json.dumps({"rules": {}, "jobs": [{"rule": "evaluate", "job": "x", "s": 3}]}))
    assert JC.measured_jobs(tmp_path / "t.json")[0]["job"] == "x"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="no per-rule records"):
        JC.measured_jobs(tmp_path / "bad.json")
