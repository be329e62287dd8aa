"""Rule throughput_table: Table 6 from this run's throughput measurements, the paper's numbers beside."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.table6 import write_throughput_table

    o = sm.output
    write_throughput_table(sm.params.results, sm.params.plan, o.md, o.tex, o.csv, o.json)
