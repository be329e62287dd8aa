"""Rule ablation_traces: one job's curves of Figure 3 (caldera.experiments.planning.figure_plan.figure3_jobs)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.figures import step_ablation_traces

    step_ablation_traces(sm.params.run, sm.params.settings.model, sm.input.hessians, sm.wildcards.trace, sm.output[0],
                         sm.params.settings)
