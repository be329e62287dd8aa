"""Intervals for the evaluation numbers and paired comparisons of two variants (pure functions of arrays).

Conventions (every function here follows them):

* **Level**: two-sided 95 % (``LEVEL``).
* **Window / document interval** (the evaluation sample's part): Student's t on the evaluation's independent
  units (perplexity windows, zero-shot documents), :func:`ratio_t_interval`. A token-weighted mean
  ``R = Σ_i s_i / Σ_i t_i`` (``s_i`` a window's summed value, ``t_i`` its tokens) has the linearized standard
  error ``sqrt(n / (n − 1) · Σ_i (s_i − R t_i)²) / Σ_i t_i`` and the interval ``R ± t_{0.975, n−1} · se``; a
  paired comparison of two variants on the same units applies it to the per-unit differences. A percentile
  bootstrap over 8 windows runs too narrow (it ignores the t quantile and the (n − 1)/n bias:
  ``tests/test_stats.py`` measures both constructions' coverage by simulation); at one unit the interval is
  unbounded. The bootstrap helpers (:func:`bootstrap_indices`, :func:`bootstrap_mean`, ``RESAMPLES`` = 2,000
  resamples, ``SEED`` = 0) remain for descriptive spreads.
* **Percentile**: linear interpolation between order statistics (:func:`percentile`; numpy's default "type 7").
* **Perplexity** of a set of windows: ``exp(Σ_i nll_i / Σ_i t_i)`` with ``nll_i`` the summed next-token NLL of
  window i (nats) and ``t_i`` its number of scored tokens — the QuIP#/GPTQ protocol when all windows have
  the same length. A ratio of two perplexities on the same windows is ``exp(mean_A − mean_B)`` (token-weighted
  means), its interval the t interval of the per-window differences (paired).
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


def ratio_t_interval(sums, weights, level: float = LEVEL) -> dict:
    """``R = Σ sums / Σ weights`` over independent units (``sums[i]``: unit i's summed value, ``weights[i] > 0``
    its weight, e.g. tokens) with the Student-t interval of the linearized ratio estimator: ``se = sqrt(n/(n−1) ·
    Σ (sums_i − R · weights_i)²) / Σ weights`` and ``R ± t_{(1+level)/2, n−1} · se``. With equal weights this
    is the textbook t interval of a mean. One unit: the interval is unbounded (``lo = −inf``, ``hi = inf``).
    Returns ``{"estimate", "lo", "hi", "se", "df", "n"}`` (``df`` None at one unit)."""
    s, w = _arr(sums, "sums"), _arr(weights, "weights")
    if s.shape != w.shape or np.any(w <= 0):
        raise ValueError("sums and weights must have the same length and weights must be positive")
    est = float(s.sum() / w.sum())
    n = int(s.size)
    if n < 2:
        return {"estimate": est, "lo": -math.inf, "hi": math.inf, "se": math.inf, "df": None, "n": n}
    r = s - est * w
    se = math.sqrt(n / (n - 1) * float((r * r).sum())) / float(w.sum())
    h = t_quantile(n - 1, level) * se
    return {"estimate": est, "lo": est - h, "hi": est + h, "se": se, "df": n - 1, "n": n}


def _exp_bound(x: float) -> float:
    return math.exp(x) if x < 700.0 else math.inf


def perplexity_interval(nll_sums, n_tokens, level: float = LEVEL) -> dict:
    """Perplexity ``exp(Σ nll / Σ t)`` of windows (``nll_sums[i]``: summed NLL of window i in nats,
    ``n_tokens[i]``: its scored tokens) with the t interval over windows of the log perplexity
    (:func:`ratio_t_interval`), exponentiated."""
    s, t = _arr(nll_sums, "nll_sums"), _arr(n_tokens, "n_tokens")
    if s.shape != t.shape or np.any(t <= 0):
        raise ValueError("nll_sums and n_tokens must have the same length and n_tokens must be positive")
    ci = ratio_t_interval(s, t, level)
    return {"estimate": math.exp(ci["estimate"]), "lo": _exp_bound(ci["lo"]), "hi": _exp_bound(ci["hi"]),
            "n": ci["n"]}


def weighted_mean_interval(sums, weights, level: float = LEVEL) -> dict:
    """Token-weighted mean ``Σ sums / Σ weights`` of per-window sums (e.g. a window's summed KL divergence over
    its ``weights[i]`` positions) with the t interval over windows (:func:`ratio_t_interval`):
    ``{"estimate", "lo", "hi", "n"}``."""
    ci = ratio_t_interval(sums, weights, level)
    return {k: ci[k] for k in ("estimate", "lo", "hi", "n")}


def paired_ppl_ratio(a_nll, a_tokens, b_nll, b_tokens, level: float = LEVEL) -> dict:
    """``ppl_A / ppl_B`` on the same windows with the paired t interval: :func:`ratio_t_interval` of the per-window
    NLL differences ``a_nll − b_nll`` over the tokens (the log ratio), exponentiated. ``sdd``: half-width of the
    interval of ``log(ratio)`` (so ±sdd is ±(e^sdd − 1)·100 %)."""
    sa, ta, sb, tb = (_arr(x, n) for x, n in ((a_nll, "a_nll"), (a_tokens, "a_tokens"), (b_nll, "b_nll"),
                                               (b_tokens, "b_tokens")))
    if not (sa.shape == ta.shape == sb.shape == tb.shape) or not np.array_equal(ta, tb):
        raise ValueError("a paired perplexity ratio needs the same windows: equal lengths and equal token counts "
                         "per window (evaluate both variants with the same eval.ppl settings)")
    ci = ratio_t_interval(sa - sb, ta, level)
    return {"estimate": math.exp(ci["estimate"]), "lo": _exp_bound(ci["lo"]), "hi": _exp_bound(ci["hi"]),
            "n": ci["n"], "sdd": (ci["hi"] - ci["lo"]) / 2.0}


def paired_mean_difference(a, b, level: float = LEVEL) -> dict:
    """``mean(a) − mean(b)`` over paired units (``a[i]``, ``b[i]`` measured on the same document) with the paired
    t interval of the differences; ``sdd``: half-width of the interval."""
    x, y = _arr(a, "a"), _arr(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired samples need equal lengths, got {x.size} and {y.size}")
    ci = ratio_t_interval(x - y, np.ones_like(x), level)
    return {"estimate": ci["estimate"], "lo": ci["lo"], "hi": ci["hi"], "n": ci["n"],
            "sdd": (ci["hi"] - ci["lo"]) / 2.0}


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n`` (closed form)."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    p = successes / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_proportion_difference(a, b, z: float = Z95) -> dict:
    """``mean(a) − mean(b)`` of paired 0/1 outcomes (``a[i]``, ``b[i]``: two models on the same document) with
    Newcombe's hybrid score interval for paired proportions (Newcombe 1998, Statistics in Medicine 17:2635,
    method 10): the Wilson intervals ``(l1, u1)``, ``(l2, u2)`` of both accuracies combined through the
    correlation φ of the 2×2 table (its positive cross product ``n11·n00 − n10·n01`` lowered by n/2, as Fagerland,
    Lydersen & Laake recommend, so that wholly concordant documents do not collapse the interval; φ = 0 where a
    margin is empty),

        L = δ − sqrt((p1 − l1)² − 2φ (p1 − l1)(u2 − p2) + (u2 − p2)²),
        U = δ + sqrt((u1 − p1)² − 2φ (u1 − p1)(p2 − l2) + (p2 − l2)²).

    Unlike the paired t interval of the differences, it keeps a width where every document agrees (a t interval
    collapses to a point there, at any number of documents). ``a``, ``b``: (n,) 0/1. Returns ``{"estimate",
    "lo", "hi", "n", "sdd"}`` (``sdd``: half-width)."""
    x, y = _arr(a, "a"), _arr(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired samples need equal lengths, got {x.size} and {y.size}")
    if not (np.all((x == 0) | (x == 1)) and np.all((y == 0) | (y == 1))):
        raise ValueError("paired proportions need 0/1 outcomes")
    n = int(x.size)
    n11, n10 = int(np.sum((x == 1) & (y == 1))), int(np.sum((x == 1) & (y == 0)))
    n01, n00 = int(np.sum((x == 0) & (y == 1))), int(np.sum((x == 0) & (y == 0)))
    p1, p2 = (n11 + n10) / n, (n11 + n01) / n
    l1, u1 = wilson_interval(n11 + n10, n, z)
    l2, u2 = wilson_interval(n11 + n01, n, z)
    den = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    cross = n11 * n00 - n10 * n01
    if cross > 0:  # the correction of Fagerland, Lydersen & Laake (2014, Stat Methods Med Res 23:3)
        cross = max(cross - n / 2.0, 0.0)
    phi = cross / math.sqrt(den) if den > 0 else 0.0
    d = p1 - p2
    lo = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = d + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return {"estimate": d, "lo": max(-1.0, lo), "hi": min(1.0, hi), "n": n, "sdd": (hi - lo) / 2.0}


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


def log_ratio_difference(a1_nll, b1_nll, t1, a2_nll, b2_nll, t2, level: float = LEVEL) -> dict:
    """``log(ppl_A1/ppl_B1) − log(ppl_A2/ppl_B2)``: how much more variant A1 degrades from B1 (paired, same windows
    ``t1``) than A2 from B2 (paired, windows ``t2``). The two pairs come from different models (independent
    windows): each pair's paired t standard error (:func:`ratio_t_interval`) adds in quadrature, with
    Welch–Satterthwaite degrees of freedom. ``sdd``: half-width."""
    p1 = _paired_log_ratio(a1_nll, b1_nll, t1, level)
    p2 = _paired_log_ratio(a2_nll, b2_nll, t2, level)
    est = p1["estimate"] - p2["estimate"]
    var = p1["se"] ** 2 + p2["se"] ** 2
    if not math.isfinite(var):
        lo, hi = -math.inf, math.inf
    else:
        df = var * var / sum(p["se"] ** 4 / p["df"] for p in (p1, p2) if p["se"] > 0) if var > 0 else 1.0
        h = t_quantile(df, level) * math.sqrt(var)
        lo, hi = est - h, est + h
    return {"estimate": est, "lo": lo, "hi": hi, "n": (p1["n"], p2["n"]), "sdd": (hi - lo) / 2.0}


def _paired_log_ratio(a_nll, b_nll, tokens, level: float) -> dict:
    sa, sb, t = _arr(a_nll, "a_nll"), _arr(b_nll, "b_nll"), _arr(tokens, "tokens")
    if not sa.shape == sb.shape == t.shape:
        raise ValueError("a paired perplexity ratio needs the same windows for both variants")
    return ratio_t_interval(sa - sb, t, level)


# --------------------------------------------------------------------------------------------------------------
# Realization spread: several independent compressions (seeds) of one variant, each scored on the same units.
#
# A compressed model is one *realization* of a random procedure (RHT signs, randomized-SVD sketches, and the
# floating-point order of the machine that ran it). An interval over evaluation windows alone measures the
# evaluation's noise, not the compression's, and a rerun with other seeds (or on another CPU) can land far
# outside it. With S seeds per variant, every statistic below is the *mean over seeds* (for perplexity: of log
# perplexity, i.e. the geometric mean across seeds), and its 95 % interval combines two independent sources:
#
# * **windows / documents** (shared by every seed and variant): the paired t interval of this module
#   (:func:`ratio_t_interval`) applied to the seed-averaged per-unit values (log perplexity is linear in the
#   per-window NLL sums, so the seed mean of log perplexity is the log perplexity of the seed-averaged window
#   NLLs);
# * **seeds**: Student's t over the per-seed statistics (each computed on all units): half-width
#   ``t_{0.975, df} · sqrt(Σ_g s_g² / S_g)``, one term per independent group of realizations. Variants run on
#   the same seeds share RHT signs and sketches, so their realizations are correlated (+0.98 to −0.79 between
#   pairs of one stand-in): a comparison on shared seeds is one group of per-seed differences, its variance
#   the larger of the pair's own and the seed block's variant + seed model (:func:`paired_seed_part`), valid
#   at any correlation; unpaired variants are separate groups, Welch–Satterthwaite df. A bootstrap over 3 seeds
#   would understate this spread (it ignores the t quantile, 4.30 at df = 2, and the (S−1)/S bias), so the
#   small-sample t is used.
#
# Each side of the window interval is widened by the seed half-width in quadrature (independent sources):
# ``lo = est − sqrt((est − lo_w)² + h_s²)``, ``hi = est + sqrt((hi_w − est)² + h_s²)``. A group of random
# realizations with a single seed has no estimate of its spread: the seed part is then *undetermined*
# (``seed_half = None``, ``lo = −inf``, ``hi = +inf``): no verdict can be taken on one realization.
#
# **Where a rerun lands.** The interval above is a confidence interval for the mean over all realizations; it is
# not where *another* S-seed run's estimate is expected to land. A rerun on the same windows / documents with as
# many fresh seeds (or on another CPU) has its own seed noise, independent of this run's, while the unit sample is
# shared: ``estimate_rerun − estimate`` has variance ``2 · seed_sd²``. Its 95 % prediction interval is therefore
# ``estimate ± sqrt(2) · seed_half`` (``rerun_lo``/``rerun_hi``; no window part, the windows being the same). The
# confidence interval covers such a rerun with probability ≥ P(|t_df| < t_{0.975,df}/√2): 0.91 at df = 2, 0.88
# at df = 4, → 0.83 as df grows; the prediction interval 0.95 at any df (normal per-seed statistics).
# --------------------------------------------------------------------------------------------------------------

#: half-width of the rerun prediction interval in units of the seed half-width (two independent seed means)
RERUN_FACTOR = math.sqrt(2.0)


def t_quantile(df: float, level: float = LEVEL) -> float:
    """The ``(1 + level)/2`` quantile of Student's t with ``df`` degrees of freedom (df may be fractional)."""
    from scipy.stats import t as student_t

    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    return float(student_t.ppf((1.0 + level) / 2.0, df))


