"""Claims of a partial run: the tables it evaluated, their claims and their spread, without the rest of the workflow.

A reproducibility check reruns only the claim-relevant variants (a fresh-seed rerun, or an overlay with more
seeds) — e.g. ``snakemake results/<name>/eval/<variant>/ppl_wiki.json …`` — so the ``claims`` rule, which needs every
table and figure, does not run. This builds what it can from the run's results folder with the same library
functions (:func:`caldera.experiments.report.tables.build_table`,
:func:`caldera.experiments.report.table_claims.table_claims`,
:func:`caldera.experiments.report.spread.spread_report`)::

    python -m caldera.experiments.report.rerun CONFIG.yaml RESULTS_DIR OUT_DIR [--overlay OVERLAY.yaml] [--tables …]

writes ``OUT_DIR/claims.json``, ``claims.md`` and ``spread.md`` (and, with ``--write-tables``, each table's
md/tex/csv/json as rule ``make_table`` writes them). ``--targets`` prints instead the evaluation files those tables
read (every row variant and its seed replicates), the Snakemake targets of such a partial run. Compare with
``python -m caldera.experiments.report.coverage COMMITTED/claims.json OUT_DIR/claims.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from caldera.strict_yaml import load_yaml_strict

DEFAULT_TABLES = ("table1_llama2_zeroshot", "table7_mistral")


def rerun_claims(config: dict[str, Any], results_dir: str, tables: tuple[str, ...] = DEFAULT_TABLES
                 ) -> tuple[list[dict[str, Any]], str]:
    """``(claims, spread_md)`` of ``tables`` built from ``results_dir`` under ``config`` (the run's own config)."""
    from caldera.experiments.report.tables import TablePlan, build_table

    return claims_of_tables({t: build_table(results_dir, TablePlan.from_config(config, t)) for t in tables})


def claims_of_tables(built: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """``(claims, spread_md)`` of table JSONs ``{name: table}`` (built by :func:`rerun_claims`, or a finished
    run's committed ones, so that the current statistics decide a committed run's samples anew)."""
    from caldera.experiments.report.realization_pool import attach_pools
    from caldera.experiments.report.spread import spread_report
    from caldera.experiments.report.table_claims import extra_method_claims, table_claims

    pooled = attach_pools(built)  # the pooled spreads of these tables' replicated variants, as rule `claims` pools
    claims = table_claims(pooled) + extra_method_claims(pooled)  # as rule `claims` builds them (RHT-FT tables aside)
    md, _ = spread_report(built, claims)
    return claims, md


def eval_targets(config: dict[str, Any], results_dir: str, tables: tuple[str, ...] = DEFAULT_TABLES) -> list[str]:
    """``<results_dir>/eval/<variant>/ppl_wiki.json`` of every variant the ``tables``' rows read (each row variant,
    an RHT-FT row's base, and their seed replicates), sorted: asking Snakemake for them runs the compressions and
    evaluations those tables' claims need, and nothing else."""
    from caldera.experiments.report.tables import TablePlan

    ids: set[str] = set()
    for t in tables:
        plan = TablePlan.from_config(config, t)
        for r in plan.rows:
            for v in (r.get("variant"), r.get("base")):
                if v is not None:
                    ids.add(v.id)
                    ids.update(x.id for x in plan.replicates.get(v.id, []))
    return [f"{results_dir}/eval/{i}/ppl_wiki.json" for i in sorted(ids)]


def render(claims: list[dict[str, Any]], title: str) -> str:
    from caldera.experiments.report.claims import claims_table

    return "\n".join([f"# {title}", "", *claims_table(claims)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="the run's config (YAML)")
    ap.add_argument("--overlay", action="append", default=[], metavar="YAML",
                    help="a config merged over CONFIG, as a second `--configfile` is (repeatable; e.g. "
                         "config/mini-seeds.yaml)")
    ap.add_argument("results", help="the run's results folder, e.g. results/mini-reseed; with --from-tables, the "
                                    "folder of a finished run's table JSONs (e.g. paper_tables/generated)")
    ap.add_argument("out", help="folder for claims.json, claims.md, spread.md")
    ap.add_argument("--tables", nargs="+", default=list(DEFAULT_TABLES))
    ap.add_argument("--write-tables", action="store_true",
                    help="also write each table's .md/.tex/.csv/.json into OUT (as rule make_table does)")
    ap.add_argument("--from-tables", action="store_true",
                    help="RESULTS holds table JSONs (a finished run's tables folder): decide their samples with the "
                         "current statistics instead of building the tables from a results folder")
    ap.add_argument("--targets", action="store_true",
                    help="print the evaluation files the tables read (the partial run's Snakemake targets) and stop")
    ap.add_argument("--schema", default="workflow/schemas/config.schema.yaml",
                    help="the workflow's config schema (defaults filled from it when the file exists)")
    a = ap.parse_args(argv)
    config = load_yaml_strict(a.config)
    for extra in a.overlay:  # deep merge, as Snakemake merges several --configfile
        from snakemake.utils import update_config

        update_config(config, load_yaml_strict(extra))
    schema = Path(a.schema)
    if schema.exists():  # the workflow's schema fills its defaults, as the workflow does
        from snakemake.utils import validate

        validate(config, str(schema))
    if a.targets:
        print(" ".join(eval_targets(config, a.results, tuple(a.tables))))
        return 0
    if a.from_tables:
        import json

        missing = [t for t in a.tables if not (Path(a.results) / f"{t}.json").is_file()]
        if missing:
            ap.error(f"--from-tables: {a.results} has no {', '.join(f'{t}.json' for t in missing)}")
        claims, spread = claims_of_tables({t: json.loads((Path(a.results) / f"{t}.json").read_text())
                                           for t in a.tables})
    else:
        claims, spread = rerun_claims(config, a.results, tuple(a.tables))
    from caldera.atomic import write_atomic, write_json
    from caldera.experiments.report.claims import jsonable

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "claims.md", render(claims, f"Claims of {', '.join(a.tables)} ({config.get('name')})"))
    write_json(str(out / "claims.json"), jsonable(claims))
    write_atomic(out / "spread.md", spread)
    if a.write_tables:
        from caldera.experiments.report.tables import TablePlan, write_table

        for t in a.tables:
            outs = [str(out / f"{t}.{ext}") for ext in ("md", "tex", "csv", "json")]
            write_table(a.results, TablePlan.from_config(config, t), *outs)
    for c in claims:
        print(f"{c['verdict']:>36} | {c['claim']} | {c['source']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
