"""End-to-end batch-1 generation on this CPU: the default model dense vs compressed.

SmolLM2-135M (the offline asset the default run uses) in fp32, dense, and with every linear except ``lm_head``
as a random-code ``CompressedLinear`` (E8P 2-bit, RHT, rank-8 16-bit factors: conftest ``random_compressed``)
on the fused C layer (``kernel="auto"`` on CPU) and on the dequantize-and-cache reference path. Groups
``generation-<protocol>``: ``single_token`` (the authors' protocol: 4 ``model(token)`` forwards without cache
per round) and ``decode`` (``generate`` with the KV cache, 8 greedy tokens per round). ``extra_info`` records
``tokens_per_s`` from the median round and ``model_tensor_mb`` (parameters, buffers and dequantized caches
after the rounds: a compressed model on the fused path stays at its stored size). The variants share one
process, so this compares speed, not peak RSS (Table 6 of the workflow measures RSS per variant in its own job).
Run: ``OMP_NUM_THREADS=1 pytest benchmarks/test_bench_generation.py --benchmark-enable``.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

VARIANTS = {"dense": None, "caldera_r8_fused": "auto", "caldera_r8_reference": "reference"}
NEW_TOKENS, CALLS, ROUNDS = 8, 4, 5


@pytest.fixture(scope="session")
def models(random_compressed_fn):
    from transformers import AutoModelForCausalLM

    from caldera.pipeline.assets import ensure_smollm2

    try:
        path = ensure_smollm2()
    except Exception as e:  # noqa: BLE001 - offline without the cached asset
        pytest.skip(f"SmolLM2-135M asset unavailable: {e}")
    dense = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return {v: dense if k is None else random_compressed_fn(dense, 8, kernel=k).eval() for v, k in VARIANTS.items()}


@pytest.mark.parametrize("protocol", ["single_token", "decode"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_generation(benchmark, models, variant, protocol):
    from caldera.experiments.jobs.throughput import tensor_bytes

    model = models[variant]
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 253, 1046]])
    tok = ids[:, -1:]
    if protocol == "decode":
        tokens = NEW_TOKENS
        fn = lambda: model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    else:
        tokens = CALLS
        fn = lambda: [model(tok, use_cache=False) for _ in range(CALLS)]
    times: list[float] = []

    def timed():
        with torch.inference_mode():
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)

    timed()  # warm-up: builds the reference path's caches, prepares the fused calls
    times.clear()
    benchmark.group = f"generation-{protocol}"
    benchmark.pedantic(timed, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    benchmark.extra_info.update(
        {
            "tokens_per_s": tokens / statistics.median(times),
            "tokens_per_round": tokens,
            "model_tensor_mb": tensor_bytes(model) / 2**20,
            "threads": torch.get_num_threads(),
        }
    )
