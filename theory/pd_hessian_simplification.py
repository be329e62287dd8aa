"""App. C.4 — a simplification for positive definite Hessians (label
``subapp:positive_definite_hessian_simplification``).

Statement: with H = UΛUᵀ ≻ 0 and H^{1/2} = UΛ^{1/2}Uᵀ,

    min_{rank Z ≤ k} ‖(A − Z)Xᵀ‖² ≡ min tr((A − Z)H(A − Z)ᵀ) ≡ min ‖(A − Z)H^{1/2}‖² ≡ min ‖(A − Z)UΛ^{1/2}‖²
                                 ≡ min ‖Y − ZUΛ^{1/2}‖² (Y = AUΛ^{1/2}) ≡ min_{rank Z' ≤ k} ‖Y − Z'‖²,

*"the optimal solution is Z'_* = (U I_k)(I_kᵀΣVᵀ) […] So the final solution is given by
Z_* = (U I_k)(I_kᵀΣVᵀΛ^{-1/2}Uᵀ)"* (U, Σ, V of Y's SVD on the left; U, Λ of H's eigendecomposition on the right).

What is checked: every objective in the chain agrees on random Z (exactly, up to the factor m from H = XᵀX/m
that the "≡" of equivalent problems ignores); the library's
:func:`caldera.algorithm.regression.rank_constrained_regression_pd`
equals an independent implementation of the closed form, equals (transposed) the Lemma 4.2 solution of
min ‖XZ − XAᵀ‖ from :func:`caldera.algorithm.regression.rank_constrained_regression`, has the same optimal value
(m · value_pd = value_lemma) and is optimal (reusing the optimality check of Lemma 4.2).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from caldera.algorithm.regression import HessianSqrt, rank_constrained_regression, rank_constrained_regression_pd
from caldera.synthetic import llm_like
from theory.common import CheckResult, Profile, combine, gen, randn, sq_fro
from theory.lemma_rank_constrained_regression import check_optimality

LABEL = "subapp:positive_definite_hessian_simplification"
RTOL = 1e-8

PDSolver = Callable[[Tensor, Tensor, int], Tensor]


def paper_pd_closed_form(A: Tensor, H: Tensor, k: int, *, lam_power: float = -0.5) -> Tensor:
    """Z* = (U_y I_k)(I_kᵀ Σ V_yᵀ Λ^{-1/2} Uᵀ) from H = UΛUᵀ, Y = AUΛ^{1/2} = U_y Σ V_yᵀ (independent code).

    ``lam_power`` ≠ −1/2 gives a deliberately wrong variant (sensitivity tests).
    """
    A, H = A.double(), H.double()
    lam, U = torch.linalg.eigh(H)
    Y = A @ (U * lam.sqrt())
    Uy, S, Vyh = torch.linalg.svd(Y, full_matrices=False)
    return (Uy[:, :k] * S[:k]) @ Vyh[:k] @ (U * lam**lam_power).T


def library_pd(A: Tensor, H: Tensor, k: int) -> Tensor:
    L, R, _ = rank_constrained_regression_pd(A.double(), H.double(), k)
    return L.double() @ R.double()


def check_objective_chain(A: Tensor, X: Tensor, *, seed: int, k: int = 2, with_m: bool = True) -> CheckResult:
    """All objectives of the chain agree for random rank-k Z: ‖(A − Z)Xᵀ‖² = m·tr(…) = m·‖(A − Z)H^{1/2}‖² = …
    (``with_m=False`` drops the factor m from H = XᵀX/m: a wrong identity unless m = 1, for sensitivity tests)."""
    A, X = A.double(), X.double()
    m = X.shape[0] if with_m else 1
    H = X.T @ X / X.shape[0]
    lam, U = torch.linalg.eigh(H)
    Hh = (U * lam.sqrt()) @ U.T
    UL = U * lam.sqrt()
    lib_half = HessianSqrt.of(H).half
    g = gen(seed)
    worst = 0.0
    for _ in range(3):
        Z = randn(A.shape[0], k, g=g) @ randn(k, A.shape[1], g=g)
        E = A - Z
        ref = sq_fro(E @ X.T)
        vals = [m * float(torch.trace(E @ H @ E.T)), m * sq_fro(E @ Hh), m * sq_fro(E @ UL),
                m * sq_fro(A @ UL - Z @ UL), m * sq_fro(E @ lib_half)]
        worst = max(worst, max(abs(v - ref) / ref for v in vals))
    holds = worst <= RTOL
    return CheckResult(
        "objective-chain", LABEL, "‖(A−Z)Xᵀ‖² = m·tr((A−Z)H(A−Z)ᵀ) = m‖(A−Z)H^{1/2}‖² = m‖(A−Z)UΛ^{1/2}‖² = "
        "m‖Y − ZUΛ^{1/2}‖²", holds, worst / RTOL, 1,
        counterexample=None if holds else {"seed": seed, "rel_dev": worst},
        reasoning="XᵀX = mH = (UΛ^{1/2})(UΛ^{1/2})ᵀ, so all the objectives are the same quadratic form up to "
                  "the constant m, which does not change the minimizer.",
        details={"rel_dev": worst},
    )


def check_closed_form(A: Tensor, X: Tensor, k: int, *, seed: int,
                      solver: PDSolver = library_pd) -> CheckResult:
    """``solver`` (default: the library) = paper's closed form = Lemma 4.2 solution (transposed); equal values."""
    A, X = A.double(), X.double()
    m = X.shape[0]
    H = X.T @ X / m
    Z = solver(A, H, k).double()
    Z_paper = paper_pd_closed_form(A, H, k)
    lemma = rank_constrained_regression(X, X @ A.T, k)
    Z_lemma = lemma.Z.double().T
    _, _, value_pd = rank_constrained_regression_pd(A.double(), H, k)
    dev_paper = float((Z - Z_paper).norm() / Z_paper.norm())
    dev_lemma = float((Z - Z_lemma).norm() / Z_lemma.norm())
    dev_value = abs(m * value_pd - lemma.value) / sq_fro(X @ A.T)
    f = sq_fro((A - Z) @ X.T)
    dev_attained = abs(f - lemma.value) / sq_fro(X @ A.T)
    worst = max(dev_paper, dev_lemma, dev_value, dev_attained)
    holds = worst <= 1e-6
    return CheckResult(
        "closed-form=lemma-4.2", LABEL,
        "Z* = (U_yI_k)(I_kᵀΣV_yᵀΛ^{-1/2}Uᵀ) equals Lemma 4.2's solution and value",
        holds, worst / 1e-6, 1,
        counterexample=None if holds else {"seed": seed, "dev_paper": dev_paper, "dev_lemma": dev_lemma,
                                           "dev_value": dev_value, "dev_attained": dev_attained},
        reasoning="With H ≻ 0, Z ↦ ZUΛ^{1/2} is a rank-preserving bijection, so Eckart–Young on Y = "
                  "AUΛ^{1/2} gives the global optimum, the same one Lemma 4.2 finds (unique when σ_k(Y) > "
                  "σ_{k+1}(Y)).",
        details={"dev_paper": dev_paper, "dev_lemma": dev_lemma, "dev_value": dev_value},
    )