def seed_half_width(groups: Sequence[Sequence[float]], level: float = LEVEL,
                    pooled: Sequence[dict | None] | None = None) -> dict:
    """Half-width of the seed part of an interval for ``Σ_g mean(groups[g])`` (signs folded into the values).

    ``groups``: one sequence of per-seed statistics per independent group of random realizations (a
    deterministic variant, e.g. the dense model, contributes no group). ``pooled``: per group, None or a pooled
    realization variance ``{"var", "df"}`` (:func:`pooled_variance`) that stands in for a group with a single
    seed (its own spread is then unknown; a group with several seeds always uses its own). Returns ``{"half",
    "sd", "df", "seeds", "pooled"}``: ``half = t_{df} · sqrt(Σ s_g²/S_g)`` with Welch–Satterthwaite ``df`` (a
    pooled term counts with the pool's df); ``half = None`` when a group has one seed and no pool (its spread is
    unknown); ``half = 0`` with no group (nothing random) or when every group's values agree. ``pooled`` in the
    result lists which groups took the pool."""
    gs = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    pools = list(pooled) if pooled is not None else [None] * len(gs)
    if len(pools) != len(gs):
        raise ValueError(f"pooled has {len(pools)} entries for {len(gs)} groups")
    seeds = [int(g.size) for g in gs]
    if not gs:
        return {"half": 0.0, "sd": 0.0, "df": None, "seeds": seeds, "pooled": []}
    if any(g.size == 0 for g in gs):
        raise ValueError("a group of realizations is empty")
    if any(not np.all(np.isfinite(g)) for g in gs):
        raise ValueError("per-seed statistics must be finite")
    use_pool = [g.size < 2 and p is not None for g, p in zip(gs, pools)]
    if any(g.size < 2 and not u for g, u in zip(gs, use_pool)):
        return {"half": None, "sd": None, "df": None, "seeds": seeds, "pooled": use_pool}
    terms, dfs = [], []
    for g, p, u in zip(gs, pools, use_pool):
        if u:
            if not (p["var"] >= 0.0 and p["df"] >= 1):
                raise ValueError(f"a pooled variance needs var >= 0 and df >= 1, got {p}")
            terms.append(float(p["var"]) / g.size)
            dfs.append(float(p["df"]))
        else:
            terms.append(float(g.var(ddof=1)) / g.size)
            dfs.append(float(g.size - 1))
    var = sum(terms)
    if var == 0.0:
        return {"half": 0.0, "sd": 0.0, "df": None, "seeds": seeds, "pooled": use_pool}
    df = var * var / sum(t * t / d for t, d in zip(terms, dfs) if t > 0.0)
    return {"half": t_quantile(df, level) * math.sqrt(var), "sd": math.sqrt(var), "df": df, "seeds": seeds,
            "pooled": use_pool}


