"""The comparisons of table rows behind the paper's ordering claims: perplexity ratios, zero-shot margins, the
second model family's degradation and the ``extra_methods`` rows at the nearest bits.

Each comparison is decided by a *paired* 95 % interval (:mod:`caldera.stats`; same windows / same documents,
seeded bootstrap): **holds** when the interval lies entirely on the claimed side of "no difference", **fails**
when it lies entirely on the other side, **inconclusive** otherwise (the interval is shown). Each also states its
*smallest detectable difference* (sdd): the half-width of its paired interval — differences well below it cannot
be resolved with the windows / documents of this run.

A comparison is stated once per distinct pair of variants: Table 1's 7B, 13B and 70B rows map to the same
stand-in variants, and the rows that repeat a comparison are listed in its source. Inputs: the table JSONs of
:mod:`caldera.experiments.report.tables` (with their per-window / per-document ``samples``). The table entries of
:mod:`caldera.experiments.report.claim_registry` reach :func:`table_claims` through
:func:`caldera.experiments.report.claims.check`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable

from caldera import stats
from caldera.experiments.report.claim_registry import (
    PPL_RATIO,
    PPL_RATIO_EACH,
    TABLE,
    ClaimEntry,
    Side,
    entries,
)
from caldera.experiments.report.tables import (
    EXTRA_LABEL,
    Q_DENSE_LABEL,
    common_seeds,
    identical_variants,
    kl_difference,
    ppl_ratio,
    realizations,
    seed_parts,
)
from caldera.experiments.report.verdicts import (
    IDENTICAL,
    NOT_COMPARED,
    Z80,
    interval_verdict,
    ratio_text,
    reach_text,
    row_bits,
    sdd_ratio_text,
    seeds_verdict,
)

CORPUS = "wiki"  # the tables' "Wiki2" column: the perplexity the paper's ranking claims are about


def _ppl_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in table["rows"] if r["variant"] and r["ours"].get("wiki2_ppl") is not None]


def _ppl_ratios(table: dict[str, Any], paper_model: str) -> tuple[str | None, dict[tuple, tuple[float, float]]]:
    """``(stand-in label, {(method, paper rank, b_lr): (ours ppl / ours dense ppl, paper's same ratio)})``."""
    rows = [r for r in _ppl_rows(table) if r["paper_model"] == paper_model]
    dense = [r for r in rows if r["method"].startswith("Unquantized")]
    if not dense:
        return None, {}
    d = dense[0]
    out = {}
    for r in rows:
        if r is d or r["paper"].get("wiki2_ppl") is None:
            continue
        out[(r["method"].split(" (")[0], int(r["paper_rank"]), row_bits(r))] = (
            r["ours"]["wiki2_ppl"] / d["ours"]["wiki2_ppl"], r["paper"]["wiki2_ppl"] / d["paper"]["wiki2_ppl"])
    return d["stand_in"], out


def claim_tasks(table: dict[str, Any], a: str, b: str) -> list[str] | None:
    """The zero-shot tasks a claim on variants ``a`` and ``b`` pools: those both pool (the table's
    ``claim_tasks``, from ``zeroshot_claims.tasks``: the tasks each stand-in's dense model scores above chance),
    or None (every task) where neither variant's model names them."""
    named = [table.get("claim_tasks", {}).get(v) for v in (a, b)]
    named = [set(t) for t in named if t is not None]
    return sorted(set.intersection(*named)) if named else None


def zeroshot_pair(table: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    """Paired zero-shot comparison of variants ``a`` and ``b`` on the documents both scored in every realization
    that has zero-shot results (the tasks of :func:`claim_tasks` pooled, matched by task and document id): accuracy
    difference and difference of the correct choice's log-likelihood margin, each with the interval that combines
    documents and seeds (:func:`caldera.stats.seeded_mean_difference`; paired on the seeds both hold where they
    share two or more); None without per-document results on those tasks."""
    za, sa, rand_a = seed_parts(table, a, "zeroshot")
    zb, sb, rand_b = seed_parts(table, b, "zeroshot")
    if not za or not zb:
        return None
    tasks = claim_tasks(table, a, b)
    keys = None
    for z in za + zb:
        ks = {(task, d) for task, t in z.items() if tasks is None or task in tasks for d in t["doc_id"]}
        keys = ks if keys is None else keys & ks
    keys = sorted(keys or ())
    if not keys:
        return None

    def matrix(zs: list[dict[str, Any]], metric: str) -> list[list[float]]:
        return [[dict(zip(z[task]["doc_id"], z[task][metric]))[d] for task, d in keys] for z in zs]

    shared = common_seeds({"random": rand_a, "seeds": sa}, {"random": rand_b, "seeds": sb})
    if len(shared) >= 2:  # paired on the shared seeds: the pair's own per-seed differences
        za, zb = [za[sa.index(s)] for s in shared], [zb[sb.index(s)] for s in shared]
    out = {m: stats.seeded_mean_difference(matrix(za, m), matrix(zb, m), rand_a, rand_b, len(shared) >= 2)
           for m in ("acc", "margin")}
    return {**out, "pair": [a, b], "paired_seeds": shared if len(shared) >= 2 else [], "tasks": tasks}


def family_claims(group: Sequence[ClaimEntry], tables: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The second model family's loss against the first's (:func:`degradation`), one claims.md entry
    (``{"claim", "source", "verdict", "numbers", "sdd"}``) per entry of ``group``."""
    out = []
    for e in group:
        family = degradation(tables, e.rule)
        out.append({"claim": e.claim, "source": e.source, "verdict": family["verdict"],
                    "numbers": family["numbers"], "sdd": family.get("sdd", "—")})
    return out


def degradation(tables: dict[str, dict[str, Any]], rule: str = "higher") -> dict[str, str]:
    """Does the LLaMa-3 stand-in lose more perplexity than the LLaMa-2 7B stand-in under the same method rows?

    Compared: compressed Wiki2 perplexity / the same model's unquantized perplexity, row by row (same method,
    paper rank and factor bits), as ``log(ratio for LLaMa-3) − log(ratio for LLaMa-2)`` with a bootstrap interval
    (paired within each model, independent across them). Decided by direction rule ``rule`` on every matched
    row's interval against 0 (:func:`caldera.experiments.report.verdicts.interval_verdict`; "higher": holds when
    every interval is above 0, fails when any is below, inconclusive otherwise). Testable only when the two paper
    families map to different stand-ins.
    """
    t1, t3 = tables.get("table1_llama2_zeroshot"), tables.get("table2_llama3_zeroshot")
    if t1 is None or t3 is None:
        return {"verdict": "not testable at this scale", "numbers": "Tables 1 and 2 are not both in this run"}
    s2, r2 = _ppl_ratios(t1, "llama-2-7b")
    s3, r3 = _ppl_ratios(t3, "llama-3-8b")
    keys = sorted(set(r2) & set(r3))
    if s2 is None or s3 is None or not keys:
        return {"verdict": "not testable at this scale", "numbers": "no matched rows with an unquantized baseline"}
    if s2 == s3:
        return {"verdict": "not testable at this scale",
                "numbers": f"both families map to the same stand-in ({s2}); add a second family to `stand_ins`"}
    lr = {b: f"{b}-bit LR" if b != "—" else "no LR" for _, _, b in keys}
    ivs = [_degradation_interval(t1, "llama-2-7b", t3, "llama-3-8b", k) for k in keys]
    if any(iv is None for iv in ivs):
        more = [k for k in keys if r3[k][0] > r2[k][0]]
        return {"verdict": "inconclusive",
                "numbers": f"no per-window results (rerun the evaluation); point estimates: {len(more)}/{len(keys)} "
                           "rows degrade more"}
    more = sum(stats.direction(iv) > 0 for iv in ivs)
    less = sum(stats.direction(iv) < 0 for iv in ivs)
    verdict = seeds_verdict(ivs, interval_verdict(rule, 0.0))

    def text(iv: dict[str, Any]) -> str:
        if iv["seed_half"] is None:
            return f"{iv['estimate']:+.3f}, windows only [{iv['window_lo']:+.3f}, {iv['window_hi']:+.3f}]"
        return f"{iv['estimate']:+.3f} [{iv['lo']:+.3f}, {iv['hi']:+.3f}] (seeds {'/'.join(map(str, iv['seeds']))})"

    detail = "; ".join(f"{m} k={k} {lr[b]}: ×{r3[(m, k, b)][0]:.2f} vs ×{r2[(m, k, b)][0]:.2f}, log-difference "
                       f"{text(iv)} (paper ×{r3[(m, k, b)][1]:.2f} vs ×{r2[(m, k, b)][1]:.2f})"
                       for (m, k, b), iv in zip(keys, ivs))
    sdd = max(iv["sdd"] for iv in ivs)
    window_sdd = max((iv["window_hi"] - iv["window_lo"]) / 2.0 for iv in ivs)
    reach = ""
    if verdict == "inconclusive":
        paper = min((math.log(r3[k][1] / r2[k][1]) for k in keys), key=abs)
        if math.isfinite(sdd):
            reach = (f"; resolvable at 80 % power: log-differences beyond ±{sdd * (stats.Z95 + Z80) / stats.Z95:.3f} "
                     f"(the paper's smallest: {paper:+.3f})")
        else:
            w80 = window_sdd * (stats.Z95 + Z80) / stats.Z95
            reach = (f"; resolvable at 80 % power, from the windows alone (one realization: its seed spread, unknown "
                     f"here, only widens it): at best log-differences beyond ±{w80:.3f} (the paper's smallest: "
                     f"{paper:+.3f})")
    return {"verdict": verdict,
            "numbers": f"{more}/{len(keys)} rows degrade more, {less} less (95 % intervals); perplexity ratio "
                       f"compressed/unquantized, {s3} (for LLaMa-3) vs {s2} (for LLaMa-2 7B): {detail}{reach}",
            "sdd": f"±{sdd:.3f} in log ratio" if math.isfinite(sdd) else
                   f"undetermined: one realization (window part ±{window_sdd:.3f} in log ratio)",
            "intervals": [{**iv, "pair": [f"{m} k={k} {lr[b]}", "LLaMa-2 7B stand-in"], "kind": "log difference"}
                          for (m, k, b), iv in zip(keys, ivs)]}


def _row_for(table: dict[str, Any], paper_model: str, key: tuple) -> tuple[dict, dict] | tuple[None, None]:
    rows = [r for r in _ppl_rows(table) if r["paper_model"] == paper_model]
    dense = [r for r in rows if r["method"].startswith("Unquantized")]
    hit = [r for r in rows if (r["method"].split(" (")[0], int(r["paper_rank"]), row_bits(r)) == key]
    return (hit[0], dense[0]) if hit and dense else (None, None)


def _degradation_interval(t1, pm1, t3, pm3, key) -> dict[str, Any] | None:
    c2, d2 = _row_for(t1, pm1, key)
    c3, d3 = _row_for(t3, pm3, key)
    w = [realizations(t, r["variant"]) for t, r in ((t3, c3), (t3, d3), (t1, c2), (t1, d2))]
    if any(x is None for x in w):
        return None
    return stats.seeded_log_ratio_difference(w[0]["nll"], w[1]["nll"], w[0]["tokens"], w[2]["nll"], w[3]["nll"],
                                             w[2]["tokens"], w[0]["random"], w[2]["random"])


def _compressed_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The measured CALDERA and QuIP# rows of a table (the rows its ranking claims compare)."""
    return [r for r in _ppl_rows(table) if r["method"].startswith(("CALDERA", "QuIP#"))]


def side_rows(side: Side, block: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``block`` (one table's rows of one paper model, in table order) that ``side`` takes
    (:class:`caldera.experiments.report.claim_registry.Side`); empty when the block has none of its rows."""

    def hit(row: Any, r: dict[str, Any]) -> bool:
        return row.matches(r["method"], row_bits(r), r["paper_rank"])

    found = [r for r in block if hit(side, r)]
    if not found or side.pick == "every":
        return found
    if side.pick == "highest rank":
        return [max(found, key=lambda r: int(r["paper_rank"]))]
    if side.pick == "first held":
        return next(([r for r in block if hit(row, r)][:1] for row in side.rows if any(hit(row, r) for r in block)))
    return found[:1]  # "first"


def _rows_text(side: Side) -> str:
    return " or ".join(f"{r.method} k={'any' if r.rank is None else r.rank} B_LR={r.b_lr or 'any'}"
                       for r in side.rows)


def _table_comparison(e: ClaimEntry, tab: dict[str, Any], a: dict[str, Any],
                      b: list[dict[str, Any]]) -> tuple[tuple, Callable[[], tuple]]:
    """The key of entry ``e``'s comparison of row ``a`` with rows ``b`` of one block (the distinct variants it
    compares) and the function that decides it by the entry's statistic and rule."""
    if e.statistic == PPL_RATIO_EACH:
        others = sorted({r["variant"] for r in b} - {a["variant"]})
        return (e, a["variant"], tuple(others)), lambda: _decide_lowest(tab, a, others, e.rule)
    pair = (a["variant"], b[0]["variant"])
    if e.statistic == PPL_RATIO:
        return (e, *pair), lambda: _decide_ppl_pair(tab, *pair, e.rule)
    return (e, *pair), lambda: _decide_zeroshot_pair(tab, *pair, (a, b[0]), e.rule)


def table_claims(tables: dict[str, dict[str, Any]], group: list[ClaimEntry] | None = None) -> list[dict[str, Any]]:
    """The claims of the table entries ``group`` (default: the registry's) on the zero-shot tables ``tables``, one
    per distinct comparison of variants (see module doc). An entry names no block: it is stated for every block
    (table, paper model) that has a row of each side, in table, paper model, entry order; a table with no measured
    compressed row says so once. An entry bound to one block is stated once, "not testable at this scale" where
    that block has no measured row of a side."""
    group = list(entries(TABLE) if group is None else group)
    found: dict[tuple, dict[str, Any]] = {}

    def add(key: tuple, claim: str, source: str, decide: Callable[[], tuple]) -> None:
        if key in found:
            found[key]["source"] += f", {source}"
            return
        verdict, numbers, sdd, *ivs = decide()
        found[key] = {"claim": claim, "source": source, "verdict": verdict, "numbers": numbers, "sdd": sdd,
                      "intervals": ivs[0] if ivs else [], **({"kl": ivs[1]} if len(ivs) > 1 and ivs[1] else {})}

    unbound = [e for e in group if e.table is None]
    for name, tab in tables.items() if unbound else ():
        comp = _compressed_rows(tab)
        if not comp:
            add(("none", name), f"{name}: ranking claims", name,
                lambda: ("not testable at this scale", "no measured rows", "—"))
            continue
        for pm in sorted({r["paper_model"] for r in comp}):
            block = [r for r in comp if r["paper_model"] == pm]
            for e in unbound:
                a, b = (side_rows(side, block) for side in e.compares)
                if a and b:
                    key, decide = _table_comparison(e, tab, a[0], b)
                    add(key, e.claim, f"{name} [{pm}]", decide)
    for e in (e for e in group if e.table is not None):
        tab = tables.get(e.table)
        block = [r for r in _ppl_rows(tab) if r["paper_model"] == e.paper_model] if tab else []
        a, b = (side_rows(side, block) for side in e.compares)
        source = f"{e.source}, {e.table} [{e.paper_model}]"
        if a and b:
            key, decide = _table_comparison(e, tab, a[0], b)
            add(key, e.claim, source, decide)
            continue
        missing = "; ".join(_rows_text(side) for side, rows in zip(e.compares, (a, b)) if not rows)
        add((e,), e.claim, source, lambda missing=missing: (
            "not testable at this scale", f"no measured row of {missing} in this run", "—"))
    return list(found.values())


EXTRA_SUFFIX = EXTRA_LABEL  # the method label of an ``extra_methods`` row (caldera.experiments.report.tables)


def extra_method_claims(tables: dict[str, dict[str, Any]], rule: str = "lower") -> list[dict[str, Any]]:
    """Each ``extra_methods`` row with measured bits against CALDERA and against QuIP# at the nearest average bits
    (the paper's formula; rows of the same stand-in), decided on Wiki2 perplexity by the paired interval of
    :func:`_decide_ppl_pair` and direction rule ``rule`` (the extra method first; "lower": "holds" = it has the
    lower perplexity). One claim per
    distinct pair of variants, each table that holds it named once in its source; the compared row is named by
    its variant (one variant can fill several paper rows of a table, e.g. the 7B, 13B and 70B rows of one
    stand-in)."""
    found: dict[tuple, dict[str, Any]] = {}
    tables_of: dict[tuple, list[str]] = {}
    for name, tab in tables.items():
        rows = [r for r in _ppl_rows(tab) if r["ours"].get("avg_bits") is not None]
        by_variant = {r["variant"]: r for r in rows}
        for x in (r for r in rows if r["method"].endswith(EXTRA_SUFFIX)):
            label, xb = x["method"].removesuffix(EXTRA_SUFFIX), x["ours"]["avg_bits"]
            if x.get("q_dense"):  # a float Q: a 2-bit row is no comparison at "the nearest bits"
                key = (x["variant"], None)
                if key not in found:
                    tables_of[key] = []
                    sb = x["ours"].get("storage_bits")
                    found[key] = {"claim": f"{label.removesuffix(Q_DENSE_LABEL)} against CALDERA and QuIP# at the "
                                  "nearest bits", "source": "", "verdict": NOT_COMPARED, "sdd": "—",
                                  "numbers": f"its Q is stored as floats, not codes ({xb:.2f} bits per weight by "
                                  "the App. E.5 formula" + (f", {sb:.2f} as stored" if sb is not None else "")
                                  + "): no compressed row of this run is at its bits; return Q_codes with a "
                                  "quantizer (docs/methods.md) to compare it", "intervals": []}
                if name not in tables_of[key]:
                    tables_of[key].append(name)
                    found[key]["source"] = f"{', '.join(tables_of[key])} (extra_methods)"
                continue
            for family in ("CALDERA", "QuIP#"):
                cands = [r for r in rows if r["method"].startswith(family) and r["stand_in"] == x["stand_in"]]
                beside = by_variant.get(x.get("beside")) if family == "CALDERA" else None
                if not cands and beside is None:
                    continue
                o = beside or min(cands, key=lambda r: (abs(r["ours"]["avg_bits"] - xb), r["ours"]["avg_bits"],
                                                        r["variant"]))
                key = (x["variant"], o["variant"])
                if key in found:
                    if name not in tables_of[key]:
                        tables_of[key].append(name)
                        found[key]["source"] = f"{', '.join(tables_of[key])} (extra_methods)"
                    continue
                verdict, numbers, sdd, *ivs = _decide_ppl_pair(tab, x["variant"], o["variant"], rule)
                what = (f"beats uniform-rank CALDERA at equal bits in Wiki2 perplexity ({xb:.2f} vs "
                        f"{o['ours']['avg_bits']:.2f} bits by the App. E.5 formula: the row beside it, "
                        f"{o['variant']}, CALDERA k={o['rank']} B_LR={o['b_lr']})" if beside is not None else
                        f"beats {family} at the nearest bits in Wiki2 perplexity ({xb:.2f} vs "
                        f"{o['ours']['avg_bits']:.2f} bits: {o['variant']}, {family} k={o['rank']})")
                tables_of[key] = [name]
                found[key] = {"claim": f"{label} {what}", "source": f"{name} (extra_methods)", "verdict": verdict,
                              "numbers": numbers, "sdd": sdd, "intervals": ivs[0] if ivs else [],
                              **({"kl": ivs[1]} if len(ivs) > 1 and ivs[1] else {})}
    return list(found.values())


def kl_reading(tab: dict[str, Any], pairs: list[tuple[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    """The KL view of perplexity comparisons (:func:`caldera.experiments.report.tables.kl_difference`): a text to append
    to a claim's numbers and the intervals (``claims.json`` key ``kl``); empty without paired metrics. Shown, not
    decided on: the verdict stays on the perplexity the claim is about."""
    ivs = [iv for iv in (kl_difference(tab, a, b) for a, b in pairs) if iv is not None]
    if not ivs:
        return "", []

    def one(iv: dict[str, Any]) -> str:
        seeded = iv["seed_half"] is not None
        lo, hi = (iv["lo"], iv["hi"]) if seeded else (iv["window_lo"], iv["window_hi"])
        return (f"{iv['pair'][0]} {iv['a_kl']:.3f} vs {iv['pair'][1]} {iv['b_kl']:.3f}: {iv['estimate']:+.3f} "
                f"[{lo:+.3f}, {hi:+.3f}]{'' if seeded else ' (windows only)'}")

    return ("; KL from the dense model, nats/token (second view, not deciding): " + "; ".join(map(one, ivs)),
            [{**iv, "kind": "kl difference"} for iv in ivs])


def _paper_ratio(tab: dict[str, Any], a: str, b: str) -> float | None:
    """The paper's Wiki2 perplexity ratio of the rows that variants ``a`` and ``b`` fill (the first paper model
    that has both), or None."""
    rows = [r for r in tab.get("rows", []) if r.get("variant") in (a, b)]
    for pm in dict.fromkeys(r["paper_model"] for r in rows):
        ra = next((r for r in rows if r["paper_model"] == pm and r["variant"] == a), None)
        rb = next((r for r in rows if r["paper_model"] == pm and r["variant"] == b), None)
        pa, pb = (None if r is None else r["paper"].get("wiki2_ppl") for r in (ra, rb))
        if pa and pb:
            return pa / pb
    return None


def _with_reach(verdict: str, numbers: str, ivs: list[dict[str, Any]], paper: float | None) -> str:
    """``numbers``, and for an inconclusive verdict the effect this run could have resolved beside the paper's."""
    return numbers if verdict != "inconclusive" else f"{numbers}; {reach_text(ivs, paper)}"


def _identical_text(a: str, b: str) -> str:
    return (f"{a} and {b} are the same model: every window, document and seed scored identically (e.g. a "
            "per-matrix allocation that chose the uniform rank everywhere); no interval is taken")


def _decide_lowest(tab, top: dict, others: list[str], rule: str = "lower") -> tuple:
    same = [o for o in others if identical_variants(tab, top["variant"], o)]
    others = [o for o in others if o not in same]
    note = f"; {_identical_text(top['variant'], ', '.join(same))}, left out" if same else ""
    ivs = [ppl_ratio(tab, top["variant"], o) for o in others]
    if not others:
        return (IDENTICAL, _identical_text(top["variant"], ", ".join(same)), "—") if same else (
            "inconclusive", "no other compressed row", "—")
    if any(iv is None for iv in ivs):
        return "inconclusive", "no per-window results (rerun the evaluation)", "—"
    detail = "; ".join(f"vs {o}: {ratio_text(iv)}" for o, iv in zip(others, ivs))
    kl_text, kl = kl_reading(tab, [(top["variant"], o) for o in others])
    verdict = seeds_verdict(ivs, interval_verdict(rule))
    numbers = f"{top['variant']} (ppl {top['ours']['wiki2_ppl']:.2f}) / each other compressed row: {detail}{note}"
    paper = min((p for p in (_paper_ratio(tab, top["variant"], o) for o in others) if p), default=None,
                key=lambda p: abs(math.log(p)))
    return (verdict, _with_reach(verdict, numbers, ivs, paper) + kl_text, sdd_ratio_text(ivs),
            [{**iv, "kind": "ppl ratio", "paper_ratio": _paper_ratio(tab, top["variant"], o)}
             for o, iv in zip(others, ivs)], kl)


def _decide_ppl_pair(tab, a: str, b: str, rule: str = "lower") -> tuple:
    if identical_variants(tab, a, b):
        return IDENTICAL, _identical_text(a, b), "— (identical)"
    iv = ppl_ratio(tab, a, b)
    if iv is None:
        return "inconclusive", "no per-window results (rerun the evaluation)", "—"
    kl_text, kl = kl_reading(tab, [(a, b)])
    verdict = seeds_verdict([iv], interval_verdict(rule))
    paper = _paper_ratio(tab, a, b)
    numbers = _with_reach(verdict, f"ppl {a} / {b}: {ratio_text(iv)}", [iv], paper)
    return verdict, numbers + kl_text, sdd_ratio_text([iv]), [{**iv, "kind": "ppl ratio", "paper_ratio": paper}], kl


def paper_accuracy_effect(row_a: dict[str, Any] | None, row_b: dict[str, Any] | None,
                          tasks: Sequence[str] | None = None) -> float | None:
    """The paper's accuracy difference of two table rows, the ``tasks`` pooled (None: all): the mean over the
    zero-shot columns of those tasks both rows print of ``paper[a] − paper[b]``, as a fraction (the tables print
    points); None without them."""
    from caldera.experiments.report.tables import TASK_COLUMNS

    if not row_a or not row_b:
        return None
    diffs = [row_a["paper"][c] - row_b["paper"][c] for c, (task, _) in TASK_COLUMNS.items()
             if (tasks is None or task in tasks)
             and row_a["paper"].get(c) is not None and row_b["paper"].get(c) is not None]
    return sum(diffs) / len(diffs) / 100.0 if diffs else None


def documents_needed(n: int, half: float, effect: float | None) -> int | None:
    """Documents at which a paired 95 % interval of half-width ``half`` at ``n`` documents (shrinking as 1/√n)
    resolves a true difference ``effect`` with 80 % power: ``ceil(n (half (z_0.975 + z_0.8) / z_0.975 /
    |effect|)²)``; None without a non-zero effect. A lower bound: the realization spread is not in ``half``."""
    if effect is None or effect == 0.0 or not math.isfinite(half):
        return None
    return max(n, math.ceil(n * (half * (stats.Z95 + Z80) / stats.Z95 / abs(effect)) ** 2))


def excluded_text(lo: float, hi: float, paper: float | None, unit: str = "points", scale: float = 100.0) -> str:
    """The equivalence-style reading of an undecided difference interval ``[lo, hi]``: the largest difference
    the run excludes in either direction (``max(|lo|, |hi|)``), and whether the paper's own difference lies
    beyond it (then the run rules the paper's effect size out, although the direction stays open)."""
    bound = max(abs(lo), abs(hi))
    text = f"this run excludes differences beyond ±{scale * bound:.1f} {unit}"
    if paper is None:
        return text
    where = ("the paper's {:+.1f} lies beyond it: its size is ruled out here" if abs(paper) > bound else
             "the paper's {:+.1f} lies within it")
    return f"{text} ({where.format(scale * paper)})"


def _decide_zeroshot_pair(tab, a: str, b: str, rows: tuple[dict | None, dict | None] = (None, None),
                          rule: str = "higher") -> tuple:
    """"a beats b zero-shot", decided on the paired correct-choice margin (:func:`zeroshot_pair`) by direction rule
    ``rule`` ("higher": holds when the interval of a − b lies above 0); the accuracy
    difference is shown beside the paper's (``rows``: the two table rows, for their paper numbers) with the
    documents this construction would need to resolve the paper's effect at 80 % power
    (:func:`documents_needed`) and, when undecided, the largest accuracy difference the run excludes
    (:func:`excluded_text`)."""
    z = zeroshot_pair(tab, a, b)
    if z is None:
        tasks = claim_tasks(tab, a, b)
        on = "" if tasks is None else f" on the tasks the claims pool ({', '.join(tasks)})"
        return "inconclusive", f"no per-document results{on} (rerun the evaluation)", "—"
    m, acc = z["margin"], z["acc"]
    verdict = seeds_verdict([m], interval_verdict(rule, 0.0))
    seeds = "/".join(map(str, m["seeds"]))
    effect = paper_accuracy_effect(*rows, tasks=z["tasks"])
    docs = (f"{m['n']} documents" if z["tasks"] is None else
            f"{m['n']} documents of {', '.join(z['tasks'])} (the tasks the dense stand-in scores above chance)")
    need = documents_needed(m["n"], (acc["window_hi"] - acc["window_lo"]) / 2.0, effect)
    paper = ("" if effect is None else f"; the paper's accuracy difference {100 * effect:+.1f} points needs at least "
             f"{need} documents here at 80 % power (documents only"
             f"{'' if need is None or need > m['n'] else ': within reach'})")
    if m["seed_half"] is None:
        why = ("documents alone straddle 0, so any realization spread leaves it so" if verdict == "inconclusive"
               else "spread unknown")
        numbers = (f"{a} − {b} on {docs} (seeds {seeds}: {why}): correct-choice log-likelihood "
                   f"margin {m['estimate']:+.3f}, documents only [{m['window_lo']:+.3f}, {m['window_hi']:+.3f}] "
                   f"nats; accuracy {100 * acc['estimate']:+.1f}, documents only [{100 * acc['window_lo']:+.1f}, "
                   f"{100 * acc['window_hi']:+.1f}] points{paper}")
        return (verdict, numbers, f"at least ±{m['window_half']:.3f} nats margin, ±{100 * acc['window_half']:.1f} "
                f"accuracy points ({m['n']} docs; one realization)", [{**m, "pair": [a, b], "kind": "margin",
                                                                      "documents_needed": need}])
    paired = z.get("paired_seeds") or []
    how = f"paired on seeds {'/'.join(map(str, paired))}" if paired else f"seeds {seeds}"
    numbers = (f"{a} − {b} on {docs}, {how}: correct-choice log-likelihood margin "
               f"{m['estimate']:+.3f} [{m['lo']:+.3f}, {m['hi']:+.3f}] nats (decides); accuracy "
               f"{100 * acc['estimate']:+.1f} [{100 * acc['lo']:+.1f}, {100 * acc['hi']:+.1f}] points{paper}")
    if verdict == "inconclusive":
        numbers += "; " + excluded_text(acc["lo"], acc["hi"], effect)
    return (verdict, numbers, f"±{m['sdd']:.3f} nats margin, ±{100 * acc['sdd']:.1f} accuracy points ({m['n']} docs)",
            [{**m, "pair": [a, b], "kind": "margin", "documents_needed": need},
             {**acc, "pair": [a, b], "kind": "accuracy difference", "paper_difference": effect}])
