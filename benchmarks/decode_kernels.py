"""Batch-1 decode tokens/s (``caldera.eval.throughput.decode_throughput``, 16 new tokens, median of 3): a dense
model vs the same model with every linear except ``lm_head`` replaced by a ``CompressedLinear`` of the same shape
(random E8P codes, RHT, rank-64 16-bit factors; the timing does not depend on the code values): the kernel path
(the fused C layer where it built; ``CALDERA_NO_NATIVE=1`` measures the Numba fallback), the reference path
with its fp32 cache, and the reference path without cache. Each result is printed as soon as measured.

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/decode_kernels.py MODEL_DIR [CONFIG ...]`` (a dense HF
folder, e.g. the cached SmolLM2-135M; CONFIGs from ``dense kernel reference reference_nocache``, default all).
"""

import sys

import torch
from conftest import random_compressed  # benchmarks/conftest.py (this folder is on sys.path)
from transformers import AutoModelForCausalLM

from caldera.eval.throughput import decode_throughput

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


for name in [c for c in chosen if c != "dense"]:
    kernel, cache = CONFIGS[name]
    mm = random_compressed(m, 64, kernel, cache)
    show(f"caldera_rank64_fp16_{kernel}_cache{cache}", tps(mm))
