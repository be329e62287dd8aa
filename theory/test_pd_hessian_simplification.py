"""App. C.4 (``subapp:positive_definite_hessian_simplification``): the chain of equivalent problems and
*"Z_* = (U I_k)(I_kᵀΣVᵀΛ^{-1/2}Uᵀ)"* equals Lemma 4.2's solution for positive definite H."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from theory import pd_hessian_simplification as pd
from theory.strategies import seeds


@st.composite
def pd_instances(draw):
    seed = draw(seeds) % 100_000
    n = draw(st.integers(4, 16))
    d = draw(st.integers(3, 12))
    m = d + draw(st.integers(0, 6))
    cond = draw(st.sampled_from([1.0, 10.0, 1e2, 1e3]))
    k = draw(st.integers(1, min(n, d) - 1))
    A, X = pd.instance(seed, n, d, m, cond)
    return A, X, k, seed


@given(pd_instances())
def test_objective_chain(inst):
    A, X, k, seed = inst
    assert pd.check_objective_chain(A, X, seed=seed, k=k).holds


@given(pd_instances())
def test_closed_form_equals_lemma(inst):
    A, X, k, seed = inst
    r = pd.check_closed_form(A, X, k, seed=seed)
    assert r.holds, r.counterexample


@given(pd_instances())
def test_pd_solution_is_optimal(inst):
    A, X, k, seed = inst
    assert pd.check_pd_optimality(A, X, k, seed=seed).holds


def test_detects_a_wrong_closed_form():
    A, X = pd.instance(3, 12, 8, 10, 1e2)

    def wrong(A, H, k):
        return pd.paper_pd_closed_form(A, H, k, lam_power=0.5)

    assert not pd.check_closed_form(A, X, 3, seed=3, solver=wrong).holds
    assert not pd.check_pd_optimality(A, X, 3, seed=3, solver=wrong).holds


def test_detects_an_objective_chain_without_the_factor_m():
    A, X = pd.instance(4, 12, 8, 10, 10.0)
    assert not pd.check_objective_chain(A, X, seed=4, with_m=False).holds
