"""Rule figure3_data: Figure 3's JSON from its jobs' curves."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.figures import step_figure3_data

    step_figure3_data(sm.params.settings.model, list(sm.input), sm.output[0], sm.params.settings)
