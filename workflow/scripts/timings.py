"""Rule timings: run time per workflow stage, from the Snakemake ``benchmark:`` files of this run."""

from pathlib import Path

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.record import run_timings
    from caldera.experiments.report.timings import step_timings

    jobs, earlier = run_timings(Path(sm.params.benchmarks), sm.params.record)
    step_timings(jobs, sm.params.run, sm.output.json, sm.output.md, from_record=earlier)
