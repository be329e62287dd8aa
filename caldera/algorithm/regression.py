"""Rank-constrained regression (Lemma 4.2 / Appendix B) and its positive-definite-H form (App. C.4).

``min_{rank(Z) ≤ k} ‖XZ − Y‖_F²`` for X (m, d), Y (m, n) is solved globally by two SVDs. With the thin
SVD ``X = U_r Σ_r V_rᵀ`` (r = numerical rank of X; r = min(m, d) when X is full rank) and
``U_rᵀY = Ũ Σ̃ Ṽᵀ``::

    Z* = (V_r Σ_r⁻¹ Ũ_k)(Σ̃_k Ṽ_kᵀ),     value = Σ_{i>k} σ_i²(U_rᵀY) + ‖(I − U_r U_rᵀ) Y‖_F².

For m ≤ d and full-rank X the second term vanishes and ``σ_i(U_rᵀY) = σ_i(Y)`` (eq. 5); for m > d it is
the irreducible term ``‖(U I_{m−d}ᶜ)ᵀY‖²`` of the lemma; for rank-deficient X, Σ⁻¹ becomes Σ† (Remark).
(The lemma's m > d formula prints ``Vᵀ`` where ``Ṽᵀ`` is meant: the printed factor has the wrong shape
unless n = d.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import scipy.linalg
import torch
from torch import Tensor

from caldera.algorithm.triangular import matmul_lower
from caldera.validation import check_matrix


@dataclass(frozen=True)
class LowRankSolution:
    """Z* = left @ right with left (d, k) and right (k, n); ``value`` = optimal objective (float64)."""

    left: Tensor
    right: Tensor
    value: float

    @property
    def Z(self) -> Tensor:
        return self.left @ self.right


#: power iterations of :func:`subspace_svd` from a warm start (``svd="warm"``); columns beyond k it carries. One
#: is enough: LPLR's own alternating least squares refines the subspace after it (the measurements behind this
#: choice: benchmarks/results/ENGINE.md)
WARM_POWER_ITERS = 1
WARM_OVERSAMPLE = 16
#: power iterations of the randomized range finder in the first call of ``svd="warm"`` (no start yet), in place of
#: the Gram route's Yᵀ Y and eigensolve (benchmarks/results/ENGINE.md)
WARM_COLD_POWER_ITERS = 2


def top_k_svd(
    Y: Tensor, k: int, *, method: str = "exact", generator: torch.Generator | None = None, oversample: int = 16,
    power_iters: int = 4,
) -> tuple[Tensor, Tensor, Tensor]:
    """Top-k singular triplets (U_k (m, k), S_k (k,), V_k (n, k)) of Y (m, n).

    ``method="randomized"`` is the Halko–Martinsson–Tropp range finder with ``power_iters`` QR-stabilized
    power iterations, drawing its test matrix from ``generator`` (required, for determinism) on the
    generator's device and moving it to Y's device when they differ (a (n, k + oversample) copy).
    """
    if method == "exact" or k + oversample >= min(Y.shape):
        U, S, Vh = torch.linalg.svd(Y, full_matrices=False)
        return U[:, :k], S[:k], Vh[:k].T
    if method != "randomized":
        raise ValueError(f"svd method {method!r}; accepted: 'exact' or 'randomized'")
    U, S, V, _ = subspace_svd(Y, k, _test_matrix(Y, k + oversample, generator), power_iters)
    return U, S, V


def _test_matrix(Y: Tensor, cols: int, generator: torch.Generator | None) -> Tensor:
    """Gaussian (n, cols) test matrix of Y's dtype, drawn from ``generator`` on its device, moved to Y's."""
    if generator is None:
        raise ValueError("randomized SVD needs a seeded torch.Generator (determinism)")
    omega = torch.randn(Y.shape[1], cols, generator=generator, dtype=Y.dtype, device=generator.device)
    return omega.to(Y.device)


def subspace_svd(Y: Tensor, k: int, start: Tensor, power_iters: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Top-k singular triplets of Y (m, n) by subspace iteration from ``start`` (n, l), l ≥ k.

    ``Q_Y = qr(Y S)``, then ``power_iters`` times ``Q_Z = qr(Yᵀ Q_Y)``, ``Q_Y = qr(Y Q_Z)``, then the
    Rayleigh–Ritz step ``Q_Yᵀ Y = U_b Σ V_bᵀ`` (Halko, Martinsson and Tropp 2011, Alg. 4.4 and 5.1). A Gaussian
    ``start`` is the randomized SVD; the right Ritz vectors of a previous call on a nearby matrix are a warm
    start (subspace iteration converges from it in fewer steps). Cost: ``(2 + 4 · power_iters) m n l`` flops
    and l-column QRs, against O(m n min(m, n)) for a full SVD.

    Returns U_k (m, k), S_k (k,), V_k (n, k) and the ``basis`` (n, l): all l right Ritz vectors, orthonormal,
    the start of the next call. Everything in Y's dtype, on Y's device.
    """
    if start.shape[0] != Y.shape[1] or start.shape[1] < k:
        raise ValueError(f"start {tuple(start.shape)}: expected ({Y.shape[1]}, l) with l >= k = {k}")
    Qy, _ = torch.linalg.qr(Y @ start.to(Y.dtype))
    for _ in range(power_iters):
        Qz, _ = torch.linalg.qr(Y.T @ Qy)
        Qy, _ = torch.linalg.qr(Y @ Qz)
    Ub, S, Vh = torch.linalg.svd(Qy.T @ Y, full_matrices=False)
    return (Qy @ Ub)[:, :k], S[:k], Vh[:k].T, Vh.T


