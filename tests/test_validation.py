"""caldera.validation: the input checks name the argument, and the finiteness test's one-reduction fast path
decides exactly as the elementwise test."""

import pytest
import torch

from caldera.validation import check_finite, check_W_H


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_finite_entries_pass_even_when_their_sum_overflows(dtype):
    big = torch.finfo(dtype).max
    x = torch.full((64, 8), big, dtype=dtype)  # every entry finite, the sum is +inf in any dtype
    assert not torch.isfinite(x.sum())
    check_finite(x, "x")
    check_finite(torch.tensor([big, -big, big], dtype=dtype), "x")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_any_non_finite_entry_is_refused_with_its_count(bad):
    x = torch.randn(33, 7, dtype=torch.float64)
    x[5, 3] = bad
    with pytest.raises(ValueError, match=r"^x contains 1 NaN/Inf"):
        check_finite(x, "x")


def test_opposite_infinities_whose_sum_is_nan_are_both_counted():
    x = torch.zeros(10)
    x[1], x[7] = float("inf"), float("-inf")
    with pytest.raises(ValueError, match="2 NaN/Inf"):
        check_finite(x, "W")


def test_empty_and_integer_tensors_pass():
    check_finite(torch.empty(0, 4), "x")
    check_finite(torch.arange(12).reshape(3, 4), "x")


def test_check_W_H_names_a_non_finite_H_and_an_asymmetric_one():
    W, H = torch.randn(4, 8), torch.eye(8)
    check_W_H(W, H)
    Hn = H.clone()
    Hn[2, 2] = float("nan")
    with pytest.raises(ValueError, match="^H contains 1"):
        check_W_H(W, Hn)
    Ha = H.clone()
    Ha[0, 1] = 1e-3
    with pytest.raises(ValueError, match="H is not symmetric"):
        check_W_H(W, Ha)
