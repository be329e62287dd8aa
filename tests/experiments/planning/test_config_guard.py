"""Plan-time refusals of caldera.experiments.planning.config_guard that need the machine or a config file as the
workflow reads it (the rest: test_plan.py and tests/workflow/test_workflow.py's dry runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from caldera.experiments.planning.config_guard import device_errors, quoted_number_errors
from caldera.strict_yaml import load_yaml_strict

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
WIKI = "seq_len: 128, n_windows: 2}"  # the one line of config/smoke.yaml each case rewrites
LR = "epochs: 1, lr: 1.0e-4,"


def _errors(tmp_path: Path, old: str, new: str) -> list[str]:
    """quoted_number_errors of config/smoke.yaml with ``old`` written as ``new``, read as the workflow reads it."""
    text = (ROOT / "config/smoke.yaml").read_text()
    assert text.count(old) == 1
    (tmp_path / "bad.yaml").write_text(text.replace(old, new))
    return quoted_number_errors(load_yaml_strict(tmp_path / "bad.yaml"), SCHEMA)


@pytest.mark.parametrize("old, now, value, fix, words", [
    (WIKI, "n_windows: 2", "n_windows: 1e9", "n_windows: 1000000000", "eval.ppl.wiki.n_windows: '1e9' is read as text"),
    (LR, "lr: 1.0e-4", "lr: 1e-4", "lr: 1.0e-4", "lora_ft.tasks.wiki.lr: '1e-4' is read as text"),
])
def test_an_unquoted_exponent_that_yaml_reads_as_text_is_named_with_a_form_it_reads_as_a_number(
        tmp_path, old, now, value, fix, words):
    """PyYAML reads ``1e9`` (no dot, no sign in the exponent) as the string '1e9': "write it without quotes" would
    tell the user to write what they wrote."""
    assert _errors(tmp_path, old, old) == []
    errors = _errors(tmp_path, old, old.replace(now, value))
    assert len(errors) == 1 and errors[0].startswith(words), errors
    assert "without quotes" not in errors[0]  # the user wrote no quotes
    assert f"write {fix}" in errors[0]
    # the suggested form is read as a number: the refusal goes away
    assert _errors(tmp_path, old, old.replace(now, fix)) == []


def test_a_really_quoted_number_is_told_to_drop_the_quotes(tmp_path):
    errors = _errors(tmp_path, WIKI, 'seq_len: 128, n_windows: "1000"}')
    assert errors == ["eval.ppl.wiki.n_windows: '1000' is a quoted number; write it without quotes (n_windows: 1000)"]


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
