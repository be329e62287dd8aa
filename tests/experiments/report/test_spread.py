"""The seed-spread report (caldera.experiments.report.spread) on the claims tests' tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.experiments.report.claim_tables import seeded, table1


def test_spread_report_lists_the_seed_spread_and_the_seeds_needed():
    from caldera.experiments.report.spread import seeds_needed, spread_report
    from caldera.experiments.report.table_claims import table_claims

    t = seeded(table1(c4=36.0, quip=40.0), {"c4-r16": (1.0, 1.02, 0.99), "quip": (1.0, 0.98, 1.01)})
    tables = {"table1_llama2_zeroshot": t}
    md, data = spread_report(tables, table_claims(tables))
    row = [r for r in data["variants"] if r["variant"] == "c4-r16"][0]
    logs = np.log([36.0 * f for f in (1.0, 1.02, 0.99)])
    assert row["wiki"]["seed_sd"] == pytest.approx(logs.std(ddof=1), rel=1e-6)
    assert row["wiki"]["per_seed"] == pytest.approx([36.0, 36.72, 35.64], rel=1e-6)
    assert "| c4-r16 |" in md and "Seeds each comparison needs" in md
    # 4-bit CALDERA: c4-r16 and the identical-seed c4-r32 (the 16-bit c16-r8 pools apart)
    cal = [p for p in data["pools"] if p["family"] == "caldera" and p["b_lr"] == "4"][0]
    assert cal["variants"] == ["c4-r16", "c4-r32"] and cal["df"] == 4
    assert cal["var"] == pytest.approx(logs.var(ddof=1) * 2 / 4, rel=1e-6)
    assert "## Pooled realization spread" in md and "| caldera | 4 | S |" in md
    comp = [c for c in data["comparisons"] if c["pair"] == ["c4-r16", "quip"]][0]
    assert comp["seeds_needed"] == seeds_needed(math.log(comp["estimate"]), comp["window_half"],
                                                comp["seed_half"] / 4.302652729911275 * math.sqrt(3))


def test_seeds_needed_grows_with_the_spread_and_stops_at_the_windows():
    from caldera.experiments.report.spread import seeds_needed

    assert seeds_needed(0.2, 0.0, 0.01) == 2
    few, many = seeds_needed(0.1, 0.02, 0.05), seeds_needed(0.1, 0.02, 0.15)
    assert few is not None and many is not None and many > few
    assert seeds_needed(0.05, 0.06, 0.0) is None  # the windows alone are wider than the effect


def test_spread_report_puts_the_zero_shot_seed_spread_beside_the_documents():
    from caldera.experiments.report.spread import spread_report

    t = table1()
    docs = list(range(10))
    per_seed = []
    for s, shift in enumerate((0.0, 0.3, -0.3)):
        per_seed.append({"ppl": t["samples"]["quip"]["ppl"],
                         "zeroshot": {"caldera_rte": {"doc_id": docs, "acc": [1.0] * (5 + s) + [0.0] * (5 - s),
                                                      "margin": [0.1 * d + shift for d in docs]}}})
    t["seed_samples"]["quip"] = per_seed
    md, data = spread_report({"table1_llama2_zeroshot": t}, [])
    z = [r for r in data["variants"] if r["variant"] == "quip"][0]["zeroshot"]
    assert z["n"] == 10 and z["margin_per_seed"] == pytest.approx([0.45, 0.75, 0.15])
    assert z["margin_seed_sd"] == pytest.approx(0.3) and z["acc_per_seed"] == pytest.approx([0.5, 0.6, 0.7])
    assert "| quip | 0/1/2 | 10 |" in md
