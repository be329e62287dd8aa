"""caldera.experiments.planning.zeroshot_design: documents for 80 % power from measured spreads; chance readings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from caldera.experiments.planning.zeroshot_design import (
    chance_of,
    chance_reading,
    columns,
    documents_for_power,
    pair_design,
    paired_documents,
)


@pytest.mark.parametrize("sd, effect", [(0.5, 0.1), (0.4, 0.05), (0.7, 0.2)])
def test_the_document_count_reaches_80_percent_power_and_one_fewer_does_not(sd, effect):
    """The normal-approximation power at n is at least 80 % and below it at n − 1; a simulation of paired
    differences decided by the t interval agrees within its own sampling error."""
    n = documents_for_power(sd, effect)

    def power(k):
        return sps.norm.cdf(math.sqrt(k) * effect / sd - sps.norm.ppf(0.975))

    assert power(n) >= 0.8 > power(n - 1)
    rng = np.random.default_rng(0)
    d = rng.normal(effect, sd, size=(4000, n))
    half = sps.t.ppf(0.975, n - 1) * d.std(axis=1, ddof=1) / math.sqrt(n)
    share = float(np.mean(d.mean(axis=1) - half > 0))
    assert share == pytest.approx(0.8, abs=0.04)


def test_no_effect_or_more_documents_than_the_task_has_is_no_design():
    assert documents_for_power(0.5, None) is None and documents_for_power(0.5, 0.0) is None
    assert documents_for_power(0.5, 0.01, most=1000) is None  # needs ~19,600
    assert documents_for_power(0.5, -0.1) == documents_for_power(0.5, 0.1)  # the direction does not matter


def test_chance_reading_is_the_wilson_interval_against_chance():
    r = chance_reading([1] * 30 + [0] * 10, 0.5)
    p, n, z = 0.75, 40, sps.norm.ppf(0.975)
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (
        1 + z * z / n)
    assert (r["lo"], r["hi"]) == pytest.approx((centre - half, centre + half))
    assert r["reading"] == "above chance"
    assert chance_reading([1] * 22 + [0] * 18, 0.5)["reading"] == "not above chance"
    assert chance_reading([1] * 18 + [0] * 22, 0.25)["reading"] == "above chance"
    with pytest.raises(ValueError, match="no documents"):
        chance_reading([], 0.5)


def test_documents_pair_by_id_whatever_their_order():
    a = {"doc_id": [1, 2, 3, 4], "acc": [1, 0, 1, 1]}
    b = {"doc_id": [4, 3, 9, 1], "acc": [0, 1, 1, 1]}
    assert paired_documents(a, b, "acc").tolist() == [0, 0, 1]  # docs 1, 3, 4; doc 2 and 9 unmatched


def test_pair_design_pools_the_tasks_and_refuses_counts_beyond_a_task():
    rng = np.random.default_rng(1)
    docs = list(range(200))

    def model(p):
        return {"doc_id": docs, "acc": (rng.random(200) < p).astype(float).tolist(),
                "margin": rng.normal(0, 1, 200).tolist()}

    a = {"caldera_piqa": model(0.7), "caldera_rte": model(0.6)}
    b = {"caldera_piqa": model(0.6), "caldera_rte": model(0.6)}
    out = pair_design(a, b, 0.05, {"caldera_piqa": 1838, "caldera_rte": 277})
    assert out["pooled"]["n"] == 400
    sd = out["tasks"]["caldera_rte"]["sd_acc"]
    assert out["tasks"]["caldera_rte"]["need_acc"] is None or out["tasks"]["caldera_rte"]["need_acc"] <= 277
    assert documents_for_power(sd, 0.05) > 277 and out["tasks"]["caldera_rte"]["need_acc"] is None
    assert out["pooled"]["need_acc"] == documents_for_power(out["pooled"]["sd_acc"], 0.05)


def test_chance_is_one_over_each_documents_choices():
    rows = [{"doc_id": 0, "ll": [-1.0, -2.0], "acc": 1.0, "margin": 1.0},
            {"doc_id": 1, "ll": [-1.0, -2.0, -3.0, -4.0], "acc": 0.0, "margin": -0.5}]
    assert chance_of(rows) == pytest.approx((1 / 2 + 1 / 4) / 2)
    assert columns(rows) == {"doc_id": [0, 1], "acc": [1.0, 0.0], "margin": [1.0, -0.5]}
    with pytest.raises(ValueError, match="no documents"):
        chance_of([])
