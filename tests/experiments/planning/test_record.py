"""caldera.experiments.planning.record: which recorded jobs a later run adopts, and what it refuses."""

from __future__ import annotations

import pytest

from caldera.experiments.jobs.record import restore_file, write_record
from caldera.experiments.planning.record import (
    FILES,
    INDEX,
    RecordJob,
    adopted_files,
    adoption_closure,
    read_index,
)
from tests.experiments.record_helpers import finish_job, record_jobs


def test_a_job_is_adopted_only_under_the_configuration_it_ran_with(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    jobs = record_jobs()
    finish_job(run, jobs["eval"])
    write_record([jobs["eval"]], rec, root=run)
    assert set(adopted_files([jobs["eval"]], rec)) == set(jobs["eval"].outputs)
    changed = record_jobs(spec="s2")["eval"]
    assert adopted_files([changed], rec) == {}
    fewer = RecordJob("evaluate", jobs["eval"].benchmark, jobs["eval"].outputs[:1], "s1", reads=jobs["eval"].reads)
    assert adopted_files([fewer], rec) == {}  # another set of outputs (a corpus dropped): not the same job


def test_a_job_that_writes_a_large_file_a_remaining_job_reads_is_not_adopted():
    jobs = record_jobs()
    every = set(jobs)
    assert adoption_closure(jobs, every) == every
    # the fine-tuned model's evaluation must run: it reads the RHT-FT checkpoint, so rht_finetune runs, which
    # reads the compressed checkpoint, so the compression runs too; the plain evaluation stays adopted
    assert adoption_closure(jobs, every - {"eval_ft"}) == {"eval"}
    assert adoption_closure(jobs, every - {"eval"}) == {"rhtft", "eval_ft"}
    assert adoption_closure(jobs, {"compress"}) == set()


def test_an_edited_or_missing_recorded_file_is_an_error_naming_it(tmp_path):
    run, rec = tmp_path / "run", tmp_path / "rec"
    job = record_jobs()["eval"]
    finish_job(run, job)
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


def test_a_record_of_another_format_is_refused(tmp_path):
    (tmp_path / INDEX).write_text('{"format": 99, "jobs": {}}')
    with pytest.raises(ValueError, match="not a run record of format 1"):
        read_index(tmp_path)
    assert read_index(tmp_path / "none") == {"format": 1, "jobs": {}}


def test_a_job_without_small_outputs_is_refused():
    with pytest.raises(ValueError, match="no small outputs"):
        RecordJob("hessians", "b.tsv", (), "s")
