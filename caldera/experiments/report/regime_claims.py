"""The claims again in each stand-in's own regime, within one run: the regime column of ``claims.md``.

A stand-in's regime is the Q bits at which its QuIP# loses, on held-out calibration text, what the paper's QuIP#
loses at 2 bits (``regime.models.<m>.q_bits``). A run with ``regime.run`` compresses some of its rows again at
those bits (:mod:`caldera.experiments.planning.regime_rows`) and shows them in regime tables
(``<table>_regime``). Here every claim on the zero-shot tables' rows, and the second-family claim, is decided again
on the regime's tables, by the same entries and rules as the 2-bit claims
(:func:`caldera.experiments.report.claims.check`):

* a regime table stands in for its paper table; a table whose stand-ins' regime is 2 bits (``same``) is its own
  regime table, so its claims come out as the 2-bit ones;
* the realization spread is the regime's own: the pooled spreads and the seed block are computed on the regime's
  tables alone, never mixed with the 2-bit realizations of the same stand-in;
* a regime claim is set beside the 2-bit claim that makes the same comparison: the same claim and source, and the
  same variant pairs once a regime variant's ``-q<bits>`` suffix is taken off. A 2-bit claim without such a match
  (a row not compressed again, a ranking over fewer rows) gets :data:`NOT_RUN`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from caldera.experiments.planning.regime_rows import base_table
from caldera.experiments.planning.variants import RHTFT_TABLES
from caldera.experiments.report.claim_registry import FAMILIES, REGISTRY, TABLE, ClaimEntry

#: the regime column of a 2-bit claim that the regime's rows do not decide
NOT_RUN = "not run in the regime"
#: the regime column of a claim that is not on the tables' rows (figures on the App. G.1 presets, whose Q is 2 bits
#: in every run; throughput; fine-tuning; ``extra_methods`` rows): not decided again
NOT_REDECIDED = "—"
#: the verdicts counted per regime
COUNTED = ("holds", "fails", "inconclusive")

_SUFFIX = re.compile(r"-q(\d)$")


def strip_bits(vid: str) -> tuple[str, int]:
    """``(2-bit variant id, Q bits)`` of a variant id: ``smollm2-quipsharp-q3`` → ``("smollm2-quipsharp", 3)``;
    an id without the suffix is a 2-bit one."""
    m = _SUFFIX.search(str(vid))
    return (str(vid)[:m.start()], int(m.group(1))) if m else (str(vid), 2)


def _pairs(claim: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    return tuple(sorted(tuple(strip_bits(v)[0] for v in iv.get("pair") or ())
                        for iv in claim.get("intervals") or () if iv.get("pair")))


def match_key(claim: Mapping[str, Any]) -> tuple:
    """What makes a regime claim the same comparison as a 2-bit claim: claim, source and the variant pairs of its
    intervals with the regime suffix taken off."""
    return str(claim["claim"]), str(claim["source"]), _pairs(claim)


def q_bits_of(claim: Mapping[str, Any]) -> list[int]:
    """The Q bits of the variants a claim's intervals compare (2 for a 2-bit id), sorted; empty without pairs."""
    return sorted({strip_bits(v)[1] for iv in claim.get("intervals") or () for v in iv.get("pair") or ()})


def regime_entries(declared: Sequence[ClaimEntry] = ()) -> tuple[ClaimEntry, ...]:
    """The entries decided again in the regime: the registry's table and second-family entries and the run's own
    declared (table) entries, in registry order."""
    return tuple(e for e in (*REGISTRY, *declared) if e.kind in (TABLE, FAMILIES))


def decide_regime(regime_tables: Mapping[str, dict[str, Any]], same: Mapping[str, dict[str, Any]],
                  declared: Sequence[ClaimEntry] = ()) -> list[dict[str, Any]]:
    """The regime's claims: :func:`regime_entries` decided on the regime tables (keyed by the regime table's name,
    each standing in for :func:`~caldera.experiments.planning.regime_rows.base_table`) plus the tables ``same``
    whose stand-ins' regime is 2 bits, with the seed blocks and pooled spreads of those tables alone."""
    from caldera.experiments.report.realization_pool import attach_pools
    from caldera.experiments.report.table_claims import family_claims, table_claims

    tables = attach_pools({**dict(same), **{base_table(k): t for k, t in regime_tables.items()}})
    out: list[dict[str, Any]] = []
    for kind, group in itertools.groupby(regime_entries(declared), key=lambda e: e.kind):
        group = list(group)
        out += (table_claims({k: t for k, t in tables.items() if k not in RHTFT_TABLES}, group) if kind == TABLE
                else family_claims(group, tables))
    return out


def attach_regime(claims: list[dict[str, Any]], regime: Sequence[Mapping[str, Any]],
                  entries: Sequence[ClaimEntry] | None = None) -> list[dict[str, Any]]:
    """``claims`` (the 2-bit run's, in place) each with ``"regime"``: the matching regime claim's ``verdict``,
    ``numbers``, ``sdd``, ``intervals`` and the Q bits it compared (``q_bits``), or ``{"verdict": NOT_RUN}``; a
    claim of no entry of ``entries`` (default :func:`regime_entries`: figures, throughput, fine-tuning,
    ``extra_methods`` rows) gets ``{"verdict": NOT_REDECIDED}``."""
    texts = {e.claim for e in (regime_entries() if entries is None else entries)}
    found: dict[tuple, Mapping[str, Any]] = {}
    for r in regime:
        found.setdefault(match_key(r), r)
    for c in claims:
        if c["claim"] not in texts:
            c["regime"] = {"verdict": NOT_REDECIDED}
            continue
        r = found.get(match_key(c))
        if r is None:
            c["regime"] = {"verdict": NOT_RUN}
            continue
        c["regime"] = {"verdict": r["verdict"], "numbers": r["numbers"], "sdd": r.get("sdd", "—"),
                       "intervals": list(r.get("intervals") or []), "q_bits": q_bits_of(r)}
    return claims


