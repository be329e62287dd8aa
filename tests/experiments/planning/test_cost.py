"""caldera cost: the laws, the fit, the composition of a decomposition's time, and the command."""

from __future__ import annotations

import json

import pytest

from caldera.experiments.planning import cost as C
from caldera.experiments.planning import workload as W
from tests.helpers import fake_costs


def test_fit_recovers_a_known_law():
    """Points generated from known coefficients of a two-term law give those coefficients back."""
    true = [2e-9, 3e-7]
    pts = [{"n": n, "d": d, "k": 0, "s": true[0] * n * d * d + true[1] * n * d}
           for n, d in ((256, 256), (256, 1024), (1024, 512))]
    got = C.fit("ldlq", pts)
    assert got == pytest.approx(true, rel=1e-6)
    assert C.predict({"components": {"ldlq": {"coef": got}}}, "ldlq", 4096, 4096) == pytest.approx(
        true[0] * 4096**3 + true[1] * 4096**2, rel=1e-6)


def test_missing_device_costs_are_an_error_not_a_guess(tmp_path):
    with pytest.raises(FileNotFoundError, match="measure_costs.py --device cuda"):
        C.load_costs("cuda", tmp_path / "costs-cuda.json")


def test_estimate_scales_with_the_config():
    """Twice the outer iterations: the compression about doubles; 70B jobs need more memory than 7B's."""
    cfg = C.load_workflow_config("config/paper.yaml")
    costs = fake_costs()
    a = C.estimate(cfg, costs)
    cfg["methods"]["caldera"]["params"] = {"preset": "paper", "outer_iters": 30}
    b = C.estimate(cfg, costs)
    ra, rb = (x["llama-2-7b"]["caldera_variant_hours"]["llama-2-7b-caldera-r256-lr4"] for x in (a, b))
    assert 1.8 < rb / ra < 2.05
    m7, m70 = (a[m]["rules"]["compress_layers"]["mem_gb"]["device"] for m in ("llama-2-7b", "llama-2-70b"))
    assert m70 > 5 * m7


def test_warm_svd_costs_one_range_finder_and_cheaper_subspace_iterations():
    """svd="warm": the randomized range finder once per decomposition (2 + 4·2 products with Y: 10/18 of the
    measured randomized SVD's 2 + 4·4), then T_out − 1 warm subspace iterations (2 + 4·1: 6/18 each); a measured
    ``svd_gram`` component (the exact Gram route) does not enter the prediction."""
    from caldera.algorithm.config import CalderaConfig

    costs = fake_costs()
    n, d = 4096, 11008
    cfg = CalderaConfig.preset("paper", rank=256)
    sec = {s: C.decompose_seconds(costs, n, d, cfg.replace(svd=s)) for s in ("exact", "randomized", "warm")}
    one = {s: C.decompose_seconds(costs, n, d, cfg.replace(svd=s, outer_iters=1)) for s in ("exact", "warm")}
    exact, rand = (C.predict(costs, f"svd_{s}", n, d, 256) for s in ("exact", "randomized"))
    assert one["exact"] - one["warm"] == pytest.approx(exact - rand * 10 / 18)
    assert sec["exact"] - sec["warm"] == pytest.approx(exact - rand * 10 / 18 + 14 * (exact - rand * 6 / 18))
    assert sec["warm"] < sec["randomized"] < sec["exact"]  # 94/18 against 15 randomized SVDs
    costs["components"]["svd_gram"] = {"coef": [1e-10, 2e-10]}
    assert C.decompose_seconds(costs, n, d, cfg.replace(svd="warm")) == pytest.approx(sec["warm"])


def test_a_per_matrix_rank_method_adds_its_profile_jobs_to_the_estimate():
    """caldera-rank-per-layer beside the 7B rank-256 row: one profile job per compression chunk (an LDLQ and a
    full SVD per matrix: priced above the LDLQ alone), and its compression priced as CALDERA's at the same rank."""
    cfg = C.load_workflow_config("config/paper.yaml")
    costs = fake_costs()
    base = C.estimate(cfg, costs)["llama-2-7b"]["rules"]
    cfg["extra_methods"] = [{"name": "rpl", "method": "caldera-rank-per-layer",
                             "beside": ["llama-2-7b-caldera-r256-lr4"]}]
    est = C.estimate(cfg, costs)["llama-2-7b"]
    prof = est["rules"]["profile_layers"]
    assert prof["jobs"] == 32 // int(cfg.get("layers_per_job", 1))  # LLaMa-2 7B: 32 decoder layers
    shapes, _, _ = W.shapes_of("llama-2-7b")
    ldlq_only = 32 * sum(C.predict(costs, "ldlq", n, d, 0) for n, d in shapes)
    assert prof["total_s"] > ldlq_only
    added = est["rules"]["compress_layers"]["total_s"] - base["compress_layers"]["total_s"]
    assert added == pytest.approx(est["caldera_variant_hours"]["llama-2-7b-caldera-r256-lr4"] * 3600)


