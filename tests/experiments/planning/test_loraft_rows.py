"""caldera.experiments.planning.loraft_rows: Table 5's paper rows mapped to this run's measured rows."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from caldera.bits import CONFIG_SHAPES, MODEL_SHAPES, average_bits
from caldera.experiments.planning.loraft_rows import (
    dense_variant_id,
    get_row,
    lora_rhtft_variants,
    lora_rows,
    lora_variants,
    ref_rows,
    row_for,
)
from caldera.experiments.planning.variants import RHTFT_SUFFIX, variant_for_row
from caldera.paper_reference import load_reference_table

ROOT = Path(__file__).resolve().parents[3]


def _mini():
    return yaml.safe_load((ROOT / "config/mini.yaml").read_text())


def _all_rows_cfg():
    cfg = _mini()
    cfg["lora_ft"]["rows"] = "all"
    return cfg


def _bits_by_hand(shapes, b_q, b_lr, k, r):
    """The paper's average bits written out: Σ(B_Q n d + (k − r) B_LR (n + d) + 16 r (n + d)) / Σ n d."""
    num = sum(b_q * n * d + (k - r) * (b_lr or 0) * (n + d) + 16 * r * (n + d) for n, d in shapes)
    return num / sum(n * d for n, d in shapes)


def test_mini_rows_and_bits():
    rows = {r.id: r for r in lora_rows(_mini())}
    assert set(rows) == {"smollm2-caldera-r16-lr4-ft8", "smollm2-loftq2-r8-lr16-ft8"}
    c = rows["smollm2-caldera-r16-lr4-ft8"]
    assert c.variant.id == "smollm2-caldera-r16-lr4"  # the Table 1 checkpoint, reused
    sh = MODEL_SHAPES["smollm2-135m"]
    assert c.avg_bits == pytest.approx(average_bits(sh, 2, 4, 16, ft_rank=8))
    q = rows["smollm2-loftq2-r8-lr16-ft8"]
    assert q.variant.method == "loftq" and q.variant.config.bits == 2 and q.ft_rank == q.variant.rank == 8


def test_unknown_row_is_refused():
    cfg = _mini()
    cfg["lora_ft"]["rows"] = [{"model": "llama-2-7b", "method": "CALDERA", "rank": 96, "b_lr": 4}]
    with pytest.raises(ValueError, match="matches no measurable row"):
        lora_rows(cfg)


def test_all_selects_exactly_the_measurable_paper_rows():
    """``rows: all`` keeps every CALDERA row of a stand-in model (RHT-FT ones too, the config having ``rht_ft``)
    and the whole-bit LoftQ rows; never the 2.5-bit LoftQ rows nor LQ-LoRA, which this project cannot run."""
    cfg = _all_rows_cfg()
    rows = lora_rows(cfg)
    refs = ref_rows()
    want = [r for r in refs if r["model"] in cfg["stand_ins"] and (
        r["method"] == "CALDERA" or (r["method"] == "LoftQ" and r["b_q"] == int(r["b_q"])))]
    assert [r.ref for r in rows] == want
    assert len({r.id for r in rows}) == len(rows)  # ids key the jobs' folders
    assert {r.ref["method"] for r in rows} == {"CALDERA", "LoftQ"} and any(r.ref["rht_ft"] for r in rows)


def test_every_row_has_the_stand_in_rank_ft_fraction_and_formula_bits():
    """A CALDERA row starts from Tables 1-2's variant of the same paper row; its fine-tuned rank is the paper's
    fraction r / k of the stand-in rank (a multiple of rank_multiple, within [multiple, rank]); its bits are the
    paper's formula on the stand-in's shapes with the top r components at 16 bits (LoftQ: all k of them)."""
    cfg = _all_rows_cfg()
    mult = int(cfg.get("rank_multiple", 8))
    for row in lora_rows(cfg):
        ref = row.ref
        shapes = CONFIG_SHAPES[cfg["models"][cfg["stand_ins"][ref["model"]]]["shapes"]]
        k, r = row.variant.rank, row.ft_rank
        assert row.variant.model == cfg["stand_ins"][ref["model"]]
        if ref["method"] == "CALDERA":
            base = variant_for_row(cfg, ref)
            assert (row.rht_base or row.variant).id == base.id and row.variant.config == base.config
            assert r % mult == 0 and mult <= r <= k
            assert abs(r / k - ref["ft_rank"] / ref["rank"]) <= mult / 2 / k + 1e-12
            assert row.avg_bits == pytest.approx(_bits_by_hand(shapes, 2, ref["b_lr"], k, r))
        else:
            assert row.variant.method == "loftq" and row.variant.config.bits == int(ref["b_q"]) and r == k
            assert row.avg_bits == pytest.approx(_bits_by_hand(shapes, ref["b_q"], None, k, k))
        assert row.id == f"{row.variant.id}-ft{r}"


