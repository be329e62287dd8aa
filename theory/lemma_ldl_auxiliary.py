"""App. F.1 auxiliary linear-algebra lemmas (labels ``lem:upper_bound_LDL_decomposition_eigenvalue``,
``lemma:loewner_order-matrix-product``, ``lem:lower-bound-minimum-singular-value-matrix-sum``).

* LDL lemma: *"Suppose the LDL decomposition of a matrix H ∈ R^{d×d} is given by H = (M + I)D(M + I)ᵀ, where M
  is strictly upper triangular and D is diagonal. Then, max_j D_jj ≤ λ_max."* Its proof writes
  *"e_jᵀHe_j = D_jj + Σ_{i>j} M_ji²"*, which drops the factor D_ii (correct: Σ_{i>j} M_ji² D_ii); the
  conclusion survives because D_ii ≥ 0.
* Loewner ordering: *"For any matrix A and B, σ_min²(A) BᵀB ≼ BᵀAᵀAB ≼ σ_max²(A) BᵀB."* App. A defines
  σ_min(A) = σ_r(A), r = rank(A) (the smallest *non-zero* singular value). The upper bound always holds; the
  lower bound needs ker(A) = {0} (A of full column rank): for a wide or rank-deficient A and B with columns in
  ker(A) it fails.
* Minimum singular value: *"For matrices A and B, σ_min(A + B) ≥ σ_min(A) − ‖B‖."* True (Weyl) when σ_min is
  the min(p, q)-th singular value (zeros included); false with App. A's convention σ_min = σ_rank when A is
  rank deficient.

Library: :func:`caldera.algorithm.ldl.block_ldl` (H = L D Lᵀ, L unit block-lower-triangular). The paper's upper form
(M + I) D (M + I)ᵀ is obtained from the lower one of the index-reversed matrix. The block version used by
BlockLDLQ is checked too: max_k λ_max(D_k) ≤ λ_max(H).
"""

from __future__ import annotations

import torch
from torch import Tensor

from caldera.algorithm.ldl import block_ldl
from caldera.synthetic import calibration_hessian
from theory.common import CheckResult, Profile, combine, gen, matrix_with_spectrum, randn

LABEL_LDL = "lem:upper_bound_LDL_decomposition_eigenvalue"
LABEL_LOEWNER = "lemma:loewner_order-matrix-product"
LABEL_MINSV = "lem:lower-bound-minimum-singular-value-matrix-sum"
TOL = 1e-9


def upper_ldl(H: Tensor) -> tuple[Tensor, Tensor]:
    """(M, D) with H = (M + I) diag(D) (M + I)ᵀ, M strictly upper triangular, via the library's block_ldl(·, 1)."""
    H = H.double()
    d = H.shape[0]
    p = torch.arange(d - 1, -1, -1)
    Lr, Dr = block_ldl(H[p][:, p], 1)  # H[p,p] = Lr Dr Lrᵀ, Lr unit lower
    U = Lr[p][:, p]  # unit upper
    return U - torch.eye(d, dtype=H.dtype), Dr.reshape(-1)[p]


def check_ldl_pivot_bound(H: Tensor, *, seed: int, block: int = 1, bound_factor: float = 1.0) -> CheckResult:
    """max_j D_jj ≤ bound_factor · λ_max(H) (block = 1: the paper's scalar upper LDL; block > 1: the library's
    block LDL with λ_max(D_k)). Also checks the factorization reconstructs H."""
    H = H.double()
    lam_max = float(torch.linalg.eigvalsh(H)[-1])
    if block == 1:
        M, D = upper_ldl(H)
        I = torch.eye(H.shape[0], dtype=H.dtype)
        recon = (M + I) @ torch.diag(D) @ (M + I).T
        dmax = float(D.max())
        form = "H = (M+I)D(M+I)ᵀ, M strictly upper"
    else:
        L, Db = block_ldl(H, block)
        recon = L @ torch.block_diag(*Db) @ L.T
        dmax = float(torch.linalg.eigvalsh(Db)[:, -1].max())
        form = f"H = LDLᵀ with {block}×{block} blocks (library BlockLDLQ)"
    recon_dev = float((recon - H).norm() / H.norm())
    ratio = dmax / (bound_factor * lam_max)
    holds = ratio <= 1 + TOL and recon_dev <= 1e-9
    return CheckResult(
        f"ldl-pivot-bound[block={block}]", LABEL_LDL, f"max_j D_jj ≤ λ_max(H) ({form})", holds, ratio, 1,
        counterexample=None if holds else {"seed": seed, "d": H.shape[0], "max_D": dmax,
                                           "lambda_max": lam_max,
                                           "bound_factor": bound_factor, "recon_dev": recon_dev},
        reasoning="Each pivot D_jj is a Schur complement of a principal submatrix, so D_jj ≤ H_jj = e_jᵀHe_j "
                  "≤ λ_max (diagonal H attains equality).",
        details={"max_D": dmax, "lambda_max": lam_max, "recon_dev": recon_dev},
        kind="statement" if block == 1 else "library",
    )


