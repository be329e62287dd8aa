"""Typed settings of the config blocks (caldera.experiments.planning.settings): unknown keys refused at plan time with
their
path, one source of defaults, every given key kept, and the hop from a YAML key to the code that uses it."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from caldera.experiments.planning.plan import check_config
from caldera.experiments.planning.settings import (
    BLOCKS,
    ClaimSettings,
    EvalSettings,
    LoraFtSettings,
    ModelEntry,
    RhtFtSettings,
    RunContext,
    Settings,
    ThroughputSettings,
    block_settings,
    declared_claims,
)
from caldera.strict_yaml import load_yaml_strict

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
CONFIGS = ["mini", "mini-full", "mini-core", "smoke", "paper"]


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / f"config/{name}.yaml").read_text())


def _set(cfg: dict, path: str, value) -> None:
    *head, last = path.split(".")
    node = cfg
    for k in head:
        node = node[k]
    node[last] = value


# ---------------------------------------------------------------------------------------------- unknown keys

#: (config, key path of a typo'd key, its value, what the message must say): one per block, nested ones too
TYPOS = [
    ("smoke", "selection.tie_tolerence", 0.1, "selection.tie_tolerence: unknown key; did you mean 'tie_tolerance'?"),
    ("mini", "rht_ft.weight_decy", 0.1, "rht_ft.weight_decy: unknown key; did you mean 'weight_decay'?"),
    ("smoke", "lora_ft.ft_dtyp", "float32", "lora_ft.ft_dtyp: unknown key; did you mean 'ft_dtype'?"),
    ("smoke", "lora_ft.tasks.wiki.warmup_step", 2,
     "lora_ft.tasks.wiki.warmup_step: unknown key; did you mean 'warmup_steps'?"),
    ("smoke", "throughput.round", 4, "throughput.round: unknown key; did you mean 'rounds'?"),
    ("smoke", "eval.zeroshot.limt", 3, "eval.zeroshot.limt: unknown key; did you mean 'limit'?"),
    ("smoke", "eval.ppl.wiki.n_window", 3, "eval.ppl.wiki.n_window: unknown key; did you mean 'n_windows'?"),
    ("smoke", "figures.outer_iter", 3, "figures.outer_iter: unknown key; did you mean 'outer_iters'?"),
    ("mini", "regime.n_window", 3, "regime.n_window: unknown key; did you mean 'n_windows'?"),
    ("mini", "regime.models.smollm2.paper_modl", "llama-2-7b",
     "regime.models.smollm2.paper_modl: unknown key; did you mean 'paper_model'?"),
]


@pytest.mark.parametrize("name, path, value, words", TYPOS, ids=[t[1] for t in TYPOS])
def test_unknown_key_of_every_block_is_refused_when_the_plan_is_made(name, path, value, words):
    """check_config (run by `snakemake -n`) refuses a typo'd key of any block, naming its path and the closest
    accepted key: never dropped (a dropped `throughput.round` would time the default 12 rounds)."""
    cfg = load(name)
    _set(cfg, path, value)
    with pytest.raises(ValueError) as e:
        check_config(cfg)
    assert words in str(e.value), str(e.value)
    block = path.split(".")[0]
    with pytest.raises(ValueError, match=words.split(":")[0].replace(".", r"\.")):
        BLOCKS[block].from_block(cfg[block])


@pytest.mark.parametrize("path, value, words", [
    ("throughput.kernel", "kernal", "throughput.kernel: expected one of ['auto', 'kernel', 'reference'], got 'kernal'"
                                    "; did you mean 'kernel'?"),
    ("throughput.rounds", 1, "throughput.rounds: expected an integer >= 2, got 1"),
    ("lora_ft.seed", "0", "lora_ft.seed: expected an integer >= 0, got '0'"),
    ("selection.tie_tolerance", 1.0, "selection.tie_tolerance: expected a finite number >= 0 and < 1"),
    ("eval.weights", "dense", "eval.weights: expected one of ['compressed', 'reconstructed']"),
    ("lora_ft.tasks.rte.lr", 0, "lora_ft.tasks.rte.lr: expected a finite number > 0, got 0"),
])
def test_bad_value_is_refused_naming_its_key(path, value, words):
    cfg = load("smoke")
    _set(cfg, path, value)
    with pytest.raises(ValueError) as e:
        block_settings(cfg)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("path, value, words", [
    ("regime.q_bits", [2, 5], "regime.q_bits[1]: expected one of [2, 3, 4], got 5"),
    ("regime.q_bits", [], "regime.q_bits: expected a list of at least 1 items"),
    ("regime.q_bits", [3, 3], "regime.q_bits: [3, 3] repeats an item"),
    ("regime.q_bits", 3, "regime.q_bits: expected a list of at least 1 items, got 3"),
    ("regime.corpus", "wikitext", "regime.corpus: expected one of ['wiki2', 'c4'], got 'wikitext'"),
    ("regime.seeds", [-1], "regime.seeds[0]: expected an integer >= 0, got -1"),
    ("regime.n_windows", 0, "regime.n_windows: expected an integer >= 1, got 0"),
    ("regime.models", {}, "regime.models: expected a mapping of at least 1 entries"),
    ("regime.models.smollm2.paper_model", "", "regime.models.smollm2.paper_model: expected a non-empty string"),
    ("regime.models.smollm2.q_bits", 16, "regime.models.smollm2.q_bits: expected one of [2, 3, 4], got 16"),
])
def test_bad_regime_value_is_refused_naming_its_key(path, value, words):
    """The regime block (caldera.experiments.jobs.regime) is checked like every block: bad values are refused at
    plan time with their key path."""
    cfg = load("mini")
    _set(cfg, path, value)
    with pytest.raises(ValueError) as e:
        block_settings(cfg)
    assert words in str(e.value), str(e.value)
    with pytest.raises(ValueError, match=re.escape(words.split(":")[0])):
        check_config(cfg)


def test_a_chosen_regime_bits_must_be_a_candidate_and_the_defaults_are_every_codebook():
    cfg = load("mini")
    cfg["regime"]["q_bits"] = [2, 4]
    cfg["regime"]["models"]["smollm2"]["q_bits"] = 2
    cfg["regime"]["models"]["gemma3"]["q_bits"] = 3
    with pytest.raises(ValueError, match=r"regime\.models\.gemma3\.q_bits: 3 is not a candidate of regime\.q_bits"):
        block_settings(cfg)
    cfg["regime"]["models"]["gemma3"]["q_bits"] = 4
    assert block_settings(cfg).regime.models["gemma3"].q_bits == 4
    r = block_settings({**cfg, "regime": {"models": {"smollm2": {"paper_model": "llama-2-7b"}}}}).regime
    assert (r.q_bits, r.corpus, r.seeds, r.n_windows, r.models["smollm2"].q_bits) == ([2, 3, 4], "wiki2", [0], 4, None)
    assert block_settings(load("mini-core")).regime is None  # optional: a config without it measures nothing


def test_missing_required_key_is_named():
    cfg = load("mini")
    del cfg["rht_ft"]["epochs"], cfg["lora_ft"]["tasks"]["rte"]["n_heldout"]
    with pytest.raises(ValueError) as e:
        block_settings(cfg)
    assert "rht_ft.epochs: required key missing" in str(e.value)
    assert "lora_ft.tasks.rte.n_heldout: required key missing" in str(e.value)


def test_every_problem_of_every_block_is_listed_at_once():
    cfg = load("smoke")
    cfg["throughput"]["run"] = 3
    cfg["figures"]["layr"] = 1
    lines = str(pytest.raises(ValueError, block_settings, cfg).value).splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["throughput.run", "figures.layr"]


# ---------------------------------------------------------------------------------------------- defaults


def _schema_block(schema: dict, node: dict) -> dict:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _object_schemas(schema: dict, node: dict):
    """Every object schema inside ``node`` (following $refs, oneOf alternatives, array items, mapping values)."""
    node = _schema_block(schema, node)
    yield node
    for key in ("oneOf", "anyOf"):
        for alt in node.get(key, []):
            yield from _object_schemas(schema, alt)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _object_schemas(schema, node[key])
    for sub in node.get("properties", {}).values():
        yield from _object_schemas(schema, sub)


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_the_schema_gives_no_default_of_a_typed_block(block):
    """One source of defaults per block: the settings class. A `default:` in the schema would be filled in by
    snakemake's validate and silently win over the settings' own (two values that can drift apart)."""
    schema = load_yaml_strict(SCHEMA)
    found = [json.dumps(n)[:80] for n in _object_schemas(schema, schema["properties"][block]) if "default" in n]
    assert not found, found


def _settings_classes(cls: type[Settings]):
    yield cls
    for f in dataclasses.fields(cls):
        check = f.metadata.get("check")
        for sub in _nested_classes(check):
            yield from _settings_classes(sub)


def _nested_classes(check):
    """Settings classes a field's check builds (from the closures of settings_checks.nested / list_of / optional)."""
    seen = []
    todo = [check]
    while todo:
        c = todo.pop()
        if c is None:
            continue
        for cell in getattr(c, "__closure__", None) or ():
            v = cell.cell_contents
            if isinstance(v, type) and issubclass(v, Settings):
                seen.append(v)
            elif callable(v):
                todo.append(v)
            elif isinstance(v, tuple):
                todo += [x for x in v if callable(x)]
    return seen


