"""caldera.experiments.planning.job_profile: a machine type's job profile, its calibration from a finished run, and
which profile a machine uses."""

from __future__ import annotations

import json

import pytest

from caldera.experiments.planning import job_check as JC
from caldera.experiments.planning import job_plan as JP
from caldera.experiments.planning import job_profile as PR
from caldera.experiments.planning import job_report as JR
from caldera.experiments.planning.cost import load_costs
from caldera.experiments.planning.job_costs import predict
from caldera.experiments.planning.rule_costs import job_seconds
from tests.helpers import FAKE_LORA_TRAIN, FAKE_RATES, FAKE_THROUGHPUT, ROOT, fake_timed_run, workflow_config


def test_calibration_recovers_the_rates_a_run_was_made_of(tmp_path):
    """A run made of known fixed parts and rates gives them back, each rule's by its cost model, and the engine's
    scale per method, in a profile that names its run, source, machine type and component costs."""
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    prof = PR.calibrate(fake_timed_run(tmp_path, mini, costs), mini, costs, source="results/mini")
    got = prof["models"]["smollm2"]
    for key, want in FAKE_RATES.items():
        assert got[key] == pytest.approx(want, rel=1e-9, abs=1e-12), key
    assert got["lora_train_token_s"] == pytest.approx(FAKE_LORA_TRAIN, rel=1e-9)
    twice = {}
    for j in JP.plan_jobs(mini):
        if j.rule == "lora_finetune":
            r = json.loads((tmp_path / "results/lora" / j.name.rsplit("_", 1)[0] / f"{j.extra['task']}.json")
                           .read_text())
            twice.setdefault(j.extra["task"], []).append(r["final_step"] != r["best_step"])
    assert got["lora_second_eval"] == {t: sum(v) / len(v) for t, v in twice.items()}
    assert got["matrix_scale"]["caldera"] == pytest.approx(3.0) and got["matrix_scale"]["quip#"] == pytest.approx(3.0)
    for key, want in FAKE_THROUGHPUT.items():
        assert got[key] == pytest.approx(want, rel=1e-9), key
    assert (prof["format"], prof["run"], prof["source"]) == (PR.FORMAT, "mini", "results/mini")
    assert prof["machine"] == PR.machine_type() and prof["costs_measured_at"] == costs["measured_at"]
    assert PR.covers(prof, mini, costs) is None
    # the profile prices another config's jobs by the same formulas
    smoke = workflow_config("smoke")
    hs = next(j for j in JP.plan_jobs(smoke) if j.rule == "hessians" and j.model == "smollm2")
    assert job_seconds(hs, smoke, prof, costs) == pytest.approx(6.0 + JP.seq_tokens(smoke) * 2 * 0.0002)


def test_calibration_needs_a_finished_run(tmp_path):
    with pytest.raises(ValueError, match="no benchmark files"):
        PR.calibrate(tmp_path, workflow_config("mini"), load_costs("cpu"))


def test_a_run_without_the_jobs_own_timings_falls_back_to_what_it_has(tmp_path):
    """A Hessian job that recorded no collection time is priced with the dense evaluation's fixed part (as
    profiles calibrated before the timing file priced it); throughput results without their timed calls leave
    the job to the profile's constant."""
    costs = load_costs("cpu")
    mini = workflow_config("mini")
    results = fake_timed_run(tmp_path, mini, costs)
    (results / "hessians/smollm2/hessians.timing.json").unlink()
    for f in (results / "throughput").glob("*.json"):
        f.write_text("{}")
    got = PR.calibrate(results, mini, costs)["models"]["smollm2"]
    assert "hessian_fixed_s" not in got and not any(k.startswith("throughput_") for k in got)
    work = JP.seq_tokens(mini) * 30
    # the job's time less the dense fixed part (15 s), per token and layer
    assert got["hessian_token_layer_s"] == pytest.approx((6.0 + work * 0.0002 - 15.0) / work)


PROFILES = sorted((ROOT / "benchmarks/results").glob("jobs-cpu-*.json"))


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_each_committed_profile_predicts_a_smoke_run_measured_on_its_machine_type(path):
    """Each committed profile (calibrated on a default run) against a smoke run measured on the same machine type
    (``timings-smoke-cpu-<type>.json``, a run the profile never saw): every stage and the total within ±30 %."""
    profile = PR.load_profile("cpu", path)
    assert path.stem == f"jobs-cpu-{profile['machine']}"
    measured = ROOT / f"benchmarks/results/timings-smoke-cpu-{profile['machine']}.json"
    assert measured.is_file(), f"{path.name} has no smoke run of its machine type to be checked against"
    costs = load_costs("cpu")
    smoke = workflow_config("smoke")
    res = JC.check_runs(predict(smoke, profile, costs), JC.measured_jobs(measured))
    off = [(s["stage"], round(s["ratio"], 2)) for s in res["stages"] if not s["within"]]
    assert not off and res["total"]["within"], (off, res["total"])
    # a record whose Table 6 jobs time one variant each (``throughput/<variant>``) has no counterpart for them in
    # the plan, whose throughput job times a model's variants together: only those stay out of the comparison
    from caldera.experiments.planning.throughput_rows import throughput_variants

    per_variant = {f"throughput/{v}" for v in throughput_variants(smoke)}
    assert not set(res["not_predicted"]) - per_variant and not res["unpriced"]


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
    assert PR.machine_type(text) == want


def test_the_machine_type_without_a_model_name_is_the_os_and_architecture():
    import platform

    assert PR.machine_type("") == f"{platform.system()}-{platform.machine()}".lower()


def test_a_machine_without_its_own_profile_borrows_another_types_and_the_reports_say_so(tmp_path, monkeypatch):
    """The profile of this machine's type when committed; else another type's, named in the report and the plan
    line; no profile at all: None."""
    from caldera.experiments.planning import cost as C

    src = json.loads(PROFILES[0].read_text())
    costs = load_costs("cpu")
    (tmp_path / "costs-cpu.json").write_text(json.dumps(costs))
    monkeypatch.setattr(C, "COSTS_DIR", tmp_path)
    (tmp_path / "jobs-cpu-zz-other-avx2.json").write_text(json.dumps({**src, "machine": "zz-other-avx2"}))
    monkeypatch.setattr(PR, "machine_type", lambda cpuinfo=None: "aa-this-amx")
    prof = PR.load_profile("cpu")
    assert prof["machine"] == "zz-other-avx2" and PR.other_machine(prof) == "zz-other-avx2"
    text = JR.report(workflow_config("mini"), prof, costs)
    assert "This machine's type is aa-this-amx, and no profile of that type is committed" in text
    assert "with the profile of another machine type, zz-other-avx2" in JR.plan_line(workflow_config("mini"), 2)
    (tmp_path / "jobs-cpu-aa-this-amx.json").write_text(json.dumps({**src, "machine": "aa-this-amx"}))
    prof = PR.load_profile("cpu")
    assert prof["machine"] == "aa-this-amx" and PR.other_machine(prof) is None
    assert "no profile of that type" not in JR.report(workflow_config("mini"), prof, costs)
    for f in tmp_path.glob("jobs-*.json"):
        f.unlink()
    assert PR.load_profile("cpu") is None
