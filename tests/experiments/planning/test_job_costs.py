"""caldera.experiments.planning.job_costs: the workflow's jobs, the calibration of a machine profile from a run, the
prediction of each job and the check against a measured run."""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caldera.experiments.planning import job_costs as J
from caldera.experiments.planning.cost import load_costs, load_workflow_config

ROOT = Path(__file__).resolve().parents[3]


def _cfg(name: str) -> dict:
    return load_workflow_config(ROOT / "config" / f"{name}.yaml")


# ---- the jobs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smoke", "mini", "mini-full"])
def test_the_planned_jobs_are_the_jobs_snakemake_plans(name, tmp_path):
    """Per rule, as many jobs as `snakemake -n` lists for the config (plot_ranks writes its benchmark beside
    plot_figure's; the `timings` and `all` jobs write none)."""
    pytest.importorskip("snakemake")
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile",
                        f"config/{name}.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    stats = r.stdout[r.stdout.index("Job stats:"):]
    want = {m.group(1): int(m.group(2)) for m in re.finditer(r"(?m)^(\w+)\s+(\d+)$", stats.split("total")[0])}
    want["plot_figure"] = want.get("plot_figure", 0) + want.pop("plot_ranks", 0)
    for rule in ("timings", "all"):
        want.pop(rule, None)
    got = collections.Counter(j.rule for j in J.plan_jobs(_cfg(name)))
    assert dict(got) == want


def test_the_planned_jobs_are_the_jobs_of_the_committed_default_run():
    """Per rule, the planned jobs of config/mini.yaml are the jobs the committed default run timed (its
    timings.json); job by job where it lists them: the prediction is compared job by job."""
    t = json.loads((ROOT / "paper_tables/generated/timings.json").read_text())
    plan = J.plan_jobs(_cfg("mini"))
    assert dict(collections.Counter(j.rule for j in plan)) == {r: v["jobs"] for r, v in t["rules"].items()}
    if "jobs" in t:
        assert {(j["rule"], j["job"]) for j in t["jobs"]} == {(j.rule, j.name) for j in plan}


# ---- calibration ---------------------------------------------------------------------------------------------


def _bench(results: Path, rule: str, job: str, s: float) -> None:
    p = results / "benchmarks" / rule / f"{job}.tsv"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{s}\t0:00:00\t100.0\t{s}\n")


