"""Rule compress_layers: one chunk of decoder layers of one variant, into the rule's output folder."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.compress import step_compress_layers

    step_compress_layers(sm.params.run, sm.params.variant, sm.input.hessians, int(sm.wildcards.chunk),
                         f"{sm.output.layers}/chunk.json", next(iter(sm.input.allocation), None))
