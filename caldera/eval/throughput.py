"""Batch-1 decoding throughput, two protocols, dense and compressed measured in the same run.

1. **Decoding** (what a user sees): ``model.generate`` from a short prompt (batch 1), greedy, with the KV
   cache, exactly ``new_tokens`` new tokens (``min_new_tokens = max_new_tokens``, so EOS cannot stop it
   early). ``warmup`` untimed calls, then ``runs`` timed calls; the figure is ``new_tokens / median(time)``.
   The time includes the prompt's prefill (a few tokens by default).
2. **Single-token forward** (the authors' ``eval_throughput.ipynb`` protocol, authors-code.md §6): repeated
   ``model(token)`` on one token, batch 1, no KV cache carried between calls (so it measures the latency of
   one forward of a length-1 sequence, not true decoding). ``warmup`` untimed calls, then ``runs`` timed
   blocks of ``calls`` calls; the figure is ``calls / median(block time)``.

On CUDA every timed region is bracketed by ``torch.cuda.synchronize()``. Nothing here changes thread
settings; pin them (``torch.set_num_threads``) before calling if the machine is shared.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import nn


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _check(runs: int, warmup: int, **positive: int) -> None:
    if runs < 1 or warmup < 0:
        raise ValueError(f"need runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    for k, v in positive.items():
        if v < 1:
            raise ValueError(f"{k} must be >= 1, got {v}")


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
    pad = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
    if pad is None:
        pad = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(pad, (list, tuple)):
        pad = pad[0]
    kw = dict(
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        pad_token_id=0 if pad is None else pad,
    )
    was_training = model.training
    model.eval()
    try:
        for _ in range(warmup):
            model.generate(ids, **kw)
        times = []
        for _ in range(runs):
            _sync(device)
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            _sync(device)
            times.append(time.perf_counter() - t0)
            if out.shape[1] - ids.shape[1] != new_tokens:
                raise RuntimeError(f"generate produced {out.shape[1] - ids.shape[1]} tokens, not {new_tokens}")
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
        times = []
        for _ in range(runs):
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                model(tok, use_cache=False)
            _sync(device)
            times.append(time.perf_counter() - t0)
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
