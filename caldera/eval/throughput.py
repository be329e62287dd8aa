"""Batch-1 decoding throughput, two protocols, dense and compressed measured in the same run.

1. **Decoding** (what a user sees): ``model.generate`` from a short prompt (batch 1), greedy, with the KV
   cache, exactly ``new_tokens`` new tokens (``min_new_tokens = max_new_tokens``, so EOS cannot stop it
   early). ``warmup`` untimed calls, then ``runs`` timed calls; the figure is ``new_tokens / median(time)``.
   The time includes the prompt's prefill (a few tokens by default).
2. **Single-token forward** (the authors' ``eval_throughput.ipynb`` protocol, authors-code.md §6): repeated
   ``model(token)`` on one token, batch 1, no KV cache carried between calls (so it measures the latency of
   one forward of a length-1 sequence, not true decoding). ``warmup`` untimed calls, then ``runs`` timed
   blocks of ``calls`` calls; the figure is ``calls / median(block time)``.

:func:`interleaved_throughput` times several models in randomized interleaved rounds: each round times every
model once per protocol (one ``generate`` call, one block of ``calls`` single-token forwards), the models in an
order shuffled per round and protocol by a seeded generator (:func:`round_orders`). A model's time in round r sits
beside every other model's time in the same round, so a slow stretch of the machine falls on all of them alike and
the per-round ratio of two models cancels it; the shuffle keeps a fixed position in the round (first after the
previous round's last model, say) from favouring one model.

On CUDA every timed region is bracketed by ``torch.cuda.synchronize()``. Nothing here changes thread
settings; pin them (``torch.set_num_threads``) before calling if the machine is shared.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import torch
from torch import nn

#: the two protocols, in the order a round times them (the paper's first)
PROTOCOLS = ("single_token", "decode")


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _check(runs: int, warmup: int, what: str = "runs", **positive: int) -> None:
    if runs < 1 or warmup < 0:
        raise ValueError(f"need {what} >= 1 and warmup >= 0, got {what}={runs}, warmup={warmup}")
    for k, v in positive.items():
        if v < 1:
            raise ValueError(f"{k} must be >= 1, got {v}")


def _generate_kwargs(model: nn.Module, ids: torch.Tensor, new_tokens: int) -> dict[str, Any]:
    pad = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
    if pad is None:
        pad = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(pad, (list, tuple)):
        pad = pad[0]
    return dict(
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        pad_token_id=0 if pad is None else pad,
    )


def _timed_generate(model: nn.Module, ids: torch.Tensor, kw: dict[str, Any], device: torch.device) -> float:
    """Seconds of one ``generate`` call (checked to produce exactly ``max_new_tokens`` tokens)."""
    _sync(device)
    t0 = time.perf_counter()
    out = model.generate(ids, **kw)
    _sync(device)
    dt = time.perf_counter() - t0
    if out.shape[1] - ids.shape[1] != kw["max_new_tokens"]:
        raise RuntimeError(f"generate produced {out.shape[1] - ids.shape[1]} tokens, not {kw['max_new_tokens']}")
    return dt


def _timed_forwards(model: nn.Module, tok: torch.Tensor, calls: int, device: torch.device) -> float:
    """Seconds of one block of ``calls`` single-token forwards without cache."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        model(tok, use_cache=False)
    _sync(device)
    return time.perf_counter() - t0


@torch.inference_mode()
def decode_throughput(
    model: nn.Module, prompt_ids: torch.Tensor, new_tokens: int = 32, runs: int = 5, warmup: int = 1
) -> dict[str, Any]:
    """Greedy batch-1 generation with KV cache; ``prompt_ids`` (1, P) int64. See the module docstring."""
    _check(runs, warmup, new_tokens=new_tokens)
    if prompt_ids.ndim != 2 or prompt_ids.shape[0] != 1:
        raise ValueError(f"prompt_ids must be (1, P) (batch 1), got {tuple(prompt_ids.shape)}")
    device = _device(model)
    ids = prompt_ids.to(device)
    kw = _generate_kwargs(model, ids, new_tokens)
    was_training = model.training
    model.eval()
    try:
        for _ in range(warmup):
            model.generate(ids, **kw)
        times = [_timed_generate(model, ids, kw, device) for _ in range(runs)]
    finally:
        model.train(was_training)
    med = statistics.median(times)
    return {
        "protocol": "generate-kv-cache",
        "tokens_per_s": new_tokens / med,
        "median_s": med,
        "times_s": times,
        "new_tokens": new_tokens,
        "prompt_len": int(ids.shape[1]),
        "runs": runs,
        "warmup": warmup,
    }


