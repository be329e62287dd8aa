"""Benchmarks of the randomized Hadamard transform (``caldera.algorithm.hadamard``), group ``rht``.

* ``rotate_W`` of a 4096×4096 float32 matrix (Llama-2 7B attention shape; both sides, K = 1, factors 64·64);
* one-sided ``hadamard_transform`` of the same matrix along the last dim;
* ``rotate_W`` at the default model's largest shape, 1536×576 (factors 12·128 and 36·16).

FLOPs: a Kronecker factor of size f costs 2·f flops per element it is applied to
(``kronecker_factors(n)``); sign flips are not counted.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.conftest import record_floor
from caldera.algorithm.hadamard import RHT, hadamard_transform, kronecker_factors


def transform_flops(n: int, elements: int) -> float:
    """FLOPs of one transform of size n applied to ``elements`` entries (elements/n vectors)."""
    return float(sum(2 * f for f in kronecker_factors(n)) * elements)


def rotate_W_flops(n: int, d: int) -> float:
    return transform_flops(d, n * d) + transform_flops(n, n * d)


@pytest.mark.benchmark(group="rht")
@pytest.mark.parametrize("n,d", [(4096, 4096), (1536, 576)])
def test_rotate_W(benchmark, gemm_gflops, n, d):
    rht = RHT.random(n, d, seed=0)
    W = torch.randn(n, d, generator=torch.Generator().manual_seed(1))
    Wr = benchmark(rht.rotate_W, W)
    assert Wr.shape == (n, d) and Wr.dtype == torch.float32
    record_floor(
        benchmark,
        rotate_W_flops(n, d),
        gemm_gflops,
        factors_n=kronecker_factors(n),
        factors_d=kronecker_factors(d),
    )


@pytest.mark.benchmark(group="rht")
def test_hadamard_transform_one_side_4096(benchmark, gemm_gflops):
    x = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(2))
    y = benchmark(hadamard_transform, x)
    assert y.shape == x.shape
    record_floor(benchmark, transform_flops(4096, x.numel()), gemm_gflops, factors=kronecker_factors(4096))
