"""Every job of a workflow config and its predicted wall time on one machine.

``caldera cost`` prices the engine from component laws (:mod:`caldera.experiments.planning.cost`); a small run's
jobs spend most of their time elsewhere: the interpreter and imports, loading the model and the Hessians, per-layer
setup and writes, perplexity windows, zero-shot documents, fine-tuning steps. Each job is modelled as

    fixed part (start-up, model load) + Σ rate × work,

with the jobs and their work read from the config (:mod:`caldera.experiments.planning.job_plan`: windows × tokens
per corpus, zero-shot requests, layers, the engine's law for a matrix at the config's rank and iterations, training
tokens) and the fixed parts and rates from the machine type's job profile
(:mod:`caldera.experiments.planning.job_profile`, measured from one finished run). :func:`predict` prices each job;
:mod:`caldera.experiments.planning.job_check` compares the prediction with a run's timings and
:mod:`caldera.experiments.planning.job_report` writes it as text. A config whose models are not in the profile, or
a device it was not measured on, is priced by the component laws alone.
"""

from __future__ import annotations

from typing import Any

from caldera.experiments.planning.job_plan import (
    PlannedJob,
    ablations_law,
    compressed_fraction,
    corpus_tokens,
    eval_parts,
    hessian_layers_run,
    law_layer_seconds,
    lora_work,
    model_layers,
    plan_jobs,
    rhtft_work,
    selection_units,
    seq_tokens,
    throughput_work,
)
from caldera.experiments.planning.job_profile import CONSTANT_RULES, SMALL_JOB
from caldera.experiments.planning.rules import Rule

# ------------------------------------------------------------------------------------------ prediction


class MissingCalibration(KeyError):
    """The profile has no measurement for what a job needs (a model or a kind of job it never ran)."""


def _get(prof: dict[str, Any], key: str, model: str) -> Any:
    if key not in prof:
        raise MissingCalibration(f"the profile has no {key!r} for model {model!r}")
    return prof[key]


def _dense_fixed(prof: dict[str, Any], model: str) -> float:
    """The fixed part of a job that loads the dense model alone (Hessians, the dense reference)."""
    return prof["dense_fixed_s"] if "dense_fixed_s" in prof else _get(prof, "compress_fixed_s", model)


def _mixed(rates: dict[str, float], f: float) -> float:
    """A throughput figure of a variant whose share ``f`` of decoder layers is compressed: the dense figure and
    the all-compressed one, mixed in proportion (the dense one alone for the dense variant, ``f`` = 0)."""
    return (1.0 - f) * rates["dense"] + f * rates["compressed"]


def throughput_seconds(job: PlannedJob, config: dict[str, Any], prof: dict[str, Any]) -> float:
    """A throughput job (one model, all of its Table 6 variants): its fixed part + per variant, loading it and the
    forwards of its timed rounds and warm-up calls (:func:`throughput_work`) at the measured seconds per decoded
    token and per single-token call, each mixed between the dense and the compressed figure by the share of
    layers the variant compresses."""
    w = throughput_work(config)
    total = prof["throughput_fixed_s"]
    for v in job.extra.get("variants") or [job.variant]:
        f = 0.0 if v is None or v.method == "dense" else compressed_fraction(config, job.model)
        total += (_mixed(prof["throughput_load_s"], f)
                  + w["decode_tokens"] * _mixed(prof["throughput_decode_token_s"], f)
                  + w["calls"] * _mixed(prof["throughput_call_s"], f))
    return total


