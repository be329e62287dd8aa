"""caldera.experiments.planning.seed_design: seeds per variant at 80 % power, from committed spreads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caldera import stats
from caldera.experiments.planning.seed_design import Comparison, allocate, power, seeds_for_power


def _c(a="a", b="b", effect=-0.2, w=0.03, sd=0.08, block="S", claim="x"):
    return Comparison(claim, a, b, block, effect, w, sd)


def test_power_matches_the_reports_own_decision_on_simulated_runs():
    """Oracle: simulated runs decided by the library's own interval code (caldera.stats.paired_seed_part with a
    block variance drawn as the block's estimate would be, caldera.stats.combine with the window part)."""
    rng = np.random.default_rng(1)
    for S, V, effect, sd in [(2, 4, -0.2, 0.08), (3, 6, -0.15, 0.08), (4, 2, -0.1, 0.05), (6, 2, -0.2, 0.12)]:
        c = _c(effect=effect, sd=sd)
        df = (V - 1) * (S - 1)
        hits, sims = 0, 1500
        for _ in range(sims):
            d = effect + sd * rng.normal(size=S)
            w_est = float(d.mean() + c.window_half / stats.Z95 * rng.normal())
            block = {"var": sd * sd * rng.chisquare(df) / df / 2, "df": df}  # 2 σ̂² is one difference's
            part = stats.paired_seed_part(d, block)
            iv = stats.combine(w_est, w_est - c.window_half, w_est + c.window_half, part)
            hits += stats.direction(iv) != 0
        assert power(c, S, V) == pytest.approx(hits / sims, abs=0.05), (S, V)


def test_two_seeds_lose_most_of_their_power_to_the_pairs_own_one_degree_of_freedom():
    c = _c(effect=-0.2, sd=0.08)
    assert power(c, 2, 6) < 0.75 * power(c, 3, 6)
    assert power(c, 3, 6) < power(c, 6, 6) and power(_c(effect=-0.1), 4, 6) < power(_c(effect=-0.3), 4, 6)
    assert power(c, 4, 6) == power(c, 4, 6)  # seeded


def test_seeds_for_power_is_the_smallest_count_reaching_the_target_and_none_out_of_reach():
    c = _c()
    s = seeds_for_power(c, variants=4)
    assert s is not None and power(c, s, 4) >= 0.8 > power(c, s - 1, 4)
    # windows alone as wide as the effect: no number of seeds helps
    assert seeds_for_power(_c(effect=-0.05, w=0.08), variants=4) is None
    assert power(_c(effect=0.0), 6, 4) == 0.0
    with pytest.raises(ValueError, match="finite"):
        _c(sd=math.nan)


def test_allocate_funds_the_cheapest_reachable_comparisons_within_the_budget():
    comps = [_c("a", "b", effect=-0.3), _c("a", "c", effect=-0.2), _c("d", "e", effect=-0.01, claim="tiny")]
    cost = {"a": 100.0, "b": 100.0, "c": 300.0, "d": 50.0, "e": 50.0}
    need_ab = seeds_for_power(comps[0], 5)
    need_ac = seeds_for_power(comps[1], 5)
    # enough for a/b, not for a/c on top of it
    budget = (need_ab - 1) * 200.0 + 10.0
    got = allocate(comps, cost, budget)
    assert got["seeds"] == {"a": need_ab, "b": need_ab}
    rows = {(r["a"], r["b"]): r for r in got["comparisons"]}
    assert rows[("a", "b")]["funded"] and not rows[("a", "c")]["funded"] and rows[("a", "c")]["within_reach"]
    assert not rows[("d", "e")]["within_reach"] and rows[("d", "e")]["need"] is None
    assert got["spent_s"] <= budget
    big = allocate(comps, cost, 1e9)
    assert big["seeds"]["c"] == need_ac and big["seeds"]["a"] == max(need_ab, need_ac)
    assert "d" not in big["seeds"]  # out of reach: never replicated, whatever the budget
    with pytest.raises(ValueError, match="no cost"):
        allocate(comps, {"a": 1.0}, 10.0)
