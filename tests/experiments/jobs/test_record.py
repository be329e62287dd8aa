"""caldera.experiments.jobs.record: what a run's record keeps, which recorded jobs a later run adopts, and how an
adopted file comes back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from caldera.atomic import sha256_file
from caldera.experiments.jobs.record import (
    FILES,
    INDEX,
    RecordJob,
    adopted_files,
    adoption_closure,
    read_index,
    restore_file,
    run_timings,
    step_record,
    write_record,
)

R = "results/run"


def _jobs(spec="s1"):
    """A compression (writes a checkpoint), its RHT fine-tuning (reads it, writes another), and the evaluations
    of the compressed and the fine-tuned models (each reads one checkpoint)."""
    ck, ft = f"{R}/compressed/v/checkpoint", f"{R}/rhtft/v/checkpoint"
    return {
        "compress": RecordJob("compress_variant", f"{R}/benchmarks/compress_variant/v.tsv",
                              (f"{R}/compressed/v/summary.json",), spec, large_outputs=(ck,), reads=("hess",)),
        "rhtft": RecordJob("rht_finetune", f"{R}/benchmarks/rht_finetune/v.tsv", (f"{R}/rhtft/v/rhtft.json",),
                           spec, large_outputs=(ft,), reads=(ck,)),
        "eval": RecordJob("evaluate", f"{R}/benchmarks/evaluate/v.tsv",
                          (f"{R}/eval/v/ppl_wiki.json", f"{R}/eval/v/zeroshot.json"), spec, reads=(ck,)),
        "eval_ft": RecordJob("evaluate", f"{R}/benchmarks/evaluate/v+ft.tsv", (f"{R}/eval/v+ft/ppl_wiki.json",),
                             spec, reads=(ft,)),
    }


def _finish(root: Path, job: RecordJob, value: int = 1, end: float = 1_700_000_000.0) -> None:
    """Write ``job``'s outputs, a timing file beside the first, and its benchmark last (as Snakemake does)."""
    for i, out in enumerate(job.outputs):
        p = root / out
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"value": value, "i": i}))
    first = root / job.outputs[0]
    if first.suffix == ".json":
        first.with_name(first.stem + ".timing.json").write_text('{"wall_s": 12.5}')
    b = root / job.benchmark
    b.parent.mkdir(parents=True, exist_ok=True)
    b.write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t100\n")
    os.utime(b, (end, end))