def check_ldl_printed_identity(H: Tensor, *, seed: int) -> CheckResult:
    """The proof's ``e_jᵀHe_j = D_jj + Σ_{i>j} M_ji²`` as printed (the correct one has M_ji² D_ii)."""
    H = H.double()
    M, D = upper_ldl(H)
    diag = torch.diagonal(H)
    printed = D + (M**2).sum(dim=1)
    corrected = D + (M**2) @ D
    dev_p = float((printed - diag).abs().max() / diag.abs().max())
    dev_c = float((corrected - diag).abs().max() / diag.abs().max())
    holds = dev_p <= 1e-9
    return CheckResult(
        "ldl-proof-identity", LABEL_LDL, "e_jᵀHe_j = D_jj + Σ_{i>j} M_ji² (as printed in the proof)", holds,
        dev_p / 1e-9, 1,
        counterexample=None if holds else {"seed": seed, "d": H.shape[0], "rel_dev_printed": dev_p,
                                           "rel_dev_with_D_ii": dev_c},
        reasoning="(M+I)D(M+I)ᵀ has diagonal D_jj + Σ_{i>j} M_ji² D_ii; the printed identity is right only "
                  "when D = I, but the lemma's conclusion follows from the corrected one since D_ii ≥ 0.",
        details={"rel_dev_printed": dev_p, "rel_dev_corrected": dev_c},
        kind="proof-step",
    )


def _sv_min(A: Tensor, convention: str) -> float:
    s = torch.linalg.svdvals(A.double())
    if convention == "weyl":  # σ_{min(p,q)}, zeros included
        return float(s[-1])
    nz = s[s > 1e-10 * s[0]]  # App. A: σ_min = σ_rank, the smallest non-zero singular value
    return float(nz[-1]) if nz.numel() else 0.0


def check_loewner(A: Tensor, B: Tensor, *, seed: int, side: str = "both",
                  bound_factor: float = 1.0) -> CheckResult:
    """σ_min²(A)BᵀB ≼ BᵀAᵀAB ≼ σ_max²(A)BᵀB with σ_min = σ_rank(A) (App. A).

    ratio = 1 + (largest eigenvalue of the violated difference) / scale; ``bound_factor`` scales σ_max² down
    (sensitivity: a tightened upper bound).
    """
    A, B = A.double(), B.double()
    s = torch.linalg.svdvals(A)
    smin, smax = _sv_min(A, "paper"), float(s[0])
    BB, M = B.T @ B, B.T @ A.T @ A @ B
    scale = smax**2 * float(torch.linalg.eigvalsh(BB)[-1]) + 1e-300
    viol_lo = viol_hi = 0.0
    if side in ("both", "lower"):
        viol_lo = float(torch.linalg.eigvalsh(smin**2 * BB - M)[-1]) / scale
    if side in ("both", "upper"):
        viol_hi = float(torch.linalg.eigvalsh(M - bound_factor * smax**2 * BB)[-1]) / scale
    viol = max(viol_lo, viol_hi)
    holds = viol <= TOL
    return CheckResult(
        f"loewner[{side}]", LABEL_LOEWNER, "σ_min²(A)BᵀB ≼ BᵀAᵀAB ≼ σ_max²(A)BᵀB (σ_min = σ_rank(A))", holds,
        1 + max(viol, 0.0), 1,
        counterexample=None if holds else {"seed": seed, "A.shape": list(A.shape), "B.shape": list(B.shape),
                                           "rank(A)": int(torch.linalg.matrix_rank(A)),
                                           "lower_violation": viol_lo, "upper_violation": viol_hi},
        reasoning="vᵀBᵀAᵀABv = ‖ABv‖² ≤ σ_max²‖Bv‖² always; ‖ABv‖² ≥ σ_min²‖Bv‖² needs Bv ⟂ ker(A), i.e. A "
                  "of full column rank, otherwise a v with Bv ∈ ker(A) \\ {0} breaks it.",
        details={"lower_violation": viol_lo, "upper_violation": viol_hi, "sigma_min": smin,
                 "sigma_max": smax},
    )


