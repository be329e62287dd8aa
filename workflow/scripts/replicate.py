"""Rule replicate: one seed realization of a variant of one chunk, its compression, checkpoint and evaluation in one
job."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.compress import step_replicate

    p = sm.params
    step_replicate(p.run, p.settings, p.variant, sm.input.hessians, p.layers, sm.output.checkpoint, sm.output.summary,
                   dict(zip(p.settings.ppl, sm.output.ppl)), sm.output.zeroshot, p.replicate_zeroshot,
                   allocation=next(iter(sm.input.allocation), None), reference=getattr(sm.input, "reference", None),
                   replicate_corpora=p.replicate_corpora, zeroshot_limit=p.zeroshot_limit)
