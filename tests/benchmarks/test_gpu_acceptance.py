"""benchmarks/gpu_acceptance.py: its CPU mode runs every stage and writes every field; its runner caps each stage's
time and keeps what earlier stages measured."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.py"


def _module():
    spec = importlib.util.spec_from_file_location("_gpu_acceptance", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GA = _module()

HAS_TRITON = importlib.util.find_spec("triton") is not None

#: stage -> the fields its JSON must carry (beside status, wall_s, cap_s, seconds)
FIELDS = {
    "env": {"python", "torch", "triton", "transformers", "device", "device_name", "cuda_available", "capability",
            "memory_gb"},
    "compressed_linear": {"shape", "rank", "variants", "checks"},
    "streamed": {"model", "n_windows", "ppl_streamed", "ppl_in_memory", "max_window_nll_diff", "layers_loaded",
                 "streamed_s", "in_memory_s", "checks"},  # fmt: skip
    "gpu_tests": {"files", "command", "rc", "tests", "passed", "failed", "skipped", "checks"},
    "costs": {"path", "shapes", "rank", "components", "predicted_decompose_s", "install"},
    **dict.fromkeys(GA.ENGINE_SHAPES, {"shape", "rank", "inner_iters", "outer_iters", "svd", "prepare_s",
                                       "outer_iteration_s", "outer_iteration_process_cpu_s", "error", "errors",
                                       "fp32_matmul", "extrapolated_15x10_s", "cpu_reference", "speedup_vs_cpu"}),
    "search": {"n_vectors", "path", "reference", "codes_differ", "max_dist_gap", "latency_us",
               "throughput_vectors_per_s", "timed_by", "checks", "target_us", "target_met"},
    "ldlq_sync": {"shape", "path", "ldlq_s", "host_issue_seconds", "sync_error", "checks", "target_s", "target_met"},
    "decompose_4096": {"shape", "rank", "outer_iters", "inner_iters", "decompose_s", "error", "target_s",
                       "target_met"},
    "decode_sweep": {"rows", "max_rel_err", "registers", "checks", "target_us", "target_met"},
    "compressed_linear_graphed": {"shape", "rank", "x_dtype", "backend", "eager_us", "graphed_us", "graph_status"},
    "decode": {"shape", "copy_GBps", "timing", "target_share", "sweep", "rows", "max_rel_err", "best_cfg", "checks",
               "target_met"},
}  # fmt: skip


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One run of the CPU mode, as CI runs it (its stages in Triton's interpreter where triton is installed)."""
    out = tmp_path_factory.mktemp("gpu_acceptance")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    wall = time.monotonic() - t0
    print(f"CPU mode: {wall:.1f} s")
    assert p.returncode == 0, p.stdout + p.stderr
    return out, json.loads((out / "gpu_acceptance.json").read_text())


def test_cpu_mode_runs_every_stage_and_writes_every_field(cpu_run):
    out, res = cpu_run
    assert res["format"] == GA.FORMAT and res["device"] == "cpu" and res["tiny"] is True
    assert list(res["stages"]) == list(GA.STAGES)
    for name, st in res["stages"].items():
        if name in ("decode", "decode_sweep") and not HAS_TRITON:
            assert st["status"] == "skipped: triton not installed"
            continue
        assert st["status"] == "ok", (name, st)
        missing = FIELDS[name] - set(st)
        assert not missing, (name, missing)
        assert st["wall_s"] <= st["cap_s"] and st["seconds"] > 0
        assert all(v is not False for v in st.get("checks", {}).values()), (name, st["checks"])
    assert GA.failed_checks(res) == []
    assert res["stages"]["env"]["torch"] and res["stages"]["env"]["device_name"] == "cpu"
    summary = (out / "summary.md").read_text()
    assert all(f"| {name} | " in summary for name in GA.STAGES)
    assert "every check passed" in summary


