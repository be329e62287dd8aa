"""App. E.5 (``subapp:computation_of_per_parameter_bit_budget``): every printed Avg Bits cell recomputed from the
model shapes, including the variant with r = 64 fine-tuned 16-bit factors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from caldera.bits import MODEL_SHAPES, average_bits
from theory import average_bits as ab


def test_every_printed_cell_matches_except_the_known_one():
    r = ab.check_tables(with_ft=True)
    assert r.holds and r.ratio <= 1
    assert [(m["table"], m["row"], m["printed"], m["computed"]) for m in r.counterexample["mismatches"]] == [
        ("table5_finetune", 21, "2.95", "2.94")]


def test_zero_shot_formula_alone_misses_the_finetuning_rows():
    r = ab.check_tables(with_ft=False)
    assert not r.holds and len(r.details["mismatches"]) == 13


def test_detects_a_perturbed_formula():
    assert not ab.check_tables(formula_offset=0.02).holds


@given(st.sampled_from(sorted(MODEL_SHAPES)), st.sampled_from([2, 3, 4]), st.sampled_from([2, 3, 4, 8, 16]),
       st.integers(0, 192), st.integers(0, 64))
def test_library_formula_equals_printed_formula(model, b_q, b_lr, k, r):
    r = min(r, k)
    shapes = MODEL_SHAPES[model]
    lib = average_bits(shapes, b_q, b_lr if k > r else None, k, ft_rank=r)
    assert abs(lib - ab.paper_formula(shapes, b_q, b_lr, k, r)) < 1e-12
