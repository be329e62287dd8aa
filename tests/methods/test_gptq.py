"""GPTQ (caldera.methods.gptq): the proxy loss against a slow oracle, its options, its stored codes."""

import torch

from caldera.algorithm.ldl import regularize_hessian
from caldera.methods import get_method
from caldera.methods.gptq import _round, _row_scale
from caldera.metrics import relative_data_aware_error
from caldera.synthetic import llm_like


def test_gptq_beats_rtn_on_the_proxy_loss_and_matches_a_slow_oracle():
    W, H = llm_like(16, 24, seed=3, cond=1e3)
    spec = get_method("gptq")
    cfg = spec.make_config({"bits": 3, "block": 8})
    dec = spec.fn(W, H, cfg)
    # slow oracle: the unblocked OBS column loop in float64
    Hd = H.clone()
    Hd.diagonal().add_(0.01 * float(Hd.diagonal().mean()))
    Hinv = torch.linalg.cholesky(torch.linalg.inv(Hd), upper=True)
    Wd = W.double().clone()
    scale = _row_scale(Wd, 3)
    Q = torch.zeros_like(Wd)
    for j in range(24):
        Q[:, j] = _round(Wd[:, j : j + 1], scale, 3)[:, 0]
        e = (Wd[:, j] - Q[:, j]) / Hinv[j, j]
        Wd[:, j:] -= e[:, None] * Hinv[j, j:][None, :]
    assert torch.allclose(dec.Q.double(), Q, atol=1e-5)
    He = regularize_hessian(H)
    rtn = _round(W.double(), _row_scale(W.double(), 3), 3).float()
    assert dec.error < relative_data_aware_error(rtn, W, He)


def test_gptq_act_order_and_groups_run():
    W, H = llm_like(16, 32, seed=4)
    spec = get_method("gptq")
    for params in ({"act_order": True}, {"percdamp": 0.1}):
        dec = spec.fn(W, H, spec.make_config(params))
        assert dec.Q.shape == W.shape and 0 < dec.error < 1


def test_gptq_codes_store_in_compressed_linear():
    from caldera.nn.compressed_linear import CompressedLinear

    W, H = llm_like(16, 32, seed=6)
    spec = get_method("gptq")
    dec = spec.fn(W, H, spec.make_config({"bits": 2}))
    lin = CompressedLinear.from_decomposition(dec)
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(lin(x), x @ dec.Q.T, atol=1e-5)
