"""Rule timings: run time per workflow stage, from the Snakemake ``benchmark:`` files of this run."""

from pathlib import Path

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.planning.job_costs import read_benchmarks
    from caldera.experiments.report.timings import step_timings

    step_timings(read_benchmarks(Path(sm.params.benchmarks)), sm.params.run, sm.output.json, sm.output.md)
