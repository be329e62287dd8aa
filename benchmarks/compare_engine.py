"""Old-vs-new engine timing at the paper's shapes: time per outer iteration and error.

Usage (one code tree per run; ``CALDERA_ROOT`` picks which ``caldera`` package is imported, by default the
tree that holds this script)::

    CALDERA_ROOT=/path/to/tree python benchmarks/compare_engine.py --shapes 4096x4096 --outer 2 --out x.json

Inputs: ``caldera.synthetic.llm_like(n, d, seed=0)`` (the same (W, H) for every tree). Settings: the
``paper`` preset with rank 256, 4-bit factors, T_in = 10, the config seeds ``--seeds`` and ``--outer`` outer
iterations (15 is the paper's T_out; iteration 0 runs without the Hessian update, later ones with it, so a run is
``prepare + it0 + 14 · it1``). Prints and writes JSON: preparation time (regularize, RHT, factorizations of
H), the wall and process CPU time of every outer iteration, and the relative data-aware error after them.

The process starts the way the ``caldera`` command does: ``GOMP_SPINCOUNT`` limited before torch loads
(``caldera.openmp``, whichever tree is measured); ``--omp-spin=default`` keeps libgomp's own busy-wait.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

# the tree to measure: CALDERA_ROOT, else the tree this script lives in (never an installed copy)
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
root = os.environ.get("CALDERA_ROOT") or here
sys.path.insert(0, root)


def _limit_spin() -> dict:
    """This checkout's ``caldera.openmp.limit_spin`` (what the ``caldera`` command and the workflow's jobs do before
    torch loads), loaded by path so that CALDERA_ROOT's package stays the one measured."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_caldera_openmp", os.path.join(here, "caldera", "openmp.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.limit_spin()


def _spin_arg(argv: list[str]) -> str:
    """``--omp-spin`` from the command line, read before torch loads (libgomp reads its environment then)."""
    import argparse

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--omp-spin", choices=["limited", "default"], default="limited")
    return pre.parse_known_args(argv)[0].omp_spin


# --omp-spin default: libgomp's own busy-wait (how the engine ran before caldera.openmp); else the limited one
if _spin_arg(sys.argv[1:]) == "limited":
    _limit_spin()

import torch  # noqa: E402

import caldera  # noqa: E402
from caldera import CalderaConfig, caldera_decompose  # noqa: E402
from caldera.algorithm.decomposition import HessianContext  # noqa: E402
from caldera.synthetic import llm_like  # noqa: E402


def run(n: int, d: int, outer: int, svd: str | None, seed: int = 0, *, device: str = "cpu", rank: int = 256,
        inner: int = 10) -> dict:
    """One decomposition of ``llm_like(n, d, seed=0)`` on ``device`` (the ``paper`` preset, 4-bit factors; rank
    256 and T_in 10 unless given): the timings and errors of the module docstring."""
    W, H = (t.to(device) for t in llm_like(n, d, seed=0))
    over = {"svd": svd} if svd else {}
    cfg = CalderaConfig.preset(
        "paper", rank=rank, l_bits=4, r_bits=4, outer_iters=outer, inner_iters=inner, seed=seed, **over
    )
    sync = torch.cuda.synchronize if W.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    ctx = HessianContext.prepare(H, rht=cfg.rht, seed=cfg.seed, sigma_reg=cfg.sigma_reg)
    sync()
    prep = time.perf_counter() - t0
    marks = [time.perf_counter()]
    cpu = [time.process_time()]

    def tick(t: int) -> None:
        sync()
        marks.append(time.perf_counter())
        cpu.append(time.process_time())

    dec = caldera_decompose(W, H, cfg, context=ctx, progress=tick)
    its = [b - a for a, b in zip(marks, marks[1:])]
    cpu_its = [b - a for a, b in zip(cpu, cpu[1:])]
    return {
        "shape": [n, d], "config": cfg.to_dict(), "prepare_s": prep, "outer_iteration_s": its,
        "outer_iteration_cpu_s": cpu_its,
        "error": dec.error, "errors": [e["error"] for e in dec.error_trace],
        # the float32 arithmetic that ran (caldera.algorithm.matmul_precision; trees before it: IEEE float32, no key)
        "fp32_matmul": dec.config.get("fp32_matmul", "ieee"),
        "extrapolated_15x10_s": prep + its[0] + 14 * its[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096,11008x4096,4096x11008")
    ap.add_argument("--outer", type=int, default=2)
    ap.add_argument("--svd", default=None)
    ap.add_argument("--seeds", default="0", help="the config's seeds (RHT signs, random draws), comma-separated: "
                    "the same (W, H), the compression's own randomness varied")
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--omp-spin", choices=["limited", "default"], default="limited",
                    help="limited: GOMP_SPINCOUNT as caldera.openmp sets it (the caldera command and the workflow "
                    "do, before torch loads); default: libgomp's own busy-wait")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    res = {"caldera": caldera.__file__, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "machine": platform.processor() or platform.machine(), "omp_spin": a.omp_spin,
           "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"), "runs": []}
    for s in a.shapes.split(","):
        n, d = map(int, s.split("x"))
        for seed in map(int, a.seeds.split(",")):
            r = run(n, d, a.outer, a.svd, seed)
            print(json.dumps({k: v for k, v in r.items() if k != "config"}), flush=True)
            res["runs"].append(r)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
