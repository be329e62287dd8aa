"""The data of Figures 1, 3 and 4 of the paper: one job each computes a figure's numbers into a small JSON file
(their plan: :mod:`caldera.experiments.planning.figure_plan`; their plots: :mod:`caldera.experiments.report.plots`).

* Figure 1: normalized singular values σ_i/σ_1 of every weight-matrix type, mean over layers.
* Figure 3 (App. G.1): relative data-aware error per outer iteration of the ablations and QuIP# (+LR) for
  several matrices of one layer, at the stand-in ranks that match ranks 64/128/256 in bits.
* Figure 4 (App. G.1): LPLRFactorize's per-inner-iteration relative error for W ≈ LR (RHT on, 4-bit).
"""

from __future__ import annotations

from typing import Any

import torch

from caldera.atomic import read_json, write_json
from caldera.experiments.jobs.calibrate import check_job_hessians
from caldera.experiments.jobs.models import load_layers, run_device, stand_in_rank
from caldera.experiments.planning.figure_plan import figure3_curves, figure3_jobs
from caldera.experiments.planning.settings import FiguresSettings, RunContext
from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.linears import GROUP_OF, PATH_OF, SHORT_NAMES


def linear_weight(model, layer: int, name: str) -> torch.Tensor:
    """Weight (n, d) float32 of linear ``name`` (``q_proj`` ...) of decoder layer ``layer``."""
    return decoder_layers(model)[layer].get_submodule(PATH_OF[name]).weight.detach().float()


def step_spectra(run: RunContext, model: str, out: str) -> dict[str, Any]:
    """Figure 1 data: the normalized singular values of every linear type of ``model`` (mean and sd over its
    decoder layers), written to ``out``."""
    mdl = load_layers(run, model, None)  # every layer's linear weights, nothing else
    res: dict[str, Any] = {"model": model, "label": run.models[model].label, "spectra": {}}
    for name in SHORT_NAMES:
        curves = [torch.linalg.svdvals(linear_weight(mdl, i, name)) for i in range(len(decoder_layers(mdl)))]
        S = torch.stack([c / c[0] for c in curves])
        res["spectra"][name] = {"mean": S.mean(0).tolist(), "std": S.std(0).tolist()}
    write_json(out, res)
    return res


def _ablation_curve(run: RunContext, fs: FiguresSettings, curve: dict[str, Any], W: torch.Tensor,
                    H: torch.Tensor) -> dict:
    """One curve of Figure 3: the LR-step errors per outer iteration of an App. G.1 ablation preset, or QuIP#-LR's
    (one-shot) error repeated, at the stand-in rank of ``curve["paper_rank"]`` (:func:`stand_in_rank` with
    ``run``'s stand-ins and rank multiple)."""
    from caldera.algorithm.config import CalderaConfig
    from caldera.algorithm.decomposition import caldera_decompose
    from caldera.methods import get_method

    base = {"matrix": curve["matrix"], "paper_rank": curve["paper_rank"]}
    if curve["method"] == "quip#-lr":
        r16 = stand_in_rank(run, fs.paper_model, curve["paper_rank"], 16)
        spec = get_method("quip#-lr")
        dec = spec.fn(W, H, spec.make_config({"lr_rank": r16}))
        return {**base, "rank": r16, "method": "quip#-lr", "errors": [dec.error] * fs.outer_iters}
    cfg = CalderaConfig.preset(curve["method"])
    r = stand_in_rank(run, fs.paper_model, curve["paper_rank"], cfg.l_bits)
    cfg = cfg.replace(rank=r, outer_iters=fs.outer_iters, svd=cfg.svd if fs.svd is None else fs.svd)
    dec = caldera_decompose(W, H, cfg)
    return {**base, "rank": r, "method": curve["method"],
            "errors": [e["error"] for e in dec.error_trace if e["step"] == "LR"]}


