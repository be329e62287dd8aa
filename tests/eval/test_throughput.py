"""caldera.eval.throughput: what each protocol runs (calls, shapes, modes) and the arithmetic of what it reports.

No speed is asserted: the times are whatever the machine gives, and the figures are checked against them."""

from __future__ import annotations

import statistics

import pytest
import torch

from caldera.eval import throughput as tp
from caldera.eval.throughput import (
    PROTOCOLS,
    compare_throughput,
    decode_throughput,
    interleaved_throughput,
    round_orders,
    single_token_throughput,
)
from tests.helpers import tiny_llama

PROMPT = torch.tensor([[1, 5, 9, 33]])


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


def _count_forwards(model):
    """A list that records the ``input_ids`` and ``use_cache`` of every forward of ``model``, and its hook."""
    seen = []

    def hook(_, args, kwargs):
        ids = args[0] if args else kwargs.get("input_ids")
        seen.append((ids.clone(), kwargs.get("use_cache"), model.training))

    return seen, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_decode_generates_exactly_new_tokens_and_reports_the_median(model, monkeypatch):
    calls = []
    real = model.generate

    def generate(ids, **kw):
        out = real(ids, **kw)
        calls.append((out, kw, model.training))
        return out

    monkeypatch.setattr(model, "generate", generate)
    # an EOS that greedy decoding emits first cannot stop the generation early
    first = int(real(PROMPT, max_new_tokens=1, do_sample=False, pad_token_id=0)[0, -1])
    monkeypatch.setattr(model.generation_config, "eos_token_id", first)
    model.train()
    r = decode_throughput(model, PROMPT, new_tokens=3, runs=3, warmup=2)
    assert model.training  # the mode it had before
    model.eval()
    assert len(calls) == 2 + 3 and not any(training for *_, training in calls)
    for out, kw, _ in calls:
        assert out.shape == (1, PROMPT.shape[1] + 3) and torch.equal(out[:, :4], PROMPT)
        assert kw["do_sample"] is False and kw["use_cache"] is True and kw["pad_token_id"] == first
    assert r["protocol"] == "generate-kv-cache" and len(r["times_s"]) == 3 and min(r["times_s"]) > 0
    assert r["median_s"] == statistics.median(r["times_s"])
    assert r["tokens_per_s"] == pytest.approx(3 / r["median_s"])
    assert (r["new_tokens"], r["prompt_len"], r["runs"], r["warmup"]) == (3, 4, 3, 2)


def test_decode_refuses_a_generation_of_the_wrong_length(model, monkeypatch):
    monkeypatch.setattr(model, "generate", lambda ids, **kw: torch.cat([ids, ids[:, :1]], dim=1))
    with pytest.raises(RuntimeError, match="produced 1 tokens, not 2"):
        decode_throughput(model, PROMPT, new_tokens=2, runs=1, warmup=0)


@pytest.mark.parametrize("kwargs, words", [
    ({"runs": 0}, "runs >= 1"),
    ({"warmup": -1}, "warmup >= 0"),
    ({"new_tokens": 0}, "new_tokens must be >= 1"),
])
def test_decode_refuses_bad_settings(model, kwargs, words):
    with pytest.raises(ValueError, match=words):
        decode_throughput(model, PROMPT, **kwargs)


@pytest.mark.parametrize("ids", [torch.tensor([1, 5, 9]), torch.tensor([[1, 5], [3, 4]])])
def test_decode_needs_one_prompt(model, ids):
    with pytest.raises(ValueError, match=r"must be \(1, P\)"):
        decode_throughput(model, ids, runs=1, warmup=0)


def test_single_token_runs_warmup_plus_blocks_of_calls_without_cache(model):
    seen, handle = _count_forwards(model)
    try:
        r = single_token_throughput(model, token_id=7, calls=4, runs=3, warmup=2)
    finally:
        handle.remove()
    assert len(seen) == 2 + 3 * 4
    assert all(torch.equal(ids, torch.tensor([[7]])) and cache is False and not tr for ids, cache, tr in seen)
    assert r["protocol"] == "single-token-forward" and len(r["times_s"]) == 3
    med = statistics.median(r["times_s"])
    assert r["tokens_per_s"] == pytest.approx(4 / med) and r["s_per_token"] == pytest.approx(med / 4)
    assert (r["calls"], r["runs"], r["warmup"]) == (4, 3, 2)


@pytest.mark.parametrize("kwargs, words", [({"calls": 0}, "calls must be >= 1"), ({"runs": 0}, "runs >= 1")])
def test_single_token_refuses_bad_settings(model, kwargs, words):
    with pytest.raises(ValueError, match=words):
        single_token_throughput(model, **kwargs)


