"""Scalar quantizers: uniform RTN, the paper's dithered quantizer Q_{R,B}, and the 16-bit pass-through."""

from __future__ import annotations

import math

import pytest
import torch

from caldera.quantizers import DitheredUniform, Identity16, UniformRTN, dequantize_scaled, quantize_scaled
from caldera.quantizers.scalar import gaussian_opt_scale

# ---------------------------------------------------------------- UniformRTN


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_uniform_rtn_is_nearest_level(bits: int) -> None:
    q = UniformRTN(bits)
    assert (q.name, q.block_size, q.bits_per_weight) == (f"uniform-{bits}", 1, float(bits))
    levels = torch.arange(2**bits, dtype=torch.float32) - (2**bits - 1) / 2
    x = torch.randn(4000, generator=torch.Generator().manual_seed(bits)) * 2**bits / 3
    c = q.quantize(x)
    assert c.dtype == torch.uint8 and int(c.max()) < 2**bits
    d = (q.dequantize(c) - x).abs()
    bf = (x[:, None] - levels[None]).abs().min(1).values
    assert torch.allclose(d, bf, atol=1e-6)
    assert torch.equal(q.quantize(levels), torch.arange(2**bits).to(torch.uint8))


def test_uniform_rtn_absmax_scale_per_tensor_and_per_row() -> None:
    g = torch.Generator().manual_seed(0)
    W = torch.randn(6, 50, generator=g) * torch.arange(1, 7).float()[:, None]
    W[3] = 0.0
    for per_row in (False, True):
        q = UniformRTN(4, per_row=per_row)
        sc = q.quantize_with_scale(W)
        assert sc.scale.shape == ((6, 1) if per_row else ())
        Wh = q.dequantize_with_scale(sc)
        assert Wh.shape == W.shape and Wh.dtype == torch.float32
        assert ((Wh - W).abs() <= sc.scale / 2 + 1e-6).all()  # half a step
        # the absmax entries are reproduced exactly (they sit on the outermost levels)
        am = W.abs().amax(1, keepdim=True) if per_row else W.abs().amax()
        hit = W.abs() == am
        assert torch.allclose(Wh[hit].abs(), W[hit].abs(), rtol=1e-6)
        if per_row:
            assert (Wh[3] == 0).all()  # an all-zero row gets scale 0 (2**B levels have no 0 level)
    q8 = UniformRTN(8, per_row=True)
    err8 = (q8.dequantize_with_scale(q8.quantize_with_scale(W)) - W).abs().max()
    err4 = (UniformRTN(4, True).dequantize_with_scale(UniformRTN(4, True).quantize_with_scale(W)) - W).abs().max()
    assert err8 < err4


def test_uniform_opt_scale_is_gaussian_optimal() -> None:
    assert abs(gaussian_opt_scale(4) - 2.97) < 0.03  # QuIP# HI4B1C opt_scale 2.97 (quip-sharp.md)
    assert abs(gaussian_opt_scale(1) - 1 / 1.596) < 0.002  # Max (1960): optimal 1-bit step 1.596
    assert abs(gaussian_opt_scale(2) - 1 / 0.9957) < 0.002  # Max (1960): optimal 2-bit step 0.9957
    W = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
    q = UniformRTN(3)
    base = float(((dequantize_scaled(q, quantize_scaled(q, W)) - W) ** 2).mean())
    for f in (0.85, 1.15):
        s = float(W.pow(2).mean().sqrt()) / (q.opt_scale * f)
        off = float(((q.dequantize(q.quantize(W / s)) * s - W) ** 2).mean())
        assert base < off


@pytest.mark.parametrize("bits", [0, 17, 2.5, True, "4", None])
def test_uniform_rejects_bad_bits(bits) -> None:
    with pytest.raises(ValueError, match="bits"):
        UniformRTN(bits)


def test_uniform_input_validation() -> None:
    q = UniformRTN(4)
    with pytest.raises(ValueError, match="x"):
        q.quantize(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="x"):
        q.quantize_with_scale(torch.tensor([[float("inf")]]))
    with pytest.raises(ValueError, match="codes"):
        q.dequantize(torch.tensor([16]))
    with pytest.raises(ValueError, match="per_row"):
        UniformRTN(4, per_row=1)  # type: ignore[arg-type]
    assert UniformRTN(12).quantize(torch.zeros(3)).dtype == torch.int32


# ---------------------------------------------------------------- DitheredUniform (paper appendix)


def test_dithered_grid_and_attributes() -> None:
    q = DitheredUniform(2.0, 3)
    assert q.levels == 8 and math.isclose(q.delta, 4.0 / 7)
    pts = q.dequantize(torch.arange(8))
    assert torch.allclose(pts, torch.linspace(-2, 2, 8))
    assert q.bits_per_weight == 3.0 and q.block_size == 1


