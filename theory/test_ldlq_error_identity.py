"""App. C.3 (``eq:ldlq-error-in-terms-of-quantizer-error``): *"Q − W = η(M + I)⁻¹"* and
E σ_i²((Q − W)Xᵀ) = E λ_i(ηDηᵀ) — checked exactly (pathwise) and, for the QuIP bound, statistically."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from caldera.algorithm.ldl import block_ldl
from theory import ldlq_error_identity as li
from theory.dithered import unsaturated_range
from theory.strategies import seeds


@st.composite
def ldlq_instances(draw):
    seed = draw(seeds) % 100_000
    n = draw(st.sampled_from([8, 16]))
    d = draw(st.sampled_from([8, 16, 24]))
    cond = draw(st.sampled_from([1.0, 10.0, 1e2]))
    bits = draw(st.integers(2, 4))
    W, H, X = li.instance(seed, n, d, cond=cond)
    return W, H, X, bits, seed


def _range(W, H, m, bits, seed):
    """An unsaturated dynamic range, or skip the example (the theorem assumes one exists; see
    test_theorem)."""
    R = unsaturated_range(W, block_ldl(m * H.double(), 8)[0], bits, seed)
    assume(R is not None)
    return R


@given(ldlq_instances())
def test_paper_column_identity(inst):
    W, H, X, bits, seed = inst
    R = _range(W, H, X.shape[0], bits, seed)
    r = li.check_paper_column_identity(W, H, X.shape[0], seed=seed, R=R, bits=bits)
    assert r.holds, r.counterexample


@given(ldlq_instances(), st.sampled_from(["e8p", "dithered"]))
def test_library_blockldlq_identity(inst, kind):
    W, H, X, bits, seed = inst
    R = _range(W, H, X.shape[0], bits, seed)
    r = li.check_library_identity(W, H, X.shape[0], seed=seed, kind=kind, R=R, bits=bits)
    assert r.holds, r.counterexample


@given(ldlq_instances())
def test_spectrum_identity_pathwise(inst):
    W, H, X, bits, seed = inst
    R = _range(W, H, X.shape[0], bits, seed)
    r = li.check_spectrum_identity(W, X, seed=seed, R=R, bits=bits)
    assert r.holds, r.counterexample


def test_statement_eta_is_found_wrong():
    W, H, X = li.instance(7000, 16, 16, cond=10.0)
    R = li.safe_range(W, H, 16, 2, 7000)
    r = li.check_statement_eta(W, H, 16, seed=7000, R=R, bits=2)
    assert not r.holds and r.counterexample["rel_dev_proof_eta"] < 1e-10


def test_printed_middle_term_is_off_by_m():
    W, H, X = li.instance(7001, 16, 24, cond=10.0)
    R = li.safe_range(W, H, 24, 3, 7001)
    r = li.check_middle_term(W, X, seed=7001, R=R, bits=3)
    assert not r.holds and abs(r.ratio - 24) < 1e-6


def test_quip_bound_statistically():
    W, H, X = li.instance(7002, 16, 16, cond=10.0)
    R = li.safe_range(W, H, 16, 2, 7002)
    r = li.check_quip_bound(W, H, 16, seed=7002, R=R, bits=2, trials=30)
    assert r.holds, r.counterexample


def test_detects_a_tightened_quip_bound():
    W, H, X = li.instance(7002, 16, 16, cond=10.0)
    R = li.safe_range(W, H, 16, 2, 7002)
    r = li.check_quip_bound(W, H, 16, seed=7002, R=R, bits=2, trials=30, bound_factor=0.4)
    assert not r.holds


def test_detects_a_perturbed_library_output():
    W, H, X = li.instance(7003, 16, 16, cond=10.0)
    assert li.check_library_identity(W, H, 16, seed=7003).holds
    assert not li.check_library_identity(W, H, 16, seed=7003, Q_perturb=1e-2).holds
