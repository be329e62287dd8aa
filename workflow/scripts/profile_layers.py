"""Rule profile_layers: one chunk's profiles of a method that chooses settings per matrix."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.compress import step_profile_layers

    step_profile_layers(sm.params.run, sm.params.variant, sm.input.hessians, int(sm.wildcards.chunk), sm.output[0])