def test_zero_shot_tokens_follow_the_limit_and_every_job_of_the_run_is_counted():
    """eval.zeroshot.limit caps the documents; seed replicates are compressed and evaluated (perplexity only),
    RHT-fine-tuned variants evaluated: the job counts are the workflow's."""
    from caldera.experiments.planning.plan import all_variants, replicate_variants, rhtft_variants

    assert W.zeroshot_tokens("caldera_arc_easy", None) == 2376 * 4 * 40
    assert W.zeroshot_tokens("caldera_arc_easy", 8) == 8 * 4 * 40 and W.zeroshot_tokens("arc_easy", 0.5) == 1188 * 160
    cfg = C.load_workflow_config("config/mini.yaml")
    passes = W.eval_pass_tokens(cfg)
    limit = cfg["eval"]["zeroshot"]["limit"]
    assert passes[-1] == sum(W.zeroshot_tokens(t, limit) for t in cfg["eval"]["zeroshot"]["tasks"]) < 20_000
    assert W.eval_pass_tokens(cfg, zeroshot=False) == passes[:-1]
    est = C.estimate(cfg, fake_costs())
    variants = all_variants(cfg)
    reps = replicate_variants(cfg, variants)
    for m in cfg["models"]:
        own = [v for v in variants.values() if v.model == m]
        n_rep = sum(len(r) - 1 for vid, r in reps.items() if variants[vid].model == m)
        n_ft = sum(ft.model == m for ft, _ in rhtft_variants(cfg).values())
        assert n_rep > 0 or m == "gemma3"  # the seed design replicates SmolLM2's variants only
        rules = est[m]["rules"]
        assert rules["evaluate"]["jobs"] == len(own) + n_ft
        # layers_per_job 30: each variant is one compress_variant job (compression and assembly), each seed
        # replicate one replicate job (compression, assembly and evaluation)
        assert "compress_layers" not in rules
        assert rules["compress_variant"]["jobs"] == sum(v.method != "dense" for v in own)
        assert rules.get("replicate", {"jobs": 0})["jobs"] == n_rep
        if not n_rep:
            continue
        # a replicate job costs its compression (its primary's: same method and rank) and its evaluation
        compressions = est[m]["caldera_variant_hours"]
        primaries = [vid for vid in reps if variants[vid].model == m and vid in compressions]
        assert rules["replicate"]["s_per_job"] > max(compressions[p] for p in primaries) * 3600
    # the same config in chunks of layers: the replicates are compress_layers jobs and evaluate jobs again
    est = C.estimate({**cfg, "layers_per_job": 1}, fake_costs())
    for m in cfg["models"]:
        n_rep = sum(len(r) - 1 for vid, r in reps.items() if variants[vid].model == m)
        own = [v for v in variants.values() if v.model == m]
        n_ft = sum(ft.model == m for ft, _ in rhtft_variants(cfg).values())
        rules = est[m]["rules"]
        assert "replicate" not in rules and rules["evaluate"]["jobs"] == len(own) + n_rep + n_ft
        # a replicate's evaluation is cheaper than a full one: the rule's total is below jobs x the longest job
        if n_rep:
            assert rules["evaluate"]["hours"] * 3600 < rules["evaluate"]["jobs"] * rules["evaluate"]["s_per_job"]


def test_check_compares_each_rule_with_a_runs_timings_and_names_the_rules_that_are_off(tmp_path, capsys):
    from caldera.cli import main

    cfg = C.load_workflow_config("config/smoke.yaml")
    costs = fake_costs()
    est = C.estimate(cfg, costs)
    pred = {r: sum(e["rules"][r]["hours"] * 3600 for e in est.values() if r in e["rules"])
            for r in ("hessians", "compress_variant", "evaluate")}
    timings = {"job_s": 5000.0, "rules": {
        "hessians": {"jobs": 1, "job_s": pred["hessians"] * 1.2},
        "compress_variant": {"jobs": 3, "job_s": pred["compress_variant"] * 3},
        "evaluate": {"jobs": 9, "job_s": pred["evaluate"] / 0.8},
        "make_table": {"jobs": 5, "job_s": 20.0}}}
    res = C.check(cfg, costs, timings)
    by = {r["rule"]: r for r in res["rules"]}
    assert by["hessians"]["within"] and by["evaluate"]["within"] and not by["compress_variant"]["within"]
    assert by["compress_variant"]["ratio"] == pytest.approx(1 / 3) and by["evaluate"]["ratio"] == pytest.approx(0.8)
    assert res["not_modelled_s"] == {"make_table": 20.0}
    line = next(ln for ln in C.check_report(res).splitlines() if ln.startswith("compress_variant"))
    assert line.endswith("off by more than ±30%") and "0.33" in line
    cp, tp = tmp_path / "costs.json", tmp_path / "timings.json"
    cp.write_text(json.dumps(costs))
    tp.write_text(json.dumps(timings))
    assert main(["cost", "--configfile", "config/smoke.yaml", "--costs", str(cp), "--check", str(tp)]) == 0
    out = capsys.readouterr().out
    assert "modelled rules" in out and "not modelled: 20 s" in out
    tp.write_text(json.dumps({"job_s": 1.0}))
    with pytest.raises(ValueError, match="no per-rule records"):
        C.check(cfg, costs, json.loads(tp.read_text()))


