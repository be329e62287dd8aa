"""The numbers the README quotes, generated from the committed outputs (so they cannot drift from them).

``python -m caldera.experiments.report.readme_numbers [ROOT]`` prints each snippet; :func:`check` lists every
snippet the README lacks (``tests/experiments/report/test_readme_numbers.py`` fails on any). The snippets: the
result table of "What the default run shows" (rows of the committed Table 1), the verdict counts of each
committed run the README names, the job count and job time of those runs (their ``timings.json``), the
stand-ins' regime (``regime.json``) and how many claims differ between the regimes (``regime_agreement.json``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from caldera.experiments.report.verdicts import NEEDS_SEEDS

#: the README's result table: (label, method prefix, paper rank, B_LR) of Table 1's LLaMa-2 7B rows
RESULT_ROWS = (("dense", "Unquantized", 0, "—"), ("QuIP#, no low rank", "QuIP#", 0, "—"),
               ("CALDERA rank 128 → 16, 4-bit factors", "CALDERA", 128, "4"),
               ("CALDERA rank 256 → 32, 4-bit factors", "CALDERA", 256, "4"))
RESULT_TABLE = "table1_llama2_zeroshot"
PAPER_MODEL = "llama-2-7b"
#: the committed runs whose verdict counts the README quotes: folder under paper_tables/
COUNTED_RUNS = ("generated", "mini-full")
#: how the counts name each verdict (plural of a count)
VERDICT_WORDS = {"holds": "hold", "fails": "fail", "inconclusive": "inconclusive", NEEDS_SEEDS: "need replicates"}


def _row(tab: dict[str, Any], method: str, rank: int, b_lr: str) -> dict[str, Any]:
    hits = [r for r in tab["rows"] if r["paper_model"] == PAPER_MODEL and str(r["method"]).startswith(method)
            and int(r["paper_rank"]) == rank and str(r["b_lr"]).removesuffix(".0") == b_lr]
    if len(hits) != 1:
        raise ValueError(f"{RESULT_TABLE}: {len(hits)} rows of {PAPER_MODEL} {method} rank {rank} B_LR {b_lr} "
                         "(the README's result table needs exactly one; update RESULT_ROWS)")
    return hits[0]


def result_table(tab: dict[str, Any]) -> list[str]:
    """The README's result table from Table 1's JSON: each row's bits (the paper's / ours), the paper's Wiki2
    perplexity and ours with its 95 % interval and seeds, printed as Table 1 prints them (two decimals)."""
    lines = ["| model | bits (paper / ours) | paper (LLaMa-2 7B, WikiText-2) | ours (SmolLM2-135M, wiki-squad) |",
             "|---|---|---|---|"]
    for label, method, rank, b_lr in RESULT_ROWS:
        r = _row(tab, method, rank, b_lr)
        ours, ci, n = r["ours"], (r.get("ours_ci") or {}).get("wiki2_ppl"), (r.get("seeds") or {}).get("ppl", 1)
        pb = r["paper"]["avg_bits"]
        bits = ("16" if pb == 16 else f"{pb:.2f}") + " / " + (
            "16" if ours.get("avg_bits") is None else f"{ours['avg_bits']:.2f}")
        value = f"{ours['wiki2_ppl']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        if method != "Unquantized":
            value += f" ({n} seed{'s' if n != 1 else ''})"
        lines.append(f"| {label} | {bits} | {r['paper']['wiki2_ppl']:.2f} | {value} |")
    return lines


def counts_text(claims: list[dict[str, Any]]) -> str:
    """``"35 claims (27 distinct): 8 hold, 4 fail, 23 inconclusive"``: the claims.md entries by verdict (the
    others named as they are), and how many distinct claims they are (:func:`verdict_page.group_claims`)."""
    from caldera.experiments.report.verdict_page import group_claims

    models = sorted({str(v).split("-", 1)[0] for c in claims for iv in c.get("intervals") or []
                     for v in iv.get("pair") or [] if "-" in str(v)})
    by: dict[str, int] = {}
    for c in claims:
        by[c["verdict"]] = by.get(c["verdict"], 0) + 1
    order = [v for v in VERDICT_WORDS if v in by] + sorted(set(by) - set(VERDICT_WORDS))
    parts = ", ".join(f"{by[v]} {VERDICT_WORDS.get(v, v)}" for v in order)
    return f"{len(claims)} claims ({len(group_claims(claims, models))} distinct): {parts}"


def job_time_text(timings: dict[str, Any], unit: str) -> str:
    """``"87 jobs, 102.3 job-min"`` / ``"193 jobs and 6.9 job-hours"`` from a run's ``timings.json`` (every job
    counted once, its time as measured when it ran)."""
    if unit == "min":
        return f"{timings['n_jobs']} jobs, {timings['job_s'] / 60:.1f} job-min"
    return f"{timings['n_jobs']} jobs and {timings['job_s'] / 3600:.1f} job-hours"


def regime_text(res: dict[str, Any]) -> str:
    """The stand-ins' regime as the README quotes it, from ``regime.json``
    (:mod:`caldera.experiments.report.regime_report`): per stand-in its chosen Q bits, QuIP#'s held-out calibration
    ratio there and at the runner-up's bits, the paper's ratio, and the choice's margin with its interval."""
    parts = []
    for model, sel in res["models"].items():
        q, c, m = str(sel["q_bits"]), sel["candidates"], sel.get("margin") or {}
        text = f"{model} → {q} bits (QuIP# ×{c[q]['ratio']:.2f} against the paper's ×{sel['paper']['ratio']:.2f}"
        if m:
            u = str(m["runner_up"])
            text += f"; {u} bits ×{c[u]['ratio']:.2f}; margin {m['margin']:.3f}"
            if m.get("lo") is not None:
                text += f" [{m['lo']:+.3f}, {m['hi']:+.3f}], " + ("resolved" if m["resolved"] else "not resolved")
        parts.append(text + ")")
    seeds = res["seeds"]
    return (f"{'; '.join(parts)} (seeds {', '.join(str(s) for s in seeds)}; {res['heldout']['n_windows']} "
            f"held-out windows)")


