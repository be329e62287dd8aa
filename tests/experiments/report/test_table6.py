"""Table 6 (caldera.experiments.report.table6): the paired comparison of interleaved rounds, the table beside the
paper's numbers, and the three ordering claims."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import statistics
from pathlib import Path

import pytest
import yaml

from caldera.experiments.planning.throughput_rows import PROTOCOLS
from caldera.experiments.report.claim_registry import Row, Side
from caldera.experiments.report.table6 import (
    ThroughputTablePlan,
    claim_pairs,
    compare_rounds,
    throughput_claims,
    write_throughput_table,
)
from tests.experiments.report.claim_tables import throughput_rounds, throughput_table

ROOT = Path(__file__).resolve().parents[3]


def _config(name):
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


# ---------------------------------------------------------------------------------------- compare_rounds


def _drifting(ratio: float, rounds: int = 12, drift: float = 0.7, noise: float = 0.02):
    """A and B timed in the same rounds: a machine factor per round from ×0.5 to ×2 moves both alike, A is
    ``ratio`` × B plus a little noise of its own."""
    b = throughput_rounds(10.0, noise, rounds, drift, seed=1)
    a = [x * ratio * math.exp(e) for x, e in zip(b, random.Random(2).choices([-noise, noise], k=rounds))]
    return a, b


def test_the_pairing_by_round_cancels_what_moves_the_whole_round():
    """A is ×1.10 faster in every round while the machine's speed moves ×4 between rounds: the paired interval
    decides. The same figures with B's rounds shuffled (what an unpaired analysis sees) do not: the verdict
    comes from the per-round pairing."""
    a, b = _drifting(1.10)
    c = compare_rounds(a, b)
    assert c["direction"] == 1 and 1.05 < c["lo"] < c["ratio"] < c["hi"] < 1.15
    assert max(b) / min(b) > 2.5  # the ranges of the rounds overlap: no range rule could order them
    shuffled = b[6:] + b[:6]
    assert compare_rounds(a, shuffled)["direction"] == 0
    assert compare_rounds(b, a)["direction"] == -1  # and A slower than B the other way round


def test_the_interval_is_student_t_over_the_rounds():
    """Per-round log ratios 0.1, 0.2, 0.3: mean 0.2, sd 0.1, half-width t(0.975, 2) · 0.1 / √3 = 0.248 — the
    interval contains 0. A normal quantile (1.96) would give 0.113 and decide."""
    b = [10.0, 12.0, 8.0]
    a = [x * math.exp(d) for x, d in zip(b, (0.1, 0.2, 0.3))]
    c = compare_rounds(a, b)
    half = 4.302652729911275 * 0.1 / math.sqrt(3)
    assert c["half_width"] == pytest.approx(half) and c["resolvable"] == pytest.approx(math.exp(half))
    assert (c["lo"], c["ratio"], c["hi"]) == pytest.approx((math.exp(0.2 - half), math.exp(0.2), math.exp(0.2 + half)))
    assert c["direction"] == 0 and c["n"] == 3
    # the same spread over 12 rounds: the interval narrows (t(0.975, 11) · sd / √12) and decides
    b12, d12 = [10.0] * 12, [0.1, 0.2, 0.3] * 4
    c12 = compare_rounds([x * math.exp(d) for x, d in zip(b12, d12)], b12)
    assert c12["direction"] == 1 and c12["half_width"] == pytest.approx(
        2.200985160082949 * statistics.stdev(d12) / math.sqrt(12))


def test_the_estimate_is_the_mean_per_round_log_ratio_not_a_ratio_of_medians():
    """A is ×3 in half of the rounds and ×0.7 in the other half: the medians' ratio is ×1.85, the per-round
    ratios straddle 1 and the interval says so."""
    b = [10.0] * 8
    a = [30.0, 7.0] * 4
    c = compare_rounds(a, b)
    assert statistics.median(a) / statistics.median(b) == pytest.approx(1.85)
    assert c["ratio"] == pytest.approx(math.exp((math.log(3.0) + math.log(0.7)) / 2))
    assert c["direction"] == 0 and c["lo"] < 1 < c["hi"]


@pytest.mark.parametrize("a, b, words", [
    ([1.0, 2.0, 3.0], [1.0, 2.0], "3 rounds of A and 2 of B"),
    ([1.0], [2.0], "at least 2 rounds"),
    ([1.0, 0.0], [1.0, 1.0], "A's tokens/s must be positive and finite"),
    ([1.0, 1.0], [1.0, float("nan")], "B's tokens/s must be positive and finite"),
])
def test_compare_rounds_refuses_what_it_cannot_pair(a, b, words):
    with pytest.raises(ValueError, match=words):
        compare_rounds(a, b)


# ---------------------------------------------------------------------------------------- the table


def _job_file(speeds: dict[str, float], rounds: int = 6) -> dict:
    """A throughput job's result for SmolLM2: every variant of ``speeds`` timed in the same ``rounds``."""
    variants = {}
    for i, (v, s) in enumerate(speeds.items()):
        tps = throughput_rounds(s, 0.01, rounds, 0.2, seed=i)
        r = {"tokens_per_s": tps, "median": statistics.median(tps), "min": min(tps), "max": max(tps)}
        variants[v] = {"variant": v, "model": "smollm2", "method": "dense" if v.endswith("dense") else "caldera",
                       "load_s": 1.0, "model_tensor_mb": 100.0 + s, **{p: dict(r) for p in PROTOCOLS}}
    return {"model": "smollm2", "variants": variants, "device": "cpu", "torch_threads": 1, "peak_rss_mb": 2000.0,
            "peak_cuda_mb": None, "rounds_s": 10.0, "wall_s": 20.0, "orders": [], "settings": {}}


