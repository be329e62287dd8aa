"""The cost of a run before it starts: ``caldera cost --configfile config/paper.yaml [--device cpu|cuda]``.

Per rule of the workflow it predicts each job's time and peak memory and sums device-hours per model, from
per-component costs **measured on the named device** (``benchmarks/cost_components.py``, run by
``benchmarks/measure_costs.py``, stored as ``benchmarks/results/costs-<device>.json``) and the scaling law of
each component in the matrix shapes. A device with no measurements is an error saying how to measure, never
a guess.

Components and their laws (n × d = out × in of the matrix, k the rank, T_in LPLR's inner iterations; the
time of a component is ``Σ_j c_j · term_j(shape)`` with the coefficients ``c_j ≥ 0`` fitted to the
measurements at 2–3 sizes, each row weighted by 1/time so relative errors count):

* ``prepare`` — one Hessian context (regularization, RHT of H, Cholesky / LDL / square root of H_rot in
  float64): ``d³`` and ``d²``;
* ``ldlq`` — BlockLDLQ with E8P: the feedback products ``n·d²`` and the E8P search, ``n·d``;
* ``hessian_update`` — App. E.2's H̃ = H − M V Vᵀ Mᵀ and the block LDL of H̃: ``d³`` and ``k·d²``;
* ``error`` — Y = (W − Q) M and the data-aware error after a Q step: ``n·d²``;
* ``svd_exact`` — the top-k SVD of Y by a full SVD: ``max(n,d)·min(n,d)²`` (Golub & Van Loan's R-SVD
  ``6 m n² + 20 n³``);
* ``svd_randomized`` — the randomized range finder: ``n·d·k``;
* ``svd_gram`` — the exact top-k SVD by the smaller Gram matrix's top k + 16 eigenpairs
  (:func:`caldera.algorithm.regression.gram_top_svd`, ``warm_top_k_svd`` without a start or a generator):
  ``max(n,d)·min(n,d)²`` and ``min(n,d)³``; measured and fitted, not part of a decomposition's prediction
  (``svd="warm"`` starts with the range finder, priced from ``svd_randomized`` by :func:`warm_svd_shares`);
* ``lplr_iter`` — one LPLR inner iteration (two least-squares updates and the factor quantization):
  ``k·d² + n·d·k`` and ``k·(n + d)``;
* ``hessian_accumulate`` — ``Σ xxᵀ`` over ``rows`` calibration rows of width d: ``rows·d²``;
* ``forward`` — a decoder-layer forward over ``tokens`` tokens: its FLOPs, ``2·tokens·params_layer +
  4·tokens·T·hidden`` (projections, then attention scores and values over a window of T).

One CALDERA decomposition (Algorithm 1, :func:`caldera.algorithm.decomposition.caldera_decompose`) of an (n, d) matrix
with T_out outer iterations then costs::

    error (the initial Y = W M)
    + T_out · [ldlq + error + svd + T_in · lplr_iter]
    + (T_out − 1) · hessian_update          (iteration 0 has L = 0: no update)

plus one ``prepare`` per Hessian group of a layer (q/k/v share one, gate/up one). Memory is counted from the
shapes and dtypes (formulas in :func:`job_memory`), not measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from caldera.experiments.planning.memory import DEVICE_GB, evaluate_memory, evaluate_streams, job_memory
from caldera.experiments.planning.rules import Rule
from caldera.experiments.planning.workload import dense_eval_bytes, eval_pass_tokens, eval_tokens, shapes_of, vocab_size
from caldera.pipeline.linears import SHORT_NAMES

FORMAT = "caldera-costs/1"
ROOT = Path(__file__).resolve().parents[3]
COSTS_DIR = ROOT / "benchmarks" / "results"

#: component -> basis terms of its law, each a function of (n, d, k); the prediction is Σ c_j term_j
LAWS: dict[str, tuple[tuple[str, Callable[..., float]], ...]] = {
    "prepare": (("d^3", lambda n, d, k: d**3), ("d^2", lambda n, d, k: d**2)),
    "ldlq": (("n d^2", lambda n, d, k: n * d * d), ("n d", lambda n, d, k: n * d)),
    "hessian_update": (("d^3", lambda n, d, k: d**3), ("k d^2", lambda n, d, k: k * d * d)),
    "error": (("n d^2", lambda n, d, k: n * d * d),),
    "svd_exact": (("max min^2", lambda n, d, k: max(n, d) * min(n, d) ** 2),),
    "svd_randomized": (("n d k", lambda n, d, k: n * d * k),),
    "svd_gram": (("max min^2", lambda n, d, k: max(n, d) * min(n, d) ** 2), ("min^3", lambda n, d, k: min(n, d) ** 3)),
    "lplr_iter": (("k d^2 + n d k", lambda n, d, k: k * d * d + n * d * k), ("k (n+d)", lambda n, d, k: k * (n + d))),
    # (rows, d): n = rows
    "hessian_accumulate": (("rows d^2", lambda n, d, k: n * d * d),),
    # n = tokens, d = FLOPs per token (the caller's count), k unused
    "forward": (("flops", lambda n, d, k: n * d),),
}

#: paper figures beside the prediction (§5: "34 A10G-hours" to compress LLaMa-2 7B with CALDERA)
PAPER_GPU_HOURS = {"llama-2-7b": 34.0}

#: layer-streamed evaluation's assumed bandwidths, GB/s: reading the checkpoint's layers (local disk or page
#: cache; once per evaluation pass) and moving the hidden states between host and GPU (pinned-less PCIe copies)
STREAM_READ_GBPS = 1.0
STREAM_PCIE_GBPS = 12.0


# ------------------------------------------------------------------------------------------ fitting


def fit(component: str, points: Sequence[dict[str, Any]]) -> list[float]:
    """Coefficients ``c ≥ 0`` of ``component``'s law from measured points ``{"n", "d", "k", "s"}`` (seconds):
    non-negative least squares on the relative residuals. With fewer points than terms the leading term
    alone is fitted (the rest 0); points of 0.1 ms or less (a timing difference lost in noise) are left out."""
    import numpy as np
    from scipy.optimize import nnls

    terms = LAWS[component]
    # a difference of two timings that came out ≤ 0.1 ms (noise on a loaded machine) carries no information, and
    # with relative weights it would pin the fit to zero
    points = [p for p in points if p["s"] > 1e-4]
    if not points:
        return [0.0] * len(terms)
    use = len(terms) if len(points) >= len(terms) else 1
    A = np.array([[f(p["n"], p["d"], p["k"]) / p["s"] for _, f in terms[:use]] for p in points], dtype=float)
    scale = A.max(axis=0)
    c, _ = nnls(A / scale, np.ones(len(points)))
    return [float(x) for x in c / scale] + [0.0] * (len(terms) - use)


def predict(costs: dict[str, Any], component: str, n: float, d: float, k: float = 0) -> float:
    """Seconds of one ``component`` call at (n, d, k) from the fitted coefficients in ``costs``."""
    c = costs["components"][component]["coef"]
    return sum(ci * f(n, d, k) for ci, (_, f) in zip(c, LAWS[component]))


# ------------------------------------------------------------------------------------------ measuring


def refit(costs: dict[str, Any], extra: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """``costs`` with the points of ``extra`` added and every law refitted."""
    for name, pts in extra.items():
        costs["points"].setdefault(name, []).extend(pts)
    costs["components"] = {name: {"terms": [t for t, _ in LAWS[name]], "coef": fit(name, pts)}
                           for name, pts in costs["points"].items() if pts}
    return costs


def forward_flops_per_token(hidden: int, intermediate: int, q_dim: int, kv_dim: int, window: int) -> float:
    """FLOPs of one decoder layer per token: the seven projections (2 · params) and causal attention over a
    window (2 · window · q_dim for the scores and the values, halved for causality, twice)."""
    params = hidden * (2 * q_dim + 2 * kv_dim) + 3 * hidden * intermediate
    return 2.0 * params + 2.0 * window * q_dim


# ------------------------------------------------------------------------------------------ predictions


def costs_file(device: str) -> Path:
    return COSTS_DIR / f"costs-{device}.json"


def load_costs(device: str, path: str | Path | None = None) -> dict[str, Any]:
    """The measured costs of ``device`` (``cpu`` | ``cuda``); ``FileNotFoundError`` saying how to measure them
    when none were (never invented)."""
    p = Path(path) if path else costs_file(device)
    if not p.is_file():
        raise FileNotFoundError(
            f"no measured component costs for device {device!r} ({p} is missing): on a machine with that device "
            f"run `python benchmarks/measure_costs.py --device {device}` (a few minutes), then `caldera cost` again"
        )
    costs = json.loads(p.read_text())
    if costs.get("format") != FORMAT:
        raise ValueError(f"{p}: not a {FORMAT} file")
    return costs


def decompose_seconds(costs: dict[str, Any], n: int, d: int, cfg: Any) -> float:
    """Predicted seconds of one ``caldera_decompose`` of an (n, d) matrix with CalderaConfig ``cfg``, its
    Hessian context given (module docstring)."""
    k = cfg.rank
    per_outer = predict(costs, "error", n, d, k)
    if cfg.ldlq:
        per_outer += predict(costs, "ldlq", n, d, k)
    svd_total = 0.0
    if k:
        per_outer += cfg.inner_iters * predict(costs, "lplr_iter", n, d, k)
        if cfg.svd == "warm":  # the range finder once, then subspace iterations from the previous basis
            cold, warm = warm_svd_shares()
            svd_total = (cold + (cfg.outer_iters - 1) * warm) * predict(costs, "svd_randomized", n, d, k)
        else:
            svd_total = cfg.outer_iters * predict(
                costs, "svd_randomized" if cfg.svd == "randomized" else "svd_exact", n, d, k)
    updates = (cfg.outer_iters - 1) if (cfg.hessian_update and cfg.ldlq and k) else 0
    return (predict(costs, "error", n, d, k) + cfg.outer_iters * per_outer + svd_total
            + updates * predict(costs, "hessian_update", n, d, k))


def warm_svd_shares() -> tuple[float, float]:
    """Costs of ``svd="warm"``'s first call (the range finder with ``WARM_COLD_POWER_ITERS``: 2 + 4·q products with
    Y) and of each later call (``WARM_POWER_ITERS`` from the previous basis) relative to the measured randomized SVD
    (4 power iterations: 2 + 4·4 products), by their count of (n, d)·(d, k + p) products."""
    from caldera.algorithm.regression import WARM_COLD_POWER_ITERS, WARM_POWER_ITERS

    return (2 + 4 * WARM_COLD_POWER_ITERS) / (2 + 4 * 4), (2 + 4 * WARM_POWER_ITERS) / (2 + 4 * 4)


def method_matrix_seconds(costs: dict[str, Any], method: str, cfg: Any, n: int, d: int) -> float:
    """Predicted seconds to compress one (n, d) matrix with ``method`` (context excluded). CALDERA: the full
    law; QuIP#: one LDLQ; QuIP#-LR: LDLQ + one exact SVD; LoftQ: its iterations of an exact SVD; others: one
    LDLQ (a lower bound, stated in the output)."""
    from caldera.algorithm.config import CalderaConfig

    if method == "caldera" or isinstance(cfg, CalderaConfig):  # caldera-rank-per-layer: at its budget rank
        return decompose_seconds(costs, n, d, cfg)
    ldlq = predict(costs, "ldlq", n, d, 0) + predict(costs, "error", n, d, 0)
    rank = int(getattr(cfg, "rank", 0) or getattr(cfg, "lr_rank", 0) or 0)
    if method == "quip#-lr":
        return ldlq + predict(costs, "svd_exact", n, d, rank)
    if method == "loftq":
        return int(getattr(cfg, "iters", 5) or 5) * predict(costs, "svd_exact", n, d, rank)
    return ldlq


def stream_seconds(config: dict[str, Any], model_key: str, on_gpu: bool, bytes_per: int = 2) -> float:
    """Seconds a layer-streamed evaluation adds to the forwards (which it shares with the in-memory path):
    every pass reads the whole checkpoint once (:data:`STREAM_READ_GBPS`) and, on a GPU, moves each layer's
    input and output hidden states between host and device (:data:`STREAM_PCIE_GBPS`). Assumes the reads are
    not overlapped with compute and the checkpoint is not in the page cache (an upper bound on both)."""
    h, n_layers = shapes_of(model_key)[1][0], shapes_of(model_key)[2]
    passes = eval_pass_tokens(config)
    read = len(passes) * dense_eval_bytes(model_key, bytes_per) / (STREAM_READ_GBPS * 1e9)
    move = sum(passes) * h * bytes_per * 2 * n_layers / (STREAM_PCIE_GBPS * 1e9) if on_gpu else 0.0
    return read + move


def figure_rules(config: dict[str, Any], costs: dict[str, Any], shape_key: str) -> dict[str, dict[str, Any]]:
    """``ablation_traces`` (Figure 3: every matrix x paper rank x ablation at ``figures.outer_iters``, plus
    QuIP#-LR, in the jobs of :func:`caldera.experiments.planning.figure_plan.figure3_jobs`: the longest job and the
    total) and ``lplr_traces`` (Figure 4: LPLR alone, one job) of the figures' model."""
    from caldera.algorithm.config import CalderaConfig
    from caldera.experiments.planning.figure_plan import figure3_curves, figure3_jobs
    from caldera.experiments.planning.plan import mapped_rank
    from caldera.experiments.planning.settings import FiguresSettings

    fs = FiguresSettings.from_block(config["figures"])
    shapes = dict(zip(SHORT_NAMES, shapes_of(shape_key)[0]))  # caldera.bits.block_shapes' order
    curve_s: dict[str, float] = {}
    for c in figure3_curves(fs):
        n, d = shapes[c["matrix"]]
        if c["method"] == "quip#-lr":
            curve_s[c["id"]] = (predict(costs, "prepare", 0, d, 0) + predict(costs, "ldlq", n, d, 0)
                                + predict(costs, "svd_exact", n, d, c["paper_rank"]))
            continue
        cfg = CalderaConfig.preset(c["method"])
        r = mapped_rank(config, fs.paper_model, c["paper_rank"], cfg.l_bits)
        cfg = cfg.replace(rank=r, outer_iters=fs.outer_iters, svd=cfg.svd if fs.svd is None else fs.svd)
        curve_s[c["id"]] = predict(costs, "prepare", 0, d, 0) + decompose_seconds(costs, n, d, cfg)
    jobs = [sum(curve_s[c] for c in ids) for ids in figure3_jobs(fs).values()]
    t = 0.0
    for name in fs.lplr_matrices:
        n, d = shapes[name]
        t += predict(costs, "prepare", 0, d, 0)
        for paper_rank in fs.paper_ranks:
            t += predict(costs, "svd_exact", n, d, paper_rank) + fs.lplr_inner_iters * predict(
                costs, "lplr_iter", n, d, paper_rank)
    mem = job_memory(Rule.COMPRESS_LAYERS, shape_key, config)
    return {Rule.ABLATION_TRACES: {"jobs": len(jobs), "s_per_job": max(jobs), "total_s": sum(jobs), "mem_gb": mem},
            Rule.LPLR_TRACES: {"jobs": 1, "s_per_job": t, "mem_gb": mem}}


