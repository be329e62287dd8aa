"""Tests for ``caldera.bits`` and for the paper's printed "Avg Bits" against the formula."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.bits import (
    MODEL_SHAPES,
    NUM_HIDDEN_LAYERS,
    average_bits,
    block_shapes,
    linear_param_count,
    rank_for_bits,
    storage_bits,
)
from caldera.paper_reference import list_reference_tables, load_reference_table

# ----------------------------------------------------------------------------------------- shapes


def test_model_shapes_from_configs():
    assert set(MODEL_SHAPES) == {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "mistral-7b",
                                 "smollm2-135m", "gemma3-270m"}
    assert MODEL_SHAPES["llama-2-7b"] == [(4096, 4096)] * 4 + [(11008, 4096)] * 2 + [(4096, 11008)]
    assert MODEL_SHAPES["llama-2-13b"] == [(5120, 5120)] * 4 + [(13824, 5120)] * 2 + [(5120, 13824)]
    assert MODEL_SHAPES["llama-2-70b"] == [(8192, 8192), (1024, 8192), (1024, 8192), (8192, 8192),
                                           (28672, 8192), (28672, 8192), (8192, 28672)]
    assert MODEL_SHAPES["llama-3-8b"] == [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096),
                                          (14336, 4096), (14336, 4096), (4096, 14336)]
    assert MODEL_SHAPES["mistral-7b"] == MODEL_SHAPES["llama-3-8b"]
    assert MODEL_SHAPES["smollm2-135m"] == [(576, 576), (192, 576), (192, 576), (576, 576),
                                            (1536, 576), (1536, 576), (576, 1536)]
    assert MODEL_SHAPES["gemma3-270m"] == [(1024, 640), (256, 640), (256, 640), (640, 1024),
                                           (2048, 640), (2048, 640), (640, 2048)]


def test_smollm2_parameter_count():
    per_layer = sum(n * d for n, d in MODEL_SHAPES["smollm2-135m"])
    assert per_layer == 576 * 576 * 2 + 192 * 576 * 2 + 1536 * 576 * 3 == 3_538_944
    assert NUM_HIDDEN_LAYERS["smollm2-135m"] == 30
    linear = linear_param_count("smollm2-135m")
    assert linear == 30 * per_layer
    embeddings = 49152 * 576  # tied with the LM head
    norms = (2 * 30 + 1) * 576  # input/post-attention RMSNorm per layer + final norm
    total = linear + embeddings + norms
    assert round(total / 1e6, 1) == 134.5


def test_paper_appendix_example_llama2_7b():
    # (n_i, d_i) of the appendix: 4 x (4096, 4096), 2 x (11008, 4096), (4096, 11008)
    shapes = MODEL_SHAPES["llama-2-7b"]
    total = sum(n * d for n, d in shapes)
    edges = sum(n + d for n, d in shapes)
    assert (total, edges) == (202_375_168, 78_080)
    assert average_bits(shapes, 2, 4, 256) == pytest.approx(2 + 256 * 4 * edges / total)


@pytest.mark.parametrize(
    "model,b_lr,rank,ft_rank,expected",
    [  # the table "Computed from model shapes" of the authors'-code notes (2 decimals)
        ("llama-2-7b", 4, 64, 0, 2.10), ("llama-2-7b", 4, 128, 0, 2.20), ("llama-2-7b", 4, 256, 0, 2.40),
        ("llama-2-7b", 16, 64, 0, 2.40), ("llama-2-7b", 16, 128, 0, 2.79), ("llama-2-7b", 16, 256, 0, 3.58),
        ("llama-2-70b", 4, 64, 0, 2.05), ("llama-2-70b", 4, 128, 0, 2.10), ("llama-2-70b", 4, 256, 0, 2.19),
        ("llama-3-8b", 4, 64, 0, 2.10), ("llama-3-8b", 4, 128, 0, 2.19),
        # The notes print 2.39 here, but the exact value is 2 + 256*4*81920/218103808 = 2.3846 -> 2.38;
        # the paper's Mistral-7B table (identical linear shapes) prints 2.38 for the same config.
        ("llama-3-8b", 4, 256, 0, 2.38),
        ("llama-2-7b", 4, 256, 64, 2.69),
    ],
)
def test_matches_authors_code_notes(model, b_lr, rank, ft_rank, expected):
    assert round(average_bits(MODEL_SHAPES[model], 2, b_lr, rank, ft_rank=ft_rank), 2) == expected


# --------------------------------------------------------------- the paper's printed "Avg Bits" column


def _round_like(value: float, printed: str) -> str:
    """Round ``value`` half-up to as many decimals as ``printed`` shows."""
    decimals = max(0, -Decimal(printed).as_tuple().exponent)
    return str(Decimal(repr(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def _row_bits(parsed: dict, *, with_ft: bool = True) -> float:
    rank = parsed["rank"] or 0
    ft_rank = (parsed.get("ft_rank") or 0) if with_ft else 0
    return average_bits(MODEL_SHAPES[parsed["model"]], parsed["b_q"], parsed["b_lr"], rank, ft_rank=ft_rank)


def _avg_bits_rows():
    for name in list_reference_tables():
        pairs = zip(load_reference_table(name, raw=True), load_reference_table(name))
        for i, (raw, parsed) in enumerate(pairs):
            if raw.get("avg_bits"):
                yield name, i, raw, parsed


# Rows whose printed Avg Bits is NOT reproduced by the appendix formula (with r = ft_rank = 64 fine-tuned
# 16-bit components for the CALDERA rows of the fine-tuning table, r = 0 everywhere else).
# (table, row index) -> (printed, computed).
KNOWN_MISMATCHES = {
    # LQ-LoRA (B_Q = 2.75, B_LR = 8, rank 64) on LLaMa-3 8B: 2.75 + 64*8*81920/218103808 = 2.9423 -> 2.94,
    # but the fine-tuning table prints one Avg Bits per config, 2.95, which is the LLaMa-2 7B value
    # (2.9475). The paper reports no LLaMa-3 LQ-LoRA result, so the row is otherwise empty.
    ("table5_finetune", 21): ("2.95", "2.94"),
}


def test_every_printed_avg_bits_against_formula():
    rows = list(_avg_bits_rows())
    assert len(rows) == 16 + 7 + 6 + 6 + 22 + 3  # every row of every table that prints Avg Bits
    mismatches = {}
    for name, i, raw, parsed in rows:
        computed = _round_like(_row_bits(parsed), raw["avg_bits"])
        if computed != raw["avg_bits"]:
            mismatches[(name, i)] = (raw["avg_bits"], computed)
    assert mismatches == KNOWN_MISMATCHES


def test_finetune_table_needs_the_ft_formula():
    """Which formula the fine-tuning table uses: without the 16-bit fine-tuned r = 64 components the
    4-bit-factor CALDERA rows would print 2.1/2.2/2.4 (LLaMa-2 7B) instead of 2.4/2.5/2.7."""
    plain_mismatch = {}
    for i, (raw, parsed) in enumerate(zip(load_reference_table("table5_finetune", raw=True),
                                          load_reference_table("table5_finetune"))):
        computed = _round_like(_row_bits(parsed, with_ft=False), raw["avg_bits"])
        if computed != raw["avg_bits"]:
            plain_mismatch[i] = (parsed["model"], parsed["rank"], parsed["b_lr"], raw["avg_bits"], computed)
    assert plain_mismatch == {
        4: ("llama-2-7b", 64, 4.0, "2.4", "2.1"), 5: ("llama-3-8b", 64, 4.0, "2.4", "2.1"),
        6: ("llama-2-7b", 64, 4.0, "2.4", "2.1"), 7: ("llama-3-8b", 64, 4.0, "2.4", "2.1"),
        8: ("llama-2-7b", 128, 4.0, "2.5", "2.2"), 9: ("llama-3-8b", 128, 4.0, "2.5", "2.2"),
        10: ("llama-2-7b", 128, 4.0, "2.5", "2.2"), 11: ("llama-3-8b", 128, 4.0, "2.5", "2.2"),
        12: ("llama-2-7b", 256, 4.0, "2.7", "2.4"), 13: ("llama-3-8b", 256, 4.0, "2.7", "2.4"),
        14: ("llama-2-7b", 256, 4.0, "2.7", "2.4"), 15: ("llama-3-8b", 256, 4.0, "2.7", "2.4"),
        21: ("llama-3-8b", 64, 8.0, "2.95", "2.94"),
    }


def test_lq_lora_is_not_counted_with_16bit_ft_components():
    # With r = 64 components at 16 bits, LQ-LoRA would be 3.15, not the printed 2.95.
    assert round(average_bits(MODEL_SHAPES["llama-2-7b"], 2.75, 8, 64, ft_rank=64), 2) == 3.15
    assert _round_like(average_bits(MODEL_SHAPES["llama-2-7b"], 2.75, 8, 64), "2.95") == "2.95"


# ------------------------------------------------------------------------------------ average_bits


def test_average_bits_basic_properties():
    shapes = MODEL_SHAPES["llama-2-7b"]
    assert average_bits(shapes, 2, None, 0) == 2.0
    assert average_bits(shapes, 16, None, 0) == 16.0
    assert average_bits(shapes, 2, None, 64, ft_rank=64) == average_bits(shapes, 2, 16, 64)
    assert average_bits(shapes, 2, 4, 64, ft_rank=64, b_ft=4) == pytest.approx(average_bits(shapes, 2, 4, 64))
    # the average over one block equals the average over the whole model (identical blocks)
    assert average_bits(shapes * 32, 2, 4, 128) == pytest.approx(average_bits(shapes, 2, 4, 128))


@given(rank=st.integers(0, 192), b_q=st.sampled_from([1, 2, 3, 4, 16]), b_lr=st.sampled_from([2, 4, 8, 16]))
@settings(max_examples=60, deadline=None)
def test_average_bits_equals_storage_without_overheads(rank, b_q, b_lr):
    shapes = MODEL_SHAPES["smollm2-135m"]
    total = sum(n * d for n, d in shapes)
    stored = sum(storage_bits(n, d, rank, b_q, b_lr, sign_bits=0, num_scales=0) for n, d in shapes)
    assert average_bits(shapes, b_q, b_lr, rank) == pytest.approx(stored / total)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(rank=-1), "rank"),
        (dict(rank=577), "rank"),
        (dict(rank=193), "rank"),  # k/v projections are 192 x 576
        (dict(rank=64, ft_rank=128), "ft_rank"),
        (dict(rank=64, ft_rank=-1), "ft_rank"),
        (dict(rank=2.5), "rank"),
        (dict(b_q=0), "b_q"),
        (dict(b_q=-2), "b_q"),
        (dict(b_q=33), "b_q"),
        (dict(b_q=math.nan), "b_q"),
        (dict(b_q=True), "b_q"),
        (dict(b_q="2"), "b_q"),
        (dict(b_lr=0), "b_lr"),
        (dict(b_lr=64), "b_lr"),
        (dict(b_lr=None), "b_lr"),
        (dict(b_ft=0, ft_rank=8), "b_ft"),
        (dict(shapes=[]), "shapes"),
        (dict(shapes=[(0, 4)]), "shapes"),
        (dict(shapes=[(4, 4, 4)]), "shapes"),
        (dict(shapes="4x4"), "shapes"),
    ],
)
def test_average_bits_validation(kwargs, match):
    args = dict(shapes=MODEL_SHAPES["smollm2-135m"], b_q=2, b_lr=4, rank=64)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        average_bits(**args)


def test_block_shapes_validation():
    with pytest.raises(ValueError, match="num_kv_heads"):
        block_shapes(576, 1536, 9, 0, 64)
    with pytest.raises(ValueError, match="model"):
        linear_param_count("gpt-2")


# ------------------------------------------------------------------------------------ storage_bits


def test_storage_bits_exact_count():
    n, d, k = 1536, 576, 32
    # Q codes + L,R codes + S_U (d) and S_V (n) at 1 bit + 3 fp32 scales (Q, L, R)
    assert storage_bits(n, d, k, 2, 4) == 2 * n * d + 4 * k * (n + d) + (n + d) + 3 * 32
    # sign vectors stored as float32
    assert storage_bits(n, d, k, 2, 4, sign_bits=32) == 2 * n * d + 4 * k * (n + d) + 32 * (n + d) + 96
    # 16-bit factors carry no scale; no RHT -> no sign vectors
    assert storage_bits(n, d, k, 2, 16, sign_bits=0) == 2 * n * d + 16 * k * (n + d) + 32
    # the authors' code stores "16-bit" factors as fp32
    assert storage_bits(n, d, k, 2, 32, sign_bits=0) == 2 * n * d + 32 * k * (n + d) + 32
    # rank 0: no factors, b_lr may be omitted; one scale for Q
    assert storage_bits(n, d, 0, 2, None) == 2 * n * d + (n + d) + 32
    # unquantized backbone: no scale
    assert storage_bits(n, d, 0, 16, None, sign_bits=0) == 16 * n * d
    assert storage_bits(n, d, k, 2, 4, num_scales=5, scale_bits=16) == (
        2 * n * d + 4 * k * (n + d) + (n + d) + 5 * 16)
    assert isinstance(storage_bits(n, d, k, 2, 4), int)


def test_storage_bits_overhead_is_small_but_positive():
    shapes = MODEL_SHAPES["llama-2-7b"]
    total = sum(n * d for n, d in shapes)
    stored = sum(storage_bits(n, d, 64, 2, 4) for n, d in shapes)
    overhead = stored / total - average_bits(shapes, 2, 4, 64)
    assert 0 < overhead < 1e-3


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n=0), "n"),
        (dict(d=-3), "d"),
        (dict(rank=-1), "rank"),
        (dict(rank=577), "rank"),
        (dict(b_q=2.5), "b_q"),
        (dict(b_q=0), "b_q"),
        (dict(b_lr=3.5), "b_lr"),
        (dict(b_lr=None), "b_lr"),
        (dict(sign_bits=-1), "sign_bits"),
        (dict(scale_bits=64), "scale_bits"),
        (dict(num_scales=-1), "num_scales"),
    ],
)
def test_storage_bits_validation(kwargs, match):
    args = dict(n=1536, d=576, rank=32, b_q=2, b_lr=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        storage_bits(**args)


# ----------------------------------------------------------------------------------- rank_for_bits


@pytest.mark.parametrize(
    "model,b_lr,target,expected",
    [
        ("llama-2-7b", 4, 2.1, 64), ("llama-2-7b", 4, 2.2, 128), ("llama-2-7b", 4, 2.4, 256),
        ("llama-2-7b", 16, 2.4, 64), ("llama-3-8b", 4, 2.4, 256), ("llama-2-13b", 4, 2.32, 256),
    ],
)
def test_rank_for_bits_recovers_paper_ranks(model, b_lr, target, expected):
    assert rank_for_bits(MODEL_SHAPES[model], 2, b_lr, target, multiple=64) == expected


def test_rank_for_bits_smollm2_equal_bits_ranks():
    shapes = MODEL_SHAPES["smollm2-135m"]
    seven_b = MODEL_SHAPES["llama-2-7b"]
    for paper_rank in (64, 128, 256):
        target = average_bits(seven_b, 2, 4, paper_rank)
        r = rank_for_bits(shapes, 2, 4, target)
        assert r % 8 == 0 and 0 < r <= 192
        got = average_bits(shapes, 2, 4, r)
        for other in (r - 8, r + 8):
            if 0 <= other <= 192:
                assert abs(got - target) <= abs(average_bits(shapes, 2, 4, other) - target)
    # LLaMa-2 7B rank 64 at 4 bits (2.0988 bits) is about rank 8 on SmolLM2-135M
    assert rank_for_bits(shapes, 2, 4, average_bits(seven_b, 2, 4, 64)) == 8


@given(target=st.floats(1.0, 8.0), multiple=st.sampled_from([1, 8, 16, 64]))
@settings(max_examples=50, deadline=None)
def test_rank_for_bits_is_closest_multiple(target, multiple):
    shapes = MODEL_SHAPES["smollm2-135m"]
    r = rank_for_bits(shapes, 2, 4, target, multiple=multiple)
    assert r % multiple == 0 and 0 <= r <= 192
    best = min(abs(average_bits(shapes, 2, 4, k) - target) for k in range(0, 193, multiple))
    assert abs(average_bits(shapes, 2, 4, r) - target) == best


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(multiple=0), "multiple"),
        (dict(multiple=-8), "multiple"),
        (dict(target_bits=-1.0), "target_bits"),
        (dict(target_bits=math.inf), "target_bits"),
        (dict(b_lr=0), "b_lr"),
        (dict(b_q=40), "b_q"),
        (dict(shapes=[]), "shapes"),
    ],
)
def test_rank_for_bits_validation(kwargs, match):
    args = dict(shapes=MODEL_SHAPES["smollm2-135m"], b_q=2, b_lr=4, target_bits=2.2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rank_for_bits(**args)
