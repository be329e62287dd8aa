"""Rule verdict_page: verdicts.md (the counts and one row per distinct claim) and the forest plot, from claims.json."""

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.verdict_page import write_verdict_page

    write_verdict_page(sm.input[0], sm.output.md, sm.output.png, sm.output.pdf, labels=sm.params.run.labels())
