"""CALDERA with the rank k chosen per matrix at the bits of uniform rank k (``caldera-rank-per-layer``).

The paper fixes one target rank k for every matrix and leaves "the target rank (k) can be treated as a
hyper-parameter, and adjusted across different layers" as future work (§6, Limitations). This method spends
the low-rank bits of uniform rank k, ``Σ_i k (n_i + d_i) B_LR``, on per-matrix ranks k_i chosen from the
calibration data alone, then runs Algorithm 1 on each matrix with its own k_i. It is one file: the pipeline
knows it only through :class:`~caldera.methods.registry.ModelPlan` (``profile`` per matrix, ``allocate`` per
model).

**Profile** (:func:`profile`, per matrix, on the calibration Hessian H (d, d) and W (n, d)): Algorithm 1's first
Q step in the RHT basis (line 3 with L = R = 0: ``Q = LDLQ(W̃)``; exactly the first iterate of the Q-first
configuration) and the H-weighted spectrum of its residual, ``σ_j²((W̃ − Q) M)`` with ``H̃ = M Mᵀ``. By
Lemma 4.2 / App. C.4 the best rank-r factors of that residual leave ``Σ_{j ≥ r} σ_j²``: the rank-error curve of
the matrix's LR step, in the paper's own objective ``‖(W − Q − LR) Xᵀ‖_F²``.

**Allocate** (:func:`allocate`, per model): minimize ``Σ_i ‖(W_i − Ŵ_i) X_iᵀ‖² / ‖W_i X_iᵀ‖²`` (each matrix's
relative calibration-aware error, as the decomposition reports it) subject to ``Σ_i k_i (n_i + d_i) ≤
Σ_i k (n_i + d_i)`` (equal low-rank bits, hence equal average bits by the App. E.5 formula). The errors are
taken relative to each matrix's own ``‖W_i X_iᵀ‖²`` because the absolute ones carry each layer's activation
scale (which grows with depth in a pre-norm residual stream without a matching weight in the loss); relative,
each matrix counts by how much of its own output it loses. Ranks move in steps of ``rank_multiple``, from
``min_rank`` to ``max_rank_factor · k`` (and below min(n, d)); each step's gain is a sum of decreasing σ², so
the curves are convex and the greedy rule (next step of largest gain per bit while the budget lasts) is the
exact optimum of the continuous problem and within one step per matrix of the integer one.

What it does not model: the factors' own 4-bit quantization error and the later Q/LR alternation (both
lower every matrix's error, not its ranking of ranks), and for LR-first configurations the first step
differs from the profiled one. Evaluation never enters: the choice is made on the calibration Hessians.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from caldera.algorithm.config import CalderaConfig
from caldera.methods.caldera_method import caldera, hadamard_ldlq_shape
from caldera.methods.registry import ModelPlan, register_method

if TYPE_CHECKING:  # torch and the engine are imported where they run (see caldera.methods.registry)
    import torch

    from caldera.algorithm.decomposition import HessianContext


@dataclass(frozen=True)
class RankPerLayerConfig(CalderaConfig):
    """:class:`~caldera.algorithm.config.CalderaConfig` (``rank`` = the uniform rank whose bits are spent) plus the
    allocation's steps and bounds: ranks are multiples of ``rank_multiple`` in ``[min_rank, max_rank_factor ·
    rank]`` (and below min(n, d))."""

    rank_multiple: int = 8
    min_rank: int = 8
    max_rank_factor: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        for f in ("rank_multiple", "min_rank", "max_rank_factor"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"RankPerLayerConfig.{f}={v!r}; accepted: an integer >= 1")
        if self.min_rank > self.rank:
            raise ValueError(f"RankPerLayerConfig.min_rank={self.min_rank} exceeds rank={self.rank} (the uniform "
                             "rank whose bits are shared out): every matrix would get more than the budget")
        if self.min_rank % self.rank_multiple:
            raise ValueError(f"RankPerLayerConfig.min_rank={self.min_rank} is not a multiple of rank_multiple="
                             f"{self.rank_multiple}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "RankPerLayerConfig":
        return super().preset(name, **overrides)  # type: ignore[return-value]


def caldera_config(config: RankPerLayerConfig) -> CalderaConfig:
    """The plain Algorithm 1 config of ``config`` (its rank as given: the allocated one, per matrix)."""
    return CalderaConfig(**{f.name: getattr(config, f.name) for f in dataclasses.fields(CalderaConfig)})


def max_rank(config: RankPerLayerConfig, n: int, d: int) -> int:
    """The largest rank the allocation may give an n×d matrix: a multiple of ``rank_multiple``, at most
    ``max_rank_factor · rank`` and below min(n, d)."""
    cap = min(config.max_rank_factor * config.rank, min(n, d) - 1)
    return max(config.min_rank, cap - cap % config.rank_multiple)


def profile(W: torch.Tensor, H: torch.Tensor, config: RankPerLayerConfig,
            context: HessianContext | None = None) -> dict[str, Any]:
    """One matrix's rank-error curve from its calibration data (module docstring).

    W (n, d) float32, H (d, d) float64. Runs Algorithm 1's first Q step through :func:`caldera_decompose`
    itself (Q-first, one outer iteration, this config's RHT, LDLQ and seeds; the rank-1 fp16 LR it also fits
    is discarded), then the singular values of ``Y = (W̃ − Q) M`` (float64). Returns ``{"shape": [n, d],
    "sigma2": [σ_j², j < max_rank], "residual2": ‖Y‖², "norm2": ‖W̃ M‖²}`` (JSON-able floats).
    """
    import torch

    from caldera.algorithm.decomposition import HessianContext, caldera_decompose

    n, d = W.shape
    first_q = dataclasses.replace(caldera_config(config), rank=1, l_bits=16, r_bits=16, outer_iters=1,
                                  update_order="Q-first", hessian_update=False, best_tracking="outer")
    ctx = context or HessianContext.prepare(H, rht=config.rht, seed=config.seed, sigma_reg=config.sigma_reg)
    dec = caldera_decompose(W, H, first_q, context=ctx)
    Wr = dec.rht.rotate_W(W.float()) if dec.rht is not None else W.float()
    M = ctx.sqrt.half
    WM = Wr.double() @ M
    Y = WM - dec.Q.double() @ M
    sigma2 = torch.linalg.svdvals(Y).pow(2)
    return {"shape": [n, d], "sigma2": sigma2[: max_rank(config, n, d)].tolist(),
            "residual2": float(Y.pow(2).sum()), "norm2": float(WM.pow(2).sum())}


def predicted_error(prof: dict[str, Any], rank: int) -> float:
    """Relative calibration-aware error² of a profiled matrix at ``rank``: ``(‖Y‖² − Σ_{j<rank} σ_j²) / ‖W̃ M‖²``."""
    if prof["norm2"] <= 0:
        return 0.0
    return max(prof["residual2"] - sum(prof["sigma2"][:rank]), 0.0) / prof["norm2"]


def allocate(profiles: dict[str, dict[str, Any]], config: RankPerLayerConfig) -> dict[str, dict[str, int]]:
    """``{matrix key: {"rank": k_i}}`` minimizing Σ_i :func:`predicted_error` at ``Σ_i k_i (n_i + d_i) ≤ Σ_i k
    (n_i + d_i)`` (module docstring). Greedy over steps of ``rank_multiple`` by gain per parameter; ties go
    to the smaller key, so the result is a function of the profiles alone."""
    step = config.rank_multiple
    size = {key: sum(p["shape"]) for key, p in profiles.items()}
    budget = config.rank * sum(size.values())
    ranks = {key: config.min_rank for key in profiles}
    spent = sum(ranks[key] * size[key] for key in profiles)

    def candidate(key: str) -> tuple[float, str] | None:
        p, r = profiles[key], ranks[key]
        if r + step > max_rank(config, *p["shape"]) or p["norm2"] <= 0:
            return None
        gain = sum(p["sigma2"][r : r + step]) / p["norm2"]
        return -gain / (step * size[key]), key

    heap = [c for c in map(candidate, sorted(profiles)) if c is not None]
    heapq.heapify(heap)
    while heap:
        _, key = heapq.heappop(heap)
        cost = step * size[key]
        if spent + cost > budget:
            continue  # this matrix's next step no longer fits; a smaller matrix's may
        ranks[key] += step
        spent += cost
        nxt = candidate(key)
        if nxt is not None:
            heapq.heappush(heap, nxt)
    return {key: {"rank": r} for key, r in sorted(ranks.items())}


register_method(
    "caldera-rank-per-layer", RankPerLayerConfig, shares_hessian_context=True,
    check_shape=lambda c, n, d: hadamard_ldlq_shape(c, n, d, quantized_factors=c.factors_quantized),
    plan=ModelPlan(profile=profile, allocate=allocate), family="caldera",
)(lambda W, H, config, context=None: caldera(W, H, caldera_config(config), context=context))
