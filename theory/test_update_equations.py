"""App. C.1 (``subapp:update-equations-low-rank-factors``): *"L̃ = (AXᵀ)(RXᵀ)† = AHRᵀ(RHRᵀ)⁻¹"* minimizes
‖(ZR − A)Xᵀ‖²; *"R̃ = L†AHH† is a solution"* of min_Z ‖(LZ − A)Xᵀ‖²; and the irreducible + reducible error split."""

from __future__ import annotations

import torch
from hypothesis import given

from caldera.theory import update_equations as ue
from theory.strategies import factor_problems


@given(factor_problems())
def test_left_update_minimizes(p):
    A, X, R, L, seed = p
    r = ue.check_left_update(A, X, R, seed=seed)
    assert r.holds, r.counterexample


@given(factor_problems())
def test_right_update_minimizes(p):
    A, X, R, L, seed = p
    r = ue.check_right_update(A, X, L, seed=seed)
    assert r.holds, r.counterexample


@given(factor_problems())
def test_error_decomposition(p):
    A, X, R, L, seed = p
    r = ue.check_error_decomposition(A, X, R, seed=seed)
    assert r.holds, r.counterexample


def test_detects_wrong_left_update():
    inst = ue.random_instance(1, 8, 10, 13, 3, cond=1e2)

    def ignores_H(A, H, R):
        return torch.linalg.solve(R @ R.T, (A @ R.T).T).T

    r = ue.check_left_update(inst["A"], inst["X"], inst["R"], seed=1, update=ignores_H)
    assert not r.holds


def test_detects_wrong_right_update():
    inst = ue.random_instance(2, 8, 10, 7, 3)
    r = ue.check_right_update(inst["A"], inst["X"], inst["L"], seed=2,
                              update=lambda A, H, L: L.T @ A @ H @ torch.linalg.pinv(H))
    assert not r.holds


def test_printed_hh_pinv_intermediate_is_found_wrong():
    X = ue.random_instance(3, 8, 10, 8, 2)["X"]
    r = ue.check_printed_hh_pinv_identity(X, seed=3)
    assert not r.holds and r.counterexample["rel_dev_with_V_transposed"] < 1e-10


def test_detects_a_wrong_error_split():
    inst = ue.random_instance(4, 8, 10, 13, 3)
    assert ue.check_error_decomposition(inst["A"], inst["X"], inst["R"], seed=4).holds
    assert not ue.check_error_decomposition(inst["A"], inst["X"], inst["R"], seed=4, split_shift=1).holds
