"""Shared pieces of the theory checks: the result record, run profiles, statistics and atomic output.

Every check is a pure function of its inputs (matrices, seeds, sizes) that returns a :class:`CheckResult`:
the measured quantity as a ratio to the paper's bound (``ratio <= 1`` means the bound is respected), whether
the claim holds on the instance, and, when it does not, a counterexample with the seed that reproduces it.

Statistical claims are decided with an explicit false-alarm rate :data:`ALPHA` (the probability that a
correct claim is reported as failing), using Hoeffding bounds for bounded variables, Clopper–Pearson
intervals for probabilities and a normal (CLT) bound where only a variance estimate is available.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from scipy import stats
from torch import Tensor

from caldera.atomic import write_atomic  # noqa: F401  (re-exported for the theory modules)

#: False-alarm rate of every statistical decision (per check function call).
ALPHA = 1e-6

#: Verdicts used in the report.
HOLDS = "holds"
FAILS = "fails"
ASYMPTOTIC = "holds-only-asymptotically"
INFO = "measured"  # a measurement, not a claim with a bound (complexity exponents)


@dataclass
class CheckResult:
    """Outcome of one claim on one or more instances.

    Attributes:
        claim: short identifier, e.g. ``"optimality"``.
        label: the paper's ``\\label`` of the result (``lem:rank-constrained-regression``).
        statement: what was checked, in words (quotes the paper's formula where short).
        holds: True when no instance contradicted the claim (at false-alarm rate :data:`ALPHA` if statistical).
        ratio: worst measured quantity divided by the bound it is claimed to respect (``<= 1`` = respected);
            for identities the worst relative deviation divided by the tolerance.
        examples: number of instances examined.
        verdict: :data:`HOLDS`, :data:`FAILS`, :data:`ASYMPTOTIC` or :data:`INFO`.
        counterexample: parameters (with a seed) of an instance where the claim fails, or None.
        reasoning: one or two sentences of mathematics behind the verdict.
        details: raw numbers (go to the JSON report).
        kind: what is being checked — ``statement`` (a lemma/theorem statement or a claim the paper makes),
            ``proof-step`` (an intermediate formula as printed in a derivation), ``corrected`` (our corrected
            version of a printed formula), ``library`` (the library's implementation of a result),
            ``assumption`` (a hypothesis of the paper), ``consistency`` (two statements against each other) or
            ``measurement``. A result's verdict is decided by its ``statement`` claims.
    """

    claim: str
    label: str
    statement: str
    holds: bool
    ratio: float
    examples: int = 1
    verdict: str = ""
    counterexample: dict[str, Any] | None = None
    reasoning: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    kind: str = "statement"

    def __post_init__(self) -> None:
        if not self.verdict:
            self.verdict = HOLDS if self.holds else FAILS

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


def combine(results: list[CheckResult], *, claim: str | None = None, statement: str | None = None,
            reasoning: str | None = None) -> CheckResult:
    """Merge results of the same claim over several instances: worst ratio, first counterexample."""
    if not results:
        raise ValueError("combine() needs at least one result")
    first = results[0]
    worst = max(results, key=lambda r: r.ratio if math.isfinite(r.ratio) else math.inf)
    failing = [r for r in results if not r.holds]
    verdicts = {r.verdict for r in results}
    if failing:
        verdict = FAILS if FAILS in verdicts else failing[0].verdict
    elif ASYMPTOTIC in verdicts:
        verdict = ASYMPTOTIC
    else:
        verdict = first.verdict
    return CheckResult(
        claim=claim or first.claim,
        label=first.label,
        statement=statement or first.statement,
        holds=not failing,
        ratio=worst.ratio,
        examples=sum(r.examples for r in results),
        verdict=verdict,
        counterexample=failing[0].counterexample if failing else None,
        reasoning=reasoning or (failing[0].reasoning if failing else first.reasoning),
        details={"instances": [r.details for r in results][:50], "worst": worst.details},
        kind=first.kind,
    )


@dataclass(frozen=True)
class Profile:
    """How much work a run does. ``ci`` is the fast default; ``thorough`` examines many more instances."""

    name: str
    examples: int  # random instances per deterministic claim
    trials: int  # Monte Carlo repetitions per statistical instance
    scale: int  # size multiplier for the "as n grows" sequences (1 = smallest)


PROFILES: dict[str, Profile] = {
    "ci": Profile("ci", examples=6, trials=300, scale=1),
    "thorough": Profile("thorough", examples=40, trials=2000, scale=2),
}


def get_profile(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; accepted: {sorted(PROFILES)}")
    return PROFILES[name]


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run with ``n`` intra-op threads and restore the previous setting (small LAPACK calls on a shared machine
    are 10–100× slower with oversubscribed threads than with one)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ------------------------------------------------------------------------------------------ random helpers


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def randn(*shape: int, g: torch.Generator) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def orthonormal(n: int, r: int, g: torch.Generator) -> Tensor:
    """n×r matrix with orthonormal columns (r ≤ n), Haar-distributed."""
    Q, R = torch.linalg.qr(randn(n, r, g=g))
    return Q * torch.sign(torch.diagonal(R))


def matrix_with_spectrum(n: int, d: int, s: Tensor, g: torch.Generator) -> Tensor:
    """n×d float64 matrix with singular values ``s`` (len ≤ min(n, d)) and random singular vectors."""
    r = s.numel()
    return (orthonormal(n, r, g) * s.double()) @ orthonormal(d, r, g).T


def sq_fro(x: Tensor) -> float:
    return float(x.double().pow(2).sum())


def rel_dev(a: Tensor | float, b: Tensor | float, floor: float = 1e-300) -> float:
    """Relative deviation ‖a − b‖ / max(‖b‖, floor) for tensors or scalars."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        a_t, b_t = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
        return float((a_t - b_t).norm() / max(float(b_t.norm()), floor))
    return abs(float(a) - float(b)) / max(abs(float(b)), floor)


# -------------------------------------------------------------------------------------------- statistics


def hoeffding_halfwidth(value_range: float, n: int, alpha: float = ALPHA, two_sided: bool = True) -> float:
    """t with P(|mean − E| ≥ t) ≤ alpha for n i.i.d. variables in an interval of length ``value_range``."""
    return value_range * math.sqrt(math.log((2.0 if two_sided else 1.0) / alpha) / (2.0 * n))


def z_quantile(alpha: float = ALPHA) -> float:
    """One-sided standard normal quantile z with P(Z > z) = alpha."""
    return float(stats.norm.isf(alpha))


def clopper_pearson(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Two-sided (1 − alpha) Clopper–Pearson interval for a binomial proportion k / n."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.isf(alpha / 2, k + 1, n - k))
    return lo, hi


def mean_upper_confidence(samples: Tensor, alpha: float = ALPHA) -> tuple[float, float, float]:
    """(mean, lower, upper) one-sided CLT confidence bounds at level alpha each."""
    x = samples.double()
    n = x.numel()
    mean = float(x.mean())
    se = float(x.std(unbiased=True)) / math.sqrt(n) if n > 1 else math.inf
    z = z_quantile(alpha)
    return mean, mean - z * se, mean + z * se


def loglog_slope(sizes: list[float], values: list[float]) -> float:
    """Least-squares slope of log(values) against log(sizes) (a scaling exponent)."""
    xs = torch.tensor([math.log(s) for s in sizes], dtype=torch.float64)
    ys = torch.tensor([math.log(max(v, 1e-300)) for v in values], dtype=torch.float64)
    xc = xs - xs.mean()
    return float((xc * (ys - ys.mean())).sum() / xc.pow(2).sum())


# ---------------------------------------------------------------------------------------------- output


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Tensor):
        return _jsonable(x.tolist())
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, (bool, int, str)) or x is None:
        return x
    if hasattr(x, "item"):
        return _jsonable(x.item())
    return str(x)


def dumps_json(obj: Any) -> str:
    return json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n"
