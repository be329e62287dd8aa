"""Theorem 4.1 (informal, §4, label ``thm:approximation-error-Q-plus-LR``) and Theorem C.1 (formal, App. C.3,
label ``thm:approximation-error-Q-plus-LR-formal``) — approximation error of CALDERA.

Formal: under the LPLR lemma's conditions (k range, R_L, R_R, B_L, B_R, ε),

    E‖(Q + LR − W)Xᵀ‖² ≤ m Σ_{i>k} E λ_i(ηDηᵀ) + ε ≲ 4mdλ_max R²/(π(2^{B_Q} − 1)²) · (1 − k/n)(n − k/2) + ε,

with D from XᵀX = mH = (M + I)D(M + I)ᵀ and λ_max = λ_max(H). Informal:

    (1/nm) E‖(Q + LR − W)Xᵀ‖² ≤ (1/n) Σ_{i>k} E λ_i(ηDηᵀ) + ε ≲ 4dλ_max R²/(π(2^{B_Q} − 1)²) (1 − k/2n)² + ε,

and the regimes (i) *"B_Q ≥ log₂(2R(πε)^{-1/2}√(nmdλ_max) + 1) then E‖…‖² ≤ 2ε"*, (ii) *"k ≥ 2n −
(2^{B_Q} − 1)R⁻¹(πε)^{1/2}(mdλ_max^{-1/2})√n ensures E‖…‖² ≤ 2ε"*.

Procedure: the theorem's own — the library's BlockLDLQ (``block_ldl`` + ``block_ldlq``) with the dithered
quantizer ``DitheredUniform(R, B_Q)`` (R chosen so that it never saturates), then the LPLR lemma's procedure
(:mod:`theory.lemma_lplr_error`) on W − Q with ranges and budgets from the singular values of X(W − Q)ᵀ.
(``caldera_decompose`` uses lattice quantizers scaled by the RMS, which have no dynamic range R, so the theorem's
hypotheses do not apply to it.)

What is checked:

* ``first-inequality`` — E‖…‖² ≤ Σ_{i>k} Eλ_i(ηDηᵀ) + ε (the proof's bound; the statement's extra factor m only
  loosens it) on LLM-like W, H over growing sizes (CLT test, α = 1e-6).
* ``formal-rhs`` / ``informal-rhs`` — measured ratios to the final right-hand sides over sizes.
* ``formal-mp-bound`` — a counterexample to the formal "≲": W on the cell midpoints of the B_Q-bit grid (so every
  dithered error is ±Δ/2, variance Δ²/4 — the lemma's bound, attained), H = I, n/d = 1/64, k/n = 7/8. Then
  E Σ_{i>k} λ_i(ηDηᵀ) — a lower bound of the left-hand side, since the LPLR step cannot beat the best rank-k
  fit — exceeds the formal right-hand side by ≈ 14% at every n, converging to the MP value 1.134. Cause: the
  (n − k) prefactor of eq. MP_upper_bound (see :mod:`theory.marchenko_pastur`), which loses a factor
  (1 − k/n); the informal (1 − k/2n)² form and the corrected (1 − k/2n) form hold there.
* ``regime-ii`` — the printed k-threshold has (md λ_max^{-1/2}) where the derivation gives (mdλ_max)^{-1/2}: with
  H = I, n = d = m = 32, B_Q = 2, ε = 1 it allows k = 4 while the error is thousands of times 2ε.
* ``regime-i`` — with B_Q at the printed threshold the error is ≤ 2ε (holds).
* ``informal-vs-formal`` — the two statements disagree: nm·(informal) has ε·nm and (1 − k/2n)² where the formal has
  ε and (1 − k/n)(1 − k/2n); both middle terms carry a factor m that the proof does not produce.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from caldera.algorithm.ldl import block_ldl
from caldera.algorithm.ldlq import block_ldlq
from caldera.synthetic import calibration_hessian, decaying_weight
from theory.common import ALPHA, ASYMPTOTIC, CheckResult, Profile, combine, gen, mean_upper_confidence
from theory.dithered import SeededDithered, feedback_gain, step, unsaturated_range
from theory.lemma_lplr_error import run_procedure, setup
from theory.marchenko_pastur import MP

LABEL_F = "thm:approximation-error-Q-plus-LR-formal"
LABEL_I = "thm:approximation-error-Q-plus-LR"


def formal_rhs(n: int, d: int, m: int, k: int, lam_max: float, R: float, bits: int, eps: float) -> float:
    """4mdλ_max R²/(π(2^B − 1)²)(1 − k/n)(n − k/2) + ε."""
    return 4 * m * d * lam_max * R**2 / (math.pi * (2**bits - 1) ** 2) * (1 - k / n) * (n - k / 2) + eps


def informal_rhs_total(n: int, d: int, m: int, k: int, lam_max: float, R: float, bits: int,
                       eps: float) -> float:
    """nm × [4dλ_max R²/(π(2^B − 1)²)(1 − k/2n)² + ε] (the informal bound on E‖…‖² itself)."""
    return n * m * (4 * d * lam_max * R**2 / (math.pi * (2**bits - 1) ** 2) * (1 - k / (2 * n)) ** 2 + eps)


def ldlq_draw(W: Tensor, L: Tensor, R: float, bits: int, g: torch.Generator) -> tuple[Tensor, Tensor, int]:
    """(Q, η = (Q − W)L, saturated entries) from the library's BlockLDLQ with a dithered Q_Q."""
    q = SeededDithered(R, bits, g)
    Q, _ = block_ldlq(W.float(), L.float(), q)
    Q = Q.double()
    return Q, (Q - W.double()) @ L.double(), q.saturated


