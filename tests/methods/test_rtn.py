"""Round to nearest (caldera.methods.rtn): data-free, per-row absmax, at most 2^bits levels per row."""

from __future__ import annotations

import pytest
import torch

from caldera.algorithm.ldl import regularize_hessian
from caldera.methods import get_method
from caldera.metrics import relative_data_aware_error
from caldera.synthetic import calibration_hessian, llm_like


def _rtn(W, H, **params):
    spec = get_method("rtn")
    return spec.fn(W, H, spec.make_config(params))


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_each_row_takes_at_most_two_to_the_bits_levels_and_more_bits_lower_the_error(bits):
    W, H = llm_like(24, 32, seed=1)
    dec = _rtn(W, H, bits=bits)
    assert all(len(torch.unique(row)) <= 2**bits for row in dec.Q)
    assert dec.error == pytest.approx(float(relative_data_aware_error(dec.Q, W, regularize_hessian(H))), rel=1e-4)
    assert dec.error < _rtn(W, H, bits=bits - 1).error


def test_the_hessian_does_not_change_q_and_rows_scale_on_their_own():
    W, H = llm_like(16, 32, seed=2)
    other = calibration_hessian(32, seed=9, cond=1e5)
    assert torch.equal(_rtn(W, H).Q, _rtn(W, other).Q)  # data-free
    c = torch.linspace(0.5, 4.0, 16)[:, None]
    assert torch.allclose(_rtn(W * c, H).Q, _rtn(W, H).Q * c, rtol=1e-5, atol=1e-7)  # per-row absmax scale


def test_bits_outside_one_to_eight_are_refused():
    for bits in (0, 9):
        with pytest.raises(ValueError, match=f"RTNConfig.bits={bits}; accepted: 1..8"):
            get_method("rtn").make_config({"bits": bits})
