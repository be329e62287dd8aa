"""Lemma 4.2 / Lemma B.1 — global optimality of rank-constrained regression (label
``lem:rank-constrained-regression-problem-main``, full form ``lem:rank-constrained-regression``).

Statement (App. B): *"Suppose Y ∈ R^{m×n} is given, and suppose X ∈ R^{m×d} is full rank, i.e.,
rank(X) = min{m, d}, with SVD, X = U Σ̃ Vᵀ. Furthermore, let Ũ Σ̃ Ṽᵀ denote the full SVD of UᵀY if m ≤ d, or
the full SVD of (U I_d)ᵀY if m > d. Then, for k ≤ m, the solution of min_{rank(Z) ≤ k} ‖XZ − Y‖_F² is*

    Z* = (V I_m Σ⁻¹ Ũ I_k)(I_kᵀ Σ̃ Ṽᵀ)   if m ≤ d,        Z* = (V Σ⁻¹ Ũ I_k)(I_kᵀ Σ̃ Vᵀ)   otherwise,

*[…] Additionally, the optimal value is Σ_{i=k+1}^{m} σ_i²(Y) if m ≤ d, and
Σ_{i=k+1}^{m} σ_i²((U I_d)ᵀY) + ‖(U Ī_{m−d})ᵀY‖_F² otherwise."* Remark: *"It is not necessary for X to be full
rank. An equivalent result can be derived with Σ⁻¹ replaced by Σ†."*

What is checked (library: :func:`caldera.algorithm.regression.rank_constrained_regression`):

* ``optimality`` — no rank-k candidate beats the library's Z*: random factor pairs, local perturbations of its
  factors, alternating-least-squares local optima from random starts, and an independent SVD oracle
  (best rank-k approximation of the projection of Y on range(X), mapped back with X†).
* ``value`` — the optimal value equals the lemma's formula, in both cases (m ≤ d and m > d with the irreducible term).
* ``printed-m>d-formula`` — the m > d solution *as printed* ends in ``Vᵀ`` (X's right singular vectors):
  it has the wrong shape unless n = d, and for n = d it is not optimal. With ``Ṽᵀ`` it is (the library uses Ṽᵀ).
* ``remark-pinv`` — with rank-deficient X the library (thin SVD X = U_r Σ_r V_rᵀ, SVD of U_rᵀY) is optimal;
  the Remark read literally (Σ⁻¹ → Σ† but the SVD still of the full UᵀY, and the value Σ_{i>k} σ_i²(Y)) is not.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from caldera.algorithm.regression import rank_constrained_regression
from theory.common import (
    CheckResult,
    Profile,
    combine,
    gen,
    matrix_with_spectrum,
    randn,
    sq_fro,
)

LABEL = "lem:rank-constrained-regression"
RTOL = 1e-8  # relative tolerance of exact identities in float64

Solver = Callable[[Tensor, Tensor, int], Tensor]


def objective(X: Tensor, Z: Tensor, Y: Tensor) -> float:
    """‖XZ − Y‖_F² in float64."""
    return sq_fro(X.double() @ Z.double() - Y.double())


def library_solution(X: Tensor, Y: Tensor, k: int) -> Tensor:
    return rank_constrained_regression(X, Y, k).Z.double()


def paper_closed_form(X: Tensor, Y: Tensor, k: int, *, printed: bool = False,
                      pinv_tol: float = 1e-10) -> Tensor:
    """The lemma's formula, implemented from the full SVDs as printed (independent of the library).

    m ≤ d: ``V I_m Σ⁻¹ Ũ I_k I_kᵀ Σ̃ Ṽᵀ`` with ``Ũ Σ̃ Ṽᵀ`` the full SVD of UᵀY (Σ⁻¹ → Σ† for zero singular
    values: the Remark read literally). m > d: ``V Σ⁻¹ Ũ I_k I_kᵀ Σ̃ Ṽᵀ`` with the SVD of (U I_d)ᵀY, or with
    ``printed=True`` the printed ``… I_kᵀ Σ̃ Vᵀ`` formed literally (only defined when n = d; torch's matmul raises
    RuntimeError otherwise).
    """
    X, Y = X.double(), Y.double()
    m, d = X.shape
    n = Y.shape[1]
    U, S, Vh = torch.linalg.svd(X, full_matrices=True)
    Sinv = torch.where(S > pinv_tol * S.max(), 1.0 / S, torch.zeros_like(S))
    if m <= d:
        Ut, St, Vth = torch.linalg.svd(U.T @ Y, full_matrices=True)
        left = Vh[:m].T @ (Sinv[:, None] * Ut[:, :k])
        right = St[:k, None] * Vth[:k]
        return left @ right
    Ut, St, Vth = torch.linalg.svd(U[:, :d].T @ Y, full_matrices=True)
    left = Vh.T @ (Sinv[:, None] * Ut[:, :k])
    if printed:
        # I_kᵀ Σ̃ Vᵀ literally: (k×d)(d×n)(d×d) — torch raises RuntimeError when the shapes do not chain (n ≠ d)
        Sig = torch.zeros(d, n, dtype=torch.float64)
        Sig[: St.numel(), : St.numel()] = torch.diag(St)
        return left @ (torch.eye(d, dtype=torch.float64)[:k] @ Sig @ Vh)
    return left @ (St[:k, None] * Vth[:k])


def paper_optimal_value(X: Tensor, Y: Tensor, k: int) -> float:
    """The lemma's optimal value (eq. rank-constrained-regression-optimal-value), both cases."""
    X, Y = X.double(), Y.double()
    m, d = X.shape
    if m <= d:
        s = torch.linalg.svdvals(Y)
        return float(s[k:m].pow(2).sum())
    U, _, _ = torch.linalg.svd(X, full_matrices=True)
    s = torch.linalg.svdvals(U[:, :d].T @ Y)
    return float(s[k:m].pow(2).sum()) + sq_fro(U[:, d:].T @ Y)


