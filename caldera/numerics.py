"""Which floating-point code paths a job may take, config key ``numerics``: the machine's own (``native``), the
AVX2 paths that every x86-64 CPU with AVX2 runs alike (``avx2``), or the baseline paths of any x86 CPU
(``portable``).

Torch picks its vectorized CPU kernels (reductions, elementwise ops) by the CPU's instruction set (AVX-512, AVX2 or
the baseline) and MKL picks its BLAS/LAPACK kernels by CPU too; each path sums in a different order. A CALDERA
decomposition amplifies such last-bit differences: LDLQ feeds every rounding decision into the next column, so one
E8P code that flips near a tie changes the codes after it. Another CPU thus gives another, statistically
equivalent, realization (how many codes change, and what it does to the error: ``benchmarks/results/SETTINGS.md``).

* ``avx2``: ``MKL_CBWR=AVX2`` (MKL's conditional numerical reproducibility: the AVX2 kernels whatever the CPU
  offers beyond), ``ATEN_CPU_CAPABILITY=avx2`` and ``NUMBA_CPU_NAME=generic``.
* ``portable``: ``MKL_CBWR=COMPATIBLE``, torch's baseline kernels, Numba generic: any x86 CPU, and the slowest.

What they remove is the instruction-set dispatch; results still depend on library versions and thread count
(one thread per job here). A variable the user already set wins over these.
"""

from __future__ import annotations

import os
import sys
import warnings

#: environment of each pinned mode; set before torch (and MKL, Numba) are first imported
MODE_ENV = {
    "avx2": {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "NUMBA_CPU_NAME": "generic"},
    "portable": {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default", "NUMBA_CPU_NAME": "generic"},
}
PORTABLE_ENV = MODE_ENV["portable"]

MODES = ("native", *MODE_ENV)


def apply(mode: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the environment for ``mode`` in ``environ`` (default ``os.environ``) and return what was set. Must run
    before torch is imported: afterwards the dispatchers have already chosen."""
    if mode not in MODES:
        raise ValueError(f"numerics: {mode!r} is not one of {MODES}")
    env = os.environ if environ is None else environ
    if mode == "native":
        return {}
    if environ is None and "torch" in sys.modules:
        warnings.warn(f"numerics: {mode} was requested after torch was imported; torch keeps the code paths it "
                      "already chose (set it before the first `import torch`)", RuntimeWarning, stacklevel=2)
    added = {k: v for k, v in MODE_ENV[mode].items() if k not in env}
    env.update(added)
    return added
