"""caldera.experiments.planning.engine_costs: the selection sweep and the figure traces, priced from the profile's
``engine`` section and fitted from a run."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import engine_costs as G
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning.cost import load_costs
from caldera.experiments.planning.job_cost_model import SMALL_JOB, MissingCalibration
from tests.helpers import bench_file, timing_file, workflow_config

EMPTY = {"models": {}, "engine": {}, "constants": {}}


def test_the_selection_fit_prices_the_run_it_was_fitted_on(tmp_path):
    """Start-up (the small jobs'), ablations, the swept layers and the decompositions' records add up to the job."""
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    job = next(j for j in JP.plan_jobs(mini) if j.rule == "selection")
    bench_file(tmp_path, "selection", "selection", 200.0)
    bench_file(tmp_path, SMALL_JOB, "t1", 4.0)
    timing_file(tmp_path / "selection/selection.timing.json",
                {"cpu_s": {"ablations": 30.0}, "records": [{"seconds": 50.0}, {"seconds": 25.0}]})
    got = G.SelectionCost().fit(PR.finished_run(tmp_path, mini, costs), EMPTY)["engine"]
    assert got["selection_start_s"] == 4.0 and got["selection_ablations_s"] == 30.0
    assert got["selection_scale"] == pytest.approx(75.0 / JP.selection_units(mini, costs))
    assert G.SelectionCost().predict(job, mini, {"engine": got}, costs) == pytest.approx(200.0)
    with pytest.raises(MissingCalibration):
        G.SelectionCost().predict(job, mini, {"engine": {}}, costs)


def test_a_run_without_the_sweeps_timing_fits_no_selection(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    bench_file(tmp_path, "selection", "selection", 200.0)
    assert G.SelectionCost().fit(PR.finished_run(tmp_path, mini, costs), EMPTY) == {}


def test_the_traces_are_their_start_up_and_the_law_at_the_compressions_scale(tmp_path):
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    jobs = {j.rule: j for j in JP.plan_jobs(mini) if j.rule in G.TracesCost.rules}
    assert set(jobs) == set(G.TracesCost.rules)
    for rule, job in jobs.items():
        bench_file(tmp_path, rule, job.name, 500.0)
    profile = {**EMPTY, "models": {mini["figures"]["model"]: {"matrix_scale_default": 1e-6}}}
    got = G.TracesCost().fit(PR.finished_run(tmp_path, mini, costs), profile)["engine"]
    assert set(got) == {f"{r}_fixed_s" for r in jobs}
    for job in jobs.values():
        assert G.TracesCost().predict(job, mini, {**profile, "engine": got}, costs) == pytest.approx(500.0)
    with pytest.raises(MissingCalibration, match="compression scale"):
        G.TracesCost().predict(next(iter(jobs.values())), mini, {"engine": got}, costs)
