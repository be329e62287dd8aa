"""Figures 1, 3 and 4 of the paper: data steps (compute → JSON) and plots (JSON → PNG + PDF).

* Figure 1: normalized singular values σ_i/σ_1 of every weight-matrix type, mean over layers.
* Figure 3 (App. G.1): relative data-aware error per outer iteration of the ablations and QuIP# (+LR) for
  several matrices of one layer, at the stand-in ranks that match ranks 64/128/256 in bits.
* Figure 4 (App. G.1): LPLRFactorize's per-inner-iteration relative error for W ≈ LR (RHT on, 4-bit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from caldera.atomic import atomic_path
from caldera.experiments.steps import load_layers, run_device, write_json
from caldera.pipeline.hessians import GROUPS, decoder_layers

#: short name (``q_proj``) -> path inside a decoder layer (``self_attn.q_proj``), in the paper's order q..down
PATHS = {m.rsplit(".", 1)[-1]: m for _, members in GROUPS.values() for m in members}
#: short name -> the Hessian group it reads (``qkv``, ``o``, ``up``, ``down``)
GROUP = {m.rsplit(".", 1)[-1]: g for g, (_, members) in GROUPS.items() for m in members}
LINEARS = tuple(PATHS)


def linear_weight(model, layer: int, name: str) -> torch.Tensor:
    """Weight (n, d) float32 of linear ``name`` (``q_proj`` ...) of decoder layer ``layer``."""
    return decoder_layers(model)[layer].get_submodule(PATHS[name]).weight.detach().float()


def step_spectra(config: dict[str, Any], model: str, out: str) -> dict[str, Any]:
    mdl = load_layers(config, model, None)  # every layer's linear weights, nothing else
    res: dict[str, Any] = {"model": model, "label": config["models"][model]["label"], "spectra": {}}
    for name in LINEARS:
        curves = [torch.linalg.svdvals(linear_weight(mdl, i, name)) for i in range(len(decoder_layers(mdl)))]
        S = torch.stack([c / c[0] for c in curves])
        res["spectra"][name] = {"mean": S.mean(0).tolist(), "std": S.std(0).tolist()}
    write_json(out, res)
    return res


def step_ablation_traces(config: dict[str, Any], model: str, hessian_dir: str, out: str) -> dict[str, Any]:
    """Figure 3 data: per-outer-iteration errors for the App. G.1 ablations and QuIP# with LR."""
    from caldera.config import CalderaConfig
    from caldera.decomposition import caldera_decompose
    from caldera.experiments.plan import mapped_rank
    from caldera.methods import get_method
    from caldera.pipeline.hessians import layer_file, load_layer_hessians

    fc = config["figures"]
    dev = run_device(config)  # the decompositions run where their inputs are
    mdl = load_layers(config, model, [fc["layer"]], dev)  # that layer's linear weights only
    Hs = load_layer_hessians(layer_file(hessian_dir, fc["layer"]))
    paper_model = fc["paper_model"]
    res: dict[str, Any] = {"model": model, "layer": fc["layer"], "outer_iters": fc["outer_iters"], "curves": []}
    for name in fc["matrices"]:
        W, H = linear_weight(mdl, fc["layer"], name), Hs[GROUP[name]].to(dev)
        for paper_rank in fc["paper_ranks"]:
            for ablation in fc["ablations"]:
                cfg = CalderaConfig.preset(ablation)
                r = mapped_rank(config, paper_model, paper_rank, cfg.l_bits)
                cfg = cfg.replace(rank=r, outer_iters=fc["outer_iters"], svd=fc.get("svd", cfg.svd))
                dec = caldera_decompose(W, H, cfg)
                errs = [e["error"] for e in dec.error_trace if e["step"] == "LR"]
                res["curves"].append({"matrix": name, "paper_rank": paper_rank, "rank": r, "method": ablation,
                                      "errors": errs})
            r16 = mapped_rank(config, paper_model, paper_rank, 16)
            spec = get_method("quip#-lr")
            dec = spec.fn(W, H, spec.make_config({"lr_rank": r16}))
            res["curves"].append({"matrix": name, "paper_rank": paper_rank, "rank": r16, "method": "quip#-lr",
                                  "errors": [dec.error] * fc["outer_iters"]})
    write_json(out, res)
    return res


def step_lplr_traces(config: dict[str, Any], model: str, hessian_dir: str, out: str) -> dict[str, Any]:
    """Figure 4 data: LPLRFactorize(W) per inner iteration, RHT on, 4-bit factors."""
    from caldera.decomposition import HessianContext
    from caldera.experiments.plan import mapped_rank
    from caldera.hadamard import RHT, random_signs
    from caldera.lplr import lplr_factorize
    from caldera.pipeline.hessians import layer_file, load_layer_hessians
    from caldera.quantizers import quantizer_for_bits

    fc = config["figures"]
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


def plot_figure1(data: dict[str, Any], out_png: str, out_pdf: str) -> None:
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


def plot_figure3(data: dict[str, Any], out_png: str, out_pdf: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mats = sorted({c["matrix"] for c in data["curves"]}, key=LINEARS.index)
    ranks = sorted({c["paper_rank"] for c in data["curves"]})
    fig, axes = plt.subplots(len(mats), len(ranks), figsize=(4 * len(ranks), 3 * len(mats)), squeeze=False)
    for i, m in enumerate(mats):
        for j, pr in enumerate(ranks):
            ax = axes[i][j]
            for c in data["curves"]:
                if c["matrix"] == m and c["paper_rank"] == pr:
                    ax.semilogy(range(1, len(c["errors"]) + 1), c["errors"], label=f"{c['method']} (k={c['rank']})")
            ax.set_title(f"layer {data['layer']} {m}, rank≙{pr}", fontsize=9)
            ax.set_xlabel("outer iteration")
            ax.set_ylabel("relative data-aware error")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    _save(fig, out_png, out_pdf)
    plt.close(fig)


def plot_figure4(data: dict[str, Any], out_png: str, out_pdf: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mats = sorted({c["matrix"] for c in data["curves"]}, key=LINEARS.index)
    fig, axes = plt.subplots(1, len(mats), figsize=(5 * len(mats), 3.5), squeeze=False)
    for j, m in enumerate(mats):
        ax = axes[0][j]
        for c in data["curves"]:
            if c["matrix"] == m:
                label = f"rank {c['rank']} (≙{c['paper_rank']})"
                ax.plot(range(len(c["errors"])), c["errors"], marker=".", label=label)
        ax.set(title=f"LPLRFactorize, layer {data['layer']} {m}", xlabel="inner iteration (0 = init)",
               ylabel="relative data-aware error")
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out_png, out_pdf)
    plt.close(fig)


#: figure number -> plot function (JSON data, PNG path, PDF path)
PLOTS = {1: plot_figure1, 3: plot_figure3, 4: plot_figure4}
