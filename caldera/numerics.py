"""Which floating-point code paths a job may take: the machine's fastest (``native``) or CPU-independent ones
(``portable``), config key ``numerics``.

Torch picks its vectorized CPU kernels (reductions, elementwise ops) by the CPU's instruction set (AVX-512, AVX2 or
the portable baseline) and MKL picks its BLAS/LAPACK kernels the same way; each path sums in a different order. A
CALDERA decomposition amplifies such last-bit differences: LDLQ feeds every rounding decision into the next column,
so one E8P code that flips near a tie changes the codes after it. Measured on this project's CPU (SmolLM2-135M layer
15, mini's 4-bit CALDERA config, ``paper_tables/reseed/README.md``): forcing torch's baseline kernels
(``ATEN_CPU_CAPABILITY=default``) instead of AVX-512 changed 4 % of q_proj's and 50 % of down_proj's Q codes, with
the same data-aware error to 4 decimals — another CPU gives another, statistically equivalent, realization.

``portable`` pins both dispatchers before torch is imported: MKL's conditional numerical reproducibility branch
``MKL_CBWR=COMPATIBLE`` (the same kernels on every x86 CPU), torch's baseline kernels (``ATEN_CPU_CAPABILITY=
default``) and Numba's generic target (``NUMBA_CPU_NAME=generic``). The result then no longer depends on which
instruction set the CPU offers; it does still depend on the library versions and thread count (one thread per job
here), and it was not verified on a second physical CPU type (none was available). A variable the user already set
wins over these.
"""

from __future__ import annotations

import os
import sys
import warnings

#: environment of the ``portable`` mode; set before torch (and MKL, Numba) are first imported
PORTABLE_ENV = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default", "NUMBA_CPU_NAME": "generic"}

MODES = ("native", "portable")


def apply(mode: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set the environment for ``mode`` in ``environ`` (default ``os.environ``) and return what was set. Must run
    before torch is imported: afterwards the dispatchers have already chosen."""
    if mode not in MODES:
        raise ValueError(f"numerics: {mode!r} is not one of {MODES}")
    env = os.environ if environ is None else environ
    if mode == "native":
        return {}
    if environ is None and "torch" in sys.modules:
        warnings.warn("numerics: portable was requested after torch was imported; torch keeps the code paths it "
                      "already chose (set it before the first `import torch`)", RuntimeWarning, stacklevel=2)
    added = {k: v for k, v in PORTABLE_ENV.items() if k not in env}
    env.update(added)
    return added
