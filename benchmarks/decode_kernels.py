"""Batch-1 decode tokens/s (``caldera.eval.throughput.decode_throughput``, 16 new tokens, median of 3): a dense
model vs the same model with every linear except ``lm_head`` replaced by a ``CompressedLinear`` of the same shape
(random E8P codes, RHT, rank-64 16-bit factors; the timing does not depend on the code values): the Numba kernel
path (the int8-LUT C kernel where it built; ``CALDERA_NO_NATIVE=1`` measures the Numba fallback), the reference
path with its fp32 cache, and the reference path without cache. Each result is printed as soon as measured.

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/decode_kernels.py MODEL_DIR [CONFIG ...]`` (a dense HF
folder, e.g. the cached SmolLM2-135M; CONFIGs from ``dense kernel reference reference_nocache``, default all).
"""

import copy
import sys

import torch
from transformers import AutoModelForCausalLM

from caldera.eval.throughput import decode_throughput
from caldera.pipeline.checkpoint import replace_module
from caldera.pipeline.compressed_linear import CompressedLinear

torch.manual_seed(0)
path = sys.argv[1]
m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 253, 1046]])


def tps(model):
    with torch.no_grad():
        return decode_throughput(model, ids, new_tokens=16, runs=3, warmup=1)


CONFIGS = {"kernel": ("kernel", True), "reference": ("reference", True), "reference_nocache": ("reference", False)}
chosen = sys.argv[2:] or ["dense", *CONFIGS]
if unknown := set(chosen) - {"dense", *CONFIGS}:
    sys.exit(f"unknown configurations {sorted(unknown)}; choose from dense {' '.join(CONFIGS)}")


def show(name, v):
    print(name, {k: x for k, x in v.items() if "tok" in k or "median" in k} if isinstance(v, dict) else v, flush=True)


if "dense" in chosen:
    show("dense", tps(m))


def comp(kernel, cache, rank):
    g = torch.Generator().manual_seed(0)
    for name, lin in [(n, x) for n, x in m.named_modules() if isinstance(x, torch.nn.Linear) and "lm_head" not in n]:
        n, d = lin.weight.shape
        meta = {
            "version": 1,
            "method": "caldera",
            "in_features": d,
            "out_features": n,
            "q_quantizer": "e8p",
            "q_codes_dtype": "int32",
            "rht": True,
            "rank": rank,
            "ft_rank": 0,
            "lr_format": "float16" if rank else None,
            "l_quantizer": None,
            "r_quantizer": None,
            "lr_codes_dtype": None,
            "signs_trainable": False,
            "bias": False,
            "ft_dtype": None,
        }
        ts = {
            "Q_codes": torch.randint(0, 1 << 16, (n, d // 8), generator=g).to(torch.uint16),
            "Q_scale": torch.tensor(0.01),
            "S_U": torch.ones(d, dtype=torch.int8),
            "S_V": torch.ones(n, dtype=torch.int8),
        }
        if rank:
            ts.update(
                L_16=(torch.randn(n, rank, generator=g) / 100).half(),
                R_16=(torch.randn(rank, d, generator=g) / 100).half(),
            )
        yield name, CompressedLinear.from_tensors(meta, ts, kernel=kernel, cache_dequantized=cache)


for name in [c for c in chosen if c != "dense"]:
    kernel, cache = CONFIGS[name]
    mm = copy.deepcopy(m)
    for lname, mod in comp(kernel, cache, 64):
        replace_module(mm, lname, mod)
    show(f"caldera_rank64_fp16_{kernel}_cache{cache}", tps(mm))