def pooled_variance(groups: Sequence[Sequence[float]]) -> dict | None:
    """The pooled between-seed variance of several variants' per-seed statistics (each group one variant's
    realizations, assumed to share one variance): ``{"var": Σ (S_g − 1) s_g² / Σ (S_g − 1), "df": Σ (S_g − 1)}``;
    groups with fewer than two seeds add nothing; None when no group has two."""
    gs = [np.asarray(g, dtype=np.float64).ravel() for g in groups]
    gs = [g for g in gs if g.size >= 2]
    if not gs:
        return None
    if any(not np.all(np.isfinite(g)) for g in gs):
        raise ValueError("per-seed statistics must be finite")
    df = sum(g.size - 1 for g in gs)
    return {"var": float(sum(((g - g.mean()) ** 2).sum() for g in gs)) / df, "df": int(df)}


def combine(estimate: float, lo_w: float, hi_w: float, seed: dict) -> dict:
    """The combined interval of ``estimate`` from its window/document interval ``[lo_w, hi_w]`` and the seed part
    ``seed`` (:func:`seed_half_width`), each side widened in quadrature (module comment above). Keys: estimate,
    lo, hi, window_half, seed_half, seed_sd, df, seeds, sdd (half-width of the combined interval; inf when
    the seed part is undetermined), and ``rerun_lo``/``rerun_hi``: the 95 % *prediction* interval of the
    estimate a rerun of the same design would get (the same units, as many fresh seeds; module comment)."""
    h = seed["half"]
    if h is None:
        lo, hi = -math.inf, math.inf
        r_lo, r_hi = -math.inf, math.inf
    else:
        lo = estimate - math.hypot(estimate - lo_w, h)
        hi = estimate + math.hypot(hi_w - estimate, h)
        r_lo, r_hi = estimate - RERUN_FACTOR * h, estimate + RERUN_FACTOR * h
    return {"estimate": estimate, "lo": lo, "hi": hi, "window_lo": lo_w, "window_hi": hi_w,
            "window_half": (hi_w - lo_w) / 2.0, "seed_half": h,
            "seed_sd": seed["sd"], "df": seed["df"], "seeds": seed["seeds"], "sdd": (hi - lo) / 2.0,
            "rerun_lo": r_lo, "rerun_hi": r_hi, "pooled": list(seed.get("pooled") or [])}


