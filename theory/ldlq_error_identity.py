"""App. C.3 — the LDLQ error identity (eq. ``ldlq-error-in-terms-of-quantizer-error``, in the proof of
``thm:approximation-error-Q-plus-LR-formal``).

Statements: *"if η = Q_Q(W + (W − Q)M) − (W + (W − Q)M) denotes the quantization error, then it can be seen that
Q − W = η(M + I)⁻¹"* and, since mH = XᵀX = (M + I)D(M + I)ᵀ,

    E σ_i²((Q − W)Xᵀ) = E λ_i((Q − W)H(Q − W)ᵀ) =(i) E λ_i(η(M + I)⁻¹(M + I)D(M + I)ᵀ(M + I)⁻ᵀηᵀ) = E λ_i(ηDηᵀ).

What exactly holds: the end-to-end equality σ_i²((Q − W)Xᵀ) = λ_i(ηDηᵀ) holds *pathwise* (so in expectation) with
D from the LDL of mH; the middle expression λ_i((Q − W)H(Q − W)ᵀ) is smaller by the factor m. The theorem
statement defines η with Q_Q(**Q** + (W − Q)M) − (**Q** + (W − Q)M), and the proof also writes
"Q = Q_Q(Q + (W − Q)M)"; with that η the identity is false (it needs W + (W − Q)M, as in eq. 3 and in the proof's
definition).

What is checked:

* ``paper-column-identity`` — a reference implementation of the paper's eq. 3 (column by column, M from the upper
  LDL of mH): Q − W = η(M + I)⁻¹ exactly, η being the recorded quantization errors;
* ``statement-eta`` — the same with the theorem statement's η (deterministic nearest rounding so that Q_Q can be
  re-evaluated): fails;
* ``library-blockldlq-identity`` — the library's BlockLDLQ (``ldlq_quantize`` with E8P, and ``block_ldlq`` with
  the dithered quantizer): η := (Q − W)L is a quantization error of the recurrence input (the E8P codeword
  nearest to it / a grid neighbour) and Q − W = ηL⁻¹;
* ``spectrum-identity`` — σ_i²((Q − W)Xᵀ) = λ_i(ηDηᵀ) for all i (D: 8×8 blocks of the LDL of mH), and the
  printed middle term, off by m;
* ``quip-bound`` — statistically (α = 1e-6): E η = 0 (Azuma–Hoeffding: the errors are bounded martingale
  differences) and E tr(ηDηᵀ) ≤ (Δ²/4)·n·tr(D) (eq. quip_upper_bound with Var ≤ Δ²/4).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from caldera.algorithm.ldl import block_ldl
from caldera.algorithm.ldlq import block_ldlq, ldlq_quantize
from caldera.quantizers.base import rms
from caldera.quantizers.e8p import E8P
from caldera.synthetic import calibration_hessian, decaying_weight
from theory.common import (
    ALPHA,
    CheckResult,
    Profile,
    combine,
    gen,
    hoeffding_halfwidth,
    mean_upper_confidence,
)
from theory.dithered import SeededDithered, dithered_round, step, unsaturated_range
from theory.lemma_ldl_auxiliary import upper_ldl

LABEL = "eq:ldlq-error-in-terms-of-quantizer-error"
TOL32 = 1e-4  # float32 pipelines
TOL64 = 1e-9


def nearest_grid(x: Tensor, R: float, bits: int) -> Tensor:
    """Deterministic nearest point of the B-bit grid {−R + jΔ} (clamped): a re-evaluable Q_Q."""
    d = step(R, bits)
    return (-R + torch.round((x.double().clamp(-R, R) + R) / d) * d)


def paper_column_ldlq(W: Tensor, mH: Tensor,
                      round_fn: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. 3 verbatim: Q^{(k)} = Q_Q(W^{(k)} + (W^{(1:k−1)} − Q^{(1:k−1)}) a_k), columns 1…d, a_k the k-th
    column of the strictly upper M with mH = (M + I)D(M + I)ᵀ.

    Returns (Q, η recorded per column, M), float64."""
    W = W.double()
    M, _ = upper_ldl(mH)
    n, d = W.shape
    Q = torch.zeros_like(W)
    eta = torch.zeros_like(W)
    for k in range(d):
        x = W[:, k] + (W[:, :k] - Q[:, :k]) @ M[:k, k]
        Q[:, k] = round_fn(x)
        eta[:, k] = Q[:, k] - x
    return Q, eta, M


