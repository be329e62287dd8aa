"""Shared benchmark helpers: the machine's measured fp32 GEMM rate and FLOP-floor bookkeeping.

Every benchmark records ``flops`` (its own count of the dominant floating-point work), the machine's
``gemm_gflops`` (median of 5 timed 2048×2048 fp32 matmuls) and ``floor_s = flops / gemm rate``, so a result
reads as a multiple of the compute floor: ``stats.median / floor_s``.
"""

from __future__ import annotations

import copy
import time

from caldera import openmp  # torch-free

openmp.limit_spin()  # as the caldera command does, before torch loads (caldera.openmp)

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


def measure_gemm_gflops(device: torch.device | str = "cpu") -> float:
    """float32 GEMM rate (GFLOP/s) on ``device``: the median of 5 timed 2048×2048 products after a warm-up, in
    whatever float32 arithmetic is in force (``caldera.algorithm.matmul_precision.scoped`` picks the engine's)."""
    device = torch.device(device)
    a = torch.randn(2048, 2048, device=device)
    b = torch.randn(2048, 2048, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    a @ b  # warm-up
    times = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return 2 * 2048**3 / times[2] / 1e9


@pytest.fixture(scope="session")
def gemm_gflops() -> float:
    return measure_gemm_gflops("cpu")


def record_floor(benchmark, flops: float, gemm_gflops: float, **extra) -> None:
    benchmark.extra_info.update(
        {"flops": flops, "gemm_gflops": gemm_gflops, "floor_s": flops / (gemm_gflops * 1e9), **extra}
    )


def random_compressed(dense: nn.Module, rank: int, kernel: str = "auto", cache: bool = True, seed: int = 0):
    """A deep copy of ``dense`` whose linears (not ``lm_head``) are ``CompressedLinear`` layers of the same shape
    with random E8P codes, random RHT signs and rank-``rank`` 16-bit factors. Inference time does not depend on
    the code values, so this measures the compressed path of any model without compressing it first."""
    from caldera.nn.compressed_linear import CompressedLinear
    from caldera.pipeline.checkpoint import replace_module
    from caldera.synthetic import random_compressed_layer

    model = copy.deepcopy(dense)
    linears = [(n, x) for n, x in model.named_modules() if isinstance(x, nn.Linear) and "lm_head" not in n]
    for i, (name, lin) in enumerate(linears):
        n, d = lin.weight.shape
        meta, ts = random_compressed_layer(n, d, rank, "float16" if rank else None, bias=False, seed=seed + i,
                                           q_scale=0.02, factor_scale=0.01)
        replace_module(model, name, CompressedLinear.from_tensors(meta, ts, kernel=kernel, cache_dequantized=cache))
    return model


@pytest.fixture(scope="session")
def random_compressed_fn():
    """:func:`random_compressed` for benchmark files (conftest functions are not importable under importlib)."""
    return random_compressed
