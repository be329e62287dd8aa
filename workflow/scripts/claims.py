"""Rule claims: each claim of the paper checked against this run's figures and tables."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.claims import write_claims

    write_claims(sm.input.fig3, sm.input.fig4, list(sm.input.tables), sm.output.md, sm.output.json)
