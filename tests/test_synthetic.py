"""The seeded test matrices (caldera.synthetic), checked against what their docstrings promise."""

from __future__ import annotations

import pytest
import torch

from caldera.synthetic import calibration_hessian, decaying_weight, llm_like, random_compressed_layer


def test_the_weight_has_the_decaying_spectrum_and_unit_rms():
    W = decaying_weight(48, 32, seed=3, decay=0.7)
    assert W.shape == (48, 32) and W.dtype == torch.float32
    assert float(W.pow(2).mean()) == pytest.approx(1.0, rel=1e-5)
    s = torch.linalg.svdvals(W.double())
    want = torch.arange(1, 33, dtype=torch.float64) ** -0.7
    assert torch.allclose(s / s[0], want, rtol=1e-4)


def test_outlier_columns_are_eight_times_larger():
    plain = decaying_weight(16, 24, seed=1)
    out = decaying_weight(16, 24, seed=1, outlier_cols=3)
    ratio = out.norm(dim=0) / plain.norm(dim=0)  # both scaled to RMS 1: the same factor on the plain columns
    big = ratio > ratio.min() * 4
    assert int(big.sum()) == 3 and torch.allclose(ratio[big] / ratio[~big].mean(), torch.tensor(8.0), rtol=1e-4)


def test_the_hessian_is_symmetric_with_log_spaced_eigenvalues_over_cond():
    H = calibration_hessian(20, seed=2, cond=1e3)
    assert H.dtype == torch.float64 and torch.equal(H, H.T)
    lam = torch.linalg.eigvalsh(H).flip(0)
    assert float(lam[0]) == pytest.approx(1.0, rel=1e-9) and float(lam[0] / lam[-1]) == pytest.approx(1e3, rel=1e-9)
    steps = lam[:-1] / lam[1:]  # log-spaced: one constant ratio between neighbours
    assert torch.allclose(steps, steps.mean().expand_as(steps), rtol=1e-6)
    sampled = calibration_hessian(20, seed=2, cond=1e3, m=8)
    assert int(torch.linalg.matrix_rank(sampled)) == 8  # m Gaussian rows: rank min(m, d)


def test_the_same_arguments_give_the_same_matrices_and_another_seed_others():
    W1, H1 = llm_like(16, 16, seed=4)
    W2, H2 = llm_like(16, 16, seed=4)
    W3, H3 = llm_like(16, 16, seed=5)
    assert torch.equal(W1, W2) and torch.equal(H1, H2)
    assert not torch.equal(W1, W3) and not torch.equal(H1, H3)


def test_a_random_layer_refuses_a_rank_that_its_format_cannot_hold():
    with pytest.raises(ValueError, match="lr_format=None with rank 4"):
        random_compressed_layer(16, 16, 4, None)
    meta, ts = random_compressed_layer(16, 16, 0, None, rht=False, bias=False)
    assert meta["rank"] == 0 and set(ts) == {"Q_codes", "Q_scale"} and ts["Q_codes"].shape == (16, 2)
