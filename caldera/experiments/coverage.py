"""Do the verdicts reproduce? Compare the claims of a rerun (other seeds, or another machine) with committed ones.

``python -m caldera.experiments.coverage COMMITTED/claims.json RERUN/claims.json [--out coverage.md]``

* **Coverage**: the share of the rerun's paired comparisons (every interval a claim records, matched by claim,
  source and pair) whose estimate lies inside the committed run's 95 % interval. Intervals that count the
  compression's randomness should cover a fresh-seed rerun's estimate most of the time (target ≥ 90 %); window-
  only intervals of one realization do not (the issue that introduced seeds measured 9 of 17 on another CPU).
* **Verdicts**: each claim's verdict in both runs; a *flip* is holds ↔ fails (never acceptable); a weakening
  (holds / fails → inconclusive) is expected only where the spread explains it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

DECIDED = ("holds", "fails")


def _key(c: dict[str, Any]) -> tuple[str, str]:
    return c["claim"], c["source"]


def compare_claims(committed: list[dict[str, Any]], rerun: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"coverage": {"inside", "total", "share"}, "comparisons": [...], "verdicts": [...], "flips": [...]}``
    (see module doc). Verdicts are matched by claim and source, intervals by claim and pair (each pair once).
    Comparisons whose committed interval is unbounded (a seed part undetermined) are listed but not counted."""
    old = {_key(c): c for c in committed}
    # intervals are matched by claim and pair, whatever rows list them (a partial rerun groups sources anew)
    by_pair = {(c["claim"], tuple(iv.get("pair") or ())): iv for c in committed for iv in c.get("intervals", [])}
    comps, verdicts, seen = [], [], set()
    for c in rerun:
        o = old.get(_key(c))
        if o is not None:
            verdicts.append({"claim": c["claim"], "source": c["source"], "committed": o["verdict"],
                             "rerun": c["verdict"], "flip": {o["verdict"], c["verdict"]} == set(DECIDED)})
        for iv in c.get("intervals", []):
            key = (c["claim"], tuple(iv.get("pair") or ()))
            ref = by_pair.get(key)
            if ref is None or key in seen:
                continue
            seen.add(key)
            lo, hi, est = ref.get("lo"), ref.get("hi"), iv.get("estimate")
            bounded = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi, est))
            wlo, whi = ref.get("window_lo"), ref.get("window_hi")
            wb = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (wlo, whi, est))
            comps.append({"claim": c["claim"], "pair": iv.get("pair"), "kind": iv.get("kind"),
                          "committed": [ref.get("estimate"), lo, hi], "rerun": est,
                          "inside": bool(bounded and lo <= est <= hi) if bounded else None,
                          "inside_windows_only": bool(wlo <= est <= whi) if wb else None})
    counted = [x for x in comps if x["inside"] is not None]
    inside = sum(x["inside"] for x in counted)
    wcount = [x for x in comps if x["inside_windows_only"] is not None]
    winside = sum(x["inside_windows_only"] for x in wcount)
    return {"coverage": {"inside": inside, "total": len(counted),
                         "share": inside / len(counted) if counted else None},
            # the committed run's window-only intervals (the evaluation's noise alone), for every pair
            "coverage_windows_only": {"inside": winside, "total": len(wcount),
                                      "share": winside / len(wcount) if wcount else None},
            "comparisons": comps, "verdicts": verdicts, "flips": [v for v in verdicts if v["flip"]]}


def render(result: dict[str, Any]) -> str:
    cov = result["coverage"]
    share = "—" if cov["share"] is None else f"{100 * cov['share']:.0f} %"
    lines = ["# Rerun vs committed claims", "",
             f"Coverage: {cov['inside']} of {cov['total']} rerun estimates inside the committed 95 % intervals "
             f"({share}); verdict flips (holds ↔ fails): {len(result['flips'])}. The committed window-only "
             f"intervals (evaluation noise alone) would have covered {result['coverage_windows_only']['inside']} of "
             f"{result['coverage_windows_only']['total']}.", "",
             "| claim | pair | committed [95 %] | rerun | inside |", "|---|---|---|---|---|"]
    for x in result["comparisons"]:
        e, lo, hi = x["committed"]
        fmt = (lambda v: "—" if v is None else f"{v:.3f}")
        lines.append(f"| {x['claim']} | {' / '.join(x['pair'] or [])} | {fmt(e)} [{fmt(lo)}, {fmt(hi)}] | "
                     f"{fmt(x['rerun'])} | {'—' if x['inside'] is None else 'yes' if x['inside'] else 'no'} |")
    lines += ["", "| claim | source | committed | rerun |", "|---|---|---|---|"]
    lines += [f"| {v['claim']} | {v['source']} | {v['committed']} | {v['rerun']}{' (FLIP)' if v['flip'] else ''} |"
              for v in result["verdicts"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("committed", help="claims.json of the committed run")
    ap.add_argument("rerun", help="claims.json of the rerun (other seeds: --config seed_offset=N, or another CPU)")
    ap.add_argument("--out", help="write the Markdown report here (default: print it)")
    a = ap.parse_args(argv)
    res = compare_claims(json.loads(Path(a.committed).read_text()), json.loads(Path(a.rerun).read_text()))
    text = render(res)
    if a.out:
        Path(a.out).write_text(text)
        Path(a.out).with_suffix(".json").write_text(json.dumps(res, indent=1))
    else:
        print(text)
    return 1 if res["flips"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
