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


def test_perplexity_interval_is_the_t_interval_of_the_log_perplexity():
    nll = np.array([100.0, 150.0, 90.0])
    tok = np.array([50.0, 50.0, 50.0])
    r = stats.perplexity_interval(nll, tok)
    assert r["estimate"] == pytest.approx(math.exp(340.0 / 150.0))
    # equal tokens: the textbook t interval of the per-window mean NLL (2.0, 3.0, 1.8), t at 2 df = 4.303
    x = nll / tok
    half = 4.302652729911275 * x.std(ddof=1) / math.sqrt(3)
    assert (math.log(r["lo"]), math.log(r["hi"])) == pytest.approx((x.mean() - half, x.mean() + half))
    same = stats.perplexity_interval([2.0] * 4, [1.0] * 4)
    assert same["lo"] == pytest.approx(same["hi"]) == pytest.approx(math.exp(2.0))
    one = stats.perplexity_interval([2.0], [1.0])  # one window: nothing to estimate its noise from
    assert one["lo"] == 0.0 and one["hi"] == math.inf


def test_ratio_t_interval_weights_unequal_windows_by_the_linearized_ratio():
    s, w = np.array([10.0, 30.0, 20.0, 45.0]), np.array([5.0, 10.0, 10.0, 15.0])
    r = stats.ratio_t_interval(s, w)
    R = s.sum() / w.sum()
    se = math.sqrt(4 / 3 * ((s - R * w) ** 2).sum()) / w.sum()
    assert r["estimate"] == pytest.approx(R) and r["se"] == pytest.approx(se) and r["df"] == 3
    assert r["hi"] - r["estimate"] == pytest.approx(stats.t_quantile(3) * se)


@pytest.mark.parametrize("n", [4, 8])
def test_window_interval_holds_its_coverage_at_small_counts_where_the_percentile_bootstrap_does_not(n):
    """Coverage by simulation: n windows whose per-token log loss is drawn around a known mean (a skewed gamma,
    as window losses are: skewness 0.7). The t interval keeps ≥ 93 % at n = 4 and 8; the percentile bootstrap
    over windows falls to ≤ 90 % there (about 78 % and 87 %)."""
    rng = np.random.default_rng(11)
    sims, tok = 1500, np.full(n, 512.0)
    true_mean = 3.0
    t_cover = b_cover = 0
    idx = stats.bootstrap_indices(n, 1000, 0)
    for _ in range(sims):
        per_token = true_mean - 1.0 + rng.gamma(8.0, 1 / 8, size=n)  # mean 3.0, skewed
        nll = per_token * tok
        r = stats.perplexity_interval(nll, tok)
        t_cover += r["lo"] <= math.exp(true_mean) <= r["hi"]
        draws = (nll[idx].sum(axis=1)) / (tok[idx].sum(axis=1))
        lo, hi = stats.percentile_interval(draws)
        b_cover += lo <= true_mean <= hi
    assert t_cover / sims >= 0.93
    assert b_cover / sims <= 0.90


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


# ---- realization spread: seeds combined with windows -----------------------------------------------------------

T975_DF2 = 4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom (tables)


def test_seed_half_width_is_t_times_the_standard_error():
    x = np.array([0.10, 0.16, 0.04])
    r = stats.seed_half_width([x])
    assert r["df"] == pytest.approx(2.0)
    assert r["half"] == pytest.approx(T975_DF2 * x.std(ddof=1) / math.sqrt(3), rel=1e-9)


def test_seed_half_width_welch_df_for_two_groups():
    a, b = np.array([0.0, 0.3, 0.6]), np.array([1.0, 1.1, 1.2, 1.3, 1.4])
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 5
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 4)  # Welch–Satterthwaite by hand
    r = stats.seed_half_width([a, b])
    assert r["df"] == pytest.approx(df) and r["half"] == pytest.approx(stats.t_quantile(df) * math.sqrt(va + vb))


def test_one_realization_leaves_the_seed_part_undetermined():
    r = stats.seed_half_width([[0.2]])
    assert r["half"] is None
    c = stats.combine(0.1, 0.0, 0.2, r)
    assert c["lo"] == -math.inf and c["hi"] == math.inf and stats.direction(c) == 0
    # nothing random (a deterministic side only): the window interval stands as it is
    assert stats.combine(0.1, 0.0, 0.2, stats.seed_half_width([]))["lo"] == pytest.approx(0.0)


