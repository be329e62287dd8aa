"""The verdict rules and number formats that every claim family shares
(:mod:`caldera.experiments.report.table_claims`, :mod:`caldera.experiments.report.finetune_claims`): the verdict
names, how an interval with an undetermined seed part is decided, a direction rule on intervals ("A is lower /
higher than B"), and the text of a combined interval."""

from __future__ import annotations

import math
from typing import Any, Callable

from caldera import stats
from caldera.experiments.report.claim_rules import NOT_MEASURED, direction_verdict
from caldera.experiments.report.tables import bits_label

#: A comparison whose windows alone resolve a direction, taken on one realization of a side whose family has no
#: pooled spread in this run (:mod:`caldera.experiments.report.realization_pool`): not decided; ``replicates`` gives it
#: seeds. A window-only interval that already straddles no-difference is decided inconclusive instead: the seed
#: part only widens it (:func:`seeds_verdict`).
NEEDS_SEEDS = "needs replicates (one realization, no pooled spread)"
#: an ``extra_methods`` row whose Q is stored as floats: no compressed row sits at its bits
NOT_COMPARED = "not compared (Q stored dense)"
#: two variants that are the same model (the same evaluation on every window, document and seed): no interval
IDENTICAL = "identical (the same model)"
#: a claim whose table or measurement (RHT fine-tuning, LoRA, throughput) this run does not make:
#: claim_rules.NOT_MEASURED
VERDICTS = ("holds", "fails", "inconclusive", NEEDS_SEEDS, IDENTICAL, "not testable at this scale", NOT_MEASURED,
            NOT_COMPARED)
#: the normal quantile of 80 % power: an effect is within reach when the 95 % half-width times
#: ``(z_0.975 + z_0.8) / z_0.975`` is below it
Z80 = 0.8416212335729143


def row_bits(r: dict[str, Any]) -> str:
    """A row's B_LR as "4" / "16" whether the table wrote 4, 4.0, "4.0" or "—" (tables written before
    :func:`caldera.experiments.report.tables.bits_label` normalised it hold floats)."""
    return str(bits_label(r["b_lr"]))


def ratio_text(r: dict[str, Any]) -> str:
    """``×est [lo, hi]`` of a combined interval, with its seeds, the two parts' half-widths (as ±%) and the
    pooled spreads it took; for an undetermined seed part, the window-only interval."""
    if r.get("seed_half", 0.0) is None:
        return (f"×{r['estimate']:.3f}, windows only [{r['window_lo']:.3f}, {r['window_hi']:.3f}] "
                f"(seeds {'/'.join(map(str, r['seeds']))}: spread unknown)")
    text = f"×{r['estimate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"
    pooled = r.get("pooled_from") or {}
    paired = r.get("paired_seeds") or []
    if "window_half" in r and paired:
        how = "block variance" if str(r.get("construction", "")).endswith("block variance") else "own variance"
        df = f", df {r['df']:.0f}" if r.get("df") else ""
        text += (f" (paired on seed{'s' if len(paired) > 1 else ''} {'/'.join(map(str, paired))}; windows "
                 f"±{100 * math.expm1(r['window_half']):.1f} %, seeds ±{100 * math.expm1(r['seed_half']):.1f} % "
                 f"({how}{df}))")
    elif "window_half" in r and (pooled or any(s > 1 for s in r.get("seeds", []))):
        text += (f" ({'/'.join(map(str, r['seeds']))} seeds, unpaired; windows "
                 f"±{100 * math.expm1(r['window_half']):.1f} %, seeds ±{100 * math.expm1(r['seed_half']):.1f} %"
                 f"{pool_text(pooled)})")
    return text


