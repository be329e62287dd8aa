"""App. F.1: LDL pivot bound (``lem:upper_bound_LDL_decomposition_eigenvalue``), Loewner ordering for products
(``lemma:loewner_order-matrix-product``) and the minimum singular value bound
(``lem:lower-bound-minimum-singular-value-matrix-sum``)."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from theory import lemma_ldl_auxiliary as aux
from theory.common import gen, matrix_with_spectrum, randn
from theory.strategies import hessians, seeds


@given(hessians(), st.sampled_from([1, 8]))
def test_max_pivot_at_most_lambda_max(hs, block):
    H, seed = hs
    r = aux.check_ldl_pivot_bound(H, seed=seed, block=block)
    assert r.holds, r.counterexample


def test_pivot_bound_is_tight_and_a_tightened_bound_is_detected():
    H = torch.diag(torch.tensor([0.5, 2.0, 1.0, 0.1] * 2, dtype=torch.float64))
    assert abs(aux.check_ldl_pivot_bound(H, seed=0).ratio - 1) < 1e-12
    assert not aux.check_ldl_pivot_bound(H, seed=0, bound_factor=0.99).holds


def test_printed_proof_identity_is_found_wrong():
    H = aux.random_hessian(1, 16, cond=1e2)
    r = aux.check_ldl_printed_identity(H, seed=1)
    assert not r.holds and r.counterexample["rel_dev_with_D_ii"] < 1e-10


@given(seeds, st.integers(2, 6), st.integers(1, 5))
def test_loewner_holds_for_full_column_rank_A(seed, q, r):
    g = gen(seed)
    A = randn(q + 3, q, g=g)
    assert aux.check_loewner(A, randn(q, r, g=g), seed=seed).holds


@given(seeds, st.integers(2, 6), st.integers(1, 5))
def test_loewner_upper_bound_holds_for_any_A(seed, p, r):
    g = gen(seed)
    A = randn(p, p + 3, g=g)
    assert aux.check_loewner(A, randn(p + 3, r, g=g), seed=seed, side="upper").holds


def test_loewner_lower_bound_counterexample_for_wide_A():
    A, B = aux.wide_kernel_instance(4000)
    r = aux.check_loewner(A, B, seed=4000, side="lower")
    assert not r.holds and r.counterexample["lower_violation"] > 1e-3


def test_detects_a_tightened_loewner_upper_bound():
    g = gen(7)
    assert not aux.check_loewner(randn(6, 4, g=g), randn(4, 3, g=g), seed=7, side="upper",
                                 bound_factor=0.5).holds


@given(seeds, st.integers(2, 6), st.floats(0.0, 2.0))
def test_min_singular_value_weyl(seed, p, scale):
    g = gen(seed)
    A = randn(p + 2, p, g=g)
    assert aux.check_min_singular_value(A, scale * randn(p + 2, p, g=g), seed=seed, convention="weyl").holds


def test_min_singular_value_counterexample_with_sigma_rank_convention():
    g = gen(4000)
    A = matrix_with_spectrum(6, 6, torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64), g)
    B = 1e-2 * randn(6, 6, g=g)
    assert aux.check_min_singular_value(A, B, seed=4000, convention="weyl").holds
    r = aux.check_min_singular_value(A, B, seed=4000, convention="paper")
    assert not r.holds and r.counterexample["sigma_min(A+B)"] < r.counterexample["sigma_min(A)-||B||"]


def test_detects_a_tightened_min_singular_value_bound():
    g = gen(9)
    A, B = randn(7, 5, g=g), 0.5 * randn(7, 5, g=g)
    assert aux.check_min_singular_value(A, B, seed=9, convention="weyl").holds
    assert not aux.check_min_singular_value(A, B, seed=9, convention="weyl", norm_factor=0.0).holds