def test_seeded_ppl_ratio_window_part_and_estimate_against_oracles():
    rng = np.random.default_rng(3)
    tok = np.full(8, 100.0)
    A = rng.normal(300, 20, (3, 8))
    B = rng.normal(320, 20, (3, 8))
    r = stats.seeded_ppl_ratio(A, B, tok, paired_seeds=True)
    per_a = np.exp(A.sum(axis=1) / tok.sum())
    per_b = np.exp(B.sum(axis=1) / tok.sum())
    # estimate: ratio of the geometric means of the per-seed perplexities
    assert r["estimate"] == pytest.approx(np.exp(np.log(per_a).mean() - np.log(per_b).mean()))
    # window part: the paired bootstrap of the seed-averaged NLLs
    w = stats.paired_ppl_ratio(A.mean(axis=0), tok, B.mean(axis=0), tok)
    assert (r["window_lo"], r["window_hi"]) == pytest.approx((w["lo"], w["hi"]))
    # seed part: t over the per-seed log ratios (paired seeds: one group)
    d = np.log(per_a) - np.log(per_b)
    assert r["seed_half"] == pytest.approx(T975_DF2 * d.std(ddof=1) / math.sqrt(3))
    # combined: each side in quadrature, on the log scale
    est = math.log(r["estimate"])
    assert math.log(r["lo"]) == pytest.approx(est - math.hypot(est - math.log(w["lo"]), r["seed_half"]))
    assert math.log(r["hi"]) == pytest.approx(est + math.hypot(math.log(w["hi"]) - est, r["seed_half"]))


def test_seed_spread_widens_what_windows_alone_would_decide():
    """A variant whose realizations differ by ±10 % on every window: the windows agree perfectly within a seed,
    so the window-only interval of seed 0 excludes 1, but the seeds do not resolve the direction."""
    tok = np.full(8, 100.0)
    base = np.log(100.0) * tok
    A = np.stack([base + math.log(f) * tok for f in (0.85, 1.00, 1.12)])
    B = base[None, :]
    one = stats.seeded_ppl_ratio(A[:1], B, tok, b_random=False)
    assert one["seed_half"] is None and one["window_hi"] < 1.0  # windows alone: "lower"
    three = stats.seeded_ppl_ratio(A, B, tok, b_random=False)
    assert three["lo"] < 1.0 < three["hi"]  # with the seeds: no direction


def test_combined_interval_covers_a_fresh_realization_where_windows_alone_do_not():
    """Monte Carlo: each realization shifts log-ppl by N(0, 0.08²) on every window, windows add N(0, 0.02²).
    The combined 95 % interval of the 3-seed ratio covers the true ratio (1) about 95 % of the time; the
    window-only interval of one realization covers it far less (what the cross-machine rerun found)."""
    rng = np.random.default_rng(11)
    tok = np.full(8, 100.0)
    hit_comb = hit_win = 0
    n_sim = 300
    for _ in range(n_sim):
        A = (rng.normal(0, 0.08, (3, 1)) + rng.normal(0, 0.02, (3, 8)) + 5.0) * tok
        B = (rng.normal(0, 0.08, (3, 1)) + rng.normal(0, 0.02, (3, 8)) + 5.0) * tok
        c = stats.seeded_ppl_ratio(A, B, tok)
        w = stats.paired_ppl_ratio(A[0], tok, B[0], tok)
        hit_comb += c["lo"] <= 1.0 <= c["hi"]
        hit_win += w["lo"] <= 1.0 <= w["hi"]
    assert hit_comb / n_sim >= 0.90
    assert hit_win / n_sim <= 0.60


