"""The paper's checkable claims as predicates on this run's measured results → ``claims.md``.

The claims are declared, one entry each, in :mod:`caldera.experiments.report.claim_registry`; :func:`check` decides
every entry in registry order, dispatching on its kind (:data:`DECIDERS`), with the decision rule the entry names
(:mod:`caldera.experiments.report.claim_rules`). Each claim gets a verdict and the numbers behind it:

* **Ordering claims on evaluation results** (perplexity, zero-shot) are decided by a *paired* 95 % interval and
  state their *smallest detectable difference* (sdd), the interval's half-width
  (:mod:`caldera.experiments.report.table_claims`).
* **Matrix-level claims** (Figures 3/4: one deterministic data-aware error per matrix) are holds / fails on
  the numbers shown.
* not testable at this scale / not measured in this run (the run makes no table the claim needs).

Inputs: the table JSONs of :mod:`caldera.experiments.report.tables`, the Figure 3/4 data JSONs of
:mod:`caldera.experiments.jobs.figures`, and optional ``extra`` claim entries of the same form.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from caldera import stats
from caldera.atomic import write_atomic
from caldera.experiments.planning.plan import RHTFT_TABLES
from caldera.experiments.report.claim_registry import (
    CONVERGENCE,
    EXTRA_METHODS,
    FAMILIES,
    FIGURE3,
    FIGURE4,
    GIVEN,
    LORA,
    REGISTRY,
    RHTFT,
    TABLE,
    THROUGHPUT,
    UNMEASURED,
    ClaimEntry,
    declared_entry,
)
from caldera.experiments.report.claim_rules import RELATIONS, count_verdict
from caldera.experiments.report.finetune_claims import lora_claims, rhtft_claims
from caldera.experiments.report.spread import spread_report
from caldera.experiments.report.table_claims import extra_method_claims, family_claims, table_claims
from caldera.experiments.report.verdicts import NOT_MEASURED, VERDICTS


def _final(curve: dict[str, Any]) -> float:
    return min(curve["errors"])


def _by(curves: list[dict[str, Any]], method: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(c["matrix"], c["paper_rank"]): c for c in curves if c["method"] == method}


def _pairwise(curves, a: str, b: str, pred: Callable[[float, float], bool]) -> tuple[int, int, list[str]]:
    A, B = _by(curves, a), _by(curves, b)
    keys = sorted(set(A) & set(B))
    ok = [k for k in keys if pred(_final(A[k]), _final(B[k]))]
    detail = [f"{k[0]}@{k[1]}: {_final(A[k]):.4f} vs {_final(B[k]):.4f}" for k in keys]
    return len(ok), len(keys), detail


@dataclasses.dataclass(frozen=True)
class RunResults:
    """What a run's claims are decided on: the Figure 3 / 4 data (``fig3``, ``fig4``), the table JSONs (with the
    pooled spreads of :func:`caldera.experiments.report.realization_pool.attach_pools`), the entries decided by
    the job that wrote them (``given``), Table 6's and Table 5's JSONs (None: not in this run)."""

    fig3: dict[str, Any]
    fig4: dict[str, Any]
    tables: dict[str, dict[str, Any]]
    given: list[dict[str, Any]]
    throughput: dict[str, Any] | None
    lora: dict[str, Any] | None

    @property
    def zero_shot_tables(self) -> dict[str, dict[str, Any]]:
        """The tables without the RHT fine-tuning tables (those are Tables 3-4's claims alone)."""
        return {k: t for k, t in self.tables.items() if k not in RHTFT_TABLES}


def _line(entry: ClaimEntry, verdict: str, numbers: str, sdd: str = "— (deterministic)") -> dict[str, Any]:
    return {"claim": entry.claim, "source": entry.source, "verdict": verdict, "numbers": numbers, "sdd": sdd}


def _not_measured(kind: str) -> dict[str, Any]:
    claim, source = UNMEASURED[kind]
    return {"claim": claim, "source": source, "verdict": NOT_MEASURED, "numbers": "—",
            "sdd": "—"}


def decide_figure3(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """Each Figure 3 comparison: the final errors of its two runs on every matrix×rank pair both have, by the
    entry's relation, counted by its rule."""
    out = []
    for e in group:
        k, n, detail = _pairwise(run.fig3["curves"], *e.compares, RELATIONS[e.relation])
        out.append(_line(e, count_verdict(e.rule, k, n), f"{k}/{n} matrix×rank pairs; " + "; ".join(detail)))
    return out


def decide_convergence(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """The errors at outer iteration 2 of the entry's two runs (the first with the Hessian update) on every
    matrix×rank pair both have, by its relation, counted by its rule; the first three iterates shown."""
    out = []
    for e in group:
        H, P = (_by(run.fig3["curves"], m) for m in e.compares)
        keys = sorted(set(H) & set(P))
        two = keys and len(H[keys[0]]["errors"]) > 1
        faster = [k for k in keys if RELATIONS[e.relation](H[k]["errors"][1], P[k]["errors"][1])] if two else []
        numbers = f"{len(faster)}/{len(keys)} pairs; " + "; ".join(
            f"{k[0]}@{k[1]}: {', '.join(f'{x:.4f}' for x in H[k]['errors'][:3])} vs "
            f"{', '.join(f'{x:.4f}' for x in P[k]['errors'][:3])}" for k in keys)
        out.append(_line(e, count_verdict(e.rule, len(faster), len(keys)), numbers))
    return out


def decide_figure4(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """Each LPLRFactorize curve of Figure 4: is its lowest error after the first iterate below the first? Counted
    by the entry's rule."""
    curves = run.fig4["curves"]
    lower = [c for c in curves if min(c["errors"][1:] or [float("inf")]) < c["errors"][0]]
    return [_line(e, count_verdict(e.rule, len(lower), len(curves)), "; ".join(
        f"{c['matrix']} k={c['rank']}: {c['errors'][0]:.4f} → {min(c['errors']):.4f}" for c in curves))
        for e in group]


def decide_given(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """The entries the workflow decided before (``extra``: the compression summaries' matrix-level claim), each
    validated."""
    return [_validated_extra(e) for e in run.given]


def decide_table_rows(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """The claims on the zero-shot tables' rows (:func:`table_claims`)."""
    return table_claims(run.zero_shot_tables, group)


def decide_extra_methods(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """Each ``extra_methods`` row at the nearest bits (:func:`extra_method_claims`)."""
    return [c for e in group for c in extra_method_claims(run.zero_shot_tables, e.rule)]


def decide_families(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """The second model family's loss against the first's (:func:`family_claims`)."""
    return family_claims(group, run.tables)


def decide_rhtft(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """Tables 3-4 (:func:`caldera.experiments.report.finetune_claims.rhtft_claims`), or not measured without a measured
    fine-tuned row."""
    out = [c for e in group for c in rhtft_claims(run.tables, e.rule)]
    return out or [_not_measured(RHTFT)]


def decide_lora(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """Table 5 (:func:`caldera.experiments.report.finetune_claims.lora_claims`), or not measured without its JSON."""
    return lora_claims(run.lora, run.tables) if run.lora is not None else [_not_measured(LORA)]


def decide_throughput(group: list[ClaimEntry], run: RunResults) -> list[dict[str, Any]]:
    """Table 6's orderings (:func:`caldera.experiments.report.table6.throughput_claims`), or one not-measured line
    without its JSON."""
    if run.throughput is None:
        return [_not_measured(THROUGHPUT)]
    from caldera.experiments.report.table6 import throughput_claims

    return throughput_claims(run.throughput, group)


#: how each kind of entry is decided: (its entries, in registry order; the run's results) → claims.md entries
DECIDERS: dict[str, Callable[[list[ClaimEntry], RunResults], list[dict[str, Any]]]] = {
    FIGURE3: decide_figure3,
    CONVERGENCE: decide_convergence,
    FIGURE4: decide_figure4,
    GIVEN: decide_given,
    TABLE: decide_table_rows,
    EXTRA_METHODS: decide_extra_methods,
    FAMILIES: decide_families,
    RHTFT: decide_rhtft,
    LORA: decide_lora,
    THROUGHPUT: decide_throughput,
}


def check(fig3: dict[str, Any], fig4: dict[str, Any], tables: dict[str, dict[str, Any]],
          extra: list[dict[str, Any]] | None = None, throughput: dict[str, Any] | None = None,
          lora: dict[str, Any] | None = None, registry: tuple[ClaimEntry, ...] = REGISTRY) -> list[dict[str, Any]]:
    """Every claim of ``registry`` as ``{"claim", "source", "verdict", "numbers", "sdd"}`` (``sdd``: smallest
    detectable difference of an evaluation comparison, "—" for deterministic matrix-level numbers), in registry
    order: each run of consecutive entries of one kind is decided together by that kind's :data:`DECIDERS`
    function. ``extra`` entries of the same form (``sdd`` optional) are the "given" entries: validated and listed
    where the registry places them. ``throughput``: the Table 6 JSON
    (:func:`caldera.experiments.report.table6.build_throughput_table`); ``lora``: Table 5's
    (:mod:`caldera.experiments.report.table5`)."""
    from caldera.experiments.report.realization_pool import attach_pools

    run = RunResults(fig3, fig4, attach_pools(tables), list(extra or []), throughput, lora)
    out: list[dict[str, Any]] = []
    for kind, group in itertools.groupby(registry, key=lambda e: e.kind):
        out += DECIDERS[kind](list(group), run)
    return out


def _validated_extra(e: dict[str, Any]) -> dict[str, Any]:
    missing = {"claim", "source", "verdict", "numbers"} - set(e)
    if missing:
        raise ValueError(f"extra claim {e!r} lacks {sorted(missing)}; give claim, source, verdict, numbers")
    if e["verdict"] not in VERDICTS:
        raise ValueError(f"extra claim {e['claim']!r}: verdict {e['verdict']!r} is not one of {VERDICTS}")
    return {"sdd": "— (deterministic)", **e}


SDD_NOTE = ("Each claim is **holds**, **fails** or **inconclusive** by a 95 % interval that counts the evaluation "
            "sample ({resamples} paired bootstrap resamples, seed {seed}) and the compression's realization spread "
            "(a variant's own seeds, or its method family's pooled spread where it was run once); *smallest "
            "detectable difference*: the interval's half-width. How each kind of claim is decided: "
            "[docs/claims.md](../../docs/claims.md).")


def claims_table(claims: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of ``claims`` (header, rule, one line per claim), as ``claims.md`` prints it; entry ``i``
    (1-based) carries the anchor ``claim-i`` that ``verdicts.md`` links to."""
    if any("regime" in c for c in claims):  # a run with regime.run: the regime column after the verdict
        from caldera.experiments.report.regime_claims import regime_cell

        return ["| claim | source | verdict | in the stand-in's regime | numbers | smallest detectable difference |",
                "|---|---|---|---|---|---|",
                *(f"| <a id=\"claim-{i}\"></a>{c['claim']} | {c['source']} | **{c['verdict']}** | {regime_cell(c)} | "
                  f"{c['numbers']} | {c['sdd']} |" for i, c in enumerate(claims, 1))]
    return ["| claim | source | verdict | numbers | smallest detectable difference |", "|---|---|---|---|---|",
            *(f"| <a id=\"claim-{i}\"></a>{c['claim']} | {c['source']} | **{c['verdict']}** | {c['numbers']} | "
              f"{c['sdd']} |" for i, c in enumerate(claims, 1))]


def jsonable(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``claims`` with ±inf interval bounds (a seed part undetermined) as null: JSON has no infinity. In place."""
    for c in claims:
        if isinstance(c.get("regime"), dict) and "intervals" in c["regime"]:
            jsonable([c["regime"]])
        for key in ("intervals", "kl"):
            if key in c or key == "intervals":
                c[key] = [{k: (None if isinstance(x, float) and not math.isfinite(x) else x) for k, x in iv.items()}
                          for iv in c.get(key, [])]
    return claims


def write_claims(fig3_json: str, fig4_json: str, table_jsons: list[str], out_md: str, out_json: str,
                 extra: list[dict[str, Any]] | None = None, selection_json: str | None = None,
                 throughput_json: str | None = None, lora_json: str | None = None, spread_md: str | None = None,
                 spread_json: str | None = None, declared: Sequence[Any] = (),
                 regime_table_jsons: Sequence[str] = (), same_regime: Sequence[str] = ()) -> list:
    """``claims.md`` / ``claims.json`` from the figure and table JSONs; ``extra``: more claim entries (dicts with
    ``claim``, ``source``, ``verdict``, ``numbers`` and optionally ``sdd``), listed after the matrix-level ones.
    ``selection_json``: the selection rule's output; each failing Figure 3/4 claim that it re-measured under the
    selected configuration then says whether the failure survives that choice
    (:func:`caldera.experiments.report.selection_report.configuration_notes`). ``throughput_json``: Table 6's JSON (its
    ordering claims, :func:`caldera.experiments.report.table6.throughput_claims`). ``declared``: the claims the
    run's config declares (:func:`caldera.experiments.planning.settings.declared_claims`), stated after the
    registry's (:func:`caldera.experiments.report.claim_registry.declared_entry`). ``regime_table_jsons``: the
    regime tables (``<table>_regime``) of a run with ``regime.run``, and ``same_regime`` the names of its tables
    whose stand-ins' regime is 2 bits: every table claim is decided again on them and set beside the 2-bit claim
    (:mod:`caldera.experiments.report.regime_claims`: the regime column)."""
    from caldera.atomic import write_json

    fig3 = json.loads(Path(fig3_json).read_text())
    fig4 = json.loads(Path(fig4_json).read_text())
    tables = {Path(p).stem: json.loads(Path(p).read_text()) for p in table_jsons}
    throughput = json.loads(Path(throughput_json).read_text()) if throughput_json else None
    lora = json.loads(Path(lora_json).read_text()) if lora_json else None
    declared_entries = tuple(declared_entry(c) for c in declared)
    claims = check(fig3, fig4, tables, extra=extra, throughput=throughput, lora=lora,
                   registry=(*REGISTRY, *declared_entries))
    if selection_json is not None:
        from caldera.experiments.report.selection_report import configuration_notes

        claims = configuration_notes(claims, json.loads(Path(selection_json).read_text()))
    regime_note: list[str] = []
    if regime_table_jsons:
        from caldera.experiments.report.regime_claims import (
            attach_regime,
            decide_regime,
            regime_entries,
            regime_note_lines,
        )

        regime_tabs = {Path(p).stem: json.loads(Path(p).read_text()) for p in regime_table_jsons}
        regime = decide_regime(regime_tabs, {t: tables[t] for t in same_regime if t in tables}, declared_entries)
        claims = attach_regime(claims, jsonable(regime), regime_entries(declared_entries))
        regime_note = regime_note_lines(claims)
    lines = ["# Claims of the paper, checked on this run", "",
             SDD_NOTE.format(resamples=stats.RESAMPLES, seed=stats.SEED), "", *regime_note,
             *claims_table(claims)]
    write_atomic(out_md, "\n".join(lines) + "\n")
    write_json(out_json, jsonable(claims))
    if spread_md is not None:
        md, data = spread_report(tables, claims)
        write_atomic(spread_md, md)
        write_json(spread_json or str(Path(spread_md).with_suffix(".json")), data)
    return claims


