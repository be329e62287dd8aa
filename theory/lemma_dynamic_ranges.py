"""App. C.2 — dynamic ranges of the quantizers (labels ``lem:maxnorm_right_quantizer`` and
``lem:maxnorm_left_quantizer``).

* Right quantizer: *"Given matrices A ∈ R^{n×d} and X ∈ R^{m×d}, let σ_max denote the maximum singular value of
  XAᵀ. Then, the quantizer Q_R remains unsaturated if the dynamic range is chosen to be R_R = σ_max."* Its input
  is I_kᵀΣ̃Ṽᵀ (Alg. 2 line 3), and ‖·‖_max ≤ ‖·‖_2 = σ_max.
* Left quantizer: *"[…] let λ_min denote the smallest eigenvalue of H = XᵀX/m, and let σ_max and σ_k denote the
  largest and the k-th singular values of XAᵀ. For some small ε > 0 and an absolute constant C, suppose the number
  of bits for the right quantizer Q_R satisfies B_R ≥ log₂(4Cσ_max/(σ_k log 2)(√d + √k +
  √(log(8‖XAᵀ‖_F²/ε)))).
  Then, if the dynamic range of Q_L is chosen to be R_L = 2σ_max/(σ_k√(mλ_min)), then Q_L remains unsaturated with
  probability exceeding 1 − 0.25 ε ‖XAᵀ‖_F⁻²."* (The statement declares X ∈ R^{m×n}; it is m×d.)

What is checked (the second factor is formed as in :mod:`theory.lemma_lplr_error`, the only
dimensionally consistent reading of the proof):

* ``right-range`` — max-norm of the library's ``rank_constrained_regression(X, XAᵀ, k).right`` (= I_kᵀΣ̃Ṽᵀ) over
  σ_max(XAᵀ) (ratio ≤ 1; tight when the top right singular vector of XAᵀ is a coordinate vector);
* ``left-range-deterministic`` — the proof's implication ‖E_R‖ ≤ σ_k/2 ⇒ ‖G̃‖_max ≤ R_L on every draw;
* ``left-saturation`` — Monte Carlo saturation frequency with B_R at the bound (C = 1), Clopper–Pearson interval
  at α = 1e-6 against 0.25ε‖XAᵀ‖_F⁻²; plus the smallest C on a grid for which no violation is detected (the lemma
  only promises *some* absolute C).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from caldera.algorithm.regression import rank_constrained_regression
from theory.common import ALPHA, CheckResult, Profile, clopper_pearson, combine, gen, randn, sq_fro
from theory.lemma_lplr_error import instance, run_procedure, setup

LABEL_R = "lem:maxnorm_right_quantizer"
LABEL_L = "lem:maxnorm_left_quantizer"


def check_right_range(A: Tensor, X: Tensor, k: int, *, seed: int, bound_factor: float = 1.0) -> CheckResult:
    """‖I_kᵀΣ̃Ṽᵀ‖_max ≤ bound_factor · σ_max(XAᵀ)."""
    A, X = A.double(), X.double()
    Y = X @ A.T
    S = rank_constrained_regression(X, Y, k).right.double()
    s1 = float(torch.linalg.svdvals(Y)[0])
    ratio = float(S.abs().max()) / (bound_factor * s1)
    holds = ratio <= 1 + 1e-9
    return CheckResult(
        "right-range", LABEL_R, "‖I_kᵀΣ̃Ṽᵀ‖_max ≤ σ_max(XAᵀ) = R_R (Q_R unsaturated)", holds, ratio, 1,
        counterexample=None if holds else {"seed": seed, "max_norm": float(S.abs().max()), "sigma_max": s1,
                                           "bound_factor": bound_factor},
        reasoning="‖M‖_max ≤ ‖M‖_2 and ‖I_kᵀΣ̃Ṽᵀ‖_2 = σ̃_1 = σ_max(UᵀXAᵀ) = σ_max(XAᵀ); equality when ṽ_1 is a "
                  "coordinate vector.",
        details={"max_norm": float(S.abs().max()), "sigma_max": s1},
    )


def tight_right_instance(seed: int, n: int = 12, d: int = 10, m: int = 8) -> tuple[Tensor, Tensor]:
    """A whose first row dominates, so XAᵀ's top right singular vector is ≈ e_1 and the bound is nearly tight."""
    g = gen(seed)
    A = 1e-3 * randn(n, d, g=g)
    A[0] = randn(d, g=g)
    return A, randn(m, d, g=g)


def check_left_range_deterministic(A: Tensor, X: Tensor, k: int, eps: float, *, seed: int, trials: int = 100,
                                   bits_R: int | None = None, range_factor: float = 1.0) -> CheckResult:
    """On every draw with ‖E_R‖ ≤ σ_k/2: ‖G̃‖_max ≤ range_factor·R_L. ratio = max ‖G̃‖_max / R_L over those draws."""
    st = setup(A, X, k, eps, bits_R=bits_R)
    g = gen(seed)
    sk = float(st.sigma[k - 1])
    worst, used = 0.0, 0
    for _ in range(trials):
        r = run_procedure(A, X, st, g)
        if r["E_R_norm"] <= sk / 2:
            used += 1
            worst = max(worst, r["second_factor_maxnorm"] / (range_factor * st.R_L))
    holds = worst <= 1 + 1e-9
    return CheckResult(
        "left-range-deterministic", LABEL_L, "‖E_R‖ ≤ σ_k/2 ⇒ ‖G̃‖_max ≤ R_L = 2σ_max/(σ_k√(mλ_min))", holds,
        worst,
        used, counterexample=None if holds else {"seed": seed, "worst_ratio": worst, **st.as_dict()},
        reasoning="‖G̃‖_max ≤ ‖F†‖‖A‖ ≤ (σ_k − ‖E_R‖)⁻¹ σ_max/√(mλ_min) ≤ 2σ_max/(σ_k√(mλ_min)) (Weyl for "
                  "σ_k(F), and σ_max(XAᵀ) ≥ √(mλ_min)‖A‖).",
        details={"worst_ratio": worst, "draws_with_small_E_R": used, "trials": trials, **st.as_dict()},
        kind="proof-step",
    )


