"""`caldera cost` (caldera.cli.cost): the report from the component laws or from a job profile, the SLURM block,
--calibrate and --check, and errors that name the argument and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caldera.cli import main
from caldera.experiments.planning.cost import load_costs, load_workflow_config
from tests.helpers import fake_costs, fake_timed_run

ROOT = Path(__file__).resolve().parents[2]
SMOKE, MINI = str(ROOT / "config/smoke.yaml"), str(ROOT / "config/mini.yaml")


def test_cli_prints_every_model_and_the_paper_figure(tmp_path, capsys):
    p = tmp_path / "costs.json"
    p.write_text(json.dumps(fake_costs()))
    assert main(["cost", "--configfile", "config/paper.yaml", "--costs", str(p)]) == 0
    out = capsys.readouterr().out
    for m in ("llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "mistral-7b"):
        assert f"## {m}:" in out
    assert "llama-2-7b-caldera-r256-lr4" in out and "(paper: 34 A10G-hours)" in out
    for rule in ("hessians", "compress_layers", "evaluate"):
        assert rule in out
    assert main(["cost", "--configfile", "config/paper.yaml", "--device", "cuda",
                 "--costs", str(tmp_path / "none.json")]) == 2


def _slurm_lines(out: str) -> list[str]:
    head, block, *lines = out.splitlines()
    assert head.startswith("# caldera cost --configfile ") and head.endswith(" --slurm") and block == "set-resources:"
    assert lines and all(ln.startswith("  ") and ": {" in ln for ln in lines), lines
    return lines


def _no_costs(tmp_path, monkeypatch):
    """No component costs nor job profiles measured: benchmarks/results replaced by an empty folder."""
    from caldera.experiments.planning import cost

    empty = tmp_path / "results"
    empty.mkdir()
    monkeypatch.setattr(cost, "COSTS_DIR", empty)
    return empty


def test_slurm_without_measured_costs_requests_memory_only(tmp_path, monkeypatch, capsys):
    argv = ["cost", "--configfile", SMOKE, "--slurm"]
    _no_costs(tmp_path, monkeypatch)
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines()[-1] == "# runtime left out: only mem_mb and gpu below"
    assert all("mem_mb: " in ln and "runtime" not in ln for ln in _slurm_lines(cap.out))
    p = tmp_path / "costs.json"
    p.write_text(json.dumps(fake_costs()))
    assert main([*argv, "--costs", str(p)]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and all("runtime: " in ln for ln in _slurm_lines(cap.out))


@pytest.mark.parametrize("device, gpus", [("cpu", {0}), ("cuda", {1})])
def test_slurm_without_measured_costs_requests_gpus_only_for_cuda(tmp_path, monkeypatch, capsys, device, gpus):
    """Without a costs file the device comes from --device: CPU jobs request no GPU, CUDA ones do (the rules that
    run the engine or a forward, the only rules priced)."""
    _no_costs(tmp_path, monkeypatch)
    argv = ["cost", "--configfile", SMOKE, "--slurm", "--device", device]
    assert main(argv) == 0
    lines = _slurm_lines(capsys.readouterr().out)
    assert {int(ln.split("gpu: ")[1].split(",")[0].rstrip("}")) for ln in lines} == gpus


def test_calibrated_profile_prices_the_config_and_checks_the_run(tmp_path, capsys):
    """--calibrate writes the profile of a finished run; with it the report is the per-job prediction, and --check
    of that same run finds every predicted job at its measured time."""
    run = fake_timed_run(tmp_path, load_workflow_config(MINI), load_costs("cpu"))
    prof = tmp_path / "jobs.json"
    assert main(["cost", "--configfile", MINI, "--calibrate", str(run), "--profile", str(prof)]) == 0
    assert capsys.readouterr().out == f"wrote {prof}: the job costs of run `mini` (smollm2)\n"
    assert json.loads(prof.read_text())["run"] == "mini"
    assert main(["cost", "--configfile", MINI, "--profile", str(prof)]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    assert cap.out.startswith("Predicted job time of `mini` on this machine (profile calibrated on run `mini`")
    assert main(["cost", "--configfile", MINI, "--profile", str(prof), "--check", str(run)]) == 0
    total = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("total: "))
    assert total.endswith("ratio 1.00")


def test_a_profile_of_other_models_falls_back_to_the_laws(tmp_path, capsys):
    run = fake_timed_run(tmp_path, load_workflow_config(MINI), load_costs("cpu"))
    prof = tmp_path / "jobs.json"
    assert main(["cost", "--configfile", MINI, "--calibrate", str(run), "--profile", str(prof)]) == 0
    capsys.readouterr()
    assert main(["cost", "--configfile", "config/paper.yaml", "--profile", str(prof), "--device", "cpu"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ("# the job profile (mini) measured none of this config's models: the engine's component "
                       "laws only\n")
    assert cap.out.startswith("Predicted cost of `paper` on cpu") and "## llama-2-7b:" in cap.out


def test_check_by_the_laws_reads_a_results_folder_or_a_timings_file_alike(tmp_path, capsys):
    """Without a profile for the config (the component laws), --check compares per rule, and a run's results
    folder gives the same comparison as the timings.json summing the same jobs."""
    run = fake_timed_run(tmp_path, load_workflow_config(MINI), load_costs("cpu"))
    prof = tmp_path / "jobs.json"
    assert main(["cost", "--configfile", MINI, "--calibrate", str(run), "--profile", str(prof)]) == 0
    capsys.readouterr()
    argv = ["cost", "--configfile", "config/paper.yaml", "--profile", str(prof)]  # a profile of other models
    from caldera.experiments.planning import job_profile
    from caldera.experiments.report.timings import step_timings

    step_timings(job_profile.read_benchmarks(run / "benchmarks"), "mini", str(tmp_path / "timings.json"))
    outs = []
    for where in (run, tmp_path / "timings.json"):
        assert main([*argv, "--check", str(where)]) == 0, where
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and "evaluate" in outs[0] and "hessians" in outs[0]


@pytest.mark.parametrize("flag, value, words", [
    ("--calibrate", "run", ["--calibrate {v}: {v}/benchmarks holds no benchmark files: calibrate on a finished run"]),
    ("--calibrate", "nosuch", ["--calibrate: no such folder: {v}; a finished run's results folder"]),
    ("--check", "bad.json", ["--check {v}: {v}: not a results folder nor a readable timings.json",
                             "; pass a run's results folder or its timings.json"]),
    ("--check", "nosuch.json", ["--check: no such file or folder: {v}; a run's results folder or its timings.json"]),
    ("--profile", "nosuch.json", ["--profile: no such file: {v}; a job profile JSON"]),
    ("--costs", "nosuch.json", ["--costs: no such file: {v}; a costs JSON"]),
    ("--configfile", "nosuch.yaml", ["--configfile: no such file: {v}; a workflow config"]),
])
def test_a_bad_path_is_one_line_naming_it(tmp_path, capsys, flag, value, words):
    v = tmp_path / value
    (tmp_path / "run").mkdir()
    (tmp_path / "bad.json").write_text("not json")
    prof = ["--profile", str(tmp_path / "written.json")] if flag == "--calibrate" else []
    config = [] if flag == "--configfile" else ["--configfile", SMOKE]
    assert main(["cost", *config, flag, str(v), *prof]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after a note on the job profile, where there is one
    assert last.startswith("caldera cost: error: ") and all(w.format(v=v) in last for w in words), last
    assert not (tmp_path / "written.json").exists()


@pytest.mark.parametrize("argv, words", [
    ([], "the following arguments are required: --configfile"),
    (["--configfile", SMOKE, "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
])
def test_argument_errors_name_the_argument(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        main(["cost", *argv])
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_a_gpu_clusters_config_is_priced_on_the_gpu_with_a_grand_total_and_says_it_is_extrapolated(
        tmp_path, monkeypatch, capsys):
    """config/paper.yaml (device auto, models from the hub) is priced on cuda by default; with no job profile of
    the GPU the report says its prices are extrapolated from the component costs, and from which; the total over
    every model is printed, and equals the sum of the models' hours (--json)."""
    from caldera.experiments.planning.cost import CUDA_ENGINE, duration

    results = _no_costs(tmp_path, monkeypatch)
    gpu = {**fake_costs("cuda"), "device_name": "Made-up GPU", "measured_at": "2026-01-02T03:04:05Z",
           "command": "benchmarks/gpu_acceptance.py --device cuda (stage costs)", "engine": CUDA_ENGINE}
    (results / "costs-cuda.json").write_text(json.dumps(gpu))
    (results / "costs-cpu.json").write_text(json.dumps(fake_costs("cpu")))
    assert main(["cost", "--configfile", "config/paper.yaml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Predicted cost of `paper` on Made-up GPU (GPU job time")
    assert lines[2].startswith("Priced on cuda: the config's device is auto and its models come from the hub "
                               "(meta-llama/Llama-2-7b-hf, ") and lines[2].endswith("; --device cpu prices it on cpu.")
    assert lines[3] == (f"No job profile of cuda ({results / 'jobs-cuda.json'} is missing): these prices are "
                        "extrapolated from the component costs measured on Made-up GPU (2026-01-02T03:04:05Z, "
                        "benchmarks/gpu_acceptance.py --device cuda (stage costs)) through each component's scaling "
                        "law in the matrix shapes; job start-up, model loads and the rules not modelled are left out.")
    assert main(["cost", "--configfile", "config/paper.yaml", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["device"] == "cuda" and rec["priced_by"] == "component laws" and rec["extrapolated"]
    assert set(rec["models"]) == {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "mistral-7b"}
    total = sum(m["hours"] for m in rec["models"].values())
    assert rec["total_hours"] == pytest.approx(total) and total > 0
    jobs = sum(r["jobs"] for m in rec["models"].values() for r in m["rules"].values())
    assert lines[1] == f"Total: {duration(total * 3600)} of GPU job time in {jobs} jobs over 5 models (modelled rules)"
    assert main(["cost", "--configfile", "config/paper.yaml", "--device", "cpu"]) == 0  # still choosable
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Predicted cost of `paper` on cpu (CPU (2 threads) job time")
    assert lines[2] == "Priced on cpu: --device cpu."
    assert main(["cost", "--configfile", MINI]) == 0  # the offline assets: this machine's CPU
    assert "Priced on cpu: the config's device is auto and its models are local" in capsys.readouterr().out