@pytest.mark.parametrize("s, text", [(0.4, "0 s"), (45, "45 s"), (150, "2.5 min"), (5400, "90.0 min"),
                                     (9000, "2.50 h")])
def test_durations_are_printed_with_the_precision_they_need(s, text):
    assert C.duration(s) == text


def test_coverage_says_which_components_reach_a_models_shapes():
    """Engine components measured up to LLaMa-2 7B's largest matrix (11008 x 4096) cover 7B and not 70B (8192 x
    28672); the layer forward measured at small widths is extrapolated for both."""
    cfg = C.load_workflow_config("config/paper.yaml")
    costs = {"points": {"ldlq": [{"n": 11008, "d": 4096, "k": 0, "s": 1.0}],
                        "forward": [{"n": 2048, "d": 6.8e6, "k": 0, "s": 1.0}]}}
    seven = C.coverage({**cfg, "models": {"llama-2-7b": cfg["models"]["llama-2-7b"]}}, costs)
    seventy = C.coverage({**cfg, "models": {"llama-2-70b": cfg["models"]["llama-2-70b"]}}, costs)
    assert seven["measured"] == ["ldlq"] and seven["extrapolated"][0].startswith("forward (measured to FLOP/token")
    assert seventy["measured"] == [] and any(e.startswith("ldlq (measured to n·d 4.51e+07, this config 2.35e+08)")
                                             for e in seventy["extrapolated"])


def test_cuda_costs_measured_before_the_device_engine_say_so():
    """`caldera cost --device cuda` prices from the committed CUDA costs; until the acceptance run's `costs` stage
    has measured this version's engine (and recorded it), the report says the figures price the older one."""
    cfg = C.load_workflow_config("config/mini.yaml")
    old = {**fake_costs(), "device": "cuda", "device_name": "H200"}
    old.pop("engine", None)
    assert "measured before this version's device engine" in C.report(cfg, old)
    assert "measured before" not in C.report(cfg, {**old, "engine": C.CUDA_ENGINE})
    assert "measured before" not in C.report(cfg, {**fake_costs(), "device": "cpu"})


@pytest.mark.parametrize("config, device, words", [
    ("config/paper.yaml", "cuda", "the config's device is auto and its models come from the hub (meta-llama/"),
    ("config/mini.yaml", "cpu", "the config's device is auto and its models are local"),
    ("config/paper-local.yaml", "cpu", "its models are local"),  # local folders standing in for the hub's
])
def test_the_priced_device_is_the_configs(config, device, words):
    """A config whose models come from the hub (paper scale: a GPU cluster's run) is priced on the GPU, one of
    offline assets or local folders on the CPU; a device the config names is taken as named."""
    cfg = C.load_workflow_config(config)
    got, why = C.config_device(cfg)
    assert got == device and words in why, why
    assert C.config_device({**cfg, "device": "cpu"}) == ("cpu", "the config's device is cpu")
    assert C.config_device({**cfg, "device": "cuda:1"}) == ("cuda", "the config's device is cuda:1")


def test_the_report_prints_the_grand_total_over_every_model_and_its_notes():
    cfg = C.load_workflow_config("config/paper.yaml")
    costs = fake_costs()
    est = C.estimate(cfg, costs)
    hours = sum(e["hours"] for e in est.values())
    jobs = sum(r["jobs"] for e in est.values() for r in e["rules"].values())
    lines = C.report(cfg, costs, ["note one", "note two"]).splitlines()
    assert lines[1] == f"Total: {C.duration(hours * 3600)} of CPU (2 threads) job time in {jobs} jobs over 5 models " \
                       "(modelled rules)"
    assert lines[2:5] == ["note one", "note two", ""]
    assert hours > max(e["hours"] for e in est.values())  # more than any one model's
    one = {"m": {"hours": 1.0, "rules": {"hessians": {"jobs": 1}, "evaluate": {"jobs": 2}}}}
    assert C.total_line(one, "GPU") == "Total: 60.0 min of GPU job time in 3 jobs over 1 model (modelled rules)"


def test_the_extrapolation_note_names_the_missing_profile_and_the_measurements():
    costs = {**fake_costs("cuda"), "device_name": "H200", "measured_at": "2026-11-28T16:57:46Z",
             "command": "benchmarks/gpu_acceptance.py"}
    note = C.extrapolation_note(costs, "benchmarks/results/jobs-cuda.json")
    assert note.startswith("No job profile of cuda (benchmarks/results/jobs-cuda.json is missing): these prices are "
                           "extrapolated from the component costs measured on H200 (2026-11-28T16:57:46Z, "
                           "benchmarks/gpu_acceptance.py) through each component's scaling law")