def check_pd_optimality(A: Tensor, X: Tensor, k: int, *, seed: int,
                        solver: PDSolver = library_pd) -> CheckResult:
    """The PD solution (transposed) is optimal for min ‖XZ − XAᵀ‖ (Lemma 4.2's optimality check)."""
    m = X.shape[0]

    def as_lemma_solver(Xl: Tensor, Yl: Tensor, kk: int) -> Tensor:
        return solver(A, Xl.T @ Xl / m, kk).double().T

    r = check_optimality(X.double(), X.double() @ A.double().T, k, seed=seed, solver=as_lemma_solver,
                         n_random=3)
    r.claim, r.label = "pd-optimality", LABEL
    r.statement = "the PD closed form is globally optimal among rank-k candidates"
    return r


def instance(seed: int, n: int, d: int, m: int, cond: float) -> tuple[Tensor, Tensor]:
    """(A, X) with X (m, d), m ≥ d so that H = XᵀX/m ≻ 0, from the library's LLM-like generator."""
    A, H = llm_like(n, d, seed=seed, cond=cond)
    g = gen(seed)
    C = torch.linalg.cholesky(H.double()).T  # H = CᵀC
    Qm, _ = torch.linalg.qr(randn(m, d, g=g))
    return A.double(), (m**0.5) * Qm @ C  # XᵀX = m CᵀC = m H


def run(profile: Profile) -> list[CheckResult]:
    out: dict[str, list[CheckResult]] = {}
    for i in range(profile.examples):
        seed = 10_000 + i
        n, d = 12 + 4 * (i % 3), 8 + 4 * (i % 2)
        A, X = instance(seed, n, d, d + 3 * (i % 3), cond=10 ** (1 + i % 4))
        k = 1 + i % 4
        out.setdefault("objective-chain", []).append(check_objective_chain(A, X, seed=seed, k=k))
        out.setdefault("closed-form=lemma-4.2", []).append(check_closed_form(A, X, k, seed=seed))
        out.setdefault("pd-optimality", []).append(check_pd_optimality(A, X, k, seed=seed))
    return [combine(v, claim=c) for c, v in out.items()]
