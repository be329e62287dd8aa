"""The jobs' config adapters (caldera.experiments.jobs.models): where jobs run."""

from __future__ import annotations

import pytest
import torch

from caldera.experiments.jobs.models import run_device


def test_run_device():
    has_cuda = torch.cuda.is_available()
    assert run_device({}).type == ("cuda" if has_cuda else "cpu")  # auto
    assert run_device({"device": "cpu"}).type == "cpu"
    if has_cuda:
        assert run_device({"device": "cuda"}).type == "cuda"
    else:
        with pytest.raises(ValueError, match="no CUDA device"):
            run_device({"device": "cuda"})
