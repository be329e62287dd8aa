"""The configuration selection as a report (caldera.experiments.report.selection_report): the App. G.1 claims under
the selected configuration, the notes on failing claims, the matrix-level claim and selection.md, on hand-made
results."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from caldera.experiments.planning import selection_plan as P
from caldera.experiments.planning.plan import all_variants
from caldera.experiments.planning.settings import RunContext
from caldera.experiments.report import selection_report as R
from caldera.experiments.report.claim_registry import LPLR_CLAIM

ROOT = Path(__file__).resolve().parents[3]


def mini() -> dict:
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


def summaries_for(cfg, caldera_err, quip_err):
    """Compression summaries of every CALDERA and QuIP# variant: two matrices of one layer."""
    out = {}
    for v in all_variants(cfg).values():
        if v.method == "quip#":
            errs = quip_err
        elif v.method == "caldera":
            errs = caldera_err(v)
        else:
            continue
        out[v.id] = {"errors": {f"model.layers.0.{m}": {"error": e} for m, e in errs.items()}}
    return out


def _matrix_claims(cfg, summaries):
    """The claims as rule claims computes them: the variants and labels made when the plan is made."""
    return R.matrix_level_claims(P.matrix_claim_variants(cfg), RunContext.from_config(cfg).labels(), summaries)


def test_matrix_level_claim_counts_and_verdicts():
    cfg = mini()
    quip = {"self_attn.k_proj": 0.2, "mlp.up_proj": 0.4}

    def below(v):
        return {k: 0.8 * e for k, e in quip.items()}

    def one_above_on_smollm2_r8(v):
        if v.model == "smollm2" and v.rank == 8 and v.b_lr == 4:
            return {"self_attn.k_proj": 0.25, "mlp.up_proj": 0.3}
        return below(v)

    claims = _matrix_claims(cfg, summaries_for(cfg, below, quip))
    assert [c["verdict"] for c in claims] == ["holds", "holds"]
    assert "2/2 below, geo-mean ratio 0.800" in claims[0]["numbers"]
    claims = _matrix_claims(cfg, summaries_for(cfg, one_above_on_smollm2_r8, quip))
    by = {("Gemma" in c["claim"]): c for c in claims}
    assert by[True]["verdict"] == "holds" and by[False]["verdict"] == "fails"
    ratio = math.sqrt(1.25 * 0.75)
    assert f"k=8 4-bit: 1/2 below, geo-mean ratio {ratio:.3f} (worst 1.250)" in by[False]["numbers"]
    assert set(P.matrix_claim_inputs(cfg, "results/mini")) == {
        f"results/mini/compressed/{vid}/summary.json" for vid in summaries_for(cfg, below, quip)}
    with pytest.raises(ValueError, match="no compression summary"):
        _matrix_claims(cfg, {})


def test_matrix_level_claim_reads_the_runs_summaries(tmp_path):
    cfg = mini()
    quip = {"self_attn.k_proj": 0.2}
    summaries = summaries_for(cfg, lambda v: {"self_attn.k_proj": 0.1 if v.model == "gemma3" else 0.3}, quip)
    for vid, summ in summaries.items():
        (tmp_path / "compressed" / vid).mkdir(parents=True)
        (tmp_path / "compressed" / vid / "summary.json").write_text(json.dumps(summ))
    claims = R.matrix_level_claims_from_run(cfg, str(tmp_path))
    assert [c["verdict"] for c in claims] == ["holds", "fails"]  # gemma3 first (sorted stand-in keys)
    assert "0/1 below, geo-mean ratio 1.500" in claims[1]["numbers"]


def pair(matrix, pr, e16, e4, noldlq, qlr, lplr):
    return {"matrix": matrix, "paper_rank": pr, "lplr": lplr,
            "errors": {"16bit-factors": e16, "4bit-factors": e4, "4bit-no-ldlq": noldlq, "quip#-lr": qlr}}


def test_ablation_claims_and_the_notes_on_failing_claims():
    pairs = [pair("k_proj", 64, 0.070, 0.075, 0.100, 0.071, [[0.34, 0.33], [0.2, 0.2]]),
             pair("up_proj", 64, 0.170, 0.180, 0.240, 0.175, [[0.7, 0.69]])]
    claims = {c["claim"]: c for c in R.ablation_claims(pairs, {"update_order": "Q-first"})}
    assert claims["16-bit CALDERA below QuIP# (+LR) in data-aware error"]["verdict"] == "holds"
    assert claims["4-bit factors slightly above 16-bit (≤ 10% higher)"]["verdict"] == "holds"
    nl = claims["no-LDLQ much worse (> 1.25× the 4-bit error)"]  # 0.100/0.075 = 1.33 but 0.240/0.180 = 1.33
    assert nl["verdict"] == "holds" and nl["numbers"].startswith("2/2")
    lp = claims[LPLR_CLAIM]
    assert lp["verdict"] == "fails" and lp["numbers"].startswith("2/3")  # the second LPLR call did not lower it
    pairs[1]["errors"]["4bit-no-ldlq"] = 0.2
    again = {c["claim"]: c for c in R.ablation_claims(pairs, {})}
    assert again["no-LDLQ much worse (> 1.25× the 4-bit error)"]["verdict"] == "fails"

    old = [{"claim": "no-LDLQ much worse (> 1.25× the 4-bit error)", "source": "x", "verdict": "fails",
            "numbers": "2/6"},
           {"claim": "4-bit factors slightly above 16-bit (≤ 10% higher)", "source": "x", "verdict": "fails",
            "numbers": "4/6"},
           {"claim": "no-RHT worse for some matrices", "source": "x", "verdict": "holds", "numbers": "6/6"}]
    sel = {"selected": {"name": "Q-first+update"}, "ablations": {"claims": list(again.values())}}
    notes = R.configuration_notes(old, sel)
    assert "fails under both configurations (Q-first+update: 1/2" in notes[0]["numbers"]
    assert "holds under the selected configuration" in notes[1]["numbers"]
    assert notes[2] == old[2] and notes[0]["verdict"] == "fails"