def check_paper_column_identity(W: Tensor, H: Tensor, m: int, *, seed: int, R: float,
                                bits: int) -> CheckResult:
    """Q − W = η(M + I)⁻¹ with the recorded dithered errors η (reference implementation of eq. 3)."""
    g = gen(seed)
    mH = m * H.double()
    Q, eta, M = paper_column_ldlq(W, mH, lambda x: dithered_round(x, R, bits, g))
    I = torch.eye(M.shape[0], dtype=torch.float64)
    rhs = torch.linalg.solve_triangular((M + I).T, eta.T, upper=False).T  # η (M + I)⁻¹
    dev = float((Q - W.double() - rhs).norm() / (Q - W.double()).norm())
    eta_formula = Q - (W.double() + (W.double() - Q) @ M)
    dev_eta = float((eta - eta_formula).norm() / eta.norm())
    worst = max(dev, dev_eta)
    holds = worst <= TOL64
    return CheckResult(
        "paper-column-identity", LABEL, "Q − W = η(M + I)⁻¹, η = Q_Q(W + (W − Q)M) − (W + (W − Q)M) (eq. 3)",
        holds, worst / TOL64, 1,
        counterexample=None if holds else {"seed": seed, "rel_dev": dev, "eta_dev": dev_eta},
        reasoning="Eq. 3 says Q = W + (W − Q)M + η, i.e. (Q − W)(M + I) = η; M + I is unit triangular, hence "
                  "invertible.",
        details={"rel_dev": dev, "eta_dev": dev_eta},
    )


def check_statement_eta(W: Tensor, H: Tensor, m: int, *, seed: int, R: float, bits: int) -> CheckResult:
    """The theorem statement's η = Q_Q(Q + (W − Q)M) − (Q + (W − Q)M): Q − W = η(M + I)⁻¹ fails."""
    mH = m * H.double()
    Q, _, M = paper_column_ldlq(W, mH, lambda x: nearest_grid(x, R, bits))
    I = torch.eye(M.shape[0], dtype=torch.float64)
    W = W.double()

    def identity_dev(inp: Tensor) -> float:
        eta = nearest_grid(inp, R, bits) - inp
        rhs = torch.linalg.solve_triangular((M + I).T, eta.T, upper=False).T
        return float((Q - W - rhs).norm() / (Q - W).norm())

    dev_stmt = identity_dev(Q + (W - Q) @ M)
    dev_proof = identity_dev(W + (W - Q) @ M)
    fixed_point = float((nearest_grid(Q + (W - Q) @ M, R, bits) - Q).abs().max())
    holds = dev_stmt <= TOL64
    return CheckResult(
        "statement-eta", LABEL,
        "Q − W = η(M + I)⁻¹ with η ≜ Q_Q(Q + (W − Q)M) − (Q + (W − Q)M) (theorem statement)",
        holds, dev_stmt / TOL64, 1,
        counterexample=None if holds else {"seed": seed, "rel_dev_statement_eta": dev_stmt,
                                           "rel_dev_proof_eta": dev_proof,
                                           "max |Q_Q(Q + (W−Q)M) − Q|": fixed_point, "R": R, "bits": bits},
        reasoning="With the statement's η the identity reads Q − W = η'(M + I)⁻¹ with η' the rounding error "
                  "of Q + (W − Q)M; even when Q happens to be a fixed point of that rounding, η' = (Q − W)M "
                  "and (Q − W)M(M + I)⁻¹ ≠ Q − W. The proof's η (input W + (W − Q)M) is the right one.",
        details={"rel_dev_statement_eta": dev_stmt, "rel_dev_proof_eta": dev_proof,
                 "fixed_point_gap": fixed_point},
    )


