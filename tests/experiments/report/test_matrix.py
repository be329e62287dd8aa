"""The matrix-level report (caldera.experiments.report.matrix): each method's error on a seeded matrix against a
direct computation, the configuration behind each row's label, the App. G.1 claims' thresholds and the written
report."""

from __future__ import annotations

import json

import pytest
import torch

from caldera.experiments.report import matrix as M
from caldera.methods import get_method
from caldera.metrics import relative_data_aware_error
from caldera.synthetic import llm_like

TINY = M.Case(32, 64, 1e2, 0.5, 0, outliers=2)


def direct_error(W_hat: torch.Tensor, W: torch.Tensor, H: torch.Tensor) -> float:
    """sqrt(tr(ΔH'Δᵀ) / tr(WH'Wᵀ)) in float64 with H' = H / mean(diag H) + 0.01·I."""
    H = H.double() / H.double().diagonal().mean() + 0.01 * torch.eye(H.shape[0], dtype=torch.float64)
    D, W = W_hat.double() - W.double(), W.double()
    return float(torch.sqrt(torch.trace(D @ H @ D.T) / torch.trace(W @ H @ W.T)))


def test_each_rows_error_is_its_methods_data_aware_error_on_the_regularized_hessian():
    row = M.run_case(TINY, rank=4, outer=1)
    W, H = llm_like(TINY.n, TINY.d, seed=TINY.seed, decay=TINY.decay, cond=TINY.cond, outliers=TINY.outliers)
    table = M.methods(4, 1)
    assert row["case"] == TINY.name and list(row["errors"]) == list(table) == list(row["traces"])
    for label, (name, params) in table.items():
        spec = get_method(name)
        W_hat = spec.fn(W, H, spec.make_config(params)).reconstruction()  # seeded methods: the same decomposition
        assert row["errors"][label] == pytest.approx(direct_error(W_hat, W, H), rel=1e-9), label
        assert row["errors"][label] != pytest.approx(relative_data_aware_error(W_hat, W, H), rel=1e-6), label
        # (the raw H gives another number: the regularization is not a no-op at this size)


def test_each_label_runs_the_configuration_it_names():
    rank, outer = 12, 5
    cfg = {label: get_method(name).make_config(params) for label, (name, params) in M.methods(rank, outer).items()}
    caldera = {k: c for k, c in cfg.items() if k.startswith("CALDERA")}
    assert len(caldera) == 6
    for label, c in caldera.items():
        bits = 16 if "16-bit" in label else 4
        assert (c.rank, c.outer_iters, c.q_bits, c.l_bits, c.r_bits) == (rank, outer, 2, bits, bits), label
        assert c.rht == ("no RHT" not in label) and c.ldlq == ("no LDLQ" not in label), label
        assert c.update_order == ("Q-first" if "Q first" in label else "LR-first"), label
    assert cfg["CALDERA 16-bit + Hessian update"].hessian_update and not cfg["CALDERA 16-bit factors"].hessian_update
    assert (cfg["QuIP# 2-bit"].lr_rank, cfg[f"QuIP# + rank-{rank} fp16 LR"].lr_rank) == (0, rank)
    assert cfg[f"LoftQ NF2 + rank-{rank} fp16 LR"].rank == rank
    assert all(cfg[k].bits == 2 for k in ("RTN 2-bit (per row)", "GPTQ 2-bit (per row, sym)"))


def errors(rank, **over):
    """Errors of every label where each App. G.1 claim holds, with ``over`` (label → error) replacing some."""
    e = dict.fromkeys(M.methods(rank, 1), 1.0)
    e.update({"QuIP# 2-bit": 0.30, f"QuIP# + rank-{rank} fp16 LR": 0.25, "CALDERA 16-bit factors": 0.20,
              "CALDERA 4-bit factors": 0.21, "CALDERA 4-bit, no RHT": 0.22, "CALDERA 4-bit, no LDLQ": 0.27})
    e.update(over)
    return e


