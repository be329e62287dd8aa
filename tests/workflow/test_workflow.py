"""The Snakemake workflow: lint, a dry run of every config, schema validation, and the full smoke run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
pytest.importorskip("snakemake")


def run(args, cwd, timeout=600):
    return subprocess.run(SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_lint_is_clean():
    r = run(["--lint"], ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "good condition" in r.stdout + r.stderr


@pytest.mark.parametrize("cfg", ["mini-core", "mini", "mini-full", "mini-regime", "smoke", "paper"])
def test_dry_run_builds_the_dag(cfg, tmp_path):
    # a copy of the workflow so the dry run writes no state into the checkout
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    r = run(["-n", "--cores", "2", "--configfile", f"config/{cfg}.yaml"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "make_table" in r.stdout
    # a variant whose layers fit one job (layers_per_job 30 at the stand-ins' 30 and 18 layers) is compressed and
    # assembled by one job; more chunks get a job each and an assembly
    one_chunk = cfg in ("mini-core", "mini", "mini-full", "mini-regime", "smoke")
    assert ("rule compress_variant:" in r.stdout) == one_chunk, r.stdout
    # a seed replicate of one chunk is compressed and evaluated by one job (rule replicate), never by evaluate
    replicates = {ln.split("/")[-2] for ln in r.stdout.splitlines() if "/eval/" in ln and "-seed" in ln}
    assert ("rule replicate:" in r.stdout) == (one_chunk and bool(replicates)), r.stdout
    if one_chunk:
        evaluate_jobs = r.stdout.split("rule evaluate:")[1:]
        assert not any("-seed" in job.split("rule ")[0].split("output:")[1].split("\n")[0] for job in evaluate_jobs)
    assert ("rule compress_layers:" in r.stdout) != one_chunk and ("rule assemble_checkpoint:" in r.stdout) != one_chunk
    if cfg in ("mini", "mini-full", "paper"):  # Tables 3-4 fine-tune their rows, then evaluate them
        assert "rht_finetune" in r.stdout and "+rhtft" in r.stdout
    if cfg in ("mini", "mini-full"):  # Table 5: every row's un-fine-tuned model is evaluated ("no FT" column)
        assert f"results/{cfg}/eval/smollm2-loftq2-r8-lr16/zeroshot.json" in r.stdout
        assert f"results/{cfg}/eval/smollm2-caldera-r16-lr4/zeroshot.json" in r.stdout
    if cfg == "mini-core":  # no lora_ft block: Table 5 holds the paper's numbers only, written by pending_table
        assert "rule lora_table:" not in r.stdout, r.stdout
        assert "table5_finetune.md" in _job(r.stdout, "pending_table", "table5_finetune.md")
    if cfg == "paper":  # Table 5 at paper scale (WikiText-2 train split, hub train splits): measured, not pending
        assert "rule lora_table:" in r.stdout and "pending_table" not in r.stdout
        assert "results/paper/eval/llama-2-7b-loftq2-r64-lr16/zeroshot.json" in r.stdout
        assert "results/paper/lora/llama-3-8b-caldera-r64-lr16+rhtft-ft64/wiki.json" in r.stdout
    if cfg == "mini-full":  # ... and its RHT FT = Yes rows start from rule rht_finetune's checkpoint
        job = _job(r.stdout, "lora_finetune", "lora/smollm2-caldera-r16-lr4+rhtft-ft8/wiki.json")
        assert "results/mini-full/rhtft/smollm2-caldera-r16-lr4/checkpoint" in job


#: the rules whose jobs a run's record holds (workflow/rules/common.smk: record_candidates)
RECORDED_RULES = ("evaluate", "replicate", "compress_variant", "assemble_checkpoint", "allocate", "rht_finetune",
                  "lora_finetune", "throughput", "weight_spectra", "lplr_traces", "ablation_traces", "selection")


@pytest.mark.parametrize("cfg", ["mini", "mini-full"])
def test_the_record_can_hold_every_job_of_the_recorded_rules(cfg, tmp_path):
    """Rule record on a run that has not started: every job it can hold is "not finished", and they are as many
    as the dry run's jobs of those rules (a candidate whose benchmark or outputs are spelled wrong, or one the run
    never makes, would make the record miss jobs or wait for one forever)."""
    copy_workflow(tmp_path)
    args = ["--cores", "1", "--configfile", f"config/{cfg}.yaml", "--config", "record=rec"]
    dry = run(["-n"] + args, tmp_path)
    assert dry.returncode == 0, dry.stderr[-3000:]
    stats = job_stats(dry.stdout + dry.stderr)
    expected = sum(stats.get(r, 0) for r in RECORDED_RULES)
    r = run(args + ["--", "record"], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = (tmp_path / f"results/{cfg}/logs/record.log").read_text()
    assert f"0 jobs recorded, 0 already there, {expected} not finished" in said, (said[:300], stats)
    assert expected > 50
    # the same jobs by their benchmark files (a job's key in the record)
    planned = {_field(b, "benchmark") for b in re.split(r"^(?:local)?rule ", dry.stdout, flags=re.M)
               if b.split(":")[0] in RECORDED_RULES}
    assert set(re.findall(r"^not finished: (\S+)$", said, flags=re.M)) == planned


def _field(job: str, name: str) -> str:
    """One field (``benchmark``, ``log``...) of a job block of a dry run's printout."""
    return re.search(rf"^\s+{name}: (\S+)$", job, flags=re.M).group(1)