def _timing(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


TRUE = {"eval_fixed_s": 15.0, "corpus_fixed_s": 2.0, "token_s": 0.004, "kl_token_s": 0.001,
        "zeroshot_token_s": 0.005, "compress_fixed_s": 12.0, "layer_setup_s": 0.7}


def _fake_run(tmp_path: Path, config: dict, costs: dict, scale: float = 3.0) -> Path:
    """A results folder of ``config`` whose evaluate and compress_variant jobs took exactly what :data:`TRUE`
    and an engine ``scale`` say (step timing files included), every other job absent."""
    results = tmp_path / "results"
    for job in J.plan_jobs(config):
        v = job.variant
        if job.rule == "evaluate" and job.model == "smollm2":
            parts = J.eval_parts(config, v)
            steps = {f"ppl_{c}": TRUE["corpus_fixed_s"] + t * TRUE["token_s"]
                     + (t * TRUE["kl_token_s"] if c == parts["kl"] else 0.0) for c, t in parts["corpora"].items()}
            if parts["zeroshot"]:
                steps["zeroshot"] = parts["zeroshot"] * TRUE["zeroshot_token_s"]
            for name, s in steps.items():
                _timing(results / "eval" / v.id / f"{name}.timing.json", {"wall_s": s})
            _bench(results, "evaluate", job.name, TRUE["eval_fixed_s"] + sum(steps.values()))
        if job.rule == "compress_variant" and job.model == "smollm2":
            law = J.law_layer_seconds(costs, config, v)
            mats = scale * law  # one layer's matrices
            for li in range(job.extra["layers"]):
                _timing(results / "compressed" / v.id / "chunks/000" / f"layer_{li:03d}.timing.json",
                        {"wall_s": mats + TRUE["layer_setup_s"], "matrices": {"q_proj": {"wall_s": mats}}})
            _bench(results, "compress_variant", job.name,
                   TRUE["compress_fixed_s"] + job.extra["layers"] * (mats + TRUE["layer_setup_s"]))
    return results


def test_calibration_recovers_the_rates_a_run_was_made_of(tmp_path):
    """A run made of known fixed parts and rates (the dense job's two corpora give a corpus's fixed part and the
    per-token rate; the compressed jobs' distribution corpus the paired-metrics rate) gives them back, and the
    engine's scale per method; the profile then prices another config's jobs by the same formula."""
    costs = load_costs("cpu")
    mini = _cfg("mini")
    prof = J.calibrate(_fake_run(tmp_path, mini, costs), mini, costs)
    got = prof["models"]["smollm2"]
    for key, want in TRUE.items():
        assert got[key] == pytest.approx(want, rel=1e-9, abs=1e-12), key
    assert got["matrix_scale"]["caldera"] == pytest.approx(3.0) and got["matrix_scale"]["quip#"] == pytest.approx(3.0)
    smoke = _cfg("smoke")
    ev = next(j for j in J.plan_jobs(smoke) if j.rule == "evaluate" and j.name == "smollm2-caldera-r16-lr4")
    parts = J.eval_parts(smoke, ev.variant)
    want = (15.0 + sum(2.0 + t * 0.004 for t in parts["corpora"].values()) + parts["corpora"]["wiki"] * 0.001
            + parts["zeroshot"] * 0.005)
    assert J.job_seconds(ev, smoke, prof, costs) == pytest.approx(want)
    cv = next(j for j in J.plan_jobs(smoke) if j.rule == "compress_variant" and j.name == "smollm2-quipsharp")
    law = J.law_layer_seconds(costs, smoke, cv.variant)
    assert cv.extra["layers"] == 2
    assert J.job_seconds(cv, smoke, prof, costs) == pytest.approx(12.0 + 2 * (0.7 + 3.0 * law))


def test_a_job_the_profile_cannot_price_borrows_another_models_rates_or_stays_unpriced(tmp_path):
    """A model the run never evaluated takes the other model's rates scaled by the two models' forward speed
    ("borrowed"); with no other model, the job is "unpriced" and counted as such."""
    costs = load_costs("cpu")
    prof = {"format": J.FORMAT, "models": {"smollm2": {"token_s": 0.004, "lora_fixed_s": 30.0,
                                                      "lora_train_token_s": {"wiki": 0.01, "rte": 0.01,
                                                                             "winogrande": 0.01},
                                                      "lora_eval_token_s": 0.0},
                                           "gemma3": {"token_s": 0.008}}, "engine": {}, "constants": {}}
    mini = _cfg("mini")
    mini["lora_ft"]["rows"] = "all"
    pred = [p for p in J.predict(mini, prof, costs) if p["rule"] == "lora_finetune"]
    gemma = [p for p in pred if p["model"] == "gemma3"]
    assert gemma and all(p["how"] == "borrowed" for p in gemma)
    sm = next(p for p in pred if p["model"] == "smollm2" and p["job"].endswith("_wiki"))
    gm = next(p for p in gemma if p["job"].endswith("_wiki") and "-r8-lr16-ft8" in p["job"])
    w = J.lora_work(mini, "wiki")["train"]
    assert sm["s"] == pytest.approx(30.0 + 0.01 * w) and gm["s"] == pytest.approx(30.0 + 0.02 * w)
    alone = {**prof, "models": {"gemma3": prof["models"]["gemma3"]}}
    assert all(p["how"] == "unpriced" and p["s"] is None
               for p in J.predict(mini, alone, costs) if p["rule"] == "lora_finetune")


# ---- the check -----------------------------------------------------------------------------------------------


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
    _bench(tmp_path / "r", "evaluate", "x", 12.5)
    assert [(j["rule"], j["job"], j["s"]) for j in J.measured_jobs(tmp_path / "r")] == [("evaluate", "x", 12.5)]
    (tmp_path / "t.json").write_text(json.dumps({"rules": {"evaluate": {"jobs": 2, "job_s": 30.0}}}))
    assert J.measured_jobs(tmp_path / "t.json") == [
        {"rule": "evaluate", "job": "*", "stage": "evaluation", "s": 30.0, "jobs": 2}]
    (tmp_path / "t.json").write_text(json.dumps({"rules": {}, "jobs": [{"rule": "evaluate", "job": "x", "s": 3}]}))
    assert J.measured_jobs(tmp_path / "t.json")[0]["job"] == "x"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="no per-rule records"):
        J.measured_jobs(tmp_path / "bad.json")


