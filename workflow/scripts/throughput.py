"""Rule throughput: both batch-1 throughput protocols for one variant (Table 6), threads pinned."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.throughput import step_throughput

    step_throughput(sm.config, sm.params.variant, getattr(sm.input, "checkpoint", None), sm.output[0])
