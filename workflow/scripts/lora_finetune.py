"""Rule lora_finetune: one Table 5 row fine-tuned on one task (re-split, train, evaluate best and final)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.loraft import step_lora_finetune

    p = sm.params
    step_lora_finetune(p.settings, p.eval_settings, p.run, p.row, sm.wildcards.lora_task, sm.input.checkpoint,
                       sm.output.json, p.work)