def _nll_matrix(nll, name: str) -> np.ndarray:
    a = np.asarray(nll, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"{name} must be (seeds, windows), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite values")
    return a


def seeded_perplexity(nll, tokens, random: bool = True, level: float = LEVEL) -> dict:
    """Perplexity of one variant across its seeds: ``nll[s, i]`` is the summed NLL of window i under seed s
    (all seeds on the same windows, ``tokens[i]`` scored tokens each). Estimate: the geometric mean across seeds
    of the per-seed perplexities; interval: windows (t interval of the seed-averaged NLLs) combined with the
    seeds (t over per-seed log perplexities), on the log scale and exponentiated. ``random=False`` (a
    deterministic model, e.g. dense) has no seed part. Keys as :func:`combine` (exponentiated estimate, lo, hi;
    window_half / seed_half / seed_sd / sdd on the log scale) plus ``per_seed`` perplexities and ``n`` windows."""
    A = _nll_matrix(nll, "nll")
    t = _arr(tokens, "tokens")
    if A.shape[1] != t.size or np.any(t <= 0):
        raise ValueError("nll must have one column per window and tokens must be positive")
    w = ratio_t_interval(A.mean(axis=0), t, level)
    per_seed = A.sum(axis=1) / t.sum()
    est = float(per_seed.mean())
    part = seed_half_width([per_seed] if random else [], level)
    c = combine(est, w["lo"], w["hi"], part)
    return {**exp_log_scale(c), "per_seed": [math.exp(x) for x in per_seed], "n": int(t.size)}