def estimate(config: dict[str, Any], costs: dict[str, Any], device_gb: float | None = None) -> dict[str, Any]:
    """Per model of ``config``: per rule ``{"jobs", "s_per_job", "mem_gb", "hours"}`` and the total hours; plus
    per CALDERA variant its compression hours (the paper's 34 A10G-hours figure is for one such variant).
    ``device_gb``: a job's device memory (default :data:`DEVICE_GB` of the costs' device), which decides whether
    a dense evaluation streams its layers (``stream`` in the evaluate row)."""
    from caldera.experiments.planning.plan import all_variants, has_model_plan, replicate_variants, rhtft_variants

    on_gpu = str(costs["device"]).startswith("cuda")
    if device_gb is None:
        device_gb = DEVICE_GB["cuda" if on_gpu else "cpu"]
    variants = all_variants(config)
    # seed replicates: compressed and evaluated like any variant (perplexity only unless replicates.zeroshot)
    variants.update({r.id: r for reps in replicate_variants(config, variants).values() for r in reps[1:]})
    ft_variants = [ft for ft, _ in rhtft_variants(config).values()]  # evaluated, not compressed again
    replicate_zeroshot = bool((config.get("replicates") or {}).get("zeroshot", False))
    replicate_corpora = (config.get("replicates") or {}).get("corpora")
    out: dict[str, Any] = {}
    for mkey, m in config["models"].items():
        shape_key = m["shapes"]
        shapes, (h, f, heads, kv, hd), n_layers = shapes_of(shape_key)
        layers = config.get("layers") or list(range(m["num_layers"]))
        cal = config["calibration"]
        groups = {"qkv": shapes[0][1], "o": shapes[3][1], "up": shapes[4][1], "down": shapes[6][1]}
        rules: dict[str, dict[str, Any]] = {}
        # hessians: one job; every layer's forward over N·T tokens and the four accumulations
        tokens = cal["n_samples"] * cal["seq_len"]
        per_tok = forward_flops_per_token(h, f, heads * hd, kv * hd, cal["seq_len"])
        s = len(layers) * (predict(costs, "forward", tokens, per_tok)
                           + sum(predict(costs, "hessian_accumulate", tokens, d) for d in groups.values()))
        rules[Rule.HESSIANS] = {"jobs": 1, "s_per_job": s, "mem_gb": job_memory(Rule.HESSIANS, shape_key, config)}
        # compress_layers (compress_variant when the layers are one chunk): per variant, a job per chunk of
        # layers_per_job layers
        per_variant: dict[str, float] = {}
        jobs = 0
        total_s = 0.0
        worst = 0.0
        profiled: list[float] = []  # a model-level method's profile jobs: one LDLQ and a full SVD per matrix
        one_chunk = int(config.get("layers_per_job", 1)) >= len(layers)
        replicate_s: dict[str, float] = {}  # rule replicate: a seed replicate of one chunk, compressed and evaluated
        for v in variants.values():
            if v.model != mkey or v.method == "dense":
                continue
            cfg = v.config
            if has_model_plan(v):
                s_prof = sum(predict(costs, "prepare", 0, d, 0) for d in groups.values()) + sum(
                    predict(costs, "ldlq", n, d, 0) + 2 * predict(costs, "error", n, d, 0)
                    + predict(costs, "svd_exact", n, d, min(n, d)) for n, d in shapes)
                profiled.append(s_prof * len(layers))
            s_layer = sum(predict(costs, "prepare", 0, d, 0) for d in groups.values()) + sum(
                method_matrix_seconds(costs, v.method, cfg, n, d) for n, d in shapes)
            per_variant[v.id] = s_layer * len(layers)
            if one_chunk and v.replicate_of is not None:
                replicate_s[v.id] = s_layer * len(layers)
                continue
            k = int(config.get("layers_per_job", 1))
            jobs += math.ceil(len(layers) / k)
            total_s += s_layer * len(layers)
            worst = max(worst, s_layer * k)
        if jobs:
            # layers of one chunk: rule compress_variant compresses and assembles a variant in one job
            name = Rule.COMPRESS_VARIANT if one_chunk else Rule.COMPRESS_LAYERS
            rules[name] = {"jobs": jobs, "s_per_job": worst, "total_s": total_s,
                           "mem_gb": job_memory(Rule.COMPRESS_LAYERS, shape_key, config)}
        if profiled:
            per_job = max(profiled) * min(int(config.get("layers_per_job", 1)), len(layers)) / len(layers)
            rules[Rule.PROFILE_LAYERS] = {"jobs": len(profiled) * math.ceil(len(layers) / int(config.get(
                "layers_per_job", 1))), "s_per_job": per_job, "total_s": sum(profiled),
                "mem_gb": job_memory(Rule.COMPRESS_LAYERS, shape_key, config)}
        # evaluate: every variant, dense included (layer-streamed when it does not fit the device)
        ev_variants = [v for v in [*variants.values(), *ft_variants] if v.model == mkey]
        T = max(spec["seq_len"] for spec in config["eval"]["ppl"].values())
        per_tok_eval = n_layers * forward_flops_per_token(h, f, heads * hd, kv * hd, T) + 2 * h * vocab_size(shape_key)

        # the forwards of each variant's evaluate job (lm_head included; replicates: perplexity only)
        ev_s = {v.id: predict(costs, "forward", eval_tokens(config, v.replicate_of is None or replicate_zeroshot,
                                                            None if v.replicate_of is None else replicate_corpora),
                              per_tok_eval) for v in ev_variants}
        stream = any(v.method == "dense" for v in ev_variants) and evaluate_streams(config, shape_key, device_gb)
        extra = stream_seconds(config, shape_key, on_gpu) if stream else 0.0  # the dense job's alone
        own = [v for v in ev_variants if v.id not in replicate_s]
        rules[Rule.EVALUATE] = {"jobs": len(own), "s_per_job": max(ev_s[v.id] for v in own) + extra,
                                "stream": stream, "total_s": sum(ev_s[v.id] for v in own) + extra,
                                "mem_gb": evaluate_memory(config, own, shape_key, device_gb)}
        if replicate_s:
            both = {vid: s + ev_s[vid] for vid, s in replicate_s.items()}
            ev_mem = evaluate_memory(config, [variants[vid] for vid in both], shape_key, device_gb)
            comp_mem = job_memory(Rule.COMPRESS_LAYERS, shape_key, config)
            rules[Rule.REPLICATE] = {"jobs": len(both), "s_per_job": max(both.values()),
                                     "total_s": sum(both.values()),
                                     "mem_gb": {k: max(ev_mem[k], comp_mem[k]) for k in ("host", "device")}}
        if mkey == (config.get("figures") or {}).get("model"):
            rules.update(figure_rules(config, costs, shape_key))
        for r in rules.values():
            r["hours"] = r.get("total_s", r["s_per_job"] * r["jobs"]) / 3600
        out[mkey] = {"rules": rules, "hours": sum(r["hours"] for r in rules.values()),
                     "caldera_variant_hours": {vid: s / 3600 for vid, s in per_variant.items()
                                               if variants[vid].method == "caldera"}}
    return out


