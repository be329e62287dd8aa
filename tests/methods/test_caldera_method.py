"""caldera.methods.caldera_method: the shape rule of the RHT + BlockLDLQ methods, and CALDERA's registry entry."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from caldera.algorithm.config import CalderaConfig
from caldera.algorithm.decomposition import caldera_decompose
from caldera.algorithm.ldlq import LDL_BLOCK
from caldera.methods import get_method
from caldera.methods.caldera_method import caldera, hadamard_ldlq_shape

NO_RHT = CalderaConfig(rht=False)


@pytest.mark.parametrize("n, d, quantized, ok", [
    (LDL_BLOCK, LDL_BLOCK, True, True),
    (3 * LDL_BLOCK, 5 * LDL_BLOCK, True, True),
    (LDL_BLOCK + 1, LDL_BLOCK, False, True),  # n only matters for quantized factors
    (LDL_BLOCK + 1, LDL_BLOCK, True, False),
    (LDL_BLOCK, LDL_BLOCK + 1, False, False),  # d always a multiple of the LDLQ block
    (LDL_BLOCK, 2 * LDL_BLOCK - 1, True, False),
])
def test_ldlq_block_rule_without_rht(n, d, quantized, ok):
    """Oracle: d % block == 0, and n % block == 0 as well when the factors are quantized."""
    assert ok == (d % LDL_BLOCK == 0 and (not quantized or n % LDL_BLOCK == 0))
    if ok:
        assert hadamard_ldlq_shape(NO_RHT, n, d, quantized_factors=quantized) is None
    else:
        with pytest.raises(ValueError, match=f"not a multiple of {LDL_BLOCK}"):
            hadamard_ldlq_shape(NO_RHT, n, d, quantized_factors=quantized)


@pytest.mark.parametrize("n, d, ok", [
    (64, 64, True),
    (48, 128, True),  # 48 = 12·4
    (80, 112, True),  # 20·4, 28·4
    (176, 64, False),  # 176 = 11·16: no Hadamard matrix of that size
    (64, 176, False),
])
def test_rht_needs_a_hadamard_size_on_both_sides(n, d, ok):
    cfg = CalderaConfig(rht=True)
    hadamard_ldlq_shape(NO_RHT, n, d)  # all these fit the LDLQ block: only the RHT can refuse them
    if ok:
        hadamard_ldlq_shape(cfg, n, d)
    else:
        with pytest.raises(ValueError, match="no Hadamard transform of size 176"):
            hadamard_ldlq_shape(cfg, n, d)


def test_a_config_without_rht_field_skips_the_hadamard_check():
    @dataclasses.dataclass
    class Plain:
        pass

    hadamard_ldlq_shape(Plain(), 176, 176)


def test_registered_caldera_is_algorithm_1_and_checks_its_factors():
    spec = get_method("caldera")
    assert spec.fn is caldera and spec.config_cls is CalderaConfig and spec.shares_hessian_context
    torch.manual_seed(0)
    W = torch.randn(16, 32)
    X = torch.randn(64, 32, dtype=torch.float64)
    H = X.T @ X / 64
    cfg = CalderaConfig(rank=4, outer_iters=2, l_bits=16, r_bits=16)
    got, ref = caldera(W, H, cfg), caldera_decompose(W, H, cfg)
    assert torch.equal(got.Q, ref.Q) and torch.equal(got.L, ref.L) and torch.equal(got.R, ref.R)
    # quantized factors need n to be a multiple of the block, 16-bit factors do not
    n = LDL_BLOCK + 4
    with pytest.raises(ValueError, match=f"n={n} is not a multiple"):
        spec.check_shape(CalderaConfig(rht=False, l_bits=4, r_bits=4), n, 2 * LDL_BLOCK)
    spec.check_shape(CalderaConfig(rht=False, l_bits=16, r_bits=16), n, 2 * LDL_BLOCK)
