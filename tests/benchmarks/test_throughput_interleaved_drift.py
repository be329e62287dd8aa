"""benchmarks/throughput_interleaved_drift.py: every claim pair of Table 6 decided on each run, and the record."""

import importlib.util
from pathlib import Path

import pytest

from tests.experiments.report.claim_tables import throughput_rounds
from tests.helpers import workflow_config

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput_interleaved_drift.py"
_spec = importlib.util.spec_from_file_location("_throughput_interleaved_drift", SCRIPT)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)


def _run(speeds: dict[str, float], seed: int) -> dict:
    """One run's job results for smoke's SmolLM2 variants, every variant timed in the same 8 rounds."""
    variants = {}
    for i, (v, s) in enumerate(sorted(speeds.items())):
        tps = {p: throughput_rounds(s, 0.02, 8, 0.3, seed=10 * seed + i) for p in ("single_token", "decode")}
        variants[v] = {"model": "smollm2", "method": "dense" if v.endswith("dense") else "caldera", "load_s": 1.0,
                       "model_tensor_mb": 1.0, **{p: {"tokens_per_s": t, "median": t[0], "min": min(t),
                                                      "max": max(t)} for p, t in tps.items()}}
    return {"smollm2": {"model": "smollm2", "variants": variants, "device": "cpu", "torch_threads": 1,
                        "peak_rss_mb": 1.0, "peak_cuda_mb": None, "rounds_s": 1.0, "wall_s": 2.0, "orders": [],
                        "settings": {"rounds": 8}}}


def test_every_claim_pair_is_decided_on_each_run():
    speeds = {"smollm2-dense": 10.0, "smollm2-caldera-r16-lr4": 12.0, "smollm2-caldera-r32-lr4": 11.5,
              "smollm2-quipsharp": 13.0}
    pairs = _mod.decide_pairs(workflow_config("smoke"), [_run(speeds, 1), _run(speeds, 2)])
    got = {(p["a"], p["b"], p["protocol"]) for p in pairs}
    # compressed vs dense and QuIP# vs CALDERA; smoke has no 16-bit variant
    assert ("smollm2-caldera-r16-lr4", "smollm2-dense", "single_token") in got
    assert ("smollm2-quipsharp", "smollm2-caldera-r32-lr4", "decode") in got and len(got) == 2 * 5
    for p in pairs:
        assert len(p["runs"]) == 2 and all(c["direction"] == 1 for c in p["runs"])
    r16 = next(p for p in pairs if p["a"] == "smollm2-caldera-r16-lr4" and p["protocol"] == "single_token")
    assert r16["paper"] == [("llama-2-7b", pytest.approx(46.19 / 31.75))]
    assert r16["runs"][0]["ratio"] == pytest.approx(1.2, rel=0.05)


def test_the_record_shows_both_runs_per_pair():
    speeds = {"smollm2-dense": 10.0, "smollm2-caldera-r16-lr4": 12.0, "smollm2-caldera-r32-lr4": 11.5,
              "smollm2-quipsharp": 13.0}
    runs = [_run(speeds, 1), _run(speeds, 2)]
    pairs = _mod.decide_pairs(workflow_config("smoke"), runs)
    rec = {"command": "x", "commit": "abc", "machine": {"model_name": "CPU X", "cpus": 2, "avx512f": False},
           "beside": "Two other sessions ran beside it.", "config": "config/smoke.yaml", "results": "results/smoke",
           "settings_config": "config/mini.yaml", "settings": {"rounds": 8, "seed": 0, "warmup": 1, "calls": 4,
                                                                "new_tokens": 8},
           "runs": [{"wall_s": 2.0, "rounds_s": 1.0, "load_s": 0.5, "loadavg_before": "1", "loadavg_after": "2"}] * 2,
           "pairs": pairs, "summary": "S."}
    md = _mod.render(rec)
    assert "CPU X, 2 CPUs, AVX-512 no" in md and "Two other sessions ran beside it." in md and "commit abc" in md
    line = next(x for x in md.splitlines() if "smollm2-caldera-r16-lr4 / smollm2-dense | single-token" in x)
    assert line.count("] faster") == 2 and line.endswith("| yes |")
