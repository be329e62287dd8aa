"""`caldera compare` (caldera.cli.compare): the summary, the JSON records, the exit status (1 only when something
is flagged) and "no such folder" for a path that is not there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from caldera import cli
from tests.helpers import printed_json

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "paper_tables/generated"


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("claims.json", "table1_llama2_zeroshot.json"):
        shutil.copy(RECORD / name, run / name)
    return run


def test_a_copy_of_the_record_shows_no_difference(tmp_path, capsys):
    run = _copy(tmp_path)
    assert cli.main(["compare", str(run), "--against", str(RECORD)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "no difference beyond the intervals"
    assert cli.main(["compare", str(run), "--against", str(RECORD), "--json"]) == 0
    res = printed_json(capsys)
    assert res["claims"]["beyond"] == [] and res["tables"]["only_ref"]  # the tables the copy lacks are listed


def test_a_perplexity_outside_the_record_interval_is_named_and_exits_1(tmp_path, capsys):
    run = _copy(tmp_path)
    t = json.loads((run / "table1_llama2_zeroshot.json").read_text())
    row = next(r for r in t["rows"] if r["variant"] == "smollm2-quipsharp")
    row["ours"]["wiki2_ppl"] = 1.5 * row["ours_ci"]["wiki2_ppl"][1]
    (run / "table1_llama2_zeroshot.json").write_text(json.dumps(t))
    assert cli.main(["compare", str(run), "--against", str(RECORD)]) == 1
    out = capsys.readouterr().out
    assert "beyond   table1_llama2_zeroshot smollm2-quipsharp wiki2_ppl:" in out


def test_no_such_folder(tmp_path, capsys):
    assert cli.main(["compare", str(tmp_path / "missing")]) == 2
    assert f"caldera compare: error: run: no such folder: {tmp_path / 'missing'}; " in capsys.readouterr().err
    assert cli.main(["compare", str(tmp_path), "--against", str(tmp_path / "gone")]) == 2
    assert f"caldera compare: error: --against: no such folder: {tmp_path / 'gone'}; " in capsys.readouterr().err
