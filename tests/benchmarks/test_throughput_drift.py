"""benchmarks/throughput_drift.py: each variant's median tokens/s across runs and its max / min."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput_drift.py"
_spec = importlib.util.spec_from_file_location("_throughput_drift", SCRIPT)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
drift, main = _mod.drift, _mod.main


def _run(**medians_by_variant):
    """A Table 6 JSON whose variants' repeats have the given medians (3 repeats: median ± 1)."""
    protocols = ["single_token", "decode"]
    return {"protocols": protocols,
            "measured": {v: {p: {"tokens_per_s": [m - 1, m, m + 1]} for p in protocols}
                         for v, m in medians_by_variant.items()}}


def test_the_ratio_is_the_largest_median_over_the_smallest_across_runs():
    d = drift({"a": _run(dense=10.0, q=20.0), "b": _run(dense=15.0, q=21.0), "c": _run(dense=12.0, q=22.0)})
    by = {(r["variant"], r["protocol"]): r for r in d["rows"]}
    assert by[("dense", "decode")]["ratio"] == pytest.approx(1.5)
    assert by[("q", "single_token")]["ratio"] == pytest.approx(22 / 20)
    assert by[("dense", "single_token")]["medians"] == {"a": 10.0, "b": 15.0, "c": 12.0}
    assert d["max_ratio"] == pytest.approx(1.5)


def test_only_variants_measured_in_every_run_are_compared():
    d = drift({"a": _run(dense=10.0, q=20.0), "b": _run(dense=11.0)})
    assert {r["variant"] for r in d["rows"]} == {"dense"}


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least two runs"):
        drift({"a": _run(dense=10.0)})
    with pytest.raises(ValueError, match="no variant is measured in every run"):
        drift({"a": _run(dense=10.0), "b": _run(q=10.0)})


def test_main_writes_the_record(tmp_path, capsys):
    paths = []
    for label, m in (("r1", 10.0), ("r2", 13.0)):
        p = tmp_path / f"{label}.json"
        p.write_text(json.dumps(_run(dense=m)))
        paths.append(str(p))
    assert main([*paths, "--out", str(tmp_path / "drift")]) == 0
    rec = json.loads((tmp_path / "drift.json").read_text())
    assert rec["runs"] == ["r1", "r2"] and rec["max_ratio"] == pytest.approx(1.3)
    assert "| dense | decode | 10.00 | 13.00 | ×1.30 |" in (tmp_path / "drift.md").read_text()