def test_schema_and_settings_accept_the_same_keys():
    """Every object of a typed block accepts in the schema exactly the keys its settings class has (a key added
    to one and not the other would be refused by one of the two checks, or never typed)."""
    schema = load_yaml_strict(SCHEMA)
    schema_keys = {tuple(sorted(n["properties"])) for b in BLOCKS
                   for n in _object_schemas(schema, schema["properties"][b]) if n.get("properties")}
    settings_keys = {tuple(sorted(c.keys())) for b in BLOCKS.values() for c in _settings_classes(b)}
    assert schema_keys == settings_keys


def test_schema_and_settings_accept_the_same_keys_of_a_claims_item():
    schema = load_yaml_strict(SCHEMA)
    schema_keys = {tuple(sorted(n["properties"])) for n in _object_schemas(schema, schema["properties"]["claims"])
                   if n.get("properties")}
    assert schema_keys == {tuple(sorted(c.keys())) for c in _settings_classes(ClaimSettings)}


CLAIM = {"claim": "x", "source": "Table 7", "table": "table7_mistral", "paper_model": "mistral-7b",
         "a": {"method": "CALDERA", "rank": 128, "b_lr": 4}, "b": {"method": "QuIP#", "rank": 0, "b_lr": None},
         "statistic": "wiki2_ppl", "rule": "lower"}


