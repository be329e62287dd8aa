"""Rerun vs committed claims: coverage of the rerun's estimates and verdict flips."""

from __future__ import annotations

import json

from caldera.experiments.report.coverage import compare_claims, main


def _claim(verdict, *ivs, name="c", source="s"):
    return {"claim": name, "source": source, "verdict": verdict, "numbers": "", "sdd": "",
            "intervals": [{"pair": list(p), "estimate": e, "lo": lo, "hi": hi, "window_lo": e - 0.01,
                           "window_hi": e + 0.01} for p, e, lo, hi in ivs]}


def test_coverage_counts_rerun_estimates_inside_the_committed_intervals():
    committed = [_claim("holds", (("a", "b"), 0.9, 0.8, 0.95), (("a", "c"), 0.7, 0.6, 0.8)),
                 _claim("inconclusive", (("x", "y"), 1.0, None, None), name="d")]  # unbounded: not counted
    rerun = [_claim("holds", (("a", "b"), 0.93, 0.85, 0.99), (("a", "c"), 0.85, 0.8, 0.9)),
             _claim("fails", (("x", "y"), 1.2, 1.1, 1.3), name="d")]
    r = compare_claims(committed, rerun)
    assert r["coverage"] == {"inside": 1, "total": 2, "share": 0.5}  # 0.93 in [0.8, 0.95]; 0.85 not in [0.6, 0.8]
    assert [x["inside"] for x in r["comparisons"]] == [True, False, None]
    assert r["flips"] == []  # inconclusive -> fails is a strengthening, not a flip
    # the window-only intervals (±0.01 here) cover none of the three moved estimates
    assert r["coverage_windows_only"] == {"inside": 0, "total": 3, "share": 0.0}


def test_a_holds_to_fails_change_is_a_flip_and_fails_the_command(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([_claim("holds", (("a", "b"), 0.9, 0.8, 0.95))]))
    b.write_text(json.dumps([_claim("fails", (("a", "b"), 1.1, 1.05, 1.2))]))
    assert main([str(a), str(b), "--out", str(tmp_path / "cov.md")]) == 1
    text = (tmp_path / "cov.md").read_text()
    assert "(FLIP)" in text and "0 of 1 (0 %)" in text
    b.write_text(json.dumps([_claim("holds", (("a", "b"), 0.9, 0.85, 0.93))]))
    assert main([str(a), str(b)]) == 0


def test_the_rerun_prediction_interval_is_counted_on_its_own():
    """A committed interval with a rerun prediction interval: the rerun's estimate may fall outside the confidence
    interval yet inside the (wider) prediction interval; both shares are reported, matched to the same pair."""
    committed = [_claim("holds", (("a", "b"), 0.9, 0.85, 0.95), (("a", "c"), 0.7, 0.6, 0.8))]
    committed[0]["intervals"][0].update(rerun_lo=0.8, rerun_hi=1.0)  # the second pair predates rerun intervals
    rerun = [_claim("holds", (("a", "b"), 0.97, 0.9, 1.0), (("a", "c"), 0.75, 0.7, 0.8))]
    r = compare_claims(committed, rerun)
    assert [x["inside"] for x in r["comparisons"]] == [False, True]
    assert [x["inside_rerun_interval"] for x in r["comparisons"]] == [True, None]
    assert r["coverage"]["inside"] == 1 and r["coverage_rerun_interval"] == {"inside": 1, "total": 1, "share": 1.0}
