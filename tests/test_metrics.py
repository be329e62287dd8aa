import pytest
import torch

import caldera.metrics as metrics
from caldera.metrics import relative_data_aware_error, sq_frobenius


@pytest.mark.parametrize("chunk", [7, 64, 1 << 18])
def test_sq_frobenius_is_the_float64_sum_of_squares_over_every_slice(monkeypatch, chunk):
    """Slices of 7 and 64 elements over 1000: the last slice is partial (a dropped or repeated slice misses by at
    least one element's square); each element is squared in float64 (float32 squares of these values would round)."""
    monkeypatch.setattr(metrics, "SQ_CHUNK", chunk)
    x = torch.randn(40, 25, generator=torch.Generator().manual_seed(0)) * 1e3 + 1e4
    exact = float((x.double() ** 2).sum())
    assert sq_frobenius(x) == pytest.approx(exact, rel=1e-14)
    assert sq_frobenius(x[:, 3:11]) == pytest.approx(float((x[:, 3:11].double() ** 2).sum()), rel=1e-14)


def test_relative_data_aware_error_through_H_equals_the_one_through_X():
    g = torch.Generator().manual_seed(1)
    X, W = torch.randn(50, 16, generator=g, dtype=torch.float64), torch.randn(8, 16, generator=g, dtype=torch.float64)
    W_hat = W + 0.1 * torch.randn(8, 16, generator=g, dtype=torch.float64)
    expect = float(((W_hat - W) @ X.T).norm() / (W @ X.T).norm())
    assert relative_data_aware_error(W_hat, W, X.T @ X / 50) == pytest.approx(expect, rel=1e-12)
