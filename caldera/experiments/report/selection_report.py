"""The configuration selection of the CALDERA rows as a report: its Markdown, the App. G.1 ablation claims under
the selected configuration, the notes on claims whose configuration differs from it, and the matrix-level claim
(CALDERA's calibration error below QuIP#'s for every compressed matrix), from small result files."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from caldera.experiments.planning.selection_plan import matrix_claim_variants
from caldera.experiments.report.claim_registry import FIGURE3, FIGURE4, GIVEN, entries, the
from caldera.experiments.report.claim_rules import RELATIONS, count_verdict


def _choice_label(choice: Mapping[str, Any]) -> str:
    """``update_order=Q-first, ...``, or ``B_LR 16: ...; B_LR 4: ...`` for one choice per factor precision."""
    if choice and all(isinstance(v, Mapping) for v in choice.values()):
        return "; ".join(f"{k}: " + _choice_label(v) for k, v in sorted(choice.items()))
    return ", ".join(f"{k}={v}" for k, v in sorted(choice.items()))


def ablation_claims(pairs: Sequence[dict[str, Any]], choice: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Claim entries {"claim", "source", "verdict", "numbers"} of the registry's Figure 3 comparisons and its Figure
    4 claim (:mod:`caldera.experiments.report.claim_registry`, each by its relation and rule) measured under the
    selected configuration (``pairs`` as :func:`ablation_comparisons` returns them)."""
    label = _choice_label(choice)
    out = []
    for e in entries(FIGURE3):
        a, b = e.compares
        if any(a not in p["errors"] for p in pairs):
            continue  # a comparison the selection does not re-run (no-RHT)
        ok = [p for p in pairs if RELATIONS[e.relation](p["errors"][a], p["errors"][b])]
        detail = "; ".join(f"{p['matrix']}@{p['paper_rank']}: {p['errors'][a]:.4f} vs {p['errors'][b]:.4f}"
                           for p in pairs)
        out.append({"claim": e.claim, "source": f"{e.source} (selected configuration)",
                    "verdict": count_verdict(e.rule, len(ok), len(pairs)),
                    "numbers": f"{len(ok)}/{len(pairs)} matrix×rank pairs with {label}; {detail}"})
    steps = [(p, i, errs) for p in pairs for i, errs in enumerate(p["lplr"])]
    lower = [s for s in steps if len(s[2]) > 1 and min(s[2][1:]) < s[2][0]]
    lplr = the(FIGURE4)
    out.append({"claim": lplr.claim, "source": "App. G.1 / Fig. 4 (inside CALDERA, selected configuration)",
                "verdict": count_verdict(lplr.rule, len(lower), len(steps)),
                "numbers": f"{len(lower)}/{len(steps)} LPLR calls of the 4-bit runs lowered the error below their "
                           f"initialization; " + "; ".join(
                               f"{p['matrix']}@{p['paper_rank']} outer {i}: {e[0]:.5f} → {min(e):.5f}"
                               for p, i, e in steps)})
    return out


def configuration_notes(claims: Sequence[dict[str, Any]], selection: Mapping[str, Any]) -> list[dict[str, Any]]:
    """For every failing claim of ``claims`` (entries of :func:`caldera.experiments.report.claims.check`) that the
    selection re-measured under the selected configuration, a copy whose ``numbers`` end with whether the failure
    survives the configuration choice; other claims are returned unchanged."""
    redo = {c["claim"]: c for c in selection.get("ablations", {}).get("claims", [])}
    if "by_bits" in selection:
        name = "; ".join(f"B_LR {b}: {sec['selected']['name']}" for b, sec in sorted(selection["by_bits"].items()))
    else:
        name = selection.get("selected", {}).get("name", "selected")
    out = []
    for c in claims:
        again = redo.get(c["claim"])
        if c["verdict"] == "fails" and again is not None:
            tail = ("fails under both configurations" if again["verdict"] == "fails"
                    else "holds under the selected configuration")
            c = {**c, "numbers": f"{c['numbers']} — {tail} ({name}: {again['numbers']})"}
        out.append(c)
    return out


def _iters_label(iters: Sequence[int]) -> str:
    return f"T {iters[0]}/{iters[1]}"


