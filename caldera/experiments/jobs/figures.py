"""Figures 1, 3 and 4 of the paper: data steps (compute → JSON) and plots (JSON → PNG + PDF).

* Figure 1: normalized singular values σ_i/σ_1 of every weight-matrix type, mean over layers.
* Figure 3 (App. G.1): relative data-aware error per outer iteration of the ablations and QuIP# (+LR) for
  several matrices of one layer, at the stand-in ranks that match ranks 64/128/256 in bits.
* Figure 4 (App. G.1): LPLRFactorize's per-inner-iteration relative error for W ≈ LR (RHT on, 4-bit).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from caldera.atomic import atomic_path, read_json, write_json
from caldera.experiments.jobs.steps import load_layers, run_device
from caldera.experiments.planning.settings import FiguresSettings, RunContext
from caldera.pipeline.hessians import GROUPS, decoder_layers

#: short name (``q_proj``) -> path inside a decoder layer (``self_attn.q_proj``), in the paper's order q..down
PATHS = {m.rsplit(".", 1)[-1]: m for _, members in GROUPS.values() for m in members}
#: short name -> the Hessian group it reads (``qkv``, ``o``, ``up``, ``down``)
GROUP = {m.rsplit(".", 1)[-1]: g for g, (_, members) in GROUPS.items() for m in members}
LINEARS = tuple(PATHS)


def linear_weight(model, layer: int, name: str) -> torch.Tensor:
    """Weight (n, d) float32 of linear ``name`` (``q_proj`` ...) of decoder layer ``layer``."""
    return decoder_layers(model)[layer].get_submodule(PATHS[name]).weight.detach().float()


def step_spectra(run: RunContext, model: str, out: str) -> dict[str, Any]:
    """Figure 1 data: the normalized singular values of every linear type of ``model`` (mean and sd over its
    decoder layers), written to ``out``."""
    mdl = load_layers(run.as_config(), model, None)  # every layer's linear weights, nothing else
    res: dict[str, Any] = {"model": model, "label": run.models[model]["label"], "spectra": {}}
    for name in LINEARS:
        curves = [torch.linalg.svdvals(linear_weight(mdl, i, name)) for i in range(len(decoder_layers(mdl)))]
        S = torch.stack([c / c[0] for c in curves])
        res["spectra"][name] = {"mean": S.mean(0).tolist(), "std": S.std(0).tolist()}
    write_json(out, res)
    return res


def figure3_curves(fs: FiguresSettings) -> list[dict[str, Any]]:
    """Figure 3's curves in the figure's order: per matrix, per paper rank, every App. G.1 ablation of
    ``figures.ablations`` then QuIP#-LR; each ``{"id", "matrix", "paper_rank", "method"}`` (``id``: a file
    name)."""
    methods = [*fs.ablations, "quip#-lr"]
    return [{"id": f"{name}-{pr}-{m.replace('#', 'sharp')}", "matrix": name, "paper_rank": pr, "method": m}
            for name in fs.matrices for pr in fs.paper_ranks for m in methods]


def figure3_jobs(fs: FiguresSettings) -> dict[str, list[str]]:
    """``{job id: [curve ids]}``: Figure 3's curves split into the jobs of rule ``ablation_traces`` by
    ``figures.trace_jobs``: ``one`` (a single job ``all``: the mini runs, where the whole figure takes seconds)
    or ``per-curve`` (paper scale: one decomposition trace per job, so each fits a cluster job's time limit)."""
    curves = [c["id"] for c in figure3_curves(fs)]
    if fs.trace_jobs == "per-curve":
        return {c: [c] for c in curves}
    return {"all": curves}


def _ablation_curve(config: dict[str, Any], fs: FiguresSettings, curve: dict[str, Any], W: torch.Tensor,
                    H: torch.Tensor) -> dict:
    """One curve of Figure 3: the LR-step errors per outer iteration of an App. G.1 ablation preset, or QuIP#-LR's
    (one-shot) error repeated, at the stand-in rank of ``curve["paper_rank"]`` (``config``: the run context's
    mapping, :meth:`RunContext.as_config`: the stand-ins and ranks)."""
    from caldera.config import CalderaConfig
    from caldera.decomposition import caldera_decompose
    from caldera.experiments.planning.plan import mapped_rank
    from caldera.methods import get_method

    base = {"matrix": curve["matrix"], "paper_rank": curve["paper_rank"]}
    if curve["method"] == "quip#-lr":
        r16 = mapped_rank(config, fs.paper_model, curve["paper_rank"], 16)
        spec = get_method("quip#-lr")
        dec = spec.fn(W, H, spec.make_config({"lr_rank": r16}))
        return {**base, "rank": r16, "method": "quip#-lr", "errors": [dec.error] * fs.outer_iters}
    cfg = CalderaConfig.preset(curve["method"])
    r = mapped_rank(config, fs.paper_model, curve["paper_rank"], cfg.l_bits)
    cfg = cfg.replace(rank=r, outer_iters=fs.outer_iters, svd=cfg.svd if fs.svd is None else fs.svd)
    dec = caldera_decompose(W, H, cfg)
    return {**base, "rank": r, "method": curve["method"],
            "errors": [e["error"] for e in dec.error_trace if e["step"] == "LR"]}


def step_ablation_traces(run: RunContext, model: str, hessian_dir: str, job: str, out: str,
                         settings: FiguresSettings) -> dict[str, Any]:
    """Figure 3 data of one job of :func:`figure3_jobs`: its curves (per-outer-iteration errors of the App. G.1
    ablations and QuIP#-LR), written to ``out`` as ``{"curves": [...]}`` (``settings``: the ``figures`` block's;
    ``run``: the stand-ins and ranks)."""
    from caldera.pipeline.hessians import layer_file, load_layer_hessians

    fs, config = settings, run.as_config()
    want = set(figure3_jobs(fs)[job])
    dev = run_device(config)  # the decompositions run where their inputs are
    mdl = load_layers(config, model, [fs.layer], dev)  # that layer's linear weights only
    Hs = load_layer_hessians(layer_file(hessian_dir, fs.layer))
    res: dict[str, Any] = {"job": job, "curves": []}
    for curve in figure3_curves(fs):
        if curve["id"] in want:
            W, H = linear_weight(mdl, fs.layer, curve["matrix"]), Hs[GROUP[curve["matrix"]]].to(dev)
            res["curves"].append(_ablation_curve(config, fs, curve, W, H))
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
    from caldera.decomposition import HessianContext
    from caldera.experiments.planning.plan import mapped_rank
    from caldera.hadamard import RHT, random_signs
    from caldera.lplr import lplr_factorize
    from caldera.pipeline.hessians import layer_file, load_layer_hessians
    from caldera.quantizers import quantizer_for_bits

    fc, config = settings.as_block(), run.as_config()
    dev = run_device(config)
    mdl = load_layers(config, model, [fc["layer"]], dev)  # that layer's linear weights only
    Hs = load_layer_hessians(layer_file(hessian_dir, fc["layer"]))
    q = quantizer_for_bits(4)
    res: dict[str, Any] = {"model": model, "layer": fc["layer"], "curves": []}
    for name in fc["lplr_matrices"]:
        W, H = linear_weight(mdl, fc["layer"], name), Hs[GROUP[name]].to(dev)
        ctx = HessianContext.prepare(H, rht=True, seed=0)
        S_V = random_signs(W.shape[0], torch.Generator().manual_seed(1)).to(dev)
        Wr = RHT(S_U=ctx.S_U, S_V=S_V).rotate_W(W)
        for paper_rank in fc["paper_ranks"]:
            r = mapped_rank(config, fc["paper_model"], paper_rank, 4)
            lp = lplr_factorize(Wr, ctx.sqrt, r, q, q, fc["lplr_inner_iters"], sweep="alternating")
            res["curves"].append({"matrix": name, "paper_rank": paper_rank, "rank": r, "errors": lp.errors})
    write_json(out, res)
    return res


#: Per-format metadata that keeps a rerun's file byte-identical: no creation date in a PDF (matplotlib writes the
#: current time otherwise) or an SVG; PNG metadata has no date.
_NO_DATE = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}


