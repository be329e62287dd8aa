"""Figure 3's plan (caldera.experiments.planning.figure_plan): its curves and their jobs."""

from __future__ import annotations

import itertools

from caldera.experiments.planning.figure_plan import figure3_curves, figure3_jobs
from caldera.experiments.planning.settings import FiguresSettings

BLOCK = {"model": "smollm2", "paper_model": "llama-2-7b", "layer": 0, "matrices": ["k_proj", "down_proj"],
         "paper_ranks": [64, 256], "ablations": ["caldera", "no-ldlq", "lplr"], "outer_iters": 3,
         "lplr_matrices": ["k_proj"], "lplr_inner_iters": 5}


def test_one_curve_per_matrix_rank_and_method_in_the_figures_order():
    fs = FiguresSettings.from_block(BLOCK)
    curves = figure3_curves(fs)
    want = list(itertools.product(BLOCK["matrices"], BLOCK["paper_ranks"], [*BLOCK["ablations"], "quip#-lr"]))
    assert [(c["matrix"], c["paper_rank"], c["method"]) for c in curves] == want
    ids = [c["id"] for c in curves]
    assert len(set(ids)) == len(ids) and all("#" not in i and "/" not in i for i in ids)  # file names
    assert ids[3] == "k_proj-64-quipsharp-lr"


def test_the_jobs_cover_every_curve_once():
    one = figure3_jobs(FiguresSettings.from_block(BLOCK))
    per = figure3_jobs(FiguresSettings.from_block({**BLOCK, "trace_jobs": "per-curve"}))
    curves = [c["id"] for c in figure3_curves(FiguresSettings.from_block(BLOCK))]
    assert one == {"all": curves}
    assert list(per) == curves and all(per[c] == [c] for c in curves)