def duration(seconds: float) -> str:
    """A time with the precision it needs: ``45 s``, ``12.3 min``, ``2.41 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


#: the engine a CUDA cost file must have been measured with to price the device path of this version (BlockLDLQ
#: without host synchronisation, the Triton E8P search and chunk kernels); the acceptance run's ``costs`` stage
#: records it in the file it writes
CUDA_ENGINE = "blockldlq-sync-free"


def config_device(config: dict[str, Any]) -> tuple[str, str]:
    """``(device, why)``: where ``config``'s jobs run, ``cuda`` or ``cpu``, as ``caldera cost`` prices them, and
    the reason in words. The config's ``device`` when it names one; for ``auto`` (the default) a GPU when a model
    comes from the hub (a source that is neither an offline asset ``asset:NAME`` nor a local path, as the paper
    scale's ``meta-llama/...``: a GPU cluster's run), else this machine's CPU."""
    from caldera.pipeline.sources import looks_like_path

    want = str(config.get("device", "auto"))
    if want.startswith("cuda") or want == "cpu":
        return ("cuda" if want.startswith("cuda") else "cpu"), f"the config's device is {want}"
    hub = [m["source"] for m in config["models"].values()
           if isinstance(m.get("source"), str) and not m["source"].startswith("asset:")
           and not looks_like_path(m["source"])]
    if hub:
        return "cuda", (f"the config's device is {want} and its models come from the hub ({', '.join(hub)}): a GPU "
                        "cluster's run")
    return "cpu", f"the config's device is {want} and its models are local: this machine's CPU"


