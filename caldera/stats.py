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


def weighted_mean_interval(sums, weights, resamples: int = RESAMPLES, seed: int = SEED,
                           level: float = LEVEL) -> dict:
    """Token-weighted mean ``Σ sums / Σ weights`` of per-window sums (e.g. a window's summed KL divergence over
    its ``weights[i]`` positions) with a bootstrap-over-windows interval: ``{"estimate", "lo", "hi", "n"}``."""
    s, w = _arr(sums, "sums"), _arr(weights, "weights")
    if s.shape != w.shape or np.any(w <= 0):
        raise ValueError("sums and weights must have the same length and weights must be positive")
    lo, hi = percentile_interval(_weighted_means(s, w, bootstrap_indices(s.size, resamples, seed)), level)
    return {"estimate": float(s.sum() / w.sum()), "lo": lo, "hi": hi, "n": int(s.size)}


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


# --------------------------------------------------------------------------------------------------------------
# Realization spread: several independent compressions (seeds) of one variant, each scored on the same units.
#
# A compressed model is one *realization* of a random procedure (RHT signs, randomized-SVD sketches, and the
# floating-point order of the machine that ran it). An interval over evaluation windows alone measures the
# evaluation's noise, not the compression's, and a rerun with other seeds (or on another CPU) can land far
# outside it. With S seeds per variant, every statistic below is the *mean over seeds* (for perplexity: of log
# perplexity, i.e. the geometric mean across seeds), and its 95 % interval combines two independent sources:
#
# * **windows / documents** (shared by every seed and variant): the paired percentile bootstrap of this module
#   applied to the seed-averaged per-unit values (log perplexity is linear in the per-window NLL sums, so the
#   seed mean of log perplexity is the log perplexity of the seed-averaged window NLLs);
# * **seeds**: Student's t over the per-seed statistics (each computed on all units): half-width
#   ``t_{0.975, df} · sqrt(Σ_g s_g² / S_g)``, one term per independent group of realizations (a paired
#   comparison with shared seeds is one group of per-seed differences; unpaired variants are separate groups,
#   Welch–Satterthwaite df). A bootstrap over 3 seeds would understate this spread (it ignores the t quantile,
#   4.30 at df = 2, and the (S−1)/S bias), so the small-sample t is used.
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


def seeded_perplexity(nll, tokens, random: bool = True, resamples: int = RESAMPLES, seed: int = SEED,
                      level: float = LEVEL) -> dict:
    """Perplexity of one variant across its seeds: ``nll[s, i]`` is the summed NLL of window i under seed s
    (all seeds on the same windows, ``tokens[i]`` scored tokens each). Estimate: the geometric mean across seeds
    of the per-seed perplexities; interval: windows (bootstrap of the seed-averaged NLLs) combined with the
    seeds (t over per-seed log perplexities), on the log scale and exponentiated. ``random=False`` (a
    deterministic model, e.g. dense) has no seed part. Keys as :func:`combine` (exponentiated estimate, lo, hi;
    window_half / seed_half / seed_sd / sdd on the log scale) plus ``per_seed`` perplexities and ``n`` windows."""
    A = _nll_matrix(nll, "nll")
    t = _arr(tokens, "tokens")
    if A.shape[1] != t.size or np.any(t <= 0):
        raise ValueError("nll must have one column per window and tokens must be positive")
    w = perplexity_interval(A.mean(axis=0), t, resamples, seed, level)
    per_seed = A.sum(axis=1) / t.sum()
    est = float(per_seed.mean())
    part = seed_half_width([per_seed] if random else [], level)
    c = combine(est, math.log(w["lo"]), math.log(w["hi"]), part)
    return {**_exp(c), "per_seed": [math.exp(x) for x in per_seed], "n": int(t.size)}


def seeded_weighted_mean(sums, weights, random: bool = True, resamples: int = RESAMPLES, seed: int = SEED,
                         level: float = LEVEL) -> dict:
    """A token-weighted mean of per-window sums across seeds: ``sums[s, i]`` of window i under seed s (e.g. the
    summed KL divergence of its positions), ``weights[i]`` its positions. Estimate: the mean over seeds of each
    seed's ``Σ_i sums / Σ_i weights``; interval: windows (:func:`weighted_mean_interval` of the seed-averaged
    sums) combined with the seeds (t over the per-seed means; none for ``random=False``). Keys as
    :func:`combine` plus ``per_seed`` and ``n``."""
    A = _nll_matrix(sums, "sums")
    w = _arr(weights, "weights")
    if A.shape[1] != w.size or np.any(w <= 0):
        raise ValueError("sums must have one column per window and weights must be positive")
    win = weighted_mean_interval(A.mean(axis=0), w, resamples, seed, level)
    per_seed = A.sum(axis=1) / w.sum()
    c = combine(float(per_seed.mean()), win["lo"], win["hi"],
                seed_half_width([per_seed] if random else [], level))
    return {**c, "per_seed": per_seed.tolist(), "n": int(w.size)}


def _exp(c: dict) -> dict:
    """A :func:`combine` result on the log scale, with estimate and bounds exponentiated (half-widths stay log)."""
    return {**c, **{k: math.exp(c[k]) for k in ("estimate", "lo", "hi", "window_lo", "window_hi", "rerun_lo",
                                                 "rerun_hi")}}


