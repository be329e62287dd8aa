"""Shared by the tests of the run's record (tests/experiments/planning/test_record.py, tests/experiments/jobs/
test_record.py): a small graph of record candidates and a finished job's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from caldera.experiments.planning.record import RecordJob

R = "results/run"


def record_jobs(spec="s1"):
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


def finish_job(root: Path, job: RecordJob, value: int = 1, end: float = 1_700_000_000.0) -> None:
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
