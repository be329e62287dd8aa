"""`python -m caldera.cli` (caldera.cli.__main__): the `caldera` command run as a module, its exit status the
command's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caldera.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_module_runs_the_command_with_the_process_arguments():
    from caldera import __version__

    r = _run("--version")
    assert (r.returncode, r.stdout.strip()) == (0, f"caldera {__version__}")


def test_a_failing_command_is_the_exit_status_with_its_message(tmp_path):
    """A command's error is the process's exit status 2 and one line on stderr, not a traceback."""
    r = _run("info", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (f"caldera info: error: {tmp_path} is not a compressed checkpoint (no "
                                "caldera_config.json); run `caldera compress`")


def test_no_command_is_a_usage_error_naming_it():
    r = _run()
    assert r.returncode == 2
    assert "usage: caldera" in r.stderr and "the following arguments are required: COMMAND" in r.stderr
