"""benchmarks/memory_estimate.py: the commands' memory estimates against a child process's measured peak."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "memory_estimate.py"
_spec = importlib.util.spec_from_file_location("_memory_estimate", SCRIPT)
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(M.write_tiny(tmp_path_factory.mktemp("mem") / "tiny"))


def test_the_estimates_are_the_commands_own(tiny):
    from caldera.cli.common import forward_memory, model_config
    from caldera.cli.hessians import hessian_memory

    cfg = model_config(tiny)
    assert cfg.max_position_embeddings == 512
    assert M.estimate(cfg, "ppl", {"seq_len": 100, "batch": 3}) == forward_memory(cfg, 3, 100)
    assert M.estimate(cfg, "hessians", {"n_samples": 5, "seq_len": 7, "batch": 2}) == hessian_memory(cfg, 5, 2, 7)


def test_each_measurement_is_its_own_childs_peak_after_the_load(tiny):
    """A large Hessian collection (every sequence's hidden states held: 256 x 512 tokens x 64 float32 values, 32
    MiB a copy) then a small one: the small one's peak is below the large one's (each from a fresh waiting
    process, not the largest child so far), and its work is measured from the resident set after the load."""
    big = M.measure(tiny, "hessians", {"n_samples": 256, "seq_len": 512, "batch": 8}, timeout=300)
    small = M.measure(tiny, "hessians", {"n_samples": 2, "seq_len": 8, "batch": 2}, timeout=300)
    for rec in (big, small):
        assert rec["rss_after_load"] > 50 * 2**20  # torch and the model are loaded
        assert rec["measured"] == rec["peak"] - rec["rss_after_load"]
    if not (big["peak_reset"] and small["peak_reset"]):
        pytest.skip("this kernel does not let a process reset its peak resident set")
    assert big["measured"] > 32 * 2**20 > small["measured"]  # at least one copy of the hidden states
    assert small["peak"] < big["peak"]


def test_the_record_states_each_configuration_and_whether_the_estimate_covers_it():
    row = {"model": "tiny", "job": "ppl", "sizes": {"seq_len": 8, "batch": 1}, "estimate": 3 * 2**20,
           "rss_after_load": 100 * 2**20, "peak": 102 * 2**20, "measured": 2 * 2**20, "peak_reset": True}
    res = {"rows": [row, {**row, "estimate": 2**20},
                    {"model": "smollm2", "job": "ppl", "sizes": {"seq_len": 8, "batch": 1},
                     "skipped": "model not available"}],
           "commit": "abc1234", "machine": {"platform": "Linux", "cpus": 2, "python": "3.11.7"}}
    md = M.render(res, "python benchmarks/memory_estimate.py")
    lines = [ln for ln in md.splitlines() if ln.startswith("| tiny") or ln.startswith("| smollm2")]
    assert lines[0] == "| tiny | ppl | seq_len 8, batch 1 | 3.0 | 100.0 | 102.0 | 2.0 | ×1.50 | yes |"
    assert lines[1].endswith("| 1.0 | 100.0 | 102.0 | 2.0 | ×0.50 | no |")
    assert lines[2].startswith("| smollm2 | ppl | seq_len 8, batch 1 | model not available |")
    assert "at abc1234" in md
