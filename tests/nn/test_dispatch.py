"""Tests of caldera.nn.dispatch: which backend a layer's tensors and ``kernel`` setting choose, the factors it
hands the kernels, and its calls into them against the dense layer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from caldera.kernels import fused, native
from caldera.kernels.e8p_decode import dequantize_codes
from caldera.kernels.factors import Factors
from caldera.nn import dispatch
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes

N, D = 16, 24


def _layer(lr_format="quantized", rank=3, ft_rank=0, kernel="kernel", dense_q=False, seed=60):
    """A stand-in for CompressedLinear: the attributes dispatch reads."""
    g = torch.Generator().manual_seed(seed)
    meta = {"q_quantizer": "e8p", "lr_format": lr_format if rank else None, "rht": False,
            "l_quantizer": None, "r_quantizer": None}  # fmt: skip
    layer = SimpleNamespace(meta=meta, rank=rank, ft_rank=ft_rank, kernel=kernel, dense_q=dense_q,
                            Q_codes=_codes(N, D // 8, "e8p", seed), Q_scale=torch.rand(N, 1, generator=g) + 0.5,
                            _buffers={"bias": torch.randn(N, generator=g)})  # fmt: skip
    kq = rank - ft_rank
    if kq and lr_format == "quantized":
        meta.update(l_quantizer="e8p-rvq4", r_quantizer="e8p-rvq4")
        layer.L_codes = _codes(kq, N // 8, "e8p-rvq4", seed + 1)
        layer.R_codes = _codes(kq, D // 8, "e8p-rvq4", seed + 2)
        layer.L_scale, layer.R_scale = torch.tensor(0.05), torch.tensor(0.07)
    elif kq:
        layer.L_16, layer.R_16 = torch.randn(N, kq, generator=g).half(), torch.randn(kq, D, generator=g).half()
    if ft_rank:
        layer.L_ft, layer.R_ft = torch.randn(N, ft_rank, generator=g), torch.randn(ft_rank, D, generator=g)
    return layer


def _frozen_weight(layer):
    W = layer.Q_scale * dequantize_codes(layer.Q_codes, "e8p")
    if layer.rank - layer.ft_rank == 0:
        return W
    if layer.meta["lr_format"] == "quantized":
        L = layer.L_scale * dequantize_codes(layer.L_codes, "e8p-rvq4").T
        return W + L @ (layer.R_scale * dequantize_codes(layer.R_codes, "e8p-rvq4"))
    return W + layer.L_16.float() @ layer.R_16.float()


@pytest.mark.parametrize("backend", ["native", "numba", "triton", None])
def test_choose_backend_takes_the_dispatcher_s_choice_except_numba_under_auto(monkeypatch, backend):
    monkeypatch.setattr(fused, "select_backend", lambda device, q, lrq: backend)
    assert dispatch.choose_backend(_layer(kernel="kernel")) == backend
    assert dispatch.choose_backend(_layer(kernel="auto")) == (None if backend == "numba" else backend)


def test_choose_backend_passes_the_factor_quantizer(monkeypatch):
    seen = []
    monkeypatch.setattr(fused, "select_backend", lambda device, q, lrq: seen.append((device.type, q, lrq)) or "x")
    for layer in (_layer(), _layer(lr_format="float16"), _layer(rank=0), _layer(rank=2, ft_rank=2)):
        assert dispatch.choose_backend(layer) == "x"
    assert seen == [("cpu", "e8p", "e8p-rvq4"), ("cpu", "e8p", None), ("cpu", "e8p", None), ("cpu", "e8p", None)]


def test_layers_no_kernel_reads_take_the_reference_path(monkeypatch):
    monkeypatch.setattr(fused, "select_backend", lambda device, q, lrq: "numba")
    assert dispatch.choose_backend(_layer(dense_q=True)) is None
    per_row = _layer()
    per_row.L_scale = torch.ones(3, 1)
    assert dispatch.choose_backend(per_row) is None
    mixed = _layer()
    mixed.meta["r_quantizer"] = "e8p"
    assert dispatch.choose_backend(mixed) is None


def test_kernel_factors():
    assert dispatch.kernel_factors(_layer(rank=0)) is None
    assert dispatch.kernel_factors(_layer(rank=2, ft_rank=2)) is None
    q = _layer()
    assert dispatch.kernel_factors(q) == Factors(L_codes=q.L_codes, L_scale=q.L_scale, R_codes=q.R_codes,
                                                 R_scale=q.R_scale, quantizer="e8p-rvq4")  # fmt: skip
    h = _layer(lr_format="float16")
    f = dispatch.kernel_factors(h)
    assert f.L is h.L_16 and f.R is h.R_16 and f.L_codes is None


@pytest.mark.parametrize(("lr_format", "rank"), [("quantized", 3), ("float16", 3), (None, 0)])
def test_codes_product_is_the_frozen_product(lr_format, rank):
    pytest.importorskip("caldera.kernels.cpu")
    layer = _layer(lr_format=lr_format, rank=rank)
    h = torch.randn(2, D, generator=torch.Generator().manual_seed(61))
    _close(dispatch.codes_product(layer, h, "numba"), h @ _frozen_weight(layer).T)


@pytest.mark.skipif(not native.available(), reason="the C extension is not built")
@pytest.mark.parametrize(("lr_format", "rank", "ft_rank"), [("quantized", 3, 1), ("float16", 3, 0)])
def test_fused_call_is_the_whole_layer(lr_format, rank, ft_rank):
    layer = _layer(lr_format=lr_format, rank=rank, ft_rank=ft_rank)
    W = _frozen_weight(layer) + (layer.L_ft @ layer.R_ft if ft_rank else 0)
    x = torch.randn(3, D, generator=torch.Generator().manual_seed(62))
    _close(dispatch.fused_call(layer)(x), x @ W.T + layer._buffers["bias"])
