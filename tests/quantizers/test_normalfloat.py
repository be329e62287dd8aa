"""caldera.quantizers.normalfloat: NormalFloat levels, nearest-level codes and per-block absmax scales."""

from __future__ import annotations

from statistics import NormalDist

import pytest
import torch

from caldera.quantizers.normalfloat import NormalFloat, nf_levels

BITS = [1, 2, 3, 4, 8]


def _levels_by_hand(bits: int) -> list[float]:
    """The N(0, 1) quantiles at probabilities (i + ½) / 2^B, divided by the largest one."""
    n = 2**bits
    q = [NormalDist().inv_cdf((i + 0.5) / n) for i in range(n)]
    return [v / q[-1] for v in q]


@pytest.mark.parametrize("bits", BITS)
def test_levels_are_the_scaled_normal_quantiles(bits: int) -> None:
    lv = nf_levels(bits)
    assert lv.dtype == torch.float32 and lv.shape == (2**bits,)
    assert torch.allclose(lv.double(), torch.tensor(_levels_by_hand(bits), dtype=torch.float64), atol=1e-6)
    assert (lv[1:] > lv[:-1]).all()  # strictly increasing: code order is level order
    assert torch.equal(lv, -lv.flip(0))  # symmetric, without an exact zero level
    assert float(lv[0]) == -1.0 and float(lv[-1]) == 1.0 and not (lv == 0).any()


@pytest.mark.parametrize("bits", BITS)
def test_quantize_is_round_to_nearest_level(bits: int) -> None:
    q = NormalFloat(bits)
    assert (q.name, q.num_codes, q.bits_per_weight) == (f"nf-{bits}", 2**bits, float(bits))
    x = torch.rand(3, 67, generator=torch.Generator().manual_seed(bits)) * 2.4 - 1.2  # beyond ±1 too
    c = q.quantize(x)
    assert c.shape == x.shape and c.dtype == torch.uint8 and int(c.max()) < 2**bits
    lv = _levels_by_hand(bits)
    for xi, ci in zip(x.flatten().tolist(), c.flatten().tolist()):
        best = min(abs(xi - v) for v in lv)
        assert abs(xi - lv[ci]) <= best + 1e-6, (xi, ci)
    assert torch.equal(q.dequantize(c), nf_levels(bits)[c.long()])


@pytest.mark.parametrize("bits", BITS)
def test_levels_quantize_to_their_own_codes(bits: int) -> None:
    q = NormalFloat(bits)
    codes = torch.arange(2**bits)
    assert torch.equal(q.quantize(nf_levels(bits)).long(), codes)
    assert torch.equal(q.dequantize(q.quantize(q.dequantize(codes))), q.dequantize(codes))


@pytest.mark.parametrize("bits, block", [(2, 4), (4, 8), (3, 1)])
def test_scales_are_each_blocks_absmax_along_the_last_dimension(bits: int, block: int) -> None:
    q = NormalFloat(bits, block)
    g = torch.Generator().manual_seed(block)
    x = torch.randn(2, 3, 4 * block, generator=g) * torch.arange(1, 4 * block + 1).float()
    x[1, 2, :block] = 0.0  # an all-zero block: a positive scale, codes of the levels nearest 0
    sc = q.quantize_with_scale(x)
    assert sc.codes.shape == x.shape and sc.scale.shape == (2, 3, 4)
    assert q.scale_shapes(6, 4 * block) == ((6, 4),)
    lv = nf_levels(bits)
    for i in range(2):
        for j in range(3):
            for b in range(4):
                seg = x[i, j, b * block:(b + 1) * block]
                s = float(sc.scale[i, j, b])
                assert s == pytest.approx(max(float(seg.abs().max()), 1e-12), rel=1e-6)
                rec = lv[sc.codes[i, j, b * block:(b + 1) * block].long()] * s
                assert torch.allclose(q.dequantize_with_scale(sc)[i, j, b * block:(b + 1) * block], rec)
                # each weight within half the widest level gap of its block's scaled levels
                assert ((rec - seg).abs() <= s * float((lv[1:] - lv[:-1]).max()) / 2 + 1e-6).all()
    assert torch.equal(q.decode(sc.codes, sc.scale), q.dequantize_with_scale(sc))


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_scaled_grid_points_round_trip_exactly(bits: int) -> None:
    """Weights already on a block's scaled levels (its absmax on ±1) keep their codes and values."""
    q, block = NormalFloat(bits, block=8), 8
    g = torch.Generator().manual_seed(bits)
    codes = torch.randint(0, 2**bits, (5, 4 * block), generator=g)
    codes[:, ::block] = 2**bits - 1  # the largest level in every block: its absmax is its scale
    scale = torch.rand(5, 4, generator=g) + 0.5
    x = nf_levels(bits)[codes] * scale.repeat_interleave(block, dim=-1)
    sc = q.quantize_with_scale(x)
    assert torch.equal(sc.codes.long(), codes) and torch.allclose(sc.scale, scale)
    assert torch.allclose(q.dequantize_with_scale(sc), x, atol=1e-6)


def test_bad_arguments_are_refused() -> None:
    for bits, block in ((0, 64), (9, 64), (4, 0)):
        with pytest.raises(ValueError, match="accepted: bits 1..8, block >= 1"):
            NormalFloat(bits, block)
    with pytest.raises(ValueError, match="not a multiple of the NF block 64"):
        NormalFloat(4).quantize_with_scale(torch.zeros(2, 96))
    with pytest.raises(ValueError, match="integer tensor"):
        NormalFloat(4).dequantize(torch.zeros(3))
