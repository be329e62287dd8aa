"""Throughput of the E8P codebook search on a (4096, 4096) float32 matrix (2,097,152 8-vectors).

Each benchmark times its own calls (``time.perf_counter`` around every round) and records
``extra_info["weights"]`` and ``extra_info["weights_per_s"]`` (weights / median seconds per call), so the
rate is available whether or not pytest-benchmark's own timer is enabled; ``weights_per_cpu_s`` and
``load_avg_1min`` help to read results from a shared machine. The E8P quantize benchmark also
records how often the search needs its exact norm-12 pass (``norm12_exact_frac``: fraction of
(vector, shift) pairs) at the codebook's design scale.

Run: ``pytest benchmarks/test_bench_quantizers.py --benchmark-enable``.
"""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch

from caldera.quantizers import e8p as e8p_mod
from caldera.quantizers import e8p_search, get_quantizer
from caldera.quantizers.e8p_codebook import cpu_lookup

N = 4096


@pytest.fixture(scope="module")
def W() -> torch.Tensor:
    """(4096, 4096) N(0, 1) matrix scaled to the E8P design RMS 1.03 (codebook units)."""
    w = torch.randn(N, N, generator=torch.Generator().manual_seed(0))
    return w * (1.03 / w.pow(2).mean().sqrt())


def _run(benchmark, fn, arg, rounds: int) -> tuple[object, int]:
    """Benchmark ``fn(arg)``; returns the last output and the number of timed calls."""
    times: list[float] = []
    cpu: list[float] = []

    def timed():
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn(arg)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        return out

    out = benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=0)
    benchmark.extra_info["weights"] = N * N
    benchmark.extra_info["seconds_median"] = statistics.median(times)
    benchmark.extra_info["weights_per_s"] = N * N / statistics.median(times)
    # CPU seconds of the whole process (all threads): on a shared machine wall time also counts waiting
    benchmark.extra_info["cpu_seconds_median"] = statistics.median(cpu)
    benchmark.extra_info["weights_per_cpu_s"] = N * N / statistics.median(cpu)
    benchmark.extra_info["load_avg_1min"] = os.getloadavg()[0]
    benchmark.extra_info["torch_threads"] = torch.get_num_threads()
    return out, len(times)


@pytest.mark.benchmark(group="e8p")
def test_e8p_quantize_torch(benchmark, W: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectorised torch search (reference backend), with the share of its exact norm-12 pass."""
    q = e8p_mod.E8P(backend="torch")
    hard = [0]
    finish = e8p_search._norm12_finish

    def counting(x, cols, gain, code, t):
        hard[0] += cols.numel()
        return finish(x, cols, gain, code, t)

    monkeypatch.setattr(e8p_search, "_norm12_finish", counting)
    codes, calls = _run(benchmark, q.quantize, W, rounds=3)
    benchmark.extra_info["norm12_exact_frac"] = hard[0] / (calls * 2 * W.numel() // 8)
    assert codes.shape == (N, N // 8) and codes.dtype == torch.int32


@pytest.mark.benchmark(group="e8p")
def test_e8p_quantize_numba(benchmark, W: torch.Tensor) -> None:
    """The compiled search (default backend) on the same matrix."""
    pytest.importorskip("numba")
    q = e8p_mod.E8P(backend="numba")
    q.quantize(W[:8])  # compile / load the cached kernel outside the timing
    codes, _ = _run(benchmark, q.quantize, W, rounds=3)
    assert codes.shape == (N, N // 8) and codes.dtype == torch.int32


@pytest.mark.benchmark(group="e8p-ldlq-block")
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_e8p_quantize_ldlq_block(benchmark, W: torch.Tensor, backend: str) -> None:
    """One BlockLDLQ step's call: 8 columns of a 576-row matrix (SmolLM2's hidden size), 576 8-vectors.
    Compression makes thousands of these per layer, so the per-call cost is what matters there."""
    if backend == "numba":
        pytest.importorskip("numba")
    q = e8p_mod.E8P(backend=backend)
    x = W[:576, :8].contiguous()
    q.quantize(x)
    codes = benchmark.pedantic(q.quantize, args=(x,), rounds=200, iterations=1, warmup_rounds=5)
    benchmark.extra_info["torch_threads"] = torch.get_num_threads()
    assert codes.shape == (576, 1)


@pytest.mark.benchmark(group="e8p")
def test_e8p_round(benchmark, W: torch.Tensor) -> None:
    q = get_quantizer("e8p")
    out, _ = _run(benchmark, q.round, W, rounds=3)
    assert out.shape == W.shape


@pytest.mark.benchmark(group="e8p")
def test_e8p_dequantize(benchmark, W: torch.Tensor) -> None:
    q = get_quantizer("e8p")
    codes = q.quantize(W)
    out, _ = _run(benchmark, q.dequantize, codes, rounds=5)
    assert out.shape == W.shape and out.dtype == torch.float32


@pytest.mark.benchmark(group="e8p")
def test_e8p_rvq4_quantize(benchmark, W: torch.Tensor) -> None:
    q = get_quantizer("e8p-rvq4")
    codes, _ = _run(benchmark, q.quantize, W, rounds=2)
    assert codes.shape == (N, N // 8) and codes.dtype == torch.int64


@pytest.mark.benchmark(group="e8p")
def test_e8p_codebook_build(benchmark) -> None:
    """Building the E8P codebook and its search lookup arrays (once per process; was a timed assert in the unit
    tests)."""

    def build():
        cpu_lookup.cache_clear()
        return cpu_lookup()

    t = benchmark.pedantic(build, rounds=3, iterations=1, warmup_rounds=0)
    assert t.codebook.shape == (65536, 8)