def _save(fig, out_png: str, out_pdf: str) -> None:
    for path in (out_png, out_pdf):
        fmt = Path(path).suffix.lstrip(".")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, bbox_inches="tight", dpi=130, format=fmt, metadata=_NO_DATE.get(fmt))


def plot_figure1(data: dict[str, Any], out_png: str, out_pdf: str, model_labels: Mapping[str, str] | None = None,
                 paper_model: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in data["spectra"].items():
        ax.semilogy(c["mean"], label=name)
    ax.set(xlabel="singular value index i", ylabel="σ_i / σ_1 (mean over layers)",
           title=f"Figure 1: decaying spectra — {data['label']}")
    ax.legend(fontsize=8)
    _save(fig, out_png, out_pdf)
    plt.close(fig)


#: the paper's models as its text names them (figure titles)
PAPER_MODEL_NAMES = {"llama-2-7b": "LLaMa-2 7B", "llama-2-13b": "LLaMa-2 13B", "llama-2-70b": "LLaMa-2 70B",
                     "llama-3-8b": "LLaMa-3 8B", "mistral-7b": "Mistral 7B"}


def _model_title(data: dict[str, Any], labels: Mapping[str, str] | None, pm: str | None) -> str:
    """``"SmolLM2-135M (…), layer 25, standing in for LLaMa-2 7B"`` from the run's model ``labels``
    (:meth:`RunContext.labels`) and ``figures.paper_model`` ``pm`` (the JSON names only the model key; without
    labels, the key)."""
    if labels is None:
        return f"{data['model']}, layer {data['layer']}"
    label = labels.get(data["model"], data["model"])
    return f"{label}, layer {data['layer']}" + (f", standing in for {PAPER_MODEL_NAMES.get(pm, pm)}" if pm else "")


def _ranks_text(curves: list[dict[str, Any]]) -> str:
    ks = sorted({c["rank"] for c in curves})
    return f"k = {ks[0]}" if len(ks) == 1 else "k = " + " / ".join(map(str, ks))


def plot_figure3(data: dict[str, Any], out_png: str, out_pdf: str, model_labels: Mapping[str, str] | None = None,
                 paper_model: str | None = None) -> None:
    """One panel per (matrix, paper rank), titled with the paper's rank and the stand-in's; one legend (one
    colour per method in every panel) below them; integer iteration ticks. ``model_labels`` and ``paper_model``
    (:meth:`RunContext.labels`, ``figures.paper_model``) name the model in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    mats = sorted({c["matrix"] for c in data["curves"]}, key=LINEARS.index)
    ranks = sorted({c["paper_rank"] for c in data["curves"]})
    methods = list(dict.fromkeys(c["method"] for c in data["curves"]))
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    fig, axes = plt.subplots(len(mats), len(ranks), figsize=(4 * len(ranks), 3 * len(mats) + 0.8), squeeze=False,
                             layout="constrained")
    for i, m in enumerate(mats):
        for j, pr in enumerate(ranks):
            ax = axes[i][j]
            here = [c for c in data["curves"] if c["matrix"] == m and c["paper_rank"] == pr]
            for c in here:
                ax.semilogy(range(1, len(c["errors"]) + 1), c["errors"], color=colors[c["method"]], marker=".",
                            label=c["method"])
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(f"{m}: paper rank {pr} → {_ranks_text(here)}", fontsize=9)
            if i == len(mats) - 1:
                ax.set_xlabel("outer iteration")
            if j == 0:
                ax.set_ylabel("relative data-aware error")
    handles = {h.get_label(): h for ax in axes.flat for h in ax.get_lines()}
    fig.legend([handles[m] for m in methods if m in handles], [m for m in methods if m in handles],
               loc="outside lower center", ncol=min(len(methods), 6), fontsize=8)
    title = _model_title(data, model_labels, paper_model)
    fig.suptitle(f"Figure 3: relative data-aware error per outer iteration — {title}",
                 fontsize=10)
    _save(fig, out_png, out_pdf)
    plt.close(fig)


def plot_figure4(data: dict[str, Any], out_png: str, out_pdf: str, model_labels: Mapping[str, str] | None = None,
                 paper_model: str | None = None) -> None:
    """One panel per matrix, one colour per paper rank in every panel, the legend below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    mats = sorted({c["matrix"] for c in data["curves"]}, key=LINEARS.index)
    paper_ranks = sorted({c["paper_rank"] for c in data["curves"]})
    colors = {pr: plt.get_cmap("tab10")(i % 10) for i, pr in enumerate(paper_ranks)}
    fig, axes = plt.subplots(1, len(mats), figsize=(5 * len(mats), 4), squeeze=False, layout="constrained")
    labels: dict[str, Any] = {}
    for j, m in enumerate(mats):
        ax = axes[0][j]
        for c in data["curves"]:
            if c["matrix"] == m:
                label = f"paper rank {c['paper_rank']} → k = {c['rank']}"
                (labels[label],) = ax.plot(range(len(c["errors"])), c["errors"], marker=".", label=label,
                                           color=colors[c["paper_rank"]])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("inner iteration (0 = init)")
        if j == 0:
            ax.set_ylabel("relative data-aware error")
    fig.legend(list(labels.values()), list(labels), loc="outside lower center", ncol=min(len(labels), 4), fontsize=8)
    title = _model_title(data, model_labels, paper_model)
    fig.suptitle(f"Figure 4: LPLRFactorize (4-bit factors, RHT) per inner iteration — {title}",
                 fontsize=10)
    _save(fig, out_png, out_pdf)
    plt.close(fig)


def plot_rank_allocation(allocations: dict[str, dict[str, Any]], out_png: str, out_pdf: str,
                         model_labels: Mapping[str, str] | None = None) -> None:
    """The ranks a per-matrix method chose (``{variant id: its allocation.json}``, :mod:`caldera.pipeline.allocate`):
    one heat map per variant, decoder layer × matrix type, each cell the rank (annotated), the title the uniform
    rank whose bits were shared out and the profiling cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(len(allocations), 1, figsize=(11, 2.6 * len(allocations) + 0.6), squeeze=False,
                             layout="constrained")
    for ax, (vid, alloc) in zip(axes[:, 0], sorted(allocations.items())):
        ranks = {tuple(k.split(".", 1)): o["rank"] for k, o in alloc["overrides"].items()}
        layers = sorted({int(li) for li, _ in ranks})
        short = {n: n.split(".")[-1] for _, n in ranks}
        names = sorted(short, key=lambda n: (LINEARS.index(short[n]) if short[n] in LINEARS else len(LINEARS), n))
        grid = np.array([[ranks.get((str(li), n), np.nan) for li in layers] for n in names], dtype=float)
        im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        for i in range(len(names)):
            for j in range(len(layers)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{int(grid[i, j])}", ha="center", va="center", fontsize=6,
                            color="white" if grid[i, j] < np.nanmean(grid) else "black")
        ax.set_yticks(range(len(names)), [short[n] for n in names], fontsize=8)
        ax.set_xticks(range(len(layers)), layers, fontsize=7)
        ax.set_xlabel("decoder layer")
        cfg = alloc["method_config"]
        label = model_labels.get(vid.split("-", 1)[0], vid) if model_labels else vid
        # an allocation the CLI wrote states its profiling seconds; the workflow's keeps them in its timing file
        took = f" (profiling {alloc['profile_wall_s']:.0f} s)" if "profile_wall_s" in alloc else ""
        ax.set_title(f"{vid} — {label}: uniform k = {cfg['rank']} at B_LR = {cfg['l_bits']} shared out, ranks "
                     f"{cfg['min_rank']}…{cfg['max_rank_factor']}·k in steps of {cfg['rank_multiple']}{took}",
                     fontsize=8)
        fig.colorbar(im, ax=ax, label="rank k_i", shrink=0.9)
    fig.suptitle("Rank per matrix at the bits of uniform rank (caldera-rank-per-layer), chosen on calibration data",
                 fontsize=10)
    _save(fig, out_png, out_pdf)
    plt.close(fig)


#: figure number -> plot function (JSON data, PNG path, PDF path, model_labels=the run's model labels,
#: paper_model=figures.paper_model)
PLOTS = {1: plot_figure1, 3: plot_figure3, 4: plot_figure4}
