"""Rule make_table: one zero-shot table of the paper from this run's results."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.tables import write_table

    o = sm.output
    write_table(sm.params.results, sm.params.plan, o.md, o.tex, o.csv, o.json)
