"""Rule pending_table: a table whose measurements this run does not make (the paper's numbers alone)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.tables import write_pending_table

    o = sm.output
    write_pending_table(sm.wildcards.ptable, sm.params.reason, o.md, o.tex, o.csv)
