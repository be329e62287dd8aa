"""Batch-1 matvec on this CPU: dense fp32 (``torch.nn.functional.linear``, weights cycled through ≥ 64 MiB of
copies so they stream from DRAM, not the 32 MiB L3) vs ``caldera.kernels.cpu.codes_matmul`` on random E8P codes
with the int8-LUT C kernel (``impl="native"``) and the Numba kernel. Prints min / median ms, ns per 8-weight code
and GB/s. Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/cpu_matvec.py`` (numbers in
caldera/kernels/README.md).
"""

import time

import torch

from caldera.kernels import cpu

torch.manual_seed(0)


def best(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[0], ts[len(ts) // 2]


def run_shape(n, d):
    m = d // 8
    copies = max(1, (64 << 20) // (n * d * 4))
    Ws = [torch.randn(n, d) for _ in range(copies)]
    cs = [torch.randint(0, 1 << 16, (n, m), dtype=torch.int32).to(torch.uint16) for _ in range(max(1, copies // 16))]
    x = torch.randn(1, d)
    it = {"d": 0, "c": 0}

    def dense():
        it["d"] = (it["d"] + 1) % len(Ws)
        return torch.nn.functional.linear(x, Ws[it["d"]])

    def native():
        it["c"] = (it["c"] + 1) % len(cs)
        return cpu.codes_matmul(x, cs[it["c"]], 0.3, impl="native")

    def numba():
        return cpu.codes_matmul(x, cs[0], 0.3, impl="numba")

    reps = 30 if n * d < 5e6 else 10
    for name, f in [("dense_fp32", dense), ("native_lut8", native), ("numba", numba)]:
        mn, med = best(f, reps)
        print(
            f"{n}x{d} {name:12s} min {mn * 1e3:7.3f} ms med {med * 1e3:7.3f} ms  ns/code {mn / (n * m) * 1e9:5.2f}"
            f"  code GB/s {n * m * 2 / mn / 1e9:5.2f}  dense-bytes GB/s {n * d * 4 / mn / 1e9:5.1f}",
            flush=True,
        )


for shape in [(576, 1536), (1536, 576), (4096, 4096), (4096, 11008)]:
    run_shape(*shape)
