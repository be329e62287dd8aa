"""caldera.experiments.planning.variants: a paper-table row as a variant of this run (ids, ranks, typed configs)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from caldera.bits import CONFIG_SHAPES, MODEL_SHAPES, average_bits
from caldera.experiments.planning.variants import (
    RHTFT_SUFFIX,
    ZERO_SHOT_TABLES,
    Variant,
    caldera_params,
    make_variant,
    mapped_rank,
    method_config,
    rank_at_equal_bits,
    variant_for_row,
)
from caldera.paper_reference import load_reference_table
from caldera.strict_yaml import load_yaml_strict

#: the default run's config: its stand-ins, rank_multiple and method parameters
MINI = Path(__file__).resolve().parents[3] / "config/mini.yaml"


def _rows():
    return [row for t in ZERO_SHOT_TABLES for row in load_reference_table(t)]


def test_ids_are_file_name_safe_and_name_model_label_rank_and_bits():
    v = make_variant("smollm2", "quip#", {}, 0, None, "quip#")
    assert v.id == "smollm2-quipsharp"
    v = make_variant("gemma3", "quip#-lr", {"lr_rank": 24}, 24, 16, "quipsharp-lr")
    assert v.id == "gemma3-quipsharp-lr-r24-lr16"
    assert make_variant("m/x y", "dense", {}, 0, None, "dense").id == "m_x_y-dense"
    # the fine-tuned suffix can never occur in a variant id, so base and fine-tuned ids never collide
    for row in _rows():
        if (v := variant_for_row(load_yaml_strict(MINI), row)) is not None:
            assert re.fullmatch(r"[A-Za-z0-9._-]+", v.id) and RHTFT_SUFFIX not in v.id, v.id


def test_mapped_rank_is_the_multiple_with_the_closest_average_bits():
    """On a stand-in, the rank (a multiple of rank_multiple) whose average bits are nearest the paper row's
    average bits on the paper model's shapes; on the paper model itself, the paper's rank unchanged."""
    cfg = load_yaml_strict(MINI)
    for paper_model, stand_in in cfg["stand_ins"].items():
        shapes = CONFIG_SHAPES[cfg["models"][stand_in]["shapes"]]
        limit = min(min(s) for s in shapes)
        for rank in (64, 128, 256):
            for b_lr in (4, 16):
                target = average_bits(MODEL_SHAPES[paper_model], 2, b_lr, rank)
                k = mapped_rank(cfg, paper_model, rank, b_lr)
                assert k % 8 == 0 and 0 <= k <= limit
                err = abs(average_bits(shapes, 2, b_lr, k) - target)
                assert all(err <= abs(average_bits(shapes, 2, b_lr, j) - target) + 1e-12
                           for j in range(0, limit + 1, 8)), (paper_model, rank, b_lr, k)
    cfg["rank_multiple"] = 16
    assert mapped_rank(cfg, "llama-2-7b", 256, 4) % 16 == 0
    same = copy.deepcopy(cfg)
    same["models"]["smollm2"]["shapes"] = "llama-2-7b"
    assert mapped_rank(same, "llama-2-7b", 128, 4) == 128


def test_mapped_rank_is_rank_at_equal_bits_of_the_stand_ins_shapes():
    """The config's stand-in, its ``shapes`` and the config's ``rank_multiple`` (default 8) are what
    :func:`rank_at_equal_bits` maps with."""
    cfg = load_yaml_strict(MINI)
    cfg.pop("rank_multiple", None)
    for paper_model, stand_in in cfg["stand_ins"].items():
        shapes = cfg["models"][stand_in]["shapes"]
        assert mapped_rank(cfg, paper_model, 256, 4) == rank_at_equal_bits(shapes, paper_model, 256, 4, 8)
    assert rank_at_equal_bits("smollm2-135m", "llama-2-7b", 256, 4, 8) != rank_at_equal_bits(
        "gemma3-270m", "llama-2-7b", 256, 4, 8)
    assert rank_at_equal_bits("llama-2-7b", "llama-2-7b", 100, 4, 8) == 100  # the paper's own shapes: unmapped


def test_caldera_params_override_per_factor_precision_only():
    cfg = load_yaml_strict(MINI)
    m = cfg["methods"]["caldera"]
    m["params_by_b_lr"] = {"16": {"update_order": "LR-first", "outer_iters": 5}}
    before = copy.deepcopy(m)
    assert caldera_params(cfg, 4) == before["params"]
    assert caldera_params(cfg, 16) == {**before["params"], "update_order": "LR-first", "outer_iters": 5}
    assert m == before  # the config is read, never changed
    del m["params_by_b_lr"]
    assert caldera_params(cfg, 16) == before["params"]


def test_every_zero_shot_row_maps_to_its_method_at_the_mapped_rank():
    cfg = load_yaml_strict(MINI)
    for row in _rows():
        v = variant_for_row(cfg, row)
        assert v is not None and v.model == cfg["stand_ins"][row["model"]], row
        rank, b_lr = row["rank"], int(row["b_lr"] or 16)
        k = mapped_rank(cfg, row["model"], rank, b_lr) if rank else 0
        if row["method"] == "Unquantized":
            assert (v.method, v.rank, v.b_lr, v.config, v.params) == ("dense", 0, None, None, {})
        elif row["method"] == "CALDERA":
            assert (v.method, v.rank, v.b_lr) == ("caldera", k, b_lr)
            assert (v.config.rank, v.config.l_bits, v.config.r_bits) == (k, b_lr, b_lr)
            want = {key: val for key, val in caldera_params(cfg, b_lr).items() if key != "preset"}
            assert {key: getattr(v.config, key) for key in want} == want
        elif rank:
            assert (v.method, v.rank, v.b_lr, v.config.lr_rank) == ("quip#-lr", k, 16, k)
        else:
            assert (v.method, v.rank, v.b_lr, v.params) == ("quip#", 0, None, cfg["methods"]["quip#"]["params"])


def test_rows_outside_the_workflow_give_no_variant():
    cfg = load_yaml_strict(MINI)
    row = next(r for r in _rows() if r["method"] == "CALDERA")
    assert variant_for_row(cfg, {**row, "model": "llama-2-34b"}) is None
    assert variant_for_row(cfg, {**row, "method": "LQ-LoRA"}) is None


def test_method_config_names_the_config_key_of_a_bad_parameter():
    with pytest.raises(ValueError, match=r"^methods\.caldera\.params: .*no_such_param"):
        method_config("caldera", {"no_such_param": 1}, "methods.caldera.params")
    with pytest.raises(ValueError, match=r"^here: the dense model takes no parameters; remove \['rank'\]"):
        method_config("dense", {"rank": 4}, "here")
    assert method_config("dense", {}, "here") is None
    cfg = load_yaml_strict(MINI)
    cfg["methods"]["caldera"]["params"]["outer_itres"] = 2
    row = next(r for r in _rows() if r["method"] == "CALDERA")
    with pytest.raises(ValueError, match=r"methods\.caldera\.params \(row llama-2-7b CALDERA rank 64 B_LR 16\)"):
        variant_for_row(cfg, row)


def test_variants_hash_and_compare_by_identity_fields_not_by_their_params_dict():
    """Variants key dicts and sets although ``params`` is a dict; equal variants hash equal."""
    a = make_variant("smollm2", "quip#", {}, 0, None, "quipsharp")
    b = make_variant("smollm2", "quip#", {}, 0, None, "quipsharp")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Variant(a.id, a.model, a.method, a.params, a.rank, a.b_lr, a.config, replicate_of="x")
