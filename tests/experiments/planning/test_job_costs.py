"""caldera.experiments.planning.job_costs: every job's prediction from the job profile, with another model's rates
where the profile has none of its own."""

from __future__ import annotations

import pytest

from caldera.experiments.planning import job_costs as J
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning.cost import load_costs
from tests.helpers import workflow_config


def test_a_job_the_profile_cannot_price_borrows_another_models_rates_or_stays_unpriced(tmp_path):
    """A model the run never evaluated takes the other model's rates scaled by the two models' forward speed
    ("borrowed"); with no other model, the job is "unpriced" and counted as such."""
    costs = load_costs("cpu")
    prof = {"format": PR.FORMAT, "models": {"smollm2": {"token_s": 0.004, "lora_fixed_s": 30.0,
                                                      "lora_train_token_s": {"wiki": 0.01, "rte": 0.01,
                                                                             "winogrande": 0.01},
                                                      "lora_eval_token_s": 0.0},
                                           "gemma3": {"token_s": 0.008}}, "engine": {}, "constants": {}}
    mini = workflow_config("mini")
    mini["lora_ft"]["rows"] = "all"
    pred = [p for p in J.predict(mini, prof, costs) if p["rule"] == "lora_finetune"]
    gemma = [p for p in pred if p["model"] == "gemma3"]
    assert gemma and all(p["how"] == "borrowed" for p in gemma)
    sm = next(p for p in pred if p["model"] == "smollm2" and p["job"].endswith("_wiki"))
    gm = next(p for p in gemma if p["job"].endswith("_wiki") and "-r8-lr16-ft8" in p["job"])
    w = JP.lora_work(mini, "wiki")["train"]
    assert sm["s"] == pytest.approx(30.0 + 0.01 * w) and gm["s"] == pytest.approx(30.0 + 0.02 * w)
    alone = {**prof, "models": {"gemma3": prof["models"]["gemma3"]}}
    assert all(p["how"] == "unpriced" and p["s"] is None
               for p in J.predict(mini, alone, costs) if p["rule"] == "lora_finetune")


def test_a_classification_lora_job_borrows_by_the_decoder_layers_speed():
    """A classification LoRA job never runs the LM head: another model's rates are scaled by the two models' decoder
    layers (their Hessian rates x layers), not by their evaluation speed, which the head dominates; the language-
    modelling task keeps the evaluation ratio."""
    costs = load_costs("cpu")
    rates = {"wiki": 0.01, "rte": 0.01, "winogrande": 0.01}
    prof = {"format": PR.FORMAT, "engine": {}, "constants": {}, "models": {
        "smollm2": {"token_s": 0.004, "hessian_token_layer_s": 0.0003, "lora_fixed_s": 0.0,
                    "lora_train_token_s": rates, "lora_eval_token_s": 0.0},
        "gemma3": {"token_s": 0.012, "hessian_token_layer_s": 0.0005}}}
    mini = workflow_config("mini")
    mini["lora_ft"]["rows"] = "all"
    pred = {p["job"]: p for p in J.predict(mini, prof, costs) if p["rule"] == "lora_finetune"}
    row = next(j.rsplit("_", 1)[0] for j in pred if j.startswith("gemma3-caldera-r8-lr16-ft"))
    body = (0.0005 * 18) / (0.0003 * 30)
    assert pred[f"{row}_rte"]["s"] == pytest.approx(0.01 * body * JP.lora_work(mini, "rte")["train"])
    assert pred[f"{row}_wiki"]["s"] == pytest.approx(0.01 * 3.0 * JP.lora_work(mini, "wiki")["train"])