def trailing_eig_sum(eta: Tensor, D: Tensor, k: int) -> float:
    """Σ_{i>k} λ_i(ηDηᵀ) with D given as (nb, 8, 8) blocks."""
    ev = torch.linalg.eigvalsh(eta @ torch.block_diag(*D) @ eta.T)  # ascending
    n = eta.shape[0]
    return float(ev[: max(n - k, 0)].sum())


def pipeline(W: Tensor, X: Tensor, k: int, R: float, bits: int, eps: float, trials: int, seed: int) -> dict:
    """Theorem procedure, ``trials`` draws: errors, trailing sums Σ_{i>k}λ_i(ηDηᵀ), saturation and scope flags."""
    W, X = W.double(), X.double()
    mH = X.T @ X
    L, D = block_ldl(mH, 8)
    g = gen(seed)
    errs, xis, sats, scope = [], [], 0, 0
    for _ in range(trials):
        Q, eta, sat = ldlq_draw(W, L, R, bits, g)
        sats += sat
        xis.append(trailing_eig_sum(eta, D, k))
        A = W - Q
        st = setup(A, X, k, eps)
        scope += int(st.k_condition and st.eps_condition)
        r = run_procedure(A, X, st, g)
        errs.append(r["error"])
    return {"errors": torch.tensor(errs, dtype=torch.float64), "xis": torch.tensor(xis, dtype=torch.float64),
            "saturated": sats, "in_scope": scope, "trials": trials}


def llm_instance(seed: int, n: int, d: int, cond: float = 10.0) -> tuple[Tensor, Tensor]:
    W = decaying_weight(n, d, seed=seed).double()
    H = calibration_hessian(d, seed=seed, cond=cond)
    return W, math.sqrt(d) * torch.linalg.cholesky(H).T  # X (d×d), XᵀX = dH