def test_declared_claims_are_typed_and_every_bad_item_is_named_by_its_index():
    assert declared_claims({}) == [] and declared_claims({"claims": None}) == []
    (c,) = declared_claims({"claims": [CLAIM]})
    assert (c.a.method, c.a.rank, c.a.b_lr, c.b.b_lr, c.statistic, c.rule) == ("CALDERA", 128, 4, None, "wiki2_ppl",
                                                                                "lower")
    bad = [CLAIM, {**CLAIM, "rule": "below"}, {**CLAIM, "b": {"method": "QuIP#", "rank": 0}}, {**CLAIM, "sorce": "x"}]
    with pytest.raises(ValueError) as e:
        declared_claims({"claims": bad})
    lines = str(e.value).splitlines()
    assert lines[0].startswith("claims[1].rule: expected one of ['lower', 'higher'], got 'below'")
    assert lines[1] == "claims[2].b.b_lr: required key missing"
    assert lines[2].startswith("claims[3].sorce: unknown key; did you mean 'source'?")


def test_defaults_are_the_values_the_workflow_used():
    """The effective defaults of the default run, unchanged (from the schema, the throughput
    module's DEFAULTS dict and `.get(key, default)` calls)."""
    tp = ThroughputSettings.from_block(None)
    assert tp.measurement_block() == {"rounds": 12, "seed": 0, "warmup": 1, "new_tokens": 16, "calls": 8,
                                      "kernel": "auto", "dtype": "float32", "prompt": "The capital of France is"}
    assert tp.as_block() == tp.measurement_block()  # every key changes the measurement
    s = block_settings(load("smoke"))
    assert s.eval.weights == "compressed" and s.eval.zeroshot.batch_size == 16 and s.eval.ppl["c4"].seed == 0
    assert (s.selection.ranks, s.selection.tie_tolerance, s.selection.ablations) == ("extremes", 0.0, True)
    assert (s.lora_ft.ft_dtype, s.lora_ft.seed, s.lora_ft.rows[0].rht_ft, s.lora_ft.loftq) == ("bfloat16", 0, False,
                                                                                              None)
    assert s.lora_ft.save_model is False  # a LoRA job keeps its result JSON only
    assert s.figures.svd is None  # each ablation preset's own SVD
    ft = RhtFtSettings.from_block({k: v for k, v in load("mini")["rht_ft"].items() if k != "weight_decay"})
    assert ft.weight_decay == 0.01 and ft.finetune_config().weight_decay == 0.01
    assert block_settings(load("paper")).selection is None


