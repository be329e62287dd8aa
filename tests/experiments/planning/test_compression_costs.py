"""caldera.experiments.planning.compression_costs: a variant's or a chunk's layers, a seed replicate, the layer
profile and the Hessians, priced from the profile and fitted from a run."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import compression_costs as C
from caldera.experiments.planning import evaluation_costs as E
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning.cost import load_costs
from caldera.experiments.planning.job_cost_model import MissingCalibration
from tests.helpers import FAKE_RATES, bench_file, fake_timed_run, timing_file, workflow_config

EMPTY = {"models": {}, "engine": {}, "constants": {}}


def test_the_compression_fit_recovers_the_fixed_part_setup_and_scale_per_method(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    run = PR.finished_run(fake_timed_run(tmp_path, mini, costs, scale=2.5), mini, costs)
    got = C.CompressCost().fit(run, EMPTY)["models"]["smollm2"]
    assert got["compress_fixed_s"] == pytest.approx(12.0) and got["layer_setup_s"] == pytest.approx(0.7)
    assert got["matrix_scale"] and all(s == pytest.approx(2.5) for s in got["matrix_scale"].values())
    assert got["matrix_scale_default"] == pytest.approx(2.5)
    cv = next(j for j in JP.plan_jobs(mini) if j.rule == "compress_variant" and j.model == "smollm2")
    law = JP.law_layer_seconds(costs, mini, cv.variant)
    n = cv.extra["layers"]
    prof = {"models": {"smollm2": got}}
    assert C.CompressCost().predict(cv, mini, prof, costs) == pytest.approx(12.0 + n * (0.7 + 2.5 * law))
    # a method the run did not compress: the default scale; no scale at all: missing
    other = {**got, "matrix_scale": {}, "matrix_scale_default": 4.0}
    assert C.CompressCost().predict(cv, mini, {"models": {"smollm2": other}}, costs) == pytest.approx(
        12.0 + n * (0.7 + 4.0 * law))
    with pytest.raises(MissingCalibration, match="compression scale"):
        C.CompressCost().predict(cv, mini, {"models": {"smollm2": {**other, "matrix_scale_default": None}}}, costs)


def test_a_replicate_is_its_fixed_part_a_compression_and_an_evaluation(tmp_path):
    """The replicate's fixed part is what its layers' walls and evaluation steps leave of it; its price is that
    part + the compression's layers + the evaluation's steps, priced as those rules price them."""
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    rep = next(j for j in JP.plan_jobs(mini) if j.rule == "replicate")
    for li in range(3):
        timing_file(tmp_path / "compressed" / rep.name / f"chunks/000/layer_{li:03d}.timing.json", {"wall_s": 4.0})
    timing_file(tmp_path / "eval" / rep.name / "ppl_wiki.timing.json", {"wall_s": 6.0})
    bench_file(tmp_path, "replicate", rep.name, 30.0)
    run = PR.finished_run(tmp_path, mini, costs)
    fit = C.ReplicateCost().fit(run, EMPTY)["models"][rep.model]
    assert fit == {"replicate_fixed_s": pytest.approx(30.0 - 12.0 - 6.0)}
    prof = {"models": {rep.model: {**FAKE_RATES, "matrix_scale_default": 3.0, **fit}}}
    compression = C.CompressCost().predict(rep, mini, prof, costs) - FAKE_RATES["compress_fixed_s"]
    evaluation = E.EvaluateCost().predict(rep, mini, prof, costs) - FAKE_RATES["eval_fixed_s"]
    assert C.ReplicateCost().predict(rep, mini, prof, costs) == pytest.approx(12.0 + compression + evaluation)


def test_the_layer_profile_is_the_compressions_fixed_part_and_its_layers(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    pl = next(j for j in JP.plan_jobs(mini) if j.rule == "profile_layers")
    bench_file(tmp_path, "profile_layers", pl.name, 12.0 + pl.extra["layers"] * 1.5)
    run = PR.finished_run(tmp_path, mini, costs)
    fit = C.ProfileLayersCost().fit(run, {**EMPTY, "models": {pl.model: {"compress_fixed_s": 12.0}}})
    assert fit["models"][pl.model]["profile_layer_s"] == pytest.approx(1.5)
    prof = {"models": {pl.model: {"compress_fixed_s": 12.0, **fit["models"][pl.model]}}}
    assert C.ProfileLayersCost().predict(pl, mini, prof, costs) == pytest.approx(12.0 + pl.extra["layers"] * 1.5)


def test_the_hessians_are_priced_per_token_and_layer_run(tmp_path):
    """Collecting layers 0 and 5 runs the six layers up to the last one; a job that recorded no collection time
    is fitted with the dense evaluation's fixed part."""
    costs = load_costs("cpu")
    smoke = workflow_config("smoke")
    run = PR.finished_run(fake_timed_run(tmp_path, smoke, costs), smoke, costs)
    got = C.HessiansCost().fit(run, EMPTY)["models"]["smollm2"]
    assert got == {"hessian_fixed_s": pytest.approx(6.0), "hessian_token_layer_s": pytest.approx(0.0002)}
    hs = next(j for j in JP.plan_jobs(smoke) if j.rule == "hessians" and j.model == "smollm2")
    assert smoke["layers"] == [0, 1]
    prof = {"models": {"smollm2": got}}
    assert C.HessiansCost().predict(hs, smoke, prof, costs) == pytest.approx(6.0 + JP.seq_tokens(smoke) * 2 * 0.0002)
    assert C.HessiansCost().predict(hs, {**smoke, "layers": [0, 5]}, prof, costs) == pytest.approx(
        6.0 + JP.seq_tokens(smoke) * 6 * 0.0002)
    (tmp_path / "results/hessians/smollm2/hessians.timing.json").unlink()
    got = C.HessiansCost().fit(run, {**EMPTY, "models": {"smollm2": {"dense_fixed_s": 5.0}}})["models"]["smollm2"]
    work = JP.seq_tokens(smoke) * 2
    assert got == {"hessian_token_layer_s": pytest.approx((6.0 + work * 0.0002 - 5.0) / work)}
    assert C.HessiansCost().predict(hs, smoke, {"models": {"smollm2": {**got, "dense_fixed_s": 5.0}}},
                                    costs) == pytest.approx(6.0 + work * 0.0002)
