"""Intervals for the evaluation numbers and paired comparisons of two variants (pure functions of arrays).

Conventions (every function here follows them):

* **Level**: two-sided 95 % (``LEVEL``).
* **Bootstrap**: nonparametric, over the evaluation's independent units (perplexity windows, zero-shot
  documents), ``RESAMPLES`` = 2,000 resamples drawn with ``numpy.random.default_rng(SEED)``, ``SEED`` = 0.
  The resample indices depend only on ``(n_units, RESAMPLES, SEED)`` (:func:`bootstrap_indices`), so two
  variants scored on the same units are resampled *together* (paired) and every run gives the same interval.
* **Percentile interval**: the ``(1 − LEVEL)/2`` and ``(1 + LEVEL)/2`` quantiles of the bootstrap draws, with
  linear interpolation between order statistics (:func:`percentile`; numpy's default "type 7").
* **Perplexity** of a set of windows: ``exp(Σ_i nll_i / Σ_i t_i)`` with ``nll_i`` the summed next-token NLL of
  window i (nats) and ``t_i`` its number of scored tokens — the QuIP#/GPTQ protocol when all windows have
  the same length. A ratio of two perplexities on the same windows is ``exp(mean_A − mean_B)`` (token-weighted
  means), bootstrapped with the same window indices for A and B.
* **Accuracy** of one variant: Wilson score interval (closed form; sensible at 0 % and 100 %, where the
  percentile bootstrap collapses to a point).
* **Smallest detectable difference** of a paired comparison (``sdd``): half the width of its paired
  interval, in the comparison's own unit (a ratio's is reported on the log scale and printed as ±%). A true
  difference much smaller than this gives an interval that straddles "no difference" (an inconclusive
  verdict); one larger than it is usually resolved.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
Z95 = 1.959963984540054  # standard normal quantile at 0.975


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of ``values`` with linear interpolation between order statistics:
    position ``h = (n − 1)·q`` in the sorted values, ``x[⌊h⌋] + (h − ⌊h⌋)(x[⌊h⌋+1] − x[⌊h⌋])``."""
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if x.size == 0:
        raise ValueError("percentile of an empty sample")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    h = (x.size - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, x.size - 1)
    return float(x[lo] + (h - lo) * (x[hi] - x[lo]))