PROFILES = sorted((ROOT / "benchmarks/results").glob("jobs-cpu-*.json"))


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_each_committed_profile_predicts_a_smoke_run_measured_on_its_machine_type(path):
    """Each committed profile (calibrated on a default run) against a smoke run measured on the same machine type
    (``timings-smoke-cpu-<type>.json``, a run the profile never saw): every stage and the total within ±30 %."""
    profile = J.load_profile("cpu", path)
    assert path.stem == f"jobs-cpu-{profile['machine']}"
    measured = ROOT / f"benchmarks/results/timings-smoke-cpu-{profile['machine']}.json"
    assert measured.is_file(), f"{path.name} has no smoke run of its machine type to be checked against"
    costs = load_costs("cpu")
    res = J.check_runs(J.predict(_cfg("smoke"), profile, costs), J.measured_jobs(measured))
    off = [(s["stage"], round(s["ratio"], 2)) for s in res["stages"] if not s["within"]]
    assert not off and res["total"]["within"], (off, res["total"])
    assert not res["not_predicted"] and not res["unpriced"]


EPYC = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n"
        "flags\t\t: fpu sse2 avx avx2 fma\n")
XEON = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C @ 2.0GHz\n"
        "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")


@pytest.mark.parametrize("text, want", [
    (EPYC, "amd-epyc-avx2"),
    (XEON, "intel-xeon-amx"),
    (XEON.replace(" amx_bf16 amx_tile", ""), "intel-xeon-avx512"),
    (EPYC.replace(" avx avx2 fma", ""), "amd-epyc-base"),
    ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: avx2 avx512f amx_tile\n", "intel-xeon-amx"),
])
def test_the_machine_type_is_the_cpus_family_and_its_widest_vector_unit(text, want):
    assert J.machine_type(text) == want


def test_the_machine_type_without_a_model_name_is_the_os_and_architecture():
    import platform

    assert J.machine_type("") == f"{platform.system()}-{platform.machine()}".lower()


def test_a_machine_without_its_own_profile_borrows_another_types_and_the_reports_say_so(tmp_path, monkeypatch):
    """The profile of this machine's type when committed; else another type's, named in the report and the plan
    line; no profile at all: None."""
    from caldera.experiments.planning import cost as C

    src = json.loads(PROFILES[0].read_text())
    costs = load_costs("cpu")
    (tmp_path / "costs-cpu.json").write_text(json.dumps(costs))
    monkeypatch.setattr(C, "COSTS_DIR", tmp_path)
    (tmp_path / "jobs-cpu-zz-other-avx2.json").write_text(json.dumps({**src, "machine": "zz-other-avx2"}))
    monkeypatch.setattr(J, "machine_type", lambda cpuinfo=None: "aa-this-amx")
    prof = J.load_profile("cpu")
    assert prof["machine"] == "zz-other-avx2" and J.other_machine(prof) == "zz-other-avx2"
    text = J.report(_cfg("mini"), prof, costs)
    assert "This machine's type is aa-this-amx, and no profile of that type is committed" in text
    assert "with the profile of another machine type, zz-other-avx2" in J.plan_line(_cfg("mini"), 2)
    (tmp_path / "jobs-cpu-aa-this-amx.json").write_text(json.dumps({**src, "machine": "aa-this-amx"}))
    prof = J.load_profile("cpu")
    assert prof["machine"] == "aa-this-amx" and J.other_machine(prof) is None
    assert "no profile of that type" not in J.report(_cfg("mini"), prof, costs)
    for f in tmp_path.glob("jobs-*.json"):
        f.unlink()
    assert J.load_profile("cpu") is None


