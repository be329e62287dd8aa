"""The verdicts at one screen (``verdicts.md``) and the forest plot of the claims' intervals, from ``claims.json``
alone (:mod:`caldera.experiments.report.claims` writes it; the details stay in ``claims.md``).

* **Counts**: each verdict once per *distinct claim* and once per ``claims.md`` entry, with what it means. A
  distinct claim is the claim text on one stand-in: the same comparison checked under several paper models (Table
  1's 7B, 13B and 70B rows and Table 7's Mistral all map to one stand-in) is one row, its sources listed; where
  those sources' verdicts differ, the row says so and counts under :data:`MIXED`.
* **One row per distinct claim**: its verdict, the deciding interval as ``estimate [lo, hi]`` (of several, the
  one nearest to contradicting the claim) and a link to each entry's detail in ``claims.md``.
* **Forest plot**: every perplexity and accuracy interval of every claim (one panel per kind of interval), each
  against its no-difference line and, where the claim records it, the paper's own effect (``paper_ratio``,
  ``paper_difference``). An interval whose seed part is undetermined (``lo`` / ``hi`` null) is drawn as its
  window-only part, dashed, and named so in its label: never left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from caldera.atomic import write_atomic
from caldera.experiments.report.verdicts import IDENTICAL, NEEDS_SEEDS, NOT_COMPARED, NOT_MEASURED, VERDICTS

#: a distinct claim whose sources were decided differently
MIXED = "differs by source"

#: one line on what each verdict means (every verdict of :data:`caldera.experiments.report.verdicts.VERDICTS`)
MEANINGS: dict[str, str] = {
    "holds": "the 95 % interval lies wholly on the side the paper claims (matrix-level claims: the deterministic "
             "numbers agree with it)",
    "fails": "the interval lies wholly on the other side (matrix-level: the numbers contradict the claim)",
    "inconclusive": "the interval straddles no difference: this run cannot tell either way at its sample size; "
                    "claims.md states the smallest difference it could resolve",
    NEEDS_SEEDS: "the evaluation windows alone would decide, but one side was compressed once and its method "
                 "has no pooled seed spread in this run; seed replicates decide it",
    IDENTICAL: "the two compared variants are the same model (every window, document and seed scored "
               "identically): there is nothing to compare",
    "not testable at this scale": "this run lacks what the claim needs (e.g. a second model family)",
    NOT_MEASURED: "the table or measurement the claim needs is not part of this run",
    NOT_COMPARED: "an extra method whose Q is stored as floats: no compressed row sits at its bits",
    MIXED: "the same claim on the same stand-in was decided differently under different paper models or tables "
           "(each source's verdict is listed)",
}

#: the side of no difference each kind of interval claims: -1 below (A/B < 1: A has the lower perplexity), +1 above
#: (A − B > 0: A has the higher accuracy / margin, or degrades more)
CLAIMED_SIDE = {"ppl ratio": -1, "margin": 1, "accuracy difference": 1, "log difference": 1}
#: the no-difference value of each kind
NULL = {"ppl ratio": 1.0, "margin": 0.0, "accuracy difference": 0.0, "log difference": 0.0}
#: the forest plot's panels, in order: kind -> axis label
PANELS = {"ppl ratio": "Wiki2-stand-in perplexity ratio A / B (log scale; < 1: A lower)",
          "log difference": "log(ppl ratio, LLaMa-3 stand-in) − log(ppl ratio, LLaMa-2 stand-in) (> 0: degrades more)",
          "accuracy difference": "zero-shot accuracy A − B, points (> 0: A higher)",
          "margin": "correct-choice log-likelihood margin A − B, nats (> 0: A higher)"}


def anchor(i: int) -> str:
    """The HTML anchor of ``claims.md``'s entry ``i`` (1-based, in ``claims.json`` order)."""
    return f"claim-{i}"