def _decided_in_both(claims: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The claims with a holds / fails / inconclusive verdict at 2 bits and in the regime."""
    return [c for c in claims if c["verdict"] in COUNTED and (c.get("regime") or {}).get("verdict") in COUNTED]


def _differing(both: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Those of ``both`` (:func:`_decided_in_both`) whose two verdicts differ."""
    return [c for c in both if c["verdict"] != c["regime"]["verdict"]]


def regime_counts(claims: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per regime, the verdicts of the claims decided in both (``holds`` / ``fails`` / ``inconclusive`` in the 2-bit
    run and in the regime), and how many of those differ."""
    both = _decided_in_both(claims)
    return {"decided_in_both": len(both),
            "two_bit": {v: sum(c["verdict"] == v for c in both) for v in COUNTED},
            "regime": {v: sum(c["regime"]["verdict"] == v for c in both) for v in COUNTED},
            "differ": len(_differing(both)),
            "regime_all": {v: sum((c.get("regime") or {}).get("verdict") == v for c in claims) for v in COUNTED}}


def regime_cell(c: Mapping[str, Any]) -> str:
    """The regime column of one claims.md line: the regime verdict, the Q bits and, for an interval claim, the
    first interval (``×est [lo, hi]``); "—" for a claim without one."""
    r = c.get("regime")
    if not r:
        return "—"
    if r["verdict"] in (NOT_RUN, NOT_REDECIDED) or not r.get("q_bits"):
        return r["verdict"]
    bits = "/".join(map(str, r["q_bits"]))
    ivs = [iv for iv in r.get("intervals") or () if iv.get("lo") is not None and iv.get("hi") is not None]
    first = f": {_interval_text(ivs[0])}" if ivs else ""
    more = f" (+{len(ivs) - 1} more)" if len(ivs) > 1 else ""
    same = " (same as 2 bits: the stand-in's regime)" if r.get("q_bits") == [2] else ""
    return f"**{r['verdict']}** (Q {bits} bits{first}{more}){same}"


def _interval_text(iv: Mapping[str, Any]) -> str:
    """A perplexity ratio as ``×est [lo, hi]``, an accuracy difference or margin in points as ``+est [lo, hi] pts``."""
    if iv.get("kind") == "ppl ratio":
        return f"×{iv['estimate']:.3f} [{iv['lo']:.3f}, {iv['hi']:.3f}]"
    return f"{100 * iv['estimate']:+.1f} [{100 * iv['lo']:+.1f}, {100 * iv['hi']:+.1f}] pts"


def regime_note_lines(claims: Sequence[Mapping[str, Any]]) -> list[str]:
    """The paragraph above claims.md's table in a run with regime rows: what the regime column is and the
    verdicts counted per regime (:func:`regime_counts`), then a blank line."""
    n = regime_counts(claims)
    two, reg = n["two_bit"], n["regime"]
    differ = _differing(_decided_in_both(claims))
    listed = "; ".join(f"{c['claim'].split(' (')[0]} ({c['source']}): {c['verdict']} → {c['regime']['verdict']}"
                       for c in differ)
    return [f"**In the stand-in's regime** (column 4): each claim on the tables' rows decided again with Q at the "
            f"bits where the stand-in's QuIP# loses what the paper's loses at 2 bits (regime.models, chosen on "
            f"held-out calibration text; the regime tables `*_regime`); a stand-in whose regime is 2 bits is "
            f"decided on its 2-bit rows. Decided in both: {n['decided_in_both']} claims; at 2 bits "
            f"{two['holds']} hold / {two['fails']} fail / {two['inconclusive']} inconclusive, in the regime "
            f"{reg['holds']} / {reg['fails']} / {reg['inconclusive']}; {n['differ']} differ"
            + (f": {listed}." if listed else "."), ""]


#: the source suffix of a claim's regime verdict when it is listed as a claim of its own (:func:`with_regime_claims`)
IN_REGIME = " (in the regime)"


def with_regime_claims(claims: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``claims`` followed by each one's regime verdict as a claim of its own (its source plus :data:`IN_REGIME`,
    its regime intervals, whose pairs carry the regime ids): what a comparison of two runs matches claim by claim.
    Claims without a regime verdict add nothing."""
    out = [dict(c) for c in claims]
    for c in claims:
        r = c.get("regime") or {}
        if r.get("verdict") in (None, NOT_RUN, NOT_REDECIDED):
            continue
        out.append({"claim": c["claim"], "source": f"{c['source']}{IN_REGIME}", "verdict": r["verdict"],
                    "numbers": r.get("numbers", "—"), "sdd": r.get("sdd", "—"), "intervals": r.get("intervals", [])})
    return out
