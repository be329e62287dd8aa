"""The run's time per stage and rule (caldera.experiments.report.timings)."""

from __future__ import annotations

import json

from caldera.experiments.report.timings import step_timings


def test_step_timings_sums_and_spans_per_stage(tmp_path):
    jobs = [  # stage, seconds, end time: a starts at 100, b overlaps it, c runs alone later
        {"stage": "a", "s": 10.0, "max_rss_mb": 100.0, "end": 110.0},
        {"stage": "a", "s": 5.0, "max_rss_mb": 300.0, "end": 120.0},
        {"stage": "b", "s": 30.0, "max_rss_mb": float("nan"), "end": 135.0},
        {"stage": "c", "s": 1.0, "max_rss_mb": 50.0, "end": 200.0},
    ]
    res = step_timings(jobs, "run-x", str(tmp_path / "t.json"), str(tmp_path / "t.md"))
    a, b, c = (res["stages"][k] for k in "abc")
    assert (a["jobs"], a["job_s"], a["from_s"], a["to_s"], a["span_s"], a["max_rss_mb"]) == (2, 15.0, 0, 20, 20, 300)
    assert (b["from_s"], b["to_s"], b["max_rss_mb"]) == (5.0, 35.0, 0.0)  # NaN RSS ignored
    assert (c["from_s"], c["to_s"]) == (99.0, 100.0)
    assert res["span_s"] == 100.0 and res["job_s"] == 46.0 and res["n_jobs"] == 4
    assert json.loads((tmp_path / "t.json").read_text()) == res
    assert (tmp_path / "t.md").read_text().startswith("# Run time per stage (run-x)")
    assert "rules" not in res  # records without a rule: no per-rule table
    for j, rule in zip(jobs, ("x", "y", "x", "z")):
        j["rule"] = rule
    res = step_timings(jobs, "run-x", str(tmp_path / "t.json"), str(tmp_path / "t.md"))
    assert res["rules"]["x"] == {"stage": "a", "jobs": 2, "job_s": 40.0, "max_s": 30.0}
    md = (tmp_path / "t.md").read_text()
    assert md.index("| x | a | 2 | 0.7 | 20 | 30 |") < md.index("| y | a | 1 | 0.1 | 5 | 5 |")  # largest first


def test_jobs_of_earlier_sittings_are_said_to_come_from_the_record(tmp_path):
    jobs = [{"stage": "a", "s": 10.0, "max_rss_mb": 1.0, "end": 110.0}]
    res = step_timings(jobs, "run-x", str(tmp_path / "t.json"), str(tmp_path / "t.md"))
    assert "from_record" not in res and "earlier sittings" not in (tmp_path / "t.md").read_text()
    res = step_timings(jobs, "run-x", str(tmp_path / "t.json"), str(tmp_path / "t.md"), from_record=1)
    assert res["from_record"] == 1
    assert "1 of these jobs ran in earlier sittings" in (tmp_path / "t.md").read_text()
