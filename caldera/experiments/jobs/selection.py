"""The configuration of the CALDERA rows, chosen by the paper's own criterion on the calibration Hessians: the
sweep job (its plan: :mod:`caldera.experiments.planning.selection_plan`; its Markdown and claims:
:mod:`caldera.experiments.report.selection_report`).

§4.1: the order of the Q and LR updates "can be swapped, depending on whichever yields a smaller error". This
module applies that criterion to every configuration choice the paper leaves open (update order × the App. E.2
Hessian update, at the default's T_out/T_in): each candidate decomposes the same matrices of several layers of
each stand-in with the run's own *calibration* Hessians, and the candidate with the lowest calibration
data-aware error wins::

    error(Ŵ) = sqrt(tr((Ŵ − W) H (Ŵ − W)ᵀ) / tr(W H Wᵀ))     H: the raw calibration Hessian (d, d), float64

— the same number the compression logs record per matrix (``caldera.pipeline.compress``). Nothing here reads
an evaluation result: the only inputs are the dense weights, the calibration Hessians and the workflow config.

Selection rule (:func:`select`): per candidate, the geometric mean over matrices × ranks of its error divided by
QuIP#'s on the same matrix (the plain 2-bit QuIP# row of the tables), averaged in log space over the stand-ins
(each stand-in weighs the same). Candidates within ``tie_tolerance`` (relative) of the lowest score are tied and
the one listed first in ``selection.candidates`` wins (no clock reading decides: a rerun selects the same). A
larger T_out/T_in (``long_iters``) is measured on fewer matrices and reported (what more iterations buy) but is
never selectable: it is outside the default's time budget.

:func:`ablation_comparisons` re-runs the Figure 3 comparisons (App. G.1: 4-bit vs 16-bit factors, no LDLQ,
16-bit CALDERA vs QuIP# + LR, LPLR's inner iterations) on the figure's own matrices with the selected
configuration's update order, Hessian update and best-iterate tracking, so that a failing ablation claim can say
whether its failure survives the configuration choice
(:func:`caldera.experiments.report.selection_report.configuration_notes`).

Outputs: ``selection.json`` (every measurement, the scores, the selected configuration) and ``selection.md``,
which hold no clock reading (a rerun writes them byte for byte); the seconds of every decomposition and of the
job go to ``selection.timing.json`` beside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from caldera.atomic import write_atomic
from caldera.experiments.planning.selection_plan import SelectionPlan, candidate_params, selection_bits
from caldera.experiments.planning.settings import FiguresSettings, RunContext
from caldera.experiments.report.selection_report import ablation_claims, geo_mean, to_markdown

if TYPE_CHECKING:  # torch is imported where it is used: the workflow imports this module while parsing
    import torch


def measure_matrix(
    W: torch.Tensor, H: torch.Tensor, method: str, params: dict[str, Any], context=None
) -> dict[str, Any]:
    """One decomposition of W (n, d) with the registered ``method``: its calibration data-aware error with the
    raw H (d, d) (as the compression logs record it), the regularized-H error and trace, and its seconds."""
    import torch

    from caldera.methods import get_method
    from caldera.metrics import relative_data_aware_error

    spec = get_method(method)
    cfg = spec.make_config(params)
    t0, c0 = time.perf_counter(), time.process_time()
    dec = spec.fn(W, H, cfg, context=context)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    # float32 products, float64 differences and sums: what the compression jobs record (caldera.pipeline.compress)
    err = relative_data_aware_error(dec.reconstruction(), W, H.double(), product=torch.float32)
    return {"error": err, "error_reg": float(dec.error),
            "seconds": seconds, "cpu_s": cpu_s, "trace": dec.error_trace}


def sweep_layers(plan: SelectionPlan, model: str) -> list[int]:
    """The decoder layers of ``model`` the sweep decomposes (``selection.layers``), each one the run collects
    Hessians for (``layers``)."""
    layers = [int(x) for x in plan.settings.layers[model]]
    run_layers = None if plan.run.layers is None else list(plan.run.layers)
    missing = [x for x in layers if run_layers is not None and x not in run_layers]
    if missing:
        raise ValueError(f"selection.layers.{model}: layers {missing} have no Hessians in this run "
                         f"(config layers: {run_layers}); pick layers among them")
    return layers


def sweep_model(
    plan: SelectionPlan, model: str, hessian_dir: str, *, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Every candidate (and QuIP#) on ``selection.layers[model]`` × ``selection.matrices`` × the CALDERA ranks
    (``plan.ranks[model]``), with the run's calibration Hessians in ``hessian_dir``. Seeds and shared Hessian
    contexts as in :func:`caldera.pipeline.compress.compress_model` (one per layer and Hessian group, seed from
    :func:`~caldera.pipeline.compress.group_seed`), so a candidate's numbers are those its compression job would
    log. Returns one record per decomposition."""
    from caldera.algorithm.decomposition import HessianContext
    from caldera.experiments.jobs.calibrate import check_job_hessians
    from caldera.experiments.jobs.figures import linear_weight
    from caldera.experiments.jobs.models import load_layers
    from caldera.pipeline.compress import group_seed
    from caldera.pipeline.hessian_files import layer_file, load_layer_hessians
    from caldera.pipeline.linears import GROUP_OF, SHORT_NAMES

    sel = plan.settings.as_block()
    layers = sweep_layers(plan, model)
    ranks = plan.ranks[model]
    mats = list(sel.get("matrices") or SHORT_NAMES)
    long = sel.get("long_iters")
    long_layers = layers[: int(long["layers"])] if long else []
    mdl = load_layers(plan.run, model, layers)  # those layers' linear weights only
    check_job_hessians(plan.run, model, hessian_dir, layers, mdl)  # the right files, before any work
    records: list[dict[str, Any]] = []
    quip_params = dict(plan.quip_params)
    for li in layers:
        Hs = load_layer_hessians(layer_file(hessian_dir, li))
        ctxs: dict[str, Any] = {}
        for name in mats:
            g = GROUP_OF[name]
            H = Hs[g].double()
            W = linear_weight(mdl, li, name)
            seed = group_seed(int(sel.get("base", {}).get("seed", 0)), li, g)
            if g not in ctxs:
                ctxs[g] = HessianContext.prepare(H, rht=True, seed=seed)
            ctx = ctxs[g]
            where = {"model": model, "layer": li, "matrix": name, "shape": list(W.shape)}
            q = measure_matrix(W, H, "quip#", {**quip_params, "seed": seed}, ctx)
            records.append({**where, "candidate": "quip#", "rank": 0, "iters": None, **_slim(q)})
            jobs = [(b, c, tuple(sel["iters"]), r) for b in ranks for c in sel["candidates"] for r in ranks[b]]
            if long and li in long_layers and name in long["matrices"]:
                jobs += [(b, c, tuple(long["iters"]), ranks[b][-1]) for b in ranks for c in sel["candidates"]]
            for b, cand, iters, r in jobs:
                params = {**candidate_params(sel, cand, iters), "rank": r, "l_bits": b, "r_bits": b, "seed": seed}
                m = measure_matrix(W, H, "caldera", params, ctx)
                records.append({**where, "candidate": cand, "bits": b, "rank": r, "iters": list(iters),
                                **_slim(m), "ratio": m["error"] / q["error"]})
                log(f"{model} L{li} {name} {cand} B_LR {b} T{iters[0]}/{iters[1]} k={r}: {m['error']:.4f} "
                    f"(QuIP# {q['error']:.4f}) {m['seconds']:.2f}s (CPU {m['cpu_s']:.2f}s)")
    return records


