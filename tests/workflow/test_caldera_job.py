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


def test_a_full_disk_is_reported_with_the_free_space_and_the_fix(tmp_path, monkeypatch):
    """safetensors reports a full disk as a bare SafetensorError: the job re-raises it as ENOSPC naming the rule,
    the file and what to do; any other error passes through unchanged."""
    import errno
    from types import SimpleNamespace

    import pytest
    from safetensors import SafetensorError

    job = _caldera_job()
    monkeypatch.setattr(job.os, "environ", dict(job.os.environ))
    out = tmp_path / "results" / "compressed" / "v" / "layer_000.safetensors"
    sm = SimpleNamespace(threads=1, config={}, rule="compress_variant", log=[str(tmp_path / "l")], output=[str(out)])
    with pytest.raises(OSError) as info:
        with job.job(sm):
            raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                                  '"No space left on device" })')
    assert info.value.errno == errno.ENOSPC
    msg = str(info.value)
    assert msg.startswith(f"[Errno 28] rule compress_variant: the disk is full writing {out} (")
    assert "GiB free on its file system" in msg and "run the same command again" in msg
    assert isinstance(info.value.__cause__, SafetensorError)
    with pytest.raises(OSError) as info:  # the plain OSError form, raised from a wrapper
        with job.job(sm):
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as e:
                raise RuntimeError("saving the checkpoint failed") from e
    assert "the disk is full" in str(info.value)
    with pytest.raises(ValueError, match="^unrelated$"):
        with job.job(sm):
            raise ValueError("unrelated")


def test_disk_full_is_found_only_in_the_chain():
    import errno

    job = _caldera_job()
    assert job.disk_full(OSError(errno.ENOSPC, "x"))
    assert not job.disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not job.disk_full(RuntimeError("out of memory"))
    assert not job.disk_full(None)