def extrapolation_note(costs: dict[str, Any], profile_path: str | Path) -> str:
    """The line that says a price comes from the component laws, not from a job profile: which file is missing,
    which measurements it extrapolates (device, date, command) and what it leaves out."""
    return (f"No job profile of {costs['device']} ({profile_path} is missing): these prices are extrapolated from "
            f"the component costs measured on {costs.get('device_name', costs['device'])} "
            f"({costs.get('measured_at', '?')}, {costs.get('command', 'benchmarks/measure_costs.py')}) through each "
            "component's scaling law in the matrix shapes; job start-up, model loads and the rules not modelled are "
            "left out.")


def total_line(est: dict[str, Any], unit: str) -> str:
    """The grand total of :func:`estimate` over every model: job time and jobs."""
    hours = sum(e["hours"] for e in est.values())
    jobs = sum(r["jobs"] for e in est.values() for r in e["rules"].values())
    return (f"Total: {duration(hours * 3600)} of {unit} job time in {jobs} jobs over {len(est)} "
            f"model{'s' if len(est) != 1 else ''} (modelled rules)")


def report(config: dict[str, Any], costs: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """The text ``caldera cost`` prints: the header, the grand total, ``notes`` (the device and why, where the
    prices come from: :func:`extrapolation_note`), then per model its rules and hours."""
    est = estimate(config, costs)
    dev = costs["device"]
    unit = "GPU" if dev.startswith("cuda") else f"CPU ({costs['threads']} threads)"
    lines = [f"Predicted cost of `{config.get('name', '?')}` on {costs.get('device_name', dev)} "
             f"({unit} job time; component costs measured {costs.get('measured_at', '?')}, "
             f"torch {costs.get('torch', '?')}, {costs['threads']} threads)", total_line(est, unit), *notes, ""]
    if dev.startswith("cuda") and costs.get("engine") != CUDA_ENGINE:
        lines.insert(1, f"These CUDA costs were measured before this version's device engine ({CUDA_ENGINE}: "
                        "BlockLDLQ without host syncs, the Triton E8P search and chunk kernels) and price the older "
                        "one; `python benchmarks/gpu_acceptance.py --device cuda --out DIR` measures the new ones "
                        "(its `costs` stage), to be copied to benchmarks/results/costs-cuda.json.")
    for mkey, e in est.items():
        lines.append(f"## {mkey}: {duration(e['hours'] * 3600)} of {unit} job time in all")
        lines.append(f"{'rule':<17}{'jobs':>6}{'per job':>12}{'host GB':>10}{'device GB':>11}{'job time':>12}")
        for rule, r in e["rules"].items():
            lines.append(f"{rule:<17}{r['jobs']:>6}{duration(r['s_per_job']):>12}{r['mem_gb']['host']:>10.1f}"
                         f"{r['mem_gb']['device']:>11.1f}{duration(r['hours'] * 3600):>12}"
                         + ("  (dense: layer-streamed)" if r.get("stream") else ""))
        for vid, hrs in e["caldera_variant_hours"].items():
            paper = PAPER_GPU_HOURS.get(mkey)
            beside = f"  (paper: {paper:g} A10G-hours)" if paper and "r256" in vid else ""
            lines.append(f"  compress {vid}: {duration(hrs * 3600)}{beside}")
        lines.append("")
    lines.append(f"Modelled: {', '.join(MODELLED_RULES)}. Not modelled (no prediction): the other rules (assemble, "
                 "selection, fine-tuning, throughput, tables, plots) and each job's start-up (interpreter, imports, "
                 "model load); evaluation counts forwards only (decoding compressed layers on the fly is not "
                 "included). `caldera cost --check TIMINGS` compares with a run's timings.json.")
    for mkey, m in config["models"].items():  # per model: what its shapes need of the measurements
        cov = coverage({**config, "models": {mkey: m}}, costs)
        lines.append(f"{mkey}: components measured at its shapes or beyond: {', '.join(cov['measured']) or 'none'}; "
                     f"extrapolated by their laws: {'; '.join(cov['extrapolated']) or 'none'}.")
    device_gb = DEVICE_GB["cuda" if dev.startswith("cuda") else "cpu"]
    lines.append(f"A dense model over 80 % of a job's device ({device_gb:g} GB; eval.stream_layers) is evaluated "
                 f"layer-streamed: one layer on the device, the hidden states "
                 f"on the host; its time adds one read of the checkpoint per pass at {STREAM_READ_GBPS:g} GB/s"
                 + (f" and the host-device copies of the states at {STREAM_PCIE_GBPS:g} GB/s."
                    if dev.startswith("cuda") else "."))
    return "\n".join(lines)


def coverage(config: dict[str, Any], costs: dict[str, Any]) -> dict[str, list[str]]:
    """Which components' measurements reach this config's shapes (``"measured"``) and which the laws carry beyond
    their largest measured point (``"extrapolated"``, each with the measured and the needed size): the engine
    components by the matrices' n·d, ``hessian_accumulate`` by d, ``forward`` by the FLOPs per token of a
    decoder layer."""
    shapes = [sh for m in config["models"].values() for sh in shapes_of(m["shapes"])[0]]
    need_nd = max(n * d for n, d in shapes)
    need_d = max(d for _, d in shapes)
    flops = 0.0
    T = max(spec["seq_len"] for spec in config["eval"]["ppl"].values())
    for m in config["models"].values():
        _, (h, f, heads, kv, hd), _ = shapes_of(m["shapes"])
        flops = max(flops, forward_flops_per_token(h, f, heads * hd, kv * hd, T))
    out: dict[str, list[str]] = {"measured": [], "extrapolated": []}
    for name, pts in sorted((costs.get("points") or {}).items()):
        if not pts:
            continue
        if name == "forward":
            have, need, unit = max(p["d"] for p in pts), flops, "FLOP/token"
        elif name == "hessian_accumulate":
            have, need, unit = max(p["d"] for p in pts), need_d, "d"
        else:
            have, need, unit = max(p["n"] * p["d"] for p in pts), need_nd, "n·d"
        if have >= need:
            out["measured"].append(name)
        else:
            out["extrapolated"].append(f"{name} (measured to {unit} {have:.3g}, this config {need:.3g})")
    return out


#: the margin within which a prediction counts as right: ±30 % of the measured time
CHECK_MARGIN = 0.30
#: the workflow rules :func:`estimate` predicts
MODELLED_RULES = (Rule.HESSIANS, Rule.COMPRESS_LAYERS, Rule.COMPRESS_VARIANT, Rule.PROFILE_LAYERS, Rule.EVALUATE,
                  Rule.REPLICATE, Rule.ABLATION_TRACES, Rule.LPLR_TRACES)


def check(config: dict[str, Any], costs: dict[str, Any], timings: dict[str, Any]) -> dict[str, Any]:
    """The prediction for ``config`` against a run's measured ``timings`` (its ``timings.json``, with per-rule
    ``rules``: :func:`caldera.experiments.report.timings.step_timings`): per rule the predicted and measured jobs
    and job seconds, their ratio and whether it is within :data:`CHECK_MARGIN`; the rules measured but not modelled; and
    the totals of both."""
    if "rules" not in timings:
        raise ValueError("these timings have no per-rule records (key 'rules'); they come from an older timings "
                         "rule: rerun the workflow's `timings` rule")
    pred: dict[str, dict[str, float]] = {}
    for e in estimate(config, costs).values():
        for rule, r in e["rules"].items():
            acc = pred.setdefault(rule, {"jobs": 0, "s": 0.0})
            acc["jobs"] += r["jobs"]
            acc["s"] += r["hours"] * 3600
    rows = []
    for rule in sorted(set(pred) | {r for r in timings["rules"] if r in MODELLED_RULES}):
        m = timings["rules"].get(rule, {"jobs": 0, "job_s": 0.0})
        p = pred.get(rule, {"jobs": 0, "s": 0.0})
        ratio = p["s"] / m["job_s"] if m["job_s"] > 0 else math.inf
        rows.append({"rule": rule, "jobs": p["jobs"], "measured_jobs": m["jobs"], "predicted_s": p["s"],
                     "measured_s": m["job_s"], "ratio": ratio, "within": abs(ratio - 1) <= CHECK_MARGIN})
    other = {r: v["job_s"] for r, v in timings["rules"].items() if r not in pred and r not in MODELLED_RULES}
    return {"rules": rows, "not_modelled_s": other,
            "modelled": {"predicted_s": sum(r["predicted_s"] for r in rows),
                         "measured_s": sum(r["measured_s"] for r in rows)},
            "measured_total_s": float(timings.get("job_s", sum(v["job_s"] for v in timings["rules"].values())))}


def check_report(res: dict[str, Any]) -> str:
    """The text ``caldera cost --check`` prints: per rule predicted vs measured, and where the model is off."""
    lines = [f"{'rule':<17}{'jobs':>10}{'predicted':>12}{'measured':>12}{'ratio':>8}",
             f"{'':<17}{'pred/meas':>10}"]
    for r in res["rules"]:
        flag = "" if r["within"] else f"  off by more than ±{CHECK_MARGIN:.0%}"
        lines.append(f"{r['rule']:<17}{str(r['jobs']) + '/' + str(r['measured_jobs']):>10}"
                     f"{duration(r['predicted_s']):>12}{duration(r['measured_s']):>12}{r['ratio']:>8.2f}{flag}")
    mod = res["modelled"]
    lines.append(f"{'modelled rules':<27}{duration(mod['predicted_s']):>12}{duration(mod['measured_s']):>12}"
                 f"{mod['predicted_s'] / mod['measured_s'] if mod['measured_s'] else math.inf:>8.2f}")
    other = res["not_modelled_s"]
    parts = ", ".join(f"{k} {duration(v)}" for k, v in sorted(other.items(), key=lambda kv: -kv[1]))
    lines.append(f"not modelled: {duration(sum(other.values()))} of the run's {duration(res['measured_total_s'])} "
                 f"job time ({parts})")
    return "\n".join(lines)


def load_workflow_config(path: str | Path) -> dict[str, Any]:
    from caldera.experiments.planning.config_guard import load_yaml_strict

    return load_yaml_strict(path)
