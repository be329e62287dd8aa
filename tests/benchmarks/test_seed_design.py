"""benchmarks/seed_design.py: the committed seed design regenerates from the committed spreads, and every funded
comparison reaches 80 % power at it."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import seed_design

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_design_regenerates_and_funds_only_what_reaches_80_percent(tmp_path):
    out = tmp_path / "design.md"
    assert seed_design.main(["--run", str(ROOT / "benchmarks/results/seed_design_input_9b6744a"), "--spreads",
                           str(ROOT / "paper_tables/mini-seeds"), str(ROOT / "paper_tables/mini-full"),
                           "--budget-min", "26.1", "--out", str(out)]) == 0
    got = json.loads(out.with_suffix(".json").read_text())
    committed = json.loads((ROOT / "benchmarks/results/seed_design_mini.json").read_text())
    assert got["seeds"] == committed["seeds"] and got["comparisons"] == committed["comparisons"]
    assert got["spent_s"] <= got["budget_s"]
    for r in got["comparisons"]:
        if r["funded"]:
            assert r["power_at_design"] >= 0.8 and got["seeds"][r["a"]] >= r["need"] <= got["seeds"][r["b"]]
    assert set(got["seeds"]) <= {v for r in got["comparisons"] if r["funded"] for v in (r["a"], r["b"])}
