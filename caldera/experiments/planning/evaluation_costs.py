"""The cost models of the evaluation rules (:mod:`caldera.experiments.planning.job_cost_model`): a variant's
perplexity and zero-shot evaluation, the dense reference, the throughput of Table 6."""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.job_cost_model import (
    ConstantCost,
    ModelCost,
    calibrated,
    dense_fixed,
    median_of,
    read_result,
)
from caldera.experiments.planning.job_plan import (
    PlannedJob,
    compressed_fraction,
    corpus_tokens,
    eval_parts,
    throughput_work,
)
from caldera.experiments.planning.rules import Rule


def evaluation_s(job: PlannedJob, config: dict[str, Any], prof: dict[str, Any]) -> float:
    """Seconds of evaluating ``job``'s variant: per perplexity corpus its fixed part + tokens × rate, the paired
    metrics on the distribution corpus, the zero-shot request tokens."""
    parts = eval_parts(config, job.variant)
    s = sum(prof["corpus_fixed_s"] + t * prof["token_s"] for t in parts["corpora"].values())
    if parts["kl"]:
        s += parts["corpora"][parts["kl"]] * prof["kl_token_s"]
    return s + parts["zeroshot"] * prof["zeroshot_token_s"]


def _mixed(rates: dict[str, float], f: float) -> float:
    """A throughput figure of a variant whose share ``f`` of decoder layers is compressed: the dense figure and
    the all-compressed one, mixed in proportion (the dense one alone for the dense variant, ``f`` = 0)."""
    return (1.0 - f) * rates["dense"] + f * rates["compressed"]


class EvaluateCost(ModelCost):
    """``evaluate``: fixed part + per corpus (fixed part + tokens × rate) + the paired metrics' tokens × rate +
    zero-shot request tokens × rate. The dense job's two corpora give a corpus's fixed part and the per-token rate
    (the same forward for both); the compressed jobs' distribution corpus adds the paired-metrics rate; zero-shot
    per request token; the rest of the job (start-up, load, building the weights) is its fixed part, and the dense
    job's alone is the fixed part of a job that loads the dense model (``dense_fixed_s``)."""

    rules = (Rule.EVALUATE,)

    def seconds(self, job, config, prof, costs):
        return calibrated(prof, "eval_fixed_s", job.model) + evaluation_s(job, config, prof)

    def fit(self, run, profile):
        config, out = run.config, {}
        for model, pairs in run.by_model(Rule.EVALUATE).items():
            dense = [(p, j) for p, j in pairs if p.variant.method == "dense"]
            comp = [(p, j) for p, j in pairs if p.variant.method != "dense"]
            prof = out.setdefault(model, {})
            corpus_fixed, token_s = 0.0, None
            if dense:
                p, _ = dense[0]
                steps = run.eval_steps(p.name)
                pts = [(corpus_tokens(config, c), steps[f"ppl_{c}"]) for c in config["eval"]["ppl"]
                       if f"ppl_{c}" in steps]
                if len(pts) >= 2 and pts[0][0] != pts[1][0]:
                    (t0, s0), (t1, s1) = sorted(pts)[:2]
                    token_s = max((s1 - s0) / (t1 - t0), 0.0)
                    corpus_fixed = max(s0 - token_s * t0, 0.0)
                elif pts:
                    token_s = sum(s for _, s in pts) / sum(t for t, _ in pts)
            kl_s, zs_s, fixed = [], [], []
            for p, j in comp + dense:
                steps = run.eval_steps(p.name)
                parts = eval_parts(config, p.variant)
                if parts["kl"] and f"ppl_{parts['kl']}" in steps and token_s is not None:
                    t = parts["corpora"][parts["kl"]]
                    kl_s.append((steps[f"ppl_{parts['kl']}"] - corpus_fixed - token_s * t) / t)
                if "zeroshot" in steps and parts["zeroshot"]:
                    zs_s.append(steps["zeroshot"] / parts["zeroshot"])
                fixed.append(j["s"] - sum(steps.values()))
            prof.update(eval_fixed_s=median_of(fixed, 0.0), corpus_fixed_s=corpus_fixed, token_s=token_s or 0.0,
                        kl_token_s=max(median_of(kl_s, 0.0), 0.0), zeroshot_token_s=median_of(zs_s, 0.0))
            dense_fixed = [j["s"] - sum(run.eval_steps(p.name).values()) for p, j in dense]
            if dense_fixed:
                prof["dense_fixed_s"] = max(median_of(dense_fixed), 0.0)
        return {"models": out}


