"""A run against a committed record, claim by claim and row by row (``caldera compare RUN --against REF``).

Pure functions of two tables folders (each a run's ``tables_dir``: ``claims.json`` and the table JSONs):

* **Claims** (:func:`caldera.experiments.report.coverage.compare_claims`): each claim's verdict in both, a change
  named (a *flip* is holds ↔ fails); each interval the run records, matched by claim, pair and kind, its estimate
  against the reference's interval. The interval judged is the reference's *rerun prediction* interval
  (``rerun_lo`` / ``rerun_hi``: where a rerun of the same design with fresh seeds lands 95 % of the time) where it
  has one, else its 95 % confidence interval; an unbounded reference interval (seed part undetermined) judges
  nothing. An estimate outside is *beyond the interval*: flagged.
* **Tables**: each row the run measured (a variant of a table both folders hold), its perplexities (the
  ``*_ppl`` columns) against the reference row's 95 % interval (``ours_ci``); outside is flagged. Rows or tables
  only one side has are listed, never flagged (a new method is expected to be new).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from caldera.experiments.report.coverage import compare_claims


def _finite(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)


def load_tables_folder(folder: str | Path) -> dict[str, Any]:
    """``{"folder", "claims": list | None, "tables": {name: table JSON}}`` of a run's tables folder (a folder
    with ``claims.json`` and table JSONs; a results folder ``results/NAME`` whose ``tables/`` holds them is taken
    too). Raises ``FileNotFoundError`` / ``ValueError`` naming the folder and what it lacks."""
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (give a run's tables folder, its config's tables_dir)")
    if not (path / "claims.json").is_file() and (path / "tables" / "claims.json").is_file():
        path = path / "tables"
    claims = None
    if (path / "claims.json").is_file():
        try:
            claims = json.loads((path / "claims.json").read_text())
        except ValueError as e:
            raise ValueError(f"{path / 'claims.json'}: not JSON ({e}); rerun rule `claims`") from None
    tables = {}
    for p in sorted(path.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except ValueError as e:
            raise ValueError(f"{p}: not JSON ({e}); rerun rule `make_table` for it") from None
        if isinstance(data, dict) and isinstance(data.get("rows"), list) and "table" in data:
            tables[p.stem] = data
    if claims is None and not tables:
        raise ValueError(f"{folder}: neither claims.json nor a table JSON here; give the tables_dir of a finished "
                         "run (e.g. results/smoke/tables or paper_tables/generated)")
    return {"folder": str(path), "claims": claims, "tables": tables}


def judged_interval(ref: dict[str, Any]) -> tuple[str, float, float] | None:
    """The reference interval a run's estimate is judged against: ``("rerun prediction", lo, hi)`` where the
    reference records one, else ``("95 % CI", lo, hi)``; None where neither is bounded."""
    if _finite(ref.get("rerun_lo"), ref.get("rerun_hi")):
        return "rerun prediction", ref["rerun_lo"], ref["rerun_hi"]
    if _finite(ref.get("lo"), ref.get("hi")):
        return "95 % CI", ref["lo"], ref["hi"]
    return None


def compare_claim_sets(run: list[dict[str, Any]], ref: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"verdicts": [...], "changed": [...], "flips": [...], "intervals": [...], "beyond": [...]}``: the
    verdicts of :func:`~caldera.experiments.report.coverage.compare_claims` (``changed``: a different verdict),
    and each matched interval ``{"claim", "pair", "kind", "estimate", "reference": [estimate, lo, hi], "judged":
    [which, lo, hi] | None, "beyond": bool | None}``."""
    base = compare_claims(ref, run)
    by_key = {(c["claim"], tuple(iv.get("pair") or ()), iv.get("kind")): iv for c in ref
              for iv in c.get("intervals") or []}
    intervals = []
    for comp in base["comparisons"]:
        refiv = by_key[(comp["claim"], tuple(comp["pair"] or ()), comp["kind"])]
        j = judged_interval(refiv)
        est = comp["rerun"]
        beyond = None if j is None or not _finite(est) else not (j[1] <= est <= j[2])
        intervals.append({"claim": comp["claim"], "pair": comp["pair"], "kind": comp["kind"], "estimate": est,
                          "reference": comp["committed"], "judged": list(j) if j else None, "beyond": beyond})
    changed = [v for v in base["verdicts"] if v["committed"] != v["rerun"]]
    return {"verdicts": base["verdicts"], "changed": changed, "flips": base["flips"], "intervals": intervals,
            "beyond": [x for x in intervals if x["beyond"]]}


def _ppl_columns(tab: dict[str, Any]) -> list[str]:
    return [c for c in tab.get("columns", []) if c.endswith("_ppl")]


