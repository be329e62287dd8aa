"""verdicts.md counts each distinct claim once, says what every verdict means, shows the deciding interval and links
to the detail; the forest plot draws every perplexity and accuracy interval, the unbounded ones included."""

import json
import re
from pathlib import Path

import pytest

from caldera.experiments.report import verdict_page as V
from caldera.experiments.report.verdicts import NEEDS_SEEDS, VERDICTS

ROOT = Path(__file__).resolve().parents[3]
BEATS = "4-bit CALDERA beats QuIP# in Wiki2 perplexity (best rows, ≤ 2.4 bits)"


def ratio(a, b, est, lo, hi, **kw):
    return {"kind": "ppl ratio", "pair": [a, b], "estimate": est, "lo": lo, "hi": hi, "window_lo": est * 0.97,
            "window_hi": est * 1.03, **kw}


def claim(text, source, verdict, intervals=(), **kw):
    return {"claim": text, "source": source, "verdict": verdict, "numbers": "n", "sdd": "s",
            "intervals": list(intervals), **kw}


Q = "smollm2-quipsharp"
CLAIMS = [
    claim("no-RHT worse for some matrices", "App. G.1 / Fig. 3", "holds"),
    claim(BEATS, "table1 [llama-2-13b]", "holds", [ratio("smollm2-caldera-r24-lr4", Q, 0.81, 0.67, 0.97,
                                                         paper_ratio=0.89)]),
    claim(BEATS, "table1 [llama-2-70b]", "holds", [ratio("smollm2-caldera-r16-lr4", Q, 0.82, 0.70, 0.96)]),
    claim(BEATS, "table7 [mistral-7b]", "holds", [ratio("smollm2-caldera-r32-lr4", Q, 0.76, 0.64, 0.90)]),
    claim(BEATS, "table2 [llama-3-8b]", "inconclusive",
          [ratio("gemma3-caldera-r40-lr4", "gemma3-quipsharp", 0.9, 0.7, 1.1)]),
]
MODELS = {"smollm2": "SmolLM2-135M (Q4_1)", "gemma3": "Gemma-3 270M (Q4_K_M)"}


def test_claims_of_one_text_and_stand_in_count_once():
    groups = V.group_claims(CLAIMS, list(MODELS))
    assert [len(g["entries"]) for g in groups] == [1, 3, 1]  # SmolLM2's three rows one claim; Gemma-3's its own
    n = V.counts(CLAIMS, list(MODELS))
    assert n["holds"] == {"distinct": 2, "entries": 4}
    assert n["inconclusive"] == {"distinct": 1, "entries": 1}
    assert sum(x["distinct"] for x in n.values()) == len(groups)


def test_differing_verdicts_of_one_claim_are_said_not_hidden():
    mixed = CLAIMS[:3] + [claim(BEATS, "table1 [llama-2-7b]", "inconclusive",
                                [ratio("smollm2-caldera-r32-lr4", "smollm2-quipsharp-lr", 0.95, 0.8, 1.12)])]
    (g,) = [g for g in V.group_claims(mixed, list(MODELS)) if g["claim"] == BEATS]
    assert g["verdict"] == V.MIXED
    page = V.render_page(mixed, MODELS)
    row = next(line for line in page.splitlines() if BEATS in line)
    assert "holds in table1 [llama-2-13b, llama-2-70b]; inconclusive in table1 [llama-2-7b]" in row
    n = V.counts(mixed, list(MODELS))
    assert n[V.MIXED]["distinct"] == 1 and n["holds"]["distinct"] == 1  # the matrix-level claim only


def test_claims_without_variant_ids_group_by_source_not_by_text_alone():
    same_text = [claim("t", "Table 6", "holds"), claim("t", "Table 5", "fails")]
    assert len(V.group_claims(same_text)) == 2


