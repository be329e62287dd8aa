"""Rule pareto: perplexity against bits per weight for every method of the run, from the table JSONs."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.pareto import write_pareto

    write_pareto(list(sm.input), sm.output.png, sm.output.pdf, corpus=sm.params.corpus)