def safe_range(W: Tensor, X: Tensor, bits: int, seed: int) -> float:
    """Dynamic range for Q_Q that kept BlockLDLQ unsaturated in pilot draws (ValueError if none exists)."""
    L, _ = block_ldl(X.double().T @ X.double(), 8)
    R = unsaturated_range(W, L, bits, seed)
    if R is None:
        raise ValueError(f"no unsaturated dynamic range for B_Q = {bits}: LDLQ feedback gain ≥ 1 "
                         f"({feedback_gain(W, L, bits, seed):.2f})")
    return R


def check_unsaturated_range_exists(W: Tensor, X: Tensor, bits: int, *, seed: int,
                                   label_cond: float) -> CheckResult:
    """The theorem assumes R 'high enough' that Q_Q never saturates; that needs the LDLQ feedback gain < 1."""
    L, _ = block_ldl(X.double().T @ X.double(), 8)
    gain = feedback_gain(W, L, bits, seed)
    holds = gain < 1
    return CheckResult(
        f"assumption: unsaturated Q_Q exists[B_Q={bits}, cond(H)={label_cond:g}, n={W.shape[0]}]", LABEL_F,
        "some dynamic range R keeps the dithered Q_Q unsaturated inside LDLQ (assumption of §4)", holds, gain, 1,
        counterexample=None if holds else {"seed": seed, "n": W.shape[0], "d": W.shape[1], "B_Q": bits,
                                           "cond(H)": label_cond, "max|input|/R as R→∞": gain},
        reasoning="LDLQ inputs are W plus fed-back errors of size up to Δ = 2R/(2^B − 1), so max|input| ≈ "
                  "max|W| + c·R; when the feedback gain c ≥ 1 (coarse B_Q and strongly correlated H) every R "
                  "saturates.",
        details={"gain": gain},
        kind="assumption",
    )


def check_library_first_inequality(n: int, d: int, k: int, *, seed: int, outer_iters: int = 1, cond: float = 1e2,
                                   bound_factor: float = 1.0) -> CheckResult:
    """The theorem's first inequality for the library's own ``caldera.algorithm.decomposition.caldera_decompose``.

    With Q₁ = LDLQ(W) the first Q step (Q-first, Alg. 1 line 3) and η = (Q₁ − W)L (H = L D Lᵀ, the block LDL the
    library's BlockLDLQ uses), the proof bounds the error by Σ_{i>k} λ_i(ηDηᵀ) plus the LPLR excess ε. With 16-bit
    factors (closed form, ε = fp16 rounding only) and T_out = 1 this is an equality (Eckart–Young on
    (W − Q₁)H^{1/2}, whose Gram matrix is ηDηᵀ); the best of T_out > 1 iterates can only be lower. Everything is in
    the RHT basis, where the data-aware error is unchanged. ratio = error / (bound_factor · Σ_{i>k}λ_i(ηDηᵀ)).
    """
    from caldera.algorithm.config import CalderaConfig
    from caldera.algorithm.decomposition import HessianContext, caldera_decompose

    W = decaying_weight(n, d, seed=seed)
    H = calibration_hessian(d, seed=seed, cond=cond)
    cfg = CalderaConfig(rank=k, l_bits=16, r_bits=16, outer_iters=1, seed=seed)
    first = caldera_decompose(W, H, cfg)
    dec = first if outer_iters == 1 else caldera_decompose(W, H, cfg.replace(outer_iters=outer_iters))
    Hr = HessianContext.prepare(H, rht=True, seed=seed, sigma_reg=cfg.sigma_reg).H_rot.double()
    Wr = first.rht.rotate_W(W).double()
    L, D = block_ldl(Hr, 8)
    xi = trailing_eig_sum((first.Q.double() - Wr) @ L.double(), D.double(), k)
    Delta = dec.rotated_reconstruction().double() - Wr
    err = float(((Delta @ Hr) * Delta).sum())
    ratio = err / (bound_factor * xi)
    holds = ratio <= 1 + 1e-3  # fp16 storage of the factors
    return CheckResult(
        f"library-first-inequality[T_out={outer_iters}]", LABEL_F,
        "caldera_decompose (16-bit factors): ‖(Q + LR − W)Xᵀ‖² ≤ Σ_{i>k}λ_i(ηDηᵀ) (+ ε = 0)", holds, ratio, 1,
        counterexample=None if holds else {"seed": seed, "n": n, "d": d, "k": k, "error": err, "xi": xi,
                                           "outer_iters": outer_iters, "bound_factor": bound_factor},
        reasoning="(W − Q₁)H(W − Q₁)ᵀ = ηL⁻¹(LDLᵀ)L⁻ᵀηᵀ = ηDηᵀ, so the best rank-k data-aware fit of W − Q₁ leaves "
                  "exactly Σ_{i>k}λ_i(ηDηᵀ); Alg. 1 returns the best iterate, never worse than the first.",
        details={"error": err, "xi": xi, "best_iter": dec.best_iter},
        kind="library",
    )


