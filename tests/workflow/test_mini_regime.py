"""config/mini-regime.yaml is config/mini.yaml's SmolLM2 run with Q at the bits the regime record chose on held-out
calibration text, and nothing else changed that a verdict depends on."""

from __future__ import annotations

import json
from pathlib import Path

from caldera.strict_yaml import load_yaml_strict

ROOT = Path(__file__).resolve().parents[2]
MINI = load_yaml_strict(ROOT / "config/mini.yaml")
REGIME = load_yaml_strict(ROOT / "config/mini-regime.yaml")
RECORD = json.loads((ROOT / "paper_tables/generated/regime.json").read_text())


#: the CALDERA parameters the selection sweep chooses (on calibration Hessians): the regime run's own choice
SELECTED = ("update_order", "hessian_update", "best_tracking")


def test_the_caldera_rows_use_the_regime_runs_own_selection():
    """The committed regime record's selection (at the regime's Q bits, on the calibration Hessians) is the
    configuration the rows use: selection.md would say "this run's config does not use it" otherwise."""
    md = (ROOT / "paper_tables/regime/selection.md").read_text()
    assert "Selected: **" in md and "this run's config does not use it" not in md
    assert "q_bits: 3" in md


def _regime_models() -> list[str]:
    return sorted(REGIME["models"])


def test_q_bits_are_the_regime_records_choice_and_the_configs():
    for m in _regime_models():
        chosen = int(RECORD["models"][m]["q_bits"])
        assert chosen != 2, f"{m}'s regime is 2 bits: the default run is its regime run"
        assert MINI["regime"]["models"][m]["q_bits"] == chosen
        for method in ("caldera", "quip#", "quip#-lr"):
            assert REGIME["methods"][method]["params"]["q_bits"] == chosen
        assert REGIME["selection"]["base"]["q_bits"] == chosen
    # the stand-ins left out are those whose regime is 2 bits
    for m in set(MINI["models"]) - set(REGIME["models"]):
        assert int(RECORD["models"][m]["q_bits"]) == 2


def test_everything_else_a_verdict_depends_on_is_the_default_runs():
    for key in ("calibration", "eval", "rht_ft", "numerics", "rank_multiple", "layers", "layers_per_job", "theory"):
        assert REGIME[key] == MINI[key], key
    for method in ("caldera", "quip#", "quip#-lr"):
        params = {k: v for k, v in REGIME["methods"][method]["params"].items() if k not in ("q_bits", *SELECTED)}
        assert params == {k: v for k, v in MINI["methods"][method]["params"].items() if k not in SELECTED}, method
    assert REGIME["methods"]["caldera"]["params_by_b_lr"] == MINI["methods"]["caldera"]["params_by_b_lr"]
    for m in _regime_models():
        assert REGIME["models"][m]["source"] == MINI["models"][m]["source"]
        assert REGIME["selection"]["layers"][m] == MINI["selection"]["layers"][m]
    assert {p: m for p, m in MINI["stand_ins"].items() if m in REGIME["models"]} == REGIME["stand_ins"]
    for key in ("candidates", "bits", "ranks", "iters", "tie_tolerance"):
        assert REGIME["selection"][key] == MINI["selection"][key], key
    assert {k: v for k, v in REGIME["selection"]["base"].items() if k != "q_bits"} == MINI["selection"]["base"]
    # the headline rows are replicated on the default run's seeds
    assert REGIME["replicates"]["seeds"] == MINI["replicates"]["seeds"]
    assert set(REGIME["replicates"]["variants"]) <= set(MINI["replicates"]["variants"])
    assert [t for t in MINI["tables"] if t in REGIME["tables"]] == REGIME["tables"]