@torch.inference_mode()
def single_token_throughput(
    model: nn.Module, token_id: int = 1, calls: int = 20, runs: int = 5, warmup: int = 3
) -> dict[str, Any]:
    """Authors' protocol: repeated ``model(token)`` (1, 1) without cache. See the module docstring."""
    _check(runs, warmup, calls=calls)
    device = _device(model)
    tok = torch.tensor([[int(token_id)]], device=device)
    was_training = model.training
    model.eval()
    try:
        for _ in range(warmup):
            model(tok, use_cache=False)
        times = [_timed_forwards(model, tok, calls, device) for _ in range(runs)]
    finally:
        model.train(was_training)
    med = statistics.median(times)
    return {
        "protocol": "single-token-forward",
        "tokens_per_s": calls / med,
        "s_per_token": med / calls,
        "times_s": times,
        "calls": calls,
        "runs": runs,
        "warmup": warmup,
    }


def compare_throughput(
    models: dict[str, nn.Module],
    prompt_ids: torch.Tensor,
    *,
    new_tokens: int = 32,
    runs: int = 5,
    warmup: int = 1,
    calls: int = 20,
) -> dict[str, Any]:
    """Both protocols for every model of ``models`` (e.g. ``{"dense": ..., "compressed": ...}``), one after
    the other in the same process, plus each model's speed relative to the first one."""
    out: dict[str, Any] = {
        "device": str(_device(next(iter(models.values())))),
        "torch_threads": torch.get_num_threads(),
        "models": {},
    }
    token = int(prompt_ids[0, -1])
    for name, m in models.items():
        out["models"][name] = {
            "decode": decode_throughput(m, prompt_ids, new_tokens=new_tokens, runs=runs, warmup=warmup),
            "single_token": single_token_throughput(m, token, calls=calls, runs=runs, warmup=max(warmup, 1)),
        }
    first = next(iter(out["models"].values()))
    for r in out["models"].values():
        for proto in ("decode", "single_token"):
            r[proto]["relative_to_first"] = r[proto]["tokens_per_s"] / first[proto]["tokens_per_s"]
    return out


def round_orders(names: list[str], rounds: int, seed: int) -> list[dict[str, list[str]]]:
    """The order in which each round times the models, per protocol: ``rounds`` entries ``{protocol: a
    permutation of names}``, every permutation drawn by one ``random.Random(seed)`` (the same seed gives the same
    orders)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"names must be distinct and non-empty, got {names}")
    rng = random.Random(int(seed))
    out = []
    for _ in range(rounds):
        per = {}
        for proto in PROTOCOLS:
            order = list(names)
            rng.shuffle(order)
            per[proto] = order
        out.append(per)
    return out


@torch.inference_mode()
def interleaved_throughput(
    models: dict[str, nn.Module],
    prompt_ids: torch.Tensor,
    *,
    rounds: int,
    seed: int,
    new_tokens: int = 16,
    calls: int = 8,
    warmup: int = 1,
) -> dict[str, Any]:
    """Both protocols for every model of ``models``, in ``rounds`` randomized interleaved rounds (module
    docstring). First ``warmup`` untimed calls of each protocol per model; then each round, for each protocol,
    one timed call per model in that round's order (:func:`round_orders` of ``seed``).

    Returns ``{"rounds", "seed", "orders", "models": {name: {protocol: {"times_s": [one per round], ...}}}}``;
    ``times_s[r]`` of every model is from round r (what a paired comparison pairs). Single-token: one block of
    ``calls`` forwards of ``prompt_ids``' last token per round; decode: one ``generate`` of ``new_tokens``."""
    _check(rounds, warmup, "rounds", new_tokens=new_tokens, calls=calls)
    if prompt_ids.ndim != 2 or prompt_ids.shape[0] != 1:
        raise ValueError(f"prompt_ids must be (1, P) (batch 1), got {tuple(prompt_ids.shape)}")
    if not models:
        raise ValueError("interleaved_throughput needs at least one model")
    names = list(models)
    orders = round_orders(names, rounds, seed)
    setup = {}
    for name, m in models.items():
        device = _device(m)
        ids = prompt_ids.to(device)
        setup[name] = (device, ids, _generate_kwargs(m, ids, new_tokens), ids[:, -1:].clone())
    modes = {name: m.training for name, m in models.items()}
    times = {name: {p: [] for p in PROTOCOLS} for name in names}
    try:
        for m in models.values():
            m.eval()
        for name, m in models.items():
            device, ids, kw, tok = setup[name]
            for _ in range(warmup):
                m(tok, use_cache=False)
                m.generate(ids, **kw)
        for per in orders:
            for proto in PROTOCOLS:
                for name in per[proto]:
                    device, ids, kw, tok = setup[name]
                    m = models[name]
                    dt = (_timed_forwards(m, tok, calls, device) if proto == "single_token"
                          else _timed_generate(m, ids, kw, device))
                    times[name][proto].append(dt)
    finally:
        for name, m in models.items():
            m.train(modes[name])
    out: dict[str, Any] = {"rounds": rounds, "seed": int(seed), "warmup": warmup, "orders": orders, "models": {}}
    for name in names:
        out["models"][name] = {
            "single_token": {"protocol": "single-token-forward", "times_s": times[name]["single_token"],
                             "calls": calls},
            "decode": {"protocol": "generate-kv-cache", "times_s": times[name]["decode"],
                       "new_tokens": new_tokens, "prompt_len": int(prompt_ids.shape[1])},
        }
    return out
