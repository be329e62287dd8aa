"""QuIP# and QuIP#-LR (caldera.methods.quip_sharp): against RTN, their SVD options, fp16 factors."""

import pytest
import torch

from caldera.algorithm.ldl import regularize_hessian
from caldera.methods import get_method
from caldera.metrics import relative_data_aware_error
from tests.helpers import llm_like


def test_quip_sharp_variants_and_rtn_ordering():
    W, H = llm_like(64, 64, seed=5, decay=0.6, cond=1e3, outliers=2)
    He = regularize_hessian(H)
    err = {}
    for name, params in [("quip#", {}), ("quip#-lr", {"lr_rank": 8}), ("rtn", {"bits": 2})]:
        spec = get_method(name)
        dec = spec.fn(W, H, spec.make_config(params))
        err[name] = relative_data_aware_error(dec.reconstruction(), W, He)
        assert err[name] == pytest.approx(dec.error, rel=1e-4)
    # data-aware lattice quantization beats data-free 2-bit rounding; the fp16 LR correction helps QuIP#
    assert err["quip#"] < err["rtn"]
    assert err["quip#-lr"] < err["quip#"]


def test_quip_sharp_lr_randomized_svd_matches_exact():
    W, H = llm_like(96, 64, seed=7, decay=0.6, cond=1e3)
    spec = get_method("quip#-lr")
    exact = spec.fn(W, H, spec.make_config({"lr_rank": 8}))
    fast = spec.fn(W, H, spec.make_config({"lr_rank": 8, "svd": "randomized"}))
    again = spec.fn(W, H, spec.make_config({"lr_rank": 8, "svd": "randomized"}))
    assert fast.error == pytest.approx(exact.error, rel=0.02)
    assert torch.equal(fast.Q_codes, again.Q_codes) and torch.equal(fast.L, again.L)  # seeded
    with pytest.raises(ValueError, match="svd"):
        spec.make_config({"svd": "fast"})


def test_quip_sharp_lr_factors_are_fp16():
    W, H = llm_like(32, 32, seed=6)
    spec = get_method("quip#-lr")
    dec = spec.fn(W, H, spec.make_config({"lr_rank": 4}))
    assert torch.equal(dec.L, dec.L.half().float()) and dec.rank == 4