class DenseReferenceCost(ModelCost):
    """``dense_reference`` (loads the dense model and runs it on the distribution corpus): the dense fixed part +
    tokens × rate."""

    rules = (Rule.DENSE_REFERENCE,)

    def seconds(self, job, config, prof, costs):
        return dense_fixed(prof, job.model) + corpus_tokens(config, config["eval"]["distribution"]) * calibrated(
            prof, "reference_token_s", job.model)

    def fit(self, run, profile):
        models, config = profile["models"], run.config
        dist = (config.get("eval") or {}).get("distribution")
        out = {}
        for model, pairs in run.by_model(Rule.DENSE_REFERENCE).items():
            prof = models.get(model, {})
            f = prof.get("dense_fixed_s", prof.get("compress_fixed_s", 0.0))
            out[model] = {"reference_token_s": median_of((j["s"] - f) / corpus_tokens(config, dist) for _, j in pairs)}
        return {"models": out}


class ThroughputCost(ConstantCost):
    """``throughput`` (one model, all of its Table 6 variants): its fixed part + per variant, loading it and the
    forwards of its timed rounds and warm-up calls (:func:`throughput_work`) at the measured seconds per decoded
    token and per single-token call, each mixed between the dense and the compressed figure by the share of
    layers the variant compresses; a constant (:class:`ConstantCost`) for a model without those figures.

    Fitted per job: its fixed part (start-up, the tokenizer) is what the variants' loads and calls leave of its
    time; per variant, the load and the seconds per decoded token and per single-token call are kept for the dense
    model and for the all-compressed one (a variant compressing a share f of the layers is measured as
    (1 - f) dense + f compressed, and solved for the all-compressed figure)."""

    def __init__(self) -> None:
        super().__init__(Rule.THROUGHPUT)

    def predict(self, job, config, profile, costs):
        prof = (profile.get("models") or {}).get(job.model)
        if not prof or "throughput_fixed_s" not in prof:
            return super().predict(job, config, profile, costs)
        w = throughput_work(config)
        total = prof["throughput_fixed_s"]
        for v in job.extra.get("variants") or [job.variant]:
            f = 0.0 if v is None or v.method == "dense" else compressed_fraction(config, job.model)
            total += (_mixed(prof["throughput_load_s"], f)
                      + w["decode_tokens"] * _mixed(prof["throughput_decode_token_s"], f)
                      + w["calls"] * _mixed(prof["throughput_call_s"], f))
        return total

    def fit(self, run, profile):
        config = run.config
        w = throughput_work(config)
        out = {}
        for model, pairs in run.by_model(Rule.THROUGHPUT).items():
            fixed, kinds = [], {"dense": [], "compressed": []}
            for p, j in pairs:
                r = read_result(run.results / "throughput" / f"{p.name}.json") or {}
                scale = (w["rounds"] + w["warmup"]) / w["rounds"]  # the warm-up calls, as many forwards each
                try:
                    per = [(m["method"], float(m["load_s"]), sum(m["decode"]["times_s"]),
                            sum(m["single_token"]["times_s"]))
                           for m in r["variants"].values() if "oom" not in m]  # one that did not fit ran nothing
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue
                if not per:
                    continue
                fixed.append(j["s"] - sum(load + scale * (dec + one) for _, load, dec, one in per))
                for method, load, dec, one in per:
                    kind = "dense" if method == "dense" else "compressed"
                    kinds[kind].append((load, scale * dec / w["decode_tokens"], scale * one / w["calls"]))
            if not fixed or not kinds["dense"]:
                continue
            prof = out.setdefault(model, {})
            dense = [median_of(x[i] for x in kinds["dense"]) for i in range(3)]
            f = compressed_fraction(config, model)
            comp = [(median_of(x[i] for x in kinds["compressed"]) - (1 - f) * dense[i]) / f if kinds["compressed"]
                    else dense[i] for i in range(3)]
            prof["throughput_fixed_s"] = max(median_of(fixed), 0.0)
            for i, key in enumerate(("throughput_load_s", "throughput_decode_token_s", "throughput_call_s")):
                prof[key] = {"dense": dense[i], "compressed": max(comp[i], 0.0)}
        return {**super().fit(run, profile), "models": out}