def percentile_interval(draws: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    a = (1.0 - level) / 2.0
    return percentile(draws, a), percentile(draws, 1.0 - a)


def bootstrap_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """``(resamples, n)`` int64 indices, each row n draws with replacement from ``range(n)``."""
    if n < 1:
        raise ValueError(f"bootstrap needs at least one unit, got n={n}")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _arr(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite values")
    return a


def _weighted_means(values: np.ndarray, weights: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return values[idx].sum(axis=1) / weights[idx].sum(axis=1)


def bootstrap_mean(values, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> dict:
    """Mean of ``values`` with its percentile-bootstrap interval: ``{"estimate", "lo", "hi", "n"}``."""
    v = _arr(values, "values")
    draws = v[bootstrap_indices(v.size, resamples, seed)].mean(axis=1)
    lo, hi = percentile_interval(draws, level)
    return {"estimate": float(v.mean()), "lo": lo, "hi": hi, "n": int(v.size)}


def perplexity_interval(nll_sums, n_tokens, resamples: int = RESAMPLES, seed: int = SEED,
                        level: float = LEVEL) -> dict:
    """Perplexity ``exp(Σ nll / Σ t)`` of windows (``nll_sums[i]``: summed NLL of window i in nats,
    ``n_tokens[i]``: its scored tokens) with a bootstrap-over-windows interval."""
    s, t = _arr(nll_sums, "nll_sums"), _arr(n_tokens, "n_tokens")
    if s.shape != t.shape or np.any(t <= 0):
        raise ValueError("nll_sums and n_tokens must have the same length and n_tokens must be positive")
    draws = np.exp(_weighted_means(s, t, bootstrap_indices(s.size, resamples, seed)))
    lo, hi = percentile_interval(draws, level)
    return {"estimate": math.exp(s.sum() / t.sum()), "lo": lo, "hi": hi, "n": int(s.size)}


def paired_ppl_ratio(a_nll, a_tokens, b_nll, b_tokens, resamples: int = RESAMPLES, seed: int = SEED,
                     level: float = LEVEL) -> dict:
    """``ppl_A / ppl_B`` on the same windows with a paired bootstrap interval (both variants resampled with the
    same window indices). ``sdd``: half-width of the interval of ``log(ratio)`` (so ±sdd is ±(e^sdd − 1)·100 %)."""
    sa, ta, sb, tb = (_arr(x, n) for x, n in ((a_nll, "a_nll"), (a_tokens, "a_tokens"), (b_nll, "b_nll"),
                                               (b_tokens, "b_tokens")))
    if not (sa.shape == ta.shape == sb.shape == tb.shape) or not np.array_equal(ta, tb):
        raise ValueError("a paired perplexity ratio needs the same windows: equal lengths and equal token counts "
                         "per window (evaluate both variants with the same eval.ppl settings)")
    idx = bootstrap_indices(sa.size, resamples, seed)
    log_draws = _weighted_means(sa, ta, idx) - _weighted_means(sb, tb, idx)
    lo, hi = percentile_interval(log_draws, level)
    est = (sa.sum() - sb.sum()) / ta.sum()
    return {"estimate": math.exp(est), "lo": math.exp(lo), "hi": math.exp(hi), "n": int(sa.size),
            "sdd": (hi - lo) / 2.0}


def paired_mean_difference(a, b, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> dict:
    """``mean(a) − mean(b)`` over paired units (``a[i]``, ``b[i]`` measured on the same document) with a paired
    bootstrap interval; ``sdd``: half-width of the interval."""
    x, y = _arr(a, "a"), _arr(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired samples need equal lengths, got {x.size} and {y.size}")
    d = x - y
    draws = d[bootstrap_indices(d.size, resamples, seed)].mean(axis=1)
    lo, hi = percentile_interval(draws, level)
    return {"estimate": float(d.mean()), "lo": lo, "hi": hi, "n": int(d.size), "sdd": (hi - lo) / 2.0}


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n`` (closed form)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    p = successes / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_interval(correct) -> dict:
    """Accuracy of 0/1 per-document outcomes with its Wilson interval: ``{"estimate", "lo", "hi", "n"}``."""
    c = _arr(correct, "correct")
    if not np.all((c == 0) | (c == 1)):
        raise ValueError("correct must hold 0/1 outcomes")
    k, n = int(c.sum()), int(c.size)
    lo, hi = wilson_interval(k, n)
    return {"estimate": k / n, "lo": lo, "hi": hi, "n": n}


def choice_margin(lls: Sequence[float], gold: int) -> float:
    """Log-likelihood margin of the correct choice: ``ll[gold] − max_{j≠gold} ll[j]`` (> 0 iff it wins)."""
    if not 0 <= gold < len(lls) or len(lls) < 2:
        raise ValueError(f"gold={gold} must index one of at least two choices, got {len(lls)}")
    return float(lls[gold]) - max(float(x) for j, x in enumerate(lls) if j != gold)


def direction(interval: dict, null: float = 0.0) -> int:
    """+1 if the interval lies above ``null``, −1 if below, 0 if it contains it (no difference resolved)."""
    if interval["lo"] > null:
        return 1
    if interval["hi"] < null:
        return -1
    return 0


def log_ratio_difference(a1_nll, b1_nll, t1, a2_nll, b2_nll, t2, resamples: int = RESAMPLES, seed: int = SEED,
                         level: float = LEVEL) -> dict:
    """``log(ppl_A1/ppl_B1) − log(ppl_A2/ppl_B2)``: how much more variant A1 degrades from B1 (paired, same windows
    ``t1``) than A2 from B2 (paired, windows ``t2``). The two pairs come from different models (independent
    windows), so they are resampled independently (seeds ``seed`` and ``seed + 1``). ``sdd``: half-width."""
    d1 = _paired_log_ratio_draws(a1_nll, b1_nll, t1, resamples, seed)
    d2 = _paired_log_ratio_draws(a2_nll, b2_nll, t2, resamples, seed + 1)
    lo, hi = percentile_interval(d1[1] - d2[1], level)
    return {"estimate": d1[0] - d2[0], "lo": lo, "hi": hi, "n": (d1[2], d2[2]), "sdd": (hi - lo) / 2.0}


def _paired_log_ratio_draws(a_nll, b_nll, tokens, resamples: int, seed: int) -> tuple[float, np.ndarray, int]:
    sa, sb, t = _arr(a_nll, "a_nll"), _arr(b_nll, "b_nll"), _arr(tokens, "tokens")
    if not sa.shape == sb.shape == t.shape:
        raise ValueError("a paired perplexity ratio needs the same windows for both variants")
    idx = bootstrap_indices(sa.size, resamples, seed)
    return float((sa.sum() - sb.sum()) / t.sum()), _weighted_means(sa, t, idx) - _weighted_means(sb, t, idx), sa.size
