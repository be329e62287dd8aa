"""caldera.stats against closed forms and brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from caldera import stats


def test_percentile_exact_on_tiny_input():
    x = [3.0, 1.0, 2.0, 10.0]  # sorted 1, 2, 3, 10; h = 3q
    assert stats.percentile(x, 0.0) == 1.0 and stats.percentile(x, 1.0) == 10.0
    assert stats.percentile(x, 0.5) == pytest.approx(2.5)  # h = 1.5
    assert stats.percentile(x, 0.9) == pytest.approx(3 + 0.7 * 7)  # h = 2.7
    assert stats.percentile([5.0], 0.3) == 5.0
    rng = np.random.default_rng(1)
    y = rng.normal(size=37)
    for q in (0.025, 0.31, 0.975):
        assert stats.percentile(y, q) == pytest.approx(np.percentile(y, 100 * q))
    with pytest.raises(ValueError):
        stats.percentile([], 0.5)


def test_bootstrap_indices_are_seeded_and_match_the_exact_bootstrap_distribution():
    assert np.array_equal(stats.bootstrap_indices(5, 10, seed=3), stats.bootstrap_indices(5, 10, seed=3))
    assert not np.array_equal(stats.bootstrap_indices(5, 10, seed=3), stats.bootstrap_indices(5, 10, seed=4))
    v = np.array([0.0, 1.0, 4.0])
    # exact bootstrap distribution of the mean: all 3^3 equally likely resamples
    exact = np.array([v[list(i)].mean() for i in itertools.product(range(3), repeat=3)])
    draws = v[stats.bootstrap_indices(3, 40000, seed=0)].mean(axis=1)
    for t in np.unique(exact):
        assert (draws <= t + 1e-12).mean() == pytest.approx((exact <= t + 1e-12).mean(), abs=0.01)


def test_bootstrap_mean_of_two_points_has_the_closed_form_interval():
    # resampled mean of {0, 1} is 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4: its 2.5 % / 97.5 % quantiles are 0 and 1
    r = stats.bootstrap_mean([0.0, 1.0])
    assert (r["estimate"], r["lo"], r["hi"], r["n"]) == (0.5, 0.0, 1.0, 2)
    c = stats.bootstrap_mean([2.0, 2.0, 2.0])
    assert c["lo"] == c["hi"] == 2.0


def test_paired_difference_half_width_matches_the_normal_approximation():
    rng = np.random.default_rng(0)
    a = rng.normal(size=400)
    b = a - 0.3 + 0.5 * rng.normal(size=400)
    r = stats.paired_mean_difference(a, b)
    d = a - b
    se = d.std() / math.sqrt(d.size)
    assert r["estimate"] == pytest.approx(d.mean())
    assert r["sdd"] == pytest.approx(stats.Z95 * se, rel=0.1)
    assert r["lo"] > 0  # a true difference of 0.3 against a resolution of ~0.05


def test_perplexity_interval_estimate_and_degenerate_case():
    nll = np.array([100.0, 150.0, 90.0])
    tok = np.array([50.0, 50.0, 50.0])
    r = stats.perplexity_interval(nll, tok)
    assert r["estimate"] == pytest.approx(math.exp(340.0 / 150.0))
    assert r["lo"] <= r["estimate"] <= r["hi"]
    # bounds are perplexities of resamples: between the best and worst single window
    assert r["lo"] >= math.exp(90 / 50) - 1e-9 and r["hi"] <= math.exp(150 / 50) + 1e-9
    same = stats.perplexity_interval([2.0] * 4, [1.0] * 4)
    assert same["lo"] == pytest.approx(same["hi"]) == pytest.approx(math.exp(2.0))


def test_paired_ratio_collapses_to_one_for_identical_variants():
    rng = np.random.default_rng(2)
    nll = rng.uniform(50, 200, size=8)
    tok = np.full(8, 511.0)
    r = stats.paired_ppl_ratio(nll, tok, nll, tok)
    assert r["estimate"] == r["lo"] == r["hi"] == 1.0 and r["sdd"] == 0.0
    assert stats.direction({"lo": math.log(r["lo"]), "hi": math.log(r["hi"])}) == 0


def test_paired_ratio_excludes_one_when_a_variant_is_uniformly_worse():
    rng = np.random.default_rng(3)
    tok = np.full(6, 100.0)
    a = rng.uniform(200, 600, size=6)  # windows differ by a factor 3 in loss: unpaired intervals would overlap
    b = a + tok * rng.uniform(0.01, 0.05, size=6)  # B worse on every window by 0.01–0.05 nats/token
    r = stats.paired_ppl_ratio(a, tok, b, tok)
    assert r["hi"] < 1.0
    assert r["estimate"] == pytest.approx(stats.perplexity_interval(a, tok)["estimate"]
                                          / stats.perplexity_interval(b, tok)["estimate"])
    ua, ub = stats.perplexity_interval(a, tok), stats.perplexity_interval(b, tok)
    assert ua["hi"] > ub["lo"]  # the unpaired intervals overlap: pairing is what resolves it
    flipped = stats.paired_ppl_ratio(b, tok, a, tok)
    assert flipped["lo"] > 1.0 and flipped["lo"] == pytest.approx(1 / r["hi"])


def test_paired_ratio_refuses_different_windows():
    with pytest.raises(ValueError, match="same windows"):
        stats.paired_ppl_ratio([1.0, 2.0], [10, 10], [1.0, 2.0], [10, 11])


def test_wilson_interval_closed_form_and_brute_force():
    z = stats.Z95
    assert stats.wilson_interval(0, 10) == pytest.approx((0.0, z * z / (10 + z * z)))
    assert stats.wilson_interval(10, 10) == pytest.approx((10 / (10 + z * z), 1.0))
    # brute force: the Wilson interval is {p : |k/n − p| ≤ z·sqrt(p(1−p)/n)}
    for k, n in [(3, 10), (7, 50), (1, 4)]:
        grid = np.linspace(0, 1, 200001)
        inside = grid[np.abs(k / n - grid) <= z * np.sqrt(grid * (1 - grid) / n)]
        lo, hi = stats.wilson_interval(k, n)
        assert lo == pytest.approx(inside.min(), abs=1e-5) and hi == pytest.approx(inside.max(), abs=1e-5)
    acc = stats.accuracy_interval([1, 0, 0, 1, 1, 0, 0, 0, 0, 0])
    assert acc["estimate"] == 0.3 and (acc["lo"], acc["hi"]) == pytest.approx(stats.wilson_interval(3, 10))
    with pytest.raises(ValueError):
        stats.accuracy_interval([0.5, 1])


def test_choice_margin_and_direction():
    assert stats.choice_margin([-3.0, -1.0, -2.0], 1) == pytest.approx(1.0)
    assert stats.choice_margin([-3.0, -1.0, -2.0], 0) == pytest.approx(-2.0)
    assert stats.direction({"lo": 0.1, "hi": 0.2}) == 1
    assert stats.direction({"lo": -0.2, "hi": -0.1}) == -1
    assert stats.direction({"lo": -0.1, "hi": 0.1}) == 0
    assert stats.direction({"lo": 1.01, "hi": 1.2}, null=1.0) == 1


def test_log_ratio_difference_is_the_difference_of_the_two_paired_log_ratios():
    rng = np.random.default_rng(5)
    t = np.full(5, 100.0)
    a1, a2 = rng.uniform(300, 500, 5), rng.uniform(300, 500, 5)
    b1, b2 = a1 + 40.0, a2 + 10.0  # pair 1: A better by 0.4 nats/token, pair 2 by 0.1
    r = stats.log_ratio_difference(a1, b1, t, a2, b2, t)
    assert r["estimate"] == pytest.approx(-0.4 - (-0.1))
    assert r["lo"] == pytest.approx(-0.3) and r["hi"] == pytest.approx(-0.3)  # constant shifts: no spread
    same = stats.log_ratio_difference(a1, a1, t, a2, a2, t)
    assert same["lo"] == same["hi"] == 0.0
