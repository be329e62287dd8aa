"""Perplexity against bits per weight, every method of a run on each stand-in (the Pareto picture), from the
table JSONs alone (:mod:`caldera.experiments.report.tables`).

One row of panels per stand-in: this run's Wiki2-stand-in perplexity (``ours``, with its 95 % interval
``ours_ci``) against the paper's bits formula (``avg_bits``), the same against the bits as stored
(``storage_bits``: codes, scales, signs), and the paper's own points (``paper`` cells) of the paper models that
stand-in takes the place of, on a twin panel. Every compressed row of every table is drawn, the
``extra_methods`` rows included, so a new method shows where it sits; a variant that fills several paper rows is
one point. The unquantized model is a horizontal line (its interval a band); the lower-left envelope of this
run's points (no other point has fewer bits and a lower perplexity) is marked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from caldera.experiments.planning.plan import RHTFT_TABLES
from caldera.experiments.report.tables import EXTRA_LABEL

PPL = "wiki2_ppl"
BITS = ("avg_bits", "storage_bits")


def series_name(row: dict[str, Any], table: str) -> str:
    """A row's method as the figure's legend names it: the method without its paper-model note, its factors'
    precision, and "+ RHT FT" for the rows of the RHT fine-tuning tables."""
    method = str(row["method"])
    extra = method.endswith(EXTRA_LABEL)
    base = method.removesuffix(EXTRA_LABEL) if extra else method.split(" (")[0].rstrip("*")
    b = str(row.get("b_lr"))
    name = base if b in ("—", "None", "") else f"{base}, {b.removesuffix('.0')}-bit LR"
    return name + (" + RHT FT" if table in RHTFT_TABLES else "")


def _dense(row: dict[str, Any]) -> bool:
    return str(row["method"]).startswith("Unquantized")


def pareto_points(tables: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{stand-in label: {"ours": [...], "paper": [...], "dense": {...} | None, "paper_dense": {paper model:
    ppl}}}``. An ``ours`` point: ``{"variant", "series", "avg_bits", "storage_bits", "ppl", "lo", "hi",
    "front"}`` (one per variant, whatever rows repeat it; ``front``: on the lower-left envelope by ``avg_bits``);
    a ``paper`` point: ``{"paper_model", "series", "avg_bits", "ppl"}`` (one per paper model, method and rank).
    Rows without a measured perplexity (pending rows) give only their paper point, on the stand-in of their paper
    model."""
    out: dict[str, dict[str, Any]] = {}
    # a row this run did not measure (pending) names no stand-in: its paper point goes to its paper model's
    stand_of = {r["paper_model"]: r["stand_in"] for tab in tables.values() for r in tab.get("rows", [])
                if r.get("variant") and r.get("stand_in")}
    for name in sorted(tables):
        tab = tables[name]
        for r in tab.get("rows", []):
            stand = r.get("stand_in") if r.get("variant") else stand_of.get(r.get("paper_model"))
            if not stand:
                continue
            s = out.setdefault(stand, {"ours": {}, "paper": {}, "dense": None, "paper_dense": {}})
            ours, ci, paper = r.get("ours") or {}, (r.get("ours_ci") or {}).get(PPL), r.get("paper") or {}
            if _dense(r):
                if ours.get(PPL) is not None and s["dense"] is None:
                    s["dense"] = {"variant": r.get("variant"), "ppl": ours[PPL],
                                  "lo": ci[0] if ci else None, "hi": ci[1] if ci else None}
                if paper.get(PPL) is not None and r.get("paper_model") not in (None, "—"):
                    s["paper_dense"][r["paper_model"]] = paper[PPL]
                continue
            if r.get("variant") and ours.get(PPL) is not None and ours.get("avg_bits") is not None:
                s["ours"].setdefault(r["variant"], {
                    "variant": r["variant"], "series": series_name(r, name), "avg_bits": ours["avg_bits"],
                    "storage_bits": ours.get("storage_bits"), "ppl": ours[PPL],
                    "lo": ci[0] if ci else None, "hi": ci[1] if ci else None})
            pm = r.get("paper_model")
            if pm not in (None, "—") and paper.get(PPL) is not None and paper.get("avg_bits") is not None:
                key = (pm, series_name(r, name), r.get("paper_rank"))
                s["paper"].setdefault(key, {"paper_model": pm, "series": key[1], "avg_bits": paper["avg_bits"],
                                            "ppl": paper[PPL]})
    for s in out.values():
        s["ours"] = sorted(s["ours"].values(), key=lambda p: (p["avg_bits"], p["ppl"], p["variant"]))
        s["paper"] = sorted(s["paper"].values(), key=lambda p: (p["paper_model"], p["avg_bits"], p["ppl"]))
        for p in s["ours"]:
            p["front"] = not any(q is not p and q["avg_bits"] <= p["avg_bits"] and q["ppl"] < p["ppl"]
                                 for q in s["ours"])
    return out


