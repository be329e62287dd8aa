"""Rule hessians: the calibration Hessians of one model, into the rule's output folder."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.calibrate import step_hessians

    step_hessians(sm.params.run, sm.wildcards.model, sm.output[0])
