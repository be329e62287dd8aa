"""Rule claims: each claim of the paper checked against this run's figures, tables and compression summaries."""

import json
from pathlib import Path

from caldera_job import job

sm = snakemake  # noqa: F821  (injected by Snakemake)
with job(sm):
    from caldera.experiments.report.claims import write_claims
    from caldera.experiments.report.selection_report import matrix_level_claims

    summaries = {Path(p).parent.name: json.loads(Path(p).read_text()) for p in sm.input.summaries}
    write_claims(sm.input.fig3, sm.input.fig4, list(sm.input.tables), sm.output.md, sm.output.json,
                 extra=matrix_level_claims(sm.params.matrix_variants, sm.params.run.labels(), summaries),
                 selection_json=sm.input.selection[0] if sm.input.selection else None,
                 throughput_json=sm.input.throughput,
                 lora_json=sm.input.lora[0] if sm.input.lora else None,
                 spread_md=sm.output.spread_md, spread_json=sm.output.spread_json, declared=sm.params.declared,
                 regime_table_jsons=list(sm.input.regime), same_regime=sm.params.same_regime)