def library_ldlq(W: Tensor, mH: Tensor, kind: str, *, seed: int, R: float = 0.0, bits: int = 2
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
    """(Q, L, D, η := (Q − W)L, saturated) from the library (E8P via ldlq_quantize, or block_ldlq + dithered)."""
    L, D = block_ldl(mH, 8)
    if kind == "e8p":
        qb = ldlq_quantize(W.float(), mH.float(), E8P(), ldl=(L.float(), D.float()))
        Q, sat = qb.Q.double(), 0
    else:
        q = SeededDithered(R, bits, gen(seed))
        Q, _ = block_ldlq(W.float(), L.float(), q)
        Q, sat = Q.double(), q.saturated
    eta = (Q - W.double()) @ L.double()
    return Q, L.double(), D.double(), eta, sat


def check_library_identity(W: Tensor, H: Tensor, m: int, *, seed: int, kind: str = "e8p", R: float = 0.0,
                           bits: int = 2, Q_perturb: float = 0.0) -> CheckResult:
    """Library BlockLDLQ: η = (Q − W)L is a quantization error of the recurrence input, and Q − W = ηL⁻¹.
    ``Q_perturb`` > 0 adds noise to the library's Q (a deliberately wrong output that must be caught)."""
    W = W.double()
    Q, L, D, eta, sat = library_ldlq(W, m * H.double(), kind, seed=seed, R=R, bits=bits)
    if Q_perturb:
        Q = Q + Q_perturb * torch.randn(Q.shape, generator=gen(seed + 1), dtype=torch.float64)
        eta = (Q - W) @ L
    x = Q - eta  # the recurrence inputs W_k + (W_{>k} − Q_{>k}) L_{>k,k}
    if kind == "e8p":
        scale = float(rms(W.float()) / E8P.opt_scale)  # ldlq_quantize's scale
        requant = E8P().round((x / scale).float()).double() * scale
        quant_dev = float((requant - Q).abs().max() / Q.abs().max())
    else:
        d = step(R, bits)
        quant_dev = max(float((eta.abs() / d).max()) - 1.0, 0.0)  # |η| ≤ Δ for a grid neighbour
    back = torch.linalg.solve_triangular(L.T, eta.T, upper=True).T  # η L⁻¹
    dev = float((back - (Q - W)).norm() / (Q - W).norm())
    worst = max(dev, quant_dev)
    holds = worst <= TOL32 and sat == 0
    return CheckResult(
        f"library-blockldlq-identity[{kind}]", LABEL,
        "library BlockLDLQ: Q − W = ηL⁻¹ with η the quantization error of Q_Q(W_k + (W_{>k} − "
        "Q_{>k})L_{>k,k})",
        holds, worst / TOL32, 1,
        counterexample=None if holds else {"seed": seed, "kind": kind, "rel_dev": dev, "quant_dev": quant_dev,
                                           "saturated": sat},
        reasoning="BlockLDLQ quantizes blocks last-to-first with feedback through the unit block-lower L of "
                  "H = LDLᵀ, which is eq. 3 on the block-reversed problem: (Q − W)L = η.",
        details={"rel_dev": dev, "quant_dev": quant_dev, "saturated": sat},
        kind="library",
    )


def check_spectrum_identity(W: Tensor, X: Tensor, *, seed: int, R: float, bits: int) -> CheckResult:
    """σ_i²((Q − W)Xᵀ) = λ_i(ηDηᵀ) for every i (pathwise); the printed middle term λ_i((Q−W)H(Q−W)ᵀ) is 1/m of it."""
    X = X.double()
    m = X.shape[0]
    mH = X.T @ X
    Q, L, D, eta, sat = library_ldlq(W, mH, "dithered", seed=seed, R=R, bits=bits)
    E = Q - W.double()
    s2 = torch.linalg.svdvals(E @ X.T).pow(2)
    n = W.shape[0]
    lam = torch.linalg.eigvalsh(eta @ torch.block_diag(*D) @ eta.T).flip(0)
    r = min(n, m)
    dev = float((s2[:r] - lam[:r]).abs().max() / lam[0])
    mid = torch.linalg.eigvalsh(E @ (mH / m) @ E.T).flip(0)
    middle_factor = float(lam[0] / mid[0])
    holds = dev <= TOL32 and sat == 0
    return CheckResult(
        "spectrum-identity", LABEL, "σ_i²((Q − W)Xᵀ) = λ_i(ηDηᵀ) for all i (pathwise, hence in expectation)",
        holds,
        dev / TOL32, r,
        counterexample=None if holds else {"seed": seed, "rel_dev": dev, "saturated": sat},
        reasoning="(Q − W)XᵀX(Q − W)ᵀ = ηL⁻¹(LDLᵀ)L⁻ᵀηᵀ = ηDηᵀ exactly; the printed middle step uses H = "
                  "XᵀX/m and so is smaller by the factor m.",
        details={"rel_dev": dev, "middle_term_factor": middle_factor, "m": m},
    )


def check_middle_term(W: Tensor, X: Tensor, *, seed: int, R: float, bits: int) -> CheckResult:
    """The printed chain's first equality σ_i²((Q − W)Xᵀ) = λ_i((Q − W)H(Q − W)ᵀ) (false unless m = 1)."""
    r = check_spectrum_identity(W, X, seed=seed, R=R, bits=bits)
    m = X.shape[0]
    factor = r.details["middle_term_factor"]
    holds = abs(factor - 1) <= TOL32
    return CheckResult(
        "printed-middle-term", LABEL, "E σ_i²((Q − W)Xᵀ) = E λ_i((Q − W)H(Q − W)ᵀ) (as printed)", holds,
        factor, 1,
        counterexample=None if holds else {"seed": seed, "m": m, "sigma_i^2 / lambda_i(middle)": factor},
        reasoning="σ_i²((Q − W)Xᵀ) = λ_i((Q − W)XᵀX(Q − W)ᵀ) = m·λ_i((Q − W)H(Q − W)ᵀ); the chain's end "
                  "result λ_i(ηDηᵀ) is right because D comes from the LDL of mH.",
        details={"factor": factor, "m": m},
        kind="proof-step",
    )


def check_quip_bound(W: Tensor, H: Tensor, m: int, *, seed: int, R: float, bits: int, trials: int = 50,
                     bound_factor: float = 1.0) -> CheckResult:
    """E η = 0 (Azuma–Hoeffding) and E tr(ηDηᵀ) ≤ bound_factor·(Δ²/4)·n·tr(D) (CLT bound), α = 1e-6 each."""
    mH = m * H.double()
    n = W.shape[0]
    d = step(R, bits)
    traces, total, count, sats = [], 0.0, 0, 0
    for t in range(trials):
        Q, L, D, eta, sat = library_ldlq(W, mH, "dithered", seed=seed * 1000 + t, R=R, bits=bits)
        sats += sat
        traces.append(float(torch.einsum("ika,kab,ikb->", eta.reshape(n, -1, 8), D, eta.reshape(n, -1, 8))))
        total += float(eta.sum())
        count += eta.numel()
    trD = float(torch.diagonal(D, dim1=1, dim2=2).sum())
    bound = bound_factor * d**2 / 4 * n * trD
    mean_tr, lo_tr, _ = mean_upper_confidence(torch.tensor(traces), ALPHA / 2)
    t_mean = hoeffding_halfwidth(2 * d, count, ALPHA / 2)  # η ∈ [−Δ, Δ]
    mean_eta = total / count
    holds = lo_tr <= bound and abs(mean_eta) <= t_mean and sats == 0
    return CheckResult(
        "quip-bound", LABEL,
        "E η = 0 and E‖(Q − W)Xᵀ‖² = E tr(ηDηᵀ) ≤ (Δ²/4)·n·tr(D) (dithered Q_Q, α = 1e-6)",
        holds, mean_tr / bound, trials,
        counterexample=None if holds else {"seed": seed, "mean_trace": mean_tr, "lower_conf": lo_tr,
                                           "bound": bound,
                                           "mean_eta": mean_eta, "halfwidth": t_mean, "saturated": sats},
        reasoning="Given the past, each block's dithered error has mean 0 and variance ≤ Δ²/4 per entry, so "
                  "E tr(ηDηᵀ) = Σ_k tr(D_k E[η_kᵀη_k]) ≤ (Δ²/4) n tr(D).",
        details={"mean_trace": mean_tr, "bound": bound, "mean_eta": mean_eta, "halfwidth": t_mean,
                 "trace_ratio": mean_tr / bound, "saturated": sats},
    )


def instance(seed: int, n: int, d: int, cond: float = 1e2) -> tuple[Tensor, Tensor, Tensor]:
    """(W, H, X) with X (d×d), XᵀX/d = H; W LLM-like with RMS 1."""
    W = decaying_weight(n, d, seed=seed).double()
    H = calibration_hessian(d, seed=seed, cond=cond)
    X = math.sqrt(d) * torch.linalg.cholesky(H).T
    return W, H, X


def safe_range(W: Tensor, H: Tensor, m: int, bits: int, seed: int) -> float:
    """A dynamic range R for which the dithered BlockLDLQ of W stays unsaturated (see
    ``unsaturated_range``)."""
    L, _ = block_ldl(m * H.double(), 8)
    R = unsaturated_range(W, L, bits, seed)
    if R is None:
        raise ValueError(f"no unsaturated dynamic range for {bits} bits (LDLQ feedback gain ≥ 1)")
    return R


def run(profile: Profile) -> list[CheckResult]:
    out: dict[str, list[CheckResult]] = {}
    for i in range(profile.examples):
        seed = 7000 + i
        n, d = 16 + 8 * (i % 2), 16 + 8 * (i % 3)
        bits = 2 + i % 3
        W, H, X = instance(seed, n, d, cond=(3.0, 10.0, 30.0)[i % 3])
        m = X.shape[0]
        R = safe_range(W, H, m, bits, seed)
        out.setdefault("paper-column-identity", []).append(
            check_paper_column_identity(W, H, m, seed=seed, R=R, bits=bits))
        out.setdefault("statement-eta", []).append(check_statement_eta(W, H, m, seed=seed, R=R, bits=bits))
        out.setdefault("library-blockldlq-identity[e8p]", []).append(
            check_library_identity(W, H, m, seed=seed))
        out.setdefault("library-blockldlq-identity[dithered]", []).append(
            check_library_identity(W, H, m, seed=seed, kind="dithered", R=R, bits=bits))
        out.setdefault("spectrum-identity", []).append(
            check_spectrum_identity(W, X, seed=seed, R=R, bits=bits))
        out.setdefault("printed-middle-term", []).append(check_middle_term(W, X, seed=seed, R=R, bits=bits))
        if i < 2:
            out.setdefault("quip-bound", []).append(
                check_quip_bound(W, H, m, seed=seed, R=R, bits=bits, trials=max(30, profile.trials // 5)))
    return [combine(v, claim=c) for c, v in out.items()]
