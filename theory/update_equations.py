"""App. C.1 — update equations of the low-rank factors in LPLRFactorize (label
``subapp:update-equations-low-rank-factors``; §3 "Updating L" / "Updating R").

Statements: *"For a fixed R, this is a least squares minimization, whose solution is available in closed form
as L̃ = (AXᵀ)(RXᵀ)† = AHRᵀ(RHRᵀ)⁻¹"*; *"It is shown in App. C.1 that R̃ = L†AHH† is a solution"* of
min_Z ‖(LZ − A)Xᵀ‖_F²; and the error decomposition (eq. ``updating_left_factor-1``)

    min_Z ‖XRᵀZ − Y‖² = ‖(U_xr Ī_{m−k})ᵀY‖² (irreducible) + min_{Z'} ‖Σ_xr Z' − (U_xr I_k)ᵀY‖²
    (reducible),

with Y = XAᵀ and XRᵀ = U_xr Σ̃_xr V_xrᵀ (full SVD).

What is checked: the normal equations ``(L̃R − A)HRᵀ = 0`` and ``Lᵀ(LR̃ − A)H = 0`` (relative residual), that
no perturbation lowers the objective (the excess of L̃ + tE is exactly t²‖ERXᵀ‖² ≥ 0), agreement with the
library's least-squares solver (``rank_constrained_regression`` with the rank constraint inactive), the
equality of the two forms of L̃, and the decomposition: the optimum equals the irreducible term and, for any Z,
the objective minus the irreducible term equals the reducible term. Also reported: the derivation's printed
intermediate ``XᵀU_x(Σ̃_x†)ᵀV_x = HH†`` is missing a transpose (``… V_xᵀ``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from caldera.algorithm.regression import rank_constrained_regression
from theory.common import CheckResult, Profile, combine, gen, matrix_with_spectrum, randn, sq_fro

LABEL = "subapp:update-equations-low-rank-factors"
RTOL = 1e-7


def objective(L: Tensor, R: Tensor, A: Tensor, X: Tensor) -> float:
    return sq_fro((L.double() @ R.double() - A.double()) @ X.double().T)


def left_update(A: Tensor, H: Tensor, R: Tensor) -> Tensor:
    """L̃ = A H Rᵀ (R H Rᵀ)⁻¹ (paper's closed form)."""
    A, H, R = A.double(), H.double(), R.double()
    return torch.linalg.solve(R @ H @ R.T, (A @ H @ R.T).T).T


def right_update(A: Tensor, H: Tensor, L: Tensor) -> Tensor:
    """R̃ = L† A H H† (paper's closed form)."""
    A, H, L = A.double(), H.double(), L.double()
    return torch.linalg.pinv(L) @ A @ H @ torch.linalg.pinv(H, hermitian=True)


def check_left_update(A: Tensor, X: Tensor, R: Tensor, *, seed: int,
                      update: Callable[[Tensor, Tensor, Tensor], Tensor] = left_update,
                      rtol: float = RTOL) -> CheckResult:
    """L̃ solves min_Z ‖(ZR − A)Xᵀ‖²: normal equations, perturbations, library solver, pinv form. ``rtol``: the
    relative tolerance (float32 callers such as ``caldera.algorithm.lplr.lplr_factorize`` need ~1e-4)."""
    A, X, R = A.double(), X.double(), R.double()
    m = X.shape[0]
    H = X.T @ X / m
    L = update(A, H, R)
    g = gen(seed)
    f = objective(L, R, A, X)
    scale = sq_fro(A @ X.T)
    grad = (L @ R - A) @ H @ R.T
    normal_res = float(grad.norm()) / max(float((A @ H @ R.T).norm()), 1e-300)
    pinv_form = (A @ X.T) @ torch.linalg.pinv(R @ X.T)
    lib = rank_constrained_regression(X @ R.T, X @ A.T, R.shape[0]).Z.double().T  # rank constraint inactive
    dev_pinv = float((L - pinv_form).norm() / max(float(pinv_form.norm()), 1e-300))
    dev_lib = float((L - lib).norm() / max(float(lib.norm()), 1e-300))
    worst_drop = 0.0
    for t in (1.0, 1e-2, 1e-4):
        E = randn(*L.shape, g=g) * t * (float(L.norm()) / L.numel() ** 0.5 + 1e-12)
        fp = objective(L + E, R, A, X)
        exact_excess = sq_fro(E @ R @ X.T)
        worst_drop = max(worst_drop, (f - fp) / scale, abs((fp - f) - exact_excess) / scale)
    dev = max(normal_res, dev_pinv, dev_lib, worst_drop)
    holds = dev <= rtol
    return CheckResult(
        "left-update", LABEL, "L̃ = AHRᵀ(RHRᵀ)⁻¹ = (AXᵀ)(RXᵀ)† minimizes ‖(ZR − A)Xᵀ‖² (normal equations, "
        "perturbations, library solver)", holds, dev / rtol, 1,
        counterexample=None if holds else {"seed": seed, "normal_residual": normal_res, "dev_pinv": dev_pinv,
                                           "dev_library": dev_lib, "objective_drop": worst_drop},
        reasoning="The objective is a convex quadratic in Z with Hessian ∝ RHRᵀ ≻ 0 (RXᵀ of full row rank), "
                  "so the zero-gradient point AHRᵀ(RHRᵀ)⁻¹ is the unique minimizer.",
        details={"f": f, "normal_residual": normal_res, "dev_pinv": dev_pinv, "dev_library": dev_lib},
    )


def check_right_update(A: Tensor, X: Tensor, L: Tensor, *, seed: int,
                       update: Callable[[Tensor, Tensor, Tensor], Tensor] = right_update,
                       rtol: float = RTOL) -> CheckResult:
    """R̃ = L†AHH† is a minimizer of ‖(LZ − A)Xᵀ‖² (H may be singular: m < d)."""
    A, X, L = A.double(), X.double(), L.double()
    m = X.shape[0]
    H = X.T @ X / m
    R = update(A, H, L)
    g = gen(seed)
    f = objective(L, R, A, X)
    scale = sq_fro(A @ X.T)
    grad = L.T @ (L @ R - A) @ H
    normal_res = float(grad.norm()) / max(float((L.T @ A @ H).norm()), 1e-300)
    # least-squares optimum by an independent route: vec form via lstsq on (X ⊗ L) is too big; use pinvs
    R_opt = torch.linalg.pinv(L) @ A @ X.T @ torch.linalg.pinv(X.T)
    f_opt = objective(L, R_opt, A, X)
    worst_drop = 0.0
    for t in (1.0, 1e-2, 1e-4):
        E = randn(*R.shape, g=g) * t * (float(R.norm()) / R.numel() ** 0.5 + 1e-12)
        worst_drop = max(worst_drop, (f - objective(L, R + E, A, X)) / scale)
    dev = max(normal_res, (f - f_opt) / scale, worst_drop)
    holds = dev <= rtol
    return CheckResult(
        "right-update", LABEL, "R̃ = L†AHH† minimizes ‖(LZ − A)Xᵀ‖² (normal equations, perturbations)",
        holds, max(dev, 0.0) / rtol, 1,
        counterexample=None if holds else {"seed": seed, "normal_residual": normal_res, "f": f,
                                           "f_opt": f_opt},
        reasoning="Lᵀ(LL†AHH† − A)H = LᵀAHH†H − LᵀAH = 0 because LᵀLL† = Lᵀ and HH†H = H: the gradient "
                  "vanishes and the objective is convex.",
        details={"f": f, "f_opt": f_opt, "normal_residual": normal_res},
    )


def check_error_decomposition(A: Tensor, X: Tensor, R: Tensor, *, seed: int, split_shift: int = 0) -> CheckResult:
    """eq. updating_left_factor-1: optimum = irreducible term; objective − irreducible = reducible term.
    ``split_shift`` ≠ 0 moves the split between the two terms (a deliberately wrong decomposition)."""
    A, X, R = A.double(), X.double(), R.double()
    k = R.shape[0] + split_shift
    Y = X @ A.T
    Uxr, Sxr, Vxr_h = torch.linalg.svd(X @ R.T, full_matrices=True)
    irreducible = sq_fro(Uxr[:, k:].T @ Y)
    m = X.shape[0]
    L = left_update(A, X.T @ X / m, R)
    f_opt = sq_fro(X @ R.T @ L.T - Y)
    g = gen(seed)
    scale = sq_fro(Y)
    dev = abs(f_opt - irreducible) / scale
    for _ in range(3):
        Z = randn(R.shape[0], A.shape[0], g=g)
        kk = R.shape[0]
        reducible = sq_fro(Sxr[:kk, None] * (Vxr_h @ Z) - Uxr[:, :kk].T @ Y)
        dev = max(dev, abs(sq_fro(X @ R.T @ Z - Y) - irreducible - reducible) / scale)
    holds = dev <= RTOL
    return CheckResult(
        "error-decomposition", LABEL,
        "min_Z ‖XRᵀZ − Y‖² = ‖(U_xr Ī_{m−k})ᵀY‖² + min ‖Σ_xr Z' − (U_xr I_k)ᵀY‖²",
        holds, dev / RTOL, 1, counterexample=None if holds else {"seed": seed, "deviation": dev},
        reasoning="U_xr is orthogonal, so the residual splits into the rows in range(XRᵀ) (fitted exactly at "
                  "the optimum) and the m − k rows orthogonal to it (irreducible).",
        details={"irreducible": irreducible, "optimum": f_opt},
    )


def check_printed_hh_pinv_identity(X: Tensor, *, seed: int) -> CheckResult:
    """The derivation's ``XᵀU_x(Σ̃_x†)ᵀV_x = HH†`` as printed (fails) — with V_xᵀ it holds."""
    X = X.double()
    m, d = X.shape
    U, S, Vh = torch.linalg.svd(X, full_matrices=True)
    St = torch.zeros(m, d, dtype=torch.float64)
    St[: S.numel(), : S.numel()] = torch.diag(S)
    St_pinv = torch.linalg.pinv(St)  # d×m
    H = X.T @ X / m
    HHp = H @ torch.linalg.pinv(H, hermitian=True)
    printed = X.T @ U @ St_pinv.T @ Vh.T  # … V_x (V = Vhᵀ)
    corrected = X.T @ U @ St_pinv.T @ Vh  # … V_xᵀ
    dev_printed = float((printed - HHp).norm() / HHp.norm())
    dev_corrected = float((corrected - HHp).norm() / HHp.norm())
    holds = dev_printed <= RTOL
    return CheckResult(
        "printed-HH†-identity", LABEL, "XᵀU_x(Σ̃_x†)ᵀV_x = HH† (as printed in the derivation of R̃)", holds,
        dev_printed / RTOL, 1,
        counterexample=None if holds else {"seed": seed, "shape(m,d)": [m, d], "rel_dev_printed": dev_printed,
                                           "rel_dev_with_V_transposed": dev_corrected},
        reasoning="XᵀU(Σ̃†)ᵀ = VΣ̃ᵀ(Σ̃†)ᵀ, so the product must end in Vᵀ to give the projector VPVᵀ = HH†; the "
                  "final formula R̃ = L†AHH† is nevertheless right.",
        details={"rel_dev_printed": dev_printed, "rel_dev_corrected": dev_corrected},
        kind="proof-step",
    )


def random_instance(seed: int, n: int, d: int, m: int, k: int, cond: float = 1e2) -> dict[str, Tensor]:
    g = gen(seed)
    r = min(m, d)
    spectrum = torch.logspace(0, -float(torch.log10(torch.tensor(cond))), r, dtype=torch.float64)
    X = matrix_with_spectrum(m, d, spectrum, g)
    A = randn(n, d, g=g)
    return {"A": A, "X": X, "R": randn(k, d, g=g), "L": randn(n, k, g=g)}


def run(profile: Profile) -> list[CheckResult]:
    out: dict[str, list[CheckResult]] = {}
    for i in range(profile.examples):
        seed = 2000 + i
        n, d, k = 7 + i % 5, 10 + i % 4, 1 + i % 3
        for m in (d + 3, d - 2):  # H positive definite, and singular (m < d)
            inst = random_instance(seed, n, d, m, k, cond=10 ** (1 + i % 3))
            A, X = inst["A"], inst["X"]
            out.setdefault("left-update", []).append(check_left_update(A, X, inst["R"], seed=seed))
            out.setdefault("right-update", []).append(check_right_update(A, X, inst["L"], seed=seed))
            out.setdefault("error-decomposition", []).append(
                check_error_decomposition(A, X, inst["R"], seed=seed))
        X = random_instance(seed, n, d, d - 2, k)["X"]
        out.setdefault("printed-HH†-identity", []).append(check_printed_hh_pinv_identity(X, seed=seed))
    return [combine(v, claim=k) for k, v in out.items()]