def test_only_finished_jobs_are_recorded_with_hashes_timing_and_benchmark(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    jobs = _jobs()
    _finish(run, jobs["eval"])
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
    job = _jobs()["eval"]
    _finish(run, job)
    (run / job.outputs[1]).unlink()
    assert write_record([job], rec, root=run)["unfinished"] == 1 and not read_index(rec)["jobs"]


def test_rerecording_keeps_an_unchanged_job_and_replaces_a_changed_one(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    job = _jobs()["eval"]
    _finish(run, job)
    write_record([job], rec, root=run, commit="first")
    assert write_record([job], rec, root=run, commit="second")["kept"] == 1
    assert read_index(rec)["jobs"][job.benchmark]["commit"] == "first"
    _finish(run, job, value=2)
    assert write_record([job], rec, root=run, commit="third")["recorded"] == 1
    assert read_index(rec)["jobs"][job.benchmark]["commit"] == "third"
    assert json.loads((rec / FILES / job.outputs[0]).read_text())["value"] == 2


def test_a_job_is_adopted_only_under_the_configuration_it_ran_with(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    jobs = _jobs()
    _finish(run, jobs["eval"])
    write_record([jobs["eval"]], rec, root=run)
    assert set(adopted_files([jobs["eval"]], rec)) == set(jobs["eval"].outputs)
    changed = _jobs(spec="s2")["eval"]
    assert adopted_files([changed], rec) == {}
    fewer = RecordJob("evaluate", jobs["eval"].benchmark, jobs["eval"].outputs[:1], "s1", reads=jobs["eval"].reads)
    assert adopted_files([fewer], rec) == {}  # another set of outputs (a corpus dropped): not the same job


def test_a_job_that_writes_a_large_file_a_remaining_job_reads_is_not_adopted():
    jobs = _jobs()
    every = set(jobs)
    assert adoption_closure(jobs, every) == every
    # the fine-tuned model's evaluation must run: it reads the RHT-FT checkpoint, so rht_finetune runs, which
    # reads the compressed checkpoint, so the compression runs too; the plain evaluation stays adopted
    assert adoption_closure(jobs, every - {"eval_ft"}) == {"eval"}
    assert adoption_closure(jobs, every - {"eval"}) == {"rhtft", "eval_ft"}
    assert adoption_closure(jobs, {"compress"}) == set()


def test_an_edited_or_missing_recorded_file_is_an_error_naming_it(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    job = _jobs()["eval"]
    _finish(run, job)
    write_record([job], rec, root=run)
    target = rec / FILES / job.outputs[1]
    target.write_text('{"value": 3}')
    with pytest.raises(ValueError, match=r"zeroshot\.json does not match its sha256.*git checkout"):
        adopted_files([job], rec)
    with pytest.raises(ValueError, match="does not match its sha256"):
        restore_file(rec, job.outputs[1], root=tmp_path / "new")
    target.unlink()
    with pytest.raises(ValueError, match=r"zeroshot\.json is listed in record\.json but missing"):
        adopted_files([job], rec)


def test_restore_brings_the_file_its_benchmark_and_timing_back(tmp_path):
    run, rec, new = tmp_path / "run", tmp_path / "rec", tmp_path / "new"
    job = _jobs()["eval"]
    _finish(run, job, end=1_600_000_000.0)
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


def test_a_record_of_another_format_is_refused(tmp_path):
    (tmp_path / INDEX).write_text('{"format": 99, "jobs": {}}')
    with pytest.raises(ValueError, match="not a run record of format 1"):
        read_index(tmp_path)
    assert read_index(tmp_path / "none") == {"format": 1, "jobs": {}}


def test_the_record_rule_needs_a_record_folder(tmp_path):
    with pytest.raises(ValueError, match=r"no `record` folder.*--config record="):
        step_record([], None, tmp_path / "log")
    counts = step_record([], tmp_path / "rec", tmp_path / "log")
    assert counts["recorded"] == 0 and "0 jobs recorded" in (tmp_path / "log").read_text()


def test_a_job_without_small_outputs_is_refused():
    with pytest.raises(ValueError, match="no small outputs"):
        RecordJob("hessians", "b.tsv", (), "s")


def test_other_jobs_benchmarks_are_kept_and_every_job_is_counted_once_in_the_timings(tmp_path):
    run, rec, new = tmp_path / "run", tmp_path / "rec", tmp_path / "new"
    jobs = _jobs()
    _finish(run, jobs["eval"], end=1_600_000_100.0)
    _finish(run, jobs["eval_ft"], end=1_600_000_200.0)
    hess = run / R / "benchmarks/hessians/m.tsv"  # a job whose output (Hessians) is never recorded
    hess.parent.mkdir(parents=True)
    hess.write_text("s\th:m:s\tmax_rss\n300.0\t0:05:00\t900\n")
    os.utime(hess, (1_600_000_000.0, 1_600_000_000.0))
    counts = write_record([jobs["eval"], jobs["eval_ft"]], rec, root=run, benchmarks=f"{R}/benchmarks")
    assert counts["recorded"] == 2 and counts["timings"] == 1
    # the new run: one job adopted (its benchmark restored), one measured again, the Hessians never rerun
    for out in jobs["eval"].outputs:
        restore_file(rec, out, root=new)
    _finish(new, jobs["eval_ft"], end=1_700_000_000.0)
    (new / jobs["eval_ft"].benchmark).write_text("s\th:m:s\tmax_rss\n99.0\t0:01:39\t100\n")
    got, earlier = run_timings(new / R / "benchmarks", rec)
    by = {(j["rule"], j["job"]): (j["s"], j["end"]) for j in got}
    assert by == {("evaluate", "v"): (12.5, 1_600_000_100.0), ("evaluate", "v+ft"): (99.0, pytest.approx(
        (new / jobs["eval_ft"].benchmark).stat().st_mtime)), ("hessians", "m"): (300.0, 1_600_000_000.0)}
    assert earlier == 2  # the adopted evaluation and the Hessians; the evaluation measured again is this run's
    assert run_timings(new / R / "benchmarks")[1] == 0
