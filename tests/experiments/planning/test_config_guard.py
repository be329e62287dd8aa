"""Plan-time refusals of caldera.experiments.planning.config_guard that need the machine (the rest: test_plan.py and
tests/workflow/test_workflow.py's dry runs)."""

from __future__ import annotations

import pytest

from caldera.experiments.planning.config_guard import device_errors


def _never():
    raise AssertionError("the CUDA device count was read although the config does not ask for CUDA")


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_a_config_that_does_not_ask_for_cuda_never_probes_for_it(device):
    assert device_errors({"device": device}, local=True, cuda_devices=_never) == []
    assert device_errors({}, local=True, cuda_devices=_never) == []


def test_cuda_is_refused_where_the_jobs_run_on_a_machine_without_it():
    errors = device_errors({"device": "cuda"}, local=True, cuda_devices=lambda: 0)
    assert len(errors) == 1 and errors[0].startswith("device: 'cuda'") and "device: auto" in errors[0]
    assert device_errors({"device": "cuda"}, local=True, cuda_devices=lambda: 1) == []
    # a cluster run: the jobs run on the cluster's machines, not on the one that plans them
    assert device_errors({"device": "cuda"}, local=False, cuda_devices=_never) == []
