"""Compressed-matmul kernels against their dequantizing references (random codes, odd shapes, batches)."""

from __future__ import annotations

import pytest
import torch

from caldera.kernels.e8p_decode import (
    abs_nibbles,
    codes_matmul_reference,
    decode_tables,
    dequantize_codes,
    nibble_decode,
    sign_nibble_mask,
)
from caldera.nn.compressed_linear import KERNEL_MAX_ROWS, CompressedLinear
from caldera.quantizers.e8p import _tables
from tests.helpers import at_thread_counts
from tests.helpers import kernel_close as _close
from tests.helpers import random_codes as _codes

cpu = pytest.importorskip("caldera.kernels.cpu")
from caldera.kernels import native  # noqa: E402

#: CPU implementations: the int8-LUT C kernel (where a C compiler built it) and the Numba kernels
IMPLS = [
    pytest.param("native", marks=pytest.mark.skipif(not native.available(), reason="C kernel did not build")),
    "numba",
]


def test_decode_tables_reproduce_every_codeword():
    t = decode_tables()
    c = torch.arange(1 << 16)
    assert torch.equal(t.A[c >> 8] * t.G[c & 255] + t.h[c & 255][:, None], _tables().codebook)
    assert torch.equal(t.codebook_f16.float(), _tables().codebook)  # fp16 holds the codebook exactly
    assert torch.equal(torch.from_numpy(native.lut_table()).float() / 4, _tables().codebook)  # int8 LUT: exact
    assert torch.equal(nibble_decode(c), _tables().codebook)  # the Triton decode's packed nibbles + sign XOR


def test_nibble_tables_are_packed_as_the_triton_kernel_reads_them():
    u = (abs_nibbles()[:, None].long() >> (4 * torch.arange(8))) & 15
    assert torch.equal(u.float(), decode_tables().A + 3.5)  # 1 KiB: 256 int32, nibble t = A[k, t] + 3.5 ≤ 7
    low = torch.arange(256)
    want = ((1 - decode_tables().G) / 2).long() * 7  # 7 in each flipped coordinate
    got = (sign_nibble_mask(low)[:, None] >> (4 * torch.arange(8))) & 15
    assert torch.equal(got, want)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("quantizer", "dtype"), [("e8p", torch.int32), ("e8p-rvq4", torch.int64)])
def test_codes_matmul_reads_wider_code_dtypes(impl, quantizer, dtype):
    n, m = 9, 7  # odd m: the C kernel's two-code unrolled loop leaves a tail
    codes = _codes(n, m, quantizer, seed=11).to(torch.int64).to(dtype)
    x = torch.randn(2, 8 * m, generator=torch.Generator().manual_seed(12))
    ref = codes_matmul_reference(x, codes.long(), 0.6, quantizer)
    _close(cpu.codes_matmul(x, codes, 0.6, quantizer, impl=impl), ref)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("quantizer", ["e8p", "e8p-rvq4"])
@pytest.mark.parametrize("B", [1, 3, 6])  # 6: the batched path (4 x rows per decoded code) and its tail
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize(("n", "m"), [(13, 5), (1, 1)])
def test_codes_matmul_matches_reference(impl, quantizer, B, per_row, n, m):
    codes = _codes(n, m, quantizer, seed=B)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(B, 8 * m, generator=g)
    s = torch.rand(n, 1, generator=g) + 0.5 if per_row else torch.tensor(0.37)
    y = cpu.codes_matmul(x, codes, s, quantizer, impl=impl)
    _close(y, codes_matmul_reference(x, codes.to(torch.int64), s, quantizer))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("quantizer", ["e8p", "e8p-rvq4"])
def test_codes_matmul_t_matches_reference_and_accumulates(impl, quantizer):
    k, m, B = 3, 7, 2
    codes = _codes(k, m, quantizer, seed=1)
    t = torch.randn(B, k, generator=torch.Generator().manual_seed(2))
    ref = 0.8 * t @ dequantize_codes(codes.to(torch.int64), quantizer)
    _close(cpu.codes_matmul_t(t, codes, 0.8, quantizer, impl=impl), ref)
    out = torch.ones(B, 8 * m)
    assert cpu.codes_matmul_t(t, codes, 0.8, quantizer, out=out, impl=impl) is out
    _close(out, ref + 1)


@pytest.mark.parametrize("impl", IMPLS)
def test_threaded_split_equals_single_thread(impl):
    codes = _codes(300, 512, "e8p", seed=3)  # large enough to be split over threads
    x = torch.randn(2, 4096, generator=torch.Generator().manual_seed(4))
    one, two = at_thread_counts(lambda: cpu.codes_matmul(x, codes, 0.5, impl=impl))
    assert torch.equal(one, two)  # rows are independent: the split cannot change a bit
    _close(one, codes_matmul_reference(x, codes.to(torch.int64), 0.5))


def test_bad_inputs_are_named():
    codes = _codes(4, 2, "e8p", seed=0)
    with pytest.raises(ValueError, match="x: expected shape"):
        cpu.codes_matmul(torch.randn(1, 15), codes, 1.0)
    with pytest.raises(ValueError, match="no compressed-matmul kernel"):
        cpu.codes_matmul(torch.randn(1, 16), codes, 1.0, "e8p-rvq3")
    with pytest.raises(ValueError, match="scale"):
        cpu.codes_matmul(torch.randn(1, 16), codes, torch.ones(3, 1))
    with pytest.raises(ValueError, match="impl="):
        cpu.codes_matmul(torch.randn(1, 16), codes, 1.0, impl="fast")


# ------------------------------------------------------------------------------------------ CompressedLinear


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
        # auto on CPU: the fused C layer (measured faster than dense end to end, kernels/README.md); without a
        # C compiler the reference path (measured faster than the Numba products)
        assert CompressedLinear.from_tensors(meta, ts).kernel_backend(x) == ("native" if native.available() else None)
        _force_backend(monkeypatch, "numba")
        assert CompressedLinear.from_tensors(meta, ts).kernel_backend(x) is None
    with pytest.raises(ValueError, match="kernel="):
        CompressedLinear.from_tensors(meta, ts, kernel="fast")


def test_select_backend(monkeypatch):
    from caldera.kernels import fused

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
