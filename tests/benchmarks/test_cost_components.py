"""benchmarks/cost_components.py: the measured components predict a decomposition measured here, and paper-shape
benchmark points join the fit."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import torch

from caldera.experiments.planning import cost as C

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cost_components.py"
_spec = importlib.util.spec_from_file_location("_cost_components", _SCRIPT)
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)


def _costs_without_points() -> dict:
    """A costs dict in the format `caldera cost` reads, no component measured yet."""
    return {"format": C.FORMAT, "device": "cpu", "threads": 2, "torch": "x", "points": {}, "components": {}}


def test_prediction_matches_a_measured_decomposition():
    """Components measured at 512 x 1024 predict one caldera_decompose there (T_out 8, T_in 3, rank 64) within a
    factor of 2 (measured here, not from a stored file; one thread and process CPU time, so other jobs on the
    machine do not count). Dropping the outer iterations (x8) would put it outside."""
    from caldera import CalderaConfig, caldera_decompose
    from caldera.algorithm.decomposition import HessianContext
    from caldera.synthetic import llm_like

    n, d, k = 512, 1024, 64
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        costs = M.measure_components("cpu", [(n, d)], k=k, model_parts=False, clock=time.process_time)
        cfg = CalderaConfig.preset("paper", rank=k, l_bits=4, r_bits=4, outer_iters=8, inner_iters=3)
        W, H = llm_like(n, d, seed=1)
        ctx = HessianContext.prepare(H, rht=True, seed=cfg.seed, sigma_reg=cfg.sigma_reg)
        t0 = time.process_time()
        caldera_decompose(W, H, cfg, context=ctx)
        measured = time.process_time() - t0
    finally:
        torch.set_num_threads(threads)
    predicted = C.decompose_seconds(costs, n, d, cfg)
    assert 0.5 < predicted / measured < 2.0, (predicted, measured)
    # the composition is the law's: one outer iteration fewer is visibly less
    fewer = C.decompose_seconds(costs, n, d, CalderaConfig.preset("paper", rank=k, outer_iters=1, inner_iters=3))
    assert fewer < predicted / 2.5


def test_paper_shape_benchmark_points_join_the_fit():
    pts = M.points_from_benchmark("benchmarks/results/paper_shapes_cpu_11008x4096_components.json")
    assert [(p["n"], p["d"]) for p in pts["ldlq"]] == [(11008, 4096)]
    assert set(pts) == {"ldlq", "hessian_update", "error", "svd_exact", "svd_randomized", "lplr_iter"}
    lplr = pts["lplr_iter"][0]["s"]
    assert 0 < lplr < pts["svd_exact"][0]["s"] / 10  # (LPLR - its SVD) / T_in
    costs = C.refit(_costs_without_points(), pts)
    assert C.predict(costs, "svd_exact", 11008, 4096) == pytest.approx(pts["svd_exact"][0]["s"], rel=1e-6)
    # the Hessian context's benchmark (test_prepare) is a point of the prepare law, keyed by the shape's d
    prep = M.points_from_benchmark("benchmarks/results/paper_shapes_cpu_20261126_prepare.json")
    assert set(prep) == {"prepare"} and sorted(p["d"] for p in prep["prepare"]) == [4096, 4096, 11008]
    big = max(prep["prepare"], key=lambda p: p["d"])
    assert big["s"] > 5 * min(p["s"] for p in prep["prepare"])  # d³: the 11008-wide Hessian dominates
