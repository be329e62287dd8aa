"""A run's record, written and read back by its jobs: rule ``record`` keeps the small results of the finished jobs
(:func:`write_record`), rule ``restore_record`` copies an adopted one back into a run (:func:`restore_file`), and
rule ``timings`` counts every job once, with the time measured when it ran (:func:`run_timings`).
:mod:`caldera.experiments.planning.record` holds the record's format and decides which recorded jobs a run adopts.

* :func:`write_record` copies every finished candidate job into ``<record>/files/`` and lists it in
  ``<record>/record.json``: its rule, the sha256 of its declared configuration (the rule's ``spec`` param), the
  sha256 of each file and the commit that ran it.
* :func:`restore_file` copies one adopted file into the run, checking its hash again, with the job's benchmark
  and timing files beside it.

Torch-free: rules ``record`` and ``restore_record`` run in the workflow's own process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from caldera.atomic import sha256_file, timing_path, write_atomic
from caldera.experiments.planning.record import FILES, INDEX, RecordJob, checked_file, read_index, spec_sha256


def _extras(root: Path, job: RecordJob) -> list[str]:
    """The files recorded with a job beside its outputs: its benchmark and each output's ``.timing.json``."""
    extra = [job.benchmark]
    for out in job.outputs:
        t = timing_path(out)
        if str(t) != out and (root / t).is_file():
            extra.append(str(t))
    return extra


def _finished(root: Path, job: RecordJob) -> bool:
    """Has ``job`` finished in the run under ``root``? Snakemake writes a job's benchmark after it succeeded, and
    each output is written atomically, so both being there means the job is done."""
    return (root / job.benchmark).is_file() and all((root / o).is_file() for o in job.outputs)


def write_record(jobs: Iterable[RecordJob], record_dir: str | os.PathLike, *, root: str | os.PathLike = ".",
                 benchmarks: str | None = None, commit: str = "unknown", now: datetime | None = None,
                 waiting: list[str] | None = None) -> dict[str, int]:
    """Record every finished job of ``jobs`` (paths relative to ``root``) in ``record_dir``.

    A job already recorded with the same configuration and the same file hashes keeps its entry (its commit
    and time are those of the run that measured it). ``benchmarks``: the run's benchmark folder (relative to
    ``root``); the benchmark of every other finished job there (Hessians, dense references: jobs whose outputs
    are not recorded) is kept under ``"timings"``, so that the run's ``timings.md`` still counts it
    (:func:`run_timings`). Returns ``{"recorded": new, "kept": unchanged, "unfinished": not finished,
    "timings": benchmarks of other jobs}``; ``waiting``, when given, receives the benchmark of each job not
    finished."""
    root, record_dir = Path(root), Path(record_dir)
    index = read_index(record_dir)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    counts = {"recorded": 0, "kept": 0, "unfinished": 0, "timings": 0}
    jobs = list(jobs)
    for job in jobs:
        if not _finished(root, job):
            counts["unfinished"] += 1
            if waiting is not None:
                waiting.append(job.benchmark)
            continue
        files = {p: sha256_file(root / p) for p in (*job.outputs, *_extras(root, job))}
        old = index["jobs"].get(job.benchmark)
        outputs_same = old is not None and all(old["files"].get(p) == files[p] for p in job.outputs)
        if outputs_same and old["spec_sha256"] == spec_sha256(job.spec):
            counts["kept"] += 1
            continue
        for p in files:
            dst = record_dir / FILES / p
            dst.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(dst, (root / p).read_bytes())
        index["jobs"][job.benchmark] = {"rule": job.rule, "outputs": list(job.outputs), "files": files,
                                        "benchmark": job.benchmark,
                                        "finished_at": (root / job.benchmark).stat().st_mtime,
                                        "spec_sha256": spec_sha256(job.spec), "commit": commit, "recorded_at": stamp}
        counts["recorded"] += 1
    index["jobs"] = dict(sorted(index["jobs"].items()))
    if benchmarks is not None:
        keys = {job.benchmark for job in jobs}
        timings = index.setdefault("timings", {})
        for path in sorted((root / benchmarks).glob("*/*.tsv")):
            rel = str(path.relative_to(root))
            if rel in keys:
                continue
            digest = sha256_file(path)
            if timings.get(rel, {}).get("sha256") != digest:
                dst = record_dir / FILES / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(dst, path.read_bytes())
                timings[rel] = {"sha256": digest, "finished_at": path.stat().st_mtime, "commit": commit}
            counts["timings"] += 1
        index["timings"] = dict(sorted(timings.items()))
    record_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(record_dir / INDEX, json.dumps(index, indent=1, sort_keys=True) + "\n")
    return counts