def seeded_weighted_mean(sums, weights, random: bool = True, level: float = LEVEL) -> dict:
    """A token-weighted mean of per-window sums across seeds: ``sums[s, i]`` of window i under seed s (e.g. the
    summed KL divergence of its positions), ``weights[i]`` its positions. Estimate: the mean over seeds of each
    seed's ``Σ_i sums / Σ_i weights``; interval: windows (:func:`weighted_mean_interval` of the seed-averaged
    sums) combined with the seeds (t over the per-seed means; none for ``random=False``). Keys as
    :func:`combine` plus ``per_seed`` and ``n``."""
    A = _nll_matrix(sums, "sums")
    w = _arr(weights, "weights")
    if A.shape[1] != w.size or np.any(w <= 0):
        raise ValueError("sums must have one column per window and weights must be positive")
    win = weighted_mean_interval(A.mean(axis=0), w, level)
    per_seed = A.sum(axis=1) / w.sum()
    c = combine(float(per_seed.mean()), win["lo"], win["hi"],
                seed_half_width([per_seed] if random else [], level))
    return {**c, "per_seed": per_seed.tolist(), "n": int(w.size)}


def exp_log_scale(c: dict) -> dict:
    """A :func:`combine` result on the log scale, with estimate and bounds exponentiated (half-widths stay log)."""
    return {**c, **{k: _exp_bound(c[k]) for k in ("estimate", "lo", "hi", "window_lo", "window_hi", "rerun_lo",
                                                   "rerun_hi")}}