def test_compare_runs_both_protocols_per_model_relative_to_the_first(model):
    other = tiny_llama(1)
    seen, handle = _count_forwards(other)
    try:
        r = compare_throughput({"dense": model, "compressed": other}, PROMPT, new_tokens=2, runs=2, warmup=0,
                               calls=3)
    finally:
        handle.remove()
    assert r["device"] == "cpu" and r["torch_threads"] == torch.get_num_threads()
    assert list(r["models"]) == ["dense", "compressed"]
    # the single-token protocol feeds the prompt's last token, with at least one warmup call
    single = [ids for ids, cache, _ in seen if cache is False]
    assert len(single) == 1 + 2 * 3 and all(torch.equal(ids, PROMPT[:, -1:]) for ids in single)
    for m in r["models"].values():
        assert m["decode"]["new_tokens"] == 2 and m["decode"]["runs"] == 2 and m["decode"]["warmup"] == 0
        assert m["single_token"]["calls"] == 3 and m["single_token"]["warmup"] == 1
        for proto in ("decode", "single_token"):
            first = r["models"]["dense"][proto]["tokens_per_s"]
            assert m[proto]["relative_to_first"] == pytest.approx(m[proto]["tokens_per_s"] / first)
    assert r["models"]["dense"]["decode"]["relative_to_first"] == 1.0


# ---------------------------------------------------------------------------------------- interleaved rounds


def test_round_orders_are_seeded_permutations_that_change_from_round_to_round():
    names = ["a", "b", "c", "d", "e", "f"]
    o = round_orders(names, rounds=12, seed=3)
    assert o == round_orders(names, rounds=12, seed=3)  # the config's seed gives the same orders
    assert o != round_orders(names, rounds=12, seed=4)
    assert len(o) == 12 and all(sorted(r[p]) == names for r in o for p in PROTOCOLS)
    # shuffled per round (a fixed order would time one variant always first, right after another's calls)
    assert len({tuple(r[p]) for r in o for p in PROTOCOLS}) > 1
    assert len({r["single_token"][0] for r in o}) > 1
    with pytest.raises(ValueError, match="distinct"):
        round_orders(["a", "a"], 2, 0)
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        round_orders(names, 0, 0)


class _Clock:
    """A fake ``time.perf_counter`` that each forward of a model advances by that model's cost: the time a
    timed call measures is then exactly what that model ran (no real time is asserted)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def charge(self, model, cost, log, name):
        def hook(_, args, kwargs):
            self.now += cost
            ids = args[0] if args else kwargs.get("input_ids")
            log.append((name, ids.shape[1], kwargs.get("use_cache")))

        return model.register_forward_pre_hook(hook, with_kwargs=True)


def test_interleaved_rounds_time_every_model_once_per_round_in_the_seeded_order(monkeypatch):
    models = {"a": tiny_llama(0), "b": tiny_llama(1), "c": tiny_llama(2)}
    cost = {"a": 1.0, "b": 3.0, "c": 7.0}
    clock, log = _Clock(), []
    monkeypatch.setattr(tp.time, "perf_counter", clock)
    handles = [clock.charge(m, cost[n], log, n) for n, m in models.items()]
    models["b"].train()
    try:
        r = interleaved_throughput(models, PROMPT, rounds=4, seed=7, new_tokens=2, calls=3, warmup=1)
    finally:
        for h in handles:
            h.remove()
    assert models["b"].training and not models["a"].training  # each model's mode as it was
    assert r["orders"] == round_orders(list(models), 4, 7) and r["rounds"] == 4 and r["seed"] == 7
    # warm-up: one call of each protocol per model; then each round, per protocol, one call per model in order
    warm = [n for n, *_ in log[:len(models) * 3]]  # per model: 1 single-token forward + generate's 2 forwards
    assert warm == ["a", "a", "a", "b", "b", "b", "c", "c", "c"]
    timed = [n for n, *_ in log[len(models) * 3:]]
    want = []
    for per in r["orders"]:
        want += [n for n in per["single_token"] for _ in range(3)] + [n for n in per["decode"] for _ in range(2)]
    assert timed == want
    for n, m in r["models"].items():
        # each round's time is this model's own calls (attributed to the right model, one entry per round)
        assert m["single_token"]["times_s"] == pytest.approx([3 * cost[n]] * 4)
        assert m["decode"]["times_s"] == pytest.approx([2 * cost[n]] * 4)
        assert m["single_token"]["calls"] == 3 and m["decode"]["new_tokens"] == 2


def test_interleaved_rounds_refuse_bad_settings(model):
    with pytest.raises(ValueError, match="rounds >= 1"):
        interleaved_throughput({"a": model}, PROMPT, rounds=0, seed=0)
    with pytest.raises(ValueError, match=r"must be \(1, P\)"):
        interleaved_throughput({"a": model}, torch.tensor([1, 2]), rounds=2, seed=0)
    with pytest.raises(ValueError, match="at least one model"):
        interleaved_throughput({}, PROMPT, rounds=2, seed=0)
