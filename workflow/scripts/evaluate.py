"""Rule evaluate: perplexity on every corpus, then zero-shot, of one variant (the model loaded once)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.steps import step_evaluate

    step_evaluate(sm.config, sm.params.variant, getattr(sm.input, "checkpoint", None),
                  dict(zip(sm.config["eval"]["ppl"], sm.output.ppl)), sm.output.zeroshot)
