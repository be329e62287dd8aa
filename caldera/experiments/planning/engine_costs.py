"""The cost models of the engine's rules outside compression (:mod:`caldera.experiments.planning.job_cost_model`):
the selection sweep and the figure traces, priced from the profile's ``engine`` section."""

from __future__ import annotations

import statistics
from typing import Any

from caldera.experiments.planning.job_cost_model import (
    SMALL_JOB,
    MissingCalibration,
    RuleCost,
    calibrated,
    read_result,
)
from caldera.experiments.planning.job_plan import ablations_law, selection_units
from caldera.experiments.planning.rules import Rule


def _trace_law(fig: dict[str, Any]) -> float:
    """The component laws' seconds of one job of a figure-trace rule (``figure_rules(...)[rule]``)."""
    return fig["total_s"] / fig["jobs"] if "total_s" in fig else fig["s_per_job"]


class SelectionCost(RuleCost):
    """``selection`` (the sweep): start-up + its ablations (measured seconds × law ratio) + swept layers × seconds
    per layer (reading its Hessians and contexts, the sweep's bookkeeping) + scale × the decompositions' law.
    Fitted with a job's start-up as the small jobs' (:data:`SMALL_JOB`)."""

    rules = (Rule.SELECTION,)

    def predict(self, job, config, profile, costs):
        from caldera.experiments.planning.settings import SelectionSettings

        eng = profile.get("engine") or {}
        sel = SelectionSettings.from_block(config["selection"])
        abl = 0.0
        if sel.ablations and eng.get("selection_ablations_law"):
            abl = eng["selection_ablations_s"] * ablations_law(config, costs) / eng["selection_ablations_law"]
        return (calibrated(eng, "selection_start_s", "") + abl
                + sum(len(v) for v in sel.layers.values()) * eng.get("selection_layer_s", 0.0)
                + calibrated(eng, "selection_scale", "") * selection_units(config, costs))

    def fit(self, run, profile):
        config, costs = run.config, run.costs
        sel = run.jobs.get((Rule.SELECTION, "selection"))
        sel_t = read_result(run.results / "selection" / "selection.timing.json") if sel else None
        if not (sel and sel_t and config.get("selection")):
            return {}
        from caldera.experiments.planning.settings import SelectionSettings

        layers = SelectionSettings.from_block(config["selection"]).layers
        cpu = sel_t.get("cpu_s") or {}
        recs = sel_t.get("records") or []
        rec_s = sum(float(r.get("seconds", 0.0)) for r in recs)
        units = selection_units(config, costs)
        start = statistics.median(run.seconds(SMALL_JOB) or [0.0])
        ablations = float(cpu.get("ablations", 0.0))
        n_layers = sum(len(v) for v in layers.values())
        return {"engine": dict(selection_start_s=start, selection_ablations_s=ablations,
                               selection_ablations_law=ablations_law(config, costs),
                               selection_layer_s=max((sel["s"] - start - ablations - rec_s) / n_layers, 0.0),
                               selection_scale=rec_s / units if units else 0.0)}


class TracesCost(RuleCost):
    """``ablation_traces`` and ``lplr_traces`` (Figures 3's comparisons): start-up + the component laws' seconds of
    the job at the compression's scale (the figure model's ``matrix_scale_default``)."""

    rules = (Rule.ABLATION_TRACES, Rule.LPLR_TRACES)

    def predict(self, job, config, profile, costs):
        from caldera.experiments.planning.cost import figure_rules

        model = job.model
        eng = profile.get("engine") or {}
        law = _trace_law(figure_rules(config, costs, config["models"][model]["shapes"])[job.rule])
        scale = ((profile.get("models") or {}).get(model) or {}).get("matrix_scale_default")
        if scale is None:
            raise MissingCalibration(f"the profile has no compression scale for model {model!r}")
        return calibrated(eng, f"{job.rule}_fixed_s", "") + scale * law

    def fit(self, run, profile):
        config = run.config
        if not config.get("figures"):
            return {}
        from caldera.experiments.planning.cost import figure_rules

        fm = config["figures"]["model"]
        fig = figure_rules(config, run.costs, config["models"][fm]["shapes"])
        scale = (profile["models"].get(fm) or {}).get("matrix_scale_default", 1.0)
        out = {}
        for rule in self.rules:
            ran = run.seconds(rule)
            law = _trace_law(fig[rule])
            if ran:
                out[f"{rule}_fixed_s"] = max(statistics.median(ran) - scale * law, 0.0)
        return {"engine": out}
