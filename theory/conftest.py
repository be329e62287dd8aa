"""Hypothesis profiles for the theory checks and a single-thread guard.

``HYPOTHESIS_PROFILE=ci`` (default): few examples per property so that ``pytest theory`` finishes in under three
minutes on two cores; ``HYPOTHESIS_PROFILE=thorough``: derandomized, many examples (the reproducibility run).
Profiles are loaded here, at collection time, so they apply to the ``@given`` tests of this folder.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=10, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=150, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _single_thread():
    """Small LAPACK calls on a shared machine are 10–100× slower with oversubscribed intra-op threads."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