def oracle_value_and_solution(X: Tensor, Y: Tensor, k: int) -> tuple[float, Tensor]:
    """Independent oracle: Eckart–Young on P Y (P = projector on range X) plus the irreducible ‖(I − P)Y‖²."""
    X, Y = X.double(), Y.double()
    Xp = torch.linalg.pinv(X, rtol=1e-10)
    PY = X @ (Xp @ Y)
    U, S, Vh = torch.linalg.svd(PY, full_matrices=False)
    best = (U[:, :k] * S[:k]) @ Vh[:k]
    return float(S[k:].pow(2).sum()) + sq_fro(Y - PY), Xp @ best


def _als_candidate(X: Tensor, Y: Tensor, k: int, g: torch.Generator, iters: int = 30) -> Tensor:
    """A local optimum of ‖X A B − Y‖² over A (d×k), B (k×n) by alternating least squares from a random start."""
    d, n = X.shape[1], Y.shape[1]
    A = randn(d, k, g=g)
    B = randn(k, n, g=g)
    for _ in range(iters):
        B = torch.linalg.pinv(X @ A) @ Y
        A = torch.linalg.pinv(X) @ Y @ torch.linalg.pinv(B)
    return A @ B


def check_optimality(X: Tensor, Y: Tensor, k: int, *, seed: int, solver: Solver = library_solution,
                     n_random: int = 8) -> CheckResult:
    """``f(Z_solver) ≤ f(candidate)`` for every rank-≤k candidate, and ``rank(Z_solver) ≤ k``.

    ratio = f(Z) / min(f(candidates)) (≤ 1 + RTOL: optimal). The oracle candidate is the global optimum, so a
    suboptimal ``solver`` is always caught.
    """
    X, Y = X.double(), Y.double()
    g = gen(seed)
    Z = solver(X, Y, k).double()
    f = objective(X, Z, Y)
    rank = int(torch.linalg.matrix_rank(Z, rtol=1e-9)) if Z.abs().max() > 0 else 0
    d, n = Z.shape
    scale = sq_fro(Y)
    cands: dict[str, float] = {}
    oracle_val, Z_or = oracle_value_and_solution(X, Y, k)
    cands["svd-oracle"] = objective(X, Z_or, Y)
    U, S, Vh = torch.linalg.svd(Z, full_matrices=False)
    Lf, Rf = U[:, :k] * S[:k].sqrt(), S[:k, None].sqrt() * Vh[:k]
    for i in range(n_random):
        cands[f"random-{i}"] = objective(X, randn(d, k, g=g) @ randn(k, n, g=g), Y)
        for t in (1e-1, 1e-3, 1e-6):
            s = t * (float(Lf.norm()) + 1e-12)
            Lp = Lf + s * randn(*Lf.shape, g=g) / max(Lf.numel() ** 0.5, 1)
            Rp = Rf + s * randn(*Rf.shape, g=g) / max(Rf.numel() ** 0.5, 1)
            cands[f"perturb-{i}-{t:g}"] = objective(X, Lp @ Rp, Y)
    for i in range(2):
        cands[f"als-{i}"] = objective(X, _als_candidate(X, Y, k, g), Y)
    best_name = min(cands, key=cands.__getitem__)
    best = cands[best_name]
    tiny = 1e-12 * scale + 1e-300
    ratio = (f + tiny) / (best + tiny)
    holds = (f <= best + RTOL * scale) and rank <= k
    cex = None if holds else {"seed": seed, "shape(m,d,n,k)": [X.shape[0], X.shape[1], Y.shape[1], k],
                              "f(Z)": f, "beaten_by": best_name, "f(candidate)": best, "rank(Z)": rank}
    return CheckResult(
        "optimality", LABEL, "no rank-k candidate (random, local perturbation, ALS, SVD oracle) beats Z*",
        holds, ratio, 1, counterexample=cex,
        reasoning="Z* reaches the Eckart–Young value of the projected target, which lower-bounds every "
                  "rank-k candidate since ‖XZ − Y‖² = ‖XZ − PY‖² + ‖(I − P)Y‖².",
        details={"f": f, "best_candidate": best_name, "best": best, "oracle": oracle_val, "rank": rank},
    )


