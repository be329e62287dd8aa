"""`caldera lm-eval` (caldera.cli.lm_eval)."""

from __future__ import annotations

import sys
import types

from caldera import cli

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


def test_lm_eval_help_shows_the_include_path_of_the_shipped_tasks(monkeypatch, capsys):
    from caldera.eval.zeroshot import tasks_dir

    fake = types.ModuleType("lm_eval.__main__")
    fake.cli_evaluate = lambda: None
    monkeypatch.setitem(sys.modules, "lm_eval.__main__", fake)
    assert cli.main(["lm-eval", "--help"]) == 0
    assert f"--include_path {tasks_dir()}" in capsys.readouterr().out
