"""Do the verdicts reproduce? Compare the claims of a rerun (other seeds, or another machine) with committed ones.

``python -m caldera.experiments.report.coverage COMMITTED/claims.json RERUN/claims.json [--out coverage.md]``

* **Coverage**: the share of the rerun's paired comparisons (every interval a claim records, matched by claim,
  source and pair) whose estimate lies inside the committed run's 95 % interval. Intervals that count the
  compression's randomness should cover a fresh-seed rerun's estimate most of the time (target ≥ 90 %); window-
  only intervals of one realization do not (9 of 17 in a rerun on another CPU).
  Three shares are reported: inside the committed *confidence* interval (the one claims are decided on; by
  construction it covers another run of the same size with probability ≥ 0.91 at 3 seeds, less with more seeds:
  ``caldera.stats``), inside the committed *rerun prediction* interval (``rerun_lo``/``rerun_hi``: where a rerun
  on the same windows with as many fresh seeds lands 95 % of the time), and inside the window-only interval.
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
    (see module doc). Verdicts are matched by claim and source, intervals by claim, pair and kind (each once).
    Comparisons whose committed interval is unbounded (a seed part undetermined) are listed but not counted."""
    old = {_key(c): c for c in committed}
    # intervals are matched by claim and pair, whatever rows list them (a partial rerun groups sources anew)
    by_pair = {(c["claim"], tuple(iv.get("pair") or ()), iv.get("kind")): iv for c in committed
               for iv in c.get("intervals", [])}
    comps, verdicts, seen = [], [], set()
    for c in rerun:
        o = old.get(_key(c))
        if o is not None:
            verdicts.append({"claim": c["claim"], "source": c["source"], "committed": o["verdict"],
                             "rerun": c["verdict"], "flip": {o["verdict"], c["verdict"]} == set(DECIDED)})
        for iv in c.get("intervals", []):
            key = (c["claim"], tuple(iv.get("pair") or ()), iv.get("kind"))
            ref = by_pair.get(key)
            if ref is None or key in seen:
                continue
            seen.add(key)
            lo, hi, est = ref.get("lo"), ref.get("hi"), iv.get("estimate")
            bounded = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (lo, hi, est))
            wlo, whi = ref.get("window_lo"), ref.get("window_hi")
            wb = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (wlo, whi, est))
            rlo, rhi = ref.get("rerun_lo"), ref.get("rerun_hi")
            rb = bounded and all(isinstance(x, (int, float)) and math.isfinite(x) for x in (rlo, rhi))
            comps.append({"claim": c["claim"], "pair": iv.get("pair"), "kind": iv.get("kind"),
                          "committed": [ref.get("estimate"), lo, hi], "rerun": est,
                          "committed_rerun_interval": [rlo, rhi] if rb else None,
                          "seeds": [ref.get("seeds"), iv.get("seeds")],
                          "inside": bool(bounded and lo <= est <= hi) if bounded else None,
                          "inside_rerun_interval": bool(rlo <= est <= rhi) if rb else None,
                          "inside_windows_only": bool(wlo <= est <= whi) if wb else None})
    return {"coverage": _share(comps, "inside"),
            # the committed run's prediction intervals for a rerun of the same design (caldera.stats.combine)
            "coverage_rerun_interval": _share(comps, "inside_rerun_interval"),
            # the committed run's window-only intervals (the evaluation's noise alone), for every pair
            "coverage_windows_only": _share(comps, "inside_windows_only"),
            "comparisons": comps, "verdicts": verdicts, "flips": [v for v in verdicts if v["flip"]]}


def _share(comps: list[dict[str, Any]], key: str) -> dict[str, Any]:
    counted = [x[key] for x in comps if x[key] is not None]
    return {"inside": sum(counted), "total": len(counted), "share": sum(counted) / len(counted) if counted else None}


def _pct(cov: dict[str, Any]) -> str:
    return f"{cov['inside']} of {cov['total']}" + ("" if cov["share"] is None else f" ({100 * cov['share']:.0f} %)")


def render(result: dict[str, Any]) -> str:
    rr = result.get("coverage_rerun_interval") or {"inside": 0, "total": 0, "share": None}
    lines = ["# Rerun vs committed claims", "",
             f"Verdict flips (holds ↔ fails): **{len(result['flips'])}**. Rerun estimates (distinct claim × pair "
             f"with a bounded committed interval) inside the committed 95 % confidence intervals: "
             f"**{_pct(result['coverage'])}**; inside the committed 95 % rerun prediction intervals (where a rerun "
             f"with as many fresh seeds on the same windows should land 95 % of the time): **{_pct(rr)}**; inside the "
             f"committed window-only intervals (evaluation noise alone): {_pct(result['coverage_windows_only'])}.",
             "", "| claim | pair | seeds (committed / rerun) | committed [95 % CI] | rerun prediction | rerun | "
             "in CI | in prediction |", "|---|---|---|---|---|---|---|---|"]
    fmt = (lambda v: "—" if v is None else f"{v:.3f}")
    yn = (lambda v: "—" if v is None else "yes" if v else "**no**")
    for x in result["comparisons"]:
        e, lo, hi = x["committed"]
        pr = x.get("committed_rerun_interval")
        seeds = " / ".join("—" if s is None else "·".join(map(str, s)) for s in x.get("seeds") or [None, None])
        lines.append(f"| {x['claim']} | {' / '.join(x['pair'] or [])} | {seeds} | {fmt(e)} [{fmt(lo)}, {fmt(hi)}] | "
                     f"{'—' if pr is None else f'[{fmt(pr[0])}, {fmt(pr[1])}]'} | {fmt(x['rerun'])} | "
                     f"{yn(x['inside'])} | {yn(x.get('inside_rerun_interval'))} |")
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
