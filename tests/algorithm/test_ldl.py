import pytest
import torch

from caldera.algorithm.ldl import block_ldl, regularize_hessian
from tests.helpers import llm_like


@pytest.mark.parametrize("d,block", [(16, 8), (64, 8), (24, 1), (48, 4)])
def test_block_ldl_reconstructs_H(d, block):
    _, H = llm_like(8, d, seed=d)
    H = regularize_hessian(H)
    L, D = block_ldl(H, block)
    assert torch.allclose(L @ torch.block_diag(*D) @ L.T, H, atol=1e-10)
    nb = d // block
    diag = L.reshape(nb, block, nb, block).diagonal(dim1=0, dim2=2).permute(2, 0, 1)
    assert torch.allclose(diag, torch.eye(block, dtype=H.dtype).expand(nb, block, block))
    assert torch.count_nonzero(torch.triu(L, 1)) == 0


def test_regularize_divides_by_mean_diag_and_adds_sigma():
    _, H = llm_like(8, 16)
    Hr = regularize_hessian(H * 7.0, 0.05)
    expect = H / H.diagonal().mean()
    expect.diagonal().add_(0.05)
    assert torch.allclose(Hr, expect, atol=1e-12)


def test_bad_hessians_are_named():
    with pytest.raises(ValueError, match="not positive definite"):
        H = torch.diag(torch.tensor([1.0, 1.0, -0.5, 1.0]))
        regularize_hessian(H, 0.01)
    with pytest.raises(ValueError, match="NaN"):
        regularize_hessian(torch.full((4, 4), float("nan")))
    with pytest.raises(ValueError, match="multiple"):
        block_ldl(torch.eye(12, dtype=torch.float64), 8)
