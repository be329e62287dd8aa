# ruff: noqa: B008, B023  -- each make() closure clones its own copy of the weights on purpose
"""GPU measurement of the Triton E8P kernels (run by hand where a CUDA device exists; not a test).

    PYTHONPATH=. python benchmarks/gpu_kernels.py --out gpu_kernels.json

Measures the device's HBM bandwidth (a 1 GiB device-to-device copy: 2 bytes moved per byte copied) and, for
each (out × in) shape of LLaMa-2 7B at batch 1 and 4: dense fp32/fp16/bf16 ``x Wᵀ`` (torch), the 2-bit E8P
kernel alone (QuIP#-style) and E8P + rank-64 16-bit factors (``t = x Rᵀ`` in torch, then the fused kernel).
Times are kernel times from ``triton.testing.do_bench_cudagraph`` (launch overhead removed by a CUDA graph)
over enough distinct copies of the weights (≥ 256 MB in all, cycled) that none is served from the 50 MB L2;
``eager_us`` is ``do_bench`` of one eager call (Python launch overhead included, L2 flushed). Bytes are those
the product must read and write; ``frac_hbm`` = (bytes / time) / measured HBM bandwidth.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
from triton.testing import do_bench, do_bench_cudagraph

from caldera.kernels.e8p_decode import codes_matmul_reference
from caldera.kernels.triton_e8p import e8p_matmul

SHAPES = [(576, 1536), (1536, 576), (4096, 4096), (11008, 4096), (4096, 11008)]


def hbm_bandwidth() -> float:
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), warmup=50, rep=300)
    return 2 * a.numel() / (ms * 1e-3)


def per_call(make, wbytes: int) -> float:
    """Median ms of one call, in a CUDA graph, cycling over copies of the weights (see the docstring).
    ``make()`` returns a fresh closure over its own copy of the weights (lambda defaults: B008 is intended)."""
    copies = max(2, min(64, -(-(256 << 20) // max(wbytes, 1))))
    fns = [make() for _ in range(copies)]
    return do_bench_cudagraph(lambda: [f() for f in fns], rep=50) / copies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rank", type=int, default=64)
    args = ap.parse_args()
    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(0)
    bw = hbm_bandwidth()
    res: dict = {"device": torch.cuda.get_device_name(), "hbm_bytes_per_s": bw, "rows": [], "sweep": []}
    print(f"HBM copy bandwidth {bw / 1e9:.0f} GB/s", flush=True)
    k = args.rank

    def setup(n, d, B):
        codes = torch.randint(0, 1 << 16, (n, d // 8), generator=g, dtype=torch.int32).to(dev)
        c16 = codes.to(torch.int16)
        x = torch.randn(B, d, generator=g).to(dev)
        L = (torch.randn(n, k, generator=g) / 8).half().to(dev)
        R = (torch.randn(k, d, generator=g) / 8).half().to(dev)
        return codes, c16, x, L, R

    # config sweep on the target shape, batch 1
    n, d = 4096, 11008
    codes, c16, x, L, R = setup(n, d, 1)
    sc = torch.tensor(0.5, device=dev)
    best = None
    configs = list(itertools.product((16, 32, 64), (16, 32, 64), (1, 2, 4), (4, 8)))
    for bn, bm, sp, nw in configs:
        try:
            cf = dict(block_n=bn, block_m=bm, split=sp, num_warps=nw)
            ms = per_call(lambda cf=cf: lambda c=c16.clone(): e8p_matmul(x, c, sc, **cf), n * d // 4)
        except Exception as e:  # noqa: BLE001 - a config that fails to compile is skipped and recorded
            res["sweep"].append({"cfg": [bn, bm, sp, nw], "error": str(e)[:200]})
            continue
        res["sweep"].append({"cfg": [bn, bm, sp, nw], "ms": ms})
        if best is None or ms < best[0]:
            best = (ms, cf)
    print("best config", best, flush=True)
    res["best_cfg"] = best[1]
    cfg = best[1]

    for (n, d), B in itertools.product(SHAPES, (1, 4)):
        codes, c16, x, L, R = setup(n, d, B)
        W32 = torch.randn(n, d, generator=g).to(dev)
        W16, Wbf = W32.half(), W32.bfloat16()
        xh, xb = x.half(), x.bfloat16()
        # correctness on the device
        y = e8p_matmul(x, c16, 0.5, L, (x.half() @ R.T).float(), **cfg)
        ref = codes_matmul_reference(x.cpu(), codes.cpu(), 0.5).to(dev) + (x.half() @ R.T).float() @ L.float().T
        err = float((y - ref).abs().max() / ref.abs().max())
        sp_best = None
        for sp in (1, 2, 4, 8):
            ms = per_call(lambda sp=sp: lambda c=c16.clone(): e8p_matmul(x, c, sc, **{**cfg, "split": sp}), n * d // 4)
            if sp_best is None or ms < sp_best[0]:
                sp_best = (ms, sp)
        c2 = {**cfg, "split": sp_best[1]}
        cands = {
            "dense_fp32": (lambda: lambda W=W32.clone(): x @ W.T, n * d * 4),
            "dense_fp16": (lambda: lambda W=W16.clone(): xh @ W.T, n * d * 2),
            "dense_bf16": (lambda: lambda W=Wbf.clone(): xb @ W.T, n * d * 2),
            "e8p_2bit": (lambda: lambda c=c16.clone(): e8p_matmul(x, c, sc, **c2), n * d // 4),
            "e8p_2bit_lr16": (
                lambda: (
                    lambda c=c16.clone(), L=L.clone(), R=R.clone(): e8p_matmul(x, c, sc, L, (xh @ R.T).float(), **c2)
                ),
                n * d // 4 + 2 * k * (n + d),
            ),
        }
        for name, (make, wbytes) in cands.items():
            ms = per_call(make, wbytes)
            eager = do_bench(make()) * 1e3
            total = wbytes + B * d * 4 + B * n * 4
            row = {
                "shape": [n, d], "B": B, "kernel": name, "ms": ms, "eager_us": eager, "bytes": total,
                "flops": 2 * B * n * d,
                "GBps": total / (ms * 1e-3) / 1e9, "frac_hbm": total / (ms * 1e-3) / bw,
                "max_rel_err": err if name.startswith("e8p") else None, "cfg": c2 if name.startswith("e8p") else None,
            }  # fmt: skip
            res["rows"].append(row)
            print(
                f"{n}x{d} B={B} {name:14s} {ms * 1e3:8.1f} us {row['GBps']:7.0f} GB/s {row['frac_hbm']:.2f} HBM  "
                f"eager {eager:7.1f} us",
                flush=True,
            )
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