def reach_text(intervals: list[dict[str, Any]], paper: float | None = None) -> str:
    """The smallest perplexity ratio this run resolves with 80 % power (the widest log-ratio half-width ``h`` of
    ``intervals`` scaled by ``(z_0.975 + z_0.8) / z_0.975``: ×e^{∓h'}), beside the paper's own ratio. With one
    realization (an infinite half-width) the seed part is unknown: the windows alone (``window_half``) give the
    bound, which the unknown seed spread can only widen."""
    h = max(r["sdd"] for r in intervals)
    paper_text = "" if paper is None else f" (the paper's: ×{paper:.3f})"
    if not math.isfinite(h):
        w = max(_window_half(r) for r in intervals)
        if not math.isfinite(w):
            return "resolvable effect: undetermined (one realization, no window interval)"
        w80 = w * (stats.Z95 + Z80) / stats.Z95
        return (f"resolvable at 80 % power, from the windows alone (one realization: its seed spread, unknown here, "
                f"only widens it): at best ratios below ×{math.exp(-w80):.3f} or above ×{math.exp(w80):.3f}"
                + paper_text)
    h80 = h * (stats.Z95 + Z80) / stats.Z95
    text = f"resolvable at 80 % power: ratios below ×{math.exp(-h80):.3f} or above ×{math.exp(h80):.3f}"
    return text + paper_text


def _window_half(r: dict[str, Any]) -> float:
    """The window part's log-ratio half-width of an interval: ``window_half``, else half its window bounds' span
    (as ratios, the log of their ratio), else infinite."""
    if r.get("window_half") is not None:
        return float(r["window_half"])
    lo, hi = r.get("window_lo"), r.get("window_hi")
    if lo is not None and hi is not None and lo > 0 and hi > 0:
        return math.log(hi / lo) / 2.0
    return math.inf


def pool_text(pooled: dict[str, dict[str, Any]]) -> str:
    """``; v: pooled <family> spread ±x % (df d, from …)`` for each side that took its family's pooled spread."""
    return "".join(f"; {v}: pooled {p['family']} spread ±{100 * math.expm1(math.sqrt(p['var'])):.1f} % per seed "
                   f"(df {p['df']}, from {', '.join(p['variants'])})" for v, p in pooled.items())


def sdd_ratio_text(rs: list[dict[str, Any]]) -> str:
    """Largest half-width of the combined log-ratio intervals, as ±% of perplexity, with windows and seeds."""
    w = max(r["sdd"] for r in rs)
    if not math.isfinite(w):
        half = max(r["window_half"] for r in rs)
        return f"undetermined: one realization (window part ±{100 * math.expm1(half):.1f} %)"
    seeds = max(max(r.get("seeds") or [1]) for r in rs)
    return f"±{100 * math.expm1(w):.1f} % ppl ({rs[0]['n']} windows, {seeds} seed{'s' if seeds > 1 else ''})"


def window_only(iv: dict[str, Any]) -> dict[str, Any]:
    """``iv`` with its bounds replaced by the window / document part's (the interval without the seed part)."""
    return {**iv, "lo": iv["window_lo"], "hi": iv["window_hi"]}


def seeds_verdict(intervals: list[dict[str, Any]], decide: Callable[[list[dict[str, Any]]], str]) -> str:
    """``decide(intervals)``, or where a seed part is undetermined (a random side with one realization and no
    pooled spread): "inconclusive" when ``decide`` on the window-only intervals is already inconclusive, else
    :data:`NEEDS_SEEDS`. Sound because every decision rule here is monotone: the seed part only widens an
    interval, and a wider interval moves holds / fails towards inconclusive, never the reverse."""
    if not any(iv.get("seed_half", 0.0) is None for iv in intervals):
        return decide(intervals)
    return "inconclusive" if decide([window_only(iv) for iv in intervals]) == "inconclusive" else NEEDS_SEEDS


def interval_verdict(rule: str, null: float = 1.0) -> Callable[[list[dict[str, Any]]], str]:
    """The decision of direction rule ``rule`` ("lower" or "higher",
    :func:`caldera.experiments.report.claim_rules.direction_verdict`) on intervals of A/B (``null`` 1) or A − B
    (``null`` 0), each read as its direction (:func:`caldera.stats.direction`)."""

    def decide(intervals: list[dict[str, Any]]) -> str:
        return direction_verdict(rule, [stats.direction(r, null) for r in intervals])

    return decide


def lower_verdict(intervals: list[dict[str, Any]], null: float = 1.0) -> str:
    """"A is lower than each B": holds when every interval of A/B (or A−B) lies below ``null``, fails when any
    lies above it, otherwise inconclusive (rule "lower" of :func:`interval_verdict`)."""
    return interval_verdict("lower", null)(intervals)


def number_text(x: Any) -> str:
    return "—" if x is None else f"{x:.2f}"
