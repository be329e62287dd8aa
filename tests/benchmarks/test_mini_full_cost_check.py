"""benchmarks/mini_full_cost_check.py: which of mini-full's recorded jobs count as clean."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import mini_full_cost_check as M  # noqa: E402


def _record(tmp_path: Path, jobs: dict[str, tuple[str, float, float]]) -> Path:
    """A record of jobs ``name: (sitting commit, end time, seconds)`` in two sittings, one of them alone."""
    rec = {"sittings": [{"commit": "a" * 40, "machine": "2 cores; nothing heavy ran beside it"},
                        {"commit": "9eef729" + "0" * 33, "machine": "2 cores; the test suite ran beside it"},
                        {"commit": "b" * 40, "machine": "2 cores; tests ran beside it"}],
           "jobs": {}}
    for name, (commit, end, s) in jobs.items():
        key = f"results/mini-full/benchmarks/evaluate/{name}.tsv"
        rec["jobs"][key] = {"commit": commit, "finished_at": end}
        p = tmp_path / "files" / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"s\th:m:s\n{s}\t0:00:00\n")
    (tmp_path / "record.json").write_text(json.dumps(rec))
    return tmp_path


def test_a_job_is_clean_when_its_sitting_ran_alone_or_it_missed_the_busy_windows(tmp_path):
    start = M._utc("2026-11-29T02:47:58Z")
    end = M._utc("2026-11-29T03:18:35Z")
    third = "9eef729" + "0" * 33
    rec = _record(tmp_path, {
        "alone": ("a" * 40, start + 10, 100.0),         # inside a busy window, but its sitting ran alone
        "before": (third, start - 1, 50.0),             # ended before the window opened
        "after": (third, end + 61, 60.0),               # started after it closed
        "overlaps_start": (third, start + 5, 50.0),     # started before, ended inside
        "spans": (third, end + 10, 3600.0),             # covers the whole window
        "other_busy_sitting": ("b" * 40, start - 1000, 10.0),  # a sitting that had no quiet window
    })
    jobs = M.recorded_jobs(rec)
    assert {j["job"]: j["s"] for j in jobs}["spans"] == 3600.0
    assert sorted(j["job"] for j in M.clean(jobs, rec)) == ["after", "alone", "before"]


def test_the_committed_record_has_clean_jobs_of_two_sittings():
    jobs = M.recorded_jobs()
    ok = M.clean(jobs)
    assert len(ok) == 74 and {j["sitting"] for j in ok} == {"c6fb7e1", "9eef729"}
