"""Rule throughput: both batch-1 throughput protocols for every Table 6 variant of one model, timed together in
interleaved rounds (Table 6), torch threads pinned to the job's ``torch_threads`` resource (a profile's
``set-resources: {throughput: {torch_threads: N}}``; default 1)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.throughput import step_throughput

    step_throughput(sm.params.settings, sm.params.run, sm.params.variants, dict(sm.params.checkpoints),
                    sm.output[0], torch_threads=sm.resources.torch_threads)
