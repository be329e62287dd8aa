"""The configuration selection (caldera.experiments.jobs.selection): argmin of the calibration error, its inputs
and the run check, on hand-made results."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from caldera.experiments.jobs import selection as S
from caldera.experiments.planning import selection_plan as P
from caldera.experiments.planning.plan import all_variants, caldera_params
from caldera.experiments.report import selection_report as R

ROOT = Path(__file__).resolve().parents[3]


def mini() -> dict:
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


def rec(cand, model, layer, matrix, rank, error, quip, seconds, iters=(2, 2)):
    return {"model": model, "layer": layer, "matrix": matrix, "candidate": cand, "rank": rank,
            "iters": list(iters), "error": error, "error_reg": error, "seconds": seconds, "ratio": error / quip}


def hand_made_records():
    """Three candidates on two models; "mid" has the lowest errors but is neither first nor last."""
    out = []
    quip = {("a", "k_proj"): 0.30, ("a", "up_proj"): 0.40, ("b", "k_proj"): 0.20, ("b", "up_proj"): 0.50}
    scale = {"first": 0.95, "mid": 0.85, "last": 1.02}
    secs = {"first": 1.0, "mid": 3.0, "last": 0.5}
    for cand in ("first", "mid", "last"):
        for (model, m), q in quip.items():
            for rank in (8, 32):
                out.append(rec(cand, model, 5, m, rank, q * scale[cand] * (1.0 if rank == 8 else 0.9), q,
                               secs[cand]))
    return out


def test_summary_and_selection_pick_the_argmin_of_the_calibration_error():
    summary = S.summarize(hand_made_records(), (2, 2))
    assert list(summary) == ["first", "mid", "last"]
    # geo-mean ratio: scale x sqrt(1.0 * 0.9) per model, the same on both models
    for cand, sc in {"first": 0.95, "mid": 0.85, "last": 1.02}.items():
        assert summary[cand]["score"] == pytest.approx(sc * math.sqrt(0.9), rel=1e-12)
        assert summary[cand]["models"]["a"]["ranks"]["8"]["geo_ratio"] == pytest.approx(sc)
    assert summary["last"]["models"]["a"]["below_quip"] == 2  # rank 32: 1.02 * 0.9 < 1; rank 8: 1.02 > 1
    assert summary["mid"]["models"]["b"]["below_quip"] == summary["mid"]["models"]["b"]["n"] == 4
    chosen, tied = S.select(summary, 0.0)
    assert (chosen, tied) == ("mid", ["mid"])  # the slowest candidate, but the lowest error


def test_ties_within_the_tolerance_go_to_the_candidate_listed_first():
    """No clock reading decides a tie (a rerun must select the same): the first tied candidate in the order of
    ``selection.candidates`` wins, whatever its score within the tolerance."""
    summary = {"b": {"score": 0.8625}, "a": {"score": 0.860}, "c": {"score": 0.95}}
    assert S.select(summary, 0.0) == ("a", ["a"])
    assert S.select(summary, 0.005) == ("b", ["b", "a"])  # c is outside the tolerance
    assert S.select(dict(reversed(summary.items())), 0.005) == ("a", ["a", "b"])
    with pytest.raises(ValueError, match="tie_tolerance"):
        S.select(summary, 1.5)
    with pytest.raises(ValueError, match="candidate"):
        S.select({}, 0.0)


def test_clock_readings_leave_the_records_for_the_timing_file():
    recs = hand_made_records()
    slim, clock = S.split_timing(recs)
    assert len(slim) == len(clock) == len(recs)
    assert all("seconds" not in r and "cpu_s" not in r for r in slim)
    assert [c["seconds"] for c in clock] == [r["seconds"] for r in recs]
    assert S.summarize(slim, (2, 2)) == S.summarize(recs, (2, 2))  # the scores never read a clock


def test_long_iterations_are_summarized_apart_and_never_selected():
    recs = hand_made_records() + [rec("mid", "a", 5, "k_proj", 32, 0.01, 0.3, 50.0, iters=(15, 10))]
    summary = S.summarize(recs, (2, 2))
    assert summary["mid"]["models"]["a"]["n"] == 4  # the T 15/10 record is not mixed in
    assert set(S.summarize(recs, (15, 10))) == {"mid"}


def test_candidate_params_and_the_run_check():
    cfg = mini()
    sel = cfg["selection"]
    p = P.candidate_params(sel, "Q-first+update", sel["iters"])
    assert p["update_order"] == "Q-first" and p["hessian_update"] is True and p["outer_iters"] == 2
    assert p["preset"] == "paper"
    with pytest.raises(ValueError, match="unknown candidate"):
        P.candidate_params(sel, "nope", (2, 2))
    cfg["methods"]["caldera"]["params"] = dict(p)
    assert S.matches_run(caldera_params(cfg, 4), p)
    assert not S.matches_run(caldera_params(cfg, 4), {**p, "update_order": "LR-first"})


def test_measured_error_is_the_raw_calibration_data_aware_error():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(32, 64, generator=g)
    X = torch.randn(256, 64, generator=g, dtype=torch.float64) * torch.linspace(0.1, 3, 64, dtype=torch.float64)
    H = X.T @ X / 256
    m = S.measure_matrix(W, H, "quip#", {})
    from caldera.methods import get_method

    spec = get_method("quip#")
    W_hat = spec.fn(W, H, spec.make_config({})).reconstruction().double()
    D = W_hat - W.double()  # oracle: ‖(Ŵ − W)Xᵀ‖_F / ‖WXᵀ‖_F straight from the samples
    want = float((D @ X.T).norm() / (W.double() @ X.T).norm())
    assert m["error"] == pytest.approx(want, rel=1e-6)  # float32 products, as the compression jobs record it
    assert m["error"] != pytest.approx(m["error_reg"], rel=1e-6)  # the regularized-H error is another number


def run_snakemake(args, cwd):
    return subprocess.run([sys.executable, "-m", "snakemake"] + args, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_selection_rule_dry_runs_and_reads_no_evaluation_result(tmp_path):
    pytest.importorskip("snakemake")
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    r = run_snakemake(["-n", "--cores", "1", "results/mini/tables/selection.md"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout + r.stderr
    block = out[out.index("rule selection:"):]
    inputs = block[block.index("input:") + 6: block.index("\n", block.index("input:"))].split(",")
    assert sorted(i.strip() for i in inputs) == ["results/mini/hessians/gemma3",
                                                 "results/mini/hessians/smollm2"]
    jobs = set()
    for line in out[out.index("Job stats"):].splitlines()[3:]:
        if len(line.split()) != 2 or line.split()[0] == "total":
            break
        jobs.add(line.split()[0])
    assert jobs == {"assets", "hessians", "selection"}  # no compression, no evaluation upstream
    r = run_snakemake(["-n", "--cores", "1"], tmp_path)
    assert r.returncode == 0 and "results/mini/tables/selection.md" in r.stdout  # a default target


@pytest.mark.parametrize("name", ["mini", "mini-full", "mini-core", "smoke"])
def test_the_configs_caldera_rows_use_a_swept_candidate(name):
    """The CALDERA rows run exactly one of the configurations their own selection sweep measured (at its T),
    so selection.md speaks about the configuration the tables use."""
    from caldera.methods import get_method

    cfg = yaml.safe_load((ROOT / f"config/{name}.yaml").read_text())
    sel = cfg["selection"]
    for b in P.selection_bits(sel):
        matching = [c for c in sel["candidates"]
                    if S.matches_run(caldera_params(cfg, b), P.candidate_params(sel, c, sel["iters"]))]
        assert len(matching) == 1, (name, b, matching)
    spec = get_method("caldera")
    assert spec.make_config(cfg["methods"]["caldera"]["params"]).outer_iters == sel["iters"][0]


def test_each_factor_precision_gets_its_own_configuration():
    """`params_by_b_lr` reaches exactly the rows of that B_LR (the 16-bit rows' selection differs from the 4-bit
    rows'), and the run check reads it: a config that forgets it no longer matches the 16-bit selection."""
    cfg = mini()
    by = {(v.method, v.b_lr): v.config for v in all_variants(cfg).values()
          if v.method == "caldera" and v.config.q_bits == 2}  # the 2-bit rows (not regime.run's)
    c16, c4 = by[("caldera", 16)], by[("caldera", 4)]
    want16 = cfg["methods"]["caldera"]["params_by_b_lr"]["16"]
    assert all(getattr(c16, k) == v for k, v in want16.items())
    assert (c4.update_order, c4.hessian_update) == ("Q-first", False) != (c16.update_order, c16.hessian_update)
    sel = cfg["selection"]
    chosen16 = {**P.candidate_params(sel, "LR-first+update", sel["iters"])}
    assert S.matches_run(caldera_params(cfg, 16), chosen16) and not S.matches_run(caldera_params(cfg, 4), chosen16)
    del cfg["methods"]["caldera"]["params_by_b_lr"]
    assert not S.matches_run(caldera_params(cfg, 16), chosen16)


def test_the_page_marks_the_selected_row_and_reads_the_same_from_json():
    cfg = mini()
    sel = {**cfg["selection"], "layers": {"b": [5], "a": [5]}, "long_iters": None,
           "candidates": {c: {} for c in ("first", "mid", "last")}}
    recs = hand_made_records()
    summary = S.summarize(recs, (2, 2))
    chosen, tied = S.select(summary, 0.0)
    res = {"selection": sel, "records": recs, "summary": summary, "long_summary": {},
           "selected": {"name": chosen, "params": P.candidate_params(sel, chosen, (2, 2)), "tied": tied}}
    md = R.to_markdown(res)
    assert "s/matrix" not in md and "Job time" not in md  # no clock reading on the page
    assert "| **mid** (selected) | 0.8064 |" in md and "| first | 0.9012 |" in md
    assert md.index("a k=8") < md.index("b k=8")
    assert R.to_markdown(json.loads(json.dumps(res, sort_keys=True))) == md
