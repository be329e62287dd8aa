"""The declared claims (caldera.experiments.report.claim_registry): each Figure 3 comparison's runs, relation and
quantifier against its text, the table and throughput sides, the checks a declaration must pass, and the module's
imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from caldera.algorithm.config import PRESETS
from caldera.experiments.report import claim_registry as D

ROOT = Path(__file__).resolve().parents[3]

#: each Figure 3 claim's text → the relation of (run a's final error, run b's) it states
STATED = {
    "16-bit CALDERA below QuIP# (+LR) in data-aware error": "a < b",
    "4-bit factors slightly above 16-bit (≤ 10% higher)": "b ≤ a ≤ 1.1 b",
    "no-LDLQ much worse (> 1.25× the 4-bit error)": "a > 1.25 b",
    "no-RHT worse for some matrices": "a > b",
}


def test_each_figure3_claim_states_its_relation_runs_and_quantifier():
    fig3 = D.entries(D.FIGURE3)
    assert {e.claim: e.relation for e in fig3} == STATED
    for e in fig3:
        a, b = e.compares
        assert a != b and {a, b} <= set(PRESETS) | {"quip#-lr"}, e.claim
        assert e.rule == ("some" if "some" in e.claim else "all"), e.claim
        assert e.source == "App. G.1 / Fig. 3"


def test_the_registry_is_claims_md_in_order_and_each_text_once():
    texts = [e.claim for e in D.REGISTRY]
    assert len(set(texts)) == len(texts)
    kinds = [e.kind for e in D.REGISTRY]
    assert kinds[:6] == [D.FIGURE3] * 4 + [D.CONVERGENCE, D.FIGURE4]  # the matrix-level claims first
    assert kinds[-3:] == [D.THROUGHPUT] * 3
    assert set(kinds) == set(D.KINDS)
    assert (D.LPLR_CLAIM, D.RHTFT_CLAIM, D.LORA_CLAIM) == (
        "LPLRFactorize iterations lower the error", "RHT fine-tuning lowers perplexity",
        "LoRA fine-tuning recovers accuracy")


def test_rows_match_by_method_label_bits_and_paper_rank():
    row = D.Row("CALDERA", "4", 256)
    assert row.matches("CALDERA (7B)", "4", 256) and row.matches("CALDERA", "4", "256")
    assert not row.matches("CALDERA (7B)", "16", 256) and not row.matches("CALDERA (7B)", "4", 128)
    assert not row.matches("QuIP# (7B, No FT)", "4", 256) and not row.matches("CALDERA", "4", "—")
    assert D.Row("QuIP#").matches("QuIP# (No FT)", "—", 0) and D.Row("QuIP#", "—").matches("QuIP#", "—", None)
    side = D.Side((D.Row("CALDERA"), D.Row("QuIP#")), "every")
    assert side.matches("QuIP#", "16", 64) and not side.matches("Uncompressed", "—", 0)


def test_the_throughput_sides_take_the_rows_their_claims_name():
    fast, slow = zip(*(e.compares for e in D.entries(D.THROUGHPUT)))
    rows = {"dense": ("Uncompressed", "—"), "c16": ("CALDERA", "16"), "c4": ("CALDERA", "4"), "q": ("QuIP#", "—")}

    def taken(side):
        return sorted(k for k, (m, b) in rows.items() if side.matches(m, b, None))

    assert [taken(s) for s in fast] == [["c16", "c4", "q"], ["q"], ["c16"]]
    assert [taken(s) for s in slow] == [["dense"], ["c16", "c4"], ["c4"]]


@pytest.mark.parametrize("bad, message", [
    (dict(rule="maybe"), "rule 'maybe'"),
    (dict(kind="figure 5"), "kind 'figure 5'"),
    (dict(rule="lower"), "counting rule"),
    (dict(relation="a ≈ b"), "compares two runs"),
])
def test_a_figure3_declaration_with_an_unknown_name_is_refused(bad, message):
    good = dict(claim="x", source="App. G.1", kind=D.FIGURE3, statistic=D.FINAL_ERROR, rule="all",
                compares=("16bit-factors", "quip#-lr"), relation="a < b")
    D.ClaimEntry(**good)
    with pytest.raises(ValueError, match=message):
        D.ClaimEntry(**{**good, **bad})


@pytest.mark.parametrize("bad, message", [
    (dict(rule="all"), "direction rule"),
    (dict(statistic="accuracy"), "statistic 'accuracy'"),
    (dict(compares=(D.Side((D.Row("CALDERA"),), "first"),)), "two sides"),
    (dict(statistic=D.PPL_RATIO_EACH), "side B takes every row"),
    (dict(table="table1_llama2_zeroshot"), "both its table and its paper model"),
])
def test_a_table_declaration_that_does_not_fit_its_statistic_is_refused(bad, message):
    good = dict(claim="x", source="Table 1", kind=D.TABLE, statistic=D.PPL_RATIO, rule="lower",
                compares=(D.Side((D.Row("CALDERA", "4", 128),), "first held"), D.Side((D.Row("QuIP#"),), "first")))
    D.ClaimEntry(**good)
    with pytest.raises(ValueError, match=message):
        D.ClaimEntry(**{**good, **bad})
    with pytest.raises(ValueError, match="side pick"):
        D.Side((D.Row("CALDERA"),), "best")


def test_the_module_imports_only_the_rules():
    """The selection, the matrix report and the claims import the declarations from here, none of them another."""
    tree = ast.parse((ROOT / "caldera/experiments/report/claim_registry.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m and m.split(".")[0] == "caldera"] == ["caldera.experiments.report.claim_rules"]


def test_a_config_item_becomes_a_table_entry_bound_to_its_block():
    from caldera.experiments.planning.settings import CLAIM_RULES, CLAIM_STATISTICS, declared_claims
    from caldera.experiments.report.claim_rules import DIRECTION_RULES

    assert tuple(D.CONFIG_STATISTICS) == CLAIM_STATISTICS and CLAIM_RULES == DIRECTION_RULES
    (item,) = declared_claims({"claims": [{
        "claim": "x", "source": "Table 7", "table": "table7_mistral", "paper_model": "mistral-7b",
        "a": {"method": "CALDERA", "rank": 128, "b_lr": 4}, "b": {"method": "QuIP#", "rank": 0, "b_lr": None},
        "statistic": "zeroshot_margin", "rule": "higher"}]})
    e = D.declared_entry(item)
    assert (e.kind, e.statistic, e.rule, e.table, e.paper_model) == (D.TABLE, D.ZS_MARGIN, "higher", "table7_mistral",
                                                                     "mistral-7b")
    assert e.compares == (D.Side((D.Row("CALDERA", "4", 128),), "first held"),
                          D.Side((D.Row("QuIP#", "—", 0),), "first held"))