def seeded_ppl_ratio(a_nll, b_nll, tokens, a_random: bool = True, b_random: bool = True,
                     paired_seeds: bool = False, level: float = LEVEL, a_pool: dict | None = None,
                     b_pool: dict | None = None, block: dict | None = None) -> dict:
    """``ppl_A / ppl_B`` across seeds on the same windows: ``a_nll`` (S_A, W), ``b_nll`` (S_B, W), ``tokens``
    (W,). Estimate: ratio of the geometric means across seeds. Window part: :func:`paired_ppl_ratio` of the
    seed-averaged window NLLs. Seed part: with ``paired_seeds`` (both random, the same seeds in the same order,
    so realization s of A and of B share RHT signs and sketches) the per-seed log ratios, their variance by
    :func:`paired_seed_part` (the pair's own, or the seed block's ``block`` = :func:`block_variance`, whichever is
    larger); otherwise one group per random variant (:func:`seed_half_width`; ``a_pool`` / ``b_pool``: a pooled
    variance of the per-seed log perplexity, :func:`pooled_variance`, for a random side with one seed). Keys as
    :func:`combine` on the ratio scale (lo/hi exponentiated; window_half, seed_half, sdd of the log ratio) plus
    ``n`` windows and ``construction`` (how the seed part was estimated)."""
    A, B = _nll_matrix(a_nll, "a_nll"), _nll_matrix(b_nll, "b_nll")
    t = _arr(tokens, "tokens")
    if A.shape[1] != t.size or B.shape[1] != t.size:
        raise ValueError("a paired perplexity ratio needs the same windows for both variants")
    w = ratio_t_interval(A.mean(axis=0) - B.mean(axis=0), t, level)
    la, lb = A.sum(axis=1) / t.sum(), B.sum(axis=1) / t.sum()
    est = float(la.mean() - lb.mean())
    if paired_seeds:
        part = paired_seed_part(_seed_groups(la, lb, a_random, b_random, True)[0], block, level)
    else:
        pools = ([a_pool] if a_random else []) + ([b_pool] if b_random else [])
        part = seed_half_width(_seed_groups(la, lb, a_random, b_random, False), level, pools)
        part["construction"] = _unpaired_construction(part)
    c = combine(est, w["lo"], w["hi"], part)
    return {**exp_log_scale(c), "n": int(t.size), "construction": part["construction"]}


