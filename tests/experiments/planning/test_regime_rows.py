"""caldera.experiments.planning.regime_rows: rows of a run compressed again at each stand-in's regime bits."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from caldera.experiments.planning.plan import all_variants, check_config, replicate_variants, table_rows
from caldera.experiments.planning.regime_rows import (
    base_table,
    regime_bits,
    regime_errors,
    regime_tables,
    regime_variant,
    regime_zeroshot_limit,
    same_regime_tables,
)

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
validate = pytest.importorskip("snakemake.utils").validate


def mini() -> dict:
    cfg = yaml.safe_load((ROOT / "config/mini.yaml").read_text())
    validate(cfg, SCHEMA)
    return cfg


def test_a_regime_variant_is_the_2bit_variant_with_q_at_the_regime_bits_and_the_regime_params():
    cfg = mini()
    two = all_variants({**cfg, "regime": {**cfg["regime"], "run": None}})
    v = two["smollm2-caldera-r16-lr4"]
    r = regime_variant(cfg, v)
    assert r.id == "smollm2-caldera-r16-lr4-q3" and r.model == v.model and (r.rank, r.b_lr) == (v.rank, v.b_lr)
    assert r.config.q_bits == 3 and v.config.q_bits == 2
    assert r.config.hessian_update is True and v.config.hessian_update is False  # regime.run.params.caldera
    # everything else is the 2-bit variant's: the same seed, so seeds pair across the regimes' rows as well
    same = {k: x for k, x in v.params.items() if k not in ("q_bits", "hessian_update")}
    assert {k: r.params[k] for k in same} == same
    q = regime_variant(cfg, two["smollm2-quipsharp"])
    assert q.id == "smollm2-quipsharp-q3" and q.config.q_bits == 3
    # not listed, dense, or a stand-in whose regime is 2 bits: none
    assert regime_variant(cfg, two["smollm2-caldera-r8-lr4"]) is None
    assert regime_variant(cfg, two["smollm2-dense"]) is None
    assert regime_bits(cfg, "gemma3") is None and regime_bits(cfg, "smollm2") == 3
    g = copy.deepcopy(cfg)
    g["regime"]["run"]["variants"].append("gemma3-quipsharp")
    assert regime_variant(g, two["gemma3-quipsharp"]) is None


def test_a_regime_table_keeps_the_dense_rows_maps_the_listed_rows_and_marks_the_rest():
    cfg = mini()
    assert regime_tables(cfg) == ["table1_llama2_zeroshot_regime", "table7_mistral_regime"]
    assert base_table("table1_llama2_zeroshot_regime") == "table1_llama2_zeroshot"
    plain = table_rows(cfg, "table1_llama2_zeroshot")
    rows = table_rows(cfg, "table1_llama2_zeroshot_regime")
    paper = [r for r in plain if r.get("ref") is not None]
    assert [r["ref"] for r in rows] == [r["ref"] for r in paper]  # the paper's rows, no extra_methods row
    listed = set(cfg["regime"]["run"]["variants"])
    for two, reg in zip(paper, rows):
        v = two["variant"]
        if v.method == "dense":
            assert reg["variant"] is v or reg["variant"].id == v.id  # the same dense model
        elif v.id in listed:
            assert reg["variant"].id == f"{v.id}-q3"
        else:
            assert reg["variant"] is None and "regime.run.variants" in reg["pending"]
    assert any(r["variant"] is None for r in rows) and any(r["variant"] and r["variant"].id.endswith("-q3")
                                                            for r in rows)


def test_the_regime_rows_are_variants_of_the_run_and_replicated_on_the_2bit_rows_seeds():
    cfg = mini()
    variants = check_config(cfg)
    reg = sorted(v for v in variants if v.endswith("-q3"))
    assert reg == sorted(f"{v}-q3" for v in cfg["regime"]["run"]["variants"])
    reps = replicate_variants(cfg, variants)
    for vid in reg:
        two = reps[vid.removesuffix("-q3")]
        assert [r.config.seed for r in reps[vid]] == [r.config.seed for r in two]  # paired with the 2-bit rows


def test_no_regime_run_no_regime_rows():
    cfg = mini()
    cfg["regime"].pop("run")
    cfg["replicates"]["variants"] = [v for v in cfg["replicates"]["variants"] if not v.endswith("-q3")]
    assert regime_tables(cfg) == [] and same_regime_tables(cfg) == []
    assert not any(v.endswith("-q3") for v in check_config(cfg))


def test_tables_whose_stand_ins_regime_is_2_bits_are_their_own_regime_tables():
    cfg = mini()
    assert same_regime_tables(cfg) == ["table2_llama3_zeroshot"]
    cfg["regime"]["models"]["gemma3"]["q_bits"] = 3
    assert same_regime_tables(cfg) == []


@pytest.mark.parametrize("edit, words", [
    (lambda c: c["regime"]["run"]["tables"].append("table5_finetune"), "regime.run.tables[2]"),
    (lambda c: c["regime"]["run"]["variants"].append("smollm2-caldera-r999-lr4"), "regime.run.variants[4]"),
    (lambda c: c["regime"]["run"]["variants"].append("smollm2-dense"), "not a compressed variant"),
    (lambda c: c["regime"]["run"]["variants"].append("gemma3-quipsharp"), "regime is 2 bits"),
    (lambda c: c["regime"]["run"]["params"].update({"rtn": {"bits": 3}}), "regime.run.params.rtn"),
    (lambda c: c["regime"]["run"].update({"zeroshot": {"limit": {"hellaswag": 9}}}),
     "regime.run.zeroshot.limit.hellaswag: not a task of eval.zeroshot.tasks"),
])
def test_bad_regime_run_is_named_with_its_key(edit, words):
    cfg = mini()
    edit(cfg)
    errors = regime_errors(cfg, all_variants(cfg))
    assert any(words in e for e in errors), errors
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        check_config(cfg)


def test_a_stand_in_without_regime_bits_is_named():
    cfg = mini()
    cfg["regime"]["models"]["smollm2"]["q_bits"] = None
    errors = regime_errors(cfg, all_variants(cfg))
    assert len(errors) == 4 and all("has no regime bits" in e for e in errors)


def test_a_bad_regime_param_value_is_refused_with_its_key():
    cfg = mini()
    cfg["regime"]["run"]["params"]["caldera"] = {"outer_iters": 0}
    with pytest.raises(ValueError, match=r"regime\.run\.params\.caldera"):
        check_config(cfg)


def test_regime_rows_take_their_own_zero_shot_documents_and_only_they():
    """regime.run.zeroshot: the regime rows are evaluated at its documents on the tasks it names (eval.zeroshot.limit
    on the others), their seed replicates too when ``replicates`` (then scored zero-shot, and priced so); the 2-bit
    rows and their replicates keep eval.zeroshot.limit."""
    from caldera.experiments.planning.job_plan import eval_parts

    cfg = mini()
    cfg["replicates"]["zeroshot"] = False
    variants = check_config(cfg)
    assert all(regime_zeroshot_limit(cfg, v) is None for v in variants.values())  # no block: none
    before = {vid: eval_parts(cfg, v)["zeroshot"] for vid, v in variants.items()}
    cfg["regime"]["run"]["zeroshot"] = {"limit": {"arc_easy": 300, "caldera_piqa": 300}}
    variants = check_config(cfg)
    tasks = ["caldera_winogrande", "caldera_rte", "caldera_piqa", "caldera_arc_easy", "caldera_arc_challenge"]
    want = {t: 300 if t in ("caldera_piqa", "caldera_arc_easy") else 4 for t in tasks}
    for vid, v in variants.items():
        regime = (v.replicate_of or vid).endswith("-q3")
        got = regime_zeroshot_limit(cfg, v)
        assert got == (want if regime and v.replicate_of is None else None), vid
        assert (eval_parts(cfg, v)["zeroshot"] > before[vid]) == (got is not None), vid
    reps = replicate_variants(cfg, variants)
    rep, two_bit_rep = reps["smollm2-quipsharp-q3"][1], reps["smollm2-quipsharp"][1]
    assert rep.replicate_of == "smollm2-quipsharp-q3" and two_bit_rep.replicate_of == "smollm2-quipsharp"
    assert regime_zeroshot_limit(cfg, rep) is None and eval_parts(cfg, rep)["zeroshot"] == 0
    cfg["regime"]["run"]["zeroshot"]["replicates"] = True
    assert regime_zeroshot_limit(cfg, rep) == want
    assert eval_parts(cfg, rep)["zeroshot"] == eval_parts(cfg, variants["smollm2-quipsharp-q3"])["zeroshot"]
    assert regime_zeroshot_limit(cfg, two_bit_rep) is None and eval_parts(cfg, two_bit_rep)["zeroshot"] == 0
