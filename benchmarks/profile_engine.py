"""Where one CALDERA decomposition spends its time, on any device: the library functions (cProfile) and the torch
operators and kernel launches (``torch.profiler``).

    python benchmarks/profile_engine.py --shape 4096x4096 --device cuda --out prof.txt
    python benchmarks/profile_engine.py --shape 256x256 --rank 32 --device cpu --out prof.txt   # a quick look

Inputs: ``caldera.synthetic.llm_like(n, d, seed=0)``; settings: the ``paper`` preset, 4-bit factors, ``--rank``,
``--inner``, ``--outer`` and ``--svd`` (one outer iteration by default: the Q step (LDLQ) and the LR step (LPLR)
once each).
A warm-up decomposition at a small shape runs first (compilation, CUDA start-up and cuBLAS/cuSOLVER handles are
not counted). The report: wall time; the ``--top`` (30) ``caldera`` functions with the most cumulative time (cProfile,
wall clock: on a GPU a function's time includes the syncs it waits on); the torch operators by self time on the
CPU and on the device; the number of kernel launches and of host-device syncs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from caldera import CalderaConfig, caldera_decompose  # noqa: E402
from caldera.synthetic import llm_like  # noqa: E402


def _config(rank: int, inner: int, outer: int, svd: str = "exact") -> CalderaConfig:
    return CalderaConfig.preset("paper", rank=rank, l_bits=4, r_bits=4, inner_iters=inner, outer_iters=outer, svd=svd)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def profile(n: int, d: int, device: str, rank: int, inner: int, outer: int, svd: str = "exact",
            top: int = 30) -> str:
    """The report of the module docstring, as text."""
    Ww, Hw = (t.to(device) for t in llm_like(64, 64, seed=1))
    caldera_decompose(Ww, Hw, _config(8, 2, 1))  # warm-up
    W, H = (t.to(device) for t in llm_like(n, d, seed=0))
    cfg = _config(rank, inner, outer, svd)
    _sync(device)
    t0 = time.perf_counter()
    caldera_decompose(W, H, cfg)
    _sync(device)
    plain = time.perf_counter() - t0

    pr = cProfile.Profile()
    pr.enable()
    caldera_decompose(W, H, cfg)
    _sync(device)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats("caldera", top)
    functions = s.getvalue()

    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        caldera_decompose(W, H, cfg)
        _sync(device)
    ka = prof.key_averages()
    launches = sum(e.count for e in ka if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    syncs = sum(e.count for e in ka if "Synchronize" in e.key or e.key in ("cudaMemcpyAsync", "cudaStreamSynchronize"))
    ops_cpu = ka.table(sort_by="self_cpu_time_total", row_limit=25)
    ops_dev = ka.table(sort_by="self_cuda_time_total", row_limit=25) if device == "cuda" else ""
    head = (
        f"# profile_engine: {n}x{d} on {device}, rank {rank}, T_in {inner}, T_out {outer}, svd {svd}; "
        f"torch {torch.__version__}\n"
        f"wall {plain:.4g} s (unprofiled); kernel launches {launches}; memcpy/sync calls {syncs}\n"
    )
    parts = [head, "## caldera functions (cProfile, cumulative)", functions, "## torch operators, CPU self time",
             ops_cpu, "## torch operators, device self time", ops_dev]  # fmt: skip
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4096x4096", help="NxD (default 4096x4096)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rank", type=int, default=256)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--outer", type=int, default=1)
    ap.add_argument("--svd", default="exact", choices=["exact", "randomized", "warm"], help="LPLR's top-k SVD")
    ap.add_argument("--out", help="write the report here as well as to stdout")
    ap.add_argument("--top", type=int, default=30, help="how many caldera functions the report lists (default 30)")
    a = ap.parse_args(argv)
    try:
        n, d = (int(x) for x in a.shape.lower().split("x"))
    except ValueError:
        ap.error(f"--shape {a.shape!r}: expected NxD, e.g. 4096x4096")
    text = profile(n, d, a.device, a.rank, a.inner, a.outer, a.svd, a.top)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
