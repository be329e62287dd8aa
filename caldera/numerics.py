"""Which floating-point code paths a job may take, config key ``numerics``: the machine's own (``native``), the
AVX2 paths that every x86-64 CPU with AVX2 runs alike (``avx2``), or the baseline paths of any x86 CPU
(``portable``).

Torch picks its vectorized CPU kernels (reductions, elementwise ops) by the CPU's instruction set (AVX-512, AVX2 or
the baseline) and MKL picks its BLAS/LAPACK kernels by CPU too; each path sums in a different order. A CALDERA
decomposition amplifies such last-bit differences: LDLQ feeds every rounding decision into the next column, so one
E8P code that flips near a tie changes the codes after it. Measured here (AMD EPYC with AVX-512, MKL 2024.2, one
thread; SmolLM2-135M layers 5/15/25, all 21 matrices, mini's 4-bit CALDERA config; ``paper_tables/reseed/
README.md``): MKL's AVX2 branch instead of the one it picks on this CPU changes 15 % of the Q codes on average (up
to 50 % of a down_proj; 10 of 21 matrices unchanged), torch's baseline kernels instead of AVX-512 likewise 15 %,
torch's AVX2 kernels instead of AVX-512 nothing; the mean data-aware error moves in the fifth decimal. Another
CPU thus gives another, statistically equivalent, realization.

* ``avx2``: ``MKL_CBWR=AVX2`` (MKL's conditional numerical reproducibility: the AVX2 kernels whatever the CPU
  offers beyond), ``ATEN_CPU_CAPABILITY=avx2`` and ``NUMBA_CPU_NAME=generic``. Measured cost: +9 % on those 21
  decompositions (17.6 / 19.0 s vs 16.2 / 17.1 s). Two runs are bitwise identical, and identical to MKL_CBWR=AVX2
  alone.
* ``portable``: ``MKL_CBWR=COMPATIBLE``, torch's baseline kernels, Numba generic: any x86 CPU; ~1.8x slower
  (30.4 / 36.4 s).

Neither was verified on a second physical CPU type (none was available): what they remove is the instruction-set
dispatch, the mechanism measured above; results still depend on library versions and thread count (one thread per
job here). A variable the user already set wins over these.
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
