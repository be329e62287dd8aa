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
    dense = ["--dense", spec["dense"]] if spec.get("dense") else []
    assert zeroshot_design.main(["--table", str(ROOT / spec["table"]), "--docs", *docs, *pairs, *dense,
                                 "--limit", str(spec["limit"]), "--out", str(out)]) == 0
    got = json.loads(out.with_suffix(".json").read_text())
    assert got == json.loads(COMMITTED.read_text())
    for p in got["pairs"]:
        assert p["above_chance"]["tasks"] == zeroshot_design.above_chance(got["chance"][spec["dense"]])
        for r in [*p["tasks"].values(), p["pooled"]]:
            if r["need_acc"] is not None:
                assert r["need_acc"] == documents_for_power(r["sd_acc"], p["paper_effect"])


@pytest.mark.parametrize("name", ["mini", "mini-full", "smoke"])
def test_a_configs_claim_tasks_are_the_evaluated_tasks_its_dense_stand_in_scores_above_chance(name):
    """``zeroshot_claims.tasks`` is set from the committed record of the dense stand-ins alone: for each model, the
    tasks the config evaluates on which the record reads the dense model above chance."""
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    chance = json.loads(COMMITTED.read_text())["chance"]
    evaluated = [t if t.startswith("caldera_") else f"caldera_{t}" for t in cfg["eval"]["zeroshot"]["tasks"]]
    assert set(cfg["zeroshot_claims"]["tasks"]) == set(cfg["models"])
    for model, tasks in cfg["zeroshot_claims"]["tasks"].items():
        want = [t for t in zeroshot_design.above_chance(chance[f"{model}-dense"]) if t in evaluated]
        assert sorted(tasks) == want, model
