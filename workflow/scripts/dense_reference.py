"""Rule dense_reference: the dense model's next-token distributions on the compared corpus's windows."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.evaluate import step_reference

    step_reference(sm.params.settings, sm.params.run, sm.wildcards.model, sm.output[0])