def compare_table_rows(run: dict[str, dict[str, Any]], ref: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"rows": [...], "beyond": [...], "only_run": [...], "only_ref": [...]}``: each (table, variant, ppl
    column) both measured, ``{"table", "variant", "column", "value", "reference": [value, lo, hi], "beyond"}``
    (``beyond`` None without a reference interval); rows are matched by variant and paper model, and the rows
    one variant fills with the same numbers are compared once."""
    rows, only_run, only_ref = [], [], []
    for name in sorted(set(run) | set(ref)):
        if name not in ref or name not in run:
            (only_run if name in run else only_ref).append({"table": name})
            continue
        mine = {(r["variant"], r.get("paper_model")): r for r in run[name]["rows"] if r.get("variant")}
        theirs = {(r["variant"], r.get("paper_model")): r for r in ref[name]["rows"] if r.get("variant")}
        only_run += [{"table": name, "variant": v} for v in sorted({k[0] for k in mine} - {k[0] for k in theirs})]
        only_ref += [{"table": name, "variant": v} for v in sorted({k[0] for k in theirs} - {k[0] for k in mine})]
        cols = [c for c in _ppl_columns(run[name]) if c in _ppl_columns(ref[name])]
        seen = set()
        for key in sorted(set(mine) & set(theirs), key=str):
            for c in cols:
                val, rv = (mine[key].get("ours") or {}).get(c), (theirs[key].get("ours") or {}).get(c)
                ci = (theirs[key].get("ours_ci") or {}).get(c)
                if val is None or rv is None or (key[0], c, val, rv, tuple(ci or ())) in seen:
                    continue  # the paper rows one variant fills carry the same numbers: compared once
                seen.add((key[0], c, val, rv, tuple(ci or ())))
                bounded = ci is not None and _finite(*ci)
                rows.append({"table": name, "variant": key[0], "column": c, "value": val,
                             "reference": [rv, *(ci if bounded else (None, None))],
                             "beyond": (not (ci[0] <= val <= ci[1])) if bounded else None})
    return {"rows": rows, "beyond": [r for r in rows if r["beyond"]], "only_run": only_run, "only_ref": only_ref}


def compare_folders(run: str | Path, against: str | Path) -> dict[str, Any]:
    """The whole comparison of two tables folders (see module doc): ``{"run", "against", "claims" (None when
    either lacks claims.json; a claim's regime verdict is compared as a claim of its own, its source marked
    "in the regime"), "tables"}``."""
    from caldera.experiments.report.regime_claims import with_regime_claims

    a, b = load_tables_folder(run), load_tables_folder(against)
    claims = (compare_claim_sets(with_regime_claims(a["claims"]), with_regime_claims(b["claims"]))
              if a["claims"] is not None and b["claims"] is not None else None)
    return {"run": a["folder"], "against": b["folder"], "claims": claims,
            "tables": compare_table_rows(a["tables"], b["tables"])}


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}" if abs(x) < 10 else f"{x:.2f}"


def summary_lines(res: dict[str, Any]) -> list[str]:
    """The comparison as text: the counts first, then every verdict change and every difference beyond its
    interval, named."""
    out = [f"run      {res['run']}", f"against  {res['against']}"]
    c = res["claims"]
    if c is None:
        out.append("claims   not compared (claims.json missing on one side)")
    else:
        judged = [x for x in c["intervals"] if x["beyond"] is not None]
        out.append(f"claims   {len(c['verdicts'])} matched: {len(c['changed'])} verdicts changed "
                   f"({len(c['flips'])} holds <-> fails); {len(c['intervals'])} interval estimates, {len(judged)} "
                   f"judged, {len(c['beyond'])} beyond the reference interval")
        for v in c["changed"]:
            out.append(f"  verdict  {v['claim']} [{v['source']}]: {v['committed']} -> {v['rerun']}"
                       + ("  (FLIP)" if v["flip"] else ""))
        for x in c["beyond"]:
            which, lo, hi = x["judged"]
            out.append(f"  beyond   {x['claim']} ({x['kind']}, {' / '.join(x['pair'] or [])}): {_num(x['estimate'])} "
                       f"outside the reference {which} [{_num(lo)}, {_num(hi)}] (reference {_num(x['reference'][0])})")
    t = res["tables"]
    judged = [r for r in t["rows"] if r["beyond"] is not None]
    out.append(f"tables   {len(t['rows'])} perplexities matched, {len(judged)} judged, {len(t['beyond'])} beyond "
               f"the reference 95 % interval; {len(t['only_run'])} rows or tables only in the run, "
               f"{len(t['only_ref'])} only in the reference")
    for r in t["beyond"]:
        _, lo, hi = r["reference"]
        out.append(f"  beyond   {r['table']} {r['variant']} {r['column']}: {_num(r['value'])} outside "
                   f"[{_num(lo)}, {_num(hi)}] (reference {_num(r['reference'][0])})")
    for r in t["only_run"]:
        out.append(f"  new      {r['table']}" + (f" {r['variant']}" if "variant" in r else " (whole table)"))
    if (c is None or not (c["changed"] or c["beyond"])) and not t["beyond"]:
        out.append("no difference beyond the intervals")
    return out


def differs(res: dict[str, Any]) -> bool:
    """Whether anything is flagged: a changed verdict, or an estimate or perplexity beyond its interval."""
    c = res["claims"]
    return bool((c and (c["changed"] or c["beyond"])) or res["tables"]["beyond"])
