"""Every job of a workflow config and its predicted wall time on one machine.

``caldera cost`` prices the engine from component laws (:mod:`caldera.experiments.planning.cost`); a small run's
jobs spend most of their time elsewhere: the interpreter and imports, loading the model and the Hessians, per-layer
setup and writes, perplexity windows, zero-shot documents, fine-tuning steps. Each job is modelled as

    fixed part (start-up, model load) + Σ rate × work,

with the jobs and their work read from the config (:mod:`caldera.experiments.planning.job_plan`: windows × tokens
per corpus, zero-shot requests, layers, the engine's law for a matrix at the config's rank and iterations, training
tokens), the fixed parts and rates from the machine type's job profile
(:mod:`caldera.experiments.planning.job_profile`, measured from one finished run) and each rule's formula from
its cost model (:mod:`caldera.experiments.planning.rule_costs`). :func:`predict` prices each job;
:mod:`caldera.experiments.planning.job_check` compares the prediction with a run's timings and
:mod:`caldera.experiments.planning.job_report` writes it as text. A config whose models are not in the profile, or
a device it was not measured on, is priced by the component laws alone.
"""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.job_cost_model import MissingCalibration
from caldera.experiments.planning.job_plan import PlannedJob, model_layers, plan_jobs
from caldera.experiments.planning.rule_costs import job_seconds
from caldera.experiments.planning.rules import Rule


def borrow_rates(profile: dict[str, Any], model: str, like: str, ratio: float | None = None) -> dict[str, Any]:
    """``model``'s profile with what it lacks taken from model ``like``'s, its per-token rates scaled by ``ratio``
    (default: the two models' per-token evaluation rates, LM head included); a LoRA job of a model the calibration
    run fine-tuned only on another, say."""
    a, b = profile["models"].get(model, {}), profile["models"][like]
    if ratio is None:
        ratio = a["token_s"] / b["token_s"] if a.get("token_s") and b.get("token_s") else 1.0
    out = dict(a)
    for k, v in b.items():
        if k in out:
            continue
        if isinstance(v, dict):
            out[k] = {kk: vv * ratio if "token" in k else vv for kk, vv in v.items()}
        elif isinstance(v, (int, float)):
            out[k] = v * ratio if "token" in k else v
        else:
            out[k] = v
    return out


def _headless(job: PlannedJob) -> bool:
    """A job whose model runs without its language-model head: LoRA on a classification task (a two-way head)."""
    from caldera.experiments.planning.loraft_rows import LM_TASK

    return job.rule == Rule.LORA_FINETUNE and job.extra.get("task") != LM_TASK


def _body_ratio(config: dict[str, Any], profile: dict[str, Any], model: str, like: str) -> float | None:
    """How much slower ``model``'s decoder layers are per token than ``like``'s, all layers together (from the
    Hessian jobs' per-layer rates: no LM head, whose vocabulary makes Gemma-3's evaluation 3x SmolLM2's)."""
    a, b = profile["models"].get(model, {}), profile["models"].get(like, {})
    if not a.get("hessian_token_layer_s") or not b.get("hessian_token_layer_s") or like not in config["models"]:
        return None
    return (a["hessian_token_layer_s"] * len(model_layers(config, model))) / (
        b["hessian_token_layer_s"] * len(model_layers(config, like)))


def predict(config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every job of ``config`` (:func:`plan_jobs`) with its predicted seconds: ``{"rule", "job", "model", "stage",
    "s", "how"}``; ``how`` is "measured" (the profile prices it), "borrowed" (another model's rates, scaled) or
    "unpriced" (``s`` None: nothing in the profile says)."""
    out = []
    models = profile.get("models") or {}
    for job in plan_jobs(config):
        how, s = "measured", None
        try:
            s = job_seconds(job, config, profile, costs)
        except MissingCalibration:
            like = next((m for m in models if m != job.model), None)
            if like is not None and job.model is not None:
                ratio = _body_ratio(config, profile, job.model, like) if _headless(job) else None
                borrowed = {**profile, "models": {**models, job.model: borrow_rates(profile, job.model, like, ratio)}}
                try:
                    s, how = job_seconds(job, config, borrowed, costs), "borrowed"
                except MissingCalibration:
                    s, how = None, "unpriced"
            else:
                how = "unpriced"
        out.append({"rule": job.rule, "job": job.name, "model": job.model, "stage": job.stage, "s": s, "how": how})
    return out
