"""Shared benchmark helpers: the machine's measured fp32 GEMM rate and FLOP-floor bookkeeping.

Every benchmark records ``flops`` (its own count of the dominant floating-point work), the machine's
``gemm_gflops`` (median of 5 timed 2048×2048 fp32 matmuls) and ``floor_s = flops / gemm rate``, so a result
reads as a multiple of the compute floor: ``stats.median / floor_s``.
"""

from __future__ import annotations

import time

import pytest
import torch


@pytest.fixture(scope="session")
def gemm_gflops() -> float:
    a = torch.randn(2048, 2048)
    b = torch.randn(2048, 2048)
    a @ b  # warm-up
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * 2048**3 / times[2] / 1e9


def record_floor(benchmark, flops: float, gemm_gflops: float, **extra) -> None:
    benchmark.extra_info.update(
        {"flops": flops, "gemm_gflops": gemm_gflops, "floor_s": flops / (gemm_gflops * 1e9), **extra}
    )
