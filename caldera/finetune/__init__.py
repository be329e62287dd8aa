"""Fine-tuning of compressed models (paper §5.3, App. E.4): low-rank adaptation of CALDERA's factors."""