def check_min_singular_value(A: Tensor, B: Tensor, *, seed: int, convention: str = "paper",
                             norm_factor: float = 1.0) -> CheckResult:
    """σ_min(A + B) ≥ σ_min(A) − norm_factor·‖B‖ under ``convention`` ("paper": σ_rank; "weyl": σ_min(p,q));
    ``norm_factor`` < 1 tightens the bound (sensitivity)."""
    A, B = A.double(), B.double()
    lhs = _sv_min(A + B, convention)
    rhs = _sv_min(A, convention) - norm_factor * float(torch.linalg.matrix_norm(B, ord=2))
    holds = lhs >= rhs - TOL * max(1.0, abs(rhs))
    ratio = rhs / lhs if lhs > 0 else (float("inf") if rhs > 0 else 0.0)
    return CheckResult(
        f"min-singular-value[{convention}]", LABEL_MINSV,
        f"σ_min(A+B) ≥ σ_min(A) − ‖B‖ (σ_min: {convention})",
        holds, ratio, 1,
        counterexample=None if holds else {"seed": seed, "A.shape": list(A.shape),
                                           "rank(A)": int(torch.linalg.matrix_rank(A)), "sigma_min(A+B)": lhs,
                                           "sigma_min(A)-||B||": rhs},
        reasoning="Weyl: |σ_i(A+B) − σ_i(A)| ≤ ‖B‖ for every index i, so the bound holds for the min(p,q)-th "
                  "singular value; with σ_min = σ_rank a rank-deficient A (σ_rank(A) > 0) plus a small B "
                  "that fills the kernel gives σ_rank(A+B) ≈ ‖B‖ < σ_rank(A) − ‖B‖.",
        details={"lhs": lhs, "rhs": rhs},
    )


# ------------------------------------------------------------------------------------------- instances


def wide_kernel_instance(seed: int, p: int = 4, q: int = 6, r: int = 3) -> tuple[Tensor, Tensor]:
    """A (p×q, p < q: non-trivial kernel) and B (q×r) whose first column lies in ker(A): BᵀAᵀAB is singular while
    σ_rank(A)²BᵀB is not, so the Loewner lower bound fails."""
    g = gen(seed)
    A = randn(p, q, g=g)
    B = randn(q, r, g=g)
    _, _, Vh = torch.linalg.svd(A, full_matrices=True)
    B[:, 0] = Vh[-1]
    return A, B


def random_hessian(seed: int, d: int, cond: float, m: int | None = None) -> Tensor:
    return calibration_hessian(d, seed=seed, cond=cond, m=m)


def run(profile: Profile) -> list[CheckResult]:
    out: dict[str, list[CheckResult]] = {}
    for i in range(profile.examples):
        seed = 4000 + i
        g = gen(seed)
        d = 16 + 8 * (i % 3)
        H = random_hessian(seed, d, cond=10 ** (1 + i % 5), m=None if i % 2 else 4 * d)
        Hdiag = torch.diag(torch.rand(d, generator=g, dtype=torch.float64) + 0.1)
        for Hi in (H, Hdiag):
            for block, claim in ((1, "ldl-pivot-bound[scalar, paper form]"), (8, "ldl-pivot-bound[8×8 blocks]")):
                out.setdefault(claim, []).append(check_ldl_pivot_bound(Hi, seed=seed, block=block))
        out.setdefault("ldl-proof-identity", []).append(check_ldl_printed_identity(H, seed=seed))
        p, q, r = 6 + i % 3, 4 + i % 2, 3 + i % 4
        A_tall = randn(p, q, g=g)
        out.setdefault("loewner[full-column-rank A]", []).append(check_loewner(A_tall, randn(q, r, g=g), seed=seed))
        A_wide = randn(q, p, g=g)  # wide: nontrivial kernel
        out.setdefault("loewner-upper[wide A]", []).append(
            check_loewner(A_wide, randn(p, r, g=g), seed=seed, side="upper"))
        out.setdefault("loewner-lower[wide A]", []).append(
            check_loewner(*wide_kernel_instance(seed, q, p, r), seed=seed, side="lower"))
        A_def = matrix_with_spectrum(p, p, torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64), g)
        Bs = 1e-2 * randn(p, p, g=g)
        out.setdefault("min-sv[Weyl σ_min(p,q), rank-deficient A]", []).append(
            check_min_singular_value(A_def, Bs, seed=seed, convention="weyl"))
        out.setdefault("min-sv[Weyl σ_min(p,q), full-rank A]", []).append(
            check_min_singular_value(randn(p, q, g=g), 0.3 * randn(p, q, g=g), seed=seed, convention="weyl"))
        out.setdefault("min-sv[paper σ_min = σ_rank]", []).append(
            check_min_singular_value(A_def, Bs, seed=seed, convention="paper"))
    return [combine(v, claim=k) for k, v in out.items()]
