"""CompressedLinear on the compressed-matmul kernels against its dequantizing reference path (random codes, odd
shapes, batches)."""

from __future__ import annotations

import pytest
import torch

from caldera.nn.compressed_linear import KERNEL_MAX_ROWS, CompressedLinear
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes

pytest.importorskip("caldera.kernels.cpu")
from caldera.kernels import native  # noqa: E402


def _layer(n, d, rank, lr_format, rht, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    meta = {
        "version": 1, "method": "caldera", "in_features": d, "out_features": n, "q_quantizer": "e8p",
        "q_codes_dtype": "int32", "rht": rht, "rank": rank, "ft_rank": 0, "lr_format": lr_format if rank else None,
        "l_quantizer": None, "r_quantizer": None, "lr_codes_dtype": None, "signs_trainable": False, "bias": bias,
        "ft_dtype": None,
    }  # fmt: skip
    ts = {"Q_codes": _codes(n, d // 8, "e8p", seed), "Q_scale": torch.rand(n, 1, generator=g) / 4}
    if rht:
        ts["S_U"] = (torch.randint(0, 2, (d,), generator=g) * 2 - 1).to(torch.int8)
        ts["S_V"] = (torch.randint(0, 2, (n,), generator=g) * 2 - 1).to(torch.int8)
    if rank and lr_format == "quantized":
        meta.update(l_quantizer="e8p-rvq4", r_quantizer="e8p-rvq4", lr_codes_dtype="int64")
        ts.update(L_codes=_codes(rank, n // 8, "e8p-rvq4", seed + 1), L_scale=torch.tensor(0.05),
                  R_codes=_codes(rank, d // 8, "e8p-rvq4", seed + 2), R_scale=torch.tensor(0.07))  # fmt: skip
    elif rank:
        dt = torch.float16 if lr_format == "float16" else torch.float32
        ts.update(L_16=torch.randn(n, rank, generator=g).to(dt), R_16=torch.randn(rank, d, generator=g).to(dt))
    if bias:
        ts["bias"] = torch.randn(n, generator=g)
    return meta, ts


#: CPU backends of CompressedLinear: the fused single-call C layer (where it built) and the Numba products
BACKENDS = [
    pytest.param("native", marks=pytest.mark.skipif(not native.available(), reason="C kernel did not build")),
    "numba",
]


def _force_backend(monkeypatch, backend):
    from caldera.kernels import fused

    if backend == "numba":  # as on a machine without a C compiler
        monkeypatch.setattr(fused, "native_available", lambda: False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("n", "d", "rank", "lr_format", "rht"),
    [
        (32, 64, 4, "quantized", True),
        (32, 64, 3, "float16", True),
        (24, 40, 2, "quantized", True),  # Hadamard factors K > 1 on both sides (12·2, 20·2)
        (24, 40, 2, "quantized", False),
        (48, 96, 5, "float32", True),
        (16, 8, 0, None, False),
    ],
)
def test_compressed_linear_kernel_equals_reference_path(monkeypatch, backend, n, d, rank, lr_format, rht):
    _force_backend(monkeypatch, backend)
    meta, ts = _layer(n, d, rank, lr_format, rht, bias=True)
    fast = CompressedLinear.from_tensors(meta, ts, kernel="kernel")
    ref = CompressedLinear.from_tensors(meta, ts, kernel="reference")
    x = torch.randn(2, 3, d, generator=torch.Generator().manual_seed(9))
    assert fast.kernel_backend(x) == backend and ref.kernel_backend(x) is None
    y = fast(x)
    _close(y, ref(x))
    assert fast._Q_cache is None and fast._L_cache is None  # nothing dense was cached
    assert ref._Q_cache is not None
    _close(fast(x[0, :1]), ref(x[0, :1]))  # batch 1 (the decoding case)


def _ft_layer(n=32, d=64, rank=4, ft_rank=2, seed=0):
    meta, ts = _layer(n, d, rank, "quantized", rht=True, bias=True, seed=seed)
    g = torch.Generator().manual_seed(11 + seed)
    meta.update(ft_rank=ft_rank, ft_dtype="bfloat16")
    ts["L_ft"] = torch.randn(n, ft_rank, generator=g).bfloat16()
    ts["R_ft"] = torch.randn(ft_rank, d, generator=g).bfloat16()
    ts.update(L_codes=ts["L_codes"][ft_rank:], R_codes=ts["R_codes"][ft_rank:])
    return meta, ts


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_path_follows_trained_and_reloaded_tensors(monkeypatch, backend):
    """The fused layer prepares its C call once (with float copies of the signs and of L_ft/R_ft); it must see
    an in-place training update of L_ft, a load_state_dict of other signs, and an update of trainable signs
    (a stale prepared call would keep the old values)."""
    _force_backend(monkeypatch, backend)
    meta, ts = _ft_layer()
    fast = CompressedLinear.from_tensors(meta, {k: v.clone() for k, v in ts.items()}, kernel="kernel")
    ref = CompressedLinear.from_tensors(meta, {k: v.clone() for k, v in ts.items()}, kernel="reference")
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert fast.kernel_backend(x) == backend
        _close(fast(x), ref(x))
        for m in (fast, ref):  # an optimizer step: in place, under no_grad
            m.L_ft.mul_(-3)
        _close(fast(x), ref(x))
        other = CompressedLinear.from_tensors(*_ft_layer(seed=1))  # other int8 signs, codes, scales
        for m in (fast, ref):
            m.load_state_dict(other.state_dict())
        _close(fast(x), other(x))
        for m in (fast, ref):
            m.make_signs_trainable()
            m.S_U.mul_(0.5)
        assert fast.kernel_backend(x) == backend
        _close(fast(x), ref(x))
        # a layer without trainable tensors: only the reload itself can tell the prepared call to refresh
        plain = CompressedLinear.from_tensors(*_layer(32, 64, 4, "quantized", True, bias=True), kernel="kernel")
        plain(x)
        other = CompressedLinear.from_tensors(*_layer(32, 64, 4, "quantized", True, bias=True, seed=1))
        plain.load_state_dict(other.state_dict())
        _close(plain(x), other(x))


def test_compressed_linear_uses_reference_path_when_training_or_for_many_rows(monkeypatch):
    meta, ts = _layer(32, 64, 4, "quantized", True, bias=False)
    mod = CompressedLinear.from_tensors(meta, ts, kernel="kernel")
    x = torch.randn(2, 64, requires_grad=True)
    cpu_backend = "native" if native.available() else "numba"
    assert mod.kernel_backend(x) is None  # gradients need the differentiable path
    with torch.no_grad():
        assert mod.kernel_backend(x) == cpu_backend
        assert mod.kernel_backend(torch.randn(KERNEL_MAX_ROWS + 1, 64)) is None  # many tokens: dequantize + GEMM
        # auto on CPU: the fused C layer (measured faster than dense end to end, caldera/kernels/README.md); without a
        # C compiler the reference path (measured faster than the Numba products)
        assert CompressedLinear.from_tensors(meta, ts).kernel_backend(x) == ("native" if native.available() else None)
        _force_backend(monkeypatch, "numba")
        assert CompressedLinear.from_tensors(meta, ts).kernel_backend(x) is None
    with pytest.raises(ValueError, match="kernel="):
        CompressedLinear.from_tensors(meta, ts, kernel="fast")
