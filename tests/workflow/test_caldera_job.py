"""workflow/scripts/caldera_job.py: which jobs run under the config's ``numerics`` pin."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _caldera_job():
    spec = importlib.util.spec_from_file_location("caldera_job", ROOT / "workflow" / "scripts" / "caldera_job.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_pinned_rule_exists_and_decomposition_rules_are_pinned():
    """A renamed rule would silently drop out of the pin: every name must be a rule of the workflow, and each rule
    that runs a CALDERA decomposition or collects the Hessians it rounds against must be in the set."""
    job = _caldera_job()
    rules = set()
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        rules |= set(re.findall(r"^rule (\w+):", smk.read_text(), flags=re.M))
    assert job.PINNED_RULES <= rules, job.PINNED_RULES - rules
    assert {"hessians", "compress_layers", "selection"} <= job.PINNED_RULES


def test_pinned_rules_take_the_configs_mode_and_others_stay_native():
    job = _caldera_job()
    cfg = {"numerics": "avx2"}
    assert job.numerics_mode(cfg, "compress_layers") == "avx2"
    assert job.numerics_mode(cfg, "hessians") == "avx2"
    assert job.numerics_mode(cfg, "evaluate") == "native"      # evaluation is not amplified
    assert job.numerics_mode(cfg, "throughput") == "native"    # Table 6 times the machine's own kernels
    assert job.numerics_mode({}, "compress_layers") == "native"


def test_a_pinned_job_whose_params_loaded_torch_fails_instead_of_computing_unpinned(tmp_path, monkeypatch):
    """The pin must come before torch: a pinned job that finds torch already imported (by the unpickling of its
    params) stops with the reason, rather than silently computing with the machine's own code paths."""
    import sys
    from types import SimpleNamespace

    import pytest
    import torch  # noqa: F401  (the situation: torch imported before the job's body)

    job = _caldera_job()
    sm = SimpleNamespace(threads=1, config={"numerics": "avx2"}, rule="compress_layers", log=[str(tmp_path / "l")])
    monkeypatch.setattr(job.os, "environ", dict(job.os.environ))
    with pytest.raises(RuntimeError, match="rule compress_layers: torch was imported before the `numerics: avx2`"):
        with job.job(sm):
            pass
    native = SimpleNamespace(threads=1, config={"numerics": "avx2"}, rule="evaluate", log=[str(tmp_path / "l")])
    with job.job(native):  # not pinned: torch being loaded already is fine
        pass
    assert "torch" in sys.modules
