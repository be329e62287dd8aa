"""Tests of caldera.kernels.factors: the frozen low-rank part that the dispatcher and the backends share."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from caldera.kernels import fused
from caldera.kernels.factors import Factors


def test_every_field_defaults_to_none():
    f = Factors()
    assert all(getattr(f, x.name) is None for x in dataclasses.fields(Factors))
    assert [x.name for x in dataclasses.fields(Factors)] == [
        "L", "R", "L_codes", "L_scale", "R_codes", "R_scale", "quantizer"
    ]  # fmt: skip


def test_factors_are_frozen():
    f = Factors(L=torch.zeros(2, 1), R=torch.zeros(1, 8))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.L = torch.ones(2, 1)


def test_the_dispatcher_exports_the_same_class():
    assert fused.Factors is Factors
