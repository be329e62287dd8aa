"""App. C.3 Marchenko–Pastur step: the MP law of (1/d)Σ_jη_jη_jᵀ, the trailing-sum approximation
(eq. ``MP_upper_bound_trailing_singular_values``), the linear inverse-CDF bound and the printed CDF lower bound
(eq. ``inverse_cdf_MP_upper_bound``), over their whole range."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from theory import marchenko_pastur as mpm
from theory.strategies import mp_ratios


@given(mp_ratios, st.floats(0.01, 10.0))
def test_cdf_and_inverse_are_consistent(gamma, sigma2):
    mp = mpm.MP(gamma, sigma2)
    p = torch.linspace(mp.atom + 1e-3, 1 - 1e-3, 41, dtype=torch.float64)
    assert torch.allclose(mp.cdf(mp.inverse_cdf(p)), p, atol=1e-4)
    x = torch.linspace(mp.lam_minus, mp.lam_plus, 101, dtype=torch.float64)
    assert bool((mp.cdf(x).diff() >= -1e-12).all())


@given(st.lists(mp_ratios, min_size=1, max_size=4))
def test_inverse_cdf_linear_bound_holds(gammas):
    r = mpm.check_inverse_cdf_bound(gammas, points=401)
    assert r.holds, r.counterexample


def test_detects_a_tightened_inverse_cdf_bound():
    assert not mpm.check_inverse_cdf_bound([0.5], slope_factor=2.5, points=401).holds


def test_printed_cdf_lower_bound_counterexample():
    r = mpm.check_cdf_lower_bound([1.0], [1.0], points=401)  # σ² = Δ²/4 = 1: R = 3, B = 2 bits
    assert not r.holds
    assert r.counterexample["worst"]["lower_bound"] > r.counterexample["worst"]["F"]


@given(st.lists(mp_ratios.filter(lambda g: g <= 1), min_size=1, max_size=3),
       st.lists(st.floats(0.001, 20.0), min_size=1, max_size=3))
def test_equivalent_cdf_lower_bound_holds(gammas, sigma2s):
    assert mpm.check_cdf_lower_bound(gammas, sigma2s, form="equivalent", points=401).holds


@given(st.floats(0.01, 1.0))
def test_density_normalized_for_n_le_d(gamma):
    assert mpm.check_density_normalization(gamma).holds


def test_density_mass_is_d_over_n_for_n_gt_d():
    for gamma in (1.5, 2.0, 4.0):
        r = mpm.check_density_normalization(gamma)
        assert not r.holds and abs(r.counterexample["mass"] - 1 / gamma) < 1e-6


def test_partial_first_moment_closed_form():
    mp = mpm.MP(0.3, 0.7)
    x = torch.linspace(mp.lam_minus, mp.lam_plus, 200001, dtype=torch.float64)
    q = float(mp.inverse_cdf(torch.tensor([0.6]))[0])
    sel = x <= q
    num = torch.trapezoid((x * mp.density(x))[sel], x[sel])
    assert math.isclose(float(num), mp.partial_first_moment(q), rel_tol=1e-3)


def test_empirical_spectrum_converges_to_mp():
    ns = [32, 64, 128, 256]
    for kind in ("uniform", "rademacher"):
        r = mpm.check_empirical_spectrum(ns, 0.5, seed=9000, kind=kind)
        assert r.holds, r.counterexample


def test_detects_a_misscaled_mp_law():
    r = mpm.check_empirical_spectrum([32, 64, 128, 256], 0.5, seed=9000, kind="uniform", sigma2_factor=3.0)
    assert not r.holds and min(r.counterexample["distances"]) > 0.3


def test_trailing_sum_paper_approximation_is_off_by_one_minus_k_over_n():
    r = mpm.check_trailing_sum([32, 64, 128], 0.5, 0.5, seed=9100, form="paper", trials=4)
    assert not r.holds and abs(r.counterexample["empirical/approximation"][-1] - 2.0) < 0.05


def test_trailing_sum_corrected_approximation_holds():
    assert mpm.check_trailing_sum([32, 64, 128], 0.5, 0.5, seed=9100, form="corrected", trials=4).holds


def test_asymptotic_scan_locates_the_formal_failure_region():
    res = mpm.asymptotic_theorem_scan([1e-3, 1 / 64, 0.25, 1.0], [0.1, 0.5, 0.9])
    assert res["formal"]["ratio"] > 1 and res["formal"]["gamma"] <= 1 / 64
    assert res["informal"]["ratio"] < 1 and res["corrected"]["ratio"] < 1
