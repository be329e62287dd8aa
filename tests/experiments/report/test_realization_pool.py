"""Pooled realization spread per (family, factor precision, stand-in), and seed blocks, from the replicated variants
of a run's tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caldera import stats
from caldera.experiments.report.realization_pool import attach_pools, blocks, family_of, pools

TOK, N_WIN = 100, 4


def _wins(log_ppl: float) -> dict:
    return {"ppl": {"wiki": {"window_nll": [log_ppl * TOK] * N_WIN, "window_tokens": [TOK] * N_WIN}}}


def _table(variants: dict[str, tuple[str, str, list[float]]], families: bool = True) -> dict:
    """``{variant: (method label, stand-in, per-seed log ppl[, B_LR])}`` as a table JSON with every seed's
    windows (B_LR 4 unless given)."""
    rows, real, samples, seed_samples = [], {}, {}, {}
    for v, (label, stand, logs, *b_lr) in variants.items():
        rows.append({"variant": v, "method": label, "stand_in": stand, "b_lr": b_lr[0] if b_lr else 4.0})
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
    assert set(p) == {("caldera", "4", "S"), ("quip#", "4", "S")}  # G has no replicated variant: no pool
    cal = p[("caldera", "4", "S")]
    a, b = np.array([4.0, 4.1, 3.9]), np.array([3.8, 3.8, 4.0, 3.6])
    assert cal["df"] == 2 + 3 and cal["variants"] == ["c16", "c24"]
    assert cal["var"] == pytest.approx((2 * a.var(ddof=1) + 3 * b.var(ddof=1)) / 5)
    assert p[("quip#", "4", "S")]["var"] == pytest.approx(np.var([4.5, 4.4], ddof=1))


def test_a_variant_in_several_tables_counts_once():
    t = _example()["t1"]
    assert pools({"t1": t, "t7": t})[("caldera", "4", "S")]["df"] == 5


def test_only_single_seed_random_variants_take_a_pool():
    out = attach_pools(_example())["t1"]["pooled_spread"]
    assert set(out) == {"c32", "q-lr"}  # g40: no pool on its stand-in; dense: not random
    assert out["c32"]["family"] == "caldera" and out["q-lr"]["family"] == "quip#"


def test_family_prefers_what_the_realizations_record():
    t = _example()["t1"]
    t["realizations"]["c32"]["family"] = "mine"
    assert family_of(t, "c32") == "mine" and family_of(t, "c16") == "caldera"
    assert math.isclose(pools({"t": t})[("caldera", "4", "S")]["df"], 5)


def test_two_stand_ins_of_one_family_never_share_a_pool():
    """Pooling by family alone would merge G's spread into S's (and give G's one-seed row S's pool)."""
    t = _table({"cs": ("CALDERA (7B)", "S", [4.0, 4.4, 3.6]), "cg": ("CALDERA (8B)", "G", [5.0, 5.01, 4.99]),
                "cg1": ("CALDERA (8B)", "G", [5.2])})
    p = pools({"t": t})
    assert p[("caldera", "4", "S")]["variants"] == ["cs"] and p[("caldera", "4", "G")]["variants"] == ["cg"]
    assert p[("caldera", "4", "G")]["var"] == pytest.approx(np.var([5.0, 5.01, 4.99], ddof=1))
    assert attach_pools({"t": t})["t"]["pooled_spread"]["cg1"]["stand_in"] == "G"


def test_factor_precisions_and_plain_vs_low_rank_quip_pool_apart():
    t = _table({"c4": ("CALDERA (7B)", "S", [4.0, 4.4, 3.6]), "c16": ("CALDERA (7B)", "S", [4.0, 4.01, 3.99], 16.0),
                "q": ("QuIP# (7B)", "S", [4.5, 4.9, 4.1], None), "qlr": ("QuIP# (7B)", "S", [4.2, 4.21], 16.0),
                "c16one": ("CALDERA (7B)", "S", [4.1], 16.0)})
    p = pools({"t": t})
    assert set(p) == {("caldera", "4", "S"), ("caldera", "16", "S"), ("quip#", "—", "S"), ("quip#", "16", "S")}
    assert attach_pools({"t": t})["t"]["pooled_spread"]["c16one"]["variants"] == ["c16"]


def test_deterministic_variants_never_enter_a_pool_or_a_block():
    """A deterministic variant (dense, or a method registered random=False) with several identical results would
    pull a pooled variance towards zero."""
    t = _table({"c": ("CALDERA (7B)", "S", [4.0, 4.4, 3.6]), "rtn": ("CALDERA (7B)", "S", [4.2, 4.2, 4.2])})
    t["realizations"]["rtn"]["random"] = False
    assert pools({"t": t})[("caldera", "4", "S")]["variants"] == ["c"]
    assert "S" not in blocks({"t": t})  # one random variant: no block


def test_a_seed_block_is_the_additive_model_over_the_stand_ins_replicated_variants_on_their_shared_seeds():
    t = _table({"a": ("CALDERA (7B)", "S", [4.0, 4.4, 3.6, 4.1]), "b": ("QuIP# (7B)", "S", [4.5, 4.8, 4.0], None),
                "c": ("CALDERA (7B)", "S", [3.9, 4.3, 3.7], 16.0), "one": ("CALDERA (7B)", "S", [4.2]),
                "g": ("CALDERA (8B)", "G", [5.0, 5.2, 5.1])})
    blk = blocks({"t": t})
    assert set(blk) == {"S"}  # G: one replicated variant
    assert blk["S"]["variants"] == ["a", "b", "c"] and blk["S"]["seeds"] == [0, 1, 2]
    want = stats.block_variance([[4.0, 4.4, 3.6], [4.5, 4.8, 4.0], [3.9, 4.3, 3.7]])
    assert blk["S"]["var"] == pytest.approx(want["var"]) and blk["S"]["df"] == 4
    assert attach_pools({"t": t})["t"]["seed_block"]["S"]["df"] == 4