def test_dithered_unbiased_and_variance_bound() -> None:
    """E[Q(x)] = x and E(Q(x) − x)² ≤ Δ²/4 for |x| ≤ R (paper, lemma on the dithered quantizer).

    For each of 41 fixed x, n = 20000 seeded draws: the sample mean error is a z-test against 0 with the
    worst-case standard deviation Δ/2; |z| < 4.5 has a false-alarm probability ≤ 41·6.8e-6 ≈ 3e-4 per run
    (and the seed is fixed, so the run is deterministic).
    """
    R, B, n = 1.5, 3, 20000
    q = DitheredUniform(R, B)
    x = torch.linspace(-R, R, 41, dtype=torch.float64)
    xs = x[:, None].expand(-1, n).contiguous()
    gen = torch.Generator().manual_seed(1234)
    err = q.round(xs, generator=gen).double() - xs
    mean = err.mean(1)
    z = mean / (q.delta / 2 / math.sqrt(n))
    assert z.abs().max() < 4.5, z
    msq = (err**2).mean(1)
    assert (msq <= q.delta**2 / 4 * (1 + 4.5 * math.sqrt(2 / n))).all()
    # the exact variance is Δ² r (1 − r) with r the fractional position in the cell
    u = (x + R) / q.delta
    r = u - u.floor()
    assert torch.allclose(msq, q.delta**2 * r * (1 - r), atol=0.02 * q.delta**2)
    # each output is one of the two neighbouring grid points
    assert (err.abs() <= q.delta + 1e-6).all()


def test_dithered_saturates_outside_range() -> None:
    q = DitheredUniform(1.0, 4)
    gen = torch.Generator().manual_seed(0)
    x = torch.tensor([1.0, 1.0001, 3.0, 1e6, -1.0, -2.0, -1e6])
    c = q.quantize(x, generator=gen)
    assert c.dtype == torch.int32
    assert c.tolist() == [15, 15, 15, 15, 0, 0, 0]
    assert q.dequantize(c).tolist() == [1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0]


def test_dithered_determinism() -> None:
    q = DitheredUniform(2.0, 2)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    a = q.quantize(x, generator=torch.Generator().manual_seed(7))
    b = q.quantize(x, generator=torch.Generator().manual_seed(7))
    c = q.quantize(x, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_dithered_requires_generator_and_valid_args() -> None:
    q = DitheredUniform(1.0, 2)
    with pytest.raises(ValueError, match="generator"):
        q.quantize(torch.zeros(3))
    with pytest.raises(ValueError, match="generator"):
        q.round(torch.zeros(3))
    with pytest.raises(ValueError, match="generator"):
        q.quantize(torch.zeros(3), generator=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="x"):
        q.quantize(torch.tensor([float("nan")]), generator=torch.Generator())
    for R in (0.0, -1.0, float("inf"), float("nan"), "1"):
        with pytest.raises(ValueError, match="R"):
            DitheredUniform(R, 2)  # type: ignore[arg-type]
    for bits in (0, 17, 1.5):
        with pytest.raises(ValueError, match="bits"):
            DitheredUniform(1.0, bits)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="codes"):
        q.dequantize(torch.tensor([4]))


# ---------------------------------------------------------------- Identity16


def test_identity16() -> None:
    q = Identity16()
    assert (q.name, q.bits_per_weight, q.block_size) == ("identity", 16.0, 1)
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    c = q.quantize(x)
    assert c.dtype == torch.float16 and c.shape == x.shape
    assert torch.equal(q.dequantize(c), x.half().float())
    assert torch.equal(q.round(x), x.half().float())
    with pytest.raises(ValueError, match="float16"):
        q.quantize(torch.tensor([1e6]))
    with pytest.raises(ValueError, match="x"):
        q.quantize(torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match="codes"):
        q.dequantize(torch.zeros(3))


@pytest.mark.parametrize("name, n", [("e8p", 1 << 16), ("e8p-rvq4", 1 << 32), ("e8p-rvq3", 1 << 24),
                                     ("uniform-3", 8), ("nf-4", 16), ("identity", None)])
def test_num_codes_is_the_code_range_dequantize_accepts(name, n) -> None:
    """``num_codes`` (what a checkpoint load checks stored codes against) is exactly the range ``dequantize``
    accepts; a NormalFloat code outside it is refused (a negative index would read a level from the end)."""
    from caldera.quantizers import get_quantizer

    q = get_quantizer(name)
    assert q.num_codes == n
    if n is None:
        return
    q.dequantize(torch.full((1, 1), n - 1, dtype=torch.int64))
    for bad in (-1, n):
        with pytest.raises(ValueError, match=r"code values must lie in \[0, %d\]" % (n - 1)):
            q.dequantize(torch.full((1, 1), bad, dtype=torch.int64))
