"""The cost models of the compression rules (:mod:`caldera.experiments.planning.job_cost_model`): a variant's or a
chunk's layers, a seed replicate, the layer profile, the Hessians."""

from __future__ import annotations

from typing import Any

from caldera.atomic import timing_path
from caldera.experiments.planning.evaluation_costs import evaluation_s
from caldera.experiments.planning.job_cost_model import (
    MissingCalibration,
    ModelCost,
    calibrated,
    dense_fixed,
    median_of,
    read_result,
)
from caldera.experiments.planning.job_plan import PlannedJob, hessian_layers_run, law_layer_seconds, seq_tokens
from caldera.experiments.planning.rules import Rule


def _compression_s(job: PlannedJob, config: dict[str, Any], prof: dict[str, Any], costs: dict[str, Any],
                   layers: int) -> float:
    """Seconds of compressing ``layers`` decoder layers of ``job``'s variant: per layer its setup + the engine's
    law for the layer at the method's measured scale."""
    scale = (prof.get("matrix_scale") or {}).get(job.variant.method, prof.get("matrix_scale_default"))
    if scale is None:
        raise MissingCalibration(f"the profile has no compression scale for model {job.model!r}")
    setup = calibrated(prof, "layer_setup_s", job.model)
    return layers * (setup + scale * law_layer_seconds(costs, config, job.variant))


class CompressCost(ModelCost):
    """``compress_variant`` and ``compress_layers`` (a chunk of layers: the whole variant, or one chunk): fixed
    part + layers × (setup + scale × the engine's law). Fitted from the whole-variant jobs: fixed = job − its
    layers' walls; per-layer setup = layer wall − its matrices; the matrices scale the component laws per method
    (measured / law at the run's settings)."""

    rules = (Rule.COMPRESS_VARIANT, Rule.COMPRESS_LAYERS)

    def seconds(self, job, config, prof, costs):
        return (calibrated(prof, "compress_fixed_s", job.model)
                + _compression_s(job, config, prof, costs, job.extra["layers"]))

    def fit(self, run, profile):
        out = {}
        for model, pairs in run.by_model(Rule.COMPRESS_VARIANT).items():
            fixed, per_layer, scales = [], [], {}
            for p, j in pairs:
                n, layer_s, mat_s = run.layer_walls(p.name)
                if not n:
                    continue
                fixed.append(j["s"] - layer_s)
                per_layer.append((layer_s - mat_s) / n)
                law = law_layer_seconds(run.costs, run.config, p.variant)
                if law > 0:
                    scales.setdefault(p.variant.method, []).append(mat_s / n / law)
            out[model] = dict(compress_fixed_s=median_of(fixed, 0.0), layer_setup_s=median_of(per_layer, 0.0),
                              matrix_scale={m: median_of(s) for m, s in sorted(scales.items())},
                              matrix_scale_default=median_of([x for s in scales.values() for x in s], 1.0))
        return {"models": out}


class ReplicateCost(ModelCost):
    """``replicate`` (a seed replicate compresses and evaluates): fixed part + compression + evaluation, the fixed
    part being what the layers' walls and the evaluation steps leave of the job."""

    rules = (Rule.REPLICATE,)

    def seconds(self, job, config, prof, costs):
        return (calibrated(prof, "replicate_fixed_s", job.model)
                + _compression_s(job, config, prof, costs, job.extra["layers"]) + evaluation_s(job, config, prof))

    def fit(self, run, profile):
        out = {}
        for model, pairs in run.by_model(Rule.REPLICATE).items():
            fixed = []
            for p, j in pairs:
                n, layer_s, _ = run.layer_walls(p.name)
                fixed.append(j["s"] - layer_s - sum(run.eval_steps(p.name).values()))
            out[model] = {"replicate_fixed_s": median_of(fixed, 0.0)}
        return {"models": out}


class ProfileLayersCost(ModelCost):
    """``profile_layers``: the compression's fixed part + layers × seconds per profiled layer."""

    rules = (Rule.PROFILE_LAYERS,)

    def seconds(self, job, config, prof, costs):
        return (calibrated(prof, "compress_fixed_s", job.model)
                + job.extra["layers"] * calibrated(prof, "profile_layer_s", job.model))

    def fit(self, run, profile):
        models = profile["models"]
        out = {}
        for model, pairs in run.by_model(Rule.PROFILE_LAYERS).items():
            f = models.get(model, {}).get("compress_fixed_s", 0.0)
            out[model] = {"profile_layer_s": median_of((j["s"] - f) / max(p.extra["layers"], 1) for p, j in pairs)}
        return {"models": out}


class HessiansCost(ModelCost):
    """``hessians``: fixed part + calibration tokens × layers run × rate. The collection's own seconds (its timing
    file: the embedding of the calibration batches and every decoder layer up to the last one collected) per token
    and layer run; the rest of the job (start-up, the tokenizer, the calibration text, opening the checkpoint,
    writing) is its fixed part. A run whose job recorded no collection time: the dense evaluation's fixed part
    stands in for it."""

    rules = (Rule.HESSIANS,)

    def seconds(self, job, config, prof, costs):
        model = job.model
        fixed = prof["hessian_fixed_s"] if "hessian_fixed_s" in prof else dense_fixed(prof, model)
        return fixed + seq_tokens(config) * hessian_layers_run(config, model) * calibrated(
            prof, "hessian_token_layer_s", model)

    def fit(self, run, profile):
        models, config = profile["models"], run.config
        out = {}
        for model, pairs in run.by_model(Rule.HESSIANS).items():
            prof = models.get(model, {})
            fit = out.setdefault(model, {})
            tokens = seq_tokens(config)
            timed = [(j["s"], t) for _, j in pairs
                     if (t := read_result(timing_path(run.results / "hessians" / model / "hessians.json")))
                     and t.get("computed")]
            if timed:
                fit["hessian_fixed_s"] = max(median_of(s - t["collect_s"] for s, t in timed), 0.0)
                fit["hessian_token_layer_s"] = median_of(t["collect_s"] / (tokens * t["layers_run"]) for _, t in timed)
            else:
                f = prof.get("dense_fixed_s", prof.get("compress_fixed_s", 0.0))
                work = tokens * hessian_layers_run(config, model)
                fit["hessian_token_layer_s"] = median_of((j["s"] - f) / work for _, j in pairs)
        return {"models": out}
