"""How many compression seeds each variant gets: chosen before a run, from committed spreads, at 80 % power.

A claim compares two variants on their shared seeds (:func:`caldera.stats.paired_seed_part`). With S shared seeds,
a per-seed paired difference of standard deviation ``σ_d`` (one realization's log-ratio spread, measured on a
committed seed block) and a window half-width ``w`` (the paired 95 % window interval of the log ratio at the run's
windows), the comparison's standard error is ``se(S) = sqrt((w / z_0.975)² + σ_d² / S)`` and its interval's
half-width ``h(S) = sqrt(w² + (t_{0.975, df} σ_d / √S)²)`` (the report's construction, ``df`` the seed block's
``(V − 1)(S − 1)``). A true log ratio ``δ`` (the paper's own effect, never this run's outcome) is resolved with
power ``Φ((|δ| − h(S)) / se(S))`` (normal approximation, the spread at its expected value; a simulation of the
decision checks it in the tests). :func:`seeds_for_power` finds the smallest S reaching the target;
:func:`allocate` spends a budget of replicate jobs on the comparisons within reach, cheapest first, and says for
every comparison whether it is within reach and at what S.

Pure functions of numbers; ``benchmarks/seed_design.py`` reads the committed spreads and writes the record.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from caldera.stats import Z95, t_quantile

#: the power a design aims for
POWER = 0.8


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One claim's paired comparison: variants ``a`` and ``b`` of the seed block ``block`` (their stand-in), the
    paper's log ratio ``effect``, the window half-width ``window_half`` (log, 95 %) at the run's windows, and
    ``sd_pair``, the standard deviation of one per-seed paired log ratio (from a committed seed block)."""

    claim: str
    a: str
    b: str
    block: str
    effect: float
    window_half: float
    sd_pair: float

    def __post_init__(self):
        for name in ("effect", "window_half", "sd_pair"):
            x = getattr(self, name)
            if not math.isfinite(x):
                raise ValueError(f"Comparison {self.a} / {self.b}: {name} must be finite, got {x}")
        if self.window_half < 0 or self.sd_pair < 0:
            raise ValueError(f"Comparison {self.a} / {self.b}: window_half and sd_pair must be >= 0")


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def power(c: Comparison, seeds: int, variants: int = 2) -> float:
    """Power of ``c`` at ``seeds`` shared seeds in a block of ``variants`` variants (module docstring); 0 for a
    zero effect. One seed has no t quantile of its own: its df is the block's at two seeds' worth, ``variants −
    1``, which needs a block of three or more (else the power is 0: its spread is unknown)."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if c.effect == 0.0:
        return 0.0
    df = (variants - 1) * (seeds - 1) if seeds > 1 else (variants - 1 if variants > 2 else 0)
    if df < 1:
        return 0.0
    se = math.sqrt((c.window_half / Z95) ** 2 + c.sd_pair ** 2 / seeds)
    if se == 0.0:
        return 1.0
    half = math.hypot(c.window_half, t_quantile(df) * c.sd_pair / math.sqrt(seeds))
    return _phi((abs(c.effect) - half) / se)


def seeds_for_power(c: Comparison, variants: int = 2, target: float = POWER, most: int = 12) -> int | None:
    """The smallest number of shared seeds (2 … ``most``) at which ``c`` reaches ``target`` power in a block of
    ``variants``; None when ``most`` seeds do not (out of reach: the windows alone, or the realization spread at
    affordable seeds, hide the paper's effect)."""
    for s in range(2, most + 1):
        if power(c, s, variants) >= target:
            return s
    return None


def allocate(comparisons: Sequence[Comparison], job_seconds: Mapping[str, float], budget_s: float,
             target: float = POWER, most: int = 12) -> dict[str, Any]:
    """Seeds per variant for ``comparisons`` within ``budget_s`` seconds of replicate jobs (``job_seconds[v]``:
    one more realization of v; seed 0 is the run's own compression and costs nothing here).

    Each comparison's need is :func:`seeds_for_power` in its block of every variant the comparisons of that block
    name; those within reach are taken cheapest first (the extra realizations they add to the design), while the budget
    lasts. Returns ``{"seeds": {variant: S}, "spent_s", "budget_s", "comparisons": [{claim, a, b, effect,
    need, power_at_design, within_reach, funded}]}``; a variant not in ``seeds`` runs once."""
    variants = sorted({v for c in comparisons for v in (c.a, c.b)})
    missing = [v for v in variants if v not in job_seconds]
    if missing:
        raise ValueError(f"job_seconds has no cost for {missing}")
    size = {blk: max(2, len({v for c in comparisons if c.block == blk for v in (c.a, c.b)}))
            for blk in {c.block for c in comparisons}}
    need = {c: seeds_for_power(c, size[c.block], target, most) for c in comparisons}
    design: dict[str, int] = {}
    spent = 0.0

    def extra(c: Comparison, s: int) -> float:
        return sum(max(0, s - design.get(v, 1)) * job_seconds[v] for v in (c.a, c.b))

    funded = set()
    for c in sorted((c for c in comparisons if need[c] is not None), key=lambda c: (extra(c, need[c]), c.claim)):
        cost = extra(c, need[c])
        if spent + cost > budget_s:
            continue
        spent += cost
        for v in (c.a, c.b):
            design[v] = max(design.get(v, 1), need[c])
        funded.add(c)
    rows = []
    for c in comparisons:
        s = min(design.get(c.a, 1), design.get(c.b, 1))
        rows.append({"claim": c.claim, "a": c.a, "b": c.b, "block": c.block, "effect": c.effect,
                     "window_half": c.window_half, "sd_pair": c.sd_pair, "need": need[c],
                     "within_reach": need[c] is not None, "funded": c in funded, "seeds": s,
                     "power_at_design": power(c, s, size[c.block])})
    return {"seeds": dict(sorted(design.items())), "spent_s": spent, "budget_s": float(budget_s),
            "target": target, "comparisons": rows}
