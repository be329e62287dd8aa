"""Rule assets: fetch and verify every asset of the run."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.calibrate import step_assets

    step_assets(sm.params.run, sm.params.settings, sm.output[0])