def _unpaired_construction(part: dict) -> str:
    if part["half"] is None:
        return "one realization, spread unknown"
    if not part["seeds"]:
        return "deterministic"
    return "unpaired (Welch" + (", pooled spread" if any(part.get("pooled") or []) else "") + ")"


def block_variance(Y, level: float = LEVEL) -> dict | None:
    """The realization spread of a seed block: ``Y`` (V, S), the per-seed statistic (e.g. log perplexity) of V
    random variants on the same S seeds. Fits the additive variant + seed model ``Y[v, s] = μ_v + β_s + ε[v, s]``
    and returns ``{"var": σ̂², "df": (V − 1)(S − 1), "variants": V, "seeds": S}`` with ``σ̂² = Σ r² / df`` of the
    residuals ``r = Y − row means − column means + grand mean``: the variance of one realization's interaction
    term, so a paired per-seed difference of two variants has variance ``2 σ̂²`` under the model. None below two
    variants or two seeds."""
    M = np.asarray(Y, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"a seed block must be (variants, seeds), got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError("per-seed statistics must be finite")
    V, S = M.shape
    if V < 2 or S < 2:
        return None
    r = M - M.mean(axis=1, keepdims=True) - M.mean(axis=0, keepdims=True) + M.mean()
    df = (V - 1) * (S - 1)
    return {"var": float((r * r).sum()) / df, "df": int(df), "variants": int(V), "seeds": int(S)}


def paired_seed_part(d, block: dict | None = None, level: float = LEVEL) -> dict:
    """Seed part of a comparison paired across S shared seeds, from its per-seed differences ``d`` (S,).

    Two estimates of the variance of one per-seed difference: the pair's own, ``s_d²`` with ``S − 1`` degrees of
    freedom, and the seed block's ``2 σ̂²`` with ``(V − 1)(S − 1)`` (:func:`block_variance`, the additive
    variant + seed model over every variant of the block). The **larger** is used, with its degrees of freedom:
    where the model holds both estimate the same variance and the block's many degrees of freedom narrow the t
    quantile; where this pair's realizations disagree more than the block's (a negative correlation, a variant
    with its own bad realizations), its own variance counts. Half-width ``t_df · sqrt(var / S)``. A single shared
    seed has only the block's estimate; without a block it is undetermined (``half`` None). Keys as
    :func:`seed_half_width` plus ``construction``."""
    x = np.asarray(d, dtype=np.float64).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("paired per-seed differences must be finite and at least one")
    S = int(x.size)
    cands = []
    if block is not None:
        if not (block["var"] >= 0.0 and block["df"] >= 1):
            raise ValueError(f"a block variance needs var >= 0 and df >= 1, got {block}")
        cands.append((2.0 * float(block["var"]), float(block["df"]), "paired seeds, block variance"))
    if S >= 2:
        cands.append((float(x.var(ddof=1)), float(S - 1), "paired seeds, own variance"))
    if not cands:
        return {"half": None, "sd": None, "df": None, "seeds": [S], "pooled": [False],
                "construction": "one shared seed, spread unknown"}
    var, df, how = max(cands, key=lambda c: (c[0], c[1]))
    if var == 0.0:
        return {"half": 0.0, "sd": 0.0, "df": None, "seeds": [S], "pooled": [False], "construction": how}
    sd = math.sqrt(var / S)
    return {"half": t_quantile(df, level) * sd, "sd": sd, "df": df, "seeds": [S], "pooled": [False],
            "construction": how}


def _seed_groups(a: np.ndarray, b: np.ndarray, a_random: bool, b_random: bool, paired: bool) -> list:
    """Per-seed statistics of A and B as :func:`seed_half_width` groups for ``mean(a) − mean(b)``: one group of
    per-seed differences when the seeds are shared (``paired``), else one group per random side."""
    if paired:
        if not (a_random and b_random) or a.size != b.size:
            raise ValueError("paired seeds need two random variants with the same seeds")
        return [a - b]
    return ([a] if a_random else []) + ([b] if b_random else [])


def seeded_mean_difference(a, b, a_random: bool = True, b_random: bool = True, paired_seeds: bool = False,
                           level: float = LEVEL, block: dict | None = None) -> dict:
    """``mean(a) − mean(b)`` over paired units (documents) and across seeds: ``a`` (S_A, D), ``b`` (S_B, D), the
    same documents in the same order. Document part: :func:`paired_mean_difference` of the seed-averaged
    per-document values; seed part as :func:`seeded_ppl_ratio` (``block``: a seed block's variance of this
    statistic). Keys as :func:`combine` plus ``n`` and ``construction``."""
    A, B = _nll_matrix(a, "a"), _nll_matrix(b, "b")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"paired samples need the same documents, got {A.shape[1]} and {B.shape[1]}")
    w = paired_mean_difference(A.mean(axis=0), B.mean(axis=0), level)
    ma, mb = A.mean(axis=1), B.mean(axis=1)
    if paired_seeds:
        part = paired_seed_part(_seed_groups(ma, mb, a_random, b_random, True)[0], block, level)
    else:
        part = seed_half_width(_seed_groups(ma, mb, a_random, b_random, False), level)
        part["construction"] = _unpaired_construction(part)
    c = combine(float(ma.mean() - mb.mean()), w["lo"], w["hi"], part)
    return {**c, "n": int(A.shape[1]), "construction": part["construction"]}


