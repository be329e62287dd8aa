"""App. F.2 — the uniformly dithered scalar quantizer (label
``lem:uniformly-dithered-scalar-quantizer-mean-variance``,
eq. ``uniform-dithered-quantizer-properties``).

Statement: *"For scalar x with |x| ≤ R, denote the quantization error of uniformly dithered B-bit scalar
quantizer as ε = Q_{R,B}(x) − x. Then, E[ε] = 0 and Var(ε) ≤ R²/(2^B − 1)²"* (= Δ²/4, Δ = 2R/(2^B − 1)), and
*"When the input x to the quantizer exceeds R, the quantizer is said to be saturated, causing the quantization
error to deviate from zero mean and bounded variance."*

What is checked on the library's :class:`caldera.quantizers.DitheredUniform`, at K points x (grid points, cell
midpoints, random points, ±R) with N independent draws each, family-wise false-alarm rate α = 1e-6 (Bonferroni
over the K points):

* ``support`` — every output is one of the two grid neighbours of x (exact);
* ``unbiased`` — |mean ε̂| ≤ Δ·√(log(2K/α)/(2N)) (Hoeffding: ε lies in an interval of length Δ);
* ``variance`` — mean ε̂² ≤ Δ²/4 + Δ²·√(log(K/α)/(2N)) (one-sided Hoeffding: ε² ∈ [0, Δ²]); the bound is tight
  at cell midpoints, where ε = ±Δ/2 surely;
* ``saturation-bias`` — for |x| > R the mean error is significantly non-zero (the remark), ratio
  = Hoeffding half-width / |mean ε̂| (≤ 1: bias detected).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from caldera.quantizers import DitheredUniform
from theory.common import ALPHA, CheckResult, Profile, combine, gen, hoeffding_halfwidth
from theory.dithered import step

LABEL = "lem:uniformly-dithered-scalar-quantizer-mean-variance"


def test_points(R: float, bits: int, seed: int, count: int = 24) -> Tensor:
    """Grid points, midpoints, ±R and uniform random points of [−R, R] (float64)."""
    d = step(R, bits)
    M = 2**bits
    g = gen(seed)
    grid = -R + d * torch.arange(M, dtype=torch.float64)
    ends = torch.tensor([-R, R], dtype=torch.float64)
    rand = -R + 2 * R * torch.rand(count, generator=g, dtype=torch.float64)
    pts = [grid[: min(M, 6)], (grid[:-1] + d / 2)[: min(M - 1, 6)], ends, rand]
    return torch.cat(pts)


def sample_errors(x: Tensor, R: float, bits: int, trials: int, seed: int,
                  quantizer: DitheredUniform | None = None) -> Tensor:
    """(K, N) errors Q(x) − x of N independent draws at each of the K points (float64)."""
    q = quantizer if quantizer is not None else DitheredUniform(R, bits)
    g = gen(seed)
    X = x.double()[:, None].expand(-1, trials).contiguous().float()
    out = q.dequantize(q.quantize(X, generator=g) if _takes_generator(q) else q.quantize(X)).double()
    return out - X.double()


def _takes_generator(q: object) -> bool:
    import inspect

    try:
        return "generator" in inspect.signature(q.quantize).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False


def check_support(R: float, bits: int, *, seed: int, trials: int = 200, quantizer=None) -> CheckResult:
    """Outputs are grid points q_k or q_{k+1} with q_k ≤ x < q_{k+1} (exact)."""
    x = test_points(R, bits, seed)
    err = sample_errors(x, R, bits, trials, seed, quantizer)
    d = step(R, bits)
    xf = x.float().double()[:, None]
    out = xf + err
    j = torch.round((out + R) / d)
    on_grid = float(((out + R) / d - j).abs().max())
    neighbour = float(((out - xf).abs() / d).max())
    in_range = float(j.min()) >= 0 and float(j.max()) <= 2**bits - 1
    # float32 inputs/outputs resolve the grid only to ~eps32·R: at 16 bits that is ~0.2 % of a step
    tol = 1e-3 + 4 * torch.finfo(torch.float32).eps * R / d
    holds = on_grid <= tol and neighbour <= 1 + tol and in_range
    return CheckResult(
        f"support[B={bits}]", LABEL, "Q(x) ∈ {q_k, q_{k+1}} (the two grid neighbours of x)", holds,
        neighbour, x.numel() * trials,
        counterexample=None if holds else {"seed": seed, "R": R, "bits": bits, "off_grid": on_grid,
                                           "max |Q(x) − x|/Δ": neighbour},
        reasoning="By construction (eq. uniform-dithered-quantizer) Q rounds x up with probability r = (x − "
                  "q_k)/Δ and down otherwise.",
        details={"off_grid": on_grid, "max_err_over_delta": neighbour},
    )


def check_unbiased(R: float, bits: int, *, seed: int, trials: int = 2000, x: Tensor | None = None,
                   quantizer=None, alpha: float = ALPHA) -> CheckResult:
    """|mean ε̂(x)| ≤ Hoeffding half-width at every x (family-wise level ``alpha``); ratio = max |mean|/half-width."""
    x = test_points(R, bits, seed) if x is None else x.double()
    err = sample_errors(x, R, bits, trials, seed, quantizer)
    d = step(R, bits)
    K = x.numel()
    t = hoeffding_halfwidth(d, trials, alpha / K)
    means = err.mean(dim=1)
    ratio = float(means.abs().max()) / t
    i = int(means.abs().argmax())
    holds = ratio <= 1
    return CheckResult(
        f"unbiased[B={bits}]", LABEL, "E[Q(x)] = x for |x| ≤ R (Hoeffding test, α = 1e-6)", holds, ratio, K,
        counterexample=None if holds else {"seed": seed, "R": R, "bits": bits, "x": float(x[i]),
                                           "mean_error": float(means[i]), "halfwidth": t, "trials": trials},
        reasoning="E Q(x) = q_{k+1} r + q_k (1 − r) = q_k + Δ r = x.",
        details={"halfwidth": t, "max_abs_mean": float(means.abs().max()), "points": K, "trials": trials},
    )


def check_variance(R: float, bits: int, *, seed: int, trials: int = 2000, bound_factor: float = 1.0,
                   quantizer=None, alpha: float = ALPHA) -> CheckResult:
    """mean ε̂² ≤ bound_factor·Δ²/4 + Hoeffding slack at every x; ratio = max mean ε̂² / (Δ²/4)."""
    x = test_points(R, bits, seed)
    err = sample_errors(x, R, bits, trials, seed, quantizer)
    d = step(R, bits)
    K = x.numel()
    slack = hoeffding_halfwidth(d**2, trials, alpha / K, two_sided=False)
    ms = err.pow(2).mean(dim=1)
    bound = bound_factor * d**2 / 4
    i = int((ms - bound).argmax())
    holds = bool((ms <= bound + slack).all())
    assert abs(d**2 / 4 - R**2 / (2**bits - 1) ** 2) <= 1e-12 * R**2  # Δ²/4 = R²/(2^B − 1)², as printed
    return CheckResult(
        f"variance[B={bits}]", LABEL,
        "E(Q(x) − x)² ≤ Δ²/4 = R²/(2^B − 1)² for |x| ≤ R (Hoeffding test, α = 1e-6)",
        holds, float(ms.max()) / (d**2 / 4), K,
        counterexample=None if holds else {"seed": seed, "R": R, "bits": bits, "x": float(x[i]),
                                           "mean_sq_error": float(ms[i]), "bound": bound, "slack": slack},
        reasoning="E ε² = (x − q_k)(q_{k+1} − x) ≤ Δ²/4, with equality at the cell midpoints (ε = ±Δ/2).",
        details={"max_mean_sq": float(ms.max()), "delta2_over_4": d**2 / 4, "slack": slack},
    )


def check_saturation_bias(R: float, bits: int, *, seed: int, trials: int = 20000, offsets: tuple[float, ...] =
                          (0.1, 0.5, 2.0), alpha: float = ALPHA) -> CheckResult:
    """For x = ±R(1 + c) the mean error differs from 0 (remark after the lemma). ratio = half-width / min |mean|."""
    x = torch.tensor([s * R * (1 + c) for c in offsets for s in (1, -1)], dtype=torch.float64)
    err = sample_errors(x, R, bits, trials, seed)
    t = hoeffding_halfwidth(2 * R, trials, alpha / x.numel())  # outputs lie in [−R, R]: error range 2R
    means = err.mean(dim=1)
    ratio = t / float(means.abs().min()) if float(means.abs().min()) > 0 else math.inf
    holds = ratio <= 1
    return CheckResult(
        f"saturation-bias[B={bits}]", LABEL, "|x| > R: E[Q(x)] ≠ x (saturation breaks unbiasedness)", holds,
        ratio,
        x.numel(), counterexample=None if holds else {"seed": seed, "x": x.tolist(), "means": means.tolist()},
        reasoning="Outside [−R, R] the output is confined to the grid, whose extreme points are ±R, so E "
                  "Q(x) ∈ [−R, R] cannot equal x: the error has mean −(|x| − R)·sign(x) when the input is "
                  "clamped.",
        details={"x": x.tolist(), "mean_error": means.tolist(), "halfwidth": t},
    )


def run(profile: Profile) -> list[CheckResult]:
    trials = max(2000, profile.trials * 10)
    out: dict[str, list[CheckResult]] = {}
    configs = [(1.0, 1), (1.5, 2), (0.7, 3), (3.0, 4), (2.0, 8), (5.0, 12), (0.3, 16)]
    for i, (R, bits) in enumerate(configs[: max(4, profile.examples + 1)]):
        seed = 3000 + i
        out.setdefault("support", []).append(check_support(R, bits, seed=seed))
        out.setdefault("unbiased", []).append(check_unbiased(R, bits, seed=seed, trials=trials))
        out.setdefault("variance", []).append(check_variance(R, bits, seed=seed, trials=trials))
        out.setdefault("saturation-bias", []).append(check_saturation_bias(R, bits, seed=seed))
    return [combine(v, claim=k) for k, v in out.items()]