def test_ablation_claims_skip_what_the_selection_did_not_rerun_and_name_the_choice_per_precision():
    pairs = [pair("k_proj", 64, 0.070, 0.075, 0.100, 0.071, [])]
    choice = {"B_LR 4": {"update_order": "Q-first"}, "B_LR 16": {"hessian_update": True, "best_tracking": "x"}}
    claims = R.ablation_claims(pairs, choice)
    assert not any("no-RHT" in c["claim"] for c in claims)  # no pair has a no-RHT run
    assert "with B_LR 16: best_tracking=x, hessian_update=True; B_LR 4: update_order=Q-first;" in claims[0]["numbers"]
    # no LPLR call: nothing to count, so not measured (never "fails" on nothing)
    assert claims[-1]["claim"] == LPLR_CLAIM and claims[-1]["verdict"] == "not measured in this run"
    for p in pairs:
        p["errors"]["4bit-no-rht"] = 0.09
    assert any("no-RHT" in c["claim"] for c in R.ablation_claims(pairs, {}))
    assert all(c["verdict"] == "not measured in this run" and c["numbers"].startswith("0/0")
               for c in R.ablation_claims([], {}))


def test_notes_name_each_precisions_selection_and_leave_other_claims_alone():
    claims = [{"claim": "c1", "verdict": "fails", "numbers": "1/2"},
              {"claim": "c2", "verdict": "holds", "numbers": "2/2"},
              {"claim": "c3", "verdict": "fails", "numbers": "0/2"}]
    sel = {"by_bits": {"4": {"selected": {"name": "Q-first"}}, "16": {"selected": {"name": "LR-first+update"}}},
           "ablations": {"claims": [{"claim": "c1", "verdict": "holds", "numbers": "2/2 again"},
                                    {"claim": "c2", "verdict": "fails", "numbers": "0/2 again"}]}}
    notes = R.configuration_notes(claims, sel)
    assert notes[0]["numbers"] == ("1/2 — holds under the selected configuration "
                                   "(B_LR 16: LR-first+update; B_LR 4: Q-first: 2/2 again)")
    assert notes[1] == claims[1]  # holds in the run: no note, whatever the re-run says
    assert notes[2] == claims[2]  # not re-run
    assert claims[0]["numbers"] == "1/2"  # the run's claims are not modified


def test_geo_mean_is_the_nth_root_of_the_product():
    for xs in ([2.0], [1.0, 4.0], [0.5, 0.8, 1.3, 2.0]):
        assert R.geo_mean(xs) == pytest.approx(math.prod(xs) ** (1 / len(xs)), rel=1e-12)
    assert math.isnan(R.geo_mean([]))


def variant(vid, model, method, rank=0, b_lr=None):
    return SimpleNamespace(id=vid, model=model, method=method, rank=rank, b_lr=b_lr)


def errors(**by_matrix):
    return {"errors": {m: {"error": e} for m, e in by_matrix.items()}}


def test_matrix_level_claim_on_hand_made_variants():
    """Ratios over the matrices both variants compressed, CALDERA variants in (B_LR, rank) order, and a stand-in
    without QuIP# has no claim."""
    variants = {v.id: v for v in (
        variant("c16", "m", "caldera", 8, 16), variant("c4-32", "m", "caldera", 32, 4),
        variant("c4-8", "m", "caldera", 8, 4), variant("q", "m", "quip#"), variant("lone", "z", "caldera", 8, 4))}
    summaries = {"q": errors(a=0.2, b=0.4, c=1.0), "c4-8": errors(a=0.1, b=0.5), "c4-32": errors(a=0.1, b=0.2),
                 "c16": errors(a=0.05, b=0.1, d=9.0), "lone": errors(a=0.1)}
    [claim] = R.matrix_level_claims(variants, {"m": "Model M", "z": "Model Z"}, summaries)
    assert claim["claim"].endswith("[Model M]") and claim["verdict"] == "fails"
    parts = claim["numbers"].split(": ", 1)[1].split("; ")
    assert [p.split(":")[0] for p in parts] == ["k=8 4-bit", "k=32 4-bit", "k=8 16-bit"]
    assert parts[0] == f"k=8 4-bit: 1/2 below, geo-mean ratio {math.sqrt(0.5 * 1.25):.3f} (worst 1.250)"
    assert parts[2] == "k=8 16-bit: 2/2 below, geo-mean ratio 0.250 (worst 0.250)"  # d: not compressed by QuIP#
    summaries["c4-8"] = errors(a=0.1, b=0.3)
    assert R.matrix_level_claims(variants, {"m": "M"}, summaries)[0]["verdict"] == "holds"
    summaries["c16"] = errors(d=0.1)
    with pytest.raises(ValueError, match="share no compressed matrix"):
        R.matrix_level_claims(variants, {"m": "M"}, summaries)


