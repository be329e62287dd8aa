"""caldera.pipeline.local_data: the local-data folder a config names, carried by the environment to the loaders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caldera.eval.tasks.utils import task_data_dir
from caldera.pipeline import local_data


@pytest.fixture(autouse=True)
def _restore_the_variable(monkeypatch):
    """local_data.use() writes os.environ itself: a set-then-delete through monkeypatch records the variable's
    state before the test, so it is restored afterwards whatever the test wrote."""
    monkeypatch.setenv(local_data.ENV, "unset-by-the-fixture")
    monkeypatch.delenv(local_data.ENV)


def test_use_records_the_absolute_folder_in_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(local_data.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    got = local_data.use({"local_data": "data"})  # relative to the working directory
    assert got == tmp_path.resolve() / "data" and got.is_absolute()
    assert os.environ[local_data.ENV] == str(got) and local_data.root() == got


def test_the_layout_is_text_and_tasks_under_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(local_data.ENV, raising=False)
    root = local_data.use({"local_data": str(tmp_path)})
    assert local_data.text_file("wiki-squad") == root / "text" / "wiki-squad.jsonl"
    assert local_data.tasks_dir() == root / "tasks"
    assert local_data.split_file("winogrande", "train") == root / "tasks" / "winogrande-train.jsonl"


def test_lm_evals_task_loaders_read_the_same_folder(tmp_path, monkeypatch):
    """The task loaders, imported by path in lm-eval, read the variable by name: the same folder."""
    monkeypatch.delenv(local_data.ENV, raising=False)
    local_data.use({"local_data": str(tmp_path)})
    assert task_data_dir() == local_data.tasks_dir() == tmp_path.resolve() / "tasks"


def test_a_config_without_local_data_points_back_at_the_hub(tmp_path, monkeypatch):
    monkeypatch.setenv(local_data.ENV, str(tmp_path))
    assert local_data.root() == Path(tmp_path)
    for config in ({}, {"local_data": None}):
        local_data.use({"local_data": str(tmp_path)})
        assert local_data.use(config) is None
        assert local_data.ENV not in os.environ and local_data.root() is None
    monkeypatch.setenv(local_data.ENV, "")
    assert local_data.root() is None  # an empty value is no folder
