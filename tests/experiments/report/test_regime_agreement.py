"""The claims in both regimes (caldera.experiments.report.regime_agreement): matched by source and text without a
run's own numbers, a 2-bit regime keeps its run's verdict, differing verdicts listed, counts per regime."""

from __future__ import annotations

import json

import pytest

from caldera.experiments.report import regime_agreement as A


def _c(claim, source, verdict, *pairs):
    return {"claim": claim, "source": source, "verdict": verdict, "numbers": "",
            "intervals": [{"pair": list(p)} for p in pairs]}


TWO_BIT = [
    _c("4-bit CALDERA beats QuIP# in Wiki2 perplexity (2.20 vs 2.00 bits)", "table1_llama2_zeroshot [llama-2-7b]",
       "inconclusive", ("smollm2-caldera-r16-lr4", "smollm2-quipsharp")),
    _c("4-bit CALDERA beats QuIP# in Wiki2 perplexity (2.20 vs 2.00 bits)", "table2_llama3_zeroshot [llama-3-8b]",
       "inconclusive", ("gemma3-caldera-r24-lr4", "gemma3-quipsharp")),
    _c("highest-rank 4-bit CALDERA has the lowest Wiki2 perplexity", "table7_mistral [mistral-7b]", "holds",
       ("smollm2-caldera-r32-lr4", "smollm2-quipsharp")),
    _c("LoRA fine-tuning recovers accuracy", "Table 5", "inconclusive", ("smollm2-caldera-r16-lr4+lora",)),
    _c("CALDERA's error below QuIP#'s for every matrix [SmolLM2-135M (fp32)]", "§5 / App. G.1", "holds"),
    _c("no-RHT worse for some matrices", "App. G.1 / Fig. 3", "holds"),
    _c("CALDERA's error below QuIP#'s for every matrix [Gemma-3 270M (fp32)]", "§5 / App. G.1", "holds"),
]
REGIME = [
    _c("4-bit CALDERA beats QuIP# in Wiki2 perplexity (3.20 vs 3.00 bits)", "table1_llama2_zeroshot [llama-2-7b]",
       "holds", ("smollm2-caldera-r16-lr4", "smollm2-quipsharp")),
    _c("highest-rank 4-bit CALDERA has the lowest Wiki2 perplexity", "table7_mistral [mistral-7b]", "holds",
       ("smollm2-caldera-r32-lr4", "smollm2-quipsharp")),
    _c("CALDERA's error below QuIP#'s for every matrix [SmolLM2-135M (fp32), Q at 3 bits]", "§5 / App. G.1",
       "fails"),
    _c("a claim only the regime run makes", "Fig. 3", "holds"),
    _c("no-RHT worse for some matrices", "App. G.1 / Fig. 3", "fails"),  # 2-bit presets: never a regime verdict
    _c("LoRA fine-tuning recovers accuracy", "Table 5", "not measured in this run"),
]
BITS = {"smollm2": 3, "gemma3": 2}


def test_claims_match_without_their_numbers_and_labels():
    assert A.claim_key(TWO_BIT[0]) == A.claim_key(REGIME[0])
    assert A.claim_key(TWO_BIT[4]) == A.claim_key(REGIME[2])
    assert A.claim_key(TWO_BIT[0]) != A.claim_key(TWO_BIT[1])  # the source's paper model still tells them apart
    assert A.claim_key({"source": "table1_llama2_zeroshot [llama-2-13b]", "claim": "x (1 vs 2)"}) == \
        ("table1_llama2_zeroshot [llama-2-13b]", "x")
    assert A.claim_key({"source": "table1_llama2_zeroshot, table7_mistral (extra_methods)",
                        "claim": "y [Gemma-3 270M (fp32)]"}) == \
        ("table1_llama2_zeroshot, table7_mistral", "y [Gemma-3 270M")


