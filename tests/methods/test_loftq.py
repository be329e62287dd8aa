"""LoftQ (caldera.methods.loftq): NormalFloat levels, the alternation, its stored codes."""

import pytest
import torch

from caldera.algorithm.ldl import regularize_hessian
from caldera.methods import get_method
from caldera.methods.loftq import nf_levels, nf_quantize
from caldera.metrics import relative_data_aware_error
from caldera.synthetic import llm_like


def test_loftq_levels_and_alternation():
    assert torch.allclose(nf_levels(2), -nf_levels(2).flip(0)) and float(nf_levels(2).abs().max()) == 1.0
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    q = nf_quantize(x, 2)
    assert len(torch.unique(torch.round(q / x.abs().amax(1, keepdim=True), decimals=5))) <= 4 * 4
    W, H = llm_like(64, 64, seed=5, decay=0.8)
    spec = get_method("loftq")
    dec = spec.fn(W, H, spec.make_config({"rank": 8, "iters": 3}))
    assert dec.rank == 8 and torch.equal(dec.L, dec.L.half().float())
    one = spec.fn(W, H, spec.make_config({"rank": 8, "iters": 1}))
    # the low-rank part helps: error below plain NF2 rounding of W
    nf = relative_data_aware_error(nf_quantize(W, 2), W, regularize_hessian(H))
    assert dec.error < nf and one.error < nf
    with pytest.raises(ValueError, match="rank"):
        spec.fn(W, H, spec.make_config({"rank": 64}))


def test_loftq_codes_store_in_compressed_linear():
    from caldera.nn.compressed_linear import CompressedLinear

    W, H = llm_like(32, 128, seed=7)
    spec = get_method("loftq")
    dec = spec.fn(W, H, spec.make_config({"rank": 4, "iters": 2}))
    lin = CompressedLinear.from_decomposition(dec)
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(lin(x), x @ dec.reconstruction().T, atol=1e-4)
