"""Compressed matrix–vector products on this CPU beside their dense baselines (LLaMa-2 7B's matrix shapes).

Groups ``kernels-{n}x{d}-B{B}``: dense fp32 ``x Wᵀ`` (torch), the 2-bit E8P kernel reading codes
(``caldera.kernels.cpu.codes_matmul``, QuIP#-style Q only; ``e8p_2bit`` = the int8-LUT C kernel where it built,
``e8p_2bit_numba`` = the Numba fallback), E8P + rank-64 16-bit factors, and E8P + rank-64
E8P-RVQ4 (4-bit) factor codes (``caldera.kernels.fused.codes_linear``), and the whole compressed layer as one C
call with both randomized Hadamard transforms (``fused_lr16_rht`` / ``fused_lr4_rht``:
``caldera.kernels.native.fused_layer``, what ``CompressedLinear`` runs on CPU). Codes are uniform random (the kernels
take the same time for any codes, up to cache effects of the codebook lookups). Each records in ``extra_info``:
``bytes`` the product must read/write, ``flops`` (2·B·n·d plus the low-rank part), the machine's measured
``mem_bw_gbps`` (a 256 MiB copy) and ``gemm_gflops`` (conftest), and ``gbps`` / ``frac_mem_bw`` from its own
median time. Big shapes run few rounds. Run: ``pytest benchmarks/test_bench_kernels.py --benchmark-enable``.
GPU numbers come from ``benchmarks/gpu_kernels.py`` (not a pytest file: CI has no GPU).
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from caldera.kernels.fused import Factors, codes_linear

cpu = pytest.importorskip("caldera.kernels.cpu")

SHAPES = [(576, 1536), (1536, 576), (4096, 4096), (11008, 4096), (4096, 11008)]
RANK = 64


@pytest.fixture(scope="session")
def mem_bw_gbps() -> float:
    a = torch.empty(1 << 28, dtype=torch.uint8)
    b = torch.empty_like(a)
    b.copy_(a)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        ts.append(time.perf_counter() - t0)
    return 2 * a.numel() / statistics.median(ts) / 1e9


def _case(n, d, B, kind):
    g = torch.Generator().manual_seed(n + d + B)
    x = torch.randn(B, d, generator=g)
    if kind == "dense_fp32":
        W = torch.randn(n, d, generator=g)
        return (lambda: x @ W.T), n * d * 4, 0
    codes = torch.randint(0, 1 << 16, (n, d // 8), generator=g, dtype=torch.int32).to(torch.uint16)
    scale = torch.tensor(0.3)
    if kind in ("e8p_2bit", "e8p_2bit_numba"):
        impl = "numba" if kind == "e8p_2bit_numba" else "auto"
        return (lambda: cpu.codes_matmul(x, codes, scale, impl=impl)), n * d // 4, 0
    f16 = Factors(L=torch.randn(n, RANK, generator=g).half(), R=torch.randn(RANK, d, generator=g).half())
    if kind == "e8p_2bit_lr16":
        lr_bytes = 2 * RANK * (n + d)
        return (lambda: codes_linear(x, codes, scale, f16, "numba")), n * d // 4 + lr_bytes, 2 * RANK * (n + d)
    rvq = lambda m: torch.randint(0, 1 << 32, (RANK, m), generator=g, dtype=torch.int64).to(torch.uint32)
    f = Factors(L_codes=rvq(n // 8), L_scale=scale, R_codes=rvq(d // 8), R_scale=scale, quantizer="e8p-rvq4")
    if kind.startswith("fused"):
        from caldera.kernels import native

        if not native.available():
            pytest.skip("the C kernels did not build")
        signs = lambda k: (torch.randint(0, 2, (k,), generator=g) * 2 - 1).to(torch.int8)
        lr, lr_bytes = (f16, 2 * RANK * (n + d)) if kind == "fused_lr16_rht" else (f, RANK * (n + d) // 2)
        layer = native.fused_layer(codes, scale, signs(d), signs(n), lr, None, None)
        return (lambda: layer(x)), n * d // 4 + lr_bytes + n + d, 2 * RANK * (n + d)
    return (lambda: codes_linear(x, codes, scale, f, "numba")), n * d // 4 + RANK * (n + d) // 2, 2 * RANK * (n + d)


KINDS = ["dense_fp32", "e8p_2bit", "e8p_2bit_numba", "e8p_2bit_lr16", "e8p_2bit_lr4", "fused_lr16_rht", "fused_lr4_rht"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("B", [1, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_matvec(benchmark, shape, B, kind, mem_bw_gbps, gemm_gflops):
    n, d = shape
    fn, wbytes, lr_flops = _case(n, d, B, kind)
    benchmark.group = f"kernels-{n}x{d}-B{B}"
    times: list[float] = []

    def timed():
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)

    fn()  # warm-up (Numba compilation is cached on disk)
    rounds = 3 if n * d > 4_000_000 else 20
    benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=0)
    total = wbytes + 4 * B * (n + d)
    med = statistics.median(times)
    benchmark.extra_info.update(
        {
            "bytes": total,
            "flops": 2 * B * n * d + B * lr_flops,
            "mem_bw_gbps": mem_bw_gbps,
            "gemm_gflops": gemm_gflops,
            "seconds_median": med,
            "gbps": total / med / 1e9,
            "frac_mem_bw": total / med / 1e9 / mem_bw_gbps,
            "threads": torch.get_num_threads(),
        }
    )
