"""OpenMP's busy-wait, and why the engine shortens it before torch loads.

Torch's CPU wheels run their parallel regions (GEMMs, reductions, LAPACK through MKL) on GNU OpenMP (libgomp).
After a region ends, libgomp's worker threads spin, waiting for the next one, for ``GOMP_SPINCOUNT`` spins (300,000
by default: a few milliseconds here) before they sleep. The engine's compiled E8P searches (the fused BlockLDLQ
chunk, the E8P/E8P-RVQ4 quantizers) run on Python threads right after such GEMMs (the feedback of the later
chunks, LPLR's least-squares products), so for their first milliseconds they share the cores with spinning
OpenMP workers. A shorter spin lets those workers sleep sooner; what it saves is measured in
``benchmarks/results/SETTINGS.md``. No result changes: only when idle threads go to sleep.

:func:`limit_spin` sets ``GOMP_SPINCOUNT=10000`` unless the user set it. libgomp reads it once, when it loads
(with torch), so it must run before the first ``import torch``: the ``caldera`` command, the workflow's job
wrapper and the engine benchmarks call it first. A program that imports torch itself gets the same effect by
exporting the variable before Python starts. One-thread processes (the default run's jobs) have no OpenMP
workers and are unaffected. (LLVM's OpenMP, used by some other torch builds, reads ``KMP_BLOCKTIME`` instead;
it is left alone.)
"""

from __future__ import annotations

import os
import sys

#: the busy-wait of libgomp's idle workers, in spins (its default is 300,000)
SPIN_ENV = {"GOMP_SPINCOUNT": "10000"}


def limit_spin(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Set :data:`SPIN_ENV` in ``environ`` (default ``os.environ``) where the user has not, and return what was
    set. Returns ``{}`` when torch is already imported into this process (libgomp has read its environment)."""
    env = os.environ if environ is None else environ
    if environ is None and "torch" in sys.modules:
        return {}
    added = {k: v for k, v in SPIN_ENV.items() if k not in env}
    env.update(added)
    return added