def _stand_in(c: dict[str, Any], models: Sequence[str]) -> str | None:
    """The model key (of ``models``) whose variants a claim's intervals compare, or None (no variant ids: a
    matrix-level, throughput or cross-family claim, grouped by its source instead)."""
    found = set()
    for iv in c.get("intervals") or []:
        for v in iv.get("pair") or []:
            hits = [m for m in models if str(v).startswith(f"{m}-")]
            if hits:
                found.add(max(hits, key=len))
    return "+".join(sorted(found)) if found else None


def group_claims(claims: Sequence[dict[str, Any]], models: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The distinct claims, in the order of their first entry: ``{"claim", "stand_in", "entries": [(1-based
    index, claim)], "verdict"}``. Entries share a row when they have the same claim text and compare variants of
    the same stand-in (``models``: the run's model keys, the prefixes of its variant ids); an entry without variant
    ids shares a row only with entries of the same text and source. ``verdict``: the entries' common verdict, or
    :data:`MIXED`."""
    groups: dict[tuple, dict[str, Any]] = {}
    for i, c in enumerate(claims, 1):
        s = _stand_in(c, models)
        key = (c["claim"], "model", s) if s is not None else (c["claim"], "source", c.get("source"))
        g = groups.setdefault(key, {"claim": c["claim"], "stand_in": s, "entries": []})
        g["entries"].append((i, c))
    for g in groups.values():
        vs = {c["verdict"] for _, c in g["entries"]}
        g["verdict"] = vs.pop() if len(vs) == 1 else MIXED
    return list(groups.values())


def counts(claims: Sequence[dict[str, Any]], models: Sequence[str] = ()) -> dict[str, dict[str, int]]:
    """``{verdict: {"distinct": rows of :func:`group_claims`, "entries": claims.md entries}}`` for every verdict
    that occurs (``MIXED`` has no entries of its own: its entries count under their own verdicts)."""
    out: dict[str, dict[str, int]] = {}
    for c in claims:
        out.setdefault(c["verdict"], {"distinct": 0, "entries": 0})["entries"] += 1
    for g in group_claims(claims, models):
        out.setdefault(g["verdict"], {"distinct": 0, "entries": 0})["distinct"] += 1
    return out


def _bounds(iv: dict[str, Any]) -> tuple[float, float]:
    """``(lo, hi)`` with a null bound as ∓inf (a seed part undetermined)."""
    lo, hi = iv.get("lo"), iv.get("hi")
    return (-math.inf if lo is None else lo), (math.inf if hi is None else hi)


def deciding_interval(ivs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The interval a verdict rests on: of the intervals of the deciding kind (the margin where a zero-shot claim
    records one, else the first interval's kind), the one nearest to contradicting the claim: the highest upper
    bound of a ratio claimed below 1, the lowest lower bound of a difference claimed above 0. None without
    intervals."""
    if not ivs:
        return None
    kinds = [iv.get("kind") for iv in ivs]
    kind = "margin" if "margin" in kinds else kinds[0]
    same = [iv for iv in ivs if iv.get("kind") == kind]
    side = CLAIMED_SIDE.get(kind)
    if side is None:
        return same[0]
    if side < 0:
        return max(same, key=lambda iv: (_bounds(iv)[1], iv["estimate"]))
    return min(same, key=lambda iv: (_bounds(iv)[0], iv["estimate"]))


def interval_text(iv: dict[str, Any] | None) -> str:
    """``×est [lo, hi]`` (ratio), ``+est [lo, hi] points`` (accuracy), ``+est [lo, hi] nats`` (margin), ``+est
    [lo, hi]`` (log difference); with an undetermined seed part, its window-only interval so named; "—" for none."""
    if iv is None:
        return "—"
    kind = iv.get("kind")
    if kind == "ppl ratio":
        f, unit = (lambda x: f"{x:.3f}" if 1e-3 <= abs(x) < 1e3 else f"{x:.3g}"), ""
        est = f"×{f(iv['estimate'])}"
    else:
        acc = kind == "accuracy difference"
        scale, unit = (100.0, " points") if acc else (1.0, " nats" if kind == "margin" else "")
        digits = 1 if kind == "accuracy difference" else 3
        f = (lambda x: f"{scale * x:+.{digits}f}")
        est = f(iv["estimate"])
    if iv.get("lo") is None or iv.get("hi") is None:
        return f"{est}, windows only [{f(iv['window_lo'])}, {f(iv['window_hi'])}]{unit} (seed spread unknown)"
    return f"{est} [{f(iv['lo'])}, {f(iv['hi'])}]{unit}"


def sources_text(sources: Sequence[str]) -> str:
    """Sources joined, the paper models of one table gathered: ``"table1 [llama-2-13b]", "table1 [llama-2-7b]"``
    → ``"table1 [llama-2-13b, llama-2-7b]"``; any other source as it is."""
    out: dict[str, list[str]] = {}
    for s in sources:
        m = re.fullmatch(r"(.*?) \[([^\]]*)\]", s)
        head, models = (m.group(1), [m.group(2)]) if m else (s, [])
        out.setdefault(head, []).extend(models)
    return "; ".join(f"{h} [{', '.join(ms)}]" if ms else h for h, ms in out.items())


def _verdict_cell(g: dict[str, Any]) -> str:
    if g["verdict"] != MIXED:
        return f"**{g['verdict']}**"
    by: dict[str, list[str]] = {}
    for _, c in g["entries"]:
        by.setdefault(c["verdict"], []).append(c["source"])
    return f"**{MIXED}**: " + "; ".join(f"{v} in {sources_text(s)}" for v, s in by.items())


def short_numbers(c: dict[str, Any], width: int = 70) -> str:
    """The first clause of a claim's numbers (up to ";" or " — "), without bold marks, cut at ``width`` characters:
    the number cell of a claim decided without an interval (matrix-level counts, throughput ranges)."""
    text = re.split(r"; | — ", str(c.get("numbers") or "—").replace("**", ""), maxsplit=1)[0].strip() or "—"
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _deciding_of_group(g: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    """The deciding interval of a row (:func:`deciding_interval` over its entries' deciding intervals) and how
    many entries have one."""
    ivs = [d for d in (deciding_interval(c.get("intervals") or []) for _, c in g["entries"]) if d is not None]
    return deciding_interval(ivs), len(ivs)


def _regime_cell(g: dict[str, Any]) -> str:
    """A distinct claim's verdict in the stand-in's regime: its entries' regime verdict, each distinct one with its
    count where they differ (``claims.md``'s regime column has each entry's)."""
    found = [(c.get("regime") or {}).get("verdict", "—") for _, c in g["entries"]]
    distinct = sorted(set(found), key=found.index)
    if len(distinct) == 1:
        return distinct[0] if distinct[0] not in ("holds", "fails", "inconclusive") else f"**{distinct[0]}**"
    return "; ".join(f"{v} ({found.count(v)})" for v in distinct)


def render_page(claims: Sequence[dict[str, Any]], labels: Mapping[str, str] | None = None,
                claims_md: str = "claims.md", forest: str = "verdicts_forest.png") -> str:
    """``verdicts.md``: the counts with their meanings, then one row per distinct claim (:func:`group_claims`;
    ``labels``: model key -> display label, the run's models)."""
    labels = dict(labels or {})
    groups = group_claims(claims, list(labels))
    n = counts(claims, list(labels))
    order = [v for v in (*VERDICTS, MIXED) if v in n] + sorted(set(n) - {*VERDICTS, MIXED})
    lines = ["# Verdicts of this run", "",
             f"{len(claims)} claims.md entries, {len(groups)} distinct claims (one claim text on one stand-in "
             "is one row: the paper models and tables it was checked under are its sources). Each verdict rests on "
             "a 95 % interval that counts the evaluation sample and the compression's seed spread; the details, "
             f"every interval and the smallest detectable difference are in [{claims_md}]({claims_md}).", "",
             "| verdict | distinct claims | claims.md entries | what it means |", "|---|---|---|---|"]
    lines += [f"| {v} | {n[v]['distinct']} | {n[v]['entries'] if v != MIXED else '—'} | "
              f"{MEANINGS.get(v, 'a verdict this page does not describe: see claims.md')} |" for v in order]
    regime = any("regime" in c for c in claims)  # a run with regime rows: the verdict in the stand-in's regime
    if regime:
        from caldera.experiments.report.regime_claims import regime_note_lines

        lines += ["", *regime_note_lines(claims)[:-1]]
    lines += ["", f"Every perplexity and accuracy interval against its no-difference line and the paper's own "
              f"effect: [{forest}]({forest}) (PDF beside it).", "",
              "| # | claim | stand-in | verdict | " + ("in the regime | " if regime else "")
              + "deciding interval (or first numbers) | sources | detail |",
              "|---|---|---|---|---|---|---|" + ("---|" if regime else "")]
    for k, g in enumerate(groups, 1):
        iv, m = _deciding_of_group(g)
        stand = g["stand_in"]
        stand = "—" if stand is None else " + ".join(labels.get(s, s).split(" (")[0] for s in stand.split("+"))
        cell = (interval_text(iv) + (f" (weakest of {m})" if m > 1 else "") if iv is not None
                else short_numbers(g["entries"][0][1]))
        links = ", ".join(f"[#{i}]({claims_md}#{anchor(i)})" for i, _ in g["entries"])
        sources = sources_text([c["source"] for _, c in g["entries"]])
        reg = f"{_regime_cell(g)} | " if regime else ""
        lines.append(f"| {k} | {g['claim']} | {stand} | {_verdict_cell(g)} | {reg}{cell} | {sources} | {links} |")
    return "\n".join(lines) + "\n"


def forest_rows(claims: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the forest plot draws, one row per interval of a kind in :data:`PANELS`, in claims.json order:
    ``{"panel", "label", "entry", "verdict", "estimate", "lo", "hi", "bounded", "null", "paper"}``. ``lo`` /
    ``hi``: the interval drawn, the window-only part where the seed part is undetermined (``bounded`` False);
    ``paper``: the paper's own effect on the same scale (accuracy in points), or None."""
    rows = []
    for i, c in enumerate(claims, 1):
        for iv in c.get("intervals") or []:
            kind = iv.get("kind")
            if kind not in PANELS:
                continue
            bounded = iv.get("lo") is not None and iv.get("hi") is not None
            lo, hi = (iv["lo"], iv["hi"]) if bounded else (iv.get("window_lo"), iv.get("window_hi"))
            scale = 100.0 if kind == "accuracy difference" else 1.0
            paper = iv.get("paper_ratio") if kind == "ppl ratio" else iv.get("paper_difference")
            a, b = (list(iv.get("pair") or []) + ["?", "?"])[:2]
            sep = " / " if kind == "ppl ratio" else " − "
            rows.append({"panel": kind, "entry": i, "verdict": c["verdict"],
                         "label": f"#{i} {a}{sep}{b}" + ("" if bounded else " (windows only)"),
                         "estimate": scale * iv["estimate"],
                         "lo": None if lo is None else scale * lo, "hi": None if hi is None else scale * hi,
                         "bounded": bounded, "null": NULL[kind], "paper": None if paper is None else scale * paper})
    return rows


def log_ticks(axis: Any) -> None:
    """Plain numbers on a log axis (1, 2, 0.5, not 10^0); the minor ticks labelled only where the axis spans less
    than a factor of 10 (else they crowd)."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    axis.set_major_formatter(FormatStrFormatter("%g"))
    lo, hi = sorted(axis.get_view_interval())
    axis.set_minor_formatter(FormatStrFormatter("%g") if lo > 0 and hi / lo < 10 else NullFormatter())
    axis.set_tick_params(which="minor", labelsize=6)


VERDICT_COLOURS = {"holds": "tab:green", "fails": "tab:red", "inconclusive": "tab:gray"}


def plot_forest(claims: Sequence[dict[str, Any]], out_png: str, out_pdf: str) -> list[dict[str, Any]]:
    """The forest plot of :func:`forest_rows`: one panel per kind, the interval as a bar (dashed: window-only),
    the estimate as a dot, coloured by the claim's verdict, the no-difference line solid, the paper's effect as a
    diamond. Returns the rows drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from caldera.experiments.report.plots import save_figure

    rows = forest_rows(claims)
    panels = [k for k in PANELS if any(r["panel"] == k for r in rows)]
    heights = [max(1, sum(r["panel"] == k for r in rows)) for k in panels] or [1]
    fig, axes = plt.subplots(len(panels) or 1, 1, figsize=(9, 1.2 + 0.22 * sum(heights) + 0.6 * len(heights)),
                             squeeze=False, gridspec_kw={"height_ratios": heights}, layout="constrained")
    if not panels:
        axes[0][0].text(0.5, 0.5, "no perplexity or accuracy interval in claims.json", ha="center", va="center")
        axes[0][0].set_axis_off()
    for ax, kind in zip(axes[:, 0], panels):
        here = [r for r in rows if r["panel"] == kind]
        for y, r in enumerate(reversed(here)):
            colour = VERDICT_COLOURS.get(r["verdict"], "tab:orange")
            if r["lo"] is not None and r["hi"] is not None:
                ax.hlines(y, r["lo"], r["hi"], color=colour, linestyles="solid" if r["bounded"] else "dashed", lw=1.6)
            ax.plot([r["estimate"]], [y], "o", color=colour, ms=4)
            if r["paper"] is not None:
                ax.plot([r["paper"]], [y], "D", mfc="none", mec="black", ms=4)
        ax.axvline(here[0]["null"], color="black", lw=0.8)
        if kind == "ppl ratio":
            ax.set_xscale("log")
            log_ticks(ax.xaxis)
        ax.set_yticks(range(len(here)), [r["label"] for r in reversed(here)], fontsize=6)
        ax.set_xlabel(PANELS[kind], fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    handles = [plt.Line2D([], [], color=c, marker="o", lw=1.6, label=v) for v, c in VERDICT_COLOURS.items()]
    handles += [plt.Line2D([], [], color="tab:orange", marker="o", lw=1.6, label="other verdict"),
                plt.Line2D([], [], color="gray", ls="dashed", lw=1.6, label="windows only (seed spread unknown)"),
                plt.Line2D([], [], color="none", marker="D", mfc="none", mec="black", label="the paper's effect")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7)
    fig.suptitle("Claims' 95 % intervals (#: the claims.md entry), against no difference (solid line)", fontsize=9)
    save_figure(fig, out_png, out_pdf)
    plt.close(fig)
    return rows


def write_verdict_page(claims_json: str, out_md: str, out_png: str, out_pdf: str,
                       labels: Mapping[str, str] | None = None) -> str:
    """``verdicts.md`` and the forest plot (PNG, PDF) beside it, from ``claims_json`` alone. The page links to
    ``claims.md`` in its own folder and to the PNG by name."""
    import json

    path = Path(claims_json)
    try:
        claims = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{claims_json}: cannot read the claims ({e}); rerun rule `claims` (snakemake --cores 2 "
                         f"{claims_json})") from None
    if not isinstance(claims, list) or not all(isinstance(c, dict) and {"claim", "verdict"} <= set(c) for c in claims):
        raise ValueError(f"{claims_json}: not a claims list (each entry needs claim and verdict); it is written by "
                         "rule `claims` (caldera.experiments.report.claims.write_claims)")
    plot_forest(claims, out_png, out_pdf)
    text = render_page(claims, labels, forest=Path(out_png).name)
    write_atomic(out_md, text)
    return text
