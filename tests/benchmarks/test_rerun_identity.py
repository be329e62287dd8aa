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


def _finished_run(root: Path, table: str) -> Path:
    """A git clone's folder holding a finished run of a one-key config: a result, a timing file, a table, claims."""
    import subprocess

    (root / "config").mkdir(parents=True)
    (root / "config/c.yaml").write_text("tables_dir: tables\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.email=x@y", "-c", "user.name=x", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    (root / "results/c/eval").mkdir(parents=True)
    (root / "results/c/eval/v.json").write_text("1")
    (root / "results/c/eval/v.timing.json").write_text(str(len(table)))  # differs between runs: a clock file
    (root / "tables").mkdir()
    (root / "tables/table1.md").write_text(table)
    _claims(root / "tables", "claims", [("x", "Table 1", "holds", "1.0")])
    return root


def test_reused_runs_are_compared_without_running_anything(tmp_path, monkeypatch):
    """--reuse-a and --reuse-b compare two finished runs: a clock file may differ, a table may not; the report
    names both commits and run B's kill from its b.run.json."""
    monkeypatch.setattr(R, "snakemake", lambda *a, **k: pytest.fail("nothing may run"))
    work = tmp_path / "w"
    _finished_run(work / "a", "| 1 |")
    _finished_run(work / "b", "| 1 |")
    (work / "b/results/c/eval/v.timing.json").write_text("other seconds")
    argv = ["--configfile", "config/c.yaml", "--kill-after", "1", "--workdir", str(work), "--reuse-a",
            "--reuse-b", "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match="b.run.json"):
        R.main(argv)
    (work / "b.run.json").write_text(json.dumps({"commit_b": "abc1234", "run_b_killed_at_s": 9.0,
                                                 "run_b_jobs_finished_before_the_kill": 3,
                                                 "run_b_rerun_wall_s": 20.0}))
    assert R.main(argv) == 0
    res = json.loads((tmp_path / "out.json").read_text())
    assert res["differing"] == [] and list(res["clock_files_differing"]) == ["results/c/eval/v.timing.json"]
    assert res["commit_b"] == "abc1234" and res["run_b_jobs_finished_before_the_kill"] == 3
    assert (res["kernels_a"], res["kernels_b"]) == ("Numba", "Numba")
    (work / "b/caldera/kernels").mkdir(parents=True)
    (work / "b/caldera/kernels/_caldera_layer.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0")
    assert R.main(argv) == 0 and json.loads((tmp_path / "out.json").read_text())["kernels_b"] == "C extension"
    assert "(A) and abc1234 (B)" in (tmp_path / "out.md").read_text()
    (work / "b/tables/table1.md").write_text("| 2 |")
    assert R.main(argv) == 1
    assert [d["path"] for d in json.loads((tmp_path / "out.json").read_text())["differing"]] == ["tables/table1.md"]


def test_a_new_run_b_beside_a_reused_run_a_clones_run_as_commit(tmp_path, monkeypatch):
    """--reuse-a without --reuse-b: run B is cloned at run A's commit (so both ran one commit), unless
    --commit-b names another."""
    work = tmp_path / "w"
    _finished_run(work / "a", "| 1 |")
    import subprocess

    a_commit = subprocess.run(["git", "-C", str(work / "a"), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    cloned = []

    def fake_clone(dest, commit=None):
        cloned.append(commit)
        _finished_run(dest, "| 1 |")
        return commit or "head"

    monkeypatch.setattr(R, "clone", fake_clone)
    monkeypatch.setattr(R, "kill_run_b", lambda *a, **k: {"run_b_killed_at_s": 1.0,
                                                          "run_b_jobs_finished_before_the_kill": 0,
                                                          "run_b_rerun_wall_s": 2.0})
    argv = ["--configfile", "config/c.yaml", "--kill-after", "1", "--workdir", str(work), "--reuse-a",
            "--out", str(tmp_path / "out")]
    assert R.main(argv) == 0
    assert cloned == [a_commit] and json.loads((tmp_path / "out.json").read_text())["commit_b"] == a_commit
    assert R.main([*argv, "--commit-b", "deadbee"]) == 0 and cloned[-1] == "deadbee"
