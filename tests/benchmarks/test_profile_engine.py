"""benchmarks/profile_engine.py on the CPU at a toy shape: the report names the engine's functions and operators."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_engine.py"


def _module():
    spec = importlib.util.spec_from_file_location("_profile_engine", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_report_attributes_the_time_to_ldlq_lplr_and_torch_operators(tmp_path):
    out = tmp_path / "prof.txt"
    # every caldera function listed: which ones rank in the top 30 at a toy shape moves with the machine's load
    assert _module().main(["--shape", "64x96", "--rank", "8", "--inner", "2", "--device", "cpu", "--svd", "warm",
                           "--top", "200", "--out", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    assert text.startswith("# profile_engine: 64x96 on cpu, rank 8, T_in 2, T_out 1, svd warm")
    assert float(re.search(r"wall ([0-9.e+-]+) s", text).group(1)) > 0
    for fn in ("caldera_decompose", "ldlq_quantize", "lplr_factorize"):
        assert fn in text, fn
    assert "Self CPU" in text and "aten::" in text  # the torch operator table