def agreement_text(res: dict[str, Any]) -> str:
    """How many claims both regimes decide and how many of them differ, from ``regime_agreement.json``
    (:mod:`caldera.experiments.report.regime_agreement`)."""
    both = [r for r in res["rows"] if r["agree"] is not None]
    return (f"{len(both)} of its {len(res['rows'])} claims are decided in both regimes and "
            f"{len(res['differ'])} of them differ")


def regime_counts_text(claims: list[dict[str, Any]]) -> str:
    """The default run's verdicts per regime (the regime column of its ``claims.json``,
    :func:`caldera.experiments.report.regime_claims.regime_counts`): the claims decided in both regimes, counted
    in each, and how many differ."""
    from caldera.experiments.report.regime_claims import regime_counts

    n = regime_counts(claims)
    two, reg = n["two_bit"], n["regime"]
    return (f"{n['decided_in_both']} claims decided in both regimes: at 2 bits {two['holds']} hold, "
            f"{two['fails']} fail, {two['inconclusive']} inconclusive; in the stand-ins' regime {reg['holds']} hold, "
            f"{reg['fails']} fail, {reg['inconclusive']} inconclusive; {n['differ']} differ")


#: the committed runs whose job count and job time the README quotes: folder under paper_tables/ -> unit
TIMED_RUNS = {"generated": "min", "mini-full": "hours"}


def snippets(root: str | Path) -> dict[str, str]:
    """Every snippet the README quotes, by what it is, from the committed files under ``root``."""
    root = Path(root)
    tab = json.loads((root / "paper_tables/generated" / f"{RESULT_TABLE}.json").read_text())
    out = {"result table": "\n".join(result_table(tab))}
    for run in COUNTED_RUNS:
        claims = json.loads((root / "paper_tables" / run / "claims.json").read_text())
        out[f"verdict counts of paper_tables/{run}"] = counts_text(claims)
        if any("regime" in c for c in claims):
            out[f"verdict counts per regime of paper_tables/{run}"] = regime_counts_text(claims)
    for run, unit in TIMED_RUNS.items():
        timings = json.loads((root / "paper_tables" / run / "timings.json").read_text())
        out[f"job count and time of paper_tables/{run}"] = job_time_text(timings, unit)
    out["stand-ins' regime"] = regime_text(json.loads((root / "paper_tables/generated/regime.json").read_text()))
    agreement = json.loads((root / "paper_tables/regime/regime_agreement.json").read_text())
    out["regime agreement"] = agreement_text(agreement)
    return out


def check(readme: str, root: str | Path) -> list[str]:
    """The snippets the README text lacks, each as ``"<what>: <snippet>"`` (empty: it quotes the outputs)."""
    return [f"{what}: {text}" for what, text in snippets(root).items() if text not in readme]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]) if argv else Path(".")
    for what, text in snippets(root).items():
        print(f"{what}:\n{text}\n")
    missing = check((root / "README.md").read_text(), root)
    for m in missing:
        print(f"README.md lacks the {m.split(':', 1)[0]} above", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
