"""How much of a CALDERA decomposition depends on the CPU's instruction-set dispatch (caldera.numerics).

Compresses all 7 matrices of SmolLM2-135M layers 5/15/25 with the default run's 4-bit CALDERA config (k 16, T 2/2,
Q-first, no Hessian update, randomized SVD, seed 0), one thread, once per environment, each in a fresh process
(the dispatchers choose when torch loads), and prints per environment the seconds, the mean data-aware error and
the share of E8P codes that differ from the native run::

    python benchmarks/numerics_sensitivity.py --hessians results/mini/hessians/smollm2

``--hessians``: a Hessian folder of a run (``layer_005.safetensors`` …). The model comes from the asset cache
(``caldera assets``). Numbers measured with it are in ``paper_tables/reseed/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from caldera.pipeline.linears import GROUP_OF, PATH_OF, SHORT_NAMES

ENVS = {
    "native": {},
    "native (again)": {},
    "torch AVX2 kernels": {"ATEN_CPU_CAPABILITY": "avx2"},
    "torch baseline kernels": {"ATEN_CPU_CAPABILITY": "default"},
    "MKL AVX2 branch": {"MKL_CBWR": "AVX2"},
    "numerics: avx2": "avx2",
    "numerics: avx2 (again)": "avx2",
    "numerics: portable": "portable",
}
LAYERS = (5, 15, 25)
#: path inside a decoder layer -> the Hessian group it reads, for all 7 linear layers in the paper's order
MATRICES = {PATH_OF[s]: GROUP_OF[s] for s in SHORT_NAMES}


def _one(hessians: str, out: str) -> None:
    """Child process: the 21 decompositions; codes to ``out``; JSON summary on stdout."""
    import time

    import torch
    from safetensors import safe_open

    from caldera.algorithm.config import CalderaConfig
    from caldera.algorithm.decomposition import caldera_decompose
    from caldera.pipeline.assets import ensure_smollm2
    from caldera.pipeline.hessian_files import load_layer_hessians

    torch.set_num_threads(1)
    f = safe_open(str(Path(ensure_smollm2()) / "model.safetensors"), "pt")
    cfg = CalderaConfig(rank=16, l_bits=4, r_bits=4, outer_iters=2, inner_iters=2, update_order="Q-first",
                        hessian_update=False, best_tracking="outer", svd="randomized", seed=0)
    caldera_decompose(torch.randn(64, 64), torch.eye(64), cfg)  # JIT warm-up, not timed
    codes, errs, secs = {}, [], 0.0
    for layer in LAYERS:
        H = load_layer_hessians(Path(hessians) / f"layer_{layer:03d}.safetensors")
        for name, key in MATRICES.items():
            W = f.get_tensor(f"model.layers.{layer}.{name}.weight").float()
            t = time.perf_counter()
            d = caldera_decompose(W, H[key], cfg)
            secs += time.perf_counter() - t
            codes[f"{layer}.{name}"] = d.Q_codes.clone()
            errs.append(d.error_trace[-1]["error"])
    torch.save(codes, out)
    print(json.dumps({"seconds": secs, "mean_error": sum(errs) / len(errs),
                      "torch_isa": torch.backends.cpu.get_cpu_capability()}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hessians", required=True)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _one(a.hessians, a.child)
    import torch

    from caldera import numerics

    base = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE_ENV and k != "MKL_ENABLE_INSTRUCTIONS"}
    rows, ref = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in ENVS.items():
            env = dict(base)
            if isinstance(extra, str):
                numerics.apply(extra, env)
            else:
                env.update(extra)
            out = str(Path(tmp) / f"{len(rows)}.pt")
            r = subprocess.run([sys.executable, __file__, "--hessians", a.hessians, "--child", out], env=env,
                               capture_output=True, text=True, check=True)
            summary = json.loads(r.stdout.strip().splitlines()[-1])
            codes = torch.load(out)
            ref = ref or codes
            diff = [(codes[k] != ref[k]).float().mean().item() for k in ref]
            rows.append((label, summary, sum(diff) / len(diff), max(diff), sum(x == 0 for x in diff)))
    print("| environment | torch ISA | seconds | mean error | codes differing from native (mean / max) | "
          "matrices identical |\n|---|---|---|---|---|---|")
    for label, s, mean, mx, same in rows:
        print(f"| {label} | {s['torch_isa']} | {s['seconds']:.1f} | {s['mean_error']:.6f} | {100 * mean:.1f} % / "
              f"{100 * mx:.1f} % | {same} of {len(MATRICES) * len(LAYERS)} |")


if __name__ == "__main__":
    main()
