"""How often does an interval construction cover a rerun? Estimated by random splits of two runs' realizations.

Two runs of the same design on the same evaluation windows (``paper_tables/mini-seeds`` and its fresh-seed rerun,
``seed_offset: 100``) hold 2·S independent realizations of every variant. Split them at random into a *committed*
half and a *rerun* half of S each — the same seed slots for every variant, so realizations that share RHT signs
and sketches stay paired — and ask whether the rerun half's estimate lands inside the committed half's interval.
Over many splits this estimates the coverage of the construction itself (seeds paired or not, confidence or
prediction interval), instead of the one split that the two runs happen to be. The splits overlap, so they are
not independent trials: the estimate has no simple binomial error, and it is only as good as the 2·S
realizations behind it::

    python -m caldera.experiments.report.split_coverage RUN_A/table1_llama2_zeroshot.json \
        [RUN_A/table7_mistral.json …] --b RUN_B/table1_llama2_zeroshot.json [RUN_B/table7_mistral.json …] \
        --claims RUN_A/claims.json [--splits 200] [--out split_coverage.md]

Table JSONs are those rule ``make_table`` (or ``caldera.experiments.report.rerun --write-tables``) writes; the pairs are
the perplexity comparisons that the claims decide on.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from caldera import stats


def _realizations(table: dict[str, Any], variant: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(nll (S, W), tokens (W,))`` of ``variant``'s Wiki2 windows in seed order, or None."""
    from caldera.experiments.report.tables import realizations

    r = realizations(table, variant, "wiki")
    if r is None or not r["random"]:
        return None
    return np.asarray(r["nll"], dtype=np.float64), np.asarray(r["tokens"], dtype=np.float64)


def split_coverage(tables_a: list[dict[str, Any]], tables_b: list[dict[str, Any]], pairs: list[tuple[str, str]],
                   splits: int = 200, seed: int = 0) -> dict[str, Any]:
    """Coverage of the committed half's intervals (paired across seeds and unpaired; confidence and prediction)
    for the rerun half's estimate, over ``splits`` random splits of the pooled realizations of runs A and B.

    ``tables_*``: table JSONs of each run (a variant is looked up in the first table that has it); ``pairs``:
    (a, b) variant ids whose ``ppl_a / ppl_b`` is compared. Both runs must have S realizations of every variant of
    a pair on the same windows. Returns ``{"splits", "seeds_per_half", "per_pair": [...], "overall": {...}}``;
    shares are over pairs × splits."""
    def find(tables: list[dict[str, Any]], v: str):
        for t in tables:
            r = _realizations(t, v)
            if r is not None:
                return r
        return None

    rng = np.random.default_rng(seed)
    per_pair, totals = [], {}
    for a, b in pairs:
        ra, rb, qa, qb = find(tables_a, a), find(tables_a, b), find(tables_b, a), find(tables_b, b)
        if None in (ra, rb, qa, qb):
            continue
        tok = ra[1]
        if not all(np.array_equal(tok, x[1]) for x in (rb, qa, qb)):
            raise ValueError(f"{a} / {b}: the runs were scored on different windows")
        A = np.vstack([ra[0], qa[0]])  # (2S, W): run A's seeds, then run B's
        B = np.vstack([rb[0], qb[0]])
        if A.shape[0] != B.shape[0] or A.shape[0] % 2 or ra[0].shape[0] != rb[0].shape[0]:
            raise ValueError(f"{a} / {b}: each run needs the same number of realizations of both variants")
        s = A.shape[0] // 2
        counts = {}
        for _ in range(splits):
            perm = rng.permutation(2 * s)
            c, r = perm[:s], perm[s:]
            la, lb = A[r].sum(axis=1) / tok.sum(), B[r].sum(axis=1) / tok.sum()
            est = math.exp(float(la.mean() - lb.mean()))
            for mode, paired in (("paired", True), ("unpaired", False)):
                iv = stats.seeded_ppl_ratio(A[c], B[c], tok, paired_seeds=paired)
                for kind, (lo, hi) in (("ci", (iv["lo"], iv["hi"])), ("prediction", (iv["rerun_lo"], iv["rerun_hi"]))):
                    key = f"{mode}_{kind}"
                    counts[key] = counts.get(key, 0) + int(lo <= est <= hi)
        per_pair.append({"pair": [a, b], "seeds_per_half": s, **{k: v / splits for k, v in counts.items()}})
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
    n = len(per_pair) * splits
    return {"splits": splits, "per_pair": per_pair,
            "overall": {k: v / n for k, v in totals.items()} if n else {}}


