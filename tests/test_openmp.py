"""caldera.openmp: libgomp's idle spin is limited before torch loads, by the command line and the workflow's jobs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from caldera import openmp

ROOT = Path(__file__).resolve().parents[1]

# records GOMP_SPINCOUNT at the moment torch is first imported (what libgomp reads when it loads)
_HOOK = """
import importlib.abc, os, sys
SEEN = {}
class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" and "env" not in SEEN:
            SEEN["env"] = os.environ.get("GOMP_SPINCOUNT", "unset")
        return None
sys.meta_path.insert(0, _Hook())
"""


def _run(body: str, env_extra: dict[str, str] | None = None) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    env.update(env_extra or {})
    code = _HOOK + textwrap.dedent(body) + "\nprint('SEEN', SEEN.get('env'))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_limit_spin_sets_the_variable_only_where_the_user_has_not():
    env: dict[str, str] = {}
    assert openmp.limit_spin(env) == {"GOMP_SPINCOUNT": "10000"} and env == {"GOMP_SPINCOUNT": "10000"}
    mine = {"GOMP_SPINCOUNT": "0"}
    assert openmp.limit_spin(mine) == {} and mine == {"GOMP_SPINCOUNT": "0"}


def test_limit_spin_does_nothing_once_torch_is_loaded(monkeypatch):
    import os

    import torch  # noqa: F401  (libgomp has read its environment: setting the variable now would claim an effect)

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert openmp.limit_spin() == {}
    assert "GOMP_SPINCOUNT" not in os.environ


def test_the_command_line_limits_the_spin_before_torch_loads():
    body = """
    import argparse
    from caldera.cli import app
    def parser():
        ap = argparse.ArgumentParser()
        ap.add_argument("--verbose", action="store_true")
        ap.set_defaults(func=lambda a: 0, command="x")
        return ap
    app.build_parser = parser
    assert app.main([]) == 0
    """
    assert _run(body) == "SEEN 10000"
    assert _run(body, {"GOMP_SPINCOUNT": "7"}) == "SEEN 7"  # the user's value wins


def test_a_workflow_job_limits_the_spin_before_torch_loads(tmp_path):
    script = str(ROOT / "workflow" / "scripts" / "caldera_job.py")
    body = f"""
    import importlib.util
    from types import SimpleNamespace
    spec = importlib.util.spec_from_file_location("caldera_job", {script!r})
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    sm = SimpleNamespace(threads=1, config={{}}, rule="compress_layers", log=[{str(tmp_path / "log")!r}])
    with job.job(sm):
        pass
    """
    assert _run(body) == "SEEN 10000"
