import pytest
import torch

from caldera.algorithm.regression import (
    WARM_COLD_POWER_ITERS,
    WARM_POWER_ITERS,
    HessianSqrt,
    gram_top_svd,
    rank_constrained_regression,
    rank_constrained_regression_pd,
    subspace_svd,
    top_k_svd,
    warm_top_k_svd,
)
from tests.helpers import gen, llm_like


def objective(X, Z, Y):
    return float((X.double() @ Z.double() - Y.double()).pow(2).sum())


@pytest.mark.parametrize("m,d,n,k", [(6, 10, 7, 2), (10, 10, 6, 3), (15, 6, 8, 2), (20, 5, 9, 4)])
def test_rank_constrained_regression_is_optimal(m, d, n, k):
    g = gen(m * 100 + d)
    X = torch.randn(m, d, generator=g, dtype=torch.float64)
    Y = torch.randn(m, n, generator=g, dtype=torch.float64)
    sol = rank_constrained_regression(X, Y, k)
    assert torch.linalg.matrix_rank(sol.Z) <= k
    assert objective(X, sol.Z, Y) == pytest.approx(sol.value, rel=1e-9, abs=1e-9)
    # closed form for the optimal value
    if m <= d:
        s = torch.linalg.svdvals(Y)
        assert sol.value == pytest.approx(float(s[k:].pow(2).sum()), rel=1e-9)
    else:
        U, _, _ = torch.linalg.svd(X, full_matrices=True)
        Ud, Uo = U[:, :d], U[:, d:]
        s = torch.linalg.svdvals(Ud.T @ Y)
        assert sol.value == pytest.approx(float(s[k:].pow(2).sum() + (Uo.T @ Y).pow(2).sum()), rel=1e-9)
    # oracle: SVD of the projected target (P Y with P the projector on range(X)) truncated to rank k
    P = X @ torch.linalg.pinv(X)
    Ut, St, Vt = torch.linalg.svd(P @ Y, full_matrices=False)
    best = (Ut[:, :k] * St[:k]) @ Vt[:k]
    Z_oracle = torch.linalg.lstsq(X, best).solution if m >= d else torch.linalg.pinv(X) @ best
    assert objective(X, Z_oracle, Y) == pytest.approx(sol.value, rel=1e-8, abs=1e-9)
    # no random rank-k candidate or local perturbation beats it
    for _ in range(20):
        A = torch.randn(d, k, generator=g, dtype=torch.float64)
        B = torch.randn(k, n, generator=g, dtype=torch.float64)
        assert objective(X, A @ B, Y) >= sol.value
        pert = (sol.left + 1e-3 * torch.randn(sol.left.shape, generator=g, dtype=torch.float64)) @ sol.right
        assert objective(X, pert, Y) >= sol.value - 1e-12


def test_rank_deficient_X_uses_pseudo_inverse():
    g = gen(7)
    X = torch.randn(12, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 8, generator=g, dtype=torch.float64)
    Y = torch.randn(12, 5, generator=g, dtype=torch.float64)
    sol = rank_constrained_regression(X, Y, 2)
    assert objective(X, sol.Z, Y) == pytest.approx(sol.value, rel=1e-8)
    P = X @ torch.linalg.pinv(X)
    s = torch.linalg.svdvals(P @ Y)
    assert sol.value == pytest.approx(float(s[2:].pow(2).sum() + ((torch.eye(12) - P) @ Y).pow(2).sum()), rel=1e-8)


def test_pd_closed_form_equals_lemma():
    W, H = llm_like(20, 16, seed=3, cond=1e3)
    X = torch.linalg.cholesky(H).T  # H = XᵀX, X (d, d)
    L, R, value = rank_constrained_regression_pd(W.double(), H, 4)
    sol = rank_constrained_regression(X, X @ W.double().T, 4)
    assert value == pytest.approx(sol.value, rel=1e-8)
    got = float(((L @ R - W.double()) @ X.T).pow(2).sum())
    assert got == pytest.approx(sol.value, rel=1e-8)
    assert torch.allclose(L.T @ L, torch.eye(4, dtype=L.dtype), atol=1e-10)


def test_hessian_sqrt():
    _, H = llm_like(4, 16, seed=1)
    hs = HessianSqrt.of(H)
    assert torch.allclose(hs.half @ hs.half.T, H, atol=1e-12)
    eye = torch.eye(16, dtype=H.dtype)
    assert torch.allclose(hs.half @ hs.solve_right(eye), eye, atol=1e-9)
    with pytest.raises(ValueError, match="explicit `inverse`"):
        HessianSqrt(hs.half, None, lower=False)
    with pytest.raises(ValueError, match="positive definite"):
        HessianSqrt.of(-torch.eye(3))