def job_seconds(job: PlannedJob, config: dict[str, Any], profile: dict[str, Any], costs: dict[str, Any]) -> float:
    """Predicted wall seconds of one job (module docstring). ``MissingCalibration`` when the profile lacks what it
    needs (then the job is priced by the component laws alone, or not at all, by the caller)."""
    consts = profile.get("constants", {})
    tp_prof = (profile.get("models") or {}).get(job.model) if job.rule == Rule.THROUGHPUT else None
    if tp_prof and "throughput_fixed_s" in tp_prof:
        return throughput_seconds(job, config, tp_prof)
    if job.rule in CONSTANT_RULES:
        return float(consts.get(job.rule, consts.get(SMALL_JOB, 0.0)))
    model = job.model
    prof = (profile.get("models") or {}).get(model)
    eng = profile.get("engine") or {}
    if job.rule == Rule.SELECTION:
        from caldera.experiments.planning.settings import SelectionSettings

        sel = SelectionSettings.from_block(config["selection"])
        abl = 0.0
        if sel.ablations and eng.get("selection_ablations_law"):
            abl = eng["selection_ablations_s"] * ablations_law(config, costs) / eng["selection_ablations_law"]
        return (_get(eng, "selection_start_s", "") + abl
                + sum(len(v) for v in sel.layers.values()) * eng.get("selection_layer_s", 0.0)
                + _get(eng, "selection_scale", "") * selection_units(config, costs))
    if job.rule in (Rule.ABLATION_TRACES, Rule.LPLR_TRACES):
        from caldera.experiments.planning.cost import figure_rules

        fig = figure_rules(config, costs, config["models"][model]["shapes"])[job.rule]
        law = fig["total_s"] / fig["jobs"] if "total_s" in fig else fig["s_per_job"]
        scale = ((profile.get("models") or {}).get(model) or {}).get("matrix_scale_default")
        if scale is None:
            raise MissingCalibration(f"the profile has no compression scale for model {model!r}")
        return _get(eng, f"{job.rule}_fixed_s", "") + scale * law
    if prof is None:
        raise MissingCalibration(f"the profile has no model {model!r}")

    def compression(layers: int) -> float:
        scale = (prof.get("matrix_scale") or {}).get(job.variant.method, prof.get("matrix_scale_default"))
        if scale is None:
            raise MissingCalibration(f"the profile has no compression scale for model {model!r}")
        return layers * (_get(prof, "layer_setup_s", model) + scale * law_layer_seconds(costs, config, job.variant))

    def evaluation() -> float:
        parts = eval_parts(config, job.variant)
        s = sum(prof["corpus_fixed_s"] + t * prof["token_s"] for t in parts["corpora"].values())
        if parts["kl"]:
            s += parts["corpora"][parts["kl"]] * prof["kl_token_s"]
        return s + parts["zeroshot"] * prof["zeroshot_token_s"]

    if job.rule == Rule.EVALUATE:
        return _get(prof, "eval_fixed_s", model) + evaluation()
    if job.rule in (Rule.COMPRESS_VARIANT, Rule.COMPRESS_LAYERS):  # a chunk of layers (the whole variant, or one chunk)
        return _get(prof, "compress_fixed_s", model) + compression(job.extra["layers"])
    if job.rule == Rule.REPLICATE:
        return _get(prof, "replicate_fixed_s", model) + compression(job.extra["layers"]) + evaluation()
    if job.rule == Rule.PROFILE_LAYERS:
        return _get(prof, "compress_fixed_s", model) + job.extra["layers"] * _get(prof, "profile_layer_s", model)
    if job.rule == Rule.HESSIANS:
        fixed = prof["hessian_fixed_s"] if "hessian_fixed_s" in prof else _dense_fixed(prof, model)
        return fixed + seq_tokens(config) * hessian_layers_run(config, model) * _get(
            prof, "hessian_token_layer_s", model)
    if job.rule == Rule.DENSE_REFERENCE:
        return _dense_fixed(prof, model) + corpus_tokens(config, config["eval"]["distribution"]) * _get(
            prof, "reference_token_s", model)
    if job.rule == Rule.RHT_FINETUNE:
        return _get(prof, "rhtft_fixed_s", model) + rhtft_work(config)["tokens"] * _get(prof, "rhtft_token_s", model)
    if job.rule == Rule.LORA_FINETUNE:
        task = job.extra["task"]
        w = lora_work(config, task)
        train = (prof.get("lora_train_token_s") or {}).get(task)
        if train is None:
            raise MissingCalibration(f"the profile has no LoRA {task!r} rate for model {model!r}")
        evals = 1.0 + (prof.get("lora_second_eval") or {}).get(task, 0.5)
        return (_get(prof, "lora_fixed_s", model) + w["train"] * train
                + evals * w["final"] * _get(prof, "lora_eval_token_s", model))
    raise MissingCalibration(f"no model for rule {job.rule!r}")


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
