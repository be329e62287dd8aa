"""The seed spread of a run's comparisons (``spread.md``): per claim, the between-seed spread of its ratio beside
the evaluation sample's own half-width, and the seeds a decision would need."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caldera import stats
from caldera.experiments.report.tables import realizations, seed_parts


def _zeroshot_seeds(tab: dict[str, Any], vid: str) -> dict[str, Any] | None:
    """Per-seed mean margin and accuracy of ``vid`` over the (task, document) pairs every seed scored on the tasks
    its claims pool (the table's ``claim_tasks``; all without it), with the between-seed standard deviations and
    the documents' t half-width of the seed-mean; None unless at least two seeds have zero-shot results."""
    zs, seeds, _ = seed_parts(tab, vid, "zeroshot")
    per = list(zip(seeds, zs))
    if len(per) < 2:
        return None
    tasks = tab.get("claim_tasks", {}).get(vid)
    keys = sorted(set.intersection(*({(t, d) for t, r in z.items() if tasks is None or t in tasks
                                      for d in r["doc_id"]} for _, z in per)))
    if not keys:
        return None
    out: dict[str, Any] = {"seeds": [sd for sd, _ in per], "n": len(keys)}
    for m in ("margin", "acc"):
        M = np.array([[dict(zip(z[t]["doc_id"], z[t][m]))[d] for t, d in keys] for _, z in per])
        w = stats.ratio_t_interval(M.mean(axis=0), np.ones(M.shape[1]))
        out[f"{m}_per_seed"] = M.mean(axis=1).tolist()
        out[f"{m}_seed_sd"] = float(M.mean(axis=1).std(ddof=1))
        out[f"{m}_window_half"] = (w["hi"] - w["lo"]) / 2.0
    return out


def seeds_needed(effect: float, window_half: float, seed_sd_one: float, most: int = 64) -> int | None:
    """Smallest number of seeds S ≥ 2 at which a comparison with per-seed spread ``seed_sd_one`` (the standard
    deviation of one realization's statistic) and window half-width ``window_half`` would give a combined
    interval (:func:`caldera.stats.combine`, symmetric approximation) that excludes no-difference for a true
    ``effect`` (same scale, e.g. log ratio); None when even ``most`` seeds would not (the windows' noise alone
    is at least the effect: more windows / documents are needed, not more seeds)."""
    e = abs(effect)
    if window_half >= e:
        return None
    for s in range(2, most + 1):
        if math.hypot(window_half, stats.t_quantile(s - 1) * seed_sd_one / math.sqrt(s)) < e:
            return s
    return None


def spread_report(tables: dict[str, dict[str, Any]], claims: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """``spread.md`` / ``spread.json``: the compression's realization spread beside the evaluation's sampling
    spread. Per variant with several seeds: each seed's Wiki2 / C4 perplexity, the between-seed standard
    deviation of log perplexity and the window half-width (both as ±% of perplexity), and where replicates were
    scored zero-shot, the same for the mean correct-choice margin. Per decided comparison: its two parts and how
    many seeds it needs (:func:`seeds_needed`) at its measured effect and spread."""
    rows, seen = [], set()
    for name, tab in tables.items():
        for vid, info in tab.get("realizations", {}).items():
            if vid in seen or len(info["ids"]) < 2:
                continue
            seen.add(vid)
            entry: dict[str, Any] = {"variant": vid, "table": name, "seeds": info["seeds"]}
            for corpus in ("wiki", "c4"):
                r = realizations(tab, vid, corpus)
                if r is None or len(r["seeds"]) < 2:
                    continue
                iv = stats.seeded_perplexity(r["nll"], r["tokens"], random=True)
                logs = np.log(iv["per_seed"])
                entry[corpus] = {"per_seed": iv["per_seed"], "estimate": iv["estimate"], "lo": iv["lo"],
                                 "hi": iv["hi"], "seed_sd": float(logs.std(ddof=1)), "seed_half": iv["seed_half"],
                                 "window_half": iv["window_half"], "seeds": len(r["seeds"])}
            zs = _zeroshot_seeds(tab, vid)
            if zs is not None:
                entry["zeroshot"] = zs
            rows.append(entry)
    lines = ["# Realization spread: seeds vs evaluation windows", "",
             "Each compressed model is one realization of a random procedure (RHT signs, randomized-SVD sketches, "
             "and the floating-point order of the CPU that ran it). *Between seeds*: standard deviation of log "
             "perplexity across the seeds (one realization's spread, as ±%). The geo-mean's 95 % interval has two "
             "parts, both half-widths as ±%: *seed part* (Student's t over the seeds) and *window part* (Student's t "
             "over the evaluation windows of the seed-mean); their ratio above 1 means the compression's own "
             "randomness, not the evaluation sample, limits what the run can decide. A single variant's window "
             "part includes how hard the windows are; a paired comparison cancels that (next section), so "
             "there the seed part dominates even more.", "",
             "| variant | seeds | Wiki2 ppl per seed | geo-mean [95 %, windows + seeds] | between seeds (sd) "
             "| seed part | window part | seed / window part | C4: between seeds (sd) / window part |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in rows:
        w, c = e.get("wiki"), e.get("c4")
        if w is None:
            continue
        c4 = (f"±{100 * math.expm1(c['seed_sd']):.1f} % / ±{100 * math.expm1(c['window_half']):.1f} %"
              if c else "—")
        lines.append(f"| {e['variant']} | {'/'.join(map(str, e['seeds']))} | "
                     f"{', '.join(f'{p:.2f}' for p in w['per_seed'])} | {w['estimate']:.2f} [{w['lo']:.2f}, "
                     f"{w['hi']:.2f}] | ±{100 * math.expm1(w['seed_sd']):.1f} % | "
                     f"±{100 * math.expm1(w['seed_half']):.1f} % | ±{100 * math.expm1(w['window_half']):.1f} % | "
                     f"{w['seed_half'] / w['window_half']:.2f} | {c4} |")
    zrows = [e for e in rows if e.get("zeroshot")]
    if zrows:
        pool = ("the tasks the claims pool" if any(t.get("claim_tasks") for t in tables.values())
                else "all tasks pooled")
        lines += ["", f"Zero-shot ({pool}, the documents every seed scored): between-seed standard deviation "
                  "of the mean correct-choice margin (nats) and of accuracy (points) beside the half-width of the "
                  "documents' 95 % t interval of the seed-mean.", "",
                  "| variant | seeds | documents | margin per seed | margin: between seeds / documents | accuracy "
                  "per seed (%) | accuracy: between seeds / documents |", "|---|---|---|---|---|---|---|"]
        for e in zrows:
            z = e["zeroshot"]
            lines.append(f"| {e['variant']} | {'/'.join(map(str, z['seeds']))} | {z['n']} | "
                         f"{', '.join(f'{m:+.3f}' for m in z['margin_per_seed'])} | ±{z['margin_seed_sd']:.3f} / "
                         f"±{z['margin_window_half']:.3f} | {', '.join(f'{100 * a:.1f}' for a in z['acc_per_seed'])} | "
                         f"±{100 * z['acc_seed_sd']:.1f} / ±{100 * z['acc_window_half']:.1f} |")
    else:
        lines += ["", "Zero-shot: no variant has zero-shot results for several seeds in this run "
                  "(`replicates.zeroshot: false`); mini-full scores its replicates zero-shot."]
    from caldera.experiments.report.realization_pool import pools

    found = pools(tables)
    lines += ["", "## Pooled realization spread (for variants run once)", "",
              "Per method family, factor precision (B_LR) and stand-in, the between-seed variance of Wiki2 log "
              "perplexity pooled over the replicated like variants (`caldera.experiments.report.realization_pool`); a "
              "variant run once on a seed no other variant ran takes it in its comparisons (one that shares a seed "
              "with the seed block pairs on it instead). Coverage on committed replicates: "
              "`paper_tables/reseed/pooled_coverage.md`.", "",
              "| family | B_LR | stand-in | sd per seed | df | pooled from |", "|---|---|---|---|---|---|"]
    lines += [f"| {p['family']} | {p['b_lr']} | {p['stand_in']} | ±{100 * math.expm1(math.sqrt(p['var'])):.1f} % | "
              f"{p['df']} | {', '.join(p['variants'])} |" for p in found.values()] or [
        "| — | — | — | — | — | no replicated variant |"]
    from caldera.experiments.report.realization_pool import blocks

    blk = blocks(tables)
    lines += ["", "## Seed blocks (paired comparisons)", "",
              "Per stand-in, its replicated random variants on the seeds they all ran: realization s of each shares "
              "RHT signs and sketches, so comparisons pair on the seeds. *Interaction sd*: the residual standard "
              "deviation of the additive variant + seed model (`caldera.stats.block_variance`), with its degrees of "
              "freedom; a paired comparison's seed part takes the larger of this block's and the pair's own "
              "variance of the per-seed log ratio (`caldera.stats.paired_seed_part`).", "",
              "| stand-in | variants | seeds | interaction sd per seed | df |", "|---|---|---|---|---|"]
    lines += [f"| {st} | {', '.join(b['variants'])} | {'/'.join(map(str, b['seeds']))} | "
              f"±{100 * math.expm1(math.sqrt(b['var'])):.1f} % | {b['df']} |" for st, b in blk.items()] or [
        "| — | — | — | — | no stand-in has two replicated variants on two shared seeds |"]
    lines += ["", "## Seeds each comparison needs", "",
              "For each paired perplexity comparison of the claims: the estimate, the half-widths of its two parts "
              "(log ratio, as ±%), and the smallest number of seeds per variant at which an interval of this "
              "construction would exclude no-difference if the true ratio were the estimate and the per-seed "
              "spread as measured (Student's t over S seeds, windows in quadrature); '—' when the windows' "
              "half-width alone exceeds the effect (more windows are needed, not more seeds).", "",
              "| claim | pair | estimate [combined 95 %] | windows | seeds (this run) | seeds needed |",
              "|---|---|---|---|---|---|"]
    needs = []
    for cl in claims:
        for iv in cl.get("intervals", []):
            if iv.get("kind") != "ppl ratio" or iv.get("seed_half") is None or max(iv.get("seeds") or [1]) < 2:
                continue
            s = max(iv["seeds"])
            one = iv["seed_sd"] * math.sqrt(s) if iv["seed_sd"] is not None else 0.0
            need = seeds_needed(math.log(iv["estimate"]), iv["window_half"], one)
            needs.append({"claim": cl["claim"], "pair": iv["pair"], "estimate": iv["estimate"], "lo": iv["lo"],
                          "hi": iv["hi"], "window_half": iv["window_half"], "seed_half": iv["seed_half"],
                          "seeds": iv["seeds"], "seeds_needed": need})
            lines.append(f"| {cl['claim']} | {' / '.join(iv['pair'])} | ×{iv['estimate']:.3f} [{iv['lo']:.3f}, "
                         f"{iv['hi']:.3f}] | ±{100 * math.expm1(iv['window_half']):.1f} % | "
                         f"{'/'.join(map(str, iv['seeds']))}: ±{100 * math.expm1(iv['seed_half']):.1f} % | "
                         f"{'—' if need is None else need} |")
    pooled = [{k: v for k, v in p.items()} for p in found.values()]
    return "\n".join(lines) + "\n", {"variants": rows, "comparisons": needs, "pools": pooled,
                                     "blocks": [{"stand_in": st, **b} for st, b in blk.items()]}
