"""Tests of caldera.kernels.cpu: the Numba and native code products against their dequantizing references
(random codes, odd shapes, batches, thread splits, bad inputs)."""

from __future__ import annotations

import pytest
import torch

from caldera.kernels.e8p_decode import codes_matmul_reference, dequantize_codes
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