def test_cpu_mode_stages_measured_what_they_say(cpu_run):
    out, res = cpu_run
    from caldera.experiments.planning.cost import LAWS, load_costs, predict

    st = res["stages"]
    costs = load_costs("cpu", out / "costs-cpu.json")  # the file `caldera cost` reads
    assert set(costs["components"]) == set(LAWS) == set(st["costs"]["components"])
    assert predict(costs, "ldlq", 4096, 4096) > 0
    for name in GA.ENGINE_SHAPES:
        e = st[name]
        assert e["shape"] == list(GA.ENGINE_SHAPES[name][1]) and len(e["outer_iteration_s"]) == e["outer_iters"]
        want = e["prepare_s"] + e["outer_iteration_s"][0] + 14 * e["outer_iteration_s"][-1]
        assert e["extrapolated_15x10_s"] == pytest.approx(want)
        assert "missing" in e["cpu_reference"] and e["speedup_vs_cpu"] is None  # no CPU figure of a toy shape
        assert 0 < e["error"] < 1
    cl = st["compressed_linear"]["variants"]
    assert set(cl) == {"float16_factors", "e8p_rvq4_factors", "no_factors"}
    assert all(r["backend"] is not None and r["max_rel_err"] < 1e-4 for v in cl.values() for r in v.values())
    s = st["streamed"]
    assert s["layers_loaded"] == list(range(s["model"]["layers"])) and s["max_window_nll_diff"] <= 1e-4
    g = st["gpu_tests"]
    assert "tests/kernels/test_triton_e8p.py" in g["files"]
    assert g["tests"] > 0 and g["failed"] == 0 and g["skipped"] == g["tests"]  # no CUDA here: all skip


def test_cpu_mode_decode_stage(cpu_run):
    if not HAS_TRITON:
        pytest.skip("triton not installed: the decode stage records that it skipped (checked above)")
    d = cpu_run[1]["stages"]["decode"]
    assert {(r["kernel"], r["B"]) for r in d["rows"]} == {
        (k, B) for k in ("e8p_2bit_fp16_x", "e8p_2bit_fp32_x", "e8p_rvq4_4bit_fp16_x", "dense_fp16") for B in (1, 4)
    }
    assert all(r["us"] > 0 and r["share_of_copy_bw"] > 0 for r in d["rows"])
    assert set(d["max_rel_err"]) == {"B1_fp32_x", "B1_fp16_x", "B4_fp32_x", "B4_fp16_x", "B1_fp16_x_e8p_rvq4"}
    assert max(d["max_rel_err"].values()) < 1e-4
    assert d["target_met"] is None  # not a GPU: no claim either way
    assert d["best_cfg"] in [{k: v for k, v in c.items() if k not in ("us", "timed_by")} for c in d["sweep"]]
    assert all(r["timed_by"] == "cpu wall time" for r in d["rows"])


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_runner_caps_each_stage_and_writes_after_every_stage(tmp_path):
    """A stage over its cap is killed at the cap, a failing stage is recorded with its log, and the stages after
    them still run; the JSON on disk holds every earlier stage when a later one starts."""
    res_path = tmp_path / "gpu_acceptance.json"
    cmds = {
        "first": lambda out: _py(f"import json; open({str(out)!r}, 'w').write(json.dumps({{'x': 1}}))"),
        "slow": lambda out: _py("import time; time.sleep(60)"),
        "check": lambda out: _py(
            f"import json, sys; s = json.load(open({str(res_path)!r}))['stages'];"
            "ok = s['first']['x'] == 1 and s['slow']['status'].startswith('timeout');"
            f"open({str(out)!r}, 'w').write('{{}}'); sys.exit(0 if ok else 7)"),
        "fails": lambda out: _py("import sys; print('boom'); sys.exit(3)"),
        "own_skip": lambda out: _py(f"open({str(out)!r}, 'w').write('{{\"status\": \"skipped: no widget\"}}')"),
    }  # fmt: skip
    caps = dict.fromkeys(cmds, 30.0) | {"slow": 1.0}
    t0 = time.monotonic()
    res = GA.run_stages(list(cmds), tmp_path, 300.0, lambda name, out: cmds[name](out), caps, {"device": "cpu"})
    assert time.monotonic() - t0 < 30  # the sleeping stage did not run its 60 s
    st = res["stages"]
    assert st["first"]["status"] == "ok" and st["first"]["x"] == 1
    assert st["slow"]["status"] == "timeout after 1 s" and st["slow"]["cap_s"] == 1.0
    assert st["check"]["status"] == "ok"  # it saw the JSON with the first two stages
    assert st["fails"]["status"] == "error: exit 3" and "boom" in st["fails"]["log_tail"]
    assert st["own_skip"]["status"] == "skipped: no widget"
    assert json.loads(res_path.read_text()) == json.loads(json.dumps(res))
    assert GA.failed_checks(res) == ["slow: timeout after 1 s", "fails: error: exit 3"]
    assert "| slow | timeout after 1 s |" in (tmp_path / "summary.md").read_text()


