"""Rule rht_finetune: the RHT signs of one variant's checkpoint fine-tuned against its dense model (Tables 3-4)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.rhtft import step_rht_finetune

    p = sm.params
    step_rht_finetune(p.settings, p.run, p.source, p.variant, sm.input.checkpoint, sm.output.checkpoint,
                      sm.output.summary, state_path=p.state)
