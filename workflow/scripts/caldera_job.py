"""What every rule script does first (imported by each one: Snakemake puts this folder on ``sys.path``).

One BLAS/OpenMP pool of exactly the job's ``threads`` (1 unless a profile sets more): Snakemake runs ``--cores``
jobs side by side, and two 2-thread torch jobs on 2 cores run ~3x slower than two 1-thread jobs. The variables
must be set before torch is first imported, so a script imports the library inside ``with job(snakemake)``.
Everything the job prints goes to its log.
"""

import contextlib
import os


@contextlib.contextmanager
def job(sm):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(sm.threads)
    from caldera import numerics  # torch-free: pins the CPU code paths (config `numerics`) before torch loads

    numerics.apply(sm.config.get("numerics", "native"))
    import torch

    torch.set_num_threads(sm.threads)
    with open(sm.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        yield log
