"""How many compression seeds each variant gets: chosen before a run, from committed spreads, at 80 % power.

A claim compares two variants on their shared seeds (:func:`caldera.stats.paired_seed_part`). With S shared seeds,
a per-seed paired difference of standard deviation ``σ_d`` (one realization's log-ratio spread, measured on a
committed seed block) and a window half-width ``w`` (the paired 95 % window interval of the log ratio at the run's
windows) is decided by an interval of half-width ``sqrt(w² + (t σ̂ / √S)²)``, ``σ̂²`` the larger of the pair's
own variance (``S − 1`` df) and the seed block's (``(V − 1)(S − 1)`` df). The power to resolve a true log ratio
``δ`` (the paper's own effect, never this run's outcome) is the share of seeded simulated runs that this rule
decides (:func:`power`; at two seeds the pair's own variance, one degree of freedom, wins half the time and the
t quantile of 12.7 that comes with it costs most of the power). :func:`seeds_for_power` finds the smallest S
reaching the target;
:func:`allocate` spends a budget of replicate jobs on the comparisons within reach, cheapest first, and says for
every comparison whether it is within reach and at what S.

Pure functions of numbers; ``benchmarks/seed_design.py`` reads the committed spreads and writes the record.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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


#: Monte Carlo draws behind one :func:`power` (seeded: the same design every time)
DRAWS = 4000


def power(c: Comparison, seeds: int, variants: int = 2, draws: int = DRAWS, seed: int = 0) -> float:
    """Power of ``c`` at ``seeds`` shared seeds in a block of ``variants`` variants: the share of simulated runs
    whose paired interval excludes no-difference, as the report decides it (:func:`caldera.stats.
    paired_seed_part`: the larger of the pair's own variance, ``seeds − 1`` df, and the block's, ``(variants −
    1)(seeds − 1)`` df; windows in quadrature). The per-seed differences are ``N(effect, sd_pair²)``, the window
    part ``N(0, (window_half / z_0.975)²)``, the block's estimate ``sd_pair² χ²_df / df`` (the model holding).
    0 for a zero effect or where no variance can be estimated (one seed in a block of two)."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if c.effect == 0.0:
        return 0.0
    df_b = (variants - 1) * (seeds - 1) if seeds > 1 else (variants - 2 if variants > 2 else 0)
    if df_b < 1:
        return 0.0
    rng = np.random.default_rng(seed)
    d = c.effect + c.sd_pair * rng.standard_normal((draws, seeds))
    est = d.mean(axis=1) + (c.window_half / Z95) * rng.standard_normal(draws)
    var_b = c.sd_pair ** 2 * rng.chisquare(df_b, draws) / df_b
    if seeds > 1:
        var_o = d.var(axis=1, ddof=1)
        own = var_o > var_b
        var = np.where(own, var_o, var_b)
        t = np.where(own, t_quantile(seeds - 1), t_quantile(df_b))
    else:
        var, t = var_b, np.full(draws, t_quantile(df_b))
    half = np.hypot(c.window_half, t * np.sqrt(var / seeds))
    return float((np.abs(est) > half).mean())


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