def restore_file(record_dir: str | os.PathLike, path: str, *, root: str | os.PathLike = ".") -> None:
    """Copy the recorded ``path`` into the run under ``root``, with its job's benchmark and timing files (each
    checked against its recorded sha256, each written atomically)."""
    record_dir, root = Path(record_dir), Path(root)
    index = read_index(record_dir)
    entries = [e for e in index["jobs"].values() if path in e["outputs"]]
    if len(entries) != 1:
        raise ValueError(f"run record {record_dir}: {path} is the output of {len(entries)} recorded jobs, not 1")
    entry = entries[0]
    extras = [p for p in entry["files"] if p not in entry["outputs"]]
    for p in (path, *extras):
        src = checked_file(record_dir, p, entry["files"][p])
        dst = root / p
        if p != path and dst.is_file() and sha256_file(dst) == entry["files"][p]:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dst, src.read_bytes())
        if p == entry["benchmark"]:  # the job's end time, as timings.md reads it from the benchmark's mtime
            os.utime(dst, (entry["finished_at"], entry["finished_at"]))


def run_timings(bench_dir: str | os.PathLike, record_dir: str | os.PathLike | None = None) -> tuple[list[dict], int]:
    """Every job of the run once, as :func:`caldera.experiments.planning.job_profile.read_benchmarks` gives it, and how
    many of them ran in earlier sittings: the run's own benchmarks in ``bench_dir``, plus each job of
    ``record_dir`` (adopted, or timing-only) that the run has not measured again. A benchmark whose bytes are the
    recorded ones is that earlier measurement (restored with its job); it keeps its recorded end time."""
    from caldera.experiments.planning.job_profile import read_benchmarks

    bench_dir = Path(bench_dir)
    own = read_benchmarks(bench_dir)
    if not record_dir:
        return own, 0
    record_dir = Path(record_dir)
    index = read_index(record_dir)
    recorded = {e["benchmark"]: (e["files"][e["benchmark"]], e["finished_at"]) for e in index["jobs"].values()}
    recorded.update({p: (t["sha256"], t["finished_at"]) for p, t in index.get("timings", {}).items()})
    by_name = {(Path(p).parent.name, Path(p).stem): (p, *v) for p, v in recorded.items()}
    out, earlier, seen = [], 0, set()
    for job in own:
        key = (job["rule"], job["job"])
        seen.add(key)
        rec = by_name.get(key)
        if rec and sha256_file(bench_dir / key[0] / f"{key[1]}.tsv") == rec[1]:
            out.append({**job, "end": rec[2]})
            earlier += 1
        else:
            out.append(job)
    for folder in sorted({str(Path(p).parent.parent) for p in recorded}):
        for job in read_benchmarks(record_dir / FILES / folder):
            key = (job["rule"], job["job"])
            if key in by_name and key not in seen:
                out.append({**job, "end": by_name[key][2]})
                earlier += 1
                seen.add(key)
    return out, earlier


def step_record(jobs: Iterable[RecordJob], record_dir: str | os.PathLike | None, log: str | os.PathLike,
                benchmarks: str | None = None) -> dict:
    """Rule ``record``: :func:`write_record` with the checked-out commit, its counts written to ``log``."""
    if not record_dir:
        raise ValueError("rule record: the config sets no `record` folder; add `record: <folder>` to the config "
                         "(config/mini-full.yaml: paper_tables/mini-full/record) or pass --config record=<folder>")
    waiting: list[str] = []
    from caldera.pipeline.checkpoint.provenance import source_commit

    counts = write_record(jobs, record_dir, benchmarks=benchmarks, commit=source_commit(), waiting=waiting)
    line = (f"record {record_dir}: {counts['recorded']} jobs recorded, {counts['kept']} already there, "
            f"{counts['unfinished']} not finished; {counts['timings']} other jobs' benchmarks kept\n")
    write_atomic(log, line + "".join(f"not finished: {b}\n" for b in waiting))
    print(line, end="")
    return counts
