"""caldera.experiments.report.verdicts: the verdict rules every claim family shares."""

from __future__ import annotations

import math

import pytest

from caldera.experiments.report.verdicts import (
    NEEDS_SEEDS,
    VERDICTS,
    lower_verdict,
    number_text,
    ratio_text,
    row_bits,
    sdd_ratio_text,
    seeds_verdict,
    window_only,
)


def _iv(lo, hi, window_lo=None, window_hi=None, seed_half=0.0, **extra):
    est = (lo + hi) / 2 if math.isfinite(lo) and math.isfinite(hi) else (window_lo + window_hi) / 2
    return {"estimate": est, "lo": lo, "hi": hi, "window_lo": lo if window_lo is None else window_lo,
            "window_hi": hi if window_hi is None else window_hi, "seed_half": seed_half, **extra}


@pytest.mark.parametrize("ivs, want", [
    ([_iv(0.8, 0.9), _iv(0.7, 0.95)], "holds"),     # every interval below 1
    ([_iv(0.8, 0.9), _iv(0.9, 1.1)], "inconclusive"),  # one straddles
    ([_iv(0.8, 0.9), _iv(1.05, 1.2)], "fails"),     # one lies above: fails even beside a win
    ([], "inconclusive"),
])
def test_lower_verdict_needs_every_interval_below_and_fails_on_any_above(ivs, want):
    assert lower_verdict(ivs) == want


def test_lower_verdict_takes_the_null_of_a_difference():
    assert lower_verdict([_iv(-0.3, -0.1)], null=0.0) == "holds"
    assert lower_verdict([_iv(-0.3, -0.1)]) == "holds"  # below 1 as well: the null decides, not the sign
    assert lower_verdict([_iv(0.2, 0.4)], null=0.0) == "fails"


def test_an_undetermined_seed_part_is_decided_only_when_the_windows_alone_are_inconclusive():
    """One realization and no pooled spread (seed_half None, infinite bounds): a window-only win is not taken
    (needs replicates); a window-only interval across the null is already inconclusive, since the seed part only
    widens it."""
    win = _iv(-math.inf, math.inf, window_lo=0.8, window_hi=0.9, seed_half=None)
    straddle = _iv(-math.inf, math.inf, window_lo=0.9, window_hi=1.1, seed_half=None)
    assert seeds_verdict([win], lower_verdict) == NEEDS_SEEDS
    assert seeds_verdict([straddle], lower_verdict) == "inconclusive"
    assert seeds_verdict([win, straddle], lower_verdict) == "inconclusive"
    # a determined seed part: the combined interval decides, whatever the window part says
    assert seeds_verdict([_iv(0.95, 1.02, window_lo=0.8, window_hi=0.9)], lower_verdict) == "inconclusive"
    assert window_only(win)["lo"] == 0.8 and window_only(win)["hi"] == 0.9 and win["lo"] == -math.inf
    assert NEEDS_SEEDS in VERDICTS


def test_ratio_text_shows_the_window_interval_when_the_seed_spread_is_unknown():
    undetermined = _iv(-math.inf, math.inf, window_lo=0.81, window_hi=0.93, seed_half=None, seeds=[1, 1])
    assert ratio_text(undetermined) == "×0.870, windows only [0.810, 0.930] (seeds 1/1: spread unknown)"
    assert ratio_text(_iv(0.8, 0.9)) == "×0.850 [0.800, 0.900]"
    seeded = _iv(0.8, 0.9, seeds=[3, 1], window_half=math.log1p(0.02), seed_half=math.log1p(0.05))
    assert ratio_text(seeded) == "×0.850 [0.800, 0.900] (3/1 seeds, unpaired; windows ±2.0 %, seeds ±5.0 %)"
    paired = {**seeded, "seeds": [3], "paired_seeds": [0, 1, 2], "construction": "paired seeds, block variance",
              "df": 12.0}
    assert ratio_text(paired) == ("×0.850 [0.800, 0.900] (paired on seeds 0/1/2; windows ±2.0 %, seeds ±5.0 % "
                                  "(block variance, df 12))")


def test_reach_text_scales_the_widest_half_width_to_80_percent_power():
    from caldera.experiments.report.verdicts import reach_text

    h = math.log1p(0.10)
    text = reach_text([{"sdd": h}, {"sdd": h / 2}], paper=0.82)
    h80 = h * (1.959963984540054 + 0.8416212335729143) / 1.959963984540054
    assert text == (f"resolvable at 80 % power: ratios below ×{math.exp(-h80):.3f} or above ×{math.exp(h80):.3f} "
                    "(the paper's: ×0.820)")
    assert reach_text([{"sdd": math.inf}]).endswith("undetermined (one realization, no window interval)")
    w = math.log1p(0.04)
    one = reach_text([{"sdd": math.inf, "window_half": w}, {"sdd": math.inf, "window_half": w / 2}], paper=0.82)
    w80 = w * (1.959963984540054 + 0.8416212335729143) / 1.959963984540054
    assert one == ("resolvable at 80 % power, from the windows alone (one realization: its seed spread, unknown "
                   f"here, only widens it): at best ratios below ×{math.exp(-w80):.3f} or above ×{math.exp(w80):.3f} "
                   "(the paper's: ×0.820)")
    by_bounds = reach_text([{"sdd": math.inf, "window_lo": 0.9, "window_hi": 0.9 * math.exp(2 * w)}])
    assert f"×{math.exp(-w80):.3f}" in by_bounds  # the window half-width read off its bounds (as ratios)


def test_sdd_ratio_text_takes_the_widest_interval():
    a = {"sdd": math.log1p(0.03), "n": 32, "seeds": [3, 3], "window_half": 0.01}
    b = {"sdd": math.log1p(0.10), "n": 32, "seeds": [1, 1], "window_half": 0.02}
    assert sdd_ratio_text([a, b]) == "±10.0 % ppl (32 windows, 3 seeds)"
    one = {"sdd": math.inf, "n": 8, "window_half": math.log1p(0.04)}
    assert sdd_ratio_text([one]) == "undetermined: one realization (window part ±4.0 %)"


def test_row_bits_and_number_text_read_what_the_tables_write():
    assert [row_bits({"b_lr": b}) for b in (4, 4.0, "16.0", 16, "—")] == ["4", "4", "16", "16", "—"]
    assert number_text(None) == "—" and number_text(6.304) == "6.30"
