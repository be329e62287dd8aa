"""Rule lora_table: Table 5 (LoRA fine-tuning) from this run's fine-tuning results beside the paper's numbers."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.table5 import write_table5

    o = sm.output
    write_table5(sm.params.results, sm.params.plan, o.md, o.tex, o.csv, o.json)
