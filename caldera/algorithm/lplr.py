"""LPLRFactorize (Algorithm 2): calibration-aware low-precision low-rank factorization A ≈ L R.

Minimizes ``‖(LR − A)Xᵀ‖_F² = ‖(LR − A) H^{1/2}‖_F²`` over quantized L (n, k) and R (k, d):

* lines 2–4: rank-constrained-regression initialization (App. C.4 form, H positive definite), then
  ``R_0 = Q_R(R̂)`` and ``L_0 = Q_L(argmin_Z ‖(Z R_0 − A)Xᵀ‖)``;
* lines 7–14: ``R_{i+1} = Q_R(L_i† A H H†)`` and ``L_{i+1} = Q_L(A H R_iᵀ (R_i H R_iᵀ)⁻¹)`` (App. C.1), both
  from iterate i as Alg. 2 writes them (``sweep="jacobi"``), or L from R_i then R from the new L
  (``sweep="alternating"``, the authors' code); the best iterate is returned (line 11).

Work is shared: with ``Y = A H^{1/2}`` and ``P = R H^{1/2}`` the error is
``tr(LᵀL · PPᵀ) − 2 tr(Lᵀ · Y Pᵀ) + ‖Y‖²`` and the same ``PPᵀ`` and ``Y Pᵀ = A H Rᵀ`` give the next L.
16-bit factors (both ``quant_L`` and ``quant_R`` None) take the closed form with no inner loop, rounded
to float16 (what is stored).

L is quantized as Lᵀ (8-vectors run along n) and R along d, one scalar scale rms/opt_scale per factor
(authors-code.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from caldera.algorithm.regression import HessianSqrt, top_k_svd, warm_top_k_svd
from caldera.metrics import sq_frobenius
from caldera.quantizers.base import Quantizer, ScaledCodes, dequantize_scaled, quantize_scaled
from caldera.validation import check_values


@dataclass(frozen=True)
class LPLRResult:
    """Best factors. L (n, k), R (k, d) float32 (dequantized); codes of Lᵀ (k, n/b) and R (k, d/b)."""

    L: Tensor
    R: Tensor
    L_codes: ScaledCodes | None
    R_codes: ScaledCodes | None
    errors: list[float] = field(default_factory=list)  # relative ‖(LR − A)Xᵀ‖/‖AXᵀ‖: init, then per iteration
    best_iter: int = 0
    sq_error: float = 0.0  # ‖(LR − A)Xᵀ‖² of the best iterate (H-weighted, absolute)
    basis: Tensor | None = None  # svd="warm": (d, k + p) right Ritz vectors of A H^{1/2}, the next call's start
    RM: Tensor | None = None  # (k, d) float32: R H^{1/2} of the best R, as the objective formed it (the caller's error)


class _Objective:
    """Cached pieces of ‖(LR − A) H^{1/2}‖² for one R; float32 matmuls, float64 sums."""

    def __init__(self, Y: Tensor, hs: HessianSqrt):
        self.Y, self.hs = Y, hs
        self.t0 = sq_frobenius(Y)

    def for_R(self, R: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        P = self.hs.times_half(R)  # (k, d)
        return P, P @ P.T, self.Y @ P.T  # R H^{1/2} (k, d), R H Rᵀ (k, k), A H Rᵀ (n, k)

    def sq_error(self, L: Tensor, G: Tensor, AHRt: Tensor) -> float:
        t1 = float(((L.T @ L).double() * G.double()).sum())
        t2 = float((L.double() * AHRt.double()).sum())
        return max(t1 - 2 * t2 + self.t0, 0.0)


def _solve_spd(G: Tensor, B: Tensor) -> Tensor:
    """Return B G⁻¹ for symmetric PSD G (k, k), B (n, k), in float64 and rounded to B's dtype: G⁻¹ from G's
    Cholesky factor (k×k) and one float64 GEMM with B (the n right-hand sides of ``cholesky_solve`` in one
    product, faster than the solve); the pseudo-inverse when G is singular."""
    C, info = torch.linalg.cholesky_ex(G.double())
    if int(info) == 0:
        return (B.double() @ torch.cholesky_inverse(C)).to(B.dtype)
    return (B.double() @ torch.linalg.pinv(G.double(), hermitian=True)).to(B.dtype)


def _quantize(q: Quantizer, x: Tensor) -> tuple[Tensor, ScaledCodes]:
    sc = quantize_scaled(q, x)
    return dequantize_scaled(q, sc), sc


def lplr_factorize(
    A: Tensor,
    H: Tensor | HessianSqrt,
    k: int,
    quant_L: Quantizer | None,
    quant_R: Quantizer | None,
    inner_iters: int,
    *,
    sweep: str = "jacobi",
    svd: str = "exact",
    generator: torch.Generator | None = None,
    Y: Tensor | None = None,
    start: Tensor | None = None,
) -> LPLRResult:
    """Algorithm 2 on A (n, d) float32 with positive-definite H (d, d) (or its :class:`HessianSqrt`).

    ``Y`` may pass ``A @ hs.half`` (float32 (n, d)) when the caller already holds it (Algorithm 1 forms it
    for its error after the Q step), saving the O(n d²) product. Everything runs on A's device.

    ``svd`` picks the top-k SVD of line 2: "exact", "randomized" (a Gaussian start, 4 power iterations) or
    "warm" (:func:`caldera.algorithm.regression.warm_top_k_svd`: the randomized range finder from ``generator`` without
    ``start`` (exact without a generator either), else subspace iteration from
    ``start``, the ``basis`` of the previous call; Algorithm 1 passes it from one outer iteration to the next,
    where A moves only by the change of Q).
    """
    if (quant_L is None) != (quant_R is None):
        raise ValueError("quant_L and quant_R must both be quantizers or both None (16-bit factors)")
    if sweep not in ("jacobi", "alternating"):
        raise ValueError(f"sweep={sweep!r}; accepted: 'jacobi' (Alg. 2) or 'alternating' (authors)")
    for name, t in (("A", A), ("H", H), ("Y", Y), ("start", start)):
        check_values(t, name)
    hs = H if isinstance(H, HessianSqrt) else HessianSqrt.of(H.detach())
    A = A.detach().float()  # codes are not differentiable: inputs that require grad are read as data
    Y = hs.times_half(A) if Y is None else Y.detach().float()
    obj = _Objective(Y, hs)
    basis = None
    if svd == "warm":
        Uk, Sk, Vk, basis = warm_top_k_svd(Y, k, start, generator)
    else:
        Uk, Sk, Vk = top_k_svd(Y, k, method=svd, generator=generator)
    L_hat, R_hat = Uk, hs.times_inv_half(Sk[:, None] * Vk.T)  # lines 2–3 (App. C.4 closed form)

    def rel(e: float) -> float:
        return (e / obj.t0) ** 0.5 if obj.t0 > 0 else 0.0

    if quant_L is None:
        L, R = L_hat.half().float(), R_hat.half().float()
        P, G, AHRt = obj.for_R(R)
        e = obj.sq_error(L, G, AHRt)
        return LPLRResult(L, R, None, None, [rel(e)], 0, e, basis, P)

    R, R_sc = _quantize(quant_R, R_hat)  # line 3
    P, G, AHRt = obj.for_R(R)
    Lt, L_sc = _quantize(quant_L, _solve_spd(G, AHRt).T)  # line 4 (L quantized as Lᵀ)
    L = Lt.T
    e = obj.sq_error(L, G, AHRt)
    best = (L, R, L_sc, R_sc, e, 0, P)
    errors = [rel(e)]
    # Both updates are deterministic functions of one factor: R' = f(L) (line 8), L' = g(R) (line 9). Line 4 is
    # g(R_0), so the Jacobi sweep's first L is L_0 again, its second R is R_1 again, and so on: each factor
    # repeats once. The last input of f, of g and of R's pieces (R H Rᵀ, A H Rᵀ) is remembered by identity,
    # and a repeat returns the remembered output (the same tensors, bit for bit: about half the sweep's work).
    memo: dict[str, tuple] = {"g": (R, L, L_sc), "pieces": (R, P, G, AHRt)}

    def pieces(R: Tensor) -> tuple[Tensor, Tensor]:
        if memo["pieces"][0] is not R:
            memo["pieces"] = (R, *obj.for_R(R))
        return memo["pieces"][2], memo["pieces"][3]

    def f(L: Tensor) -> tuple[Tensor, ScaledCodes]:
        """R' = Q_R(L† A): the least-squares R for L (quantized)."""
        if "f" not in memo or memo["f"][0] is not L:
            memo["f"] = (L, *_quantize(quant_R, _solve_spd((L.T @ L).double(), (A.T @ L).double()).T.float()))
        return memo["f"][1], memo["f"][2]

    def g(R: Tensor) -> tuple[Tensor, ScaledCodes]:
        """L' = Q_L(A H Rᵀ (R H Rᵀ)⁻¹), quantized as L'ᵀ."""
        if memo["g"][0] is not R:
            Lt, sc = _quantize(quant_L, _solve_spd(*pieces(R)).T)
            memo["g"] = (R, Lt.T, sc)
        return memo["g"][1], memo["g"][2]

    for i in range(inner_iters):
        if sweep == "jacobi":
            (R_new, R_sc_new), (L_new, L_sc_new) = f(L), g(R)
        else:
            L_new, L_sc_new = g(R)
            R_new, R_sc_new = f(L_new)
        L, R, L_sc, R_sc = L_new, R_new, L_sc_new, R_sc_new
        e = obj.sq_error(L, *pieces(R))
        errors.append(rel(e))
        if e < best[4]:
            best = (L, R, L_sc, R_sc, e, i + 1, memo["pieces"][1])
    L, R, L_sc, R_sc, e, it, P = best
    return LPLRResult(L, R, L_sc, R_sc, errors, it, e, basis, P)