def test_runner_never_starts_a_stage_past_the_budget(tmp_path):
    ran = tmp_path / "ran"
    cmd = lambda name, out: _py(f"open({str(ran)!r}, 'w').write('x')")
    res = GA.run_stages(["a", "b"], tmp_path, 1.0, cmd, {"a": 30.0, "b": 30.0}, {"device": "cpu"})
    assert not ran.exists()
    assert [s["status"] for s in res["stages"].values()] == ["skipped: budget spent"] * 2
    assert GA.failed_checks(res) == ["a: skipped: budget spent", "b: skipped: budget spent"]


def test_failed_checks_names_each_false_check():
    res = {"stages": {"s": {"status": "ok", "checks": {"good": True, "bad": False}},
                      "t": {"status": "skipped: triton not installed"}}}  # fmt: skip
    assert GA.failed_checks(res) == ["s: bad"]


def test_cpu_engine_reference_is_the_measured_cpu_call():
    ref = GA.cpu_engine_reference(4096, 11008)
    data = json.loads((ROOT / ref["file"]).read_text())
    run = next(r for r in data["runs"] if r["shape"] == [4096, 11008] and r["config"]["seed"] == 0)
    assert ref["extrapolated_15x10_s"] == run["extrapolated_15x10_s"] and run["config"]["rank"] == 256
    assert all("missing" not in GA.cpu_engine_reference(*full) for full, _ in GA.ENGINE_SHAPES.values())
    assert "missing" in GA.cpu_engine_reference(64, 64)


def test_decode_stage_without_triton_records_the_skip(monkeypatch):
    import argparse

    monkeypatch.setattr(GA, "_has_triton", lambda: False)
    a = argparse.Namespace(device="cpu", tiny=True, out="unused", stage="decode", stage_out="unused")
    assert GA.stage_decode(a) == {"status": "skipped: triton not installed"}


def test_cpu_mode_gpu_issue_stages(cpu_run):
    """The stages of the GPU paths ran their CPU stand-ins and claim no target: the device search agrees with the
    CPU's, BlockLDLQ ran on the device path (the sync check applies on CUDA only), the decode sweep covers the three
    7B shapes' toy stand-ins with every kernel, and the graphed layer says it was not applicable."""
    st = cpu_run[1]["stages"]
    s = st["search"]
    assert s["path"] == "torch (sync-free)" and s["checks"]["codes_match_up_to_ties"] and s["target_met"] is None
    assert set(s["latency_us"]) == {"4096", "11008"} and all(v > 0 for v in s["latency_us"].values())
    ld = st["ldlq_sync"]
    assert ld["checks"] == {"ran": True, "no_host_sync": None} and ld["sync_error"] is None and ld["ldlq_s"] > 0
    assert ld["target_met"] is None and st["decompose_4096"]["target_met"] is None
    assert 0 < st["decompose_4096"]["error"] < 1
    g = st["compressed_linear_graphed"]
    assert g["graphed_us"] is None and g["graph_status"].startswith("not applicable") and g["eager_us"] > 0
    if HAS_TRITON:
        d = st["decode_sweep"]
        assert {(tuple(r["shape"]), r["kernel"]) for r in d["rows"]} == {
            (tiny, k) for _, tiny in GA.DECODE_SHAPES
            for k in ("gemv_fp16_x", "gemv_fp32_x", "tensor_core_fp16_x", "dense_fp16")
        }
        assert max(d["max_rel_err"].values()) < 1e-4 and d["target_met"] is None
        assert all(isinstance(v, str) for v in d["registers"].values())  # the interpreter compiles nothing
