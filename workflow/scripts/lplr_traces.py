"""Rule lplr_traces: Figure 4 data."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.figures import step_lplr_traces

    step_lplr_traces(sm.params.run, sm.params.settings.model, sm.input.hessians, sm.output[0], sm.params.settings)
