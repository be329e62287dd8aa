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


def test_avx2_pins_mkl_and_torch_to_their_avx2_paths():
    env = {}
    numerics.apply("avx2", env)
    assert env == {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "NUMBA_CPU_NAME": "generic"}


def test_native_sets_nothing_and_an_unknown_mode_is_refused():
    env = {}
    assert numerics.apply("native", env) == {} and env == {}
    with pytest.raises(ValueError, match="numerics: 'fast'"):
        numerics.apply("fast", env)


@pytest.mark.parametrize(("mode", "isa"), [("portable", "DEFAULT"), ("avx2", "AVX2")])
def test_a_pinned_mode_takes_effect_in_a_fresh_process(mode, isa):
    """torch reports its vector ISA: the pinned one (the pin must be set before torch loads). On a CPU without AVX2
    torch falls back to what it has, so the avx2 case only checks a CPU that offers AVX2 or more."""
    code = (f"from caldera import numerics; numerics.apply({mode!r}); import torch; "
            "print(torch.backends.cpu.get_cpu_capability())")
    env = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE_ENV}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    native = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                            env=env, capture_output=True, text=True, timeout=120).stdout.strip()
    if isa == "AVX2" and native not in ("AVX2", "AVX512"):
        pytest.skip(f"this CPU's torch capability is {native}")
    assert out.stdout.strip() == isa
