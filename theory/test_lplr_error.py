"""Lemma C.3 (``lem:approximation_error_data-aware-LPLRFactorize``): E‖(LR − A)Xᵀ‖² ≤ Σ_{i>k}σ_i² + ε under the
lemma's dynamic ranges and bit budgets (dithered quantizers), by Monte Carlo with a CLT bound at α = 1e-6."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caldera.algorithm.regression import rank_constrained_regression
from theory import lemma_lplr_error as lp
from theory.strategies import seeds


def _eps(A, X, k, rel):
    return rel * rank_constrained_regression(X, X @ A.T, k).value


@given(seeds, st.sampled_from([(24, 16), (16, 24), (16, 16)]), st.integers(1, 4),
       st.sampled_from([0.01, 0.1, 1.0]), st.sampled_from([10.0, 1e2, 1e3]))
def test_expected_error_within_bound(seed, shape, k, eps_rel, cond):
    A, X = lp.instance(seed % 1000, *shape, cond=cond)
    r = lp.check_error_bound(A, X, k, _eps(A, X, k, eps_rel), seed=seed, trials=40)
    assert r.holds, r.counterexample


def test_lemma_conditions_hold_on_the_test_instance():
    A, X = lp.instance(6000, 24, 16)
    st_ = lp.setup(A, X, 2, _eps(A, X, 2, 0.05))
    assert st_.k_condition and st_.eps_condition


def test_detects_too_few_bits():
    A, X = lp.instance(6000, 24, 16)
    r = lp.check_error_bound(A, X, 2, _eps(A, X, 2, 0.05), seed=1, trials=40, bits_L=3, bits_R=3)
    assert not r.holds and r.ratio > 1


def test_detects_a_tightened_bound():
    A, X = lp.instance(6000, 24, 16)
    r = lp.check_error_bound(A, X, 2, _eps(A, X, 2, 0.05), seed=1, trials=40, bound_factor=1e-4)
    assert not r.holds


# ----------------------------------------------------------------- the library's LPLRFactorize (caldera.algorithm.lplr)


@pytest.mark.parametrize("sweep", ["jacobi", "alternating"])
@pytest.mark.parametrize("shape,k,cond", [((24, 16), 2, 1e2), ((16, 24), 3, 1e3), ((16, 16), 4, 10.0)])
def test_library_lplr_meets_the_lemma_bound(shape, k, cond, sweep):
    A, X = lp.instance(6000 + k, *shape, cond=cond)
    r = lp.check_library_error_bound(A, X, k, _eps(A, X, k, 0.05), sweep=sweep)
    assert r.holds, r.counterexample


def test_library_check_detects_too_few_bits():
    A, X = lp.instance(6002, 24, 16, cond=1e2)
    r = lp.check_library_error_bound(A, X, 2, _eps(A, X, 2, 0.05), bits=3)
    assert not r.holds and r.ratio > 1
