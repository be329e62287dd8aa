"""Pooled realization spread per (family, stand-in) from the replicated variants of a run's tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caldera.experiments.report.realization_pool import attach_pools, family_of, pools

TOK, N_WIN = 100, 4


def _wins(log_ppl: float) -> dict:
    return {"ppl": {"wiki": {"window_nll": [log_ppl * TOK] * N_WIN, "window_tokens": [TOK] * N_WIN}}}


def _table(variants: dict[str, tuple[str, str, list[float]]], families: bool = True) -> dict:
    """``{variant: (method label, stand-in, per-seed log ppl)}`` as a table JSON with every seed's windows."""
    rows, real, samples, seed_samples = [], {}, {}, {}
    for v, (label, stand, logs) in variants.items():
        rows.append({"variant": v, "method": label, "stand_in": stand})
        info = {"random": not label.startswith("Unquantized"), "seeds": list(range(len(logs))), "ids": [v] * len(logs)}
        if families:
            info["family"] = {"CALDERA": "caldera", "QuIP#": "quip#"}.get(label.split()[0], "dense")
        real[v] = info
        samples[v] = _wins(logs[0])
        if len(logs) > 1:
            seed_samples[v] = [_wins(x) for x in logs]
    return {"rows": rows, "realizations": real, "samples": samples, "seed_samples": seed_samples}


def _example(families: bool = True) -> dict:
    return {"t1": _table({
        "c16": ("CALDERA (7B)", "S", [4.0, 4.1, 3.9]),
        "c24": ("CALDERA (7B)", "S", [3.8, 3.8, 4.0, 3.6]),
        "c32": ("CALDERA (7B)", "S", [3.7]),
        "q": ("QuIP# (7B)", "S", [4.5, 4.4]),
        "q-lr": ("QuIP# (7B)", "S", [4.2]),
        "g40": ("CALDERA (8B)", "G", [5.0]),
        "dense": ("Unquantized (7B)", "S", [3.0]),
    }, families)}


@pytest.mark.parametrize("families", [True, False])
def test_pools_are_per_family_and_stand_in(families):
    p = pools(_example(families))
    assert set(p) == {("caldera", "S"), ("quip#", "S")}  # G has no replicated variant: no pool
    cal = p[("caldera", "S")]
    a, b = np.array([4.0, 4.1, 3.9]), np.array([3.8, 3.8, 4.0, 3.6])
    assert cal["df"] == 2 + 3 and cal["variants"] == ["c16", "c24"]
    assert cal["var"] == pytest.approx((2 * a.var(ddof=1) + 3 * b.var(ddof=1)) / 5)
    assert p[("quip#", "S")]["var"] == pytest.approx(np.var([4.5, 4.4], ddof=1))


def test_a_variant_in_several_tables_counts_once():
    t = _example()["t1"]
    assert pools({"t1": t, "t7": t})[("caldera", "S")]["df"] == 5


def test_only_single_seed_random_variants_take_a_pool():
    out = attach_pools(_example())["t1"]["pooled_spread"]
    assert set(out) == {"c32", "q-lr"}  # g40: no pool on its stand-in; dense: not random
    assert out["c32"]["family"] == "caldera" and out["q-lr"]["family"] == "quip#"


def test_family_prefers_what_the_realizations_record():
    t = _example()["t1"]
    t["realizations"]["c32"]["family"] = "mine"
    assert family_of(t, "c32") == "mine" and family_of(t, "c16") == "caldera"
    assert math.isclose(pools({"t": t})[("caldera", "S")]["df"], 5)