def _job(dry_run: str, rule: str, output: str) -> str:
    """The block of one job of rule ``rule`` writing ``output`` in a dry run's printout."""
    blocks = [b for b in re.split(r"^(?:local)?rule ", dry_run, flags=re.M) if b.startswith(f"{rule}:") and output in b]
    assert len(blocks) == 1, (rule, output, len(blocks))
    return blocks[0]


def copy_workflow(dst: Path) -> None:
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / item)


def printed_settings(out: str, root: Path) -> dict:
    """The effective settings the workflow writes when it is parsed (the file its one-line header names)."""
    m = re.search(r"^CALDERA workflow \S+ \(config [^)]*\): .*effective settings in (\S+)$", out, flags=re.M)
    assert m, out[:2000]
    return json.loads((root / m.group(1)).read_text())


@pytest.mark.parametrize("cfg", ["paper", "mini-full"])
def test_explicit_configfile_is_the_whole_config(cfg, tmp_path):
    """`--configfile X` runs X's settings, not X merged over the default config/mini.yaml."""
    import yaml
    from snakemake.utils import validate

    from caldera.experiments.planning.plan import check_config, effective_settings

    copy_workflow(tmp_path)
    r = run(["-n", "--cores", "1", "--configfile", f"config/{cfg}.yaml"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = printed_settings(r.stderr, tmp_path)
    assert '"calibration": {' not in r.stderr  # the settings go to the file, not the log
    own = yaml.safe_load((ROOT / f"config/{cfg}.yaml").read_text())
    validate(own, str(ROOT / "workflow/schemas/config.schema.yaml"))
    want = json.loads(json.dumps(effective_settings(own, check_config(own)), default=str))
    assert got == want
    mini = yaml.safe_load((ROOT / "config/mini.yaml").read_text())["methods"]["caldera"]["params"]
    assert got["methods"]["caldera"]["outer_iters"] != mini["outer_iters"]  # the merge bug would show mini's


#: a `claims:` list of one item (config/README.md), for smoke.yaml's Table 7
CLAIM = """claims:
  - {claim: "4-bit CALDERA k=256 below QuIP#", source: Table 7, table: table7_mistral, paper_model: mistral-7b,
     a: {method: CALDERA, rank: 256, b_lr: 4}, b: {method: "QuIP#", rank: 0, b_lr: null},
     statistic: wiki2_ppl, rule: lower}
"""


def test_a_claim_the_config_declares_passes_the_dry_run(tmp_path):
    copy_workflow(tmp_path)
    smoke = (tmp_path / "config/smoke.yaml").read_text()
    (tmp_path / "config/own.yaml").write_text(smoke.replace("tables: [table7_mistral]\n",
                                                            "tables: [table7_mistral]\n" + CLAIM))
    r = run(["-n", "--cores", "1", "--configfile", "config/own.yaml"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("edit, words", [
    (("n_samples: 8", "n_samples: -3"), "n_samples"),  # schema
    (("n_samples: 8", "n_sample: 8"), "calibration.n_sample: unknown key; did you mean 'n_samples'?"),  # schema
    (("outer_iters: 2,\n", "outer_iters: -1,\n"), "CalderaConfig.outer_iters=-1"),
    (("  n_samples: 8\n", "  n_samples: 8\n  n_samples: 9\n"), "duplicate key 'n_samples'"),  # strict re-read
    (("lr: 1.0e-4", "lr: .nan"), "lora_ft.tasks.wiki.lr: nan is not a finite number"),
    (("bits: 4\n", 'bits: "4"\n'), "selection.bits: '4' is a quoted number; write it without quotes (bits: 4)"),
    # a rank some matrix cannot take is found by the dry run, naming method, rank, matrix and shape
    (("method: rtn, params: {bits: 2}}", "method: loftq, params: {rank: 200}}"),
     "method 'loftq' cannot compress 2 matrices: k_proj 192×576: rank=200 is too large"),
    # a claim the config declares names rows of the paper's table
    (("tables: [table7_mistral]\n", "tables: [table7_mistral]\n" + CLAIM.replace("rank: 256", "rank: 512")),
     "claims[0].a: {'method': 'CALDERA', 'rank': 512, 'b_lr': 4} is no row of table7_mistral [mistral-7b]"),
])
def test_bad_config_fails_the_dry_run(edit, words, tmp_path):
    copy_workflow(tmp_path)
    bad = (tmp_path / "config/smoke.yaml").read_text()
    assert edit[0] in bad
    (tmp_path / "config/bad.yaml").write_text(bad.replace(*edit))
    r = run(["-n", "--cores", "1", "--configfile", "config/bad.yaml"], tmp_path)
    assert r.returncode != 0
    assert words in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("key, words", [
    ("threads: 1", ["throughput.threads: no longer a config key", "set-resources: {throughput: {torch_threads: N}}"]),
    ("exclusive: true", ["throughput.exclusive: no longer a config key", "set-threads: {throughput: N}"]),
    ("separation_margin: 0.65", ["throughput.separation_margin: removed", "paired interval"]),
    ("runs: 5", ["throughput.runs: removed", "set `rounds` instead"]),
])
def test_machine_settings_in_a_config_are_refused_saying_where_they_moved(key, words, tmp_path):
    """throughput.threads / throughput.exclusive moved to the profiles and separation_margin / runs are removed;
    a config that still sets one fails the dry run with a message naming what replaces it (not the schema's bare
    "unknown key")."""
    copy_workflow(tmp_path)
    text = (tmp_path / "config/smoke.yaml").read_text()
    assert "calls: 2}" in text
    (tmp_path / "config/old.yaml").write_text(text.replace("calls: 2}", f"calls: 2, {key}}}"))
    r = run(["-n", "--cores", "1", "--configfile", "config/old.yaml"], tmp_path)
    assert r.returncode != 0
    for w in words:
        assert w in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("cores", [2, 4])
def test_throughput_jobs_reserve_every_core_by_default(cores, tmp_path):
    """By default each Table 6 job (one per model, all of its variants) takes every core of the run (nothing runs
    beside its timed loops) and pins 1 torch thread; a profile's set-threads / set-resources change both."""
    copy_workflow(tmp_path)
    r = run(["-n", "--cores", str(cores), "--configfile", "config/smoke.yaml"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    job = _job(r.stdout, "throughput", "throughput/smollm2.json")
    assert f"threads: {cores}\n" in job and "torch_threads=1" in job, job
    r = run(["-n", "--cores", str(cores), "--set-threads", "throughput=1", "--set-resources",
             "throughput:torch_threads=3", "--configfile", "config/smoke.yaml"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    job = _job(r.stdout, "throughput", "throughput/smollm2.json")
    assert "threads:" not in job and "torch_threads=3" in job, job  # 1 thread: the dry run prints no threads line


def test_config_typo_is_reported_in_a_few_lines_key_first(tmp_path):
    """One typo in a config is a short dry-run error whose message starts with the key's full path and
    the closest allowed key (before: jsonschema's dump of the whole schema and config, 561 lines)."""
    copy_workflow(tmp_path)
    text = (tmp_path / "config/smoke.yaml").read_text()
    (tmp_path / "config/bad.yaml").write_text(text.replace("layers_per_job: 30", "layer_per_job: 30"))
    r = run(["-n", "--cores", "1", "--configfile", "config/bad.yaml"], tmp_path)
    assert r.returncode != 0
    lines = (r.stdout + r.stderr).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("WorkflowError"))
    assert lines[at + 1].startswith("layer_per_job: unknown key; did you mean 'layers_per_job'?"), lines
    assert len(lines) <= 8, lines


@pytest.mark.model
@pytest.mark.slow
def test_smoke_workflow_end_to_end(tmp_path):
    """Runs config/smoke.yaml to the end (needs the cached SmolLM2 assets: `caldera assets`)."""
    from caldera.pipeline.assets import cache_dir

    if not (cache_dir() / "models").exists():
        if os.environ.get("CALDERA_REQUIRE_ASSETS") == "1":
            pytest.fail("SmolLM2 assets missing: run `caldera assets`")
        pytest.skip("SmolLM2 assets not cached (run `caldera assets`)")
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(SNAKEMAKE + ["--cores", "2", "--configfile", "config/smoke.yaml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = tmp_path / "results/smoke/tables"
    for name in ("table7_mistral.md", "table7_mistral.tex", "table7_mistral.csv", "figure1.png", "figure3.pdf",
                 "figure4.png", "theory.md", "claims.md", "table3_llama2_rhtft.md", "table6_throughput.csv",
                 "timings.md", "verdicts.md", "verdicts_forest.png", "figure_pareto.pdf"):
        assert (out / name).stat().st_size > 0, name
    timings = json.loads((out / "timings.json").read_text())  # beside timings.md: one run writes both
    assert {"calibration (Hessians)", "compression", "evaluation", "figures"} <= set(timings["stages"])
    assert timings["span_s"] > 0 and timings["n_jobs"] >= 10 and "evaluate" in timings["rules"]
    assert f"; {timings['n_jobs']} jobs, " in (out / "timings.md").read_text()  # the same run's two files
    claims = json.loads((out / "claims.json").read_text())
    from caldera.experiments.report.verdicts import VERDICTS  # holds / fails / inconclusive / not testable / pending

    assert {c["verdict"] for c in claims} <= set(VERDICTS)
    # seed replicates (config replicates): the Table 7 rows average three realizations and the claims count them
    table = json.loads((out / "table7_mistral.json").read_text())
    assert {r["seeds"]["ppl"] for r in table["rows"] if r["variant"] and "caldera" in r["variant"]} == {3}
    assert any(max(iv.get("seeds") or [0]) == 3 for c in claims for iv in c.get("intervals", []))
    assert "| smollm2-quipsharp | 0/1/2 |" in (out / "spread.md").read_text()
    # rank per matrix (extra_methods beside the k-16 row): profiled, allocated within the uniform rank's bits,
    # its row right after that row, its ranks plotted, and its equal-bits claim decided
    vids = [r["variant"] for r in table["rows"]]
    at = vids.index("smollm2-caldera-r16-lr4")
    x = table["rows"][at + 1]
    assert x["variant"] == "smollm2-rank-per-layer-r16-lr4" and x["beside"] == "smollm2-caldera-r16-lr4"
    assert x["ours"]["avg_bits"] <= table["rows"][at]["ours"]["avg_bits"] + 1e-9
    alloc = json.loads((tmp_path / "results/smoke/compressed/smollm2-rank-per-layer-r16-lr4/allocation.json")
                       .read_text())
    assert len(alloc["overrides"]) == 14 and len({o["rank"] for o in alloc["overrides"].values()}) > 1
    assert (out / "figure_ranks.png").stat().st_size > 0
    assert any("beats uniform-rank CALDERA at equal bits" in c["claim"] for c in claims)
    # paired metrics against the dense model (eval.distribution): every compressed row has them, the dense row not
    assert "wiki2_kl" in table["columns"] and (tmp_path / "results/smoke/reference/smollm2/meta.json").exists()
    # a finished LoRA job leaves its result only: no training state, and no model (lora_ft.save_model is off)
    lora_dir = tmp_path / "results/smoke/lora"
    assert list(lora_dir.rglob("*.json")) and not list(lora_dir.rglob("*.safetensors"))
    comp = [r for r in table["rows"] if r["variant"] and "dense" not in r["variant"]]
    assert comp and all(r["ours"]["wiki2_kl"] > 0 and 0 <= r["ours"]["wiki2_top1"] <= 100 for r in comp)
    assert any(c.get("kl") for c in claims)
    # a deterministic extra method (rtn) is never replicated, yet its claims are decided
    rtn = [c for c in claims if c["claim"].startswith("rtn-2bit")]
    assert rtn and all(c["verdict"] in ("holds", "fails", "inconclusive") for c in rtn), rtn
    assert {r["seeds"]["ppl"] for r in table["rows"] if r["variant"] and "rtn" in r["variant"]} == {1}
    # the regime rows (regime.run): Table 7's headline pair again with Q at 3 bits, on the 2-bit rows' seeds, in
    # table7_mistral_regime; the claim on that pair is decided again there and shown beside the 2-bit verdict
    reg = json.loads((out / "table7_mistral_regime.json").read_text())
    run_rows = {r["variant"]: r for r in reg["rows"] if r["variant"]}
    assert set(run_rows) == {"smollm2-caldera-r32-lr4-q3", "smollm2-quipsharp-q3"}  # Table 7 prints no dense row
    assert reg["realizations"]["smollm2-caldera-r32-lr4-q3"]["seeds"] == [0, 1, 2]
    two_bit = {r["variant"]: r for r in table["rows"] if r["variant"]}
    for vid in ("smollm2-caldera-r32-lr4", "smollm2-quipsharp"):  # one more bit per weight for Q
        assert abs(run_rows[f"{vid}-q3"]["ours"]["avg_bits"] - two_bit[vid]["ours"]["avg_bits"] - 1) < 0.02
    (beats,) = [c for c in claims if c["claim"].startswith("4-bit CALDERA beats QuIP# in Wiki2")]
    assert beats["regime"]["q_bits"] == [3] and beats["regime"]["verdict"] in ("holds", "fails", "inconclusive")
    assert {tuple(iv["pair"]) for iv in beats["regime"]["intervals"]} == {
        ("smollm2-caldera-r32-lr4-q3", "smollm2-quipsharp-q3")}
    assert "| in the stand-in's regime |" in (out / "claims.md").read_text()
    # regime.run.zeroshot: the regime rows and their replicates score 6 ARC-Easy documents, the 2-bit rows 4
    for vid, arc in [("smollm2-quipsharp-q3", 6), ("smollm2-quipsharp-q3-seed1", 6), ("smollm2-quipsharp", 4)]:
        zs = json.loads((tmp_path / f"results/smoke/eval/{vid}/zeroshot.json").read_text())
        assert {t: r["n"] for t, r in zs["results"]["tasks"].items()} == {"caldera_winogrande": 4,
                                                                         "caldera_arc_easy": arc}, vid
    assert ("Zero-shot documents per task of these rows (regime.run.zeroshot): caldera_arc_easy 6, "
            "caldera_winogrande 4.") in reg["caption"]
    # zeroshot_claims: every SmolLM2 variant's zero-shot claims pool ARC-Easy alone; the table shows both tasks
    assert set(table["claim_tasks"]) == set(table["realizations"])
    assert all(t == ["caldera_arc_easy"] for t in table["claim_tasks"].values())
    assert any(r["ours"].get("wino_acc") is not None for r in table["rows"])
    # the rerun tool (a partial run's claims) rebuilds this run's table and its claims exactly as the workflow did
    from caldera.experiments.report.rerun import main as rerun_main

    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert rerun_main(["config/smoke.yaml", "results/smoke", "partial", "--tables", "table7_mistral",
                           "--write-tables"]) == 0
    finally:
        os.chdir(cwd)
    part = tmp_path / "partial"
    for ext in ("md", "tex", "csv"):
        assert (part / f"table7_mistral.{ext}").read_text() == (out / f"table7_mistral.{ext}").read_text(), ext
    table7_claims = [{k: v for k, v in c.items() if k != "regime"} for c in claims if "table7_mistral" in c["source"]]
    assert table7_claims and json.loads((part / "claims.json").read_text()) == table7_claims
    # resumable: a second run has nothing to do
    r2 = subprocess.run(SNAKEMAKE + ["-n", "--cores", "2", "--configfile", "config/smoke.yaml"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=600, env=env)
    assert "Nothing to be done" in r2.stdout + r2.stderr
    # the run's record: every job it can hold has finished and is recorded; a fresh folder holding only the record
    # adopts them (no Hessians, compression, evaluation, fine-tuning or timing), writes the same tables, figures
    # and claims, and counts every job of the first run once in its timings
    rec = subprocess.run(SNAKEMAKE + ["--cores", "1", "--configfile", "config/smoke.yaml", "--config", "record=rec",
                                      "--", "record"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=env)
    assert rec.returncode == 0, rec.stdout[-3000:] + rec.stderr[-3000:]
    said = (tmp_path / "results/smoke/logs/record.log").read_text()
    recorded = int(re.search(r"(\d+) jobs recorded, 0 already there, 0 not finished", said).group(1))
    assert recorded >= 20, said
    again = tmp_path / "again"
    again.mkdir()
    copy_workflow(again)
    shutil.copytree(tmp_path / "rec", again / "rec")
    args = ["--cores", "2", "--configfile", "config/smoke.yaml", "--config", "record=rec"]
    r4 = subprocess.run(SNAKEMAKE + ["-n"] + args, cwd=again, capture_output=True, text=True, timeout=600, env=env)
    rules = job_stats(r4.stdout + r4.stderr)
    measuring = {"assets", "hessians", "dense_reference", "profile_layers", "allocate", "compress_variant",
                 "replicate", "evaluate", "lora_finetune", "throughput", "selection", "weight_spectra",
                 "ablation_traces", "lplr_traces"}
    assert rules.get("restore_record", 0) >= recorded and not measuring & set(rules), rules
    assert f"{recorded} finished jobs adopted from the record rec" in r4.stderr
    r5 = subprocess.run(SNAKEMAKE + args, cwd=again, capture_output=True, text=True, timeout=1200, env=env)
    assert r5.returncode == 0, r5.stdout[-3000:] + r5.stderr[-3000:]
    out2 = again / "results/smoke/tables"
    clocked = {"timings.json", "timings.md", "theory.json", "theory.md"}  # wall-clock content
    names = {p.name for p in out.iterdir()}
    assert names == {p.name for p in out2.iterdir()}
    for name in sorted(names - clocked):
        assert (out / name).read_bytes() == (out2 / name).read_bytes(), name
    t2 = json.loads((out2 / "timings.json").read_text())
    assert t2["n_jobs"] == timings["n_jobs"] and t2["from_record"] >= recorded
    assert "ran in earlier sittings" in (out2 / "timings.md").read_text()
    # the tasks the zero-shot claims pool are read by the tables alone: no evaluation reruns
    cfg = tmp_path / "config/smoke.yaml"
    text = cfg.read_text()
    cfg.write_text(text.replace("tasks: {smollm2: [caldera_arc_easy]}", "tasks: {smollm2: [caldera_winogrande]}"))
    r6 = subprocess.run(SNAKEMAKE + ["-n", "--cores", "2", "--configfile", "config/smoke.yaml"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=600, env=env)
    rules = job_stats(r6.stdout + r6.stderr)
    assert rules.get("make_table") == 2 and "claims" in rules, rules
    assert not {"evaluate", "replicate", "hessians", "compress_variant"} & set(rules), rules
    cfg.write_text(text)
    # a config edit reruns exactly the jobs that read it: fewer zero-shot documents -> the evaluation jobs
    # (perplexity and zero-shot of a variant share one job), tables, claims; no Hessians, no compression
    cfg.write_text(cfg.read_text().replace("limit: 4", "limit: 3"))
    r3 = subprocess.run(SNAKEMAKE + ["-n", "--cores", "2", "--configfile", "config/smoke.yaml"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=600, env=env)
    rules = job_stats(r3.stdout + r3.stderr)
    assert rules.get("evaluate", 0) >= 4 and rules.get("make_table") == 2, rules  # Table 7 and its regime table
    compression = {"hessians", "compress_variant", "compress_layers", "assemble_checkpoint", "ablation_traces"}
    assert not compression & set(rules)
    # a seed replicate's job evaluates too: it reruns, its compression resumed from its per-layer files
    assert rules.get("replicate", 0) >= 1, rules


def job_stats(out: str) -> dict[str, int]:
    """``{rule: count}`` from the "Job stats" table Snakemake prints for a (dry) run."""
    lines = out[out.index("Job stats"):].splitlines()[3:]
    stats = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        stats[parts[0]] = int(parts[1])
    return stats