def plot_pareto(tables: Mapping[str, dict[str, Any]], out_png: str, out_pdf: str,
                corpus: str | None = None) -> dict[str, dict[str, Any]]:
    """The figure of :func:`pareto_points` (PNG and PDF, byte-stable); ``corpus``: the source of the tables'
    Wiki2 column (config ``eval.ppl.wiki.source``), named in the title for what it is. Returns the points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from caldera.experiments.report.corpora import corpus_name
    from caldera.experiments.report.plots import PAPER_MODEL_NAMES, save_figure
    from caldera.experiments.report.verdict_page import log_ticks

    data = pareto_points(tables)
    stands = [s for s in sorted(data) if data[s]["ours"] or data[s]["paper"]]
    series = sorted({p["series"] for s in stands for p in data[s]["ours"] + data[s]["paper"]})
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(series)}
    markers = "osD^vP*X"
    fig, axes = plt.subplots(max(1, len(stands)), 3, figsize=(15, 4.2 * max(1, len(stands)) + 0.8), squeeze=False,
                             layout="constrained")
    for row, stand in zip(axes, stands):
        d = data[stand]
        for ax, x in zip(row[:2], BITS):
            pts = [p for p in d["ours"] if p[x] is not None]
            for m in series:
                mine = [p for p in pts if p["series"] == m]
                if not mine:
                    continue
                err = [[p["ppl"] - p["lo"] if p["lo"] is not None else 0.0 for p in mine],
                       [p["hi"] - p["ppl"] if p["hi"] is not None else 0.0 for p in mine]]
                ax.errorbar([p[x] for p in mine], [p["ppl"] for p in mine], yerr=err, fmt="o-", ms=4, lw=0.8,
                            capsize=2, color=colours[m], label=m)
            front = sorted((p for p in pts if p["front"]), key=lambda p: p[x])
            if front and x == "avg_bits":
                ax.step([p[x] for p in front], [p["ppl"] for p in front], where="post", color="black", lw=0.6,
                        ls=":", label="lower-left envelope")
            if d["dense"] is not None:
                ax.axhline(d["dense"]["ppl"], color="black", lw=0.8, ls="--", label="unquantized")
                if d["dense"]["lo"] is not None:
                    ax.axhspan(d["dense"]["lo"], d["dense"]["hi"], color="black", alpha=0.06, lw=0)
            ax.set_yscale("log")
            ax.set_xlabel({"avg_bits": "bits per weight, the paper's formula (avg_bits)",
                           "storage_bits": "bits per weight as stored (storage_bits)"}[x], fontsize=8)
            ax.set_ylabel("Wiki2 column perplexity (95 % interval)", fontsize=8)
            ax.set_title(f"this run: {stand}", fontsize=9)
        ax = row[2]
        pms = sorted({p["paper_model"] for p in d["paper"]})
        for m in series:
            for k, pm in enumerate(pms):
                mine = [p for p in d["paper"] if p["series"] == m and p["paper_model"] == pm]
                if mine:
                    ax.plot([p["avg_bits"] for p in mine], [p["ppl"] for p in mine], marker=markers[k % len(markers)],
                            ms=4, lw=0.8, color=colours[m])
        ax.set_yscale("log")
        ax.set_xlabel("bits per weight, the paper's formula", fontsize=8)
        ax.set_ylabel("WikiText-2 perplexity (the paper)", fontsize=8)
        ax.set_title(f"the paper's points for the models {stand.split(' (')[0]} stands in for", fontsize=9)
        if pms:  # the paper models by marker (the methods' colours are the figure legend's)
            ax.legend([plt.Line2D([], [], color="black", lw=0, marker=markers[k % len(markers)], ms=4)
                       for k in range(len(pms))],
                      [PAPER_MODEL_NAMES.get(pm, pm) + (f" (dense {d['paper_dense'][pm]:g})"
                                                        if pm in d["paper_dense"] else "") for pm in pms],
                      fontsize=6, loc="upper right")
        for ax in row:
            log_ticks(ax.yaxis)
    if not stands:
        axes[0][0].text(0.5, 0.5, "no measured perplexity in the tables", ha="center", va="center")
    # every method by colour (the paper-only ones too), then the envelope and the unquantized line
    handles = {m: plt.Line2D([], [], color=colours[m], marker="o", ms=4, lw=0.8) for m in series}
    handles["lower-left envelope (this run, the paper's formula)"] = plt.Line2D([], [], color="black", lw=0.6, ls=":")
    handles["unquantized (95 % interval shaded)"] = plt.Line2D([], [], color="black", lw=0.8, ls="--")
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(len(handles), 5),
               fontsize=7)
    text = corpus_name(corpus) if corpus else "the tables' Wiki2 column"
    fig.suptitle(f"Perplexity against bits per weight: every method of this run on each stand-in ({text}), and "
                 "the paper's own points (WikiText-2)", fontsize=10)
    save_figure(fig, out_png, out_pdf)
    plt.close(fig)
    return data


def write_pareto(table_jsons: list[str], out_png: str, out_pdf: str,
                 corpus: str | None = None) -> dict[str, dict[str, Any]]:
    """The figure from the table JSON files (named by their stem); ``corpus``: as :func:`plot_pareto`."""
    import json
    from pathlib import Path

    tables = {}
    for p in table_jsons:
        try:
            tables[Path(p).stem] = json.loads(Path(p).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{p}: cannot read the table ({e}); rerun rule `make_table` "
                             f"(snakemake --cores 2 {p})") from None
    return plot_pareto(tables, out_png, out_pdf, corpus)