def check_first_inequality(sizes: list[tuple[int, int, int]], *, seed: int, bits: int = 2, trials: int = 30,
                           eps_rel: float = 0.05, bound_factor: float = 1.0) -> list[CheckResult]:
    """E‖(Q + LR − W)Xᵀ‖² vs Σ_{i>k}Eλ_i(ηDηᵀ) + ε and both final right-hand sides, per size (n, d, k)."""
    rows = []
    first, formal, informal = [], [], []
    for j, (n, d, k) in enumerate(sizes):
        W, X = llm_instance(seed + j, n, d)
        m = X.shape[0]
        R = safe_range(W, X, bits, seed + j)
        lam_max = float(torch.linalg.eigvalsh(X.T @ X / m)[-1])
        # ε relative to the expected trailing sum, estimated from a pilot draw
        L, D = block_ldl(X.T @ X, 8)
        pilot = trailing_eig_sum(ldlq_draw(W, L, R, bits, gen(seed))[1], D, k)
        eps = eps_rel * pilot
        res = pipeline(W, X, k, R, bits, eps, trials, seed + 100 * j)
        mean, lo, hi = mean_upper_confidence(res["errors"], ALPHA)
        xi = float(res["xis"].mean())
        b1 = bound_factor * (xi + eps)
        # paired test of E[err − bf·ξ] ≤ bf·ε (err and ξ = Σ_{i>k}λ_i(ηDηᵀ) come from the same draws)
        _, lo_pair, _ = mean_upper_confidence(res["errors"] - bound_factor * res["xis"], ALPHA)
        f = formal_rhs(n, d, m, k, lam_max, R, bits, eps)
        inf = informal_rhs_total(n, d, m, k, lam_max, R, bits, eps)
        info = {"n": n, "d": d, "m": m, "k": k, "bits": bits, "R": R, "eps": eps, "seed": seed + 100 * j,
                "mean_error": mean, "lower_conf": lo, "E_trailing": xi, "formal_rhs": f,
                "informal_rhs_total": inf,
                "saturated": res["saturated"], "lemma_conditions_met": f"{res['in_scope']}/{trials}"}
        first.append((mean / b1, lo_pair <= bound_factor * eps and res["saturated"] == 0, info))
        formal.append((mean / f, lo <= f, info))
        informal.append((mean / inf, lo <= inf, info))
    for name, label, stmt, data in (
        ("first-inequality", LABEL_F, "E‖(Q + LR − W)Xᵀ‖² ≤ Σ_{i>k} Eλ_i(ηDηᵀ) + ε (LLM-like W, H)", first),
        ("formal-rhs[LLM-like]", LABEL_F, "E‖…‖² ≲ 4mdλ_maxR²/(π(2^B−1)²)(1 − k/n)(n − k/2) + ε", formal),
        ("informal-rhs[LLM-like]", LABEL_I, "(1/nm)E‖…‖² ≲ 4dλ_maxR²/(π(2^B−1)²)(1 − k/2n)² + ε", informal),
    ):
        worst = max(data, key=lambda x: x[0])
        ok = all(x[1] for x in data)
        fail = next((x[2] for x in data if not x[1]), None)
        rows.append(CheckResult(
            name, label, stmt, ok, worst[0], len(data) * trials, counterexample=fail,
            reasoning=("ξ* = Σ_{i>k}σ_i²(X(W − Q)ᵀ) = Σ_{i>k}λ_i(ηDηᵀ) pathwise and the LPLR lemma adds ≤ ε."
                       if name == "first-inequality" else
                       "On LLM-like W and correlated H the bound is loose: max_j D_jj ≪ λ_max(mH) for most j "
                       "and the errors' variance is below Δ²/4."),
            details={"sizes": [x[2] for x in data], "ratios": [x[0] for x in data]},
        ))
    return rows


