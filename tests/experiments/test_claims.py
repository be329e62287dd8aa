"""Claim predicates on small hand-made result tables (no workflow run needed)."""

from __future__ import annotations

from caldera.experiments.claims import degradation


def _row(model, method, rank, b_lr, ours, paper, stand_in):
    return {"variant": f"{stand_in}-{method}-{rank}", "paper_model": model, "method": method, "paper_rank": rank,
            "rank": rank, "b_lr": b_lr, "stand_in": stand_in, "ours": {"wiki2_ppl": ours},
            "paper": {"wiki2_ppl": paper}}


def _tables(l3_quip, l3_stand="B"):
    t1 = {"rows": [_row("llama-2-7b", "Unquantized", 0, None, 10.0, 5.12, "A"),
                   _row("llama-2-7b", "QuIP#", 0, None, 40.0, 8.23, "A"),
                   _row("llama-2-7b", "CALDERA", 128, 4.0, 30.0, 6.76, "A"),
                   _row("llama-2-13b", "QuIP#", 0, None, 99.0, 6.06, "A")]}
    t2 = {"rows": [_row("llama-3-8b", "Unquantized", 0, None, 20.0, 5.54, l3_stand),
                   _row("llama-3-8b", "QuIP#", 0, None, l3_quip, 13.8, l3_stand),
                   _row("llama-3-8b", "CALDERA", 128, 4.0, 100.0, 9.21, l3_stand)]}
    return {"table1_llama2_zeroshot": t1, "table2_llama3_zeroshot": t2}


def test_degradation_holds_when_every_matched_row_degrades_more():
    out = degradation(_tables(l3_quip=100.0))  # ×5.0 vs ×4.0 and ×5.0 vs ×3.0
    assert out["verdict"] == "holds" and out["numbers"].startswith("2/2 rows")
    assert "×5.00 vs ×4.00" in out["numbers"] and "paper ×2.49 vs ×1.61" in out["numbers"]


def test_degradation_fails_when_one_row_degrades_less():
    out = degradation(_tables(l3_quip=60.0))  # ×3.0 vs ×4.0
    assert out["verdict"] == "fails" and out["numbers"].startswith("1/2 rows")


def test_degradation_not_testable_with_one_stand_in_or_one_table():
    assert degradation(_tables(100.0, l3_stand="A"))["verdict"] == "not testable at this scale"
    t = _tables(100.0)
    del t["table2_llama3_zeroshot"]
    assert degradation(t)["verdict"] == "not testable at this scale"


def test_bits_and_method_labels_as_the_tables_write_them():
    # Reference tables give B_LR as 4.0 / "16.0" and label rows "CALDERA (7B)", "Unquantized (7B)": the table
    # claims must still find their rows (they were silently dropped before).
    from caldera.experiments.claims import _bits, _ppl_ratios

    assert [_bits({"b_lr": b}) for b in (4, 4.0, "16.0", "—")] == ["4", "4", "16", "—"]
    rows = [
        {"method": "Unquantized (7B)", "paper_model": "llama-2-7b", "paper_rank": 0, "b_lr": "—", "variant": "d",
         "stand_in": "S", "ours": {"wiki2_ppl": 10.0}, "paper": {"wiki2_ppl": 5.0}},
        {"method": "CALDERA (7B)", "paper_model": "llama-2-7b", "paper_rank": 64, "b_lr": 4.0, "variant": "c",
         "stand_in": "S", "ours": {"wiki2_ppl": 30.0}, "paper": {"wiki2_ppl": 7.5}},
    ]
    stand, ratios = _ppl_ratios({"rows": rows}, "llama-2-7b")
    assert stand == "S" and ratios == {("CALDERA", 64, "4"): (3.0, 1.5)}
