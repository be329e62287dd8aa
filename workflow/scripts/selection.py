"""Adapter of the `selection` rule: paths from Snakemake, one library call, output to the log."""

import contextlib
import os

sm = snakemake  # noqa: F821  (injected by Snakemake)
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(sm.threads)

import torch  # noqa: E402

torch.set_num_threads(sm.threads)

from caldera.experiments.selection import step_selection  # noqa: E402

with open(sm.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    dirs = {os.path.basename(os.path.dirname(p)): os.path.dirname(p) for p in sm.input.hessians}
    step_selection(sm.config, dirs, sm.output.json, sm.output.md)
