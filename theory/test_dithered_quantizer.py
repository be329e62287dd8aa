"""App. F.2 (``lem:uniformly-dithered-scalar-quantizer-mean-variance``): *"For scalar x with |x| ≤ R […] E[ε] = 0
and Var(ε) ≤ R²/(2^B − 1)²"*; saturated inputs (|x| > R) break unbiasedness. Statistical tests at α = 1e-6."""

from __future__ import annotations

import torch
from hypothesis import given

from caldera.quantizers import DitheredUniform
from theory import lemma_dithered_quantizer as dq
from theory.common import gen
from theory.dithered import reference_dithered_codes, step
from theory.strategies import quantizer_params, seeds


@given(quantizer_params, seeds)
def test_outputs_are_grid_neighbours(params, seed):
    R, bits = params
    assert dq.check_support(R, bits, seed=seed, trials=50).holds


@given(quantizer_params, seeds)
def test_unbiased_inside_range(params, seed):
    R, bits = params
    r = dq.check_unbiased(R, bits, seed=seed, trials=1000)
    assert r.holds, r.counterexample


@given(quantizer_params, seeds)
def test_variance_bound_inside_range(params, seed):
    R, bits = params
    r = dq.check_variance(R, bits, seed=seed, trials=1000)
    assert r.holds, r.counterexample


def test_variance_bound_is_tight_at_midpoints():
    R, bits = 1.5, 2
    d = step(R, bits)
    err = dq.sample_errors(torch.tensor([-R + d / 2]), R, bits, 500, seed=1)
    assert torch.allclose(err.abs(), torch.full_like(err, d / 2), atol=1e-6)


@given(quantizer_params, seeds)
def test_reference_algorithm_equals_library(params, seed):
    """The float64 reference used above 8 bits draws exactly like the library's DitheredUniform."""
    R, bits = params
    x = (torch.rand(300, generator=gen(seed), dtype=torch.float64) * 2.4 - 1.2) * R
    lib = DitheredUniform(R, bits).quantize(x, generator=gen(seed + 1))
    ref = reference_dithered_codes(x, R, bits, gen(seed + 1))
    assert torch.equal(lib.long(), ref)


def test_saturation_breaks_unbiasedness():
    r = dq.check_saturation_bias(1.0, 3, seed=3)
    assert r.holds and r.ratio < 1


# ---------------------------------------------------------------------------------------- sensitivity


class _Nearest:
    """Deterministic nearest rounding on the same grid: biased (a deliberately wrong 'dithered' quantizer)."""

    def __init__(self, R, bits):
        self.R, self.d, self.M = R, step(R, bits), 2**bits

    def quantize(self, x):
        return torch.round((x.double().clamp(-self.R, self.R) + self.R) / self.d).long()

    def dequantize(self, c):
        return (-self.R + c.double() * self.d).float()


def test_detects_a_biased_quantizer():
    r = dq.check_unbiased(1.0, 3, seed=5, trials=2000, quantizer=_Nearest(1.0, 3))
    assert not r.holds and r.ratio > 1


def test_detects_a_tightened_variance_bound():
    r = dq.check_variance(1.0, 3, seed=6, trials=2000, bound_factor=0.5)
    assert not r.holds


class _Coarse(_Nearest):
    """Rounds on a grid 4× coarser: outputs are not the two neighbours of x."""

    def __init__(self, R, bits):
        super().__init__(R, bits)
        self.d *= 4

    def dequantize(self, c):
        return (-self.R + c.double() * self.d).float()


def test_detects_outputs_off_the_two_neighbours():
    assert not dq.check_support(1.0, 4, seed=7, trials=50, quantizer=_Coarse(1.0, 4)).holds


def test_saturation_check_does_not_fire_inside_the_range():
    r = dq.check_saturation_bias(1.0, 3, seed=8, offsets=(-0.5, -0.2))  # x = ±0.5R, ±0.8R: unbiased
    assert not r.holds
