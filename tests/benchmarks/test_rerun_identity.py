"""benchmarks/rerun_identity.py: which files may differ between two runs, and how claims are compared."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import rerun_identity as R  # noqa: E402


@pytest.mark.parametrize("rel, clock", [
    ("results/smoke/benchmarks/evaluate/x.tsv", True),
    ("results/smoke/logs/evaluate/x.log", True),
    ("results/smoke/eval/v/ppl_wiki.timing.json", True),
    ("paper_tables/generated/timings.md", True),
    ("paper_tables/generated/table6_throughput.csv", True),
    ("paper_tables/generated/theory.json", True),
    ("paper_tables/generated/table1_llama2_zeroshot.json", False),
    ("paper_tables/generated/claims.md", False),
    ("results/smoke/compressed/v/model.safetensors", False),
    ("results/smoke/eval/v/ppl_wiki.json", False),
])
def test_only_files_that_hold_clock_readings_may_differ(rel, clock):
    assert (R.clock_reason(rel) is not None) == clock


def _claims(tmp_path: Path, name: str, rows: list[tuple[str, str, str, str]]) -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps([{"claim": c, "source": s, "verdict": v, "numbers": n} for c, s, v, n in rows]))
    return p


def test_claims_compare_whole_except_throughput_rows_by_verdict(tmp_path):
    a = _claims(tmp_path, "a", [("x", "Table 1", "holds", "1.0"), ("t", "Table 6", "holds", "10 tok/s")])
    same = _claims(tmp_path, "b", [("x", "Table 1", "holds", "1.0"), ("t", "Table 6", "holds", "11 tok/s")])
    r = R.compare_claims(a, same)
    assert r["other_identical"] == r["other"] == 1 and r["other_differing"] == []
    assert r["throughput_same_verdict"] == r["throughput"] == 1
    moved = _claims(tmp_path, "c", [("x", "Table 1", "holds", "1.01"), ("t", "Table 6", "fails", "5 tok/s")])
    r = R.compare_claims(a, moved)
    assert r["other_differing"] == ["x"] and r["throughput_same_verdict"] == 0
    assert R.compare_claims(a, _claims(tmp_path, "d", [("x", "Table 1", "holds", "1.0")]))["same_claims"] is False


def test_hashes_cover_every_file_under_the_folders(tmp_path):
    (tmp_path / "results/s/eval").mkdir(parents=True)
    (tmp_path / "results/s/eval/a.json").write_text("1")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables/t.md").write_text("2")
    h = R.hashes(tmp_path, ["results", "tables"])
    assert set(h) == {"results/s/eval/a.json", "tables/t.md"}
    assert h["tables/t.md"] == R.sha256(tmp_path / "tables/t.md") != h["results/s/eval/a.json"]