def pooled_split_coverage(tables: list[dict[str, Any]], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Coverage of the one-realization intervals that take a pooled family spread
    (:mod:`caldera.experiments.report.realization_pool`), on one run whose variants all have S realizations.

    For each pair (a, b) and each seed slot i, a and b are taken as run once, with realization i: each side's
    spread is the pooled variance of the *other* variants of its family and stand-in (all their seeds; a and b
    left out, so nothing held out enters the pool). Held out are the other S − 1 slots j: the prediction interval
    (``rerun_lo``/``rerun_hi``, where a one-realization rerun should land) is checked against each slot j's
    single-realization estimate, the confidence interval against the mean over the S − 1 held-out slots.
    Every (i, j) combination is enumerated (no random splits); slots are shared by a and b. Returns
    ``{"per_pair": [...], "overall": {"ci", "prediction"}}``; a pair whose family has no other replicated
    variant is listed with ``"pool": None``."""
    from caldera.experiments.report.realization_pool import family_of, per_seed_log_ppl, stand_in_of

    info: dict[str, tuple[dict[str, Any], str | None, str | None]] = {}
    for t in tables:
        for v, r in t.get("realizations", {}).items():
            if v not in info and r.get("random"):
                info[v] = (t, family_of(t, v), stand_in_of(t, v))
    per_pair, hits, n_all = [], {"ci": 0, "prediction": 0}, {"ci": 0, "prediction": 0}
    for a, b in pairs:
        if a not in info or b not in info:
            continue
        ra, rb = (_realizations(info[v][0], v) for v in (a, b))
        if ra is None or rb is None or ra[0].shape[0] != rb[0].shape[0] or ra[0].shape[0] < 3:
            continue
        (A, tok), B = ra, rb[0]
        pools = []
        for v in (a, b):
            _, fam, stand = info[v]
            others = [per_seed_log_ppl(info[o][0], o) for o, (_, f, st) in sorted(info.items())
                      if o not in (a, b) and f == fam and st == stand]
            pools.append(stats.pooled_variance([x for x in others if x is not None]))
        entry: dict[str, Any] = {"pair": [a, b], "seeds": int(A.shape[0]),
                                 "pool": [None if p is None else {"df": p["df"], "sd": math.sqrt(p["var"])}
                                          for p in pools]}
        if None in pools:
            per_pair.append(entry)
            continue
        la, lb = A.sum(axis=1) / tok.sum(), B.sum(axis=1) / tok.sum()
        counts = {"ci": 0, "prediction": 0}
        s = A.shape[0]
        for i in range(s):
            iv = stats.seeded_ppl_ratio(A[i:i + 1], B[i:i + 1], tok, a_pool=pools[0], b_pool=pools[1])
            rest = [j for j in range(s) if j != i]
            held = math.exp(float(la[rest].mean() - lb[rest].mean()))
            counts["ci"] += int(iv["lo"] <= held <= iv["hi"])
            counts["prediction"] += sum(int(iv["rerun_lo"] <= math.exp(float(la[j] - lb[j])) <= iv["rerun_hi"])
                                        for j in rest)
        trials = {"ci": s, "prediction": s * (s - 1)}
        entry.update({k: counts[k] / trials[k] for k in counts})
        for k in counts:
            hits[k] += counts[k]
            n_all[k] += trials[k]
        per_pair.append(entry)
    return {"per_pair": per_pair, "overall": {k: hits[k] / n_all[k] for k in hits if n_all[k]}}


def render_pooled(res: dict[str, Any]) -> str:
    pct = (lambda x: "—" if x is None else f"{100 * x:.0f} %")

    def pool(p: dict[str, Any] | None) -> str:
        return "none" if p is None else f"±{100 * math.expm1(p['sd']):.1f} % (df {p['df']})"

    lines = ["# Coverage of the pooled one-realization intervals, by leaving realizations out", "",
             "Each pair's two variants taken as run once (each seed slot in turn), each side's realization spread "
             "the pooled variance of the other variants of its family and stand-in "
             "(`caldera.experiments.report.realization_pool`; the pair left out). *Prediction*: share of held-out "
             "single realizations (every other slot) inside the one-realization prediction interval (nominal "
             "95 %); *CI*: share of slots whose interval holds the mean of the held-out slots. Every slot "
             "combination is enumerated; they share realizations, so they are not independent trials "
             "(`caldera.experiments.report.split_coverage.pooled_split_coverage`).", "",
             "| pair | seeds | pooled spread of a / of b | CI | prediction |", "|---|---|---|---|---|"]
    for p in res["per_pair"]:
        lines.append(f"| {' / '.join(p['pair'])} | {p['seeds']} | {pool(p['pool'][0])} / {pool(p['pool'][1])} | "
                     f"{pct(p.get('ci'))} | {pct(p.get('prediction'))} |")
    o = res["overall"]
    lines.append(f"| **all pairs with a pool** | | | **{pct(o.get('ci'))}** | **{pct(o.get('prediction'))}** |")
    return "\n".join(lines) + "\n"


def claim_pairs(claims: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The distinct perplexity pairs the claims compare (each once, in order of appearance)."""
    out: list[tuple[str, str]] = []
    for c in claims:
        for iv in c.get("intervals", []):
            p = tuple(iv.get("pair") or ())
            if len(p) == 2 and iv.get("kind") == "ppl ratio" and p not in out:
                out.append(p)
    return out


def render(res: dict[str, Any]) -> str:
    keys = ("paired_ci", "paired_prediction", "unpaired_ci", "unpaired_prediction")
    pct = (lambda x: "—" if x is None else f"{100 * x:.0f} %")
    lines = ["# Coverage of the interval constructions, by random splits of two runs' realizations", "",
             f"{res['splits']} random splits of the pooled realizations into a committed and a rerun half (the same "
             "seed slots for every variant). Share of splits whose rerun-half estimate lies inside the committed "
             "half's 95 % interval; nominal: ≥ 95 % for the prediction interval. Splits overlap: not independent "
             "trials (`caldera.experiments.report.split_coverage`).", "",
             "| pair | seeds per half | paired CI | paired prediction | unpaired CI | unpaired prediction |",
             "|---|---|---|---|---|---|"]
    for p in res["per_pair"]:
        lines.append(f"| {' / '.join(p['pair'])} | {p['seeds_per_half']} | "
                     + " | ".join(pct(p.get(k)) for k in keys) + " |")
    o = res["overall"]
    lines.append("| **all pairs** | | " + " | ".join(f"**{pct(o.get(k))}**" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table_a", nargs="+", help="run A's table JSONs")
    ap.add_argument("--b", nargs="+", help="run B's table JSONs (same tables as run A's); without it (and with "
                    "--pooled), run A alone")
    ap.add_argument("--pooled", action="store_true",
                    help="check the one-realization intervals with pooled family spreads (pooled_split_coverage)")
    ap.add_argument("--claims", required=True, help="claims.json whose perplexity pairs are checked")
    ap.add_argument("--splits", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write Markdown here (and .json beside it); default: print")
    a = ap.parse_args(argv)
    load = (lambda ps: [json.loads(Path(p).read_text()) for p in ps])
    pairs = claim_pairs(json.loads(Path(a.claims).read_text()))
    if a.pooled:
        res = pooled_split_coverage(load(a.table_a) + load(a.b or []), pairs)
        text = render_pooled(res)
    elif not a.b:
        ap.error("--b is required (or --pooled)")
    else:
        res = split_coverage(load(a.table_a), load(a.b), pairs, a.splits, a.seed)
        text = render(res)
    if a.out:
        from caldera.atomic import write_atomic

        write_atomic(a.out, text)
        write_atomic(str(Path(a.out).with_suffix(".json")), json.dumps(res, indent=1))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
