"""Figure 3's plan: its curves (matrix × paper rank × method) and how they are split into jobs."""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.settings import FiguresSettings


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
