"""Fine-tuning of compressed models: RHT sign fine-tuning (paper §5.2, Tables 3–4) in :mod:`caldera.finetune.rht`."""