def test_rerun_prediction_interval_covers_another_run_at_95_percent_where_the_ci_covers_less():
    """Monte Carlo against closed forms: a run of S = 3 seeds and an independent rerun of 3 fresh seeds on the same
    windows (window noise shared, realization noise N(0, 0.1²) per seed). The rerun's estimate lies inside this
    run's prediction interval (``rerun_lo``/``rerun_hi``) 95 % of the time; inside the confidence interval only
    P(|t_2| < t_{0.975,2}/√2) = 0.907 of the time. A prediction interval without the √2 would sit at 0.907 too."""
    from scipy.stats import t as student_t

    rng = np.random.default_rng(3)
    tok = np.full(4, 100.0)
    n_sim, hit_pred, hit_ci = 4000, 0, 0
    for _ in range(n_sim):
        shared = rng.normal(0, 0.05, 4)  # the windows: the same in both runs
        run, rerun = ((rng.normal(0, 0.1, (3, 1)) + shared + 5.0) * tok for _ in range(2))
        a = stats.seeded_perplexity(run, tok)
        b = stats.seeded_perplexity(rerun, tok)
        # windows held fixed: the CI's window part would only widen it, so take the seed part alone
        c = stats.combine(math.log(a["estimate"]), math.log(a["estimate"]), math.log(a["estimate"]),
                          stats.seed_half_width([run.sum(axis=1) / tok.sum()]))
        hit_pred += a["rerun_lo"] <= b["estimate"] <= a["rerun_hi"]
        hit_ci += c["lo"] <= math.log(b["estimate"]) <= c["hi"]
    q = student_t.ppf(0.975, 2)
    assert hit_pred / n_sim == pytest.approx(0.95, abs=0.012)
    assert hit_ci / n_sim == pytest.approx(2 * student_t.cdf(q / math.sqrt(2), 2) - 1, abs=0.015)
    one = stats.seeded_perplexity(run[:1], tok)
    assert (one["rerun_lo"], one["rerun_hi"]) == (0.0, math.inf)  # one realization: nowhere to predict from


def test_seeded_perplexity_without_spread_is_the_window_interval():
    rng = np.random.default_rng(5)
    tok = np.full(6, 50.0)
    nll = rng.normal(200, 10, 6)
    one = stats.perplexity_interval(nll, tok)
    same = stats.seeded_perplexity(np.stack([nll] * 3), tok)
    assert (same["estimate"], same["lo"], same["hi"]) == pytest.approx((one["estimate"], one["lo"], one["hi"]))
    assert stats.seeded_perplexity(nll[None, :], tok, random=False)["hi"] == pytest.approx(one["hi"])


def test_seeded_accuracy_and_mean_difference():
    C = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]])
    r = stats.seeded_accuracy(C)
    assert r["estimate"] == pytest.approx(0.5) and r["per_seed"] == [0.5, 0.25, 0.75]
    lo_w, hi_w = stats.wilson_bounds(0.5, 4)
    assert (r["window_lo"], r["window_hi"]) == pytest.approx((lo_w, hi_w))
    assert r["seed_half"] == pytest.approx(T975_DF2 * np.std([0.5, 0.25, 0.75], ddof=1) / math.sqrt(3))
    assert stats.wilson_bounds(0.5, 4) == pytest.approx(stats.wilson_interval(2, 4))
    d = stats.seeded_mean_difference(C, np.zeros((3, 4)), b_random=False)
    assert d["estimate"] == pytest.approx(0.5) and d["lo"] < 0.5 < d["hi"]


def test_pooled_variance_is_the_df_weighted_mean_of_the_group_variances():
    a, b, one = np.array([0.0, 0.3, 0.6]), np.array([1.0, 1.1, 1.2, 1.3, 1.4]), np.array([7.0])
    p = stats.pooled_variance([a, b, one])  # a single seed adds nothing
    assert p["df"] == 2 + 4
    assert p["var"] == pytest.approx((2 * a.var(ddof=1) + 4 * b.var(ddof=1)) / 6, rel=1e-12)
    assert stats.pooled_variance([one, [2.0]]) is None