def test_table_has_the_papers_numbers_beside_ours(tmp_path):
    cfg = _config("mini")
    speeds = {"smollm2-dense": 10.0, "smollm2-caldera-r8-lr16": 6.0, "smollm2-caldera-r8-lr4": 5.0,
              "smollm2-caldera-r16-lr4": 5.0, "smollm2-caldera-r32-lr4": 4.5, "smollm2-quipsharp": 7.0}
    (tmp_path / "throughput").mkdir()
    job = _job_file(speeds)
    (tmp_path / "throughput" / "smollm2.json").write_text(json.dumps(job))
    outs = [tmp_path / f"t6.{e}" for e in ("md", "tex", "csv", "json")]
    tab = write_throughput_table(str(tmp_path), ThroughputTablePlan.from_config(cfg), *map(str, outs))
    md = outs[0].read_text()
    r8 = job["variants"]["smollm2-caldera-r8-lr16"]["single_token"]
    assert f"| 61.68 | {r8['median']:.2f} [{r8['min']:.2f}, {r8['max']:.2f}] |" in md
    head = md.splitlines()[2]
    assert head.count("|") == 11 and "| paper × dense | ours × dense, paired [95 %] |" in head  # 10 columns
    assert "| OOM |" in md  # 70B uncompressed: the paper's OOM, ours measured on the stand-in
    assert f"{cfg['throughput']['rounds']} randomized interleaved rounds" in md and "smollm2: 2000 MB" in md
    rows = list(csv.DictReader(io.StringIO(outs[2].read_text())))
    assert len(rows) == 10 and rows[0]["tok_per_s_paper"] == "31.75"
    assert float(rows[0]["single_token_median"]) == pytest.approx(job["variants"]["smollm2-dense"]["single_token"]
                                                                  ["median"])
    # each row's own model-tensor figure (not another variant's)
    assert [float(r["model_tensor_mb"]) for r in rows[:2]] == [110.0, 106.0]
    # × dense: the paper's ratio to its own model's uncompressed row, ours paired over the rounds
    assert float(rows[1]["paper_vs_dense"]) == pytest.approx(61.68 / 31.75) and rows[0]["paper_vs_dense"] == ""
    assert rows[7]["paper_vs_dense"] == ""  # 70B: the paper's dense row is OOM
    want = compare_rounds(job["variants"]["smollm2-caldera-r8-lr16"]["single_token"]["tokens_per_s"],
                          job["variants"]["smollm2-dense"]["single_token"]["tokens_per_s"])
    assert float(rows[1]["vs_dense"]) == pytest.approx(want["ratio"]) and want["ratio"] == pytest.approx(0.6, rel=0.1)
    assert set(json.loads(outs[3].read_text())["measured"]) == set(speeds)
    assert len(tab["rows"]) == 10


def test_a_variant_its_job_could_not_load_is_printed_oom_and_left_out_of_the_claims(tmp_path):
    cfg = _config("mini")
    speeds = {"smollm2-dense": 10.0, "smollm2-caldera-r8-lr16": 6.0, "smollm2-quipsharp": 7.0}
    job = _job_file(speeds)
    job["variants"]["smollm2-dense"] = {"variant": "smollm2-dense", "model": "smollm2", "method": "dense",
                                        "oom": "out of memory loading it beside 2 loaded variant(s)"}
    (tmp_path / "throughput").mkdir()
    (tmp_path / "throughput" / "smollm2.json").write_text(json.dumps(job))
    outs = [tmp_path / f"t6.{e}" for e in ("md", "tex", "csv", "json")]
    tab = write_throughput_table(str(tmp_path), ThroughputTablePlan.from_config(cfg), *map(str, outs))
    assert "smollm2-dense" not in tab["measured"] and "smollm2-dense" in tab["out_of_memory"]
    dense_row = outs[0].read_text().splitlines()[4]
    assert dense_row.count("| OOM |") == 1 and "| 31.75 | OOM | OOM |" in dense_row
    assert throughput_claims(tab)[0]["verdict"] == "not testable at this scale"  # no dense side


# ---------------------------------------------------------------------------------------- the claims


def _verdicts(tab) -> list[str]:
    return [c["verdict"] for c in throughput_claims(tab)]


