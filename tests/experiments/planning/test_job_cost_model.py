"""caldera.experiments.planning.job_cost_model: a finished run as the fits read it, the constant and per-model
cost models, and the pieces the rules' models share."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from caldera.experiments.planning import job_cost_model as M
from caldera.experiments.planning.job_plan import PlannedJob
from tests.helpers import timing_file


def _run(tmp_path: Path, jobs: dict, planned: dict | None = None) -> M.FinishedRun:
    return M.FinishedRun(results=tmp_path, config={}, costs={}, jobs=jobs, planned=planned or {})


def test_a_finished_run_groups_a_rules_planned_jobs_per_model(tmp_path):
    """Jobs of the rule that the config plans for a model, per model; a job the config does not plan, or one of no
    model, is left out; ``seconds`` lists every job of the rule."""
    a, b = PlannedJob("evaluate", "a", "m1"), PlannedJob("evaluate", "b", "m2")
    jobs = {("evaluate", "a"): {"s": 1.0}, ("evaluate", "b"): {"s": 2.0}, ("evaluate", "c"): {"s": 4.0},
            ("evaluate", "d"): {"s": 8.0}, ("claims", "claims"): {"s": 16.0}}
    run = _run(tmp_path, jobs, {("evaluate", "a"): a, ("evaluate", "b"): b,
                                ("evaluate", "d"): PlannedJob("evaluate", "d", None)})
    assert run.by_model("evaluate") == {"m1": [(a, {"s": 1.0})], "m2": [(b, {"s": 2.0})]}
    assert run.by_model("claims") == {}
    assert sorted(run.seconds("evaluate")) == [1.0, 2.0, 4.0, 8.0] and run.seconds("claims") == [16.0]


def test_a_finished_run_reads_the_layer_and_evaluation_timing_files(tmp_path):
    for li, (wall, mat) in enumerate([(3.0, 2.0), (5.0, 1.5)]):
        timing_file(tmp_path / f"compressed/v/chunks/00{li}/layer_00{li}.timing.json",
                    {"wall_s": wall, "matrices": {"q_proj": {"wall_s": mat}, "k_proj": {"wall_s": 0.25}}})
    timing_file(tmp_path / "eval/v/ppl_wiki.timing.json", {"wall_s": 7.0})
    timing_file(tmp_path / "eval/v/zeroshot.timing.json", {"wall_s": 9.0})
    timing_file(tmp_path / "eval/v/broken.timing.json", {"other": 1})
    (tmp_path / "eval/v/unreadable.timing.json").write_text("{")
    run = _run(tmp_path, {})
    assert run.layer_walls("v") == (2, 8.0, 4.0)
    assert run.layer_walls("absent") == (0, 0.0, 0.0)
    assert run.eval_steps("v") == {"ppl_wiki": 7.0, "zeroshot": 9.0}


def test_the_median_leaves_nans_out_and_a_missing_key_names_itself():
    assert M.median_of([1.0, math.nan, 3.0, 10.0]) == 3.0
    assert M.median_of([math.nan], 0.5) == 0.5 and M.median_of([]) is None
    with pytest.raises(M.MissingCalibration, match="'token_s' for model 'm'"):
        M.calibrated({}, "token_s", "m")
    assert issubclass(M.MissingCalibration, KeyError)
    assert M.dense_fixed({"dense_fixed_s": 3.0, "compress_fixed_s": 5.0}, "m") == 3.0
    assert M.dense_fixed({"compress_fixed_s": 5.0}, "m") == 5.0
    with pytest.raises(M.MissingCalibration):
        M.dense_fixed({}, "m")


def test_a_constant_rule_costs_its_median_job_else_the_small_report_jobs(tmp_path):
    cost = M.ConstantCost("claims")
    job = PlannedJob("claims", "claims", None)
    run = _run(tmp_path, {("claims", "a"): {"s": 4.0}, ("claims", "b"): {"s": 6.0}, ("claims", "c"): {"s": 100.0}})
    assert cost.fit(run, {}) == {"constants": {"claims": 6.0}}
    assert M.ConstantCost("assets").fit(run, {}) == {}
    assert cost.predict(job, {}, {"constants": {"claims": 6.0, M.SMALL_JOB: 2.0}}, {}) == 6.0
    assert cost.predict(job, {}, {"constants": {M.SMALL_JOB: 2.0}}, {}) == 2.0
    assert cost.predict(job, {}, {}, {}) == 0.0


def test_a_model_rule_needs_its_model_in_the_profile():
    class Fixed(M.ModelCost):
        def seconds(self, job, config, prof, costs):
            return prof["x"]

    job = PlannedJob("evaluate", "a", "m1")
    assert Fixed().predict(job, {}, {"models": {"m1": {"x": 2.5}}}, {}) == 2.5
    with pytest.raises(M.MissingCalibration, match="no model 'm1'"):
        Fixed().predict(job, {}, {"models": {"m2": {"x": 2.5}}}, {})
