"""Frozen, validated, JSON-round-tripping configuration of one CALDERA decomposition.

Presets (``CalderaConfig.preset(name, **overrides)``):

* ``paper`` — Algorithm 1/2 as written in the paper (App. E.2: T_out = 15, T_in = 10, Q updated first,
  RHT on, LDLQ, the Hessian-update heuristic of App. E.2, inner sweep exactly as Alg. 2 writes it:
  both factors computed from the previous iterate, best iterate per outer iteration).
* ``authors-2025`` — what the authors' public code does at commit d3bb3a4 (authors-code.md §2): 20 outer /
  50 inner iterations, LR updated first, Hessian downdate on, 10 greedy LDLQ refinement passes,
  alternating (Gauss–Seidel) inner sweep, best iterate checked after every sub-step.
* The Appendix G.1 ablations: ``16bit-factors``, ``4bit-factors``, ``4bit-no-rht``, ``4bit-no-ldlq``,
  ``16bit-hessian-update`` — LR updated first and best iterate per sub-step, as the authors' ablation
  scripts ran them (authors-code.md §7).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

CONFIG_VERSION = 1

Q_BITS = (2, 3, 4)
SEED_LIMIT = 2**63
LR_BITS = (2, 3, 4, 16)
_CHOICES = {
    "update_order": ("Q-first", "LR-first"),
    "ldlq_order": ("reverse", "forward"),
    "svd": ("exact", "randomized", "warm"),
    "lplr_sweep": ("jacobi", "alternating"),
    "best_tracking": ("outer", "substep"),
    "fp32_matmul": ("auto", "ieee", "bf16"),
}


@dataclass(frozen=True)
class CalderaConfig:
    """Hyper-parameters of ``caldera_decompose`` (paper symbols in brackets).

    Attributes:
        rank: target rank k of L (n×k) and R (k×d).
        q_bits: bits per weight of the backbone Q [B_Q]; 2 → E8P, 3 → E8P-RVQ3, 4 → E8P-RVQ4.
        l_bits, r_bits: bits of L and R [B_L, B_R]; 16 keeps the factors unquantized (fp16 storage).
        outer_iters: T_out of Algorithm 1.
        inner_iters: T_in of Algorithm 2 (ignored when both factors are 16-bit: closed form only).
        update_order: "Q-first" (Alg. 1) or "LR-first" (authors' code).
        rht: randomized Hadamard transform of W and H before the loop (§5 "Baselines").
        ldlq: quantize Q with BlockLDLQ (eq. 3); False rounds A/s to the nearest codeword (ablation 4).
        ldlq_order: "reverse" = QuIP#'s block order (last block first, H = L D Lᵀ); "forward" = the
            paper's column-wise feedback form Q = Q(W + (W − Q)M), mH = (M + I) D (M + I)ᵀ.
        ldlq_refine_passes: greedy block-coordinate-descent passes after LDLQ (QuIP#'s quip_tune_iters).
        hessian_update: the App. E.2 heuristic H̃ = H − M V Vᵀ Mᵀ for the Q step.
        sigma_reg: H ← H / mean(diag H) + sigma_reg · I (QuIP# regularize_H); in (0, 1): 0 would leave a
            rank-deficient H singular.
        svd: the top-k SVD of the LPLR initialization: "exact" (full SVD), "randomized" (App. E.2 for 70B;
            a fresh Gaussian start each outer iteration) or "warm" (the randomized range finder in the first
            outer iteration, then one power iteration started from the previous outer iteration's top singular
            subspace; ``caldera.algorithm.regression.warm_top_k_svd``).
        lplr_sweep: "jacobi" (Alg. 2 as written: R_{i+1} from L_i and L_{i+1} from R_i) or
            "alternating" (L from R, then R from the new L; authors' code).
        best_tracking: "outer" (Alg. 1 line 5) or "substep" (authors' code: after every sub-step).
        fp32_matmul: the arithmetic of the float32 products on CPU tensors (``caldera.algorithm.matmul_precision``):
            "ieee" (IEEE float32), "bf16" (oneDNN's bfloat16 arithmetic, float32 in and out: ≈ 2× faster on a CPU
            with AVX512-BF16 or AMX, relative product error ≈ 2× IEEE float32's) or "auto" (bf16 where the CPU has
            those instructions and the job's CPU code paths are not pinned by ``numerics``). CUDA: always IEEE.
            The decomposition's ``config`` records the arithmetic that ran.
        seed: seeds the RHT sign vectors and randomized SVD (seed, seed + 1, seed + 2); in [0, 2**63).
    """

    rank: int = 64
    q_bits: int = 2
    l_bits: int = 4
    r_bits: int = 4
    outer_iters: int = 15
    inner_iters: int = 10
    update_order: str = "Q-first"
    rht: bool = True
    ldlq: bool = True
    ldlq_order: str = "reverse"
    ldlq_refine_passes: int = 0
    hessian_update: bool = True
    sigma_reg: float = 0.01
    svd: str = "exact"
    lplr_sweep: str = "jacobi"
    best_tracking: str = "outer"
    fp32_matmul: str = "auto"
    seed: int = 0
    version: int = CONFIG_VERSION

    def __post_init__(self) -> None:
        def bad(field: str, value: Any, accepted: str) -> ValueError:
            return ValueError(f"CalderaConfig.{field}={value!r} is invalid; accepted: {accepted}")

        for f in ("rank", "outer_iters", "inner_iters", "ldlq_refine_passes", "seed", "version"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool):
                raise bad(f, v, "an integer")
        if self.rank < 1:
            raise bad("rank", self.rank, "an integer >= 1 (use a QuIP# method for rank 0)")
        if not 0 <= self.seed < SEED_LIMIT:
            raise bad("seed", self.seed, "an integer in [0, 2**63) (the RHT signs use seed, seed + 1, seed + 2)")
        for f, allowed in (("q_bits", Q_BITS), ("l_bits", LR_BITS), ("r_bits", LR_BITS)):
            v = getattr(self, f)
            if isinstance(v, float) and v in allowed:  # 2.0 == 2, but the quantizer registry takes integers
                raise bad(f, v, f"one of the integers {allowed}: write {int(v)}, not {v}")
            if isinstance(v, bool) or not isinstance(v, int) or v not in allowed:
                raise bad(f, v, f"one of the integers {allowed}")
        if (self.l_bits == 16) != (self.r_bits == 16):
            raise bad("l_bits/r_bits", (self.l_bits, self.r_bits), "both 16 or both quantized (2, 3, 4)")
        if self.outer_iters < 1:
            raise bad("outer_iters", self.outer_iters, "an integer >= 1")
        if self.inner_iters < 0 or self.ldlq_refine_passes < 0:
            raise bad("inner_iters/ldlq_refine_passes", (self.inner_iters, self.ldlq_refine_passes), ">= 0")
        if isinstance(self.sigma_reg, bool) or not isinstance(self.sigma_reg, (int, float)):
            raise bad("sigma_reg", self.sigma_reg, "a float in (0, 1), e.g. 0.01")
        if not 0 < self.sigma_reg < 1:
            raise bad(
                "sigma_reg",
                self.sigma_reg,
                "a float in (0, 1), e.g. 0.01 (QuIP#'s default). It is the ridge added to the trace-normalized "
                "Hessian: with 0, a Hessian from fewer calibration tokens than inputs (or with dead inputs) is "
                "singular and BlockLDLQ's Cholesky factorization fails",
            )
        for f, choices in _CHOICES.items():
            if getattr(self, f) not in choices:
                raise bad(f, getattr(self, f), " | ".join(choices))
        for f in ("rht", "ldlq", "hessian_update"):
            if not isinstance(getattr(self, f), bool):
                raise bad(f, getattr(self, f), "True or False")
        if self.version != CONFIG_VERSION:
            raise bad("version", self.version, f"{CONFIG_VERSION} (this library's config version)")

    @property
    def factors_quantized(self) -> bool:
        return self.l_bits != 16

    def replace(self, **changes: Any) -> "CalderaConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CalderaConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"CalderaConfig: unknown keys {sorted(unknown)}; accepted: {sorted(known)}")
        return cls(**d)

    @classmethod
    def from_json(cls, s: str) -> "CalderaConfig":
        return cls.from_dict(json.loads(s))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "CalderaConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown CALDERA preset {name!r}; accepted: {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


_PAPER: dict[str, Any] = {}
# App. G.1 ablations as the authors ran them (authors-code.md §7): LR updated first, best iterate after every
# sub-step; the paper's text fixes only the factor bits, RHT, LDLQ and the Hessian update per ablation.
_G1 = dict(update_order="LR-first", best_tracking="substep")
_G1_16 = dict(_G1, l_bits=16, r_bits=16, hessian_update=False)
_G1_4 = dict(_G1, l_bits=4, r_bits=4, inner_iters=10, hessian_update=False)

PRESETS: dict[str, dict[str, Any]] = {
    "paper": _PAPER,
    "authors-2025": dict(
        outer_iters=20,
        inner_iters=50,
        update_order="LR-first",
        hessian_update=True,
        ldlq_refine_passes=10,
        lplr_sweep="alternating",
        best_tracking="substep",
        seed=42,
    ),
    "16bit-factors": _G1_16,
    "4bit-factors": _G1_4,
    "4bit-no-rht": {**_G1_4, "rht": False},
    "4bit-no-ldlq": {**_G1_4, "ldlq": False},
    "16bit-hessian-update": {**_G1_16, "hessian_update": True},
}