def check_value(X: Tensor, Y: Tensor, k: int, *, seed: int,
                value_formula: Callable[[Tensor, Tensor, int], float] = paper_optimal_value) -> CheckResult:
    """The lemma's optimal-value formula equals ‖XZ* − Y‖² and the library's reported value.

    ratio = relative deviation / RTOL (≤ 1: equal to float64 precision).
    """
    X, Y = X.double(), Y.double()
    sol = rank_constrained_regression(X, Y, k)
    formula = value_formula(X, Y, k)
    attained = objective(X, sol.Z.double(), Y)
    oracle, _ = oracle_value_and_solution(X, Y, k)
    scale = sq_fro(Y)
    dev = max(abs(formula - oracle), abs(attained - oracle), abs(sol.value - oracle)) / scale
    holds = dev <= RTOL
    case = "m<=d" if X.shape[0] <= X.shape[1] else "m>d"
    cex = None if holds else {"seed": seed, "shape(m,d,n,k)": [X.shape[0], X.shape[1], Y.shape[1], k],
                              "formula": formula, "optimum": oracle}
    return CheckResult(
        f"value[{case}]", LABEL,
        "optimal value = Σ_{i>k} σ_i²(Y) (m ≤ d); Σ_{i>k} σ_i²((U I_d)ᵀY) + ‖(U Ī_{m−d})ᵀY‖² (m > d)",
        holds, dev / RTOL, 1, counterexample=cex,
        reasoning="U is orthogonal, so σ_i(UᵀY) = σ_i(Y) when range(X) = R^m; for m > d the rows of UᵀY "
                  "outside range(X) cannot be fitted and add their energy.",
        details={"formula": formula, "attained": attained, "library_value": sol.value, "oracle": oracle},
    )


def check_printed_m_gt_d(X: Tensor, Y: Tensor, k: int, *, seed: int) -> CheckResult:
    """The m > d solution as printed (``… I_kᵀ Σ̃ Vᵀ``): undefined unless n = d, and suboptimal when n = d."""
    X, Y = X.double(), Y.double()
    m, d = X.shape
    n = Y.shape[1]
    opt, _ = oracle_value_and_solution(X, Y, k)
    corrected = objective(X, paper_closed_form(X, Y, k), Y)
    info = {"seed": seed, "shape(m,d,n,k)": [m, d, n, k], "optimum": opt, "with Ṽᵀ": corrected}
    try:
        Z = paper_closed_form(X, Y, k, printed=True)
    except RuntimeError as e:  # the printed product does not chain: the formula is undefined for this shape
        return CheckResult("printed-m>d-formula", LABEL, "Z* = (VΣ⁻¹ŨI_k)(I_kᵀΣ̃Vᵀ) for m > d, as printed",
                           False, float("inf"), 1,
                           counterexample={**info, "error": f"shape mismatch (n ≠ d): {e}"},
                           reasoning="I_kᵀΣ̃ is k×n and Vᵀ is d×d: the product is undefined unless n = d; the "
                                     "intended factor is Ṽᵀ (right singular vectors of (U I_d)ᵀY).",
                           details=info)
    printed = objective(X, Z, Y)
    scale = sq_fro(Y)
    holds = printed <= opt + RTOL * scale
    ratio = printed / max(opt, 1e-300)
    return CheckResult(
        "printed-m>d-formula", LABEL, "Z* = (VΣ⁻¹ŨI_k)(I_kᵀΣ̃Vᵀ) for m > d, as printed (n = d)", holds, ratio,
        1,
        counterexample=None if holds else {**info, "printed": printed},
        reasoning="With Vᵀ in place of Ṽᵀ the right factor no longer spans the top right singular vectors of "
                  "(U I_d)ᵀY; with Ṽᵀ the formula is optimal (typo).",
        details={**info, "printed": printed},
    )


