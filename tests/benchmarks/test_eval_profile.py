"""The evaluation profiler (benchmarks/eval_profile.py): its timers around library functions and the
split of one forward into decoder body and LM head."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import pytest
import torch

from tests.helpers import printed_json, tiny_llama

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "eval_profile.py"
_spec = importlib.util.spec_from_file_location("_eval_profile", SCRIPT)
E = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(E)
_wrap, head_split = E._wrap, E.head_split


def test_wrap_keeps_the_function_and_adds_its_time_under_its_key():
    calls = []

    def work(x, *, y=1):
        """Doc."""
        calls.append((x, y))
        return x + y

    def fail():
        raise RuntimeError("boom")

    owner = types.SimpleNamespace(work=work, fail=fail)
    acc = {"shared": 0.0}
    _wrap(owner, "work", "shared", acc)
    _wrap(owner, "fail", "shared", acc)
    assert owner.work(2, y=3) == 5 and calls == [(2, 3)]
    assert owner.work.__name__ == "work" and owner.work.__doc__ == "Doc." and owner.work.__wrapped__ is work
    after_one = acc["shared"]
    assert after_one > 0.0
    with pytest.raises(RuntimeError, match="boom"):  # a failing call still counts, and still raises
        owner.fail()
    assert acc["shared"] > after_one and set(acc) == {"shared"}


def test_head_split_times_body_and_head_of_one_window():
    mdl = tiny_llama(0, vocab_size=96)
    calls = {"body": [], "head": 0}
    mdl.model.register_forward_pre_hook(lambda _m, args, kwargs: calls["body"].append(kwargs["input_ids"].shape),
                                        with_kwargs=True)
    mdl.lm_head.register_forward_pre_hook(lambda *_: calls.__setitem__("head", calls["head"] + 1))
    out = head_split(mdl, 16)
    assert set(out) == {"body_s", "head_s", "vocab"} and out["vocab"] == 96
    assert calls["body"] == [torch.Size([1, 16])] * 2 and calls["head"] == 1  # warm-up body, timed body, head


def test_main_merges_set_eval_into_the_config_and_profiles_the_chosen_models(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("models:\n  a: {source: x}\n  b: {source: y}\n"
                   "eval:\n  zeroshot: {tasks: [t1], limit: 4, batch_size: 8}\n  weights: compressed\n")
    seen = []
    monkeypatch.setattr(E, "profile", lambda config, model, head=False: seen.append((config, model, head)) or
                        {"imports": 1.0})
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the test process keeps its threads
    E.main(["--config", str(cfg), "--model", "b", "--head",
            "--set-eval", json.dumps({"zeroshot": {"limit": 50}, "weights": "reconstructed"})])
    assert [(m, h) for _, m, h in seen] == [("b", True)]
    assert seen[0][0]["eval"] == {"zeroshot": {"tasks": ["t1"], "limit": 50, "batch_size": 8},
                                  "weights": "reconstructed"}
    assert printed_json(capsys) == {"model": "b", "imports": 1.0}
    seen.clear()
    E.main(["--config", str(cfg)])  # no --model: every model of the config
    assert [(m, h) for _, m, h in seen] == [("a", False), ("b", False)]
