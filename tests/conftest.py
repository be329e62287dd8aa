"""Test-session set-up shared by every test directory."""

from __future__ import annotations

import os

import torch

# Without CUDA the Triton kernels run in Triton's interpreter. Triton reads TRITON_INTERPRET when it first loads,
# and other imports (transformers) load it early, so it is set here, before any test module is collected.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
