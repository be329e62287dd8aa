"""caldera.experiments.report.finetune_claims: the "LoRA recovers accuracy" claim is decided by paired intervals on
the realization each row fine-tuned, never by point estimates alone."""

from __future__ import annotations

from caldera.experiments.report.finetune_claims import lora_claim


def _row(ft_correct, base_correct, dense_correct, ft_nll=None, base_nll=None, dense_nll=None):
    docs = list(range(len(ft_correct)))
    e = {"status": "measured", "row": "r", "paper": {"method": "CALDERA"}}
    for task in ("rte",):
        e[task] = {"best": {"doc_id": docs, "correct": ft_correct}}
        e[f"{task}_no_ft"] = {"doc_id": docs, "correct": base_correct}
        e[f"{task}_dense"] = {"doc_id": docs, "correct": dense_correct}
    if ft_nll is not None:
        t = [10] * len(ft_nll)
        e["wiki"] = {"best": {"window_nll": ft_nll, "window_tokens": t}}
        e["wiki_no_ft"] = {"window_nll": base_nll, "window_tokens": t}
        e["wiki_dense"] = {"window_nll": dense_nll, "window_tokens": t}
    return {"rows": [e]}


def test_positive_point_estimate_inside_the_interval_is_not_holds():
    # fine-tuned better on 3 of 8 documents, worse on 2: mean +12.5 points, but the paired interval contains 0
    ft = [1, 1, 1, 0, 0, 1, 0, 1]
    base = [0, 0, 0, 1, 1, 1, 0, 1]
    c = lora_claim(_row(ft, base, base))
    assert c["verdict"] == "inconclusive", c
    # a large, consistent gain on many documents: the interval excludes 0 -> holds
    n = 60
    c = lora_claim(_row([1] * n, [0] * (n - 5) + [1] * 5, [1] * n))
    assert c["verdict"] == "holds" and "on the realization each row fine-tuned" in c["numbers"], c
    # the same gain but significantly below the dense model -> fails (accuracy not recovered)
    c = lora_claim(_row([1] * 30 + [0] * 30, [0] * 60, [1] * 60))
    assert c["verdict"] == "fails", c
    # a stand-in row shared by two paper rows is compared once
    t = _row([1] * 60, [0] * 55 + [1] * 5, [1] * 60)
    t["rows"].append(t["rows"][0])
    assert lora_claim(t)["numbers"].count("rte vs no FT") == 1


def test_perplexity_direction():
    base = [30.0 + i for i in range(8)]
    ft = [b - 5.0 for b in base]  # lower NLL on every window: ratio < 1 -> a gain
    c = lora_claim(_row([1] * 60, [0] * 55 + [1] * 5, [1] * 60, ft, base, ft))
    assert c["verdict"] == "holds"
    worse = [b + 5.0 for b in base]
    c = lora_claim(_row([1] * 60, [0] * 55 + [1] * 5, [1] * 60, worse, base, base))
    assert c["verdict"] == "fails"
    # better than the un-fine-tuned model but above the dense perplexity: shown, not a failure (as in the paper)
    dense = [b - 20.0 for b in base]
    c = lora_claim(_row([1] * 60, [0] * 55 + [1] * 5, [1] * 60, ft, base, dense))
    assert c["verdict"] == "holds" and "not decided on" in c["numbers"]


def test_loftq_rows_get_their_own_claim():
    """The LoftQ (ours) row is judged against its own un-fine-tuned model, in its own claim: a LoftQ failure
    never decides CALDERA's verdict, and a table without a measured LoftQ row has no LoftQ claim."""
    from caldera.experiments.report.finetune_claims import lora_claims

    cal = _row([1] * 60, [0] * 55 + [1] * 5, [1] * 60)["rows"][0]  # CALDERA: holds
    lq = dict(_row([0] * 60, [1] * 60, [1] * 60)["rows"][0], row="q", paper={"method": "LoftQ"},
              status="measured with this project's loftq method")  # LoftQ: worse than its no-FT model
    claims = lora_claims({"rows": [cal, lq]})
    assert [c["verdict"] for c in claims] == ["holds", "fails"]
    assert "LoftQ" in claims[1]["claim"] and "LoftQ" not in claims[0]["claim"]
    assert "q rte vs no FT" in claims[1]["numbers"] and "q rte" not in claims[0]["numbers"]
    assert len(lora_claims({"rows": [cal]})) == 1


def test_each_comparison_prints_the_papers_own_effect_from_the_zero_shot_tables():
    """Table 5's LLaMa-2 7B CALDERA k=128 B_LR=4 row: RTE 83.75 after LoRA, against Table 1's 59.9 for the same
    row without it (+23.9 points) and 63.2 for the unquantized model (+20.5); the RHT-fine-tuned row of Table 3
    with the same rank is not its baseline."""
    from caldera.experiments.report.finetune_claims import lora_claims

    t5 = _row([1, 1, 0, 1], [0, 1, 0, 1], [1, 1, 0, 0])
    t5["rows"][0]["paper"] = {"method": "CALDERA", "model": "llama-2-7b", "rank": 128, "b_lr": 4.0, "rht_ft": False,
                              "rte_acc": 83.75, "wino_acc": 85.32, "wiki2_ppl": 5.84}

    def zrow(method, rank, b_lr, rte, rht=False):
        return {"paper_model": "llama-2-7b", "method": method, "paper_rank": rank, "b_lr": b_lr, "rht_ft": rht,
                "paper": {"rte_acc": rte, "wino_acc": 60.0, "wiki2_ppl": 6.76}}

    tables = {"table1_llama2_zeroshot": {"rows": [zrow("Unquantized (7B)", 0, "—", 63.2),
                                                  zrow("CALDERA (7B)", 128, 4, 59.9)]},
              "table3_llama2_rhtft": {"rows": [zrow("CALDERA", 128, 4, 70.0, rht=True)]}}
    numbers = lora_claims(t5, tables)[0]["numbers"]
    assert "r rte vs no FT: acc +25.0" in numbers and "(the paper's: +23.9 points)" in numbers
    assert f"(the paper's: {83.75 - 63.2:+.1f} points)" in numbers  # vs dense
    assert "+13.8 points" not in numbers  # 83.75 − 70.0: the RHT-fine-tuned row is another model
    assert "the paper's" not in lora_claims(t5)[0]["numbers"]  # no tables: no paper effect claimed
