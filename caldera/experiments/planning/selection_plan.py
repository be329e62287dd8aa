"""The plan of the configuration selection of the CALDERA rows: which models are swept, the candidate
configurations, the bits and ranks they are compared at (:mod:`caldera.experiments.jobs.selection` runs the sweep,
:mod:`caldera.experiments.report.selection_report` renders it and decides its claims)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from caldera.experiments.planning.settings import FiguresSettings, RunContext, SelectionSettings


def selection_models(config: dict[str, Any]) -> list[str]:
    """Stand-ins the sweep runs on: the models of ``selection.layers`` that stand in for a paper model (a config
    passed with ``--configfile`` on top of another is merged key by key, so ``layers`` may name models this run
    does not use)."""
    used = set(config["stand_ins"].values())
    return sorted(m for m in config.get("selection", {}).get("layers", {}) if m in used)


@dataclasses.dataclass(frozen=True)
class SelectionPlan:
    """What rule selection's job needs, built when the plan is made (:meth:`from_config`; its ``plan`` param):
    the ``selection`` and ``figures`` settings, the run (models, stand-ins, ranks, layers), the stand-ins swept
    (:func:`selection_models`), the CALDERA ranks swept per stand-in and B_LR (:func:`caldera_ranks`), QuIP#'s
    params (``methods.quip#.params``: the reference every ratio divides by) and the run's own CALDERA params per
    B_LR (:func:`caldera.experiments.planning.plan.caldera_params`: whether the selection matches the run)."""

    settings: SelectionSettings
    figures: FiguresSettings
    run: RunContext
    models: list[str]
    ranks: dict[str, dict[int, list[int]]]
    quip_params: dict[str, Any]
    run_params: dict[int, dict[str, Any]]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SelectionPlan:
        from caldera.experiments.planning.plan import caldera_params

        settings = SelectionSettings.from_block(config["selection"])
        models = selection_models(config)
        bits = selection_bits(settings.as_block())
        return cls(settings=settings, figures=FiguresSettings.from_block(config["figures"]),
                   run=RunContext.from_config(config), models=models,
                   ranks={m: {b: caldera_ranks(config, m, b, settings.ranks) for b in bits} for m in models},
                   quip_params=dict(config["methods"]["quip#"]["params"]),
                   run_params={b: caldera_params(config, b) for b in bits})


def selection_bits(sel: Mapping[str, Any]) -> list[int]:
    """The factor precisions B_LR swept (``selection.bits``: one B_LR or a list); each gets its own selection."""
    bits = sel["bits"]
    return [int(b) for b in (bits if isinstance(bits, list) else [bits])]


def caldera_ranks(config: dict[str, Any], model: str, bits: int, which: str) -> list[int]:
    """Ranks of this run's CALDERA rows of ``model`` with ``bits``-bit factors (``caldera.experiments.planning.plan``):
    all of them (``which="all"``) or the smallest and the largest (``"extremes"``)."""
    from caldera.experiments.planning.plan import all_variants

    ranks = sorted({v.rank for v in all_variants(config).values()
                    if v.model == model and v.method == "caldera" and v.b_lr == bits})
    if not ranks:
        raise ValueError(f"selection: the run has no CALDERA row of model {model!r} with {bits}-bit factors; "
                         f"set selection.bits to a B_LR of the tables' CALDERA rows")
    if which == "all":
        return ranks
    if which == "extremes":
        return sorted({ranks[0], ranks[-1]})
    raise ValueError(f"selection.ranks={which!r}; accepted: all | extremes")


def candidate_params(sel: dict[str, Any], name: str, iters: Sequence[int]) -> dict[str, Any]:
    """Method params (``methods.caldera.params`` form) of candidate ``name`` at T_out, T_in = ``iters``."""
    if name not in sel["candidates"]:
        raise ValueError(f"selection: unknown candidate {name!r}; candidates: {sorted(sel['candidates'])}")
    return {**sel.get("base", {}), **sel["candidates"][name], "outer_iters": int(iters[0]),
            "inner_iters": int(iters[1])}


def matrix_claim_variants(config: dict[str, Any]) -> dict[str, Any]:
    """The variants :func:`matrix_level_claims` compares (every CALDERA and QuIP# variant of the run's tables),
    by id: made when the plan is made (rule claims' ``matrix_variants`` param)."""
    from caldera.experiments.planning.plan import all_variants

    return {k: v for k, v in all_variants(config).items() if v.method in ("caldera", "quip#")}


def matrix_claim_inputs(config: dict[str, Any], results_dir: str) -> list[str]:
    """The compression summaries :func:`matrix_level_claims` reads (for a rule's ``input``)."""
    return sorted(f"{results_dir}/compressed/{v.id}/summary.json" for v in matrix_claim_variants(config).values())
