"""Rule allocate: a variant's per-matrix settings from every chunk's profiles."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.compress import step_allocate

    step_allocate(sm.params.variant, list(sm.input.profiles), sm.output[0])
