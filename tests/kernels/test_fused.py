"""Tests of caldera.kernels.fused: the choice of backend, and the layer product ``h Qᵀ + (h Rᵀ) Lᵀ`` from codes
on the Numba backend against the dequantized reference."""

from __future__ import annotations

import pytest
import torch

from caldera.kernels import fused, native
from caldera.kernels.e8p_decode import dequantize_codes
from caldera.kernels.factors import Factors
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes


def test_select_backend(monkeypatch):
    cuda, cpu_dev = torch.device("cuda"), torch.device("cpu")
    cpu_backend = "native" if native.available() else "numba"
    assert fused.select_backend(cpu_dev, "e8p", None) == cpu_backend
    assert fused.select_backend(cpu_dev, "e8p", "e8p-rvq4") == cpu_backend
    monkeypatch.setattr(fused, "native_available", lambda: False)
    assert fused.select_backend(cpu_dev, "e8p", None) == "numba"
    assert fused.select_backend(cpu_dev, "rtn4", None) is None  # no kernel reads other backbones
    assert fused.select_backend(cpu_dev, "e8p", "e8p-rvq3") is None
    monkeypatch.setattr(fused, "triton_available", lambda: True)
    assert fused.select_backend(cuda, "e8p", None) == "triton"
    assert fused.select_backend(cuda, "e8p", "e8p-rvq4") == "triton"
    assert fused.select_backend(cuda, "e8p", "e8p-rvq3") is None


def _factors(kind, n, d, k, g):
    if kind is None:
        return None, torch.zeros(n, d)
    if kind == "quantized":
        Lc, Rc = _codes(k, n // 8, "e8p-rvq4", seed=21), _codes(k, d // 8, "e8p-rvq4", seed=22)
        Ls, Rs = torch.tensor(0.05), torch.tensor(0.07)
        f = Factors(L_codes=Lc, L_scale=Ls, R_codes=Rc, R_scale=Rs, quantizer="e8p-rvq4")
        L = 0.05 * dequantize_codes(Lc, "e8p-rvq4").T
        R = 0.07 * dequantize_codes(Rc, "e8p-rvq4")
        return f, L @ R
    L = torch.randn(n, k, generator=g).to(kind)
    R = torch.randn(k, d, generator=g).to(kind)
    return Factors(L=L, R=R), L.float() @ R.float()


@pytest.mark.parametrize("kind", [None, "quantized", torch.float16, torch.float32])
@pytest.mark.parametrize("per_row", [False, True])
def test_codes_linear_numba_equals_the_dequantized_product(kind, per_row):
    pytest.importorskip("caldera.kernels.cpu")
    n, d, k, B = 16, 24, 3, 2
    g = torch.Generator().manual_seed(20)
    Q_codes = _codes(n, d // 8, "e8p", seed=23)
    Q_scale = torch.rand(n, 1, generator=g) + 0.5 if per_row else torch.tensor(0.3)
    factors, LR = _factors(kind, n, d, k, g)
    h = torch.randn(B, d, generator=g)
    W = Q_scale * dequantize_codes(Q_codes, "e8p") + LR
    _close(fused.codes_linear(h, Q_codes, Q_scale, factors, "numba"), h @ W.T)


def test_codes_linear_refuses_other_backends():
    codes = _codes(8, 1, "e8p", seed=0)
    with pytest.raises(ValueError, match="backend='native'"):
        fused.codes_linear(torch.randn(1, 8), codes, torch.tensor(1.0), None, "native")


@pytest.mark.skipif(not native.available(), reason="the C extension is not built")
def test_fused_layer_is_the_native_prepared_call():
    n, d = 16, 24
    g = torch.Generator().manual_seed(30)
    codes = _codes(n, d // 8, "e8p", seed=31)
    x = torch.randn(2, d, generator=g)
    layer = fused.fused_layer(codes, torch.tensor(0.4), None, None, None, None, None)
    assert isinstance(layer, native.FusedLayer)
    _close(layer(x), 0.4 * x @ dequantize_codes(codes, "e8p").T)