def seeded_accuracy(correct, random: bool = True, level: float = LEVEL) -> dict:
    """Accuracy of one variant across seeds: ``correct`` (S, D) 0/1 outcomes on the same documents. Estimate: the
    mean over seeds; document part: the Wilson interval at n = D of the seed-mean accuracy (:func:`wilson_bounds`);
    seed part: t over the per-seed accuracies. Bounds clipped to [0, 1]."""
    C = _nll_matrix(correct, "correct")
    if not np.all((C == 0) | (C == 1)):
        raise ValueError("correct must hold 0/1 outcomes")
    per_seed = C.mean(axis=1)
    est = float(per_seed.mean())
    lo_w, hi_w = wilson_bounds(est, C.shape[1])
    c = combine(est, lo_w, hi_w, seed_half_width([per_seed] if random else [], level))
    return {**c, "lo": max(0.0, c["lo"]), "hi": min(1.0, c["hi"]), "rerun_lo": max(0.0, c["rerun_lo"]),
            "rerun_hi": min(1.0, c["rerun_hi"]), "per_seed": per_seed.tolist(),
            "n": int(C.shape[1])}


def wilson_bounds(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` (not necessarily k/n: e.g. a mean over seeds) at ``n`` units."""
    if n < 1 or not 0.0 <= p <= 1.0:
        raise ValueError(f"need 0 <= p <= 1 and n >= 1, got p={p}, n={n}")
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def seeded_log_ratio_difference(a1_nll, b1_nll, t1, a2_nll, b2_nll, t2, a1_random: bool = True,
                                a2_random: bool = True, level: float = LEVEL) -> dict:
    """:func:`log_ratio_difference` across seeds: A1 (S1, W1) vs deterministic B1 (1, W1) on windows ``t1``, and A2
    vs B2 likewise on ``t2`` (two models: independent windows and independent realizations). Window part:
    :func:`log_ratio_difference` of the seed-averaged NLLs; seed part: one group per random A."""
    A1, B1, A2, B2 = (_nll_matrix(x, n) for x, n in ((a1_nll, "a1_nll"), (b1_nll, "b1_nll"), (a2_nll, "a2_nll"),
                                                       (b2_nll, "b2_nll")))
    w = log_ratio_difference(A1.mean(axis=0), B1.mean(axis=0), t1, A2.mean(axis=0), B2.mean(axis=0), t2, level)
    s1, s2 = float(np.sum(t1)), float(np.sum(t2))
    l1 = A1.sum(axis=1) / s1 - B1.sum(axis=1).mean() / s1
    l2 = A2.sum(axis=1) / s2 - B2.sum(axis=1).mean() / s2
    groups = ([l1] if a1_random else []) + ([-l2] if a2_random else [])
    c = combine(float(l1.mean() - l2.mean()), w["lo"], w["hi"], seed_half_width(groups, level))
    return {**c, "n": w["n"]}
