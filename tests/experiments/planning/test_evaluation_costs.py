"""caldera.experiments.planning.evaluation_costs: the evaluation, the dense reference and the throughput jobs,
priced from the profile and fitted from a run."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import evaluation_costs as E
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning.cost import load_costs
from caldera.experiments.planning.job_cost_model import MissingCalibration
from tests.helpers import FAKE_RATES, FAKE_THROUGHPUT, bench_file, fake_timed_run, workflow_config

EMPTY = {"models": {}, "engine": {}, "constants": {}}
EVAL_KEYS = ("eval_fixed_s", "corpus_fixed_s", "token_s", "kl_token_s", "zeroshot_token_s", "dense_fixed_s")


def test_the_evaluation_fit_recovers_a_runs_rates_and_prices_a_job_by_them(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    run = PR.finished_run(fake_timed_run(tmp_path, mini, costs), mini, costs)
    got = E.EvaluateCost().fit(run, EMPTY)["models"]["smollm2"]
    assert {k: pytest.approx(v, rel=1e-9, abs=1e-12) for k, v in got.items()} == {k: FAKE_RATES[k] for k in EVAL_KEYS}
    ev = next(j for j in JP.plan_jobs(mini) if j.rule == "evaluate" and j.model == "smollm2"
              and j.variant.method != "dense")
    parts = JP.eval_parts(mini, ev.variant)
    assert parts["kl"] and parts["zeroshot"]
    want = (15.0 + sum(2.0 + t * 0.004 for t in parts["corpora"].values()) + parts["corpora"][parts["kl"]] * 0.001
            + parts["zeroshot"] * 0.005)
    assert E.EvaluateCost().predict(ev, mini, {"models": {"smollm2": got}}, costs) == pytest.approx(want)
    with pytest.raises(MissingCalibration):
        E.EvaluateCost().predict(ev, mini, {"models": {"smollm2": {k: v for k, v in got.items()
                                                                   if k != "eval_fixed_s"}}}, costs)


def test_the_dense_reference_is_the_dense_fixed_part_and_its_tokens(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    ref = next(j for j in JP.plan_jobs(mini) if j.rule == "dense_reference" and j.model == "smollm2")
    tokens = JP.corpus_tokens(mini, mini["eval"]["distribution"])
    bench_file(tmp_path, "dense_reference", ref.name, 20.0 + tokens * 0.003)
    run = PR.finished_run(tmp_path, mini, costs)
    fit = E.DenseReferenceCost().fit(run, {**EMPTY, "models": {"smollm2": {"compress_fixed_s": 20.0}}})
    assert fit["models"]["smollm2"]["reference_token_s"] == pytest.approx(0.003)
    prof = {"models": {"smollm2": {"compress_fixed_s": 20.0, **fit["models"]["smollm2"]}}}
    assert E.DenseReferenceCost().predict(ref, mini, prof, costs) == pytest.approx(20.0 + tokens * 0.003)
    prof["models"]["smollm2"]["dense_fixed_s"] = 10.0
    assert E.DenseReferenceCost().predict(ref, mini, prof, costs) == pytest.approx(10.0 + tokens * 0.003)


def test_the_throughput_fit_recovers_the_dense_and_compressed_figures(tmp_path):
    """Each variant of a throughput job is priced as the dense and the all-compressed figure mixed by the share of
    layers it compresses; a model without those figures is priced as the rule's constant."""
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    run = PR.finished_run(fake_timed_run(tmp_path, mini, costs), mini, costs)
    fit = E.ThroughputCost().fit(run, EMPTY)
    got = fit["models"]["smollm2"]
    assert {k: pytest.approx(v, rel=1e-9) for k, v in got.items()} == FAKE_THROUGHPUT
    assert set(fit["constants"]) == {"throughput"}
    tj = next(j for j in JP.plan_jobs(mini) if j.rule == "throughput" and j.model == "smollm2")
    assert E.ThroughputCost().predict(tj, mini, {"models": {"smollm2": got}}, costs) == pytest.approx(
        run.jobs[("throughput", tj.name)]["s"])
    assert E.ThroughputCost().predict(tj, mini, {"models": {}, "constants": {"throughput": 7.0}}, costs) == 7.0