def warm_top_k_svd(
    Y: Tensor, k: int, start: Tensor | None, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``svd="warm"``: subspace iteration from ``start`` (:func:`subspace_svd`, ``WARM_POWER_ITERS``), or without a
    start the randomized range finder from a Gaussian test matrix drawn from ``generator``
    (``WARM_COLD_POWER_ITERS``), or, without a generator either, the exact top singular triplets
    (:func:`gram_top_svd`, or the full SVD where that declines).

    ``start`` is the ``basis`` this function returned for the previous call on a nearby matrix (Algorithm 1:
    the previous outer iteration's ``(W − Q) H^{1/2}``, which moves only by the change of Q): the top
    ``k + WARM_OVERSAMPLE`` right singular vectors. The first LPLR input has a flat spectrum (a quantization
    residual: σ_k/σ_{k+16} ≈ 1.01 at 4096×4096, rank 256), where a random start converges slowly to the singular
    vectors but captures nearly the optimal energy (every direction is worth about as much), and LPLR's alternating
    least squares refines the factors after it; later inputs have a gap, which the warm start resolves.
    Returns (U_k (m, k), S_k (k,), V_k (n, k), basis (n, min(k + WARM_OVERSAMPLE, m, n))), Y's dtype/device.
    """
    if start is not None and start.shape[1] >= k:
        return subspace_svd(Y, k, start, WARM_POWER_ITERS)
    ell = min(k + WARM_OVERSAMPLE, *Y.shape)
    if generator is not None and ell < min(Y.shape):
        return subspace_svd(Y, k, _test_matrix(Y, ell, generator), WARM_COLD_POWER_ITERS)
    top = gram_top_svd(Y, ell)
    if top is None:
        U, S, Vh = torch.linalg.svd(Y, full_matrices=False)
        return U[:, :k], S[:k], Vh[:k].T, Vh[: k + WARM_OVERSAMPLE].T
    U, S, V = top
    return U[:, :k], S[:k], V[:, :k], V


#: :func:`gram_top_svd` declines (returns None) when λ_l ≤ this · λ_1 for its Gram matrix's eigenvalues λ
GRAM_RTOL = 1e-3


def gram_top_svd(Y: Tensor, l: int) -> tuple[Tensor, Tensor, Tensor] | None:
    """The top-l singular triplets of Y (m, n) from the top-l eigenpairs of its smaller Gram matrix.

    ``G = Yᵀ Y`` (n ≤ m) or ``Y Yᵀ`` (m < n) is formed and decomposed in Y's dtype: on the CPU by LAPACK's MRRR
    eigensolver restricted to the l largest eigenpairs (``scipy.linalg.eigh(subset_by_index=..., driver="evr")``:
    the tridiagonal reduction plus l eigenvectors, instead of a full SVD), elsewhere by ``torch.linalg.eigh``. A
    float32 Y gives a float32 G, whose entries already carry float32 rounding of order ε₃₂‖Y‖²; the backward-stable
    eigensolver adds errors of that same order, so decomposing G in float64 would buy no accuracy (and costs 2x
    here: 3.9 s against 2.2 s at 4096×4096, with the same tail energy ``‖Y‖² − ‖Y V_k‖²`` as the exact float64
    SVD to 1e-8 of ‖Y‖², measured on the first LPLR input of a paper-settings decomposition; ENGINE.md).
    Then ``σ = √λ`` and the other side's vectors are ``Y V / σ`` (or ``Yᵀ U / σ``).
    Squaring Y loses accuracy only for singular values far below σ_1, so when ``λ_l ≤ GRAM_RTOL · λ_1`` it
    returns None (the caller takes the full SVD).

    Returns U (m, l), S (l,) descending, V (n, l) in Y's dtype on Y's device, or None.
    """
    m, n = Y.shape
    right = m >= n
    G = Y.T @ Y if right else Y @ Y.T
    size = G.shape[0]
    if not 0 < l <= size:
        raise ValueError(f"l={l}: expected 1 <= l <= {size} for Y {tuple(Y.shape)}")
    if G.device.type == "cpu":
        w_np, v_np = scipy.linalg.eigh(
            G.numpy(), subset_by_index=[size - l, size - 1], driver="evr", overwrite_a=True, check_finite=False
        )
        w, v = torch.from_numpy(w_np.copy()), torch.from_numpy(v_np.copy())
    else:
        w, v = torch.linalg.eigh(G)
        w, v = w[size - l :], v[:, size - l :]
    w, v = w.flip(0), v.flip(1)  # descending
    if not bool(torch.isfinite(w).all()) or float(w[-1]) <= GRAM_RTOL * float(w[0]):
        return None
    S = w.sqrt().to(Y.dtype)
    side = v.to(Y.dtype)
    other = (Y @ side if right else Y.T @ side) / S
    return (other, S, side) if right else (side, S, other)


def rank_constrained_regression(X: Tensor, Y: Tensor, k: int, rcond: float | None = None) -> LowRankSolution:
    """Globally optimal ``argmin_{rank(Z) ≤ k} ‖XZ − Y‖_F²`` (Lemma 4.2, both cases, pseudo-inverse).

    Args:
        X: (m, d) any rank; Y: (m, n); k: 1 ≤ k.
        rcond: singular values of X below ``rcond · σ_max`` count as zero (default: machine-eps based).
    Returns:
        LowRankSolution with left (d, k'), right (k', n), k' = min(k, rank) and the optimal value.
    """
    check_matrix(X, "X")
    check_matrix(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X {tuple(X.shape)} and Y {tuple(Y.shape)} must have the same number of rows m")
    if k < 1:
        raise ValueError(f"k={k}; accepted: k >= 1")
    Xd, Yd = X.double(), Y.double()
    U, S, Vh = torch.linalg.svd(Xd, full_matrices=False)
    tol = (rcond if rcond is not None else max(X.shape) * torch.finfo(torch.float64).eps) * float(S[0])
    r = int((S > tol).sum())
    U, S, V = U[:, :r], S[:r], Vh[:r].T
    UtY = U.T @ Yd
    Ut, St, Vth = torch.linalg.svd(UtY, full_matrices=False)
    kk = min(k, St.numel())
    left = V @ (Ut[:, :kk] / S[:, None])
    right = St[:kk, None] * Vth[:kk]
    irreducible = float((Yd - U @ UtY).pow(2).sum())
    value = float(St[kk:].pow(2).sum()) + irreducible
    return LowRankSolution(left.to(Y.dtype), right.to(Y.dtype), value)


@dataclass(frozen=True)
class HessianSqrt:
    """A square root of a positive-definite H (float64): ``half`` = M with ``H = M Mᵀ``; products with M⁻¹.

    ``‖(A − Z) Xᵀ‖² = ‖(A − Z) M‖²`` for H = XᵀX (App. C.4); computed once per Hessian and shared. App. C.4
    writes M = U Λ^{1/2} (H = U Λ Uᵀ), but every square root differs from that one by an orthogonal factor
    on the right (M = U Λ^{1/2} Oᵀ), which changes neither ‖· M‖ nor the singular values of A M, so
    ``trunc_k(A M) M⁻¹`` is the same optimum for all of them. ``of`` takes the Cholesky factor: one
    triangular factorization instead of a symmetric eigendecomposition (~20× cheaper for d = 2048 here), and
    ``A M⁻¹`` is a triangular solve against M (k right-hand sides: O(k d²), where forming M⁻¹ is O(d³));
    ``eigen`` gives App. C.4's literal U Λ^{1/2} with its explicit inverse ``Λ^{-1/2} Uᵀ``.
    """

    half: Tensor
    inverse: Tensor | None = None  # M⁻¹ (d, d) float64 when M is not triangular; None: solves against ``half``
    lower: bool = False  # ``half`` lower triangular (``of``): products skip the zeros (caldera.algorithm.triangular)

    def __post_init__(self) -> None:
        if (self.inverse is None) != self.lower:
            raise ValueError("HessianSqrt: a lower-triangular `half` is inverted by solves (inverse=None); "
                             "any other square root needs its explicit `inverse`")

    def times_half(self, A: Tensor) -> Tensor:
        """``A @ half`` in float32 for A (m, d) float32: half the flops when the factor is triangular."""
        return matmul_lower(A, self.half32) if self.lower else A @ self.half32

    def times_inv_half(self, A: Tensor) -> Tensor:
        """``A @ M⁻¹`` in float32 for A (m, d) float32: a float32 triangular solve ``X M = A`` when M is the
        Cholesky factor, else a product with the stored inverse."""
        if self.lower:
            return torch.linalg.solve_triangular(self.half32, A, upper=False, left=False)
        return A @ self.inverse.float()

    def solve_right(self, B: Tensor) -> Tensor:
        """``B @ M⁻¹`` in float64 for B (m, d) float64."""
        if self.lower:
            return torch.linalg.solve_triangular(self.half, B, upper=False, left=False)
        return B @ self.inverse

    @functools.cached_property
    def half32(self) -> Tensor:
        """``half`` in float32 (the LPLR and error matmuls' operand), converted once per factor."""
        return self.half.float()

    @classmethod
    def of(cls, H: Tensor) -> "HessianSqrt":
        Hd = H.double()
        M, info = torch.linalg.cholesky_ex(Hd)
        if int(info) != 0:
            lam_min = float(torch.linalg.eigvalsh(Hd)[0])
            raise ValueError(f"H is not positive definite (λ_min = {lam_min:.3g}); regularize it first")
        return cls.of_cholesky(M)

    @classmethod
    def of_cholesky(cls, M: Tensor) -> "HessianSqrt":
        """From H's lower Cholesky factor M (d, d) float64, already computed by the caller."""
        return cls(M, None, lower=True)

    @classmethod
    def eigen(cls, H: Tensor) -> "HessianSqrt":
        """App. C.4's factors: ``half = U Λ^{1/2}``, inverse ``Λ^{-1/2} Uᵀ`` (H = U Λ Uᵀ)."""
        lam, U = torch.linalg.eigh(H.double())
        if float(lam[0]) <= 0:
            raise ValueError(f"H is not positive definite (λ_min = {float(lam[0]):.3g}); regularize it first")
        return cls(U * lam.sqrt(), (U / lam.sqrt()).T)


def rank_constrained_regression_pd(
    A: Tensor, H: Tensor | HessianSqrt, k: int, *, svd: str = "exact", generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, float]:
    """App. C.4 closed form of ``min_{rank(Z) ≤ k} tr((A − Z) H (A − Z)ᵀ)`` for positive-definite H.

    With H = U Λ Uᵀ and the SVD ``A U Λ^{1/2} = U_y Σ V_yᵀ``: ``Z* = (U_y I_k)(I_kᵀ Σ V_yᵀ Λ^{-1/2} Uᵀ)``.

    Args:
        A: (n, d); H: (d, d) positive definite or its precomputed :class:`HessianSqrt`.
    Returns:
        L (n, k) with orthonormal columns, R (k, d), and the value Σ_{i>k} σ_i²(A U Λ^{1/2}) (exact SVD only;
        NaN for the randomized SVD, whose tail is not computed).
    """
    hs = H if isinstance(H, HessianSqrt) else HessianSqrt.of(H)
    Y = A.double() @ hs.half
    Uk, Sk, Vk = top_k_svd(Y, k, method=svd, generator=generator)
    L = Uk
    R = hs.solve_right(Sk[:, None] * Vk.T)
    if svd == "exact":
        value = float(Y.pow(2).sum() - Sk.pow(2).sum())
    else:
        value = float("nan")
    return L.to(A.dtype), R.to(A.dtype), value
