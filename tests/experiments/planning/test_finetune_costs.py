"""caldera.experiments.planning.finetune_costs: RHT and LoRA fine-tuning jobs, priced from the profile and fitted
from a run."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import finetune_costs as F
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning.cost import load_costs
from caldera.experiments.planning.job_cost_model import MissingCalibration
from tests.helpers import FAKE_LORA_TRAIN, FAKE_RATES, bench_file, fake_timed_run, timing_file, workflow_config

EMPTY = {"models": {}, "engine": {}, "constants": {}}


def test_the_rht_fit_takes_the_epochs_per_token_and_the_rest_as_fixed(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    job = next(j for j in JP.plan_jobs(mini) if j.rule == "rht_finetune")
    tokens = JP.rhtft_work(mini)["tokens"]
    timing_file(tmp_path / "rhtft" / job.name / "rhtft.timing.json", {"epoch_wall_s": [tokens * 0.001, tokens * 0.002]})
    bench_file(tmp_path, "rht_finetune", job.name, 9.0 + tokens * 0.003)
    got = F.RhtFinetuneCost().fit(PR.finished_run(tmp_path, mini, costs), EMPTY)["models"][job.model]
    assert got == {"rhtft_token_s": pytest.approx(0.003), "rhtft_fixed_s": pytest.approx(9.0)}
    assert F.RhtFinetuneCost().predict(job, mini, {"models": {job.model: got}}, costs) == pytest.approx(
        9.0 + tokens * 0.003)


def test_the_lora_fit_recovers_each_tasks_rate_and_the_evaluations(tmp_path):
    costs = load_costs("cpu")
    smoke = workflow_config("smoke")
    run = PR.finished_run(fake_timed_run(tmp_path, smoke, costs), smoke, costs)
    got = F.LoraFinetuneCost().fit(run, EMPTY)["models"]["smollm2"]
    assert got["lora_train_token_s"] == pytest.approx({k: FAKE_LORA_TRAIN[k] for k in got["lora_train_token_s"]})
    assert got["lora_fixed_s"] == pytest.approx(FAKE_RATES["lora_fixed_s"])
    assert got["lora_eval_token_s"] == pytest.approx(FAKE_RATES["lora_eval_token_s"])
    lj = next(j for j in JP.plan_jobs(smoke) if j.rule == "lora_finetune" and j.extra["task"] == "wiki")
    w = JP.lora_work(smoke, "wiki")
    assert F.LoraFinetuneCost().predict(lj, smoke, {"models": {"smollm2": got}}, costs) == pytest.approx(
        5.0 + w["train"] * 0.004 + (1 + got["lora_second_eval"]["wiki"]) * w["final"] * 0.003)
    no_rate = {**got, "lora_train_token_s": {}}
    with pytest.raises(MissingCalibration, match="LoRA 'wiki' rate"):
        F.LoraFinetuneCost().predict(lj, smoke, {"models": {"smollm2": no_rate}}, costs)


@pytest.mark.parametrize("points, fixed, want", [
    ([(10, 25.0), (20, 45.0), (30, 65.0)], 0.0, (5.0, 2.0)),  # the line through the points
    ([(10, 30.0), (20, 20.0)], 0.0, (25.0, 0.0)),  # falling: the mean, no slope
    ([(10, 5.0), (20, 30.0)], 0.0, (0.0, 1.3)),  # a negative intercept: through the origin
    ([(10, 25.0), (10, 35.0)], 5.0, (5.0, 2.5)),  # one x: the slope above the given intercept
    ([], 5.0, (5.0, 0.0)),
])
def test_the_evaluation_line_keeps_its_intercept_and_slope_non_negative(points, fixed, want):
    assert F._line(points, fixed) == pytest.approx(want)