def test_a_model_key_that_prefixes_another_is_not_confused():
    cs = [claim("c", "a", "holds", [ratio("llama-2-7b-caldera", "llama-2-7b-quipsharp", 0.9, 0.8, 0.99)]),
          claim("c", "b", "holds", [ratio("llama-2-70b-caldera", "llama-2-70b-quipsharp", 0.9, 0.8, 0.99)])]
    assert len(V.group_claims(cs, ["llama-2-7b", "llama-2-70b"])) == 2


def test_every_verdict_has_a_meaning():
    assert set(VERDICTS) | {V.MIXED} <= set(V.MEANINGS)


def test_the_deciding_interval_is_the_one_nearest_to_contradicting_the_claim():
    ivs = [ratio("a", "b", 0.8, 0.7, 0.9), ratio("a", "c", 0.95, 0.85, 1.05), ratio("a", "d", 0.9, 0.8, None)]
    assert V.deciding_interval(ivs)["pair"] == ["a", "d"]  # an unbounded upper bound is the weakest
    assert V.deciding_interval(ivs[:2])["pair"] == ["a", "c"]
    zs = [{"kind": "margin", "pair": ["a", "b"], "estimate": 0.1, "lo": -0.2, "hi": 0.4},
          {"kind": "accuracy difference", "pair": ["a", "b"], "estimate": 0.05, "lo": 0.01, "hi": 0.09}]
    assert V.deciding_interval(zs)["kind"] == "margin"  # the zero-shot claims decide on the margin
    higher = [{"kind": "log difference", "estimate": 0.3, "lo": 0.1, "hi": 0.5},
              {"kind": "log difference", "estimate": 0.2, "lo": -0.1, "hi": 0.5}]
    assert V.deciding_interval(higher)["lo"] == -0.1


def test_number_cells():
    assert V.interval_text(ratio("a", "b", 0.8123, 0.7, 0.9)) == "×0.812 [0.700, 0.900]"
    acc = {"kind": "accuracy difference", "estimate": 0.05, "lo": -0.1, "hi": 0.2}
    assert V.interval_text(acc) == "+5.0 [-10.0, +20.0] points"
    open_iv = ratio("a", "b", 1.0, None, None)
    assert "windows only [0.970, 1.030]" in V.interval_text(open_iv)
    assert V.interval_text(None) == "—"


def test_page_rows_link_to_each_entry_and_show_the_weakest_interval():
    page = V.render_page(CLAIMS, MODELS)
    row = next(line for line in page.splitlines() if BEATS in line and "SmolLM2" in line)
    assert "[#2](claims.md#claim-2), [#3](claims.md#claim-3), [#4](claims.md#claim-4)" in row
    assert "×0.810 [0.670, 0.970] (weakest of 3)" in row  # the highest upper bound of the three
    assert "| holds | 2 | 4 |" in page


def test_claims_md_carries_the_anchors_the_page_links_to():
    from caldera.experiments.report.claims import claims_table

    lines = claims_table(CLAIMS)
    assert f'<a id="{V.anchor(3)}"></a>' in lines[2 + 2]


def test_forest_draws_every_ppl_and_accuracy_interval_unbounded_ones_included():
    cs = CLAIMS + [claim("open", "t", NEEDS_SEEDS, [ratio("smollm2-x", "smollm2-y", 0.9, None, None)]),
                   claim("zs", "t", "inconclusive", [
                       {"kind": "margin", "pair": ["a", "b"], "estimate": 0.1, "lo": -0.2, "hi": 0.4},
                       {"kind": "accuracy difference", "pair": ["a", "b"], "estimate": 0.05, "lo": -0.1, "hi": 0.2,
                        "paper_difference": 0.02}])]
    rows = V.forest_rows(cs)
    n_ivs = sum(len(c["intervals"]) for c in cs)
    assert len(rows) == n_ivs
    (open_row,) = [r for r in rows if not r["bounded"]]
    assert open_row["lo"] == pytest.approx(0.9 * 0.97) and "(windows only)" in open_row["label"]
    acc = next(r for r in rows if r["panel"] == "accuracy difference")
    assert acc["estimate"] == pytest.approx(5.0) and acc["paper"] == pytest.approx(2.0) and acc["null"] == 0.0
    first = next(r for r in rows if r["entry"] == 2)
    assert first["paper"] == 0.89 and first["null"] == 1.0