FAST = {"d": (10, 0.02), "c16": (14, 0.02), "c4a": (12, 0.02), "c4b": (12.5, 0.02), "q": (16, 0.02)}


def test_claims_hold_on_rounds_whose_ranges_overlap():
    """The machine's speed moves by up to ×e^±0.5 from round to round, more than the effects (×1.2–1.6): the
    ranges of the slowest and the fastest variant overlap, yet within each round the order is plain, and the paired
    intervals decide."""
    tab = throughput_table(FAST, drift=0.5)
    m = tab["measured"]
    assert max(m["d"]["single_token"]["tokens_per_s"]) > min(m["q"]["single_token"]["tokens_per_s"])
    assert _verdicts(tab) == ["holds", "holds", "holds"]


def test_claims_are_inconclusive_when_the_rounds_disagree_and_say_what_they_could_resolve():
    """Each variant's own noise ±60 % per round: nothing is decided, and each claim states the ratio its pairs
    could have resolved next to the paper's ratios."""
    noisy = {v: (s, 0.6) for v, (s, _) in FAST.items()}
    claims = throughput_claims(throughput_table(noisy))
    assert [c["verdict"] for c in claims] == ["inconclusive"] * 3
    assert "undecided, resolves ×" in claims[0]["numbers"]
    assert "paper ×1.94 (llama-2-7b)" in claims[0]["numbers"]  # c16 / d: 61.68 / 31.75
    assert "the ratio each pair's interval resolves: 10 paired rounds" in claims[0]["sdd"]
    assert "the paper's ratios: ×1.45–2.76" in claims[0]["sdd"]


def test_claims_fail_when_the_ordering_is_reversed():
    """Compressed slower than dense in every round; one resolved reversal is enough to fail."""
    claims = throughput_claims(throughput_table({**FAST, "c16": (5, 0.02)}))
    assert [c["verdict"] for c in claims] == ["fails", "holds", "fails"]
    assert "c16 / d: ×0.50 [" in claims[0]["numbers"] and "(slower; paper ×1.94 (llama-2-7b))" in claims[0]["numbers"]


def test_claims_are_decided_on_the_papers_protocol():
    """The verdict is the single-token forward's (the paper's protocol); the KV-cache one is only reported."""
    claims = throughput_claims(throughput_table(FAST, {**FAST, "c16": (5, 0.02)}))
    assert claims[0]["verdict"] == "holds" and "generate, KV cache: **fails**" in claims[0]["numbers"]


def test_claims_not_testable_without_a_side():
    tab = throughput_table({k: FAST[k] for k in ("d", "c4a", "q")})  # no 16-bit variant measured
    assert _verdicts(tab) == ["holds", "holds", "not testable at this scale"]


CALDERA, QUIP, DENSE = (Side((Row(m),), "every") for m in ("CALDERA", "QuIP#", "Uncompressed"))


def test_pairs_stay_within_a_paper_model_and_carry_its_ratio():
    """A 70B CALDERA row is not compared with the 7B dense row (a claim orders rows of one model); a pair that two
    paper models both give is listed once, with each model's ratio."""
    tab = throughput_table(FAST)
    tab["rows"] += [{"paper_method": "CALDERA", "b_lr": 4, "variant": "c4a", "paper_model": "llama-2-70b",
                     "paper_tok_per_s": 5.33},
                    {"paper_method": "QuIP#", "b_lr": None, "variant": "q", "paper_model": "llama-2-70b",
                     "paper_tok_per_s": 18.18},
                    {"paper_method": "Uncompressed", "b_lr": None, "variant": "d", "paper_model": "llama-2-70b",
                     "paper_tok_per_s": None}]
    dense = claim_pairs(tab, CALDERA, DENSE)
    assert [(p["a"], p["b"]) for p in dense] == [("c16", "d"), ("c4a", "d"), ("c4b", "d")]
    assert dense[1]["paper"] == [("llama-2-7b", pytest.approx(46.29 / 31.75))]  # the 70B dense row is OOM
    q = claim_pairs(tab, QUIP, CALDERA)
    qa = next(p for p in q if p["b"] == "c4a")
    assert qa["paper"] == [("llama-2-7b", pytest.approx(87.74 / 46.29)), ("llama-2-70b", pytest.approx(18.18 / 5.33))]
    # a 70B row of its own stand-in variant is compared with that model's rows only
    tab["rows"][-3]["variant"] = "c4a70"
    tab["measured"]["c4a70"] = tab["measured"]["c4a"]
    dense = claim_pairs(tab, CALDERA, DENSE)
    assert ("c4a70", "d") in [(p["a"], p["b"]) for p in dense]
    assert next(p for p in dense if p["a"] == "c4a70")["paper"] == []


def test_a_pair_timed_in_different_jobs_is_refused():
    tab = throughput_table(FAST)
    tab["measured"]["q"] = {**tab["measured"]["q"], "model": "other"}
    with pytest.raises(ValueError, match="timed in different jobs"):
        throughput_claims(tab)