def _slim(m: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of :func:`measure_matrix`: the errors and (moved to the timing file by
    :func:`split_timing`) the seconds."""
    return {k: m[k] for k in ("error", "error_reg", "seconds", "cpu_s")}


#: the keys of a measurement record that are clock readings
TIMING_KEYS = ("seconds", "cpu_s")
#: what identifies a measurement record (its clock readings are listed under these keys in the timing file)
RECORD_KEY = ("model", "layer", "matrix", "candidate", "bits", "rank", "iters")


def split_timing(records: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
    """``(records without clock readings, their clock readings in the same order)``."""
    return ([{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records],
            [{k: r[k] for k in TIMING_KEYS if k in r} for r in records])


def summarize(records: Sequence[dict[str, Any]], iters: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per candidate at T_out/T_in = ``iters`` (in the order the records list them): per model and rank, the
    geo-mean ratio to QuIP# and the number of matrices where CALDERA < QuIP#; and the score (log-mean over models
    of the per-model geo-mean ratio, exponentiated)."""
    out: dict[str, dict[str, Any]] = {}
    rows = [r for r in records if r["candidate"] != "quip#" and r["iters"] == list(iters)]
    for cand in dict.fromkeys(r["candidate"] for r in rows):
        mine = [r for r in rows if r["candidate"] == cand]
        per_model: dict[str, Any] = {}
        for model in dict.fromkeys(r["model"] for r in mine):
            mm = [r for r in mine if r["model"] == model]
            per_rank = {}
            for rank in sorted({r["rank"] for r in mm}):
                rr = [r for r in mm if r["rank"] == rank]
                per_rank[str(rank)] = {"geo_ratio": geo_mean([r["ratio"] for r in rr]),
                                       "below_quip": sum(r["ratio"] < 1 for r in rr), "n": len(rr)}
            per_model[model] = {"geo_ratio": geo_mean([r["ratio"] for r in mm]),
                                "geo_error": geo_mean([r["error"] for r in mm]),
                                "below_quip": sum(r["ratio"] < 1 for r in mm), "n": len(mm), "ranks": per_rank}
        out[cand] = {"score": geo_mean([pm["geo_ratio"] for pm in per_model.values()]), "models": per_model}
    return out


def select(summary: Mapping[str, Mapping[str, Any]], tie_tolerance: float) -> tuple[str, list[str]]:
    """The candidate with the lowest score (calibration error / QuIP#'s, geo-mean); candidates whose score is
    within ``tie_tolerance`` (relative) of the lowest are tied and the first of them in ``summary``'s order (the
    order of ``selection.candidates``) wins. Returns ``(selected, tied)``."""
    if not summary:
        raise ValueError("selection: no candidate was measured; check selection.candidates")
    if not 0 <= tie_tolerance < 1:
        raise ValueError(f"selection.tie_tolerance={tie_tolerance!r}; accepted: a float in [0, 1)")
    best = min(s["score"] for s in summary.values())
    tied = [c for c, s in summary.items() if s["score"] <= best * (1 + tie_tolerance)]
    return tied[0], tied


def _final(trace: Sequence[dict[str, Any]]) -> float:
    """Figure 3's number for one run: the lowest error after an LR step (regularized H, as the figure plots)."""
    return min(e["error"] for e in trace if e["step"] == "LR")


def ablation_comparisons(
    run: RunContext, figures: FiguresSettings, selected: dict[str, Any], hessian_dir: str, *,
    log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The Figure 3 comparisons on the figure's matrices (``figures``: model, layer, matrices, paper ranks mapped
    to stand-in ranks at equal bits by ``run``'s stand-ins, T_out and its LPLR T_in of 10), with the selected
    configuration's ``update_order``, ``hessian_update`` and ``best_tracking`` instead of the App. G.1 presets'
    (LR first, no Hessian update, best iterate per sub-step). Runs: 16-bit and 4-bit factors, 4-bit without
    LDLQ, and QuIP# + fp16 LR at the 16-bit rank. Returns the per-pair final errors and claim entries."""
    from caldera.algorithm.config import CalderaConfig
    from caldera.algorithm.decomposition import caldera_decompose
    from caldera.experiments.jobs.calibrate import check_job_hessians
    from caldera.experiments.jobs.figures import linear_weight
    from caldera.experiments.jobs.models import load_layers, stand_in_rank
    from caldera.methods import get_method
    from caldera.pipeline.hessian_files import layer_file, load_layer_hessians
    from caldera.pipeline.linears import GROUP_OF

    fc = figures.as_block()
    keys = ("update_order", "hessian_update", "best_tracking")
    if all(isinstance(v, Mapping) for v in selected.values()):  # one selected configuration per B_LR
        by_bits = {int(b): {k: p[k] for k in keys if k in p} for b, p in selected.items()}
    else:
        by_bits = {None: {k: selected[k] for k in keys if k in selected}}
    default = next(iter(by_bits.values()))

    def choice_for(bits: int) -> dict[str, Any]:
        return by_bits.get(bits, default)

    mdl = load_layers(run, fc["model"], [fc["layer"]])  # that layer's linear weights only
    check_job_hessians(run, fc["model"], hessian_dir, [fc["layer"]], mdl)  # the right files, before any work
    Hs = load_layer_hessians(layer_file(hessian_dir, fc["layer"]))
    pairs: list[dict[str, Any]] = []
    for name in fc["matrices"]:
        W, H = linear_weight(mdl, fc["layer"], name), Hs[GROUP_OF[name]]
        for paper_rank in fc["paper_ranks"]:
            row: dict[str, Any] = {"matrix": name, "paper_rank": paper_rank, "errors": {}, "lplr": []}
            for label in ("16bit-factors", "4bit-factors", "4bit-no-ldlq"):
                cfg = CalderaConfig.preset(label)
                cfg = cfg.replace(**choice_for(cfg.l_bits))
                r = stand_in_rank(run, fc["paper_model"], paper_rank, cfg.l_bits)
                cfg = cfg.replace(rank=r, outer_iters=fc["outer_iters"], svd=fc.get("svd", cfg.svd))
                dec = caldera_decompose(W, H, cfg)
                row["errors"][label] = _final(dec.error_trace)
                row.setdefault("ranks", {})[label] = r
                if label == "4bit-factors":
                    row["lplr"] = [e["lplr_errors"] for e in dec.error_trace if e["step"] == "LR"]
            r16 = stand_in_rank(run, fc["paper_model"], paper_rank, 16)
            spec = get_method("quip#-lr")
            row["errors"]["quip#-lr"] = spec.fn(W, H, spec.make_config({"lr_rank": r16})).error
            log(f"ablations {name}@{paper_rank}: " + ", ".join(f"{k} {v:.4f}" for k, v in row["errors"].items()))
            pairs.append(row)
    choice = {("all" if b is None else f"B_LR {b}"): c for b, c in by_bits.items()}
    return {"choice": choice, "pairs": pairs, "claims": ablation_claims(pairs, choice)}


def matches_run(run_params: Mapping[str, Any], selected_params: Mapping[str, Any]) -> bool:
    """Do the run's CALDERA rows with these params (``methods.caldera.params`` and the ``params_by_b_lr`` entry
    of their B_LR: :func:`caldera.experiments.planning.plan.caldera_params`, :attr:`SelectionPlan.run_params`) use the
    selected configuration?"""
    from caldera.methods import get_method

    spec = get_method("caldera")
    run = spec.make_config(dict(run_params))
    chosen = spec.make_config(dict(selected_params))
    return run == chosen


def step_selection(plan: SelectionPlan, hessian_dirs: Mapping[str, str], out_json: str, out_md: str) -> dict:
    """The workflow's ``selection`` rule (``plan``: its settings, ranks and run, :class:`SelectionPlan`): sweep
    every stand-in of ``selection.layers`` (``hessian_dirs``: model → folder of its calibration Hessians), select,
    re-measure the Figure 3 comparisons under the selected configuration, and write ``out_json`` and
    ``out_md``."""
    from caldera.atomic import write_result
    from caldera.experiments.jobs.calibrate import check_job_hessians

    settings = plan.settings
    sel = settings.as_block()  # what selection.json records: the block with its defaults
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    fig_model = plan.figures.model
    # every folder this job reads is checked before the first decomposition (and again by each step, with weights)
    for model in plan.models:
        if model not in hessian_dirs:
            raise ValueError(f"selection.layers names model {model!r} but no Hessians were given for it")
        check_job_hessians(plan.run, model, hessian_dirs[model], sweep_layers(plan, model))
    if settings.ablations and fig_model in hessian_dirs:
        check_job_hessians(plan.run, fig_model, hessian_dirs[fig_model], [plan.figures.layer])
    for model in plan.models:
        t1, c1 = time.perf_counter(), time.process_time()
        records += sweep_model(plan, model, hessian_dirs[model])
        seconds[model], cpu[model] = time.perf_counter() - t1, time.process_time() - c1
    long = sel.get("long_iters")
    res: dict[str, Any] = {
        "criterion": "calibration data-aware error sqrt(tr(ΔHΔᵀ)/tr(WHWᵀ)), raw calibration H, "
                     "geo-mean of the ratio to QuIP#'s over matrices x ranks, log-mean over stand-ins; "
                     "one selection per factor precision B_LR",
        "selection": sel, "by_bits": {},
    }
    records, clock = split_timing(records)
    for b in selection_bits(sel):
        mine = [r for r in records if r.get("bits") in (b, None)]  # QuIP# (bits None) is every B_LR's reference
        summary = summarize(mine, sel["iters"])
        chosen, tied = select(summary, float(settings.tie_tolerance))
        res["by_bits"][str(b)] = {
            "selection": {**sel, "bits": b}, "records": mine, "summary": summary,
            "long_summary": summarize(mine, long["iters"]) if long else {},
            "selected": {"name": chosen, "params": candidate_params(sel, chosen, sel["iters"]), "tied": tied,
                         "in_run": matches_run(plan.run_params[b], candidate_params(sel, chosen, sel["iters"]))},
        }
    if settings.ablations and fig_model in hessian_dirs:
        from caldera.methods import get_method

        t1, c1 = time.perf_counter(), time.process_time()
        spec = get_method("caldera")
        full = {b: spec.make_config(dict(sec["selected"]["params"])).to_dict() for b, sec in res["by_bits"].items()}
        res["ablations"] = ablation_comparisons(plan.run, plan.figures, full, hessian_dirs[fig_model])
        seconds["ablations"], cpu["ablations"] = time.perf_counter() - t1, time.process_time() - c1
    keyed = [{**{k: r[k] for k in RECORD_KEY if k in r}, **c} for r, c in zip(records, clock, strict=True)]
    timing = {"seconds": seconds, "cpu_s": cpu, "wall_s": time.perf_counter() - t0, "records": keyed}
    write_result(out_json, res, timing)
    write_atomic(out_md, to_markdown(res))
    return res


