"""App. C.2 (``lem:maxnorm_right_quantizer``, ``lem:maxnorm_left_quantizer``): R_R = σ_max(XAᵀ) keeps Q_R
unsaturated; with B_R ≥ B_2(C) and R_L = 2σ_max/(σ_k√(mλ_min)), Q_L is unsaturated w.p.
≥ 1 − 0.25ε‖XAᵀ‖_F⁻²."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from theory import lemma_dynamic_ranges as dr
from theory.common import sq_fro
from theory.lemma_lplr_error import instance
from theory.strategies import regression_instances, seeds


@given(regression_instances(case="m<=d"))
def test_right_quantizer_input_within_sigma_max(inst):
    X, Y, k, seed = inst
    A = (X.pinverse() @ Y).T  # any A with XAᵀ = Y
    assert dr.check_right_range(A, X, k, seed=seed).holds


def test_right_range_is_tight_and_tightening_is_detected():
    A, X = dr.tight_right_instance(1)
    r = dr.check_right_range(A, X, 2, seed=1)
    assert r.holds and r.ratio > 0.99
    assert not dr.check_right_range(A, X, 2, seed=1, bound_factor=0.9).holds


@given(seeds, st.sampled_from([(24, 16), (16, 24)]), st.integers(1, 4))
def test_left_range_deterministic_implication(seed, shape, k):
    A, X = instance(seed % 1000, *shape)
    r = dr.check_left_range_deterministic(A, X, k, 0.5 * sq_fro(X @ A.T), seed=seed, trials=15)
    assert r.holds, r.counterexample


def test_left_saturation_probability_within_bound():
    A, X = instance(5000, 24, 16)
    r = dr.check_left_saturation(A, X, 2, 0.5 * sq_fro(X @ A.T), seed=5000, trials=150)
    assert r.holds, r.counterexample


def test_detects_a_too_small_left_range():
    A, X = instance(5000, 24, 16)
    r = dr.check_left_saturation(A, X, 2, 0.5 * sq_fro(X @ A.T), seed=5000, trials=100, range_factor_L=0.01)
    assert not r.holds and r.details["frequency"] > 0.5


def test_detects_a_too_small_range_in_the_deterministic_step():
    A, X = instance(5001, 24, 16)
    r = dr.check_left_range_deterministic(A, X, 2, 0.5 * sq_fro(X @ A.T), seed=1, trials=10, range_factor=0.02)
    assert not r.holds and r.ratio > 1