def test_every_square_root_gives_app_c4_optimum():
    # App. C.4 writes H^{1/2} = U Λ^{1/2}; the Cholesky factor used by HessianSqrt.of differs from it by an
    # orthogonal factor, so the optimum (value and Z = L R) is the same.
    W, H = llm_like(40, 48, seed=4, cond=1e4)
    chol, eig = HessianSqrt.of(H), HessianSqrt.eigen(H)
    assert torch.allclose(eig.half @ eig.half.T, H, atol=1e-12)
    assert torch.allclose(torch.tril(chol.half), chol.half)  # a triangular factor, not the eigen one
    Lc, Rc, vc = rank_constrained_regression_pd(W.double(), chol, 5)
    Le, Re, ve = rank_constrained_regression_pd(W.double(), eig, 5)
    assert vc == pytest.approx(ve, rel=1e-9)
    assert torch.allclose(Lc @ Rc, Le @ Re, atol=1e-8)


def test_randomized_svd_close_to_exact_and_deterministic():
    W, _ = llm_like(200, 150, seed=2, decay=1.0)
    U1, S1, V1 = top_k_svd(W.double(), 10, method="randomized", generator=gen(0))
    U2, S2, V2 = top_k_svd(W.double(), 10, method="randomized", generator=gen(0))
    assert torch.equal(S1, S2)
    _, Se, _ = top_k_svd(W.double(), 10)
    assert torch.allclose(S1, Se, rtol=1e-6)
    with pytest.raises(ValueError, match="Generator"):
        top_k_svd(W.double(), 10, method="randomized")


def _flat_tail_matrix(m, n, k, seed):
    """(m, n) float64 with k decaying singular values over a flat tail at 0.9 σ_k: random starts converge
    slowly here (σ_k/σ_{k+p} close to 1), as on the first LPLR input of Algorithm 1."""
    g = gen(seed)
    U, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    r = min(m, n)
    s = torch.full((r,), 0.9)
    s[:k] = torch.linspace(3.0, 1.0, k)
    s[k:] = torch.linspace(0.9, 0.8, r - k)
    return (U[:, :r] * s.double()) @ V[:, :r].T


def _tail_excess(Y, U, S, V, k):
    """(‖Y − U S Vᵀ‖² − optimum) / optimum, the optimum being Σ_{i>k} σ_i² (Eckart–Young)."""
    s = torch.linalg.svdvals(Y)
    best = float(s[k:].pow(2).sum())
    return (float((Y - (U * S) @ V.T).pow(2).sum()) - best) / best


def test_warm_svd_without_a_start_is_the_seeded_range_finder_and_near_optimal_on_a_flat_spectrum():
    """``svd="warm"``'s first call (no start, a generator): the randomized range finder with
    ``WARM_COLD_POWER_ITERS`` power iterations from the generator's Gaussian draw (the same numbers as
    ``subspace_svd`` from that draw: the seed decides). On a flat tail its vectors are not the exact ones, but the
    captured energy is within 1 % of the optimum's tail (what LPLR's initialization needs), and the basis is the
    full k + 16 columns for the next call."""
    k = 12
    Y = _flat_tail_matrix(120, 90, k, seed=3)
    U, S, V, basis = warm_top_k_svd(Y, k, None, gen(6))
    omega = torch.randn(90, k + 16, generator=gen(6), dtype=torch.float64)
    Ur, Sr, Vr, br = subspace_svd(Y, k, omega, WARM_COLD_POWER_ITERS)
    assert torch.equal(S, Sr) and torch.equal(V, Vr) and torch.equal(basis, br)
    assert 0 <= _tail_excess(Y, U, S, V, k) < 1e-2
    assert basis.shape == (90, k + 16)


