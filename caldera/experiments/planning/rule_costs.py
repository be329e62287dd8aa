"""Every workflow rule's cost model (:mod:`caldera.experiments.planning.job_cost_model`), a job's predicted seconds
by its rule's model (:func:`job_seconds`) and the job profile fitted from a finished run by all of them
(:func:`fit_profile`)."""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.compression_costs import CompressCost, HessiansCost, ProfileLayersCost, ReplicateCost
from caldera.experiments.planning.engine_costs import SelectionCost, TracesCost
from caldera.experiments.planning.evaluation_costs import DenseReferenceCost, EvaluateCost, ThroughputCost
from caldera.experiments.planning.finetune_costs import LoraFinetuneCost, RhtFinetuneCost
from caldera.experiments.planning.job_cost_model import ConstantCost, FinishedRun, MissingCalibration, RuleCost
from caldera.experiments.planning.job_plan import PlannedJob
from caldera.experiments.planning.rules import Rule

#: rules priced by a constant per job (the calibration run's median): they read small files and write a report
CONSTANT_RULES = (Rule.ASSETS, Rule.ALLOCATE, Rule.WEIGHT_SPECTRA, Rule.FIGURE3_DATA, Rule.PLOT_FIGURE,
                  Rule.PLOT_RANKS, Rule.MAKE_TABLE, Rule.PENDING_TABLE, Rule.THEORY_REPORT, Rule.CLAIMS,
                  Rule.VERDICT_PAGE, Rule.PARETO, Rule.THROUGHPUT, Rule.THROUGHPUT_TABLE, Rule.LORA_TABLE,
                  Rule.TIMINGS, Rule.ASSEMBLE_CHECKPOINT)


#: every rule's cost model, in the order the fits run (compression's and the dense evaluation's fixed parts
#: stand in for the later rules' start-up)
RULE_COSTS: tuple[RuleCost, ...] = (
    EvaluateCost(), CompressCost(), ReplicateCost(), ProfileLayersCost(), HessiansCost(), ThroughputCost(),
    DenseReferenceCost(), RhtFinetuneCost(), LoraFinetuneCost(), SelectionCost(), TracesCost(),
    *(ConstantCost(r) for r in CONSTANT_RULES if r != Rule.THROUGHPUT),
)
#: rule -> its cost model
BY_RULE: dict[str, RuleCost] = {rule: cost for cost in RULE_COSTS for rule in cost.rules}


def job_seconds(job: PlannedJob, config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any]) -> float:
    """Predicted wall seconds of one job by its rule's cost model (:data:`BY_RULE`). ``MissingCalibration`` when
    the profile lacks what it needs (then the job is priced by the component laws alone, or not at all, by the
    caller)."""
    cost = BY_RULE.get(job.rule)
    if cost is None:
        raise MissingCalibration(f"no model for rule {job.rule!r}")
    return cost.predict(job, config, profile, costs)


def fit_profile(run: FinishedRun) -> dict[str, Any]:
    """The ``models``, ``engine`` and ``constants`` sections of the job profile fitted from ``run``, each rule's
    cost model in :data:`RULE_COSTS` order (a fit sees the sections fitted before it)."""
    profile: dict[str, Any] = {"models": {}, "engine": {}, "constants": {}}
    for cost in RULE_COSTS:
        for section, entries in cost.fit(run, profile).items():
            for key, value in entries.items():
                if section == "models":
                    profile["models"].setdefault(key, {}).update(value)
                else:
                    profile[section][key] = value
    return profile
