"""Table 6 (paper §5.4): the throughput table and its claims, from the small result files of the ``throughput``
jobs (:mod:`caldera.experiments.jobs.throughput`: one per stand-in model, its variants timed together in
randomized interleaved rounds). Every round gives one tokens/s figure per variant and protocol; the table prints
the median with the min–max over the rounds and each compressed row's paired ratio to the dense model beside the
paper's, and the claims (:func:`throughput_claims`) compare two variants by the paired interval of their per-round
log ratio (:func:`compare_rounds`)."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from pathlib import Path
from typing import Any

from caldera.experiments.planning.plan import Variant
from caldera.experiments.planning.settings import RunContext, ThroughputSettings
from caldera.experiments.planning.throughput_rows import (
    PROTOCOL_LABEL,
    PROTOCOLS,
    TABLE,
    throughput_rows,
    throughput_settings,
)
from caldera.experiments.report.claim_registry import THROUGHPUT, ClaimEntry, Side, entries
from caldera.experiments.report.claim_rules import direction_verdict
from caldera.experiments.report.table_render import ARROW, HASH, render_table_texts

#: the confidence level of a pair's interval
LEVEL = 0.95


def compare_rounds(a: list[float], b: list[float], level: float = LEVEL) -> dict[str, Any]:
    """Is variant A faster than B, from their tokens/s in the same interleaved rounds (``a[r]``, ``b[r]``: round
    r's)?

    The per-round log ratio d_r = ln(a_r / b_r) pairs the two variants within each round, so what moves a whole
    round (the machine's load, its clock) cancels. Its mean's Student-t interval over the n rounds (n − 1 degrees of
    freedom, two-sided ``level``) decides: ``direction`` +1 when the interval lies above 0 (A faster), −1 when it
    lies below (A slower), 0 when it contains 0. Returned as ratios: ``ratio`` = exp(mean d), ``lo`` / ``hi`` the
    interval's ends, ``resolvable`` = exp(half-width): the smallest speed ratio (either way) that an interval this
    wide could have told from none. Raises ``ValueError`` for unequal lengths (the rounds pair the figures), fewer
    than two rounds, or a tokens/s that is not positive and finite.
    """
    from caldera.stats import t_quantile

    if len(a) != len(b):
        raise ValueError(f"compare_rounds pairs round by round: got {len(a)} rounds of A and {len(b)} of B")
    if len(a) < 2:
        raise ValueError(f"compare_rounds needs at least 2 rounds, got {len(a)}")
    for name, xs in (("A", a), ("B", b)):
        bad = [x for x in xs if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0)]
        if bad:
            raise ValueError(f"compare_rounds: {name}'s tokens/s must be positive and finite, got {bad[0]!r}")
    d = [math.log(x / y) for x, y in zip(a, b)]
    n = len(d)
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    half = t_quantile(n - 1, level) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    direction = 1 if lo > 0 else -1 if hi < 0 else 0
    return {"direction": direction, "ratio": math.exp(mean), "lo": math.exp(lo), "hi": math.exp(hi),
            "resolvable": math.exp(half), "half_width": half, "sd": sd, "n": n, "level": level}


def ratio_text(c: dict[str, Any]) -> str:
    """``×1.23 [1.05, 1.44]`` of :func:`compare_rounds`' result."""
    return f"×{c['ratio']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}]"


def _fmt_tps(r: dict[str, Any] | None) -> str:
    if not r:
        return "—"
    return f"{r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]"


@dataclasses.dataclass(frozen=True)
class ThroughputTablePlan:
    """What Table 6's job needs, built when the plan is made (:meth:`from_config`; rule throughput_table's
    ``plan`` param): the paper rows with their variants (:func:`throughput_rows`), the run (name, model labels)
    and the ``throughput`` settings."""

    rows: list[dict[str, Any]]
    run: RunContext
    settings: ThroughputSettings

    @classmethod
    def from_config(cls, config: dict[str, Any], run_variants: dict[str, Variant] | None = None
                    ) -> ThroughputTablePlan:
        """Table 6's plan under ``config`` (``run_variants``: as :func:`throughput_rows`)."""
        return cls(rows=throughput_rows(config, run_variants), run=RunContext.from_config(config),
                   settings=throughput_settings(config))


def _paper_dense(plan_rows: list[dict[str, Any]], ref: dict[str, Any]) -> float | None:
    """The paper's tokens/s of the uncompressed row of ``ref``'s paper model (None: none, or OOM)."""
    for r in plan_rows:
        if r["ref"]["model"] == ref["model"] and r["ref"]["method"] == "Uncompressed":
            return r["ref"].get("tok_per_s")
    return None


def build_throughput_table(results_dir: str | os.PathLike, plan: ThroughputTablePlan) -> dict[str, Any]:
    """Table 6 rows with the paper's tokens/s beside this run's (per protocol: median, min, max, per-round
    figures), each compressed row's paired ratio to its model's dense variant (paper's protocol,
    :func:`compare_rounds`) beside the paper's ratio, and each variant's model-tensor size. ``measured`` holds
    each variant's per-round results (what the claims read), ``jobs`` each model job's record (round orders,
    device, peak memory), ``out_of_memory`` the variants whose job could not load them (printed "OOM")."""
    import json

    results_dir = Path(results_dir)
    measured, jobs, oom = {}, {}, {}
    for model in sorted({r["variant"].model for r in plan.rows if r["variant"] is not None}):
        p = results_dir / "throughput" / f"{model}.json"
        if not p.exists():
            continue
        res = json.loads(p.read_text())
        for vid, m in res["variants"].items():
            if "oom" in m:
                oom[vid] = m["oom"]
            else:
                measured[vid] = m
        jobs[model] = {k: res.get(k) for k in ("device", "torch_threads", "peak_rss_mb", "peak_cuda_mb", "rounds_s",
                                               "wall_s", "orders", "settings")}
    dense_of = {m["model"]: vid for vid, m in measured.items() if m["method"] == "dense"}
    rows = []
    for row in plan.rows:
        ref, v = row["ref"], row["variant"]
        res = measured.get(v.id) if v is not None else None
        vs_dense = None
        if res is not None and res["method"] != "dense" and res["model"] in dense_of:
            c = compare_rounds(res[PROTOCOLS[0]]["tokens_per_s"],
                               measured[dense_of[res["model"]]][PROTOCOLS[0]]["tokens_per_s"])
            vs_dense = {k: c[k] for k in ("ratio", "lo", "hi", "direction", "n")}
        paper_dense = _paper_dense(plan.rows, ref)
        rows.append({
            "method": ref["method_printed"] or ref["method"],
            "paper_method": ref["method"],
            "paper_model": ref["model"],
            "stand_in": plan.run.models[v.model].label if v else "not run in this config",
            "paper_rank": ref["rank"],
            "rank": v.rank if v else None,
            "b_lr": None if ref.get("b_lr") is None else int(ref["b_lr"]),
            "variant": v.id if v else None,
            "paper_tok_per_s": ref.get("tok_per_s"),
            "paper_note": ref.get("note"),
            "paper_vs_dense": (ref["tok_per_s"] / paper_dense if ref["method"] != "Uncompressed"
                               and ref.get("tok_per_s") is not None and paper_dense else None),
            "ours": {p: {k: res[p][k] for k in ("median", "min", "max", "tokens_per_s")} if res else None
                     for p in PROTOCOLS},
            "ours_oom": v is not None and v.id in oom,
            "vs_dense": vs_dense,
            "model_tensor_mb": res.get("model_tensor_mb") if res else None,
        })
    return {"table": TABLE, "protocols": list(PROTOCOLS), "rows": rows, "measured": measured, "jobs": jobs,
            "out_of_memory": oom, "settings": plan.settings.as_block()}


def render_throughput(tab: dict[str, Any], caption: str) -> tuple[str, str, str]:
    head = ["Method", "Paper model → stand-in", "Rank (paper → ours)", "B_LR", "paper tok/s",
            f"ours tok/s, {PROTOCOL_LABEL['single_token']}", f"ours tok/s, {PROTOCOL_LABEL['decode']}",
            "paper × dense", "ours × dense, paired [95 %]", "model tensors (MB)"]
    csv_head = (["method", "paper_model", "stand_in", "paper_rank", "rank", "b_lr", "tok_per_s_paper"]
                + [f"{p}_{k}" for p in PROTOCOLS for k in ("median", "min", "max")]
                + ["paper_vs_dense", "vs_dense", "vs_dense_lo", "vs_dense_hi", "model_tensor_mb"])
    rows, csv_rows = [], []
    for r in tab["rows"]:
        paper = "OOM" if r["paper_tok_per_s"] is None and "OOM" in (r["paper_note"] or "") else (
            "—" if r["paper_tok_per_s"] is None else f"{r['paper_tok_per_s']:.2f}")
        vd = r["vs_dense"]
        rel = ["—" if r["paper_vs_dense"] is None else f"×{r['paper_vs_dense']:.2f}",
               "—" if vd is None else ratio_text(vd)]
        rows.append([r["method"], f"{r['paper_model']} → {r['stand_in']}",
                     f"{r['paper_rank'] if r['paper_rank'] is not None else '—'} → "
                     f"{r['rank'] if r['rank'] is not None else '—'}",
                     "—" if r["b_lr"] is None else str(r["b_lr"]), paper,
                     *("OOM" if r.get("ours_oom") else _fmt_tps(r["ours"][p]) for p in PROTOCOLS), *rel,
                     "—" if r["model_tensor_mb"] is None else f"{r['model_tensor_mb']:.0f}"])
        csv_rows.append([r["method"], r["paper_model"], r["stand_in"], r["paper_rank"], r["rank"], r["b_lr"],
                         r["paper_tok_per_s"]]
                        + [(r["ours"][p] or {}).get(k) for p in PROTOCOLS for k in ("median", "min", "max")]
                        + [r["paper_vs_dense"]] + [(vd or {}).get(k) for k in ("ratio", "lo", "hi")]
                        + [r["model_tensor_mb"]])
    return render_table_texts(caption, head, rows, csv_head, csv_rows, (ARROW,), (HASH, ARROW))


def write_throughput_table(results_dir: str, plan: ThroughputTablePlan, out_md: str, out_tex: str, out_csv: str,
                           out_json: str) -> dict[str, Any]:
    """Table 6 (:func:`build_throughput_table`) with its caption, as md / tex / csv / json."""
    tab = build_throughput_table(results_dir, plan)
    s = tab["settings"]
    dev = sorted({j["device"] for j in tab["jobs"].values()}) or ["—"]
    threads = sorted({j["torch_threads"] for j in tab["jobs"].values()}) or "—"  # none measured yet
    mem = "; ".join(f"{m}: {j['peak_cuda_mb'] if j['peak_cuda_mb'] is not None else j['peak_rss_mb']:.0f} MB"
                    for m, j in tab["jobs"].items()) or "—"
    caption = (
        f"{TABLE}: batch-1 throughput, the paper's numbers (LLaMa-2 on an NVIDIA A10G, fp16) beside this run "
        f"({plan.run.name} config, device {', '.join(dev)}, {s['dtype']}, torch threads {threads}, compressed "
        f"layers run as stored with kernel={s['kernel']}). Each paper row maps to the stand-in variant of the "
        "zero-shot tables (paper rank → stand-in rank at the closest average bits); the 70B rows map to the same "
        "stand-in variants as Table 1's 70B rows (the stand-in cannot show the paper's 70B OOM). One job per "
        "stand-in model loads all of its variants, the dense one included, and times them in "
        f"{s['rounds']} randomized interleaved rounds after {s['warmup']} warm-up call(s) each: every round "
        "times every variant once per protocol, in an order shuffled per round (seed "
        f"{s['seed']}). Ours: median [min, max] tokens/s over the rounds, for the paper's protocol "
        f"({s['calls']} single-token forwards per round, no KV cache) and for generation with the KV cache "
        f"({s['new_tokens']} greedy tokens per round from a {len(s['prompt'].split())}-word prompt). × dense: the "
        "row's tokens/s over its model's uncompressed row, the paper's and ours (paper's protocol: geometric mean "
        "of the per-round ratios to the dense model timed in the same round, with its 95 % Student-t interval "
        "over the rounds). Model tensors: the model's parameters and buffers after the rounds (a compressed "
        "layer's codes, signs and factors, plus any dequantized cache its path built; the fp32 tied embedding / "
        f"lm_head stays dense). Peak memory of each model's job (every variant loaded, CPU resident set or CUDA "
        f"allocation): {mem}. By default the job reserves every core of the run, so no other job runs beside it "
        "(a profile's `set-threads: {throughput: N}` changes that)."
    )
    from caldera.experiments.report.tables import write_table_files

    write_table_files(tab, caption, render_throughput(tab, caption), out_md, out_tex, out_csv, out_json)
    return tab


def _takes(side: Side, r: dict[str, Any]) -> bool:
    """Does ``side`` take Table 6 row ``r`` (its paper method, B_LR and paper rank)?"""
    return side.matches(r["paper_method"], "—" if r.get("b_lr") is None else str(r["b_lr"]), r.get("paper_rank"))


def claim_pairs(tab: dict[str, Any], fast: Side, slow: Side) -> list[dict[str, Any]]:
    """The variant pairs (A claimed faster than B) of one claim: a measured row of side A (``fast``) and a measured
    row of side B (``slow``) of the same paper model (the 7B block; the 70B rows map to the same stand-in variants
    at this scale), mapped to two different variants; each pair once, with the paper's tokens/s ratio of every
    paper model that gives it (``paper``: ``[(paper model, ratio)]``, empty where the paper has no figure for a
    side, as the 70B OOM)."""
    rows = [r for r in tab["rows"] if r["variant"] in tab["measured"]]
    pairs: dict[tuple[str, str], list] = {}
    for fa in (r for r in rows if _takes(fast, r)):
        for sl in (r for r in rows if _takes(slow, r) and r["paper_model"] == fa["paper_model"]):
            if fa["variant"] == sl["variant"]:
                continue
            paper = pairs.setdefault((fa["variant"], sl["variant"]), [])
            if fa.get("paper_tok_per_s") and sl.get("paper_tok_per_s"):
                paper.append((fa["paper_model"], fa["paper_tok_per_s"] / sl["paper_tok_per_s"]))
    return [{"a": a, "b": b, "paper": paper} for (a, b), paper in sorted(pairs.items())]


def _paper_text(paper: list) -> str:
    return "paper " + (", ".join(f"×{x:.2f} ({m})" for m, x in dict.fromkeys(paper)) if paper else "—")


def _decide(tab: dict[str, Any], pairs: list[dict[str, Any]], proto: str,
            rule: str) -> tuple[str, list[str], list[dict]]:
    if not pairs:
        return "not testable at this scale", [], []
    detail, comps = [], []
    for p in pairs:
        ma, mb = tab["measured"][p["a"]], tab["measured"][p["b"]]
        if ma.get("model") != mb.get("model"):
            raise ValueError(f"throughput claims: {p['a']} and {p['b']} were timed in different jobs "
                             f"({ma.get('model')}, {mb.get('model')}); a pair is compared within one model's rounds")
        c = compare_rounds(ma[proto]["tokens_per_s"], mb[proto]["tokens_per_s"])
        comps.append(c)
        word = {1: "faster", -1: "slower", 0: f"undecided, resolves ×{c['resolvable']:.2f}"}[c["direction"]]
        detail.append(f"{p['a']} / {p['b']}: {ratio_text(c)} ({word}; {_paper_text(p['paper'])})")
    return direction_verdict(rule, [c["direction"] for c in comps]), detail, comps


def throughput_claims(tab: dict[str, Any], group: list[ClaimEntry] | None = None) -> list[dict[str, Any]]:
    """Table 6's ordering claims (``group``: their entries, default the registry's three) on the interleaved rounds
    (``tab``: :func:`build_throughput_table`).

    Per pair of variants (A claimed faster than B, :func:`claim_pairs`): the 95 % paired interval of the
    per-round log ratio of their tokens/s (:func:`compare_rounds`), faster when it lies above 0, slower when
    below, undecided otherwise, shown beside the paper's ratio for the same rows. By the entries' rule "higher"
    a claim **holds** when every pair is faster, **fails** when any pair is slower (each pair's interval at 95 %,
    no correction for the claim's several pairs), and is **inconclusive** otherwise; then each undecided pair
    states the smallest ratio its interval could have resolved, next to the paper's. Decided on the paper's
    protocol (single-token forward), with the KV-cache decoding verdict beside it. **not testable at this scale**
    when this run has no measured variant on one side.
    """
    out = []
    for e in entries(THROUGHPUT) if group is None else group:
        pairs = claim_pairs(tab, *e.compares)
        verdicts = {p: _decide(tab, pairs, p, e.rule) for p in PROTOCOLS}
        verdict, _, comps = verdicts[PROTOCOLS[0]]
        if verdict == "not testable at this scale":
            numbers = "no measured variant on one side of the comparison in this config"
            sdd = "—"
        else:
            numbers = "; ".join(f"{PROTOCOL_LABEL[p]}: **{verdicts[p][0]}** — " + ", ".join(verdicts[p][1])
                                for p in PROTOCOLS) + " (tokens/s ratio A / B, paired over the rounds [95 %])"
            n = sorted({c["n"] for c in comps})
            res = [c["resolvable"] for c in comps]
            paper = sorted(x for p in pairs for _, x in p["paper"])
            sdd = (f"×{min(res):.2f}–{max(res):.2f} (the ratio each pair's interval resolves: "
                   f"{'/'.join(map(str, n))} paired rounds, Student t); the paper's ratios: "
                   + (f"×{paper[0]:.2f}–{paper[-1]:.2f}" if paper else "—"))
        out.append({"claim": e.claim, "source": e.source, "verdict": verdict, "numbers": numbers, "sdd": sdd})
    return out
