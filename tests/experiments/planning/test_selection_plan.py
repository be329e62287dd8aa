"""The plan of the configuration selection (caldera.experiments.planning.selection_plan): the stand-ins swept, the
factor precisions and CALDERA ranks they are compared at, the candidates' params and the matrix-level claim's
variants, on config/mini.yaml and hand-made selection blocks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from caldera.experiments.planning import selection_plan as P
from caldera.experiments.planning.plan import all_variants, caldera_params

ROOT = Path(__file__).resolve().parents[3]


def mini() -> dict:
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


def test_ranks_are_the_runs_caldera_ranks():
    cfg = mini()
    ranks = sorted({v.rank for v in all_variants(cfg).values()
                    if v.model == "smollm2" and v.method == "caldera" and v.b_lr == 4})
    assert P.caldera_ranks(cfg, "smollm2", 4, "all") == ranks
    assert P.caldera_ranks(cfg, "smollm2", 4, "extremes") == [ranks[0], ranks[-1]]
    with pytest.raises(ValueError, match="selection.bits"):
        P.caldera_ranks(cfg, "smollm2", 2, "all")
    plan = P.SelectionPlan.from_config(cfg)  # what the selection job gets: the ranks of each swept stand-in
    assert plan.models == P.selection_models(cfg) and plan.ranks["smollm2"][4] == [ranks[0], ranks[-1]]
    assert plan.run_params[4] == caldera_params(cfg, 4)




def test_only_the_runs_stand_ins_are_swept():
    cfg = mini()
    assert P.selection_models(cfg) == ["gemma3", "smollm2"]
    cfg["stand_ins"] = {k: "smollm2" for k in cfg["stand_ins"]}  # e.g. smoke.yaml merged over mini.yaml
    assert P.selection_models(cfg) == ["smollm2"]


def test_ranks_outside_all_and_extremes_are_refused():
    with pytest.raises(ValueError, match=re.escape("accepted: all | extremes")):
        P.caldera_ranks(mini(), "smollm2", 4, "largest")


def test_the_plan_has_ranks_and_run_params_for_every_swept_precision():
    """Every swept stand-in gets its ranks at every B_LR of ``selection.bits``, each B_LR its run params, and
    QuIP#'s params are those of the config's ``methods.quip#``."""
    cfg = mini()
    cfg["methods"]["quip#"]["params"] = {"seed": 3}
    plan = P.SelectionPlan.from_config(cfg)
    bits = P.selection_bits(cfg["selection"])
    assert sorted(bits) == [4, 16]
    assert set(plan.run_params) == set(bits)
    assert all(plan.run_params[b] == caldera_params(cfg, b) for b in bits)
    for m in plan.models:
        assert set(plan.ranks[m]) == set(bits)
        for b in bits:
            assert plan.ranks[m][b] == P.caldera_ranks(cfg, m, b, cfg["selection"]["ranks"])
    assert plan.quip_params == {"seed": 3}


def test_selection_bits_reads_one_precision_or_a_list():
    assert P.selection_bits({"bits": 4}) == [4]
    assert P.selection_bits({"bits": "16"}) == [16]
    assert P.selection_bits({"bits": [16, "4"]}) == [16, 4]  # the order of the config


def test_candidate_params_layer_the_candidate_over_base_and_the_iterations_over_both():
    sel = {"base": {"preset": "paper", "svd": "randomized", "outer_iters": 99},
           "candidates": {"a": {"svd": "exact", "update_order": "LR-first", "inner_iters": 77}, "b": {}}}
    assert P.candidate_params(sel, "a", ("3", 4)) == {
        "preset": "paper", "svd": "exact", "update_order": "LR-first", "outer_iters": 3, "inner_iters": 4}
    assert P.candidate_params(sel, "b", (1, 1)) == {"preset": "paper", "svd": "randomized", "outer_iters": 1,
                                                    "inner_iters": 1}
    assert P.candidate_params({"candidates": {"b": {"rank": 8}}}, "b", (2, 2)) == {
        "rank": 8, "outer_iters": 2, "inner_iters": 2}  # no base block
    assert sel["candidates"]["a"]["inner_iters"] == 77  # the selection block is left as it was


def test_matrix_claim_variants_are_the_caldera_and_quip_rows_and_their_summaries():
    cfg = mini()
    everything = all_variants(cfg)
    got = P.matrix_claim_variants(cfg)
    assert got == {k: v for k, v in everything.items() if v.method in ("caldera", "quip#")}
    assert {v.method for v in got.values()} == {"caldera", "quip#"}
    assert {v.method for v in everything.values()} - {"caldera", "quip#"}  # mini has rows the claim leaves out
    paths = P.matrix_claim_inputs(cfg, "res")
    assert paths == sorted(paths) and len(paths) == len(got)
    assert set(paths) == {f"res/compressed/{vid}/summary.json" for vid in got}
