import pytest
import torch

from caldera.ldl import regularize_hessian
from caldera.lplr import lplr_factorize
from caldera.metrics import data_aware_sq_error
from caldera.quantizers.base import Quantizer
from tests.helpers import IntegerGrid, llm_like


class CoarseGrid(IntegerGrid):
    """Integers at RMS 2: ~3 levels per std, a crude low-bit quantizer."""

    opt_scale = 2.0


@pytest.mark.parametrize("sweep", ["jacobi", "alternating"])
def test_lplr_best_error_never_increases_and_is_exact(sweep):
    W, H = llm_like(48, 40, seed=11, decay=0.8)
    Hr = regularize_hessian(H)
    q: Quantizer = CoarseGrid()
    res = lplr_factorize(W, Hr, 6, q, q, inner_iters=8, sweep=sweep)
    assert len(res.errors) == 9
    assert res.errors[res.best_iter] == min(res.errors)
    # the tracked best equals a brute-force evaluation of ‖(LR − A)Xᵀ‖² through H
    brute = data_aware_sq_error(res.L @ res.R - W, Hr)
    assert res.sq_error == pytest.approx(brute, rel=1e-4)
    # the returned factors are codewords: L is quantized as Lᵀ with one scale
    Lt = res.L.T / res.L_codes.scale
    assert torch.allclose(Lt, torch.round(Lt), atol=1e-4)


def test_lplr_16bit_is_closed_form():
    W, H = llm_like(40, 32, seed=12, decay=0.7)
    Hr = regularize_hessian(H)
    res = lplr_factorize(W, Hr, 5, None, None, inner_iters=10)
    Y = W.double() @ torch.linalg.cholesky(Hr)
    s = torch.linalg.svdvals(Y)
    expect = float((s[5:].pow(2).sum() / s.pow(2).sum()).sqrt())
    assert res.errors == [pytest.approx(expect, rel=1e-3)]
    assert res.L_codes is None and res.R.dtype == torch.float32
    assert torch.equal(res.L, res.L.half().float())


def test_lplr_iterations_reduce_error_vs_init_on_average():
    """Alg. 2 lines 7–14 'can only yield a smaller error' for the returned best."""
    W, H = llm_like(64, 48, seed=13, decay=0.5)
    Hr = regularize_hessian(H)
    q = CoarseGrid()
    res = lplr_factorize(W, Hr, 8, q, q, inner_iters=10)
    assert min(res.errors) <= res.errors[0]


def test_lplr_bad_arguments():
    W, H = llm_like(16, 16, seed=1)
    with pytest.raises(ValueError, match="both"):
        lplr_factorize(W, regularize_hessian(H), 2, CoarseGrid(), None, 2)
    with pytest.raises(ValueError, match="sweep"):
        lplr_factorize(W, regularize_hessian(H), 2, CoarseGrid(), CoarseGrid(), 2, sweep="x")
