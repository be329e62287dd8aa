"""Rule assemble_checkpoint: the variant's checkpoint from its chunks' per-layer files, and its summary."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.compress import step_assemble
    from caldera.atomic import write_json

    write_json(sm.output.summary, step_assemble(sm.params.run, sm.params.variant, list(sm.input.chunks),
                                              sm.output.checkpoint, sm.input.hessians))