def seeded_ppl_ratio(a_nll, b_nll, tokens, a_random: bool = True, b_random: bool = True,
                     paired_seeds: bool = False, resamples: int = RESAMPLES, seed: int = SEED,
                     level: float = LEVEL, a_pool: dict | None = None, b_pool: dict | None = None) -> dict:
    """``ppl_A / ppl_B`` across seeds on the same windows: ``a_nll`` (S_A, W), ``b_nll`` (S_B, W), ``tokens``
    (W,). Estimate: ratio of the geometric means across seeds. Window part: :func:`paired_ppl_ratio` of the
    seed-averaged window NLLs; seed part (:func:`seed_half_width`): with ``paired_seeds`` (both random, the same
    seed list in the same order, so realization s of A and of B share RHT signs and sketches) one group of
    per-seed log ratios; otherwise one group per random variant. Keys as :func:`combine` on the ratio scale
    (lo/hi exponentiated; window_half, seed_half, sdd of the log ratio) plus ``n`` windows. ``a_pool`` /
    ``b_pool``: a pooled variance of the per-seed log perplexity (:func:`pooled_variance`) for a random side with
    one seed (not with ``paired_seeds``)."""
    A, B = _nll_matrix(a_nll, "a_nll"), _nll_matrix(b_nll, "b_nll")
    t = _arr(tokens, "tokens")
    if A.shape[1] != t.size or B.shape[1] != t.size:
        raise ValueError("a paired perplexity ratio needs the same windows for both variants")
    w = paired_ppl_ratio(A.mean(axis=0), t, B.mean(axis=0), t, resamples, seed, level)
    la, lb = A.sum(axis=1) / t.sum(), B.sum(axis=1) / t.sum()
    groups = _seed_groups(la, lb, a_random, b_random, paired_seeds)
    pools = None if paired_seeds else ([a_pool] if a_random else []) + ([b_pool] if b_random else [])
    est = float(la.mean() - lb.mean())
    c = combine(est, math.log(w["lo"]), math.log(w["hi"]), seed_half_width(groups, level, pools))
    return {**_exp(c), "n": int(t.size)}


def _seed_groups(a: np.ndarray, b: np.ndarray, a_random: bool, b_random: bool, paired: bool) -> list:
    """Per-seed statistics of A and B as :func:`seed_half_width` groups for ``mean(a) − mean(b)``: one group of
    per-seed differences when the seeds are shared (``paired``), else one group per random side."""
    if paired:
        if not (a_random and b_random) or a.size != b.size:
            raise ValueError("paired seeds need two random variants with the same seeds")
        return [a - b]
    return ([a] if a_random else []) + ([b] if b_random else [])


def seeded_mean_difference(a, b, a_random: bool = True, b_random: bool = True, paired_seeds: bool = False,
                           resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL) -> dict:
    """``mean(a) − mean(b)`` over paired units (documents) and across seeds: ``a`` (S_A, D), ``b`` (S_B, D), the
    same documents in the same order. Window(document) part: :func:`paired_mean_difference` of the seed-averaged
    per-document values; seed part as :func:`seeded_ppl_ratio`. Keys as :func:`combine` plus ``n``."""
    A, B = _nll_matrix(a, "a"), _nll_matrix(b, "b")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"paired samples need the same documents, got {A.shape[1]} and {B.shape[1]}")
    w = paired_mean_difference(A.mean(axis=0), B.mean(axis=0), resamples, seed, level)
    ma, mb = A.mean(axis=1), B.mean(axis=1)
    groups = _seed_groups(ma, mb, a_random, b_random, paired_seeds)
    c = combine(float(ma.mean() - mb.mean()), w["lo"], w["hi"], seed_half_width(groups, level))
    return {**c, "n": int(A.shape[1])}


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
                                a2_random: bool = True, resamples: int = RESAMPLES, seed: int = SEED,
                                level: float = LEVEL) -> dict:
    """:func:`log_ratio_difference` across seeds: A1 (S1, W1) vs deterministic B1 (1, W1) on windows ``t1``, and A2
    vs B2 likewise on ``t2`` (two models: independent windows and independent realizations). Window part:
    :func:`log_ratio_difference` of the seed-averaged NLLs; seed part: one group per random A."""
    A1, B1, A2, B2 = (_nll_matrix(x, n) for x, n in ((a1_nll, "a1_nll"), (b1_nll, "b1_nll"), (a2_nll, "a2_nll"),
                                                       (b2_nll, "b2_nll")))
    w = log_ratio_difference(A1.mean(axis=0), B1.mean(axis=0), t1, A2.mean(axis=0), B2.mean(axis=0), t2,
                             resamples, seed, level)
    s1, s2 = float(np.sum(t1)), float(np.sum(t2))
    l1 = A1.sum(axis=1) / s1 - B1.sum(axis=1).mean() / s1
    l2 = A2.sum(axis=1) / s2 - B2.sum(axis=1).mean() / s2
    groups = ([l1] if a1_random else []) + ([-l2] if a2_random else [])
    c = combine(float(l1.mean() - l2.mean()), w["lo"], w["hi"], seed_half_width(groups, level))
    return {**c, "n": w["n"]}
