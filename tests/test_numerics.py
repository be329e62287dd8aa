"""caldera.numerics: the portable mode pins the CPU code paths (and only adds what the user did not set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from caldera import numerics

ROOT = Path(__file__).resolve().parents[1]


def test_portable_sets_every_pin_and_keeps_what_the_user_set():
    env = {"MKL_CBWR": "AVX2"}
    added = numerics.apply("portable", env)
    assert env == {**numerics.PORTABLE_ENV, "MKL_CBWR": "AVX2"}
    assert "MKL_CBWR" not in added and set(added) == set(numerics.PORTABLE_ENV) - {"MKL_CBWR"}


def test_native_sets_nothing_and_an_unknown_mode_is_refused():
    env = {}
    assert numerics.apply("native", env) == {} and env == {}
    with pytest.raises(ValueError, match="numerics: 'fast'"):
        numerics.apply("fast", env)


def test_portable_takes_effect_in_a_fresh_process():
    """torch reports its vector ISA: the baseline under ``portable`` (the pin must be set before torch loads)."""
    code = ("from caldera import numerics; numerics.apply('portable'); import torch; "
            "print(torch.backends.cpu.get_cpu_capability())")
    env = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE_ENV}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "DEFAULT"
