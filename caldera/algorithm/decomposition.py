"""CALDERA (Algorithm 1): W ≈ Q + L R with a quantized backbone Q and quantized low-rank factors.

``caldera_decompose(W, H, config)`` is a pure function of tensors and a frozen config. Everything happens
in the RHT basis (§5 "Baselines": W̃ = H_Lᵀ W H_R, H̃ = H_Rᵀ H H_R), where the trace of the data-aware
error equals the original one. Per outer iteration t (Q-first order, Alg. 1 lines 3–4)::

    Q_{t+1}        = LDLQ(W − L_t R_t, Q_Q)                      # eq. 3, caldera.algorithm.ldlq
    L_{t+1}, R_{t+1} = LPLRFactorize(W − Q_{t+1}, k, X, Q_L, Q_R, T_in)   # Alg. 2, caldera.algorithm.lplr

and the best iterate by ``‖(Q + LR − W)Xᵀ‖_F`` is returned (lines 5–6). The App. E.2 Hessian update
replaces H by ``H − M V Vᵀ M ᵀ`` (H = M Mᵀ, ``L R M = U Σ Vᵀ``) in the Q step only; it is skipped while
L R = 0 (its singular vectors are then arbitrary).

Worked example (a 16×16 toy, identity Hessian, rank 2)::

    >>> import torch
    >>> from caldera import CalderaConfig, caldera_decompose
    >>> W = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    >>> dec = caldera_decompose(W, torch.eye(16), CalderaConfig(rank=2, outer_iters=2, inner_iters=2))
    >>> dec.reconstruction().shape
    torch.Size([16, 16])
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from caldera.algorithm import matmul_precision
from caldera.algorithm.config import CalderaConfig
from caldera.algorithm.hadamard import RHT, random_signs
from caldera.algorithm.ldl import REGULARIZED, block_ldl_of_cholesky, cholesky_or_raise, regularize_hessian
from caldera.algorithm.ldlq import LDL_BLOCK, QuantizedBackbone, ldlq_quantize, nearest_quantize
from caldera.algorithm.lplr import lplr_factorize
from caldera.algorithm.regression import HessianSqrt
from caldera.algorithm.triangular import lower_matmul, matmul_lower
from caldera.metrics import sq_frobenius
from caldera.quantizers import quantizer_for_bits
from caldera.quantizers.base import ScaledCodes
from caldera.validation import check_rank, checked_W_H


@dataclass(frozen=True)
class HessianContext:
    """Everything derived from one Hessian, shared by the matrices that read it (q/k/v; gate/up).

    H_reg: (d, d) float64 ``H / mean(diag H) + σ I``; S_U: (d,) ±1 or None (no RHT); H_rot: (d, d) float64
    in the RHT basis; sqrt: Cholesky factors of H_rot (``sqrt.half`` = M with H_rot = M Mᵀ, also the M of the
    App. E.2 Hessian update); ldl: ``block_ldl(H_rot)`` (reused when H is not updated). All on H's device;
    the signs are drawn from a CPU generator (the same signs on every device) and moved there once.
    """

    H_reg: Tensor
    S_U: Tensor | None
    H_rot: Tensor
    sqrt: HessianSqrt
    ldl: tuple[Tensor, Tensor]

    @classmethod
    def prepare(cls, H: Tensor, *, rht: bool, seed: int, sigma_reg: float = 0.01) -> "HessianContext":
        H_reg = regularize_hessian(H, sigma_reg, check_pd=False)  # H_rot's Cholesky below is the test
        d = H.shape[0]
        if rht:
            S_U = random_signs(d, torch.Generator().manual_seed(seed)).to(H.device)
            H_rot = RHT(S_U=S_U, S_V=torch.ones(1, device=H.device)).rotate_H(H_reg)
        else:
            S_U, H_rot = None, H_reg
        if d % LDL_BLOCK:
            raise ValueError(f"H has size {d}; BlockLDLQ needs a multiple of {LDL_BLOCK}")
        # M = chol(H_rot), H_reg's positive-definiteness test (H_rot is an orthogonal rotation of it) and the Cholesky
        # factor the block LDL starts from
        sqrt = HessianSqrt.of_cholesky(cholesky_or_raise(H_rot, REGULARIZED))
        return cls(H_reg, S_U, H_rot, sqrt, block_ldl_of_cholesky(sqrt.half.clone(), LDL_BLOCK))


@dataclass(frozen=True)
class Decomposition:
    """Result of any matrix-level method: Ŵ = unrotate(Q + L R).

    Q: (n, d) float32, dequantized, in the RHT basis when ``rht`` is set. L: (n, k), R: (k, d) or None.
    Q_codes: (n, d // b) integer codes of the quantizer named ``q_quantizer`` with ``Q = quantizer.decode(Q_codes,
    Q_scale, Q_extras)`` (by default ``Q_scale · dequantize(Q_codes)``); ``Q_scale`` float32 of a shape the quantizer
    declares (``scale_shapes``: () or (n, 1) unless it scales groups), ``Q_extras`` the further tensors it declares
    (``stored_extras``, e.g. a codebook of this matrix) or None. L_codes are codes of Lᵀ.
    error_trace: one dict per sub-step: {"outer", "step", "error", ["lplr_errors"]}; errors are the
    relative data-aware error ‖(Ŵ − W)Xᵀ‖/‖WXᵀ‖ with the regularized H.
    """

    method: str
    Q: Tensor
    L: Tensor | None
    R: Tensor | None
    Q_codes: Tensor | None
    Q_scale: Tensor | None
    L_codes: ScaledCodes | None = None
    R_codes: ScaledCodes | None = None
    rht: RHT | None = None
    error_trace: list[dict[str, Any]] = field(default_factory=list)
    error: float = float("nan")
    best_iter: int = -1
    config: dict[str, Any] = field(default_factory=dict)
    q_quantizer: str | None = None  # registry name of the quantizer that produced Q_codes (caldera.quantizers)
    Q_extras: dict[str, Tensor] | None = None  # tensors the quantizer stores beside codes and scale (stored_extras)

    @property
    def rank(self) -> int:
        return 0 if self.L is None else self.L.shape[1]

    def rotated_reconstruction(self) -> Tensor:
        return self.Q if self.L is None else self.Q + self.L @ self.R

    def reconstruction(self) -> Tensor:
        """Ŵ (n, d) float32 in the original basis."""
        Wr = self.rotated_reconstruction()
        return self.rht.unrotate_W(Wr) if self.rht is not None else Wr


#: :func:`hessian_update` takes the SVD of L R M instead of the k×k Gram matrices (``P Pᵀ``, ``Lᵀ L``) when a Gram's
#: Cholesky factor C has ``(max diag C / min diag C)² >`` this (a nearly rank-deficient L R: the projector by the
#: Gram loses accuracy)
GRAM_COND_MAX = 1e10


def _gram_factor(G: Tensor) -> Tensor | None:
    """The lower Cholesky factor C of a k×k Gram matrix G, or None where G is singular or ill-conditioned
    (``(max diag C / min diag C)² >`` :data:`GRAM_COND_MAX`)."""
    C, info = torch.linalg.cholesky_ex(G)
    cd = C.diagonal()
    if int(info) != 0 or not float(cd.min()) > 0 or (float(cd.max()) / float(cd.min())) ** 2 > GRAM_COND_MAX:
        return None
    return C


def hessian_update(H: Tensor, L: Tensor, R: Tensor, sigma_reg: float, M: Tensor | None = None) -> Tensor:
    """App. E.2: ``H̃ = H − M V Vᵀ Mᵀ`` with H = M Mᵀ (Cholesky) and V the top-k right singular vectors of
    L R M, plus ``sigma_reg · mean(diag H̃) · I`` (H̃ = M (I − VVᵀ) Mᵀ is singular). Shapes: H (d, d) float64,
    L (n, k), R (k, d); M (d, d) float64, the lower Cholesky factor of H when the caller holds it (H is the
    same in every outer iteration: :class:`HessianContext` factors it once), else computed here. Cost
    O(k d² + n k²), all float64.

    Only the projector V Vᵀ enters H̃. When L has full column rank k and ``P = R M`` (k, d) full row rank, L R M
    has rank k and its row space is P's, so ``V Vᵀ = Pᵀ (P Pᵀ)⁻¹ P``; with ``P Pᵀ = C Cᵀ`` (k×k Cholesky),
    ``M V Vᵀ Mᵀ = Z Zᵀ`` for ``Z = M Pᵀ C⁻ᵀ`` (d, k): no SVD of a k×d matrix, and L enters only through the rank
    test (the Cholesky of the k×k ``Lᵀ L``). Where ``Lᵀ L`` or ``P Pᵀ`` is singular or ill-conditioned
    (:func:`_gram_factor`: L R of rank < k, whose extra singular vectors are arbitrary) the top-k V of the SVD of
    ``R_L P`` (L = Q_L R_L, the k×d matrix with L R M's right singular vectors) is taken instead.
    """
    if M is None:
        M = cholesky_or_raise(H)
    L64 = L.double()
    P = matmul_lower(R.double(), M)  # (k, d): R M
    C = _gram_factor(P @ P.T)
    if C is not None and _gram_factor(L64.T @ L64) is not None:
        # Z = M Pᵀ C⁻ᵀ; Pᵀ contiguous: MKL's float64 product of a column-major M (a Cholesky factor's layout) with a
        # transposed operand runs at half speed
        MV = torch.linalg.solve_triangular(C, lower_matmul(M, P.T.contiguous()).T, upper=False).T
    else:
        _, RL = torch.linalg.qr(L64)
        _, _, Vh = torch.linalg.svd(RL @ P, full_matrices=False)  # L R M = Q_L (R_L P)
        MV = lower_matmul(M, Vh.T)
    Ht = torch.addmm(H, MV, MV.T, alpha=-1.0)
    Ht.diagonal().add_(sigma_reg * float(Ht.diagonal().mean()))
    return Ht


#: max |W| outside [2**-MAG_EXP, 2**MAG_EXP] is scaled by a power of two before the float32 algorithm runs
MAG_EXP = 20
#: beyond [2**-LIMIT_EXP, 2**LIMIT_EXP] the float32 outputs (Q, scales) cannot represent the result
LIMIT_EXP = 120


def caldera_decompose(
    W: Tensor,
    H: Tensor,
    config: CalderaConfig,
    *,
    context: HessianContext | None = None,
    progress: Callable[[int], None] | None = None,
) -> Decomposition:
    """Algorithm 1. W: (n, d) float; H: (d, d) symmetric PSD (XᵀX/m). Deterministic given ``config.seed``.

    ``context`` passes a :class:`HessianContext` already prepared for H with the same ``rht``, seed and
    sigma_reg (it is what matrices sharing a Hessian share). ``progress(t)`` is called after outer iteration t.

    Magnitudes. The algorithm runs in float32, where products of tiny (~1e-30) or huge (≥ 1e18) weights
    underflow or overflow. Every step is homogeneous in W (the quantizer scales are RMS-based), so a W whose
    max |entry| lies outside [2⁻²⁰, 2²⁰] is multiplied by an exact power of two 2⁻ᵉ first and the result
    scaled back (Q and its scale by 2ᵉ, L and R by 2^(e/2) each); relative errors are scale-free. Outside
    [2⁻¹²⁰, 2¹²⁰] the float32 outputs cannot hold the result: ``ValueError`` naming W. An all-zero W gives the
    exact decomposition Q = 0 (scale 0), L = 0, R = 0 with ``error = 0.0`` (Ŵ = W; the relative error 0/0 is
    defined as 0) and an empty ``error_trace`` (``best_iter = -1``: no iteration ran).

    Float32 arithmetic. The float32 products run as ``config.fp32_matmul`` says
    (:mod:`caldera.algorithm.matmul_precision`: oneDNN's bfloat16 arithmetic on a CPU with bfloat16 instructions
    under "auto", IEEE float32 elsewhere), set for this call only; the returned ``config`` records the arithmetic
    that ran ("ieee" or "bf16").
    """
    W, H = checked_W_H(W, H)  # a W or H that requires grad is read as data
    n, d = W.shape
    check_rank(config.rank, n, d)
    if d % LDL_BLOCK:
        raise ValueError(
            f"W has d={d} columns (and H is {d}×{d}); BlockLDLQ quantizes blocks of {LDL_BLOCK} columns: "
            f"pad W with zero columns and H with zero rows/columns to a multiple of {LDL_BLOCK}"
        )
    if config.factors_quantized and n % LDL_BLOCK:
        raise ValueError(
            f"W has n={n} rows; its quantized factor L (codes of Lᵀ, blocks of {LDL_BLOCK} along n) needs n to "
            f"be a multiple of {LDL_BLOCK}: pad W with zero rows, or use 16-bit factors (l_bits=r_bits=16)"
        )
    with matmul_precision.scoped(config.fp32_matmul, W.device) as arithmetic:
        # the config the decomposition records names the float32 arithmetic that ran ("auto" resolved)
        return _decompose_scaled(W, H, config.replace(fp32_matmul=arithmetic), context, progress)


def _decompose_scaled(
    W: Tensor,
    H: Tensor,
    config: CalderaConfig,
    context: HessianContext | None,
    progress: Callable[[int], None] | None,
) -> Decomposition:
    """:func:`caldera_decompose` after validation, inside its float32-arithmetic scope: the magnitude guard."""
    n, d = W.shape
    amax = float(W.detach().abs().max())
    if amax == 0.0:
        return _zero_decomposition(n, d, config, context, W.device)
    e = 0 if 2.0**-MAG_EXP <= amax <= 2.0**MAG_EXP else 2 * (math.frexp(amax)[1] // 2)  # even: 2^(e/2) exact
    if not 2.0**-LIMIT_EXP <= amax <= 2.0**LIMIT_EXP:
        raise ValueError(
            f"W has max |entry| {amax:.3g}, outside [{2.0**-LIMIT_EXP:.3g}, {2.0**LIMIT_EXP:.3g}] where the "
            "float32 codes' scales can hold the result; rescale W (e.g. W / W.abs().max()) and scale the "
            "reconstruction back"
        )
    if e == 0:
        return _decompose(W, H, config, context, progress)
    dec = _decompose(W.double() * 2.0**-e, H, config, context, progress)  # exact: a power of two
    c, h = 2.0**e, 2.0 ** (e // 2)
    sc = lambda x: None if x is None else ScaledCodes(x.codes, x.scale * h)  # noqa: E731
    return dataclasses.replace(
        dec, Q=dec.Q * c, Q_scale=dec.Q_scale * c, L=dec.L * h, R=dec.R * h, L_codes=sc(dec.L_codes),
        R_codes=sc(dec.R_codes),
    )


def _zero_decomposition(
    n: int, d: int, cfg: CalderaConfig, context: HessianContext | None, device: torch.device
) -> Decomposition:
    """The exact decomposition of W = 0 (n, d): valid codes with scale 0 (Q = 0, L = 0, R = 0), the same RHT
    signs the general path draws, so the stored layer has the same layout as every other (on W's device)."""
    k = cfg.rank
    qQ = quantizer_for_bits(cfg.q_bits)
    zero = torch.zeros((), device=device)
    rht = None
    if cfg.rht:
        S_U = context.S_U if context is not None else random_signs(d, torch.Generator().manual_seed(cfg.seed))
        S_V = random_signs(n, torch.Generator().manual_seed(cfg.seed + 1))
        rht = RHT(S_U=S_U.to(device), S_V=S_V.to(device))
    L_sc = R_sc = None
    if cfg.factors_quantized:
        qL, qR = quantizer_for_bits(cfg.l_bits), quantizer_for_bits(cfg.r_bits)
        L_sc = ScaledCodes(qL.quantize(torch.zeros(k, n, device=device)), zero.clone())
        R_sc = ScaledCodes(qR.quantize(torch.zeros(k, d, device=device)), zero.clone())
    return Decomposition(
        method="caldera", Q=torch.zeros(n, d, device=device), L=torch.zeros(n, k, device=device),
        R=torch.zeros(k, d, device=device), Q_codes=qQ.quantize(torch.zeros(n, d, device=device)),
        Q_scale=zero.clone(), L_codes=L_sc, R_codes=R_sc, rht=rht,
        error_trace=[], error=0.0, best_iter=-1, config=cfg.to_dict(), q_quantizer=qQ.name,
    )


def _decompose(
    W: Tensor,
    H: Tensor,
    cfg: CalderaConfig,
    context: HessianContext | None,
    progress: Callable[[int], None] | None,
) -> Decomposition:
    """Algorithm 1 on a validated W of safe magnitude (:func:`caldera_decompose`).

    Runs on W's device (H's context must be on the same device). Work shared across steps: with H_rot = M Mᵀ
    (``ctx.sqrt.half``, factored once), ``Y = (W − Q) M`` (float32 (n, d)) is formed once per Q step and
    serves both the data-aware error after that step, ``‖(Q + LR − W)Xᵀ‖ = ‖L (R M) − Y‖`` (O(n d k) instead
    of O(n d²)), and the next LPLR call (its ``A H^{1/2}``); M is also the App. E.2 update's Cholesky factor.
    """
    n, d = W.shape
    dev = W.device
    ctx = context or HessianContext.prepare(H, rht=cfg.rht, seed=cfg.seed, sigma_reg=cfg.sigma_reg)
    if (ctx.S_U is not None) != cfg.rht:
        raise ValueError("context was prepared with a different rht setting than config.rht")
    if ctx.H_rot.device != dev:
        raise ValueError(f"W is on {dev} but the Hessian context is on {ctx.H_rot.device}; move one of them")
    rht = None
    if cfg.rht:
        rht = RHT(S_U=ctx.S_U, S_V=random_signs(n, torch.Generator().manual_seed(cfg.seed + 1)).to(dev))
    Wr = rht.rotate_W(W.float()) if rht is not None else W.float()
    Hr = ctx.H_rot
    M = ctx.sqrt.half  # (d, d) float64, H_rot = M Mᵀ (lower triangular: ctx.sqrt.times_half skips its zeros)
    qQ = quantizer_for_bits(cfg.q_bits)
    qL = quantizer_for_bits(cfg.l_bits) if cfg.factors_quantized else None
    qR = quantizer_for_bits(cfg.r_bits) if cfg.factors_quantized else None
    gen = torch.Generator(device=dev).manual_seed(cfg.seed + 2)
    A_lr = Wr  # W − Q for the current Q (Q = 0 before the first Q step): LPLR's input
    Y = ctx.sqrt.times_half(Wr)  # (W − Q) M for the current Q
    denom = sq_frobenius(Y)

    def rel_error(L: Tensor, RM: Tensor, Y: Tensor) -> float:
        """‖(Q + LR − W)Xᵀ‖ / ‖WXᵀ‖ = ‖L (R M) − Y‖ / ‖W M‖ with Y = (W − Q) M and RM = R M."""
        E = torch.addmm(Y, L, RM, alpha=-1.0)  # Y − L R M
        return sq_frobenius(E) ** 0.5 / denom**0.5

    k = cfg.rank
    L = torch.zeros(n, k, device=dev)
    R = torch.zeros(k, d, device=dev)
    RM = torch.zeros(k, d, device=dev)  # R M: LPLR returns it with its R (the product its objective formed)
    L_sc = R_sc = None
    Qb = QuantizedBackbone(torch.zeros(n, d, device=dev), None, None)  # type: ignore[arg-type]
    steps = ("Q", "LR") if cfg.update_order == "Q-first" else ("LR", "Q")
    trace: list[dict[str, Any]] = []
    best: tuple | None = None
    done: set[str] = set()
    basis: Tensor | None = None  # svd="warm": the last LPLR call's right Ritz vectors (its next start)

    for t in range(cfg.outer_iters):
        for step in steps:
            entry: dict[str, Any] = {"outer": t, "step": step}
            if step == "Q":
                A = torch.addmm(Wr, L, R, alpha=-1.0)  # W − L R
                if not cfg.ldlq:
                    Qb = nearest_quantize(A, qQ)
                else:
                    use_update = cfg.hessian_update and bool(L.any())
                    Hq = hessian_update(Hr, L, R, cfg.sigma_reg, M=M) if use_update else Hr
                    shared = ctx.ldl if (not use_update and cfg.ldlq_order == "reverse") else None
                    Qb = ldlq_quantize(
                        A, Hq, qQ, order=cfg.ldlq_order, refine_passes=cfg.ldlq_refine_passes, ldl=shared
                    )
                A_lr = Wr - Qb.Q  # the next LPLR call's input
                Y = ctx.sqrt.times_half(A_lr)
                entry["error"] = rel_error(L, RM, Y)
            else:
                res = lplr_factorize(
                    A_lr, ctx.sqrt, k, qL, qR, cfg.inner_iters, sweep=cfg.lplr_sweep, svd=cfg.svd,
                    generator=gen, Y=Y, start=basis,
                )
                L, R, L_sc, R_sc, basis = res.L, res.R, res.L_codes, res.R_codes, res.basis
                RM = res.RM
                entry["lplr_errors"] = res.errors
                # ‖(LR − (W − Q))Xᵀ‖² is LPLR's own objective: no second O(n d²) evaluation needed
                entry["error"] = (res.sq_error / denom) ** 0.5
            trace.append(entry)
            done.add(step)
            if cfg.best_tracking == "substep" and len(done) == 2 and (best is None or entry["error"] < best[0]):
                best = (entry["error"], t, Qb, L, R, L_sc, R_sc)
        if cfg.best_tracking == "outer" and (best is None or trace[-1]["error"] < best[0]):
            best = (trace[-1]["error"], t, Qb, L, R, L_sc, R_sc)
        if progress is not None:
            progress(t)

    err, t_best, Qb, L, R, L_sc, R_sc = best  # type: ignore[misc]
    return Decomposition(
        method="caldera", Q=Qb.Q, L=L, R=R, Q_codes=Qb.codes, Q_scale=Qb.scale, L_codes=L_sc, R_codes=R_sc,
        rht=rht, error_trace=trace, error=err, best_iter=t_best, config=cfg.to_dict(), q_quantizer=qQ.name,
    )