def test_a_single_seed_takes_the_pooled_variance_with_the_pools_df():
    pool = {"var": 0.04, "df": 10}
    r = stats.seed_half_width([[0.2]], pooled=[pool])
    assert r["pooled"] == [True] and r["df"] == pytest.approx(10.0)
    assert r["half"] == pytest.approx(stats.t_quantile(10) * 0.2, rel=1e-12)
    # two sides: one with its own three seeds, one pooled; Welch df with the pool's df for the pooled term
    a = np.array([0.0, 0.3, 0.6])
    r = stats.seed_half_width([a, [0.5]], pooled=[pool, pool])
    va, vp = a.var(ddof=1) / 3, 0.04
    df = (va + vp) ** 2 / (va ** 2 / 2 + vp ** 2 / 10)
    assert r["pooled"] == [False, True]  # a group with its own seeds never takes the pool
    assert r["df"] == pytest.approx(df) and r["half"] == pytest.approx(stats.t_quantile(df) * math.sqrt(va + vp))
    # no pool for the single seed: undetermined, as before
    assert stats.seed_half_width([a, [0.5]], pooled=[pool, None])["half"] is None
    with pytest.raises(ValueError, match="2 groups"):
        stats.seed_half_width([a, [0.5]], pooled=[pool])


def test_a_pooled_one_seed_interval_covers_the_true_ratio():
    """Monte Carlo: every variant's realizations shift log-ppl by N(0, 0.08²); A is run once, B three times, and
    four other variants of the family three times each give the pool. The combined interval covers the true
    ratio (1) about 95 % of the time; without the pool the window part alone covers far less."""
    rng = np.random.default_rng(5)
    tok = np.full(8, 100.0)
    hit = hit_win = 0
    n_sim = 300
    for _ in range(n_sim):
        A = (rng.normal(0, 0.08, (1, 1)) + rng.normal(0, 0.02, (1, 8)) + 5.0) * tok
        B = (rng.normal(0, 0.08, (3, 1)) + rng.normal(0, 0.02, (3, 8)) + 5.0) * tok
        pool = stats.pooled_variance([rng.normal(0, 0.08, 3) for _ in range(4)])
        c = stats.seeded_ppl_ratio(A, B, tok, a_pool=pool)
        hit += c["lo"] <= 1.0 <= c["hi"]
        hit_win += c["window_lo"] <= 1.0 <= c["window_hi"]
    assert hit / n_sim >= 0.90
    assert hit_win / n_sim <= 0.60


def test_block_variance_is_the_residual_mean_square_of_the_additive_variant_seed_model():
    rng = np.random.default_rng(21)
    Y = rng.normal(size=(4, 5)) + np.arange(4)[:, None] + rng.normal(size=5)[None, :]
    got = stats.block_variance(Y)
    # oracle: least squares on variant and seed indicator columns, residual sum of squares over its df
    V, S = Y.shape
    X = np.zeros((V * S, V + S - 1))
    for v in range(V):
        for s in range(S):
            X[v * S + s, v] = 1.0
            if s:
                X[v * S + s, V + s - 1] = 1.0
    beta, *_ = np.linalg.lstsq(X, Y.ravel(), rcond=None)
    rss = float(((Y.ravel() - X @ beta) ** 2).sum())
    assert got["df"] == (V - 1) * (S - 1) and got["var"] == pytest.approx(rss / got["df"])
    assert stats.block_variance(Y[:1]) is None and stats.block_variance(Y[:, :1]) is None
    # two variants: the block is the pair itself, 2 σ̂² = the variance of the per-seed differences
    two = stats.block_variance(Y[:2])
    assert 2 * two["var"] == pytest.approx((Y[0] - Y[1]).var(ddof=1))


def _paired_coverage(lam, sig, pairs, sims=1500, seed=5):
    """Coverage of the true mean difference (0) over simulated seed blocks ``Y[v, s] = λ_v b_s + σ_v ε`` (S = 4):
    by the paired seed part, by the block's variance alone, by the pair's own alone and unpaired (Welch); each
    construction's mean half-width; and coverage where the pair's own variance fell in its lowest quartile."""
    rng = np.random.default_rng(seed)
    S = 4
    rows = {p: [] for p in pairs}
    for _ in range(sims):
        b = rng.normal(0, 0.06, S)
        Y = lam[:, None] * b[None, :] + sig[:, None] * rng.normal(size=(len(lam), S))
        blk = stats.block_variance(Y)
        for i, j in pairs:
            d = Y[i] - Y[j]
            rows[(i, j)].append((abs(d.mean()), d.var(ddof=1), stats.paired_seed_part(d, blk)["half"],
                                 stats.t_quantile(blk["df"]) * math.sqrt(2 * blk["var"] / S),
                                 stats.paired_seed_part(d)["half"], stats.seed_half_width([Y[i], Y[j]])["half"]))
    out = {}
    for p, r in rows.items():
        a = np.array(r)
        low = a[:, 1] <= np.quantile(a[:, 1], 0.25)
        out[p] = {name: float((a[:, 0] <= a[:, k]).mean()) for name, k in
                  (("paired", 2), ("block only", 3), ("own only", 4), ("welch", 5))}
        out[p].update({f"{name} half": float(a[:, k].mean()) for name, k in (("paired", 2), ("welch", 5))})
        out[p].update({f"{name} | small own": float((a[low, 0] <= a[low, k]).mean())
                       for name, k in (("paired", 2), ("own only", 4))})
    return out


