"""Model sources: what is a hub id and what can only be a local path (caldera.pipeline.sources)."""

from __future__ import annotations

import pytest

from caldera.pipeline.sources import looks_like_path


@pytest.mark.parametrize("name", ["./model", "~/m", "/abs/m", "a/b/c", "a b", "org/../x", "org/name!"])
def test_names_that_cannot_be_hub_ids_are_paths(name):
    assert looks_like_path(name)


@pytest.mark.parametrize("name", ["gpt2", "meta-llama/Llama-2-7b-hf", "org/name.v1_x"])
def test_hub_ids_are_not_paths(name):
    assert not looks_like_path(name)


def test_a_name_under_an_existing_folder_is_a_path(tmp_path, monkeypatch):
    (tmp_path / "org").mkdir()
    monkeypatch.chdir(tmp_path)
    assert looks_like_path("org/missing") and not looks_like_path("other/missing")
