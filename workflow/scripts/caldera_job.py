"""What every rule script does first (imported by each one: Snakemake puts this folder on ``sys.path``).

One BLAS/OpenMP pool of exactly the job's ``threads`` (1 unless a profile sets more): Snakemake runs ``--cores``
jobs side by side, and two 2-thread torch jobs on 2 cores run ~3x slower than two 1-thread jobs. The variables
must be set before torch is first imported, so a script imports the library inside ``with job(snakemake)``.
Everything the job prints goes to its log.
"""

import contextlib
import errno
import os
import shutil
import sys

from caldera.experiments.planning.rules import PINNED as PINNED_RULES  # torch-free: read before the pin


def numerics_mode(config: dict, rule: str) -> str:
    """The ``numerics`` mode of a job of ``rule`` under ``config`` (``native`` outside :data:`PINNED_RULES`)."""
    return config.get("numerics", "native") if rule in PINNED_RULES else "native"


def _imports_torch(module: str) -> bool:
    """Does ``module`` (already imported) import torch at its top level (a name bound to torch in it)?"""
    mod = sys.modules.get(module)
    return any(getattr(v, "__name__", "").split(".")[0] == "torch" for v in vars(mod).values()) if mod else False


def disk_full(exc: BaseException | None) -> bool:
    """Is ``exc``, or an exception in its chain, a full disk (``ENOSPC``, or a library's error that says so, such
    as safetensors' ``SafetensorError``)?"""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full_message(rule: str, path: str) -> str:
    """What a job of ``rule`` that ran out of disk says: the free space where it writes (``path``) and the fix."""
    where = os.path.dirname(os.path.abspath(path)) or "."
    while not os.path.exists(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free / 2**30
    return (f"rule {rule}: the disk is full writing {path} ({free:.1f} GiB free on its file system). Results are "
            "written atomically, so nothing this job left is taken as done. Free space (another run's results/ "
            "folder, old clones, /tmp), then run the same command again: finished jobs are kept. `caldera cost` "
            "and config/README.md say what a run needs.")


@contextlib.contextmanager
def job(sm):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(sm.threads)
    from caldera import numerics  # torch-free: pins the CPU code paths (config `numerics`) before torch loads

    mode = numerics_mode(sm.config, sm.rule)
    if mode != "native" and "torch" in sys.modules:
        # Snakemake unpickled this job's params before this line: one of them imported torch, so the pin would not
        # hold (a method's config class in a module that imports torch at the top: caldera.methods.registry)
        culprits = sorted(m for m in sys.modules if m.startswith("caldera.") and _imports_torch(m))
        raise RuntimeError(f"rule {sm.rule}: torch was imported before the `numerics: {mode}` pin could apply, while "
                           f"Snakemake loaded the job's parameters (modules: {culprits or 'not caldera'}); make the "
                           "module of each parameter's class torch-free at import (import torch inside its "
                           "functions), or set `numerics: native`")
    numerics.apply(mode)
    from caldera import openmp  # torch-free: libgomp's idle spin, read when torch loads (caldera.openmp)

    openmp.limit_spin()
    from caldera.pipeline import local_data  # torch-free: config `local_data` (local copies of the hub's datasets)

    local_data.use(sm.config)
    import torch

    torch.set_num_threads(sm.threads)
    try:
        with open(sm.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            yield log
    except Exception as e:
        if disk_full(e):
            outputs = list(getattr(sm, "output", [])) or [sm.log[0]]
            raise OSError(errno.ENOSPC, disk_full_message(sm.rule, str(outputs[0]))) from e
        raise