def test_paired_seed_part_covers_at_any_correlation_where_block_only_and_unpaired_do_not():
    # variant 5 moves against the others on shared seeds (correlation about −0.9 with variant 0)
    lam = np.array([1.0, 1.0, 0.8, 0.6, 0.9, -1.0])
    sig = np.array([0.02, 0.02, 0.04, 0.04, 0.03, 0.03])
    cov = _paired_coverage(lam, sig, [(0, 1), (0, 5)])
    assert cov[(0, 5)]["paired"] >= 0.93 and cov[(0, 1)]["paired"] >= 0.93
    assert cov[(0, 5)]["block only"] < 0.85  # the block's average interaction understates this pair's
    assert cov[(0, 5)]["welch"] < 0.90  # unpaired variances miss the negative covariance


def test_paired_seed_part_is_not_fooled_by_a_small_own_variance_and_beats_unpaired_where_seeds_correlate():
    """Where the additive model holds (every pair alike, correlation about +0.8), a pair whose own four per-seed
    differences happen to agree closely gets a too-narrow own interval; the block's variance keeps it honest
    (the fragility of a 1.7 % own sd that was 8.0 % in a rerun). Pairing also halves the unpaired interval."""
    lam, sig = np.ones(6), np.full(6, 0.03)
    cov = _paired_coverage(lam, sig, [(0, 1)])[(0, 1)]
    assert cov["paired"] >= 0.94
    assert cov["own only | small own"] < 0.90 <= cov["paired | small own"]
    assert cov["paired half"] < 0.7 * cov["welch half"]


def test_paired_seed_part_takes_the_larger_variance_and_says_which():
    d = np.array([0.10, 0.12, 0.08, 0.11])
    own = stats.paired_seed_part(d)
    assert own["construction"].endswith("own variance") and own["df"] == 3
    assert own["half"] == pytest.approx(stats.t_quantile(3) * d.std(ddof=1) / 2)
    wide = stats.paired_seed_part(d, {"var": 1.0, "df": 20})
    assert wide["construction"].endswith("block variance") and wide["df"] == 20
    assert wide["half"] == pytest.approx(stats.t_quantile(20) * math.sqrt(2.0 / 4))
    narrow = stats.paired_seed_part(d, {"var": 1e-8, "df": 20})
    assert narrow["construction"].endswith("own variance")
    assert stats.paired_seed_part([0.1])["half"] is None  # one shared seed, no block: unknown
    single = stats.paired_seed_part([0.1], {"var": 0.01, "df": 12})
    assert single["half"] == pytest.approx(stats.t_quantile(12) * math.sqrt(0.02))


def _paired_table(n11, n10, n01, n00):
    a = [1] * (n11 + n10) + [0] * (n01 + n00)
    b = [1] * n11 + [0] * n10 + [1] * n01 + [0] * n00
    return a, b


def _exact_coverage(fn, n, p):
    """Exact coverage of ``fn``'s interval for the difference p10 − p01 over every 2×2 table of n documents."""
    from scipy.stats import multinomial

    d, cov = p[1] - p[2], 0.0
    for n11, n10, n01 in itertools.product(range(n + 1), repeat=3):
        if n11 + n10 + n01 <= n:
            counts = [n11, n10, n01, n - n11 - n10 - n01]
            iv = fn(*_paired_table(*counts))
            cov += multinomial.pmf(counts, n, p) * (iv["lo"] <= d <= iv["hi"])
    return cov


