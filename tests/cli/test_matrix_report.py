"""`caldera matrix-report` (caldera.cli.matrix_report)."""

from __future__ import annotations

import sys
import types

from caldera import cli

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


def test_matrix_report_is_lazy(monkeypatch):
    seen = {}
    fake = types.ModuleType("caldera.reports.matrix")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "caldera.reports.matrix", fake)
    assert cli.main(["matrix-report", "--quick", "--out", "x"]) == 0
    assert seen["argv"] == ["--quick", "--out", "x"]
