"""Rule evaluate: perplexity on every corpus, then zero-shot, of one variant (the model loaded once)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.evaluate import step_evaluate

    p = sm.params
    step_evaluate(p.settings, p.run, p.variant, getattr(sm.input, "checkpoint", None),
                  dict(zip(p.settings.ppl, sm.output.ppl)), sm.output.zeroshot, p.replicate_zeroshot,
                  reference=getattr(sm.input, "reference", None), replicate_corpora=p.replicate_corpora,
                  zeroshot_limit=p.zeroshot_limit)
