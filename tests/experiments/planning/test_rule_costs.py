"""caldera.experiments.planning.rule_costs: every rule's cost model, a job priced by its rule's model and the
profile fitted by all of them in order."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning import rule_costs as RC
from caldera.experiments.planning.cost import load_costs
from caldera.experiments.planning.job_cost_model import ConstantCost, MissingCalibration
from caldera.experiments.planning.job_plan import PlannedJob, corpus_tokens, plan_jobs
from caldera.experiments.planning.rules import Rule
from tests.helpers import FAKE_RATES, bench_file, fake_timed_run, workflow_config


@pytest.mark.parametrize("name", ["smoke", "mini", "mini-full", "paper"])
def test_every_planned_job_has_one_cost_model(name):
    rules = {j.rule for j in plan_jobs(workflow_config(name))}
    assert rules <= set(RC.BY_RULE), rules - set(RC.BY_RULE)
    listed = [r for cost in RC.RULE_COSTS for r in cost.rules]
    assert len(listed) == len(set(listed))


def test_the_constant_rules_are_priced_by_their_median_job():
    assert all(isinstance(RC.BY_RULE[r], ConstantCost) for r in RC.CONSTANT_RULES)
    job = PlannedJob(Rule.CLAIMS, "claims")
    assert RC.job_seconds(job, {}, {"constants": {Rule.CLAIMS: 4.5}}, {}) == 4.5


def test_a_rule_without_a_cost_model_is_missing_calibration():
    with pytest.raises(MissingCalibration, match="no model for rule .*record"):
        RC.job_seconds(PlannedJob(Rule.RECORD, "record"), {}, {}, {})


def test_the_fits_run_after_the_fixed_parts_they_read():
    """Compression's and the dense evaluation's fixed parts stand in for the Hessians', the dense reference's, the
    layer profile's and LoRA's start-up, and the figure traces read the compression's scale: their fits come
    later."""
    order = [type(c).__name__ for c in RC.RULE_COSTS]
    for first in ("EvaluateCost", "CompressCost"):
        for later in ("HessiansCost", "DenseReferenceCost", "ProfileLayersCost", "LoraFinetuneCost", "TracesCost"):
            assert order.index(first) < order.index(later), (first, later)


def test_the_fitted_profile_holds_every_rules_fit_in_its_section(tmp_path):
    """A model's keys from several rules land in one dict, the constant rules in ``constants``; a later fit reads
    an earlier one's: the dense reference's start-up is the dense evaluation's fixed part."""
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    results = fake_timed_run(tmp_path, mini, costs)
    bench_file(results, "claims", "claims", 4.0)
    ref = next(j for j in plan_jobs(mini) if j.rule == "dense_reference" and j.model == "smollm2")
    tokens = corpus_tokens(mini, mini["eval"]["distribution"])
    bench_file(results, "dense_reference", ref.name, FAKE_RATES["dense_fixed_s"] + tokens * 0.002)
    prof = RC.fit_profile(PR.finished_run(results, mini, costs))
    assert set(prof) == {"models", "engine", "constants"}
    assert set(prof["constants"]) == {"claims", "throughput"} and prof["constants"]["claims"] == 4.0
    got = prof["models"]["smollm2"]
    assert {"eval_fixed_s", "compress_fixed_s", "hessian_fixed_s", "throughput_fixed_s", "lora_fixed_s"} <= set(got)
    assert got["reference_token_s"] == pytest.approx(0.002)
    assert RC.job_seconds(ref, mini, prof, costs) == pytest.approx(FAKE_RATES["dense_fixed_s"] + tokens * 0.002)