def section(sel, scores, chosen, tied, in_run=True, records=(), long_summary=None):
    summary = {c: {"score": s, "models": {m: {"ranks": {"8": {"geo_ratio": s * f, "below_quip": 1, "n": 2}}}
                                          for m, f in (("b", 1.0), ("a", 2.0))}}
               for c, s in scores.items()}
    return {"selection": sel, "summary": summary, "records": list(records), "long_summary": long_summary or {},
            "selected": {"name": chosen, "tied": tied, "in_run": in_run, "params": {"update_order": chosen, "x": 1}}}


def test_the_page_has_a_section_per_precision_the_long_iterations_and_the_ablations():
    long = {"iters": [15, 10], "layers": 1, "matrices": ["k_proj"]}
    sel = {"layers": {"a": [1], "b": [2]}, "matrices": ["k_proj"], "tie_tolerance": 0.01, "iters": [2, 2],
           "bits": [4, 16], "long_iters": long}
    recs = [{"candidate": "x", "model": "a", "layer": 0, "matrix": mat, "rank": 32, "iters": it, "ratio": r}
            for mat, it, r in (("k", [15, 10], 0.5), ("g", [15, 10], 0.8), ("k", [2, 2], 0.9), ("g", [2, 2], 0.4),
                               ("v", [2, 2], 0.01))]
    res = {"selection": sel, "by_bits": {
        "4": section(sel, {"x": 0.5, "y": 0.502}, "x", ["x", "y"], records=recs, long_summary={"x": {}}),
        "16": section({**sel, "long_iters": None}, {"x": 0.9, "y": 0.7}, "y", ["y"], in_run=False)},
           "ablations": {"choice": {"update_order": "x"},
                         "claims": [{"claim": "c1", "verdict": "holds", "numbers": "1/1"}]}}
    md = R.to_markdown(res)
    s4, s16 = md[md.index("## 4-bit factors"):md.index("## 16-bit factors")], md[md.index("## 16-bit factors"):]
    assert "| **x** (selected) | 0.5000 | 1.000 · 1 of 2 | 0.500 · 1 of 2 |" in s4  # stand-ins sorted: a, b
    assert "| y | 0.5020 |" in s4 and "Selected: **x** (tied with y; listed first)" in s4
    assert "scores within 1.0% of it are tied" in md
    assert "| **y** (selected) | 0.7000 |" in s16 and "tied with" not in s16
    assert "does not use it" in s16 and "does not use it" not in s4
    assert "`{update_order: x, x: 1}`." in s4 and "`{update_order: y, x: 1}` — " in s16  # each its own params
    # the T 15/10 table: geo-mean over the long records, and over the same matrices at the budget's T
    assert f"| x | {math.sqrt(0.4):.3f} · {math.sqrt(0.36):.3f} | — |" in s4
    assert "T 15/10" not in s16.split("## Figure 3")[0]
    assert "## Figure 3 comparisons under the selected configuration" in md and "| c1 | **holds** | 1/1 |" in md


def test_a_some_claim_holds_when_one_pair_satisfies_it_and_an_all_claim_needs_every_pair():
    """The no-RHT claim is stated for "some matrices": under the selected configuration it holds with one of two
    pairs worse without RHT, as the run's own check decides it; the 4-bit claim ("all") fails on one bad pair."""
    pairs = [pair("k_proj", 64, 0.070, 0.075, 0.100, 0.071, []), pair("up_proj", 64, 0.170, 0.200, 0.260, 0.175, [])]
    pairs[0]["errors"]["4bit-no-rht"] = 0.090  # worse than 4-bit (0.075)
    pairs[1]["errors"]["4bit-no-rht"] = 0.150  # better than 4-bit (0.200)
    claims = {c["claim"]: c for c in R.ablation_claims(pairs, {})}
    rht = claims["no-RHT worse for some matrices"]
    assert rht["verdict"] == "holds" and rht["numbers"].startswith("1/2")
    four = claims["4-bit factors slightly above 16-bit (≤ 10% higher)"]  # 0.200 / 0.170 = 1.18 on up_proj
    assert four["verdict"] == "fails" and four["numbers"].startswith("1/2")