@pytest.mark.parametrize("name", CONFIGS)
def test_every_given_key_is_kept_with_its_value(name):
    """as_block() of each block holds every key the config gave, with the config's value (nothing dropped),
    plus only the defaults."""
    cfg = load(name)
    s = block_settings(cfg)

    def within(given, got, path):
        if isinstance(given, dict):
            assert isinstance(got, dict), path
            for k, v in given.items():
                assert k in got, f"{path}.{k} dropped"
                within(v, got[k], f"{path}.{k}")
        elif isinstance(given, list):
            assert isinstance(got, list) and len(got) == len(given), path
            for i, (a, b) in enumerate(zip(given, got)):
                within(a, b, f"{path}[{i}]")
        else:
            assert got == given and type(got) is type(given), path

    for block in BLOCKS:
        if cfg.get(block):
            within(cfg[block], getattr(s, block).as_block(), block)


def test_optional_key_is_recorded_only_when_given():
    """An absent optional key stays absent from as_block() (what the results and the rerun triggers record);
    given as null, it is kept."""
    ev = EvalSettings.from_block(load("paper")["eval"])
    assert "n_windows" not in ev.as_block()["ppl"]["wiki"] and ev.ppl["wiki"].n_windows is None
    cfg = load("paper")["eval"]
    cfg["ppl"]["wiki"]["n_windows"] = None
    assert EvalSettings.from_block(cfg).as_block()["ppl"]["wiki"]["n_windows"] is None


@pytest.mark.parametrize("name", CONFIGS)
def test_stream_layers_defaults_to_auto_and_enters_the_eval_block_only_when_given(name):
    """eval.stream_layers (layer-streamed evaluation) defaults to auto; a config that does not name it records
    exactly the eval block it recorded before the key existed (the plan's record and the evaluation jobs'
    rerun triggers), so no output of an existing config changes."""
    block = load(name)["eval"]
    ev = EvalSettings.from_block(block)
    assert ev.stream_layers == "auto" and "stream_layers" not in ev.as_block()
    assert set(ev.as_block()) == set(block) | {"weights"}
    for mode in ("auto", "always", "never"):
        assert EvalSettings.from_block({**block, "stream_layers": mode}).as_block()["stream_layers"] == mode
    with pytest.raises(ValueError, match=r"eval.stream_layers: expected one of \['auto', 'always', 'never'\]"):
        EvalSettings.from_block({**block, "stream_layers": True})


def test_settings_objects_are_frozen_and_pickle():
    """Snakemake pickles a `script:` job's params: each settings object must survive it unchanged."""
    import pickle

    s = block_settings(load("mini"))
    for block in BLOCKS:
        obj = getattr(s, block)
        assert pickle.loads(pickle.dumps(obj)) == obj
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.given = frozenset()
    run = RunContext.from_config(load("mini"), ["smollm2"])
    assert list(run.models) == ["smollm2"] and pickle.loads(pickle.dumps(run)) == run


def test_run_context_types_each_models_entry():
    """Each kept ``models`` entry is a frozen :class:`ModelEntry` holding the config's values."""
    cfg = load("mini")
    run = RunContext.from_config(cfg)
    assert list(run.models) == list(cfg["models"])
    for m, entry in cfg["models"].items():
        assert run.models[m] == ModelEntry(**entry)
    assert run.labels() == {m: e["label"] for m, e in cfg["models"].items()}
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.models["gemma3"].num_layers = 1