def test_each_claim_takes_its_regime_verdict_or_keeps_its_own_at_a_2_bit_regime():
    res = A.agreement(TWO_BIT, REGIME, BITS)
    rows = res["rows"]
    assert [(r["two_bit"], r["regime"], r["bits"], r["agree"]) for r in rows] == [
        ("inconclusive", "holds", [3], False),        # SmolLM2: decided again at 3 bits
        ("inconclusive", "inconclusive", [2], True),  # Gemma-3's regime is 2 bits: the same run, the same verdict
        ("holds", "holds", [3], True),
        ("inconclusive", A.NOT_RUN, [], None),        # the regime run has no Table 5: not measured there
        ("holds", "fails", [3], False),               # no interval: matched by text, bits of the regime stand-in
        ("holds", A.FIXED_Q, [], None),                # the App. G.1 presets fix Q at 2 bits in both runs
        ("holds", A.NOT_RUN, [], None),                # another stand-in's label: not the regime run's claim
    ]
    assert [r["source"] for r in res["differ"]] == ["table1_llama2_zeroshot [llama-2-7b]", "§5 / App. G.1"]
    assert res["counts"] == {"2 bits": {"holds": 4, "inconclusive": 3},
                             "regime": {"holds": 2, "fails": 1, "inconclusive": 1}}
    assert res["regime_only"] == [{"source": "Fig. 3", "claim": "a claim only the regime run makes",
                                   "verdict": "holds"}]


def test_every_stand_in_at_2_bits_makes_the_regimes_agree_everywhere():
    res = A.agreement(TWO_BIT, [], {"smollm2": 2, "gemma3": 2})
    assert res["differ"] == []
    assert [r["regime"] for r in res["rows"]][:4] == [r["verdict"] for r in TWO_BIT][:4]
    assert res["rows"][4]["regime"] == A.NOT_RUN  # no interval names its stand-in: not claimed to be the same
    assert res["rows"][5]["regime"] == A.FIXED_Q


def test_two_regime_claims_with_one_key_are_refused():
    with pytest.raises(ValueError, match="share the key"):
        A.agreement(TWO_BIT, [REGIME[0], {**REGIME[0], "claim": REGIME[0]["claim"] + " (other numbers)"}], BITS)


def test_written_page_lists_the_differing_claims_first(tmp_path):
    two, reg = tmp_path / "two", tmp_path / "reg"
    two.mkdir(), reg.mkdir()
    (two / "claims.json").write_text(json.dumps(TWO_BIT))
    (two / "regime.json").write_text(json.dumps({"models": {"smollm2": {"q_bits": 3}, "gemma3": {"q_bits": 2}}}))
    (reg / "claims.json").write_text(json.dumps(REGIME))
    assert A.main(["--two-bit", str(two), "--regime", str(reg)]) == 0
    md = (reg / "regime_agreement.md").read_text()
    differ = md.split("## Verdicts that differ between the regimes")[1].split("## Every claim")[0]
    assert differ.count("\n| ") == 3  # header + 2 claims
    assert "gemma3 2 bits, smollm2 3 bits" in md and "- Regime: 2 holds, 1 fails, 1 inconclusive (2 not run" in md
    assert "1 with Q fixed at 2 bits" in md
    assert json.loads((reg / "regime_agreement.json").read_text())["regime_bits"] == {"smollm2": 3, "gemma3": 2}
    (reg / "claims.json").unlink()
    with pytest.raises(FileNotFoundError, match="claims.json is missing"):
        A.write_agreement(two, reg)


def test_the_fixed_q_claims_are_the_registrys_figure_claims():
    keys = A.fixed_q_keys()
    assert ("App. G.1 / Fig. 3", "no-LDLQ much worse") in keys
    assert ("App. E.2 / G.1", "Hessian update speeds convergence") in keys
    assert ("App. G.1 / Fig. 4", "LPLRFactorize iterations lower the error") in keys
    assert not any(src.startswith("Tables") for src, _ in keys)
