"""App. C.1 (``subapp:update-equations-low-rank-factors``): *"L̃ = (AXᵀ)(RXᵀ)† = AHRᵀ(RHRᵀ)⁻¹"* minimizes
‖(ZR − A)Xᵀ‖²; *"R̃ = L†AHH† is a solution"* of min_Z ‖(LZ − A)Xᵀ‖²; and the irreducible + reducible error split."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from theory import update_equations as ue
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


# --------------------------------------------- the library's LPLRFactorize (caldera.algorithm.lplr) against App. C.1


@pytest.mark.parametrize("sweep", ["jacobi", "alternating"])
def test_library_lplr_steps_solve_the_update_equations(monkeypatch, sweep):
    """Every factor ``caldera.algorithm.lplr.lplr_factorize`` hands to its quantizer is the App. C.1 minimizer for the
    previous quantized factor: L̃ = AHRᵀ(RHRᵀ)⁻¹ (lines 4, 9) and R̃ = L†AHH† (line 8). The raw inputs are recorded at
    ``quantize_scaled``; float32 arithmetic sets the tolerance (1e-4). A factor whose input repeats (the Jacobi
    sweep's L_1 = g(R_0) = L_0, R_2 = R_1, …; the alternating sweep's first L) is not quantized again."""
    import caldera.algorithm.lplr as lp
    from caldera.quantizers import get_quantizer
    from theory.lemma_lplr_error import instance

    A, X = instance(6100, 24, 16, cond=1e2)
    H = X.T @ X / X.shape[0]
    calls = []
    real = lp.quantize_scaled

    def recording(q, x):
        sc = real(q, x)
        calls.append((x.double().clone(), (q.dequantize(sc.codes) * sc.scale).double()))
        return sc

    monkeypatch.setattr(lp, "quantize_scaled", recording)
    k, T = 3, 4
    lp.lplr_factorize(A.float(), H, k, get_quantizer("uniform-3"), get_quantizer("uniform-3"), T, sweep=sweep)
    assert len(calls) == (T + 2 if sweep == "jacobi" else 2 * T + 1)
    steps = iter(calls)
    seen: dict[str, tuple] = {}

    def left(R):  # the next call must be Lᵀ = (AHRᵀ(RHRᵀ)⁻¹)ᵀ for this R (unless this R was just used)
        if "left" in seen and seen["left"][0] is R:
            return seen["left"][1]
        x, out = next(steps)
        r = ue.check_left_update(A, X, R, seed=6100, update=lambda *_: x.T, rtol=1e-4)
        assert r.holds, r.counterexample
        seen["left"] = (R, out.T)
        return seen["left"][1]

    def right(L):  # the next call must be R = L†AHH† for this L (unless this L was just used)
        if "right" in seen and seen["right"][0] is L:
            return seen["right"][1]
        x, out = next(steps)
        r = ue.check_right_update(A, X, L, seed=6100, update=lambda *_: x, rtol=1e-4)
        assert r.holds, r.counterexample
        seen["right"] = (L, out)
        return out

    R = next(steps)[1]  # line 3: R_0 = Q_R(R̂) (R̂ is checked against Lemma 4.2 in test_rank_constrained_regression)
    L = left(R)  # line 4
    for _ in range(T):
        if sweep == "jacobi":  # lines 8–9: R_{i+1} from L_i and L_{i+1} from R_i
            R_new = right(L)
            L = left(R)
            R = R_new
        else:
            L = left(R)
            R = right(L)
