"""`caldera matrix-report` (caldera.cli.matrix_report)."""

from __future__ import annotations

import sys
import types

import pytest

from caldera import cli

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


def test_matrix_report_is_lazy(monkeypatch):
    seen = {}
    fake = types.ModuleType("caldera.experiments.report.matrix")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "caldera.experiments.report.matrix", fake)
    assert cli.main(["matrix-report", "--quick", "--out", "x"]) == 0
    assert seen["argv"] == ["--quick", "--out", "x"]


def test_out_of_range_rank_and_outer_iterations_are_refused_naming_the_option(tmp_path, monkeypatch, capsys):
    """Through `caldera matrix-report`: exit 2 with the report's own usage line, before any case runs."""
    from caldera.experiments.report import matrix

    monkeypatch.setattr(matrix, "run_case", lambda *a: pytest.fail("a case ran"))
    for option, value in (("--rank", "0"), ("--rank", "4096"), ("--outer-iters", "0"), ("--outer-iters", "1000")):
        try:
            rc = cli.main(["matrix-report", option, value, "--out", str(tmp_path / "r")])
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and f"caldera matrix-report: error: argument {option}: {value} is out of range" in err, err
    assert not (tmp_path / "r").exists()
