"""Rule weight_spectra: Figure 1 data."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.figures import step_spectra

    step_spectra(sm.params.run, sm.params.settings.model, sm.output[0])
