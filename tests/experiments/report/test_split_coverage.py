"""caldera.experiments.report.split_coverage: coverage of the interval constructions by random splits of two runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caldera import stats
from caldera.experiments.report.split_coverage import claim_pairs, split_coverage

TOK = [500.0] * 6


def _table(per_variant: dict[str, np.ndarray], seeds: list[int]) -> dict:
    """A table JSON with the given (S, W) window NLLs per variant, realized under ``seeds``."""
    return {"realizations": {v: {"random": True, "seeds": seeds, "ids": [v] * len(seeds)} for v in per_variant},
            "seed_samples": {v: [{"ppl": {"wiki": {"window_nll": list(map(float, row)), "window_tokens": TOK}}}
                                 for row in nll] for v, nll in per_variant.items()}}


def _runs(rng: np.random.Generator, s: int = 3):
    base = rng.uniform(4.0, 5.0, size=6) * 500.0
    def run():
        shared = rng.normal(0.0, 0.05, size=(s, 1))  # a realization effect both variants share
        return {"a": base + 500.0 * (shared + rng.normal(0.0, 0.03, size=(s, 1))),
                "b": base + 500.0 * (0.2 + shared + rng.normal(0.0, 0.03, size=(s, 1)))}
    return run(), run()


def test_one_split_is_the_committed_halfs_interval_against_the_other_halfs_estimate():
    """Oracle: the same permutation drawn by hand, the committed half's interval from caldera.stats, the rerun
    half's estimate from its own seeds — with the same seed slots for both variants (pairing kept)."""
    A, B = _runs(np.random.default_rng(1))
    res = split_coverage([_table(A, [0, 1, 2])], [_table(B, [100, 101, 102])], [("a", "b")], splits=1, seed=7)
    perm = np.random.default_rng(7).permutation(6)
    a, b = np.vstack([A["a"], B["a"]]), np.vstack([A["b"], B["b"]])
    c, r = perm[:3], perm[3:]
    est = math.exp((a[r].sum(axis=1).mean() - b[r].sum(axis=1).mean()) / sum(TOK))
    for mode, paired in (("paired", True), ("unpaired", False)):
        iv = stats.seeded_ppl_ratio(a[c], b[c], TOK, paired_seeds=paired)
        assert res["per_pair"][0][f"{mode}_ci"] == float(iv["lo"] <= est <= iv["hi"])
        assert res["per_pair"][0][f"{mode}_prediction"] == float(iv["rerun_lo"] <= est <= iv["rerun_hi"])


def test_realizations_without_spread_are_always_covered():
    base = np.random.default_rng(2).uniform(4.0, 5.0, size=6) * 500.0
    flat = {"a": np.tile(base, (3, 1)), "b": np.tile(base + 100.0, (3, 1))}  # no realization spread at all
    same = split_coverage([_table(flat, [0, 1, 2])], [_table(flat, [100, 101, 102])], [("a", "b")], splits=20)
    assert set(same["overall"].values()) == {1.0}


def test_claim_pairs_takes_each_perplexity_pair_once():
    claims = [{"intervals": [{"pair": ["a", "b"], "kind": "ppl ratio"}, {"pair": ["a", "b"], "kind": "margin"}]},
              {"intervals": [{"pair": ["a", "b"], "kind": "ppl ratio"}, {"pair": ["c", "b"], "kind": "ppl ratio"}]}]
    assert claim_pairs(claims) == [("a", "b"), ("c", "b")]


def test_runs_on_other_windows_are_refused():
    A, B = _runs(np.random.default_rng(3))
    tb = _table(B, [100, 101, 102])
    for v in tb["seed_samples"].values():
        for s in v:
            s["ppl"]["wiki"]["window_tokens"] = [400.0] * 6
    with pytest.raises(ValueError, match="different windows"):
        split_coverage([_table(A, [0, 1, 2])], [tb], [("a", "b")], splits=1)


def _labelled(per_variant: dict[str, np.ndarray], labels: dict[str, str]) -> dict:
    t = _table(per_variant, [0, 1, 2])
    t["rows"] = [{"variant": v, "method": labels[v], "stand_in": "S"} for v in per_variant]
    return t


def test_pooled_coverage_takes_the_other_variants_of_the_family_and_enumerates_the_slots():
    """Oracle: for pair (a, b), a's and b's spread is the pooled variance of c alone (the same family, the pair
    left out); q (another family) never enters. Slot i's interval from caldera.stats, against slot j's estimate
    (prediction) and the other slots' mean (CI)."""
    from caldera.experiments.report.split_coverage import pooled_split_coverage

    rng = np.random.default_rng(3)
    base = rng.uniform(4.0, 5.0, size=6) * 500.0
    nll = {v: base + 500.0 * (shift + rng.normal(0.0, sd, size=(3, 1)))
           for v, shift, sd in (("a", 0.0, 0.05), ("b", 0.1, 0.05), ("c", 0.2, 0.08), ("q", 0.3, 0.5))}
    labels = {"a": "CALDERA", "b": "CALDERA", "c": "CALDERA", "q": "QuIP#"}
    res = pooled_split_coverage([_labelled(nll, labels)], [("a", "b"), ("a", "q")])
    first, second = res["per_pair"]
    assert second["pool"][1] is None and "ci" not in second  # q's family has no other variant
    logs = {v: x.sum(axis=1) / sum(TOK) for v, x in nll.items()}
    pool = stats.pooled_variance([logs["c"]])
    assert first["pool"][0]["df"] == 2 and first["pool"][0]["sd"] == pytest.approx(math.sqrt(pool["var"]))
    ci = pred = 0
    for i in range(3):
        iv = stats.seeded_ppl_ratio(nll["a"][i:i + 1], nll["b"][i:i + 1], TOK, a_pool=pool, b_pool=pool)
        rest = [j for j in range(3) if j != i]
        ci += iv["lo"] <= math.exp(logs["a"][rest].mean() - logs["b"][rest].mean()) <= iv["hi"]
        pred += sum(iv["rerun_lo"] <= math.exp(logs["a"][j] - logs["b"][j]) <= iv["rerun_hi"] for j in rest)
    assert first["ci"] == ci / 3 and first["prediction"] == pred / 6
    assert res["overall"] == {"ci": ci / 3, "prediction": pred / 6}
