"""Rule selection: the CALDERA rows' configuration, chosen on the calibration Hessians."""

import os

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.jobs.selection import step_selection

    step_selection(sm.params.plan, {os.path.basename(d): d for d in sm.input.hessians}, sm.output.json,
                   sm.output.md)
