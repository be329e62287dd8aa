"""`caldera eval` (caldera.cli.evaluate): each subcommand's help, its limits, the zero-shot summary."""

from __future__ import annotations

import json

import pytest

from caldera import cli
from caldera.cli import evaluate as cli_evaluate
from tests.helpers import printed_json

COMMANDS = ["assets", "hessians", "compress", "eval", "info", "convert"]


@pytest.mark.parametrize("what, own, others", [
    ("ppl", ["--seq-len", "--max-windows", "--source"], ["--new-tokens", "--dense", "--tasks", "--limit"]),
    ("zeroshot", ["--tasks", "--limit"], ["--new-tokens", "--seq-len", "--dense"]),
    ("throughput", ["--new-tokens", "--dense", "--calls"], ["--seq-len", "--tasks", "--limit"]),
])
def test_each_eval_subcommand_has_its_own_help(what, own, others, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["eval", what, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert all(f in out for f in own + ["--model", "--quiet", "--json", "--out"]), out
    assert not any(f in out for f in others), out


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "2.5", "ten"])
def test_bad_limit_is_one_clear_line(value, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["eval", "zeroshot", "--model", "smollm2", "--limit", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --limit" in err and "expected a number of documents per task" in err and "islice" not in err


def test_zeroshot_prints_a_summary_and_writes_the_documents_only_to_the_file(tmp_path, monkeypatch, capsys):
    import caldera.eval.zeroshot as zs

    docs = [{"doc_id": i, "acc": float(i < 3), "margin": 0.1} for i in range(10)]
    res = {"tasks": {"caldera_arc_easy": {"acc": 0.3, "acc_norm": 0.2, "n": 10, "docs": docs}}, "limit": 10}
    monkeypatch.setattr(cli_evaluate, "load_any_model", lambda name: (None, object(), "dense"))
    monkeypatch.setattr(zs, "zeroshot", lambda *a, **k: json.loads(json.dumps(res)))
    argv = ["eval", "zeroshot", "--model", "x", "--tasks", "caldera_arc_easy"]
    assert cli.main([*argv, "--out", str(tmp_path / "zs.json")]) == 0
    out = capsys.readouterr().out
    from caldera.stats import wilson_interval

    lo, hi = wilson_interval(3, 10)
    assert f"caldera_arc_easy            10    30.0 [{100 * lo:5.1f}, {100 * hi:5.1f}]" in out
    assert "doc_id" not in out and out.rstrip().endswith(f"full records: {tmp_path / 'zs.json'}")
    assert json.loads((tmp_path / "zs.json").read_text())["tasks"]["caldera_arc_easy"]["docs"] == docs
    assert cli.main([*argv, "--json"]) == 0
    printed = printed_json(capsys)
    assert "docs" not in printed["tasks"]["caldera_arc_easy"] and printed["tasks"]["caldera_arc_easy"]["acc"] == 0.3
    assert "pass --out FILE" in printed["docs"]
