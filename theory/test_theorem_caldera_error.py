"""Thm. 4.1 (``thm:approximation-error-Q-plus-LR``) and Thm. C.1
(``thm:approximation-error-Q-plus-LR-formal``):
E‖(Q + LR − W)Xᵀ‖² ≤ m Σ_{i>k}Eλ_i(ηDηᵀ) + ε ≲ 4mdλ_maxR²/(π(2^{B_Q} − 1)²)(1 − k/n)(n − k/2) + ε, the informal
(1 − k/2n)² form, and the regimes (i)/(ii)."""

from __future__ import annotations

from theory import theorem_caldera_error as th


def test_first_inequality_holds():
    rows = th.check_first_inequality([(16, 16, 4)], seed=8000, trials=8)
    first = next(r for r in rows if r.claim == "first-inequality")
    assert first.holds, first.counterexample


def test_detects_a_tightened_first_inequality():
    rows = th.check_first_inequality([(16, 16, 4)], seed=8000, trials=8, bound_factor=0.5)
    assert not next(r for r in rows if r.claim == "first-inequality").holds


def test_formal_mp_bound_counterexample_is_found():
    r = th.check_formal_mp_counterexample([16, 32], trials=6)
    assert not r.holds
    assert all(p["lower_conf"] > 1 for p in r.counterexample["per_n"])
    assert r.counterexample["MP_limit_ratio"] > 1.1


def test_informal_and_corrected_forms_hold_on_that_instance():
    for form in ("informal", "corrected"):
        r = th.check_formal_mp_counterexample([16, 32], trials=6, form=form)
        assert r.holds and r.ratio < 0.5


def test_full_procedure_exceeds_formal_rhs():
    r = th.check_full_lhs_counterexample(trials=4)
    assert not r.holds and r.counterexample["lemma_conditions_met"] == "4/4"


def test_regime_ii_threshold_is_found_wrong():
    r = th.check_regime_ii(trials=3)
    assert not r.holds and r.counterexample["printed_threshold"] < 0 < r.counterexample["derived_threshold"]


def test_regime_i_holds():
    r = th.check_regime_i(trials=3)
    assert r.holds, r.counterexample


def test_unsaturated_range_assumption_can_be_infeasible():
    W, X = th.llm_instance(8000, 64, 64, cond=1e2)
    assert not th.check_unsaturated_range_exists(W, X, 2, seed=8000, label_cond=1e2).holds
    W, X = th.llm_instance(8000, 64, 64, cond=10.0)
    assert th.check_unsaturated_range_exists(W, X, 2, seed=8000, label_cond=10.0).holds


def test_detects_a_tightened_informal_bound():
    r = th.check_formal_mp_counterexample([16, 32], trials=6, form="informal", bound_factor=0.2)
    assert not r.holds


def test_regime_i_fails_with_fewer_bits_than_its_threshold():
    r = th.check_regime_i(trials=3, bits_offset=-4)
    assert not r.holds and r.ratio > 1


# ------------------------------------------------------------ the library's Algorithm 1 (caldera_decompose)


def test_library_first_iterate_attains_the_first_inequality():
    """T_out = 1, 16-bit factors: equality up to fp16 rounding (ratio in [0.999, 1.001])."""
    r = th.check_library_first_inequality(64, 64, 8, seed=8001)
    assert r.holds and r.ratio > 0.999, r.details


def test_library_best_iterate_within_the_first_inequality():
    r = th.check_library_first_inequality(64, 48, 8, seed=8002, outer_iters=3)
    assert r.holds, r.counterexample


def test_library_check_detects_a_tightened_bound():
    assert not th.check_library_first_inequality(64, 64, 8, seed=8001, bound_factor=0.99).holds
