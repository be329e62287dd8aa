"""The stand-ins' regime selection (caldera.experiments.report.regime_report): nearest to the paper's ratio in
log-ratio, ties to the fewer bits, every score kept; against hand cases and a slow oracle."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from caldera.experiments.report import regime_report as R

LLAMA2_7B = 8.23 / 5.12  # Table 1: QuIP# 2-bit / unquantized, Wiki2


def oracle(ratios: dict[int, float], target: float) -> int:
    """Slow oracle: the candidate no other beats, comparing pairs by how many times off the target each ratio is
    (max(r/t, t/r), no logarithm), the fewer bits among equals."""
    def off(b):
        r = ratios[b]
        return max(r / target, target / r)

    best = []
    for b in ratios:
        if all(off(b) <= off(c) for c in ratios):
            best.append(b)
    return min(best)


def test_hand_case_the_135m_stand_in_at_2_bits_is_far_from_the_papers_7b():
    """2 bits loses x4.5 (the stand-in's measured regime), 3 bits x1.6: 3 bits is the paper's regime."""
    sel = R.select_q_bits({2: 4.5, 3: 1.55, 4: 1.08}, LLAMA2_7B)
    assert sel["q_bits"] == 3
    assert list(sel["scores"]) == [2, 3, 4]  # every candidate's score, in ascending bits
    assert sel["scores"][2] == pytest.approx(math.log(4.5 / LLAMA2_7B))
    assert sel["scores"][3] == pytest.approx(math.log(LLAMA2_7B / 1.55))
    assert sel["scores"][4] == pytest.approx(math.log(LLAMA2_7B / 1.08))
    assert sel["target"] == LLAMA2_7B and sel["ratios"] == {2: 4.5, 3: 1.55, 4: 1.08}


def test_nearest_in_log_ratio_not_in_plain_difference():
    """Target x2: x3.7 is 1.85 times too high, x1.05 1.90 times too low, so the log-ratio picks x3.7 (2 bits);
    the plain difference (1.7 against 0.95) would pick x1.05 (4 bits)."""
    assert R.select_q_bits({2: 3.7, 4: 1.05}, 2.0)["q_bits"] == 2


def test_equal_scores_go_to_the_fewer_bits_whatever_the_order_given():
    sel = R.select_q_bits({4: 1.0, 3: 4.0}, 2.0)  # ln 4 − ln 2 == ln 2 − ln 1
    assert sel["scores"][3] == sel["scores"][4]
    assert sel["q_bits"] == 3
    assert R.select_q_bits({3: 4.0, 4: 1.0}, 2.0)["q_bits"] == 3
    assert R.select_q_bits({2: 2.0, 3: 2.0, 4: 2.0}, 2.0)["q_bits"] == 2


def test_matches_the_slow_oracle_on_random_cases():
    rng = random.Random(7)
    for _ in range(500):
        bits = sorted(rng.sample([2, 3, 4], rng.randint(1, 3)))
        # some ratios drawn from a few values, so that ties occur
        ratios = {b: rng.choice([1.0, 1.3, 2.0, rng.uniform(1.0, 6.0)]) for b in bits}
        target = rng.choice([1.3, 1.6, 2.49, rng.uniform(1.0, 3.0)])
        assert R.select_q_bits(ratios, target)["q_bits"] == oracle(ratios, target), (ratios, target)


@pytest.mark.parametrize("ratios, target, words", [
    ({}, 1.6, "no candidate"),
    ({2: 0.0}, 1.6, "ratio must be a finite number > 0"),
    ({2: -1.0}, 1.6, "ratio must be a finite number > 0"),
    ({2: float("nan")}, 1.6, "ratio must be a finite number > 0"),
    ({2: 1.5}, float("inf"), "target must be a finite number > 0"),
])
def test_bad_ratios_are_refused_naming_what(ratios, target, words):
    with pytest.raises(ValueError, match=words):
        R.select_q_bits(ratios, target)


def test_seed_ratio_is_the_geometric_mean_of_the_per_seed_ratios():
    assert R.seed_ratio([8.0, 2.0], 2.0) == pytest.approx(2.0)  # ratios 4 and 1
    assert R.seed_ratio([6.0], 3.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no seed"):
        R.seed_ratio([], 3.0)
    with pytest.raises(ValueError, match=r"ppls\[1\]"):
        R.seed_ratio([3.0, float("inf")], 3.0)
    with pytest.raises(ValueError, match="dense_ppl"):
        R.seed_ratio([3.0], 0.0)


def _measurements():
    return {"dense": {"ppl": 20.0},
            "candidates": {2: {"ppl_by_seed": {0: 90.0, 1: 110.0}}, 3: {"ppl_by_seed": {0: 33.0, 1: 31.0}},
                           4: {"ppl_by_seed": {0: 22.0, 1: 22.5}}}}


TARGET = {"paper_model": "llama-2-7b", "corpus": "wiki2", "table": "table1_llama2_zeroshot", "quip_ppl": 8.23,
          "dense_ppl": 5.12, "ratio": LLAMA2_7B}


def test_summary_keeps_every_candidates_perplexities_ratio_and_score():
    sel = R.summarize_model(_measurements(), TARGET)
    assert sel["q_bits"] == 3 and sel["dense_ppl"] == 20.0 and sel["paper"] == TARGET
    for b, c in sel["candidates"].items():
        want = math.sqrt(math.prod(p / 20.0 for p in _measurements()["candidates"][b]["ppl_by_seed"].values()))
        assert c["ratio"] == pytest.approx(want)
        assert c["score"] == pytest.approx(abs(math.log(want) - math.log(LLAMA2_7B)))
        assert c["codebook"] == {2: "E8P", 3: "E8P-RVQ3", 4: "E8P-RVQ4"}[b]


def _result():
    sel = R.summarize_model(_measurements(), TARGET)
    return R.to_json_ready({"seeds": [0, 1], "quip_params": {}, "reconstructed": True,
                            "heldout": {"source": "lambada-books", "seed": 0, "seq_len": 512, "first_row": 16,
                                        "n_windows": 4},
                            "models": {"smollm2": sel}})


def test_the_result_survives_a_json_round_trip_and_the_markdown_lists_every_candidate():
    res = _result()
    assert json.loads(json.dumps(res)) == res
    md = R.to_markdown(res)
    assert md == R.to_markdown(json.loads(json.dumps(res)))
    assert "## smollm2 (stands in for llama-2-7b)" in md and "×1.607" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["2", "3", "4"]
    assert [("**chosen**" in r) for r in rows] == [False, True, False]
    for r, (_, c) in zip(rows, sorted(res["models"]["smollm2"]["candidates"].items())):
        assert f"{c['score']:.4f}" in r and f"×{c['ratio']:.3f}" in r
    assert "rows 16–19" in md and "lambada-books" in md


def test_selection_is_the_same_whichever_candidate_order_the_measurements_list():
    for perm in itertools.permutations([2, 3, 4]):
        m = _measurements()
        m["candidates"] = {b: m["candidates"][b] for b in perm}
        assert R.summarize_model(m, TARGET)["q_bits"] == 3


def _cands(logs_by_bits: dict[int, list[float]], target: float, dense: float = 1.0):
    """Candidates ``{b: {"ppl_by_seed", "score"}}`` from per-seed log-ratios, scored as the selection scores them."""
    out = {}
    for b, logs in logs_by_bits.items():
        ppls = {s: dense * math.exp(x) for s, x in enumerate(logs)}
        out[b] = {"ppl_by_seed": ppls, "score": R.log_distance(R.seed_ratio(list(ppls.values()), dense), target)}
    return out


def test_seed_spread_is_the_sample_sd_of_the_per_seed_log_ratio():
    s = R.seed_spread([math.exp(0.8) * 2, math.exp(0.9) * 2, math.exp(1.0) * 2], 2.0)
    assert s["n"] == 3 and s["mean"] == pytest.approx(0.9) and s["sd"] == pytest.approx(0.1)
    assert R.seed_spread([5.0], 2.0) is None
    with pytest.raises(ValueError, match="dense_ppl"):
        R.seed_spread([5.0, 6.0], -1.0)


def test_margin_hand_case_straddling_the_target_is_not_resolved_by_three_seeds():
    """ln-ratios 0.8/0.9/1.0 (2 bits) and 0.1/0.2/0.3 (3 bits) around ln target 0.5: scores 0.4 and 0.3, margin
    0.1, se sqrt(0.01/3 · 2) = 0.0816 on 4 Welch df: half-width 2.776 · 0.0816 = 0.227."""
    cands = _cands({2: [0.8, 0.9, 1.0], 3: [0.1, 0.2, 0.3]}, math.exp(0.5))
    m = R.choice_margin(cands, 3, math.exp(0.5), 1.0)
    assert m["runner_up"] == 2 and m["margin"] == pytest.approx(0.1)
    assert m["df"] == pytest.approx(4.0) and m["half_width"] == pytest.approx(2.7764451 * math.sqrt(0.02 / 3))
    assert m["resolved"] is False and m["lo"] < 0 < m["hi"]


def test_margin_matches_scipys_welch_interval_on_the_signed_distances():
    """Oracle: scipy's Welch interval of mean(a) − mean(b), a and b each candidate's per-seed signed distance to
    the target (positive away from it), on random cases on both sides of the target."""
    from scipy.stats import ttest_ind

    rng = random.Random(3)
    for _ in range(200):
        lt = rng.uniform(0.2, 1.0)
        logs = {b: [rng.gauss(mu, rng.uniform(0.01, 0.2)) for _ in range(rng.randint(2, 5))]
                for b, mu in ((2, rng.uniform(0.0, 1.6)), (3, rng.uniform(0.0, 1.6)))}
        cands = _cands(logs, math.exp(lt))
        chosen = min(cands, key=lambda b: (cands[b]["score"], b))
        u = 5 - chosen
        m = R.choice_margin(cands, chosen, math.exp(lt), 1.0)
        sign = {b: 1.0 if sum(v) / len(v) > lt else -1.0 for b, v in logs.items()}
        a = [sign[u] * (x - lt) for x in logs[u]]
        b = [sign[chosen] * (x - lt) for x in logs[chosen]]
        ci = ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
        assert m["runner_up"] == u and m["margin"] >= 0
        assert (m["lo"], m["hi"]) == pytest.approx((ci.low, ci.high), rel=1e-6, abs=1e-9)
        assert m["resolved"] == (ci.low > 0)


def test_margin_resolves_tight_seeds_and_says_nothing_from_one_seed():
    t = math.exp(0.5)
    tight = R.choice_margin(_cands({2: [1.20, 1.21, 1.19], 3: [0.40, 0.41, 0.39]}, t), 3, t, 1.0)
    assert tight["resolved"] is True and tight["lo"] > 0
    one = R.choice_margin(_cands({2: [1.2], 3: [0.4, 0.41]}, t), 3, t, 1.0)
    assert one["margin"] == pytest.approx(0.7 - 0.095) and one["half_width"] is None and one["resolved"] is None
    assert R.choice_margin(_cands({3: [0.4, 0.5]}, t), 3, t, 1.0) is None


def test_runner_up_among_equal_scores_is_the_fewer_bits():
    t = math.exp(0.5)
    cands = _cands({2: [0.2, 0.2], 3: [0.5, 0.5], 4: [0.8, 0.8]}, t)  # 2 and 4 bits both 0.3 from the target
    assert R.choice_margin(cands, 3, t, 1.0)["runner_up"] == 2


def test_the_markdown_names_its_command_commit_spread_and_margin():
    res = _result()
    res["made_by"] = {"command": "python -m caldera.experiments.jobs.regime --configfile config/mini.yaml",
                      "commit": "abc1234"}
    md = R.to_markdown(res)
    assert ("Made by `python -m caldera.experiments.jobs.regime --configfile config/mini.yaml` at commit "
            "`abc1234`.") in md
    sel = res["models"]["smollm2"]
    spread = sel["candidates"]["2"]["seed_spread"]
    assert f"| {100 * spread['sd']:.1f} % |" in md
    m = sel["margin"]
    assert m["runner_up"] == 4 and f"Margin over 4 bits: {m['margin']:.4f} [{m['lo']:+.4f}, {m['hi']:+.4f}]" in md
    assert ("the seeds resolve the choice" in md) == m["resolved"]


# ------------------------------------------------------------------ the margin with the held-out windows counted


def _windowed(D: dict[int, list[list[float]]], tokens: list[float], dense: list[float]):
    """Candidates and the dense windows from per-(seed, window) summed-loss excesses ``D[b][s][w]`` over the dense
    model: ``window_nll_by_seed`` and ``ppl_by_seed`` consistent with each other, scored as the selection scores."""
    T = sum(tokens)
    dense_ppl = math.exp(sum(dense) / T)
    cands = {}
    for b, rows in D.items():
        wins = {s: [d + x for d, x in zip(dense, row)] for s, row in enumerate(rows)}
        ppls = {s: math.exp(sum(w) / T) for s, w in wins.items()}
        cands[b] = {"ppl_by_seed": ppls, "window_nll_by_seed": wins}
    return cands, {"window_nll": list(dense), "window_tokens": list(tokens)}, dense_ppl


def _score(cands, dense_ppl, target):
    for c in cands.values():
        c["score"] = R.log_distance(R.seed_ratio(list(c["ppl_by_seed"].values()), dense_ppl), target)
    return cands


def test_windowed_margin_matches_scipys_t_intervals_combined_in_quadrature():
    """Oracle: scipy's one-sample t interval of the per-seed signed margins (seed part) and of the per-window
    signed excesses per token (window part, equal-length windows), half-widths added in quadrature."""
    from scipy.stats import ttest_1samp

    rng = random.Random(11)
    for _ in range(100):
        S, W, n_tok = rng.randint(2, 5), rng.randint(2, 12), 511.0
        lt = rng.uniform(0.2, 1.0)
        mu = {2: rng.uniform(0.0, 1.6), 3: rng.uniform(0.0, 1.6)}
        hard = [rng.gauss(0, 0.3) for _ in range(W)]  # each window's shared difficulty
        D = {b: [[n_tok * (mu[b] + rng.gauss(0, 0.1) + hard[w] * mu[b] + rng.gauss(0, 0.05)) for w in range(W)]
                 for _ in range(S)] for b in mu}
        dense = [n_tok * rng.uniform(3.0, 4.5) for _ in range(W)]
        cands, dw, dense_ppl = _windowed(D, [n_tok] * W, dense)
        _score(cands, dense_ppl, math.exp(lt))
        chosen = min(cands, key=lambda b: (cands[b]["score"], b))
        u = 5 - chosen
        m = R.choice_margin(cands, chosen, math.exp(lt), dense_ppl, dw)
        assert m["construction"] == "paired seeds and windows" and m["runner_up"] == u
        per = {b: [sum(row) / (n_tok * W) for row in D[b]] for b in D}
        sign = {b: 1.0 if sum(per[b]) / S >= lt else -1.0 for b in D}
        seed_z = [sign[u] * (a - lt) - sign[chosen] * (c - lt) for a, c in zip(per[u], per[chosen])]
        win_z = [sign[u] * sum(D[u][s][w] for s in range(S)) / S / n_tok
                 - sign[chosen] * sum(D[chosen][s][w] for s in range(S)) / S / n_tok for w in range(W)]
        assert m["margin"] == pytest.approx(sum(seed_z) / S, abs=1e-9)
        ci_s = ttest_1samp(seed_z, 0.0).confidence_interval(0.95)
        ci_w = ttest_1samp(win_z, 0.0).confidence_interval(0.95)
        half = math.hypot((ci_s.high - ci_s.low) / 2, (ci_w.high - ci_w.low) / 2)
        assert m["seed_half"] == pytest.approx((ci_s.high - ci_s.low) / 2, rel=1e-6)
        assert m["window_half"] == pytest.approx((ci_w.high - ci_w.low) / 2, rel=1e-6)
        assert (m["lo"], m["hi"]) == pytest.approx((m["margin"] - half, m["margin"] + half), rel=1e-6, abs=1e-9)
        assert m["resolved"] == (m["margin"] - half > 0)


def test_windows_that_differ_widen_a_margin_the_seeds_alone_would_call_resolved():
    """Every seed identical (no realization spread) but the held-out windows disagree: the seeds-only interval has
    zero width, the windows' does not, and straddling the target the shared difficulty adds up."""
    n, W, lt = 511.0, 6, 0.5
    hard = [-0.6, -0.3, 0.0, 0.1, 0.3, 0.5]
    D = {2: [[n * (0.8 + h) for h in hard]] * 3, 3: [[n * (0.3 + h) for h in hard]] * 3}  # both move with w
    cands, dw, dense_ppl = _windowed(D, [n] * W, [n * 4.0] * W)
    _score(cands, dense_ppl, math.exp(lt))
    seeds_only = R.choice_margin(cands, 3, math.exp(lt), dense_ppl)
    assert seeds_only["half_width"] == 0.0 and seeds_only["resolved"] is True
    m = R.choice_margin(cands, 3, math.exp(lt), dense_ppl, dw)
    assert m["margin"] == pytest.approx(0.1) and m["seed_half"] == 0.0
    sd = statistics_sd([2 * h for h in hard])  # opposite sides: (0.8 + h − lt) − (lt − 0.3 − h) = 0.1 + 2h
    assert m["window_half"] == pytest.approx(2.5705818 * sd / math.sqrt(W), rel=1e-6)
    assert m["resolved"] is False and m["lo"] < 0 < m["hi"]
    # on the same side of the target, the shared difficulty cancels: 4 bits beats 2 bits at any window
    D = {2: [[n * (1.2 + h) for h in hard]] * 3, 4: [[n * (0.7 + h) for h in hard]] * 3}
    cands, dw, dense_ppl = _windowed(D, [n] * W, [n * 4.0] * W)
    _score(cands, dense_ppl, math.exp(lt))
    m = R.choice_margin(cands, 4, math.exp(lt), dense_ppl, dw)
    assert m["window_half"] == pytest.approx(0.0, abs=1e-12) and m["resolved"] is True


def statistics_sd(xs):
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def test_window_losses_of_other_seeds_or_other_windows_fall_back_or_are_refused():
    n, W = 511.0, 4
    D = {2: [[n * 0.9] * W, [n * 1.0] * W], 3: [[n * 0.2] * W, [n * 0.25] * W]}
    cands, dw, dense_ppl = _windowed(D, [n] * W, [n * 4.0] * W)
    _score(cands, dense_ppl, math.exp(0.5))
    first = next(iter(cands[2]["window_nll_by_seed"].values()))
    cands[2]["window_nll_by_seed"] = {7: first}  # other seeds
    assert R.choice_margin(cands, 3, math.exp(0.5), dense_ppl, dw)["construction"] == "seeds (Welch), windows fixed"
    cands, dw, dense_ppl = _windowed(D, [n] * W, [n * 4.0] * W)
    _score(cands, dense_ppl, math.exp(0.5))
    with pytest.raises(ValueError, match="do not match the dense model's"):
        R.choice_margin(cands, 3, math.exp(0.5), dense_ppl, {"window_nll": [n * 4.0] * 3, "window_tokens": [n] * 3})


def test_summary_with_window_losses_says_seeds_and_windows_and_survives_json():
    n, W = 511.0, 5
    rng = random.Random(5)
    D = {b: [[n * (mu + rng.gauss(0, 0.05)) for _ in range(W)] for _ in range(3)] for b, mu in ((2, 0.9), (3, 0.2))}
    cands, dw, dense_ppl = _windowed(D, [n] * W, [n * 4.0] * W)
    meas = {"dense": {"ppl": dense_ppl, **dw}, "candidates": cands}
    sel = R.summarize_model(meas, {**TARGET, "ratio": math.exp(0.5)})
    assert sel["margin"]["construction"] == "paired seeds and windows" and sel["dense_windows"] == dw
    res = R.to_json_ready({"seeds": [0, 1, 2], "quip_params": {}, "reconstructed": True,
                           "heldout": {"source": "lambada-books", "seed": 0, "seq_len": 512, "first_row": 16,
                                       "n_windows": W}, "models": {"smollm2": sel}})
    back = json.loads(json.dumps(res))
    md = R.to_markdown(back)
    assert md == R.to_markdown(res)
    assert "the seeds (paired: the candidates share them) and the held-out windows" in md
    assert "(95 %, seeds and windows" in md and "half-widths: windows" in md
    # recomputed from the JSON (string keys) the margin is the same
    again = R.choice_margin(back["models"]["smollm2"]["candidates"], 3, math.exp(0.5), dense_ppl,
                            back["models"]["smollm2"]["dense_windows"])
    assert again["lo"] == pytest.approx(sel["margin"]["lo"]) and again["hi"] == pytest.approx(sel["margin"]["hi"])