def step_ablation_traces(run: RunContext, model: str, hessian_dir: str, job: str, out: str,
                         settings: FiguresSettings) -> dict[str, Any]:
    """Figure 3 data of one job of :func:`figure3_jobs`: its curves (per-outer-iteration errors of the App. G.1
    ablations and QuIP#-LR), written to ``out`` as ``{"curves": [...]}`` (``settings``: the ``figures`` block's;
    ``run``: the stand-ins and ranks)."""
    from caldera.pipeline.hessian_files import layer_file, load_layer_hessians

    fs = settings
    want = set(figure3_jobs(fs)[job])
    dev = run_device(run)  # the decompositions run where their inputs are
    mdl = load_layers(run, model, [fs.layer], dev)  # that layer's linear weights only
    check_job_hessians(run, model, hessian_dir, [fs.layer], mdl)  # the right files, before any work
    Hs = load_layer_hessians(layer_file(hessian_dir, fs.layer))
    res: dict[str, Any] = {"job": job, "curves": []}
    for curve in figure3_curves(fs):
        if curve["id"] in want:
            W, H = linear_weight(mdl, fs.layer, curve["matrix"]), Hs[GROUP_OF[curve["matrix"]]].to(dev)
            res["curves"].append(_ablation_curve(run, fs, curve, W, H))
    write_json(out, res)
    return res


def step_figure3_data(model: str, parts: list[str], out: str, settings: FiguresSettings) -> dict[str, Any]:
    """Figure 3's JSON from its jobs' parts (:func:`step_ablation_traces`), the curves in the figure's order."""
    order = {(c["matrix"], c["paper_rank"], c["method"]): i for i, c in enumerate(figure3_curves(settings))}
    got = sorted((c for p in parts for c in read_json(p)["curves"]),
                 key=lambda c: order[(c["matrix"], c["paper_rank"], c["method"])])
    if len(got) != len(order):
        raise ValueError(f"Figure 3: {len(got)} curves in {len(parts)} parts, {len(order)} expected; rerun the "
                         "ablation_traces jobs")
    res = {"model": model, "layer": settings.layer, "outer_iters": settings.outer_iters, "curves": got}
    write_json(out, res)
    return res


def step_lplr_traces(run: RunContext, model: str, hessian_dir: str, out: str,
                     settings: FiguresSettings) -> dict[str, Any]:
    """Figure 4 data: LPLRFactorize(W) per inner iteration, RHT on, 4-bit factors (``settings``: the ``figures``
    block's; ``run``: the stand-ins and ranks)."""
    from caldera.algorithm.decomposition import HessianContext
    from caldera.algorithm.hadamard import RHT, random_signs
    from caldera.algorithm.lplr import lplr_factorize
    from caldera.pipeline.hessian_files import layer_file, load_layer_hessians
    from caldera.quantizers import quantizer_for_bits

    fc = settings.as_block()
    dev = run_device(run)
    mdl = load_layers(run, model, [fc["layer"]], dev)  # that layer's linear weights only
    check_job_hessians(run, model, hessian_dir, [fc["layer"]], mdl)  # the right files, before any work
    Hs = load_layer_hessians(layer_file(hessian_dir, fc["layer"]))
    q = quantizer_for_bits(4)
    res: dict[str, Any] = {"model": model, "layer": fc["layer"], "curves": []}
    for name in fc["lplr_matrices"]:
        W, H = linear_weight(mdl, fc["layer"], name), Hs[GROUP_OF[name]].to(dev)
        ctx = HessianContext.prepare(H, rht=True, seed=0)
        S_V = random_signs(W.shape[0], torch.Generator().manual_seed(1)).to(dev)
        Wr = RHT(S_U=ctx.S_U, S_V=S_V).rotate_W(W)
        for paper_rank in fc["paper_ranks"]:
            r = stand_in_rank(run, fc["paper_model"], paper_rank, 4)
            lp = lplr_factorize(Wr, ctx.sqrt, r, q, q, fc["lplr_inner_iters"], sweep="alternating")
            res["curves"].append({"matrix": name, "paper_rank": paper_rank, "rank": r, "errors": lp.errors})
    write_json(out, res)
    return res