def saturation_frequency(A: Tensor, X: Tensor, k: int, eps: float, *, seed: int, trials: int, C: float = 1.0,
                         bits_R: int | None = None, range_factor_L: float = 1.0) -> tuple[int, int, float]:
    """(saturations, trials, lemma bound 0.25 ε/‖XAᵀ‖²) with B_R = ⌈B_2(C)⌉ (the lemma's hypothesis)."""
    st0 = setup(A, X, k, eps, C=C)
    B_R = bits_R if bits_R is not None else max(1, math.ceil(st0.B_2))
    st = setup(A, X, k, eps, C=C, bits_R=B_R, range_factor_L=range_factor_L)
    g = gen(seed)
    sat = sum(int(run_procedure(A, X, st, g)["saturated"]) for _ in range(trials))
    return sat, trials, 0.25 * eps / sq_fro(X.double() @ A.double().T)


def check_left_saturation(A: Tensor, X: Tensor, k: int, eps: float, *, seed: int, trials: int = 200,
                          C: float = 1.0, bits_R: int | None = None,
                          range_factor_L: float = 1.0) -> CheckResult:
    """P(Q_L saturated) ≤ 0.25 ε ‖XAᵀ‖_F⁻²: fails when the Clopper–Pearson lower limit exceeds the bound.
    ``range_factor_L`` < 1 shrinks R_L (sensitivity: a too-small range must be caught)."""
    sat, n, bound = saturation_frequency(A, X, k, eps, seed=seed, trials=trials, C=C, bits_R=bits_R,
                                         range_factor_L=range_factor_L)
    lo, hi = clopper_pearson(sat, n, ALPHA)
    holds = lo <= bound
    B_R = bits_R if bits_R is not None else math.ceil(setup(A, X, k, eps, C=C).B_2)
    return CheckResult(
        f"left-saturation[C={C:g}]", LABEL_L, "P(Q_L saturated) ≤ 0.25 ε ‖XAᵀ‖_F⁻² with B_R ≥ B_2(C) "
        "(Clopper–Pearson, α = 1e-6)", holds, (sat / n) / bound, n,
        counterexample=None if holds else {"seed": seed, "C": C, "B_R": B_R, "saturations": sat, "trials": n,
                                           "cp_lower": lo, "bound": bound},
        reasoning="With B_R ≥ B_2 the dither error satisfies ‖E_R‖ ≤ σ_k/2 except with probability 2e^{−t²} "
                  "= ε/(4‖XAᵀ‖²) (subgaussian spectral bound), and then the deterministic implication gives "
                  "no saturation; the absolute constant C is unspecified, so only 'some C works' is testable.",
        details={"saturations": sat, "trials": n, "frequency": sat / n, "cp": [lo, hi], "bound": bound,
                 "C": C,
                 "B_R": B_R},
    )


def smallest_passing_C(A: Tensor, X: Tensor, k: int, eps: float, *, seed: int, trials: int = 200,
                       grid: tuple[float, ...] = (1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01)) -> float:
    """Smallest C on ``grid`` (descending) for which the saturation test does not reject."""
    best = math.inf
    for C in grid:
        if check_left_saturation(A, X, k, eps, seed=seed, trials=trials, C=C).holds:
            best = C
        else:
            break
    return best


def run(profile: Profile) -> list[CheckResult]:
    out: dict[str, list[CheckResult]] = {}
    trials = max(100, profile.trials)
    for i in range(profile.examples):
        seed = 5000 + i
        n, d = (24, 16) if i % 2 == 0 else (16, 24)
        k = 2 + i % 3
        A, X = instance(seed, n, d, cond=10 ** (1 + i % 3))
        Y = X @ A.T
        eps = 0.5 * sq_fro(Y)  # a bound 0.25ε/‖XAᵀ‖² = 1/8 that a Monte Carlo run can contradict
        out.setdefault("right-range", []).append(check_right_range(A, X, k, seed=seed))
        At, Xt = tight_right_instance(seed)
        out.setdefault("right-range", []).append(check_right_range(At, Xt, k, seed=seed))
        out.setdefault("left-range-deterministic", []).append(
            check_left_range_deterministic(A, X, k, eps, seed=seed, trials=max(20, trials // 5)))
        r = check_left_saturation(A, X, k, eps, seed=seed, trials=trials, C=1.0)
        if i == 0:
            r.details["smallest_C_without_violation"] = smallest_passing_C(
                A, X, k, eps, seed=seed, trials=max(50, trials // 2))
        out.setdefault("left-saturation[C=1]", []).append(r)
    return [combine(v, claim=c) for c, v in out.items()]
