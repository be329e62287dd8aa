"""Figures 1, 3 and 4 of the paper and the rank-allocation plot: small JSON results in, PNG + PDF out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from caldera.atomic import atomic_path
from caldera.pipeline.linears import SHORT_NAMES

#: Per-format metadata that keeps a rerun's file byte-identical: no creation date in a PDF (matplotlib writes the
#: current time otherwise) or an SVG; PNG metadata has no date.
_NO_DATE = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}


def save_figure(fig, out_png: str, out_pdf: str) -> None:
    """``fig`` as PNG and PDF, each written atomically, with no creation date (the same figure, the same bytes)."""
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
    save_figure(fig, out_png, out_pdf)
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

    mats = sorted({c["matrix"] for c in data["curves"]}, key=SHORT_NAMES.index)
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
    save_figure(fig, out_png, out_pdf)
    plt.close(fig)


def plot_figure4(data: dict[str, Any], out_png: str, out_pdf: str, model_labels: Mapping[str, str] | None = None,
                 paper_model: str | None = None) -> None:
    """One panel per matrix, one colour per paper rank in every panel, the legend below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    mats = sorted({c["matrix"] for c in data["curves"]}, key=SHORT_NAMES.index)
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
    save_figure(fig, out_png, out_pdf)
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
        order = {m: i for i, m in enumerate(SHORT_NAMES)}
        names = sorted(short, key=lambda n: (order.get(short[n], len(SHORT_NAMES)), n))
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
    save_figure(fig, out_png, out_pdf)
    plt.close(fig)


#: figure number -> plot function (JSON data, PNG path, PDF path, model_labels=the run's model labels,
#: paper_model=figures.paper_model)
PLOTS = {1: plot_figure1, 3: plot_figure3, 4: plot_figure4}