def test_a_models_entry_without_a_key_is_refused_naming_the_model_and_the_key():
    cfg = load("mini")
    cfg["models"] = {**cfg["models"], "gemma3": {k: v for k, v in cfg["models"]["gemma3"].items() if k != "shapes"}}
    with pytest.raises(ValueError, match=r"models\.gemma3: missing shapes; each model entry needs source"):
        RunContext.from_config(cfg)


# ---------------------------------------------------------------------------------------------- the hops


def test_outer_iters_reaches_the_variants_method_config():
    """methods.caldera.params.outer_iters -> check_config's variants -> Variant.config.outer_iters (the object
    rule compress_layers receives as its `variant` param)."""
    cfg = load("smoke")
    cfg["methods"]["caldera"]["params"]["outer_iters"] = 3
    variants = check_config(cfg)
    caldera = [v for v in variants.values() if v.method == "caldera"]
    assert caldera and {v.config.outer_iters for v in caldera} == {3}


def test_lora_lr_reaches_the_training_hyper_parameters():
    """lora_ft.tasks.<task>.lr -> LoraTaskSettings.lr -> TaskHyper.lr (what caldera.finetune.lora.train uses);
    a typo'd hyper-parameter is refused (the former hyper_from_config dropped unknown keys)."""
    cfg = load("smoke")
    cfg["lora_ft"]["tasks"]["rte"]["lr"] = 2.5e-4
    ft = block_settings(cfg).lora_ft
    assert ft.tasks["rte"].hyper().lr == 2.5e-4 and ft.tasks["wiki"].hyper().lr == 1e-4
    cfg["lora_ft"]["tasks"]["rte"]["learning_rate"] = 1.0
    with pytest.raises(ValueError, match=r"lora_ft\.tasks\.rte\.learning_rate: unknown key"):
        LoraFtSettings.from_block(cfg["lora_ft"])


def test_throughput_rounds_reach_the_timed_loops(monkeypatch):
    """throughput.rounds and .seed -> ThroughputSettings -> measure() (what step_throughput calls) -> the
    interleaved rounds."""
    import torch

    from caldera.eval import throughput as tp
    from caldera.experiments.jobs.throughput import measure

    calls = {}

    def fake(models, ids, **kw):
        calls.update(kw)
        one = {"single_token": {"times_s": [1.0] * kw["rounds"], "calls": kw["calls"]},
               "decode": {"times_s": [1.0] * kw["rounds"], "new_tokens": kw["new_tokens"]}}
        return {"orders": [], "models": {n: one for n in models}}

    monkeypatch.setattr(tp, "interleaved_throughput", fake)
    cfg = load("smoke")
    cfg["throughput"].update(rounds=4, seed=9)
    s = block_settings(cfg).throughput

    class Tok:
        def __call__(self, text, return_tensors):
            assert text == s.prompt
            return type("T", (), {"input_ids": torch.tensor([[1, 2, 3]])})

    res = measure({"a": None, "b": None}, Tok(), s)
    assert (calls["rounds"], calls["seed"], calls["new_tokens"], calls["calls"]) == (4, 9, 4, 2)
    assert len(res["variants"]["b"]["decode"]["tokens_per_s"]) == 4


@pytest.mark.parametrize("key, value, words", [
    ("separation_margin", 0.65, "throughput.separation_margin: removed: a claim is decided on the paired interval"),
    ("runs", 5, "throughput.runs: removed: .* set `rounds` instead"),
])
def test_removed_throughput_keys_are_refused_by_name(key, value, words):
    """A config that still sets a removed key is told it was removed and what replaces it (not "unknown key")."""
    with pytest.raises(ValueError, match=words) as e:
        ThroughputSettings.from_block({key: value})
    assert "unknown key" not in str(e.value)
    from caldera.experiments.planning.throughput_rows import moved_settings

    assert [m for m in moved_settings({"throughput": {key: value}}) if m.startswith(f"throughput.{key}: removed")]


# ---------------------------------------------------------------------------------------------- the jobs

