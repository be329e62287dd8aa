"""Tests of caldera.algorithm.hadamard against a dense Kronecker-product oracle (quip-sharp.md §3)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.algorithm.hadamard import (
    RHT,
    SUPPORTED_K,
    hadamard_factor,
    hadamard_transform,
    inverse_hadamard_transform,
    kronecker_factors,
    load_hadamard,
    random_signs,
)

F64 = torch.float64


def sylvester(m: int) -> torch.Tensor:
    H = torch.ones(1, 1, dtype=F64)
    while H.shape[0] < m:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H


def dense_U(n: int) -> torch.Tensor:
    """Oracle U_n = (H_K ⊗ H_{2^p}) / √n in float64, built with torch.kron."""
    K, p = hadamard_factor(n)
    return torch.kron(load_hadamard(K).to(F64), sylvester(2**p)) / math.sqrt(n)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def psd(d: int, seed: int = 0) -> torch.Tensor:
    X = randn(2 * d, d, seed=seed) * torch.linspace(0.1, 3.0, d, dtype=F64)
    return X.T @ X / (2 * d)


def trace_err(D: torch.Tensor, H: torch.Tensor) -> float:
    """tr(D H Dᵀ) in float64."""
    D = D.to(F64)
    return float(((D @ H.to(F64)) * D).sum())


SIZES = [1, 2, 12, 16, 24, 36, 40, 52, 60, 96, 108, 116, 124, 140, 156, 172, 192, 344, 576]
HYP_SIZES = sorted({K * 2**p for K in (1,) + SUPPORTED_K for p in range(8) if K * 2**p <= 1024})


# ---------------------------------------------------------------------------------------------- matrices


@pytest.mark.parametrize("K", SUPPORTED_K)
def test_stored_matrices_are_hadamard(K):
    H = load_hadamard(K)
    assert H.shape == (K, K) and H.dtype == torch.float32
    assert bool(((H == 1) | (H == -1)).all())
    assert torch.equal(H.to(F64) @ H.to(F64).T, K * torch.eye(K, dtype=F64))


def test_load_hadamard_one_copy_and_errors():
    assert torch.equal(load_hadamard(1), torch.ones(1, 1))
    H = load_hadamard(12)
    H.zero_()
    assert load_hadamard(12).abs().sum() == 144  # the cache is not mutated through a returned copy
    for bad in (40, 0, 13, "12"):
        with pytest.raises(ValueError, match="no stored Hadamard"):
            load_hadamard(bad)


# ---------------------------------------------------------------------------------------------- factoring

TABLE = {
    4096: (1, 12),
    11008: (172, 6),
    5120: (20, 8),
    13824: (108, 7),
    14336: (28, 9),
    28672: (28, 10),
    576: (36, 4),
    1536: (12, 7),
    192: (12, 4),
    8192: (1, 13),
    1024: (1, 10),
    1: (1, 0),
    24: (12, 1),
    36: (36, 0),
    108: (108, 0),
}


@pytest.mark.parametrize("n", sorted(TABLE))
def test_hadamard_factor_table(n):
    assert hadamard_factor(n) == TABLE[n]


@pytest.mark.parametrize("n", [5632, 7, 44, 6, 3 * 172, 0, -4])
def test_hadamard_factor_rejects(n):
    # 5632 = 44·128 and 44 is not stored; 516 = 172·3 divides by 172 but must fall through, not assert.
    with pytest.raises(ValueError, match=str(n) if n > 0 else "positive"):
        hadamard_factor(n)


def test_hadamard_factor_message_lists_forms_and_rejects_non_ints():
    with pytest.raises(ValueError, match=r"K·2\^p with K in \{1, 12, 20, 28"):
        hadamard_factor(5632)
    for bad in (2.0, True, "8"):
        with pytest.raises(ValueError, match="positive integer"):
            hadamard_factor(bad)


def test_kronecker_factors():
    assert kronecker_factors(4096) == (16, 16, 16)
    assert kronecker_factors(11008) == (172, 64)
    assert kronecker_factors(1536) == (12, 16, 8)
    assert kronecker_factors(28672) == (28, 32, 32)
    assert kronecker_factors(64) == (64,)
    assert kronecker_factors(1) == ()
    for n in (4096, 11008, 14336, 576, 1, 24):
        assert math.prod(kronecker_factors(n)) == n
        fs = kronecker_factors(n)
        assert all(f <= 64 for f in (fs[1:] if hadamard_factor(n)[0] > 1 else fs))


# ---------------------------------------------------------------------------------------------- transform


@pytest.mark.parametrize("n", SIZES)
def test_transform_matches_dense_oracle_and_is_orthonormal(n):
    U = dense_U(n)
    assert torch.allclose(U @ U.T, torch.eye(n, dtype=F64), atol=1e-12)
    # transforming the identity row-wise gives I @ U_nᵀ = U_nᵀ
    Ut = hadamard_transform(torch.eye(n, dtype=F64))
    assert torch.allclose(Ut, U.T, atol=1e-12)
    assert torch.allclose(Ut.T @ Ut, torch.eye(n, dtype=F64), atol=1e-12)
    x = randn(3, n, 5, seed=n)
    assert torch.allclose(hadamard_transform(x, dim=1), torch.einsum("ij,bjc->bic", U, x), atol=1e-12)
    assert torch.allclose(hadamard_transform(x, dim=1, transpose=True), torch.einsum("ji,bjc->bic", U, x), atol=1e-12)
    y = randn(2, 4, n, seed=n + 1)
    assert torch.allclose(hadamard_transform(y), y @ U.T, atol=1e-12)
    assert torch.allclose(hadamard_transform(y.float()).to(F64), y @ U.T, atol=1e-5)


def test_transform_large_float32_and_noncontiguous():
    n = 11008
    x = randn(6, n, seed=3, dtype=torch.float32)
    xt = x.T  # (n, 6) non-contiguous
    ref = hadamard_transform(x.to(F64)).float()
    assert torch.allclose(hadamard_transform(xt, dim=0).T, ref, atol=1e-5)
    assert torch.allclose(hadamard_transform(x), ref, atol=1e-5)
    assert hadamard_transform(x).dtype == torch.float32


@settings(max_examples=30, deadline=None, print_blob=True)
@given(n=st.sampled_from(HYP_SIZES), batch=st.integers(1, 4), seed=st.integers(0, 99))
def test_transform_property_dense_oracle_and_inverse(n, batch, seed):
    Kf, pf = hadamard_factor(n)
    assert Kf * 2**pf == n and (Kf == 1 or Kf in SUPPORTED_K)
    x = randn(batch, n, seed=seed)
    y = hadamard_transform(x)
    assert torch.allclose(y, x @ dense_U(n).T, atol=1e-12)
    assert (inverse_hadamard_transform(y) - x).abs().max() <= 1e-12
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-12)


def test_transform_input_errors():
    with pytest.raises(ValueError, match="no Hadamard transform of size 44"):
        hadamard_transform(torch.zeros(3, 44))
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        hadamard_transform(torch.zeros(3, 4), dim=2)
    with pytest.raises(ValueError, match="floating-point"):
        hadamard_transform(torch.zeros(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="scalar"):
        hadamard_transform(torch.tensor(1.0))


@pytest.mark.parametrize("n,dim,transpose", [(24, -1, False), (24, 0, True), (16, 1, False), (16, -1, True)])
def test_transform_gradcheck(n, dim, transpose):
    shape = (n, 3) if dim == 0 else (2, n)
    x = randn(*shape, seed=n).requires_grad_()
    f = lambda t: hadamard_transform(t, dim=dim, transpose=transpose)
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (fast_hadamard_transform path)")
def test_cuda_matches_cpu():
    x = randn(8, 11008, seed=1, dtype=torch.float32)
    assert torch.allclose(
        hadamard_transform(x.cuda(), transpose=True).cpu(), hadamard_transform(x, transpose=True), atol=1e-4
    )


# ---------------------------------------------------------------------------------------------- signs / RHT


def test_random_signs():
    s = random_signs(1000, gen(0))
    assert s.shape == (1000,) and s.dtype == torch.float32
    assert bool(((s == 1) | (s == -1)).all()) and abs(float(s.mean())) < 0.15
    assert torch.equal(s, random_signs(1000, gen(0)))
    with pytest.raises(ValueError, match="generator"):
        random_signs(8, None)
    with pytest.raises(ValueError, match="positive integer"):
        random_signs(0, gen(0))


def test_rht_random_deterministic_order_and_seeds():
    a, b = RHT.random(1536, 576, seed=7), RHT.random(1536, 576, seed=7)
    assert torch.equal(a.S_U, b.S_U) and torch.equal(a.S_V, b.S_V)
    g = gen(7)
    assert torch.equal(a.S_V, random_signs(1536, g)) and torch.equal(a.S_U, random_signs(576, g))
    c = RHT.random(1536, 576, seed=8)
    assert not torch.equal(a.S_U, c.S_U) and not torch.equal(a.S_V, c.S_V)
    assert (a.n, a.d) == (1536, 576) and a.S_U.dtype == torch.float32 and repr(a) == "RHT(n=1536, d=576)"
    for bad in (-1, 1.5, None, True):
        with pytest.raises(ValueError, match="seed"):
            RHT.random(8, 8, seed=bad)
    with pytest.raises(ValueError, match="size 44"):
        RHT.random(44, 8, seed=0)


def test_rht_rejects_bad_signs():
    with pytest.raises(ValueError, match="S_U must be a 1-D floating"):
        RHT(S_U=torch.ones(4, 4), S_V=torch.ones(4))
    with pytest.raises(ValueError, match="S_V has unsupported length 44"):
        RHT(S_U=torch.ones(4), S_V=torch.ones(44))
    with pytest.raises(ValueError, match="S_U contains 1 NaN"):
        RHT(S_U=torch.tensor([1.0, float("nan")]), S_V=torch.ones(4))


@pytest.mark.parametrize("n,d", [(24, 16), (192, 576), (1536, 96), (1, 12)])
def test_rotate_W_matches_oracle_and_inverse_exact(n, d):
    rht = RHT.random(n, d, seed=n + d)
    W = randn(n, d, seed=1)
    SV, SU = rht.S_V.to(F64), rht.S_U.to(F64)
    Un, Ud = dense_U(n), dense_U(d)
    Wr = rht.rotate_W(W)
    assert torch.allclose(Wr, Un.T @ (SV[:, None] * W * SU) @ Ud, atol=1e-11)
    assert (rht.unrotate_W(Wr) - W).abs().max() <= 1e-12
    H = psd(d, seed=2)
    Hr = rht.rotate_H(H)
    HR = SU[:, None] * Ud  # H_R = diag(S_U) U_d of the paper
    assert torch.allclose(Hr, HR.T @ H @ HR, atol=1e-11)
    assert Wr.dtype == Hr.dtype == F64


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_trace_and_error_trace_preserved(dtype):
    n, d = 384, 576
    rht = RHT.random(n, d, seed=3)
    W, H = randn(n, d, seed=4, dtype=dtype), psd(d, seed=5).to(dtype)
    Wr, Hr = rht.rotate_W(W), rht.rotate_H(H)
    assert Wr.dtype == Hr.dtype == dtype
    tol = 1e-10 if dtype == F64 else 1e-4
    assert math.isclose(trace_err(Wr, Hr), trace_err(W, H), rel_tol=tol)
    W_hat_r = torch.round(Wr * 4) / 4  # any approximation made in the rotated basis
    W_hat = rht.unrotate_W(W_hat_r)
    assert math.isclose(trace_err(Wr - W_hat_r, Hr), trace_err(W - W_hat, H), rel_tol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_inference_identity(dtype):
    n, d = 192, 576
    rht = RHT.random(n, d, seed=9)
    W = randn(n, d, seed=10, dtype=dtype)
    Wr = rht.rotate_W(W)
    x = randn(2, 3, d, seed=11, dtype=dtype)
    xt = rht.rotate_input(x)
    y = rht.unrotate_output(xt @ Wr.T)
    assert xt.dtype == y.dtype == dtype and y.shape == (2, 3, n)
    tol = 1e-12 if dtype == F64 else 1e-4
    assert torch.allclose(y, x @ W.T, atol=tol * float((x @ W.T).abs().max()))
    # x̃ @ Wrᵀ is the output rotated on the output side: U_nᵀ S_V (x Wᵀ) row-wise
    y_rot = hadamard_transform((x @ W.T) * rht.S_V.to(dtype), transpose=True)
    assert torch.allclose(xt @ Wr.T, y_rot, atol=tol * float(y_rot.abs().max()))


def test_autograd_path_matches_fast_path_and_signs_are_trainable():
    n, d = 24, 16
    rht = RHT.random(n, d, seed=1)
    W, H, x, y = randn(n, d, seed=2), psd(d, seed=3), randn(5, d, seed=4), randn(2, 5, n, seed=5)
    cases = (
        (rht.rotate_W, W),
        (rht.unrotate_W, W),
        (rht.rotate_H, H),
        (rht.rotate_input, x),
        (rht.unrotate_output, y),
    )
    for meth, arg in cases:
        fast = meth(arg)  # fused no-grad kernel
        slow = meth(arg.clone().requires_grad_())  # composed autograd path
        assert slow.requires_grad and torch.allclose(fast, slow, atol=1e-12)

    def forward(xx, s_u, s_v):
        r = RHT(S_U=s_u, S_V=s_v)
        return r.unrotate_output(r.rotate_input(xx) @ r.rotate_W(W).T)

    args = (x.clone().requires_grad_(), rht.S_U.to(F64).requires_grad_(), rht.S_V.to(F64).requires_grad_())
    assert torch.autograd.gradcheck(forward, args)


def test_rht_input_errors():
    rht = RHT.random(24, 16, seed=0)
    with pytest.raises(ValueError, match=r"W must have shape \(24, 16\), got \(16, 24\)"):
        rht.rotate_W(torch.zeros(16, 24))
    with pytest.raises(ValueError, match=r"H must have shape \(16, 16\)"):
        rht.rotate_H(torch.zeros(24, 24))
    with pytest.raises(ValueError, match=r"Wr must have shape"):
        rht.unrotate_W(torch.zeros(24))
    bad = torch.zeros(24, 16)
    bad[3, 4] = float("inf")
    with pytest.raises(ValueError, match="W contains 1 NaN/Inf"):
        rht.rotate_W(bad)
    with pytest.raises(ValueError, match="H contains"):
        rht.rotate_H(torch.full((16, 16), float("nan")))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 16\)"):
        rht.rotate_input(torch.zeros(3, 24))
    with pytest.raises(ValueError, match=r"y must have shape \(\.\.\., 24\)"):
        rht.unrotate_output(torch.zeros(3, 16))
    with pytest.raises(ValueError, match="floating-point"):
        rht.rotate_W(torch.zeros(24, 16, dtype=torch.int32))


def test_block_paths_agree(monkeypatch):
    """Column-strip blocks (large n·C), row blocks and tiny blocks all give the row-wise (oracle-checked) result."""
    import caldera.algorithm.hadamard as hm

    W = randn(2048, 576, seed=12, dtype=torch.float32)  # n·d > row-block budget: dim=0 uses column strips
    ref0 = hadamard_transform(W.T.contiguous(), transpose=True).T
    assert torch.allclose(hadamard_transform(W, dim=0, transpose=True), ref0, atol=1e-5)
    rht = RHT.random(2048, 576, seed=13)
    Wr = rht.rotate_W(W)
    assert torch.allclose(rht.unrotate_W(Wr), W, atol=1e-5)
    monkeypatch.setattr(hm, "_ROW_BLOCK_ELEMS", 64)
    monkeypatch.setattr(hm, "_COL_BLOCK_ELEMS", 64)
    assert torch.allclose(rht.rotate_W(W), Wr, atol=1e-5)
    x = randn(3, 40, 5, seed=14)
    assert torch.allclose(hadamard_transform(x, dim=1), torch.einsum("ij,bjc->bic", dense_U(40), x), atol=1e-12)


def test_empty_and_size_one():
    assert hadamard_transform(torch.zeros(0, 16)).shape == (0, 16)
    x = randn(4, 1, seed=0)
    assert torch.equal(hadamard_transform(x), x)
    rht = RHT.random(1, 12, seed=0)
    W = randn(1, 12, seed=1)
    assert torch.allclose(rht.unrotate_W(rht.rotate_W(W)), W, atol=1e-12)