def test_claims_count_the_cases_at_the_stated_thresholds():
    rank = 8
    cases = {
        "all": errors(rank),
        "16-bit at QuIP# + LR": errors(rank, **{f"QuIP# + rank-{rank} fp16 LR": 0.20}),
        "4-bit 10% above": errors(rank, **{"CALDERA 4-bit factors": 0.2200001, "CALDERA 4-bit, no RHT": 0.23,
                                           "CALDERA 4-bit, no LDLQ": 0.3}),
        "4-bit below 16-bit": errors(rank, **{"CALDERA 4-bit factors": 0.19, "CALDERA 4-bit, no LDLQ": 0.24}),
        "no LDLQ at 1.25x": errors(rank, **{"CALDERA 4-bit, no LDLQ": 0.2625}),
        "no RHT equal": errors(rank, **{"CALDERA 4-bit, no RHT": 0.21}),
        "16-bit at QuIP#": errors(rank, **{"QuIP# 2-bit": 0.20, f"QuIP# + rank-{rank} fp16 LR": 0.30}),
    }
    rows = [{"case": k, "errors": e} for k, e in cases.items()]
    claims = M.check_claims(rows, rank)
    failing = {c["claim"]: sorted(k for k, ok in c["per_case"].items() if not ok) for c in claims}
    assert failing == {
        "16-bit CALDERA below QuIP# (no LR) in data-aware error": ["16-bit at QuIP#"],
        "16-bit CALDERA below QuIP# (+LR) in data-aware error": ["16-bit at QuIP# + LR"],
        "4-bit factors slightly above 16-bit (≤ 10% higher)": ["4-bit 10% above", "4-bit below 16-bit"],
        "no-LDLQ much worse (> 1.25× the 4-bit error)": ["no LDLQ at 1.25x"],
        "no-RHT worse for some matrices": ["no RHT equal"],
    }
    assert all(c["of"] == len(rows) and c["holds_in"] == len(rows) - len(failing[c["claim"]]) for c in claims)


def test_the_claims_are_the_registrys_figure3_claims_and_one_against_plain_quip():
    """One declaration per claim: the report checks the Figure 3 entries of claim_registry, in their order, beside
    its own comparison with QuIP# without low-rank factors."""
    from caldera.experiments.report.claim_registry import FIGURE3, entries

    rows = [{"case": "c", "errors": errors(8)}]
    assert [c["claim"] for c in M.check_claims(rows, 8)] == [M.VS_PLAIN_QUIP.claim] + [
        e.claim for e in entries(FIGURE3)]


def test_the_cases_have_distinct_names():
    """The claims count cases by name."""
    names = [c.name for c in M.CASES]
    assert len(set(names)) == len(names)
    assert {c.name for c in M.QUICK_CASES} <= set(names)


def test_main_writes_the_table_and_claims_of_what_it_measured(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(M, "QUICK_CASES", [TINY, M.Case(32, 64, 1e3, 0.7, 1)])
    assert M.main(["--quick", "--rank", "4", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "matrix_report.json").read_text())
    md = (tmp_path / "matrix_report.md").read_text()
    assert [r["case"] for r in data["rows"]] == [c.name for c in M.QUICK_CASES]
    assert data["claims"] == M.check_claims(data["rows"], 4)
    assert md == M.to_markdown(data["rows"], data["claims"], 4, 3)  # --quick: T_out = 3
    assert md in capsys.readouterr().out
    assert sum(line.startswith("| ") for line in md.splitlines()) == 1 + len(M.methods(4, 3)) + 1 + len(
        data["claims"])  # header, one row a method; header, one row a claim


@pytest.mark.parametrize("quick", [False, True])
def test_the_rank_is_bounded_by_the_smallest_matrix_of_the_cases_run(quick, monkeypatch, capsys):
    """--rank below min(n, d) of every case run (caldera.validation.check_rank), refused by the parser otherwise,
    naming the bounds and the case; --quick runs other cases, with their own bound."""
    monkeypatch.setattr(M, "QUICK_CASES", [M.Case(64, 32, 1e2, 0.5, 0), TINY])
    cases = M.QUICK_CASES if quick else M.CASES
    small = min(min(c.n, c.d) for c in cases)
    flag = ["--quick"] if quick else []
    assert M.parse_args([*flag, "--rank", str(small - 1)]).rank == small - 1
    for bad in (small, small + 1, 0, -3):
        with pytest.raises(SystemExit) as e:
            M.parse_args([*flag, "--rank", str(bad)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"argument --rank: {bad} is out of range: expected an integer" in err, err
        if bad > 0:
            case = min(cases, key=lambda c: min(c.n, c.d)).name
            assert f"in [1, {small - 1}]" in err and case in err, err


def test_the_outer_iterations_are_bounded(capsys):
    assert M.parse_args(["--outer-iters", "1"]).outer_iters == 1
    assert M.parse_args(["--outer-iters", str(M.MAX_OUTER_ITERS)]).outer_iters == M.MAX_OUTER_ITERS
    for bad in ("0", "-1", str(M.MAX_OUTER_ITERS + 1), "1.5", "--"):
        with pytest.raises(SystemExit) as e:
            M.parse_args([f"--outer-iters={bad}"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "argument --outer-iters: " in err, err


def test_out_of_range_options_are_refused_before_any_case_runs(tmp_path, monkeypatch):
    """No matrix is decomposed and nothing is written for a refused option."""
    monkeypatch.setattr(M, "run_case", lambda *a: pytest.fail("a case ran"))
    for argv in (["--rank", "100000"], ["--outer-iters", "100000"], ["--rank", "0"]):
        with pytest.raises(SystemExit):
            M.main([*argv, "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