def check_pinv_remark(X: Tensor, Y: Tensor, k: int, *, seed: int, literal: bool = False) -> CheckResult:
    """Remark (rank-deficient X, Σ⁻¹ → Σ†): library (``literal=False``) or the literal reading (``True``)."""
    X, Y = X.double(), Y.double()
    opt, _ = oracle_value_and_solution(X, Y, k)
    Z = paper_closed_form(X, Y, k) if literal else library_solution(X, Y, k)
    f = objective(X, Z, Y)
    scale = sq_fro(Y)
    holds = f <= opt + RTOL * scale
    m, d = X.shape
    printed_value = float(torch.linalg.svdvals(Y)[k:m].pow(2).sum()) if m <= d else float("nan")
    who = "literal Remark (SVD of full UᵀY, Σ†)" if literal else "library (SVD of U_rᵀY)"
    cex = None if holds else {"seed": seed, "shape(m,d,n,k)": [m, d, Y.shape[1], k],
                              "rank(X)": int(torch.linalg.matrix_rank(X)), "f(Z)": f, "optimum": opt,
                              "printed value Σ_{i>k}σ_i²(Y)": printed_value}
    return CheckResult(
        f"remark-pinv[{'literal' if literal else 'library'}]", LABEL,
        f"rank-deficient X: {who} is optimal", holds, f / max(opt, 1e-300), 1, counterexample=cex,
        reasoning="For rank(X) = r < min(m, d) the rows of UᵀY beyond r are unreachable; the top-k SVD of "
                  "the full UᵀY is steered by them, so Σ† must be paired with the SVD of U_rᵀY (and the "
                  "value gains the irreducible term ‖(I − U_rU_rᵀ)Y‖²).",
        details={"f": f, "optimum": opt, "printed_value": printed_value},
        kind="statement" if literal else "library",
    )


# ------------------------------------------------------------------------------------------- instances


def random_instance(seed: int, m: int, d: int, n: int, k: int, cond: float = 1e2, rank: int | None = None,
                    decay: float = 0.0) -> tuple[Tensor, Tensor, int]:
    """(X, Y, k): X with log-spaced singular values over ``cond`` (optionally of lower ``rank``), Y with
    singular values i^(−decay)."""
    g = gen(seed)
    r = min(m, d) if rank is None else rank
    sx = torch.logspace(0, -torch.log10(torch.tensor(float(cond))).item(), r, dtype=torch.float64)
    X = matrix_with_spectrum(m, d, sx, g)
    sy = torch.arange(1, min(m, n) + 1, dtype=torch.float64) ** (-decay)
    Y = matrix_with_spectrum(m, n, sy, g)
    return X, Y, min(k, m, d, n)


def run(profile: Profile) -> list[CheckResult]:
    """All claims of the lemma over ``profile.examples`` instances per case."""
    out: dict[str, list[CheckResult]] = {}
    for i in range(profile.examples):
        seed = 1000 + i
        g = gen(seed)
        for case, (m, d) in {"m<=d": (6 + i % 4, 12 + i % 3), "m>d": (14 + i % 3, 7 + i % 2)}.items():
            n = 5 + (i * 3) % 9
            k = 1 + i % 4
            X, Y, k = random_instance(seed, m, d, n, k, cond=10 ** (1 + i % 4), decay=float(i % 3) / 2)
            out.setdefault("optimality", []).append(check_optimality(X, Y, k, seed=seed, n_random=4))
            out.setdefault(f"value[{case}]", []).append(check_value(X, Y, k, seed=seed))
        # printed m > d formula, with n = d (so that it is defined)
        X, Y, k = random_instance(seed, 12, 6, 6, 2, cond=10.0)
        out.setdefault("printed-m>d-formula", []).append(check_printed_m_gt_d(X, Y, k, seed=seed))
        # rank-deficient X
        m, d = 8, 10 + int(torch.randint(0, 3, (1,), generator=g))
        X, Y, k = random_instance(seed, m, d, 6, 2, cond=10.0, rank=4)
        out.setdefault("remark[library]", []).append(check_pinv_remark(X, Y, k, seed=seed))
        out.setdefault("remark[literal]", []).append(check_pinv_remark(X, Y, k, seed=seed, literal=True))
    return [combine(v, claim=k) for k, v in out.items()]