def test_the_plan_line_states_the_predicted_time_or_nothing(monkeypatch):
    """With the committed profile the log's first lines say how long the run should take here; a config of models
    the profile never measured gets no line (no guess)."""
    if J.load_profile("cpu") is None:
        pytest.skip("no committed profile")
    line = J.plan_line(_cfg("mini"), 2)
    assert re.fullmatch(r"predicted here: 87 jobs, [\d.]+ min of job time, about [\d.]+ min with 2 jobs at a time "
                        r"\(caldera cost(; a machine of another type differs|, with the profile of another machine "
                        r"type, [a-z0-9-]+: expect up to ×2)\)", line), line
    assert J.plan_line(_cfg("paper"), 2) is None


def test_the_plan_line_prices_only_the_jobs_the_record_leaves():
    """Jobs adopted from the record (their benchmark files) are counted out of the line and their time with them."""
    if J.load_profile("cpu") is None:
        pytest.skip("no committed profile")
    cfg = _cfg("mini")
    pred = J.predict(cfg, J.load_profile("cpu"), load_costs("cpu"))
    done = [p for p in pred if p["rule"] == "evaluate"][:3]
    bench = [f"results/mini/benchmarks/{p['rule']}/{p['job']}.tsv" for p in done]

    def minutes(line):
        m = re.search(r", ([\d.]+) (s|min|h) of job time", line)
        return float(m.group(1)) * {"s": 1 / 60, "min": 1, "h": 60}[m.group(2)]

    full, left = J.plan_line(cfg, 2), J.plan_line(cfg, 2, done=bench)
    assert left.startswith("predicted here: 84 jobs (of 87; the others are adopted from the record), "), left
    assert minutes(full) - minutes(left) == pytest.approx(sum(p["s"] for p in done) / 60, abs=0.15)


def test_a_classification_lora_job_borrows_by_the_decoder_layers_speed():
    """A classification LoRA job never runs the LM head: another model's rates are scaled by the two models' decoder
    layers (their Hessian rates x layers), not by their evaluation speed, which the head dominates; the language-
    modelling task keeps the evaluation ratio."""
    costs = load_costs("cpu")
    rates = {"wiki": 0.01, "rte": 0.01, "winogrande": 0.01}
    prof = {"format": J.FORMAT, "engine": {}, "constants": {}, "models": {
        "smollm2": {"token_s": 0.004, "hessian_token_layer_s": 0.0003, "lora_fixed_s": 0.0,
                    "lora_train_token_s": rates, "lora_eval_token_s": 0.0},
        "gemma3": {"token_s": 0.012, "hessian_token_layer_s": 0.0005}}}
    mini = _cfg("mini")
    mini["lora_ft"]["rows"] = "all"
    pred = {p["job"]: p for p in J.predict(mini, prof, costs) if p["rule"] == "lora_finetune"}
    row = next(j.rsplit("_", 1)[0] for j in pred if j.startswith("gemma3-caldera-r8-lr16-ft"))
    body = (0.0005 * 18) / (0.0003 * 30)
    assert pred[f"{row}_rte"]["s"] == pytest.approx(0.01 * body * J.lora_work(mini, "rte")["train"])
    assert pred[f"{row}_wiki"]["s"] == pytest.approx(0.01 * 3.0 * J.lora_work(mini, "wiki")["train"])


def test_the_report_says_what_the_runs_record_leaves_to_run(tmp_path):
    """A config whose record holds jobs: the report counts them out of the plan and prices the rest."""
    profile = J.load_profile("cpu")
    if profile is None:
        pytest.skip("no committed profile")
    costs = load_costs("cpu")
    cfg = _cfg("smoke")
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
