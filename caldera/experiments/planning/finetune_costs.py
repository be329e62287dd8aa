"""The cost models of the fine-tuning rules (:mod:`caldera.experiments.planning.job_cost_model`): RHT fine-tuning
(Tables 3-4) and LoRA fine-tuning (Table 5)."""

from __future__ import annotations

from caldera.experiments.planning.job_cost_model import (
    MissingCalibration,
    ModelCost,
    calibrated,
    median_of,
    read_result,
)
from caldera.experiments.planning.job_plan import lora_work, rhtft_work
from caldera.experiments.planning.rules import Rule


def _line(points: list[tuple[float, float]], fixed: float) -> tuple[float, float]:
    """``(intercept, slope)`` of the least-squares line through ``(x, y)`` points, both kept >= 0; with fewer
    than two distinct x, the slope through the points above the intercept ``fixed``."""
    pts = [(x, y) for x, y in points if x > 0]
    if len({x for x, _ in pts}) >= 2:
        mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        if slope >= 0 and my - slope * mx >= 0:
            return my - slope * mx, slope
        if slope < 0:
            return max(my, 0.0), 0.0
        return 0.0, sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)
    return fixed, max(median_of(((y - fixed) / x for x, y in pts), 0.0), 0.0)


class RhtFinetuneCost(ModelCost):
    """``rht_finetune``: fixed part + training tokens × rate (the epochs' walls of its timing file per token)."""

    rules = (Rule.RHT_FINETUNE,)

    def seconds(self, job, config, prof, costs):
        return (calibrated(prof, "rhtft_fixed_s", job.model)
                + rhtft_work(config)["tokens"] * calibrated(prof, "rhtft_token_s", job.model))

    def fit(self, run, profile):
        out = {}
        for model, pairs in run.by_model(Rule.RHT_FINETUNE).items():
            rate, fixed = [], []
            for p, j in pairs:
                t = read_result(run.results / "rhtft" / p.name / "rhtft.timing.json") or {}
                ep = sum(t.get("epoch_wall_s") or [])
                if ep:
                    rate.append(ep / rhtft_work(run.config)["tokens"])
                    fixed.append(j["s"] - ep)
            out[model] = dict(rhtft_token_s=median_of(rate, 0.0), rhtft_fixed_s=median_of(fixed, 0.0))
        return {"models": out}


class LoraFinetuneCost(ModelCost):
    """``lora_finetune``: fixed part + training tokens × the task's rate + final evaluations × evaluated tokens ×
    rate. The training loop (training blocks and held-out scoring) per token and task; the rest of the job is its
    start-up and model load plus its final evaluations (one, or two when the best held-out checkpoint is an earlier
    one), fitted as fixed + rate × evaluated tokens; each task's share of jobs that evaluate twice."""

    rules = (Rule.LORA_FINETUNE,)

    def seconds(self, job, config, prof, costs):
        model, task = job.model, job.extra["task"]
        w = lora_work(config, task)
        train = (prof.get("lora_train_token_s") or {}).get(task)
        if train is None:
            raise MissingCalibration(f"the profile has no LoRA {task!r} rate for model {model!r}")
        evals = 1.0 + (prof.get("lora_second_eval") or {}).get(task, 0.5)
        return (calibrated(prof, "lora_fixed_s", model) + w["train"] * train
                + evals * w["final"] * calibrated(prof, "lora_eval_token_s", model))

    def fit(self, run, profile):
        models = profile["models"]
        out = {}
        for model, pairs in run.by_model(Rule.LORA_FINETUNE).items():
            train, rest, twice = {}, [], {}
            for p, j in pairs:
                row, task = p.name.rsplit("_", 1)
                t = read_result(run.results / "lora" / row / f"{task}.timing.json") or {}
                r = read_result(run.results / "lora" / row / f"{task}.json") or {}
                if "train_s" not in t or "best_step" not in r:
                    continue
                w = lora_work(run.config, task)
                train.setdefault(task, []).append(t["train_s"] / w["train"])
                n_eval = 1 if r["best_step"] == r["final_step"] else 2
                twice.setdefault(task, []).append(n_eval - 1)
                rest.append((n_eval * w["final"], j["s"] - t["train_s"]))
            fixed, rate = _line(rest, models.get(model, {}).get("compress_fixed_s", 0.0))
            out[model] = dict(lora_train_token_s={k: median_of(v) for k, v in sorted(train.items())},
                              lora_fixed_s=fixed, lora_eval_token_s=rate,
                              lora_second_eval={k: sum(v) / len(v) for k, v in sorted(twice.items())})
        return {"models": out}
