"""caldera.eval.tasks.utils: the task-data folder, the lm-eval dataset loaders and the WinoGrande helpers."""

from __future__ import annotations

import json
import sys

import pytest

from caldera.eval import zeroshot as zs
from caldera.eval.tasks import utils
from tests.helpers import WINO

LOADERS = {"winogrande": ("load_winogrande", "validation"), "rte": ("load_rte", "validation"),
           "piqa": ("load_piqa", "validation"), "arc_easy": ("load_arc_easy", "test"),
           "arc_challenge": ("load_arc_challenge", "test")}


@pytest.fixture
def no_local_data(monkeypatch):
    monkeypatch.delenv("CALDERA_LOCAL_DATA", raising=False)


@pytest.mark.parametrize("bare", [False, True])
def test_task_data_dir_is_local_data_then_cache_then_home(tmp_path, monkeypatch, no_local_data, bare):
    """The same folder whether caldera imports (``bare=False``) or not (a bare ``lm_eval --include_path``)."""
    if bare:
        monkeypatch.setitem(sys.modules, "caldera.pipeline.assets", None)  # its import raises ImportError
    monkeypatch.delenv("CALDERA_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert utils.task_data_dir() == tmp_path / "home" / ".cache" / "caldera" / "tasks"
    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path / "cache"))
    assert utils.task_data_dir() == tmp_path / "cache" / "tasks"
    monkeypatch.setenv("CALDERA_LOCAL_DATA", str(tmp_path / "local"))
    assert utils.task_data_dir() == tmp_path / "local" / "tasks"


@pytest.mark.parametrize("task", sorted(LOADERS))
def test_each_loader_is_its_jsonl_file_in_one_split(prepared, no_local_data, task):
    name, split = LOADERS[task]
    rows = [json.loads(line) for line in (prepared / f"{task}.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) >= 2
    got = getattr(utils, name)(unused_lm_eval_kwarg=1)
    assert list(got) == [split] and got[split].to_list() == rows
    assert getattr(utils, name)(caldera_max_docs=1)[split].to_list() == rows[:1]
    assert getattr(utils, name)(caldera_max_docs="2")[split].to_list() == rows[:2]


def test_a_missing_task_file_names_the_preparation(tmp_path, monkeypatch, no_local_data):
    pytest.importorskip("datasets")
    monkeypatch.setenv("CALDERA_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"rte\.jsonl not found; run caldera\.eval\.zeroshot\.prepare_task"):
        utils.load_rte()


def test_winogrande_partial_evaluation_helpers():
    import importlib.util

    spec = importlib.util.spec_from_file_location("caldera_task_utils", zs.tasks_dir() / "utils.py")
    u = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(u)
    doc = WINO[2]
    assert u.winogrande_doc_to_choice(doc) == [
        "The sun warmed the rock so sun",
        "The sun warmed the rock so rock",
    ]
    assert u.winogrande_doc_to_target(doc) == "was hot."
    assert u.winogrande_doc_to_text(doc) == 1


@pytest.mark.parametrize("doc", WINO)
def test_each_context_and_the_target_rebuild_the_filled_sentence(doc):
    """Oracle: the sentence with option i in the blank is context i, one space, and the shared target."""
    contexts = utils.winogrande_doc_to_choice(doc)
    target = utils.winogrande_doc_to_target(doc)
    for i, option in enumerate((doc["option1"], doc["option2"])):
        assert contexts[i] + " " + target == doc["sentence"].replace("_", option)
    gold = utils.winogrande_doc_to_text(doc)
    assert contexts[gold].endswith(doc["option" + str(doc["answer"])])


def test_winogrande_answer_may_be_a_number_and_must_be_one_or_two():
    assert [utils.winogrande_doc_to_text({"answer": a}) for a in (1, 2, "1", "2")] == [0, 1, 0, 1]
    with pytest.raises(KeyError):
        utils.winogrande_doc_to_text({"answer": "3"})
