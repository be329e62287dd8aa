"""A run's record, read when the workflow is planned: which recorded jobs a run adopts.

A run longer than one sitting (``config/mini-full.yaml``) loses its ``results/`` folder when the machine goes. Its
record (config ``record``: a committed folder) keeps what the tables, figures and claims read: each finished job's
small outputs, the ``.timing.json`` beside them and the job's Snakemake benchmark, listed in ``record.json`` with the
sha256 of each file and of the job's declared configuration (the rule's ``spec`` param). The large outputs
(Hessians, checkpoints, dense reference distributions) are never recorded: a later run rebuilds the ones that a job
it still has to run reads. :mod:`caldera.experiments.jobs.record` writes the record and restores its files.

:func:`adopted_files` decides which recorded jobs the current run adopts: those whose configuration is unchanged,
whose files are all there with their recorded hashes, and whose large outputs no job still to run reads
(:func:`adoption_closure`). A hash that differs is an error, never a silent rerun: the committed record was edited
or damaged.

Torch-free: the workflow imports it while it is parsed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from caldera.atomic import sha256_file

#: the record's index, inside the record folder
INDEX = "record.json"
#: the folder, inside the record folder, that mirrors the recorded files' paths
FILES = "files"
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class RecordJob:
    """One job of the run that a record can hold.

    ``benchmark`` is its Snakemake benchmark file (unique per job: the job's key in the record). ``outputs`` are
    its small outputs, the ones rules downstream read; ``large_outputs`` the outputs that are never recorded
    (checkpoints); ``reads`` the large files it reads (a checkpoint, Hessians). Paths are relative to the
    workflow's folder. ``spec`` is the rule's declared configuration (its ``spec`` param)."""

    rule: str
    benchmark: str
    outputs: tuple[str, ...]
    spec: str
    large_outputs: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.outputs:
            raise ValueError(f"record job {self.benchmark}: no small outputs to record")


def spec_sha256(spec: str) -> str:
    """The sha256 of a declared configuration string (what the record compares, not the string itself)."""
    return hashlib.sha256(spec.encode()).hexdigest()


def read_index(record_dir: str | os.PathLike) -> dict:
    """The record's index (``{"format", "jobs": {benchmark: entry}}``); an empty one when there is no record."""
    path = Path(record_dir) / INDEX
    if not path.is_file():
        return {"format": FORMAT, "jobs": {}}
    index = json.loads(path.read_text())
    if index.get("format") != FORMAT or not isinstance(index.get("jobs"), dict):
        raise ValueError(f"{path}: not a run record of format {FORMAT}; delete the folder to start a new record")
    return index


def adoption_closure(candidates: Mapping[str, RecordJob], recorded: set[str]) -> set[str]:
    """The recorded jobs a run can adopt: ``recorded`` (keys of ``candidates``) less each job that writes a large
    output some job that is not adopted reads. That job must run, and it would write the adopted job's small
    outputs too (a compression's summary beside its checkpoint), so it is not adopted. Repeated until stable:
    dropping one job can make its producers' large outputs needed."""
    adopted = set(recorded)
    readers: dict[str, set[str]] = {}
    for key, job in candidates.items():
        for path in job.reads:
            readers.setdefault(path, set()).add(key)
    changed = True
    while changed:
        changed = False
        for key in sorted(adopted):
            needed = any(r not in adopted for p in candidates[key].large_outputs for r in readers.get(p, ()))
            if needed:
                adopted.discard(key)
                changed = True
    return adopted


def adopted_files(candidates: Iterable[RecordJob], record_dir: str | os.PathLike) -> dict[str, str]:
    """``{output path: job key}`` for every small output of the jobs the run adopts from ``record_dir``.

    Adopted: recorded with the configuration the job has now and the same outputs, and not dropped by
    :func:`adoption_closure`. Raises ``ValueError`` naming the file when a recorded file is missing or its bytes
    differ from its recorded hash."""
    record_dir = Path(record_dir)
    index = read_index(record_dir)
    by_key = {job.benchmark: job for job in candidates}
    matching = set()
    for key, job in by_key.items():
        entry = index["jobs"].get(key)
        if entry is None or entry["spec_sha256"] != spec_sha256(job.spec) or entry["outputs"] != list(job.outputs):
            continue
        for p, digest in entry["files"].items():
            checked_file(record_dir, p, digest)
        matching.add(key)
    return {p: key for key in sorted(adoption_closure(by_key, matching)) for p in by_key[key].outputs}


def checked_file(record_dir: Path, path: str, digest: str) -> Path:
    """The record's copy of ``path``, after checking that its bytes have the recorded sha256 ``digest`` (a
    ``ValueError`` naming the file and the fix when it is missing or differs)."""
    src = record_dir / FILES / path
    if not src.is_file():
        raise ValueError(f"run record {record_dir}: {src} is listed in {INDEX} but missing; restore it "
                         f"(git checkout -- {src}) or remove its job from {INDEX}")
    if sha256_file(src) != digest:
        raise ValueError(f"run record {record_dir}: {src} does not match its sha256 in {INDEX} (edited or damaged); "
                         f"restore it (git checkout -- {src}) or remove its job from {INDEX}")
    return src