#: rule -> (params that must be typed settings or plan objects, by class name): every job of the workflow
JOB_SETTINGS = {
    "assets": {"run": "RunContext", "settings": "EvalSettings"},
    "hessians": {"run": "RunContext"},
    "profile_layers": {"run": "RunContext", "variant": "Variant"},
    "allocate": {"variant": "Variant"},
    "compress_variant": {"run": "RunContext", "variant": "Variant"},
    "evaluate": {"settings": "EvalSettings", "run": "RunContext"},
    "replicate": {"settings": "EvalSettings", "run": "RunContext", "variant": "Variant"},
    "throughput": {"settings": "ThroughputSettings", "run": "RunContext"},
    "lora_finetune": {"settings": "LoraFtSettings", "eval_settings": "EvalSettings", "run": "RunContext"},
    "selection": {"plan": "SelectionPlan"},
    "weight_spectra": {"run": "RunContext", "settings": "FiguresSettings"},
    "ablation_traces": {"settings": "FiguresSettings", "run": "RunContext"},
    "figure3_data": {"settings": "FiguresSettings"},
    "lplr_traces": {"settings": "FiguresSettings", "run": "RunContext"},
    "plot_figure": {"run": "RunContext", "settings": "FiguresSettings"},
    "plot_ranks": {"run": "RunContext"},
    "make_table": {"plan": "TablePlan"},
    "throughput_table": {"plan": "ThroughputTablePlan"},
    "lora_table": {"plan": "Table5Plan"},
    "claims": {"run": "RunContext", "matrix_variants": "dict"},
}

DUMP = """
import json, os, sys
from snakemake import jobs
seen = {}
orig = jobs.Job.log_info
def log_info(self, *a, **k):
    orig(self, *a, **k)
    seen.setdefault(self.rule.name, {n: type(v).__name__ for n, v in self.params.items()})
jobs.Job.log_info = log_info
import atexit
atexit.register(lambda: open(os.environ["PARAMS_OUT"], "w").write(json.dumps(seen)))
from snakemake.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("cfg", ["smoke", "mini", "mini-full", "mini-full-chunks"])
def test_jobs_receive_their_blocks_settings_object(cfg, tmp_path):
    """In a dry run, each job that reads a typed block gets that block's settings object as a param (not a
    dict, not the whole config), and its script hands it to the step function."""
    import os

    pytest.importorskip("snakemake")
    for item in ("Snakefile", "workflow", "config"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    if cfg == "mini-full-chunks":  # layers in chunks of 10: a job per chunk, then the assembly
        text = (tmp_path / "config/mini-full.yaml").read_text()
        (tmp_path / f"config/{cfg}.yaml").write_text(re.sub(r"(?m)^layers_per_job: 30", "layers_per_job: 10", text))
    out = tmp_path / "params.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PARAMS_OUT": str(out)}
    r = subprocess.run([sys.executable, "-c", DUMP, "-n", "-F", "--cores", "1", "--configfile", f"config/{cfg}.yaml"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    seen = json.loads(out.read_text())
    want = dict(JOB_SETTINGS)
    if cfg.startswith("mini"):
        want["rht_finetune"] = {"settings": "RhtFtSettings", "run": "RunContext"}
    if cfg == "mini-full-chunks":  # a job per chunk, then the assembly; replicates evaluated apart
        del want["compress_variant"], want["replicate"]
        want["compress_layers"] = want["assemble_checkpoint"] = {"run": "RunContext", "variant": "Variant"}
    if cfg == "smoke":  # its other tables are pending
        want["pending_table"] = {"reason": "str"}
    for rule, params in want.items():
        assert rule in seen, rule
        assert {n: seen[rule].get(n) for n in params} == params, (rule, seen[rule])
    for rule, params in want.items():  # the script passes each object on to its step function
        script = (ROOT / f"workflow/scripts/{rule}.py").read_text()
        for name in params:
            assert f"sm.params.{name}" in script or f"p.{name}" in script, (rule, name)


def test_no_job_reads_the_whole_config():
    """Every rule script hands its step function the typed objects of its params; only the job wrapper
    (caldera_job.py: process set-up before torch loads) reads two run-level keys from the config."""
    scripts = sorted((ROOT / "workflow/scripts").glob("*.py"))
    assert len(scripts) > 20
    for path in scripts:
        text = path.read_text()
        if path.name == "caldera_job.py":
            assert text.count("sm.config") == 2 and "numerics_mode(sm.config" in text \
                and "local_data.use(sm.config)" in text
            continue
        assert "sm.config" not in text and "snakemake.config" not in text, path.name