def _section_lines(b: str, sec: Mapping[str, Any], models: Sequence[str]) -> list[str]:
    """The tables of one factor precision's selection."""
    sel, summary = sec["selection"], sec["summary"]
    chosen = sec["selected"]["name"]
    lines = [f"## {b}-bit factors", ""]
    ranks = {m: sorted({int(k) for s in summary.values() for k in s["models"].get(m, {}).get("ranks", {})})
             for m in models}
    head = ["candidate", "score"] + [f"{m} k={k}: ratio · CALDERA < QuIP#" for m in models for k in ranks[m]]
    lines += ["### " + _iters_label(sel["iters"]) + " (the default's budget; selectable)", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cand, s in sorted(summary.items()):
        cells = [f"**{cand}** (selected)" if cand == chosen else cand, f"{s['score']:.4f}"]
        for m in models:
            for k in ranks[m]:
                pr = s["models"].get(m, {}).get("ranks", {}).get(str(k))
                cells.append(f"{pr['geo_ratio']:.3f} · {pr['below_quip']} of {pr['n']}" if pr else "—")
        lines.append("| " + " | ".join(cells) + " |")
    tied = [c for c in sec["selected"]["tied"] if c != chosen]
    lines += ["", f"Selected: **{chosen}**" + (f" (tied with {', '.join(tied)}; listed first)" if tied else "")
              + f". The {b}-bit-factor CALDERA rows' parameters (with `rank` and the factor bits from each table row): "
              "`{" + ", ".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}"
                               for k, v in sorted(sec["selected"]["params"].items())) + "}`"
              + ("." if sec["selected"].get("in_run", True) else
                 " — **this run's config does not use it** (`methods.caldera.params` / `params_by_b_lr`)."), ""]
    long = sel.get("long_iters")
    if long and sec.get("long_summary"):
        lines += [f"### {_iters_label(long['iters'])} (reported, not selectable: outside the default's time budget)",
                  "", f"First {long['layers']} layer(s) of each stand-in, matrices {', '.join(long['matrices'])}, "
                  "the largest rank. Same matrices at the budget's T for comparison.", "",
                  "| candidate | " + " | ".join(f"{m}: ratio ({_iters_label(long['iters'])}) · ratio "
                                                f"({_iters_label(sel['iters'])})" for m in models) + " |",
                  "|---|" + "---|" * len(models)]
        for cand in sorted(sec["long_summary"]):
            cells = [cand]
            for m in models:
                lr = [r for r in sec["records"] if r["candidate"] == cand and r["model"] == m
                      and r["iters"] == list(long["iters"])]
                keys = {(r["layer"], r["matrix"], r["rank"]) for r in lr}
                sr = [r for r in sec["records"] if r["candidate"] == cand and r["model"] == m
                      and r["iters"] == list(sel["iters"]) and (r["layer"], r["matrix"], r["rank"]) in keys]
                cells.append(f"{geo_mean([r['ratio'] for r in lr]):.3f} · {geo_mean([r['ratio'] for r in sr]):.3f}"
                             if lr else "—")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def to_markdown(res: Mapping[str, Any]) -> str:
    """selection.md: one section per factor precision B_LR (``res["by_bits"]``; a result of one B_LR written
    before per-B_LR selection has its section at the top level) and the Figure 3 comparisons."""
    from caldera.pipeline.linears import SHORT_NAMES

    sel = res["selection"]
    sections = res.get("by_bits") or {str(sel["bits"]): res}
    first = next(iter(sections.values()))["summary"]
    models = sorted(first[next(iter(first))]["models"])  # sorted: the same page from the JSON
    bits = ", ".join(f"{b}" for b in sections)
    lines = [
        "# Configuration of the CALDERA rows, selected on the calibration Hessians", "",
        "§4.1: the update order \"can be swapped, depending on whichever yields a smaller error\". Each candidate "
        "below decomposed the same matrices with this run's *calibration* Hessians; the error is the calibration "
        "data-aware error sqrt(tr(ΔHΔᵀ)/tr(WHWᵀ)) with the raw calibration H (what the compression logs record), "
        f"factors of B_LR = {bits} bits at this run's CALDERA ranks for that B_LR, divided by QuIP#'s (2-bit, no LR) "
        "on the same matrix. Each factor precision gets its own selection (the CALDERA rows with that B_LR use it). "
        "No evaluation result is read.", "",
        "Layers: " + "; ".join(f"{m} {sel['layers'][m]}" for m in models)
        + f"; matrices: {', '.join(sel.get('matrices') or SHORT_NAMES)}. Score: geo-mean ratio over matrices × ranks, "
        "log-mean over the stand-ins; the lowest score is selected ("
        + (f"scores within {tol:.1%} of it are tied" if (tol := float(sel["tie_tolerance"])) else
           "only an equal score ties")
        + " and the candidate listed first wins a tie). The seconds of every decomposition: "
        "`selection.timing.json` beside the run's `selection.json`.", "",
    ]
    for b, sec in sections.items():
        lines += _section_lines(b, sec, models)
    ab = res.get("ablations")
    if ab:
        lines += ["## Figure 3 comparisons under the selected configuration", "",
                  "The App. G.1 presets run LR first, without the Hessian update, best iterate per sub-step; here the "
                  "same runs (the figure's matrices, ranks and T_out) with "
                  + _choice_label(ab["choice"]) + ".", "",
                  "| claim | verdict | numbers |", "|---|---|---|"]
        lines += [f"| {c['claim']} | **{c['verdict']}** | {c['numbers']} |" for c in ab["claims"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def _variant_errors(summary: Mapping[str, Any]) -> dict[str, float]:
    """``{module path: calibration data-aware error (raw H)}`` of an assembled variant's ``summary.json``."""
    return {k: float(v["error"]) for k, v in summary["errors"].items()}


def matrix_level_claims(variants: Mapping[str, Any], labels: Mapping[str, str],
                        summaries: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Claim entries "CALDERA's calibration data-aware error below QuIP#'s for every compressed matrix", one per
    stand-in: for each CALDERA variant, the matrices where its error (raw calibration H, from the compression
    summary) is below QuIP#'s on the same matrix, and the geo-mean ratio. ``variants``: the run's variants by id
    (:func:`matrix_claim_variants`); ``labels``: each model's label (:meth:`RunContext.labels`); ``summaries``:
    variant id → loaded ``compressed/<id>/summary.json``. Holds when every matrix of every CALDERA variant is
    below QuIP#."""
    claim = the(GIVEN)
    out = []
    for model in sorted({v.model for v in variants.values()}):
        quip = [v for v in variants.values() if v.model == model and v.method == "quip#"]
        cald = sorted((v for v in variants.values() if v.model == model and v.method == "caldera"),
                      key=lambda v: (v.b_lr or 0, v.rank))
        if not quip or not cald:
            continue
        missing = [v.id for v in quip + cald if v.id not in summaries]
        if missing:
            raise ValueError(f"matrix-level claim: no compression summary for {missing}; "
                             f"pass compressed/<variant>/summary.json of each")
        q = _variant_errors(summaries[quip[0].id])
        parts, all_below = [], True
        for v in cald:
            c = _variant_errors(summaries[v.id])
            keys = sorted(set(c) & set(q))
            if not keys:
                raise ValueError(f"matrix-level claim: {v.id} and {quip[0].id} share no compressed matrix")
            ratios = [c[k] / q[k] for k in keys]
            below = sum(x < 1 for x in ratios)
            all_below &= below == len(keys)
            parts.append(f"k={v.rank} {v.b_lr}-bit: {below}/{len(keys)} below, geo-mean ratio {geo_mean(ratios):.3f} "
                         f"(worst {max(ratios):.3f})")
        out.append({"claim": f"{claim.claim} [{labels[model]}]",
                    "source": claim.source, "verdict": "holds" if all_below else "fails",
                    "numbers": "CALDERA error / QuIP# error per matrix: " + "; ".join(parts)})
    return out


def matrix_level_claims_from_run(config: dict[str, Any], results_dir: str) -> list[dict[str, Any]]:
    """:func:`matrix_level_claims` on the summaries of ``results_dir`` (the files of :func:`matrix_claim_inputs`)."""
    from pathlib import Path

    from caldera.experiments.planning.settings import RunContext

    variants, summaries = matrix_claim_variants(config), {}
    for v in variants.values():
        path = Path(results_dir, "compressed", v.id, "summary.json")
        if path.is_file():
            summaries[v.id] = json.loads(path.read_text())
    return matrix_level_claims(variants, RunContext.from_config(config).labels(), summaries)


def geo_mean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
