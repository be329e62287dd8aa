"""Rule compress_variant: a variant of one chunk of layers, its per-layer files and its checkpoint in one job."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.compress import step_compress_variant
    from caldera.atomic import write_json

    write_json(sm.output.summary, step_compress_variant(sm.params.run, sm.params.variant, sm.input.hessians,
                                                        sm.params.layers, sm.output.checkpoint,
                                                        next(iter(sm.input.allocation), None)))