def test_a_selected_row_is_the_one_its_entry_names():
    """An entry without ``rht_ft`` names the RHT-FT "No" row; with ``rht_ft: true`` the "Yes" row; b_lr picks
    between the 4- and 16-bit rows of the same rank."""
    cfg = _mini()
    cfg["lora_ft"]["rows"] = [{"model": "llama-3-8b", "method": "CALDERA", "rank": 64, "b_lr": 16},
                              {"model": "llama-3-8b", "method": "CALDERA", "rank": 64, "b_lr": 4, "rht_ft": True}]
    rows = lora_rows(cfg)
    assert [(r.ref["model"], r.ref["rank"], r.ref["b_lr"], r.ref["rht_ft"]) for r in rows] == [
        ("llama-3-8b", 64, 16.0, False), ("llama-3-8b", 64, 4.0, True)]
    assert rows[0].rht_base is None and rows[1].rht_base is not None


def test_rht_ft_rows_fine_tune_a_copy_of_their_base_variant():
    cfg = _all_rows_cfg()
    rows = lora_rows(cfg)
    ft = lora_rhtft_variants(cfg)
    yes = [r for r in rows if r.ref.get("rht_ft")]
    assert yes and set(ft) == {r.variant.id for r in yes}
    for r in yes:
        assert r.variant.id == r.rht_base.id + RHTFT_SUFFIX and ft[r.variant.id] == (r.variant, r.rht_base)
        assert r.variant.config == r.rht_base.config and r.variant.rank == r.rht_base.rank
    # what is compressed: every row's starting model, an RHT-FT row's base, never a fine-tuned id
    starts = lora_variants(cfg)
    assert set(starts) == {(r.rht_base or r.variant).id for r in rows}
    assert all(RHTFT_SUFFIX not in vid and v.id == vid for vid, v in starts.items())


def test_without_the_rht_ft_block_the_rht_ft_rows_are_not_measurable():
    cfg = _all_rows_cfg()
    del cfg["rht_ft"]
    assert not any(r.ref["rht_ft"] for r in lora_rows(cfg)) and not lora_rhtft_variants(cfg)
    yes = next(r for r in ref_rows() if r["method"] == "CALDERA" and r["rht_ft"])
    assert row_for(cfg, yes) is None


def test_rows_of_models_without_a_stand_in_are_not_measured():
    cfg = _all_rows_cfg()
    del cfg["stand_ins"]["llama-3-8b"]
    rows = lora_rows(cfg)
    assert rows and all(r.ref["model"] == "llama-2-7b" for r in rows)


def test_no_lora_ft_block_means_no_rows():
    cfg = _mini()
    del cfg["lora_ft"]
    assert lora_rows(cfg) == [] and lora_variants(cfg) == {} and lora_rhtft_variants(cfg) == {}


def test_get_row_finds_a_row_by_id_and_names_the_ids_otherwise():
    cfg = _mini()
    rows = lora_rows(cfg)
    assert all(get_row(cfg, r.id) == r for r in rows)
    with pytest.raises(ValueError, match="smollm2-caldera-r16-lr4-ft8"):
        get_row(cfg, "smollm2-caldera-r16-lr4-ft9")


def test_loftq_rows_take_the_configs_loftq_parameters():
    cfg = _mini()
    changed = copy.deepcopy(cfg)
    changed["lora_ft"]["loftq"] = {"iters": 3}
    q = next(r for r in lora_rows(changed) if r.variant.method == "loftq")
    assert q.variant.config.iters == 3 and q.variant.params["iters"] == 3
    assert q.variant.params["bits"] == int(q.ref["b_q"]) and q.variant.params["rank"] == q.variant.rank


def test_dense_variant_id_is_the_dense_rows_id():
    cfg = _mini()
    unq = next(r for r in load_reference_table("table1_llama2_zeroshot")
               if r["method"] == "Unquantized" and r["model"] == "llama-2-7b")
    assert dense_variant_id("smollm2") == variant_for_row(cfg, unq).id
