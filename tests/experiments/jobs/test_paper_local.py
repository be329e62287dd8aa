"""The paper-local inputs (caldera.experiments.jobs.paper_local): tiny hub-layout models and the local stand-in
datasets, deterministic and loadable through the paper's loaders."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from caldera.experiments.jobs import paper_local as P


def test_generated_inputs_load_through_the_paper_loaders(tmp_path, monkeypatch):
    from caldera.experiments.jobs.paper_local import write_inputs
    from caldera.pipeline import local_data
    from caldera.pipeline.assets import load_model
    from caldera.pipeline.text import HF_TEXT, load_documents

    a = write_inputs(tmp_path / "a")
    b = write_inputs(tmp_path / "b")
    for name in ("text/c4.jsonl", "tasks/rte.jsonl", "tasks/winogrande-train.jsonl"):  # deterministic
        assert (Path(a["data"]) / name).read_bytes() == (Path(b["data"]) / name).read_bytes()
    assert (Path(a["llama-3"]) / "model.safetensors").read_bytes() == (
        Path(b["llama-3"]) / "model.safetensors").read_bytes()
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv(local_data.ENV, raising=False)
    local_data.use({"local_data": a["data"]})
    for name in HF_TEXT:
        assert len(load_documents(name)) > 3
    from caldera.eval.zeroshot import prepare_task_data

    assert prepare_task_data() == Path(a["data"]) / "tasks"
    mdl, tok = load_model(a["llama-3"])
    assert type(mdl).__name__ == "LlamaForCausalLM" and mdl.config.num_key_value_heads == 2
    hub = json.loads((Path(a["llama-3"]) / "config.json").read_text())  # rope theta: LLaMa-3's 5e5
    assert (hub.get("rope_parameters") or hub)["rope_theta"] == 500000.0
    assert tok("w1 w2")["input_ids"][0] == tok.bos_token_id
    mdl, _ = load_model(a["mistral"])
    assert type(mdl).__name__ == "MistralForCausalLM"
    local_data.use({})


def test_a_vocabulary_too_small_for_its_words_is_refused():
    assert len(P._vocab(256)) == 256
    need = 3 + len(P.TEMPLATE_WORDS) + P.N_WORDS
    with pytest.raises(ValueError, match=f"vocabulary of 100 is smaller than the {need} tokens it needs"):
        P._vocab(100)


@pytest.mark.parametrize(("task", "fields"), [
    ("winogrande", {"sentence", "option1", "option2", "answer"}),
    ("rte", {"sentence1", "sentence2", "label", "idx"}),
    ("piqa", {"goal", "sol1", "sol2", "label"}),
    ("arc_easy", {"id", "question", "choices", "gold"}),
])
def test_task_documents_have_their_tasks_fields_and_only_known_words(task, fields):
    docs = P.task_documents(task, 6, random.Random(0))
    assert len(docs) == 6 and all(set(d) == fields for d in docs)
    assert docs == P.task_documents(task, 6, random.Random(0))  # seeded
    known = set(P.words()) | set(P.TEMPLATE_WORDS)
    texts = [x for d in docs for k, v in d.items() if k not in ("id", "answer")
             for x in (v if isinstance(v, list) else [v]) if isinstance(x, str)]
    assert texts and set(" ".join(texts).split()) <= known  # every word a token of every tokenizer
