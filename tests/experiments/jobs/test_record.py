"""caldera.experiments.jobs.record: what a run's record keeps, how an adopted file comes back, and the run's
timings across sittings."""

from __future__ import annotations

import json
import os

import pytest

from caldera.atomic import sha256_file
from caldera.experiments.jobs.record import restore_file, run_timings, step_record, write_record
from caldera.experiments.planning.record import FILES, read_index
from tests.experiments.record_helpers import R, finish_job, record_jobs


def test_only_finished_jobs_are_recorded_with_hashes_timing_and_benchmark(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    jobs = record_jobs()
    finish_job(run, jobs["eval"])
    (run / jobs["compress"].outputs[0]).parent.mkdir(parents=True)
    (run / jobs["compress"].outputs[0]).write_text("{}")  # an output, but no benchmark: the job did not finish
    counts = write_record(jobs.values(), rec, root=run, commit="abc")
    assert counts == {"recorded": 1, "kept": 0, "unfinished": 3, "timings": 0}
    entry = read_index(rec)["jobs"][jobs["eval"].benchmark]
    timing = f"{R}/eval/v/ppl_wiki.timing.json"
    assert set(entry["files"]) == {*jobs["eval"].outputs, jobs["eval"].benchmark, timing}
    for p, digest in entry["files"].items():
        assert digest == sha256_file(run / p) == sha256_file(rec / FILES / p)
    assert entry["commit"] == "abc" and entry["finished_at"] == 1_700_000_000.0
    assert not (rec / FILES / jobs["compress"].outputs[0]).exists()


def test_a_partly_written_job_is_not_recorded(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    job = record_jobs()["eval"]
    finish_job(run, job)
    (run / job.outputs[1]).unlink()
    assert write_record([job], rec, root=run)["unfinished"] == 1 and not read_index(rec)["jobs"]


def test_rerecording_keeps_an_unchanged_job_and_replaces_a_changed_one(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    job = record_jobs()["eval"]
    finish_job(run, job)
    write_record([job], rec, root=run, commit="first")
    assert write_record([job], rec, root=run, commit="second")["kept"] == 1
    assert read_index(rec)["jobs"][job.benchmark]["commit"] == "first"
    finish_job(run, job, value=2)
    assert write_record([job], rec, root=run, commit="third")["recorded"] == 1
    assert read_index(rec)["jobs"][job.benchmark]["commit"] == "third"
    assert json.loads((rec / FILES / job.outputs[0]).read_text())["value"] == 2


def test_restore_brings_the_file_its_benchmark_and_timing_back(tmp_path):
    run, rec, new = tmp_path / "run", tmp_path / "rec", tmp_path / "new"
    job = record_jobs()["eval"]
    finish_job(run, job, end=1_600_000_000.0)
    write_record([job], rec, root=run)
    for out in job.outputs:
        restore_file(rec, out, root=new)
        assert (new / out).read_bytes() == (run / out).read_bytes()
    assert (new / job.benchmark).read_bytes() == (run / job.benchmark).read_bytes()
    assert (new / job.benchmark).stat().st_mtime == 1_600_000_000.0  # the job's end time, as timings.md reads it
    timing = f"{R}/eval/v/ppl_wiki.timing.json"
    assert (new / timing).read_text() == '{"wall_s": 12.5}'
    with pytest.raises(ValueError, match="output of 0 recorded jobs"):
        restore_file(rec, f"{R}/eval/w/ppl_wiki.json", root=new)


def test_the_record_rule_needs_a_record_folder(tmp_path):
    with pytest.raises(ValueError, match=r"no `record` folder.*--config record="):
        step_record([], None, tmp_path / "log")
    counts = step_record([], tmp_path / "rec", tmp_path / "log")
    assert counts["recorded"] == 0 and "0 jobs recorded" in (tmp_path / "log").read_text()


def test_other_jobs_benchmarks_are_kept_and_every_job_is_counted_once_in_the_timings(tmp_path):
    run, rec, new = tmp_path / "run", tmp_path / "rec", tmp_path / "new"
    jobs = record_jobs()
    finish_job(run, jobs["eval"], end=1_600_000_100.0)
    finish_job(run, jobs["eval_ft"], end=1_600_000_200.0)
    hess = run / R / "benchmarks/hessians/m.tsv"  # a job whose output (Hessians) is never recorded
    hess.parent.mkdir(parents=True)
    hess.write_text("s\th:m:s\tmax_rss\n300.0\t0:05:00\t900\n")
    os.utime(hess, (1_600_000_000.0, 1_600_000_000.0))
    counts = write_record([jobs["eval"], jobs["eval_ft"]], rec, root=run, benchmarks=f"{R}/benchmarks")
    assert counts["recorded"] == 2 and counts["timings"] == 1
    # the new run: one job adopted (its benchmark restored), one measured again, the Hessians never rerun
    for out in jobs["eval"].outputs:
        restore_file(rec, out, root=new)
    finish_job(new, jobs["eval_ft"], end=1_700_000_000.0)
    (new / jobs["eval_ft"].benchmark).write_text("s\th:m:s\tmax_rss\n99.0\t0:01:39\t100\n")
    got, earlier = run_timings(new / R / "benchmarks", rec)
    by = {(j["rule"], j["job"]): (j["s"], j["end"]) for j in got}
    assert by == {("evaluate", "v"): (12.5, 1_600_000_100.0), ("evaluate", "v+ft"): (99.0, pytest.approx(
        (new / jobs["eval_ft"].benchmark).stat().st_mtime)), ("hessians", "m"): (300.0, 1_600_000_000.0)}
    assert earlier == 2  # the adopted evaluation and the Hessians; the evaluation measured again is this run's
    assert run_timings(new / R / "benchmarks")[1] == 0
