"""Measure the per-component costs that `caldera cost` predicts from (:mod:`caldera.experiments.planning.cost`: its
components, laws and fit), on one device: each component timed with the engine's own functions on synthetic inputs
(:func:`caldera.synthetic.llm_like`, a mid-run state from a one-iteration decomposition). Run by
``benchmarks/measure_costs.py`` and the ``costs`` stage of ``benchmarks/gpu_acceptance.py``."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from caldera.algorithm import matmul_precision
from caldera.experiments.planning.cost import FORMAT, LAWS, fit, forward_flops_per_token


def _timed(fn: Callable[[], Any], device: torch.device, repeats: int, clock=time.perf_counter) -> float:
    """Best of ``repeats`` timed calls after one untimed warm-up (first-call costs: allocations, LAPACK and
    thread-pool start-up, which a long job pays once). ``clock``: wall time by default; ``time.process_time``
    with one thread measures the work alone on a shared machine."""
    fn()
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, clock() - t0)
    return best


def _engine_seconds(device: torch.device, n: int, d: int, k: int, repeats: int, clock) -> dict[str, float]:
    """Seconds of each engine component at (n, d) with rank k (a mid-run state: one decomposition done)."""
    from caldera.algorithm.config import CalderaConfig
    from caldera.algorithm.decomposition import HessianContext, caldera_decompose, hessian_update
    from caldera.algorithm.ldl import block_ldl
    from caldera.algorithm.ldlq import ldlq_quantize
    from caldera.algorithm.lplr import lplr_factorize
    from caldera.algorithm.regression import top_k_svd, warm_top_k_svd
    from caldera.metrics import sq_frobenius
    from caldera.quantizers import E8P, get_quantizer
    from caldera.synthetic import llm_like

    q4 = get_quantizer("e8p-rvq4")
    W, H = (x.to(device) for x in llm_like(n, d, seed=0))
    cfg = CalderaConfig.preset("paper", rank=k, l_bits=4, r_bits=4)
    ctx = HessianContext.prepare(H, rht=True, seed=cfg.seed, sigma_reg=cfg.sigma_reg)
    dec = caldera_decompose(W, H, CalderaConfig.preset("paper", rank=k, outer_iters=1, inner_iters=1), context=ctx)
    Wr = dec.rht.rotate_W(W)
    A = Wr - dec.Q
    Y = ctx.sqrt.times_half(A)
    L, R = dec.L, dec.R
    gen = torch.Generator(device=device).manual_seed(2)

    def err():  # as the engine forms them (caldera.algorithm.decomposition._decompose): triangular products with M
        E = torch.addmm(ctx.sqrt.times_half(A), L, ctx.sqrt.times_half(R), alpha=-1.0)
        return sq_frobenius(E) ** 0.5

    def lplr(t_in):
        g = torch.Generator(device=device).manual_seed(3)
        return lambda: lplr_factorize(A, ctx.sqrt, k, q4, q4, t_in, Y=Y, svd="randomized", generator=g)

    fns = {
        "prepare": lambda: HessianContext.prepare(H, rht=True, seed=cfg.seed, sigma_reg=cfg.sigma_reg),
        "ldlq": lambda: ldlq_quantize(Wr - L @ R, ctx.H_rot, E8P(), ldl=ctx.ldl),
        "hessian_update": lambda: block_ldl(hessian_update(ctx.H_rot, L, R, 0.01, M=ctx.sqrt.half)),
        "error": err,
        "svd_exact": lambda: top_k_svd(Y, k, method="exact", generator=gen),
        "svd_randomized": lambda: top_k_svd(Y, k, method="randomized", generator=gen),
        "svd_gram": lambda: warm_top_k_svd(Y, k, None),
    }
    # the float32 arithmetic caldera_decompose gives these tensors under the paper's default fp32_matmul="auto"
    with matmul_precision.scoped(cfg.fp32_matmul, device):
        out = {name: _timed(fn, device, repeats, clock) for name, fn in fns.items()}
        # one LPLR inner iteration: the difference of T_in = 9 and T_in = 1 over 8, both with the (cheap)
        # randomized SVD so that its run-to-run noise does not swamp the difference
        out["lplr_iter"] = max(_timed(lplr(9), device, repeats, clock) - _timed(lplr(1), device, repeats, clock),
                               1e-6) / 8
    return out


def _accumulate_seconds(device: torch.device, rows: int, d: int, repeats: int, clock) -> float:
    from caldera.pipeline.hessians import HessianAccumulator

    X = torch.randn(rows, d, device=device)
    acc = HessianAccumulator(d, device=device)
    return _timed(lambda: acc.update(X), device, repeats, clock)


def _forward_seconds(device: torch.device, h: int, tokens: int, T: int, repeats: int, clock) -> tuple[float, float]:
    """(seconds, FLOPs per token) of a LLaMA decoder layer of width h over ``tokens`` tokens in windows of T."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    lc = LlamaConfig(hidden_size=h, intermediate_size=int(h * 2.6875), num_attention_heads=h // 64,
                     num_key_value_heads=h // 64, max_position_embeddings=T, attn_implementation="sdpa")
    layer = LlamaDecoderLayer(lc, 0).to(device).eval()
    x = torch.randn(tokens // T, T, h, device=device)
    pos = torch.arange(T, device=device)[None].expand(tokens // T, T)
    pe = LlamaRotaryEmbedding(lc).to(device)(x, pos)
    with torch.no_grad():
        s = _timed(lambda: layer(x, position_embeddings=pe, attention_mask=None, position_ids=pos), device,
                   repeats, clock)
    return s, forward_flops_per_token(h, lc.intermediate_size, h, h, T)


def measure_components(
    device: str | torch.device = "cpu",
    shapes: Sequence[tuple[int, int]] = ((512, 512), (512, 1024), (1024, 1024)),
    k: int = 64,
    repeats: int = 1,
    model_parts: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    forward_widths: Sequence[int] = (256, 512),
    forward_tokens: int = 2048,
) -> dict[str, Any]:
    """Time every component (module docstring) once per shape on ``device`` with the engine's own functions
    (inputs: :func:`caldera.synthetic.llm_like`, a mid-run state from a one-iteration decomposition), and fit
    the laws. Returns the costs dict (``{"format", "device", "threads", "torch", "points", "components"}``).
    ``model_parts=False`` skips the decoder-layer forward and the Hessian accumulation (engine only); the
    forward is timed for LLaMA layers of the hidden sizes ``forward_widths`` (multiples of 64) over
    ``forward_tokens`` tokens in windows of ``min(512, forward_tokens)``."""
    from caldera.algorithm.config import CalderaConfig

    device = torch.device(device)
    points: dict[str, list[dict[str, Any]]] = {name: [] for name in LAWS}
    for n, d in shapes:
        for name, s in _engine_seconds(device, n, d, k, repeats, clock).items():
            points[name].append({"n": n, "d": d, "k": k, "s": s})
        if model_parts:
            rows = 4 * n
            points["hessian_accumulate"].append(
                {"n": rows, "d": d, "k": 0, "s": _accumulate_seconds(device, rows, d, repeats, clock)})
    for h in forward_widths if model_parts else ():
        s, per_token = _forward_seconds(device, h, forward_tokens, min(512, forward_tokens), repeats, clock)
        points["forward"].append({"n": forward_tokens, "d": per_token, "k": 0, "s": s})
    return {
        "format": FORMAT,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "fp32_matmul": matmul_precision.resolve(CalderaConfig().fp32_matmul, device),  # what _engine_seconds ran
        "torch": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "points": points,
        "components": {name: {"terms": [t for t, _ in LAWS[name]], "coef": fit(name, pts)}
                       for name, pts in points.items() if pts},
    }


#: pytest-benchmark names of benchmarks/test_bench_paper_shapes.py -> component
_BENCH = {"test_prepare": "prepare", "test_ldlq": "ldlq", "test_hessian_update": "hessian_update",
          "test_error": "error", "test_svd-exact": "svd_exact", "test_svd-randomized": "svd_randomized",
          "test_svd-gram": "svd_gram"}


def points_from_benchmark(path: str | Path, k: int = 256, t_in: int = 10) -> dict[str, list[dict[str, Any]]]:
    """Component points from a pytest-benchmark JSON of ``benchmarks/test_bench_paper_shapes.py`` (paper
    shapes, rank ``k``): its prepare, ldlq, hessian_update, error and svd runs, and ``lplr_iter`` = (lplr − exact SVD) /
    T_in at each shape."""
    data = json.loads(Path(path).read_text())
    pts: dict[str, list[dict[str, Any]]] = {}
    by_shape: dict[tuple[int, int], dict[str, float]] = {}
    for b in data["benchmarks"]:
        base, _, param = b["name"].partition("[")
        n, d = b["extra_info"]["shape"]
        method = b["extra_info"].get("method")
        key = f"{base}-{method}" if method else base
        by_shape.setdefault((n, d), {})[key] = b["stats"]["mean"]
        if key in _BENCH:
            pts.setdefault(_BENCH[key], []).append({"n": n, "d": d, "k": k, "s": b["stats"]["mean"],
                                                    "from": str(path)})
    for (n, d), t in by_shape.items():
        if "test_lplr" in t and "test_svd-exact" in t and t["test_lplr"] > t["test_svd-exact"]:
            pts.setdefault("lplr_iter", []).append({"n": n, "d": d, "k": k, "from": str(path),
                                                    "s": (t["test_lplr"] - t["test_svd-exact"]) / t_in})
    return pts
