"""caldera.experiments.planning.job_costs: the prediction of each job from the job profile, the check against a
measured run, and the reports."""

from __future__ import annotations

import json
import re

import pytest

from caldera.experiments.planning import job_costs as J
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning.cost import load_costs
from tests.helpers import bench_file, workflow_config


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


def test_check_compares_job_by_job_and_names_what_is_off():
    pred = [{"rule": "evaluate", "job": "a", "stage": "evaluation", "s": 100.0, "how": "measured"},
            {"rule": "evaluate", "job": "b", "stage": "evaluation", "s": 100.0, "how": "measured"},
            {"rule": "hessians", "job": "m", "stage": "calibration (Hessians)", "s": 30.0, "how": "measured"},
            {"rule": "claims", "job": "claims", "stage": "tables and reports", "s": 4.0, "how": "measured"}]
    meas = [{"rule": "evaluate", "job": "a", "s": 90.0}, {"rule": "evaluate", "job": "b", "s": 110.0},
            {"rule": "hessians", "job": "m", "s": 100.0}, {"rule": "assets", "job": "assets", "s": 4.0}]
    res = J.check(pred, meas)
    by = {r["rule"]: r for r in res["rules"]}
    assert by["evaluate"]["ratio"] == pytest.approx(1.0) and by["evaluate"]["within"]
    assert by["hessians"]["ratio"] == pytest.approx(0.3) and not by["hessians"]["within"]
    assert res["total"]["ratio"] == pytest.approx(230 / 300) and res["total"]["within"]
    assert res["not_run"] == ["claims/claims"] and res["not_predicted"] == ["assets/assets"]
    text = J.check_report(res)
    assert re.search(r"(?m)^hessians .*0\.30  off by more than ±30%$", text)
    assert "hessians/m: 30 s / 100 s (×0.30)" in text
    per_rule = J.check_runs(pred, [{"rule": "evaluate", "job": "*", "s": 250.0, "stage": "evaluation"}])
    assert per_rule["rules"][0]["ratio"] == pytest.approx(0.8) and per_rule["rules"][0]["jobs"] == 1


def test_measured_jobs_reads_a_results_folder_or_a_timings_file(tmp_path):
    bench_file(tmp_path / "r", "evaluate", "x", 12.5)
    assert [(j["rule"], j["job"], j["s"]) for j in J.measured_jobs(tmp_path / "r")] == [("evaluate", "x", 12.5)]
    (tmp_path / "t.json").write_text(json.dumps({"rules": {"evaluate": {"jobs": 2, "job_s": 30.0}}}))
    assert J.measured_jobs(tmp_path / "t.json") == [
        {"rule": "evaluate", "job": "*", "stage": "evaluation", "s": 30.0, "jobs": 2}]
    (tmp_path / "t.json").write_text(json.dumps({"rules": {}, "jobs": [{"rule": "evaluate", "job": "x", "s": 3}]}))
    assert J.measured_jobs(tmp_path / "t.json")[0]["job"] == "x"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="no per-rule records"):
        J.measured_jobs(tmp_path / "bad.json")


def test_the_plan_line_states_the_predicted_time_or_nothing(monkeypatch):
    """With the committed profile the log's first lines say how long the run should take here; a config of models
    the profile never measured gets no line (no guess)."""
    if PR.load_profile("cpu") is None:
        pytest.skip("no committed profile")
    line = J.plan_line(workflow_config("mini"), 2)
    assert re.fullmatch(r"predicted here: 82 jobs, [\d.]+ min of job time, about [\d.]+ min with 2 jobs at a time "
                        r"\(caldera cost(; a machine of another type differs|, with the profile of another machine "
                        r"type, [a-z0-9-]+: expect up to ×2)\)", line), line
    assert J.plan_line(workflow_config("paper"), 2) is None


def test_the_plan_line_prices_only_the_jobs_the_record_leaves():
    """Jobs adopted from the record (their benchmark files) are counted out of the line and their time with them."""
    if PR.load_profile("cpu") is None:
        pytest.skip("no committed profile")
    cfg = workflow_config("mini")
    pred = J.predict(cfg, PR.load_profile("cpu"), load_costs("cpu"))
    done = [p for p in pred if p["rule"] == "evaluate"][:3]
    bench = [f"results/mini/benchmarks/{p['rule']}/{p['job']}.tsv" for p in done]

    def minutes(line):
        m = re.search(r", ([\d.]+) (s|min|h) of job time", line)
        return float(m.group(1)) * {"s": 1 / 60, "min": 1, "h": 60}[m.group(2)]

    full, left = J.plan_line(cfg, 2), J.plan_line(cfg, 2, done=bench)
    assert left.startswith("predicted here: 79 jobs (of 82; the others are adopted from the record), "), left
    assert minutes(full) - minutes(left) == pytest.approx(sum(p["s"] for p in done) / 60, abs=0.15)


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


def test_the_report_says_what_the_runs_record_leaves_to_run(tmp_path):
    """A config whose record holds jobs: the report counts them out of the plan and prices the rest."""
    profile = PR.load_profile("cpu")
    if profile is None:
        pytest.skip("no committed profile")
    costs = load_costs("cpu")
    cfg = workflow_config("smoke")
    pred = J.predict(cfg, profile, costs)
    assert "record" not in J.report(cfg, profile, costs)
    done = [p for p in pred if p["rule"] == "evaluate"][:2]
    index = {"format": 1, "jobs": {f"results/smoke/benchmarks/{p['rule']}/{p['job']}.tsv": {} for p in done}}
    (tmp_path / "record.json").write_text(json.dumps(index))
    text = J.report({**cfg, "record": str(tmp_path)}, profile, costs)
    rest = sum(p["s"] for p in pred if p["s"] is not None and p not in done)
    m = re.search(r"holds 2 of these jobs; left to run: (\d+) jobs, ([\d.]+) (s|min|h) of job time", text)
    assert m and int(m.group(1)) == len(pred) - 2, text[-600:]
    assert float(m.group(2)) == pytest.approx(rest / {"s": 1, "min": 60, "h": 3600}[m.group(3)], rel=0.05)
