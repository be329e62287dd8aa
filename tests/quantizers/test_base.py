"""The quantizer interface (caldera.quantizers.base): rms, the one-scale-per-matrix convention, shape checks."""

from __future__ import annotations

import pytest
import torch

from caldera.quantizers import E8P, UniformRTN, get_quantizer
from caldera.quantizers.base import ScaledCodes, dequantize_scaled, quantize_scaled, rms


def test_rms_is_the_root_mean_square_and_one_for_zero():
    x = torch.tensor([[3.0, -4.0], [0.0, 0.0]], dtype=torch.float64)
    r = rms(x)
    assert r.dtype == torch.float32 and float(r) == pytest.approx((25 / 4) ** 0.5)
    assert float(rms(torch.zeros(3, 8))) == 1.0  # no 0/0 in x / rms(x)


@pytest.mark.parametrize("name", ["e8p", "e8p-rvq4", "uniform-3"])
def test_quantize_scaled_uses_rms_over_opt_scale_and_dequantize_scaled_inverts_it(name):
    """``x / scale`` reaches the codebook at the RMS it was tuned for (scale = rms(x) / opt_scale), and the
    dequantized matrix is ``scale · dequantize(codes)``; the round trip of a matrix of codewords is exact."""
    q = get_quantizer(name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, generator=g) * 0.02
    sc = quantize_scaled(q, x)
    assert isinstance(sc, ScaledCodes) and sc.codes.shape == (16, 64 // q.block_size)
    assert float(sc.scale) == pytest.approx(float(rms(x)) / q.opt_scale, rel=1e-6)
    x_hat = dequantize_scaled(q, sc)
    assert torch.equal(x_hat, q.dequantize(sc.codes) * sc.scale)
    assert float((x_hat - x).pow(2).mean()) < float(x.pow(2).mean())  # closer than 0
    if not name.startswith("e8p-rvq"):  # nearest-point codebooks (a greedy residual search need not be idempotent)
        # codewords at that scale are reproduced exactly
        again = dequantize_scaled(q, ScaledCodes(q.quantize(x_hat / sc.scale), sc.scale))
        assert torch.allclose(again, x_hat, rtol=0, atol=1e-7 * float(x_hat.abs().max()))


def test_round_is_dequantize_of_quantize():
    q = E8P()
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    assert torch.equal(q.round(x), q.dequantize(q.quantize(x)))


def test_check_shape_names_the_argument_and_the_block():
    q = E8P()
    q.check_shape(torch.zeros(2, 16))
    with pytest.raises(ValueError, match=r"W: last dimension \(12,\) must be a multiple of the e8p block size 8"):
        q.check_shape(torch.zeros(2, 12), "W")
    with pytest.raises(ValueError, match="block size 8"):
        q.check_shape(torch.zeros(()))
    UniformRTN(4).check_shape(torch.zeros(3, 5))  # block size 1: any length


def test_the_fused_ldlq_capability_is_part_of_the_interface():
    """A quantizer without a fused BlockLDLQ chunk says so (the base class), and BlockLDLQ then takes the block
    loop; E8P has one on the CPU with the Numba backend only."""
    from caldera.algorithm.ldl import block_ldl
    from caldera.algorithm.ldlq import block_ldlq
    from tests.helpers import IntegerGrid, llm_like

    q = IntegerGrid()
    x = torch.zeros(4, 16)
    assert q.fused_ldlq_available(x) is False
    with pytest.raises(NotImplementedError, match="IntegerGrid has no fused BlockLDLQ chunk"):
        q.fused_ldlq_chunk(None, torch.eye(8), x, x, x, torch.zeros(4, 16, dtype=torch.int32))
    W, H = llm_like(8, 16, seed=0)
    L, _ = block_ldl(H.float(), 8)
    fused, loop = block_ldlq(W * 4, L, q, fused=True), block_ldlq(W * 4, L, q, fused=False)
    assert all(torch.equal(a, b) for a, b in zip(fused, loop))
    e8p = E8P()
    assert e8p.fused_ldlq_available(torch.zeros(4, 16, device="meta")) is False  # not a CPU tensor
    assert e8p.fused_ldlq_available(torch.zeros(4, 16)) is (e8p.backend == "numba")
