import pytest
import torch

from caldera.algorithm.regression import HessianSqrt
from caldera.algorithm.triangular import lower_matmul, matmul_lower, slices
from tests.helpers import gen


@pytest.mark.parametrize("m, d", [(7, 100), (33, 512), (64, 1000), (5, 1536)])
def test_matmul_lower_equals_the_dense_product_and_skips_the_zeros(m, d):
    """Against a float64 oracle; every entry of M above the slices' diagonal blocks is NaN, so a product that
    reads them (a dense GEMM, a slice that starts too early) turns NaN: the flops skipped are really skipped."""
    g = gen(1)
    A = torch.randn(m, d, generator=g)
    M = torch.randn(d, d, generator=g).tril()
    oracle = A.double() @ M.double()
    M_nan = M.clone()
    for s, e in slices(d):
        M_nan[:s, s:e] = float("nan")
    out = matmul_lower(A, M_nan)
    assert out.shape == (m, d) and out.dtype == torch.float32
    assert torch.allclose(out.double(), oracle, rtol=1e-5, atol=1e-4 * float(oracle.abs().max()))
    if d >= 2 * 64:
        assert len(slices(d)) > 1  # the sliced path ran (the NaNs above would otherwise be read)


@pytest.mark.parametrize("d, m", [(100, 7), (512, 33), (1000, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lower_matmul_equals_the_dense_product_and_skips_the_zeros(d, m, dtype):
    """``M @ B``: the NaNs right of each row slice's diagonal block must never be read."""
    g = gen(3)
    M = torch.randn(d, d, generator=g, dtype=dtype).tril()
    B = torch.randn(d, m, generator=g, dtype=dtype)
    oracle = M.double() @ B.double()
    M_nan = M.clone()
    for s, e in slices(d):
        M_nan[s:e, e:] = float("nan")
    out = lower_matmul(M_nan, B)
    assert out.dtype == dtype and out.shape == (d, m)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(out.double(), oracle, rtol=tol, atol=tol * float(oracle.abs().max()))
    with pytest.raises(ValueError, match="must be"):
        lower_matmul(torch.zeros(5, 5), torch.zeros(4, 3))


def test_slices_cover_the_columns_once_and_small_factors_are_one_gemm():
    for d in (1, 8, 127, 128, 576, 4096, 11008):
        parts = slices(d)
        assert parts[0][0] == 0 and parts[-1][1] == d
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        assert len(parts) == max(1, min(8, d // 64))
    with pytest.raises(ValueError, match="must be"):
        matmul_lower(torch.zeros(3, 4), torch.zeros(5, 5))


def test_hessian_sqrt_products_use_the_factor_they_name():
    """``times_half`` / ``times_inv_half`` equal A @ M and A @ M⁻¹ for the triangular (Cholesky) and the
    eigenvector (App. C.4, not triangular) square roots alike."""
    g = gen(2)
    X = torch.randn(400, 256, generator=g, dtype=torch.float64)
    H = X.T @ X / 400 + 0.1 * torch.eye(256, dtype=torch.float64)
    A = torch.randn(9, 256, generator=g)
    for hs in (HessianSqrt.of(H), HessianSqrt.eigen(H)):
        assert torch.allclose(hs.times_half(A).double(), A.double() @ hs.half, rtol=1e-4, atol=1e-4)
        M_inv = torch.linalg.inv(hs.half)  # the explicit inverse: the oracle of the solves
        assert torch.allclose(hs.times_inv_half(A).double(), A.double() @ M_inv, rtol=1e-4, atol=1e-3)
        assert torch.allclose(hs.solve_right(A.double()), A.double() @ M_inv, rtol=1e-9, atol=1e-9)
    assert HessianSqrt.of(H).lower and not HessianSqrt.eigen(H).lower
