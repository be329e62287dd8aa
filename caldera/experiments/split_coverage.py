"""How often does an interval construction cover a rerun? Estimated by random splits of two runs' realizations.

Two runs of the same design on the same evaluation windows (``paper_tables/mini-seeds`` and its fresh-seed rerun,
``seed_offset: 100``) hold 2·S independent realizations of every variant. Split them at random into a *committed*
half and a *rerun* half of S each — the same seed slots for every variant, so realizations that share RHT signs
and sketches stay paired — and ask whether the rerun half's estimate lands inside the committed half's interval.
Over many splits this estimates the coverage of the construction itself (seeds paired or not, confidence or
prediction interval), instead of the one split that the two runs happen to be. The splits overlap, so they are
not independent trials: the estimate has no simple binomial error, and it is only as good as the 2·S
realizations behind it::

    python -m caldera.experiments.split_coverage RUN_A/table1_llama2_zeroshot.json [RUN_A/table7_mistral.json …] \
        --b RUN_B/table1_llama2_zeroshot.json [RUN_B/table7_mistral.json …] --claims RUN_A/claims.json \
        [--splits 200] [--out split_coverage.md]

Table JSONs are those rule ``make_table`` (or ``caldera.experiments.rerun --write-tables``) writes; the pairs are
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
    from caldera.experiments.tables import realizations

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
             "trials (`caldera.experiments.split_coverage`).", "",
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
    ap.add_argument("--b", nargs="+", required=True, help="run B's table JSONs (same tables as run A's)")
    ap.add_argument("--claims", required=True, help="claims.json whose perplexity pairs are checked")
    ap.add_argument("--splits", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write Markdown here (and .json beside it); default: print")
    a = ap.parse_args(argv)
    load = (lambda ps: [json.loads(Path(p).read_text()) for p in ps])
    res = split_coverage(load(a.table_a), load(a.b), claim_pairs(json.loads(Path(a.claims).read_text())),
                         a.splits, a.seed)
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