PAIRED_BINARY_CASES = [(0.4, 0.1, 0.1, 0.4), (0.6, 0.2, 0.05, 0.15), (0.3, 0.3, 0.3, 0.1), (0.2, 0.2, 0.1, 0.5),
                       (0.45, 0.05, 0.05, 0.45)]


@pytest.mark.parametrize("n", [4, 8])
def test_paired_proportion_interval_holds_coverage_at_few_documents_where_the_t_interval_does_not(n):
    newcombe = [_exact_coverage(stats.paired_proportion_difference, n, p) for p in PAIRED_BINARY_CASES]
    t = [_exact_coverage(stats.paired_mean_difference, n, p) for p in PAIRED_BINARY_CASES]
    assert min(newcombe) >= 0.88 and np.mean(newcombe) >= 0.93
    assert min(t) < 0.88  # the construction it replaces for accuracy: too narrow at few documents


def test_paired_proportion_interval_keeps_a_width_where_every_document_agrees():
    a, b = _paired_table(4, 0, 0, 0)  # both right on all 4 documents
    iv = stats.paired_proportion_difference(a, b)
    assert iv["estimate"] == 0.0 and iv["lo"] < -0.3 and iv["hi"] > 0.3
    assert stats.paired_mean_difference(a, b)["sdd"] == 0.0  # the t interval collapses to a point
    lo, hi = stats.wilson_interval(4, 4)  # φ = 0 here: each side is one Wilson half-width
    assert iv["hi"] == pytest.approx(1.0 - lo) and iv["lo"] == pytest.approx(lo - 1.0)


def test_paired_proportion_interval_is_antisymmetric_and_contains_its_estimate():
    for counts in itertools.product(range(4), repeat=4):
        if sum(counts) == 0:
            continue
        a, b = _paired_table(*counts)
        ab, ba = stats.paired_proportion_difference(a, b), stats.paired_proportion_difference(b, a)
        assert ab["lo"] == pytest.approx(-ba["hi"]) and ab["hi"] == pytest.approx(-ba["lo"])
        assert -1.0 <= ab["lo"] <= ab["estimate"] <= ab["hi"] <= 1.0


def test_paired_proportion_interval_refuses_non_binary_or_unpaired_input():
    with pytest.raises(ValueError, match="0/1"):
        stats.paired_proportion_difference([0, 2], [1, 0])
    with pytest.raises(ValueError, match="equal lengths"):
        stats.paired_proportion_difference([0, 1], [1])


def test_paired_proportion_interval_narrows_with_positive_correlation_at_equal_accuracies():
    """Same two accuracies (10/20 each): documents both models get right or wrong together leave a narrower
    interval than independent outcomes (φ = 0). Its half-widths follow the formula at the corrected φ: cross
    product 8·8 − 2·2 = 60, lowered by n/2 = 10, over √(10⁴): φ = 0.5."""
    corr = stats.paired_proportion_difference(*_paired_table(8, 2, 2, 8))
    indep = stats.paired_proportion_difference(*_paired_table(5, 5, 5, 5))
    assert corr["sdd"] < indep["sdd"]
    lo, hi = stats.wilson_interval(10, 20)
    w = 0.5 - lo  # = hi − 0.5: the Wilson interval of 1/2 is symmetric
    assert indep["hi"] == pytest.approx(math.sqrt(2) * w)
    assert corr["hi"] == pytest.approx(math.sqrt(2 * w * w - 2 * 0.5 * w * w))


@pytest.mark.parametrize("counts", [(2, 0, 0, 2), (3, 0, 0, 1), (10, 0, 0, 10)])
def test_paired_proportion_interval_keeps_a_width_on_wholly_concordant_documents(counts):
    """Both models right on the same documents and wrong on the others (uncorrected φ = 1, which cancels the two
    Wilson half-widths and leaves a point at an accuracy of 1/2): the interval still spans no difference with
    a width."""
    iv = stats.paired_proportion_difference(*_paired_table(*counts))
    assert iv["lo"] < -0.05 and iv["hi"] > 0.05