def midpoint_weights(n: int, d: int, R: float, bits: int, g: torch.Generator) -> Tensor:
    """n×d matrix whose entries are random cell midpoints of the B-bit grid on [−R, R]."""
    dl = step(R, bits)
    j = torch.randint(0, 2**bits - 1, (n, d), generator=g)
    return -R + (j.double() + 0.5) * dl


def check_formal_mp_counterexample(ns: list[int], *, gamma: float = 1 / 64, t: float = 7 / 8, bits: int = 2,
                                   R: float = 1.5, seed: int = 8800, trials: int = 10,
                                   form: str = "formal", bound_factor: float = 1.0) -> CheckResult:
    """E Σ_{i>k}λ_i(ηDηᵀ) / (RHS − ε) for midpoint W, H = I (X = √m I, m = d), growing n at fixed n/d and k/n.

    form: "formal" (4mdR²/(π(2^B−1)²)(1 − k/n)(n − k/2)), "informal" (nm·4dR²/(π(2^B−1)²)(1 − k/2n)²) or
    "corrected" (4mdR²/(π(2^B−1)²)·n(1 − k/2n)). Fails when the CLT lower bound of the mean ratio exceeds 1 at the
    largest n (the left-hand side is at least this trailing sum).
    """
    ratios, per_n = [], []
    lo_last = -math.inf
    for n in ns:
        d = int(round(n / gamma))
        m = d
        k = int(round(t * n))
        g = gen(seed + n)
        L = torch.eye(d, dtype=torch.float64)
        D = m * torch.eye(8, dtype=torch.float64).expand(d // 8, 8, 8)
        first = 4 * m * d * R**2 / (math.pi * (2**bits - 1) ** 2)
        rhs = {"formal": first * (1 - k / n) * (n - k / 2), "informal": n * first * (1 - k / (2 * n)) ** 2,
               "corrected": first * (n - k / 2)}[form] * bound_factor
        rs, sats = [], 0
        for _ in range(trials):
            W = midpoint_weights(n, d, R, bits, g)
            _, eta, sat = ldlq_draw(W, L, R, bits, g)
            sats += sat
            rs.append(trailing_eig_sum(eta, D, k) / rhs)
        r = torch.tensor(rs, dtype=torch.float64)
        mean, lo, _ = mean_upper_confidence(r, ALPHA)
        ratios.append(mean)
        lo_last = lo
        per_n.append({"n": n, "d": d, "m": m, "k": k, "mean_ratio": mean, "lower_conf": lo,
                      "saturated": sats})
    mp = MP(gamma, (step(R, bits) ** 2) / 4)
    q = float(mp.inverse_cdf(torch.tensor([1 - t]))[0])
    limit_num = mp.partial_first_moment(q)
    dl2 = step(R, bits) ** 2
    limit = limit_num / {"formal": dl2 / math.pi * (1 - t) * (1 - t / 2),
                         "informal": dl2 / math.pi * (1 - t / 2) ** 2,
                         "corrected": dl2 / math.pi * (1 - t / 2)}[form]
    holds = lo_last <= 1
    verdict = "" if not holds else (ASYMPTOTIC if max(ratios) > 1 else "")
    return CheckResult(
        f"{form}-mp-bound[midpoint W, H = I]", LABEL_F if form != "informal" else LABEL_I,
        {"formal": "Σ_{i>k}Eλ_i(ηDηᵀ) ≲ 4mdλ_maxR²/(π(2^B−1)²)(1 − k/n)(n − k/2)",
         "informal": "(1/n)Σ_{i>k}Eλ_i(ηDηᵀ)/m ≲ 4dλ_maxR²/(π(2^B−1)²)(1 − k/2n)²",
         "corrected": "Σ_{i>k}Eλ_i(ηDηᵀ) ≲ 4mdλ_maxR²/(π(2^B−1)²)(n − k/2) (prefactor n, not n − k)"}[form],
        holds, max(ratios), len(ns) * trials, verdict=verdict,
        counterexample=None if holds else {"seed": seed, "n/d": gamma, "k/n": t, "bits": bits, "R": R,
                                           "W": "random midpoints of the grid", "H": "I (X = √d I, m = d)",
                                           "per_n": per_n, "MP_limit_ratio": limit},
        reasoning=(f"At midpoints every dithered error is ±Δ/2 (variance exactly Δ²/4), so (1/d)ηηᵀ follows MP with "
                   f"σ² = Δ²/4 and Σ_{{i>k}}λ_i → n∫_{{λ₋}}^{{q}}x f_mp; the formal bound has (n − k) in place of n "
                   f"and is exceeded by the MP limit ratio {limit:.3f} for n/d = {gamma:g}, k/n = {t:g} (with the "
                   "printed extra factor m on the left it fails by a further factor m)."
                   if form == "formal" else
                   f"The MP limit of the ratio is {limit:.3f} ≤ 1 here (max over n/d, k/n is π/4 at k → 0)."),
        details={"per_n": per_n, "MP_limit_ratio": limit, "ratios": ratios},
        kind="corrected" if form == "corrected" else "statement",
    )


def check_full_lhs_counterexample(*, n: int = 8, gamma: float = 1 / 64, t: float = 7 / 8, bits: int = 2,
                                  R: float = 1.5, seed: int = 8900, trials: int = 10,
                                  eps_rel: float = 1e-3) -> CheckResult:
    """The whole procedure (LDLQ + LPLR lemma) on the midpoint instance: E‖(Q + LR − W)Xᵀ‖² vs formal RHS."""
    d = int(round(n / gamma))
    m, k = d, int(round(t * n))
    g = gen(seed)
    W = midpoint_weights(n, d, R, bits, g)
    X = math.sqrt(m) * torch.eye(d, dtype=torch.float64)
    first = formal_rhs(n, d, m, k, 1.0, R, bits, 0.0)
    eps = eps_rel * first
    res = pipeline(W, X, k, R, bits, eps, trials, seed)
    rhs = first + eps
    mean, lo, _ = mean_upper_confidence(res["errors"], ALPHA)
    holds = lo <= rhs
    info = {"seed": seed, "n": n, "d": d, "m": m, "k": k, "bits": bits, "R": R, "eps": eps,
            "mean_error": mean,
            "lower_conf": lo, "formal_rhs": rhs, "E_trailing": float(res["xis"].mean()),
            "saturated": res["saturated"], "lemma_conditions_met": f"{res['in_scope']}/{trials}",
            "W": "random cell midpoints", "H": "I"}
    return CheckResult(
        "formal-theorem[full procedure, midpoint W]", LABEL_F,
        "E‖(Q + LR − W)Xᵀ‖² ≲ 4mdλ_maxR²/(π(2^B−1)²)(1 − k/n)(n − k/2) + ε (whole procedure)", holds,
        mean / rhs, trials, counterexample=None if holds else info,
        reasoning="The LPLR step returns a rank-k correction, so the error is at least Σ_{i>k}σ_i²(X(W − "
                  "Q)ᵀ), which already exceeds the formal right-hand side on this instance.",
        details=info,
    )


def check_regime_ii(*, n: int = 32, bits: int = 2, R: float = 1.5, eps: float = 1.0, k: int = 4,
                    seed: int = 8950,
                    trials: int = 5) -> CheckResult:
    """Regime (ii) as printed: k ≥ 2n − (2^B − 1)R⁻¹(πε)^{1/2}(mdλ_max^{-1/2})√n ⇒ E‖…‖² ≤ 2ε (H = I, n = d = m)."""
    d = m = n
    lam_max = 1.0
    c = (2**bits - 1) / R * math.sqrt(math.pi * eps) * math.sqrt(n)
    thr_printed = 2 * n - c * (m * d / math.sqrt(lam_max))
    thr_derived = 2 * n - c / math.sqrt(m * d * lam_max)
    g = gen(seed)
    W = midpoint_weights(n, d, R, bits, g)
    X = math.sqrt(m) * torch.eye(d, dtype=torch.float64)
    res = pipeline(W, X, k, R, bits, eps, trials, seed)
    mean, lo, _ = mean_upper_confidence(res["errors"], ALPHA)
    applies = k >= thr_printed
    holds = (not applies) or lo <= 2 * eps
    return CheckResult(
        "regime-ii", LABEL_I, "k ≥ 2n − (2^B−1)R⁻¹(πε)^{1/2}(mdλ_max^{-1/2})√n ⇒ E‖(Q + LR − W)Xᵀ‖² ≤ 2ε",
        holds,
        mean / (2 * eps), trials,
        counterexample=None if holds else {"seed": seed, "n=d=m": n, "k": k, "bits": bits, "R": R, "eps": eps,
                                           "printed_threshold": thr_printed, "derived_threshold": thr_derived,
                                           "mean_error": mean, "2eps": 2 * eps,
                                           "lemma_conditions_met": f"{res['in_scope']}/{trials}"},
        reasoning="From the formal bound, 4mdλ_maxR²n(1 − k/2n)²/(π(2^B−1)²) ≤ ε gives k ≥ 2n − "
                  "(2^B−1)R⁻¹(πε)^{1/2}(mdλ_max)^{-1/2}√n; the printed (mdλ_max^{-1/2}) makes the threshold "
                  "negative for any realistic m, d, so it admits ranks far too small.",
        details={"printed_threshold": thr_printed, "derived_threshold": thr_derived, "mean_error": mean},
    )


def check_regime_i(*, n: int = 32, k: int = 4, eps: float = 1.0, seed: int = 8970, trials: int = 5,
                   bits_offset: int = 0) -> CheckResult:
    """Regime (i): B_Q ≥ log₂(2R(πε)^{-1/2}√(nmdλ_max) + 1) ⇒ E‖…‖² ≤ 2ε (LLM-like W, H = I, n = d = m).
    ``bits_offset`` < 0 uses fewer bits than the threshold (sensitivity: the bound must then be exceeded)."""
    d = m = n
    W = decaying_weight(n, d, seed=seed).double()
    X = math.sqrt(m) * torch.eye(d, dtype=torch.float64)
    R = 1.25 * float(W.abs().max())
    bits = math.ceil(math.log2(2 * R / math.sqrt(math.pi * eps) * math.sqrt(n * m * d) + 1)) + bits_offset
    res = pipeline(W, X, k, R, bits, eps, trials, seed)
    mean, lo, _ = mean_upper_confidence(res["errors"], ALPHA)
    holds = lo <= 2 * eps and res["saturated"] == 0
    return CheckResult(
        "regime-i", LABEL_I, "B_Q ≥ log₂(2R(πε)^{-1/2}√(nmdλ_max) + 1) ⇒ E‖(Q + LR − W)Xᵀ‖² ≤ 2ε", holds,
        mean / (2 * eps), trials,
        counterexample=None if holds else {"seed": seed, "n=d=m": n, "k": k, "B_Q": bits, "mean_error": mean},
        reasoning="With that B_Q the formal first term is ≤ ε·(1 − k/n)(1 − k/2n) ≤ ε, and the MP step is "
                  "not needed at this precision: E Σ_{i>k}λ_i(ηDηᵀ) ≤ (n − k)·d·m·Δ²/4 ≤ ε.",
        details={"B_Q": bits, "R": R, "mean_error": mean, "2eps": 2 * eps},
    )


def check_informal_vs_formal(n: int = 4096, d: int = 4096, m: int = 4096, k: int = 64) -> CheckResult:
    """Compare nm·(informal RHS) with the formal RHS at ε = 0 and the slack terms (a consistency check)."""
    f = formal_rhs(n, d, m, k, 1.0, 1.0, 2, 0.0)
    i = informal_rhs_total(n, d, m, k, 1.0, 1.0, 2, 0.0)
    ratio = i / f
    return CheckResult(
        "informal-vs-formal", LABEL_I, "nm × informal bound = formal bound (same quantity, same ε)", False,
        ratio, 1,
        counterexample={"n": n, "d": d, "m": m, "k": k, "nm·informal/formal (ε = 0)": ratio,
                        "(1 − k/2n)/(1 − k/n)": (1 - k / (2 * n)) / (1 - k / n),
                        "ε": "informal: nm·ε on E‖…‖²; formal: ε",
                        "middle term": "both: m·Σ_{i>k}Eλ_i(ηDηᵀ); the proof gives Σ_{i>k}Eλ_i(ηDηᵀ) (D from "
                                       "mH)",
                        "bit budget": "informal avg ½log₂(kσ₁³λ_max√(d/n)/(mεσ_kλ_min)); App. C "
                                      "½log₂(8kσ₁³λ_max√(nd)/(εσ_kλ_min)) (m and √(d/n) vs √(nd) differ)"},
        reasoning="The informal statement replaces (1 − k/n)(n − k/2)/n by (1 − k/2n)² (looser by (1 − "
                  "k/2n)/(1 − k/n)) and normalizes ε by nm; both carry an m on Σ_{i>k}Eλ_i(ηDηᵀ) that the "
                  "proof does not produce, which with the '≲' would put m² in the final bound.",
        details={"ratio": ratio},
        kind="consistency",
    )


def run(profile: Profile) -> list[CheckResult]:
    s = profile.scale
    out: list[CheckResult] = []
    sizes = [(16, 16, 4), (32, 32, 8), (64, 64, 16), (128, 128, 32)][: 3 if s == 1 else 4]
    out += check_first_inequality(sizes, seed=8000, trials=max(10, profile.trials // 20))
    out.append(combine([check_library_first_inequality(64, 64, 8, seed=8000 + t, outer_iters=t) for t in (1, 3)],
                       claim="library-first-inequality"))
    ns = [16, 32] if s == 1 else [16, 32, 64]
    out.append(check_formal_mp_counterexample(ns, trials=max(8, profile.trials // 25)))
    out.append(check_formal_mp_counterexample(ns, trials=max(8, profile.trials // 25), form="informal"))
    out.append(check_formal_mp_counterexample(ns, trials=max(8, profile.trials // 25), form="corrected"))
    out.append(check_full_lhs_counterexample(trials=max(5, profile.trials // 40)))
    out.append(check_regime_ii())
    out.append(check_regime_i())
    out.append(check_informal_vs_formal())
    for cond, n in ((10.0, 64), (1e2, 64)):
        W, X = llm_instance(8000, n, n, cond=cond)
        out.append(check_unsaturated_range_exists(W, X, 2, seed=8000, label_cond=cond))
    return out