def test_write_verdict_page_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    src = tmp_path / "claims.json"
    src.write_text(json.dumps(CLAIMS))
    text = V.write_verdict_page(str(src), str(tmp_path / "verdicts.md"), str(tmp_path / "f.png"),
                                str(tmp_path / "f.pdf"), MODELS)
    assert (tmp_path / "f.png").stat().st_size > 0 and b"CreationDate" not in (tmp_path / "f.pdf").read_bytes()
    assert "[f.png](f.png)" in text
    assert len(text.splitlines()) < 40  # one screen


def test_an_unreadable_claims_file_names_the_file_and_the_rule(tmp_path):
    bad = tmp_path / "claims.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match=r"claims.json: not a claims list .* rule `claims`"):
        V.write_verdict_page(str(bad), str(tmp_path / "v.md"), str(tmp_path / "f.png"), str(tmp_path / "f.pdf"))


def test_committed_claims_render_one_row_per_distinct_claim():
    claims = json.loads((ROOT / "paper_tables/generated/claims.json").read_text())
    page = V.render_page(claims, {"smollm2": "SmolLM2-135M", "gemma3": "Gemma-3 270M"})
    rows = [line for line in page.splitlines() if re.match(r"\| \d+ \|", line)]
    groups = V.group_claims(claims, ["smollm2", "gemma3"])
    assert len(rows) == len(groups) < len(claims)
    assert sum(len(g["entries"]) for g in groups) == len(claims)


def test_sources_of_one_table_are_gathered_and_short_numbers_cut():
    assert V.sources_text(["table1 [llama-2-13b]", "table1 [llama-2-7b]", "table7 [mistral-7b]", "Table 6"]) == (
        "table1 [llama-2-13b, llama-2-7b]; table7 [mistral-7b]; Table 6")
    c = {"numbers": "0/6 matrix×rank pairs; k_proj@64: 0.07 vs 0.07 — fails under both"}
    assert V.short_numbers(c) == "0/6 matrix×rank pairs"
    assert V.short_numbers({"numbers": "x" * 100}, width=10) == "x" * 9 + "…"


def test_a_huge_ratio_stays_readable():
    assert V.interval_text(ratio("a", "b", 2822.1, 0.542, 14684247.2)) == "×2.82e+03 [0.542, 1.47e+07]"


def test_a_run_with_regime_rows_shows_each_claims_regime_verdict_and_the_counts():
    reg = [dict(c) for c in CLAIMS]
    reg[0]["regime"] = {"verdict": "not run in the regime"}
    for c in reg[1:4]:  # SmolLM2's three rows: two hold in the regime, one is inconclusive there
        c["regime"] = {"verdict": "holds", "q_bits": [3], "intervals": []}
    reg[3]["regime"] = {"verdict": "inconclusive", "q_bits": [3], "intervals": []}
    reg[4]["regime"] = {"verdict": "inconclusive", "q_bits": [2], "intervals": []}
    page = V.render_page(reg, MODELS)
    assert "| verdict | in the regime |" in page and "**In the stand-in's regime**" in page
    row = next(line for line in page.splitlines() if BEATS in line and "SmolLM2" in line)
    assert "holds (2); inconclusive (1)" in row  # the entries' regime verdicts, none hidden
    gem = next(line for line in page.splitlines() if BEATS in line and "Gemma" in line)
    assert "| **inconclusive** | **inconclusive** |" in gem
    assert "in the regime" not in V.render_page(CLAIMS, MODELS)  # a run without regime rows: no column