def test_warm_svd_is_exact_without_a_start_and_converges_from_a_nearby_matrixs_basis():
    """``svd="warm"``: the first call is exact (the Gram route: the exact SVD's values, and its vectors up to
    sign); from the basis of a nearby matrix (Y + a small change, as between Algorithm 1's outer iterations)
    ``WARM_POWER_ITERS`` power iterations reach the optimum, where a random start with the same iterations stays
    measurably above it (the start is what does the work)."""
    k = 12
    Y0 = _flat_tail_matrix(120, 90, k, seed=3)
    U0, S0, V0, basis = warm_top_k_svd(Y0, k, None)
    Ue, Se, Ve = top_k_svd(Y0, k)
    assert torch.allclose(S0, Se, rtol=1e-12)
    signs = torch.sign((V0 * Ve).sum(0))
    assert torch.allclose(V0 * signs, Ve, atol=1e-10) and torch.allclose(U0 * signs, Ue, atol=1e-10)
    assert abs(_tail_excess(Y0, U0, S0, V0, k)) < 1e-12
    assert basis.shape == (90, k + 16)
    assert torch.allclose(basis.T @ basis, torch.eye(k + 16, dtype=torch.float64), atol=1e-12)
    Y1 = Y0 + 0.002 * torch.randn(Y0.shape, generator=gen(4), dtype=torch.float64)
    U1, S1, V1, basis1 = warm_top_k_svd(Y1, k, basis)
    assert _tail_excess(Y1, U1, S1, V1, k) < 2e-5
    assert torch.allclose(S1, torch.linalg.svdvals(Y1)[:k], rtol=5e-4)
    assert basis1.shape == basis.shape
    start = torch.randn(90, k + 16, generator=gen(5), dtype=torch.float64)
    Ur, Sr, Vr, _ = subspace_svd(Y1, k, start, WARM_POWER_ITERS)
    assert _tail_excess(Y1, Ur, Sr, Vr, k) > 100 * max(_tail_excess(Y1, U1, S1, V1, k), 1e-9)


def test_subspace_svd_from_an_exact_basis_is_exact_and_checks_the_start():
    Y = _flat_tail_matrix(60, 40, 5, seed=6)
    U, S, Vh = torch.linalg.svd(Y, full_matrices=False)
    Us, Ss, Vs, B = subspace_svd(Y, 5, Vh[:9].T, 0)
    assert torch.allclose(Ss, S[:5], rtol=1e-10)
    assert torch.allclose((Us * Ss) @ Vs.T, (U[:, :5] * S[:5]) @ Vh[:5], atol=1e-10)
    assert B.shape == (40, 9)
    with pytest.raises(ValueError, match="start"):
        subspace_svd(Y, 5, Vh[:4].T, 1)


def test_bad_inputs():
    with pytest.raises(ValueError, match="rows"):
        rank_constrained_regression(torch.randn(3, 4), torch.randn(5, 2), 1)
    with pytest.raises(ValueError, match="k=0"):
        rank_constrained_regression(torch.randn(3, 4), torch.randn(3, 2), 0)


@pytest.mark.parametrize("shape", [(150, 60), (60, 150)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gram_top_svd_matches_the_svd_on_both_orientations(shape, dtype):
    """Tall Y takes the eigenpairs of YᵀY (V first), wide Y those of YYᵀ (U first); both give the SVD's top-l
    triplets (vectors up to sign), in descending order, orthonormal (a swapped side or an ascending order fails)."""
    l = 20
    Y = _flat_tail_matrix(*shape, 8, seed=7).to(dtype)
    U, S, V = gram_top_svd(Y, l)
    Ue, Se, Vhe = torch.linalg.svd(Y.double(), full_matrices=False)
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    assert U.shape == (shape[0], l) and V.shape == (shape[1], l) and S.dtype == dtype
    assert torch.allclose(S.double(), Se[:l], rtol=tol)
    # the top 8 are distinct (3.0 .. 1.0): their vectors agree up to sign
    signs = torch.sign((V[:, :8].double() * Vhe[:8].T).sum(0))
    assert torch.allclose(V[:, :8].double() * signs, Vhe[:8].T, atol=50 * tol)
    assert torch.allclose(U[:, :8].double() * signs, Ue[:, :8], atol=50 * tol)
    assert torch.allclose((Y @ V).double(), (U * S).double(), atol=50 * tol)


def test_gram_top_svd_declines_a_rank_deficient_matrix_and_warm_falls_back_to_the_svd():
    """Below λ_l ≤ GRAM_RTOL λ_1 the squared spectrum has lost its accuracy: None, and ``warm_top_k_svd`` then
    takes the full SVD (a Y / σ from a tiny σ would blow a column up)."""
    g = gen(8)
    Y = torch.randn(80, 5, generator=g, dtype=torch.float64) @ torch.randn(5, 60, generator=g, dtype=torch.float64)
    assert gram_top_svd(Y, 10) is None
    U, S, V, basis = warm_top_k_svd(Y, 6, None)
    Ue, Se, _ = torch.linalg.svd(Y, full_matrices=False)
    assert torch.allclose(S, Se[:6], atol=1e-10) and bool(torch.isfinite(U).all())
    assert basis.shape == (60, 6 + 16)
    with pytest.raises(ValueError, match="l=0"):
        gram_top_svd(Y, 0)
