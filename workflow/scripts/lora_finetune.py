"""Rule lora_finetune: one Table 5 row fine-tuned on one task (re-split, train, evaluate best and final)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.loraft import step_lora_finetune

    step_lora_finetune(sm.config, sm.wildcards.lora_row, sm.wildcards.lora_task, sm.input.checkpoint,
                       sm.output.json, sm.params.work)
