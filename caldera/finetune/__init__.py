"""Fine-tuning of compressed models: RHT sign fine-tuning (paper §5.2, Tables 3–4) in :mod:`caldera.finetune.rht`;
low-rank adaptation of CALDERA's factors (§5.3, Table 5) in :mod:`caldera.finetune.lora`."""
