"""Rule pending_table: a table whose measurements have their own issue (the paper's numbers now)."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.plan import pending_tables
    from caldera.experiments.tables import write_pending_table

    o = sm.output
    write_pending_table(sm.wildcards.ptable, pending_tables(sm.config)[sm.wildcards.ptable], o.md, o.tex, o.csv)
