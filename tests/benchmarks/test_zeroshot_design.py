"""benchmarks/zeroshot_design.py: the committed zero-shot design regenerates from its committed inputs, and its
document counts reach 80 % power at the spreads it measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import zeroshot_design
from caldera.experiments.planning.zeroshot_design import documents_for_power

ROOT = Path(__file__).resolve().parents[2]
INPUT = ROOT / "benchmarks/results/zeroshot_design_input"
COMMITTED = ROOT / "benchmarks/results/zeroshot_design_regime.json"


def test_the_committed_design_regenerates(tmp_path):
    spec = json.loads((INPUT / "args.json").read_text())
    pytest.importorskip("lm_eval")
    try:
        from caldera.eval.zeroshot import task_size

        task_size("caldera_rte")
    except FileNotFoundError:
        pytest.skip("the zero-shot task data is not prepared (caldera assets)")
    out = tmp_path / "design.md"
    docs = [f"{v}={INPUT / f}" for v, f in spec["docs"].items()]
    pairs = [x for p in spec["pairs"] for x in ("--pair", *p)]
    assert zeroshot_design.main(["--table", str(ROOT / spec["table"]), "--docs", *docs, *pairs,
                                 "--limit", str(spec["limit"]), "--out", str(out)]) == 0
    got = json.loads(out.with_suffix(".json").read_text())
    assert got == json.loads(COMMITTED.read_text())
    for p in got["pairs"]:
        for r in [*p["tasks"].values(), p["pooled"]]:
            if r["need_acc"] is not None:
                assert r["need_acc"] == documents_for_power(r["sd_acc"], p["paper_effect"])
