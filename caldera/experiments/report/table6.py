"""Table 6 (paper §5.4): the throughput table and its claims, from the small result files of the ``throughput``
jobs (:mod:`caldera.experiments.jobs.throughput`). Every repeat gives one tokens/s figure; the table prints the
median with the min–max over the repeats, and the claims (:func:`throughput_claims`) compare two variants by their
repeats (:func:`compare_repeats`)."""

from __future__ import annotations

import dataclasses
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
from caldera.experiments.report.table_render import ARROW, HASH, render_table_texts

#: :func:`compare_repeats`' default margin, the ``throughput.separation_margin`` default: A's slowest repeat at
#: least this fraction above B's fastest. A config sets the margin its machine needs
#: (``benchmarks/throughput_drift.py`` measures the drift between runs).
SEPARATION_MARGIN: float = ThroughputSettings.separation_margin


def compare_repeats(a: list[float], b: list[float], margin: float = SEPARATION_MARGIN) -> dict[str, Any]:
    """Is variant A faster than B, from their per-repeat tokens/s?

    ``direction`` +1 when every repeat of A is faster than every repeat of B by the ``margin`` (A's min >
    (1 + margin) · B's max), −1 when every repeat of A is slower by it (B's min > (1 + margin) · A's max), 0
    otherwise (overlapping, or apart by less than the margin). With n and m exchangeable repeats and no true
    difference, a separation in a given direction has probability at most 1 / C(n+m, n) (``p_separation``;
    1/252 for 5 and 5 repeats): the verdict is an exact rank test, made stricter by the margin.
    ``ratio``: median(A) / median(B).
    """
    from math import comb

    if not a or not b:
        raise ValueError("compare_repeats needs at least one repeat of each variant")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    d = 1 if min(a) > (1 + margin) * max(b) else -1 if min(b) > (1 + margin) * max(a) else 0
    return {"direction": d, "ratio": statistics.median(a) / statistics.median(b), "n": (len(a), len(b)),
            "p_separation": 1 / comb(len(a) + len(b), len(a))}


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


def build_throughput_table(results_dir: str | os.PathLike, plan: ThroughputTablePlan) -> dict[str, Any]:
    """Table 6 rows with the paper's tokens/s beside this run's (per protocol: median, min, max, repeats) and the
    peak memory of each variant's job; ``measured`` holds each variant's raw results (what the claims read)."""
    import json

    results_dir = Path(results_dir)
    rows, measured = [], {}
    for row in plan.rows:
        ref, v = row["ref"], row["variant"]
        res = None
        if v is not None:
            p = results_dir / "throughput" / f"{v.id}.json"
            res = json.loads(p.read_text()) if p.exists() else None
            if res is not None:
                measured[v.id] = res
        rows.append({
            "method": ref["method_printed"] or ref["method"],
            "paper_method": ref["method"],
            "paper_model": ref["model"],
            "stand_in": plan.run.models[v.model]["label"] if v else "not run in this config",
            "paper_rank": ref["rank"],
            "rank": v.rank if v else None,
            "b_lr": None if ref.get("b_lr") is None else int(ref["b_lr"]),
            "variant": v.id if v else None,
            "paper_tok_per_s": ref.get("tok_per_s"),
            "paper_note": ref.get("note"),
            "ours": {p: {k: res[p][k] for k in ("median", "min", "max", "tokens_per_s")} if res else None
                     for p in PROTOCOLS},
            "peak_rss_mb": res.get("peak_rss_mb") if res else None,
            "peak_cuda_mb": res.get("peak_cuda_mb") if res else None,
            "model_tensor_mb": res.get("model_tensor_mb") if res else None,
        })
    return {"table": TABLE, "protocols": list(PROTOCOLS), "rows": rows, "measured": measured,
            "settings": plan.settings.as_block()}


def render_throughput(tab: dict[str, Any], caption: str) -> tuple[str, str, str]:
    head = ["Method", "Paper model → stand-in", "Rank (paper → ours)", "B_LR", "paper tok/s",
            f"ours tok/s, {PROTOCOL_LABEL['single_token']}", f"ours tok/s, {PROTOCOL_LABEL['decode']}",
            "model tensors (MB)", "peak memory (MB)"]
    csv_head = (["method", "paper_model", "stand_in", "paper_rank", "rank", "b_lr", "tok_per_s_paper"]
                + [f"{p}_{k}" for p in PROTOCOLS for k in ("median", "min", "max")]
                + ["model_tensor_mb", "peak_memory_mb"])
    rows, csv_rows = [], []
    for r in tab["rows"]:
        mem = r["peak_cuda_mb"] if r["peak_cuda_mb"] is not None else r["peak_rss_mb"]
        paper = "OOM" if r["paper_tok_per_s"] is None and "OOM" in (r["paper_note"] or "") else (
            "—" if r["paper_tok_per_s"] is None else f"{r['paper_tok_per_s']:.2f}")
        rows.append([r["method"], f"{r['paper_model']} → {r['stand_in']}",
                     f"{r['paper_rank'] if r['paper_rank'] is not None else '—'} → "
                     f"{r['rank'] if r['rank'] is not None else '—'}",
                     "—" if r["b_lr"] is None else str(r["b_lr"]), paper,
                     *(_fmt_tps(r["ours"][p]) for p in PROTOCOLS),
                     "—" if r["model_tensor_mb"] is None else f"{r['model_tensor_mb']:.0f}",
                     "—" if mem is None else f"{mem:.0f}"])
        csv_rows.append([r["method"], r["paper_model"], r["stand_in"], r["paper_rank"], r["rank"], r["b_lr"],
                         r["paper_tok_per_s"]]
                        + [(r["ours"][p] or {}).get(k) for p in PROTOCOLS for k in ("median", "min", "max")]
                        + [r["model_tensor_mb"], mem])
    return render_table_texts(caption, head, rows, csv_head, csv_rows, (ARROW,), (HASH, ARROW))


def write_throughput_table(results_dir: str, plan: ThroughputTablePlan, out_md: str, out_tex: str, out_csv: str,
                           out_json: str) -> dict[str, Any]:
    """Table 6 (:func:`build_throughput_table`) with its caption, as md / tex / csv / json."""
    tab = build_throughput_table(results_dir, plan)
    s = tab["settings"]
    dev = sorted({m["device"] for m in tab["measured"].values()}) or ["—"]
    threads = sorted({m["torch_threads"] for m in tab["measured"].values()}) or "—"  # none measured yet
    caption = (
        f"{TABLE}: batch-1 throughput, the paper's numbers (LLaMa-2 on an NVIDIA A10G, fp16) beside this run "
        f"({plan.run.name} config, device {', '.join(dev)}, {s['dtype']}, torch threads {threads}, compressed "
        f"layers run as stored with kernel={s['kernel']}). Each paper row maps to the stand-in variant of the "
        "zero-shot tables (paper rank → stand-in rank at the closest average bits); the 70B rows map to the same "
        "stand-in variants as Table 1's 70B rows (the stand-in cannot show the paper's 70B OOM). Ours: median "
        f"[min, max] tokens/s over {s['runs']} timed repeats after {s['warmup']} warm-up, for the paper's "
        f"protocol ({s['calls']} single-token forwards per repeat, no KV cache) and for generation with the KV "
        f"cache ({s['new_tokens']} greedy tokens per repeat from a {len(s['prompt'].split())}-word prompt). "
        "Model tensors: the model's parameters and buffers after the timed repeats (a compressed layer's codes, "
        "signs and factors, plus any dequantized cache its path built; the fp32 tied embedding / lm_head stays "
        "dense). Peak memory: the job's peak resident set (CPU) or peak CUDA allocation, model load and the Python "
        "runtime included. The spread "
        "is run-to-run within one job; by default each variant's job reserves every core of the run, so nothing "
        "runs beside it (a profile's `set-threads: {throughput: N}` changes that)."
    )
    from caldera.experiments.report.tables import write_table_files

    write_table_files(tab, caption, render_throughput(tab, caption), out_md, out_tex, out_csv, out_json)
    return tab


#: Table 6's ordering claims: (claim, rows of A, rows of B, A claimed faster than B). Rows are chosen by
#: (paper method, B_LR) on the 7B block (the 70B rows map to the same stand-in variants).
THROUGHPUT_CLAIMS = (
    ("Compressed models generate faster than the uncompressed one (every CALDERA and QuIP# row vs dense)",
     lambda r: r["paper_method"] in ("CALDERA", "QuIP#"), lambda r: r["paper_method"] == "Uncompressed"),
    ("CALDERA generates slower than QuIP# (QuIP# faster than every CALDERA row)",
     lambda r: r["paper_method"] == "QuIP#", lambda r: r["paper_method"] == "CALDERA"),
    ("16-bit factors generate faster than 4-bit factors (CALDERA rank 64 B_LR 16 vs every 4-bit row)",
     lambda r: r["paper_method"] == "CALDERA" and r["b_lr"] == 16,
     lambda r: r["paper_method"] == "CALDERA" and r["b_lr"] == 4),
)


def _decide(tab: dict[str, Any], fast_rows: list, slow_rows: list, proto: str) -> tuple[str, list[str]]:
    fast = sorted({r["variant"] for r in fast_rows})
    slow = sorted({r["variant"] for r in slow_rows})
    pairs = [(a, b) for a in fast for b in slow if a != b]
    if not pairs:
        return "not testable at this scale", []
    margin = tab["settings"]["separation_margin"]
    detail, dirs = [], []
    for a, b in pairs:
        c = compare_repeats(tab["measured"][a][proto]["tokens_per_s"], tab["measured"][b][proto]["tokens_per_s"],
                            margin)
        dirs.append(c["direction"])
        word = {1: "faster", -1: "slower", 0: f"within {margin:.0%}"}[c["direction"]]
        detail.append(f"{a} / {b}: ×{c['ratio']:.2f} ({word})")
    verdict = "holds" if all(d > 0 for d in dirs) else "fails" if any(d < 0 for d in dirs) else "inconclusive"
    return verdict, detail


def throughput_claims(tab: dict[str, Any]) -> list[dict[str, Any]]:
    """Table 6's three ordering claims on the measured repeats (``tab``: :func:`build_throughput_table`).

    Per pair of variants (A claimed faster than B): faster / slower when their repeat ranges are apart by the
    table's ``settings["separation_margin"]`` (:func:`compare_repeats`), overlapping otherwise. A claim
    **holds** when every pair is faster, **fails** when any pair is slower, and is **inconclusive** otherwise;
    decided on the paper's protocol (single-token forward), with the KV-cache decoding verdict beside it. **not
    testable at this scale** when this run has no measured variant on one side.
    """
    rows = [r for r in tab["rows"] if r["variant"] in tab["measured"]]
    out = []
    for claim, is_fast, is_slow in THROUGHPUT_CLAIMS:
        fast = [r for r in rows if is_fast(r)]
        slow = [r for r in rows if is_slow(r)]
        verdicts = {p: _decide(tab, fast, slow, p) for p in PROTOCOLS}
        verdict, detail = verdicts[PROTOCOLS[0]]
        if verdict == "not testable at this scale":
            numbers = "no measured variant on one side of the comparison in this config"
            sdd = "—"
        else:
            runs = {len(m[p]["tokens_per_s"]) for m in tab["measured"].values() for p in PROTOCOLS}
            numbers = "; ".join(f"{PROTOCOL_LABEL[p]}: **{verdicts[p][0]}** — " + ", ".join(verdicts[p][1])
                                for p in PROTOCOLS) + " (median tokens/s ratio, repeat ranges)"
            n = min(runs)
            from math import comb

            sdd = (f"ranges of {n} repeats per variant must separate by {tab['settings']['separation_margin']:.0%} "
                   f"(the drift between jobs; exact rank test, one-sided p = 1/{comb(2 * n, n)}); see "
                   "table6_throughput.md for the spreads")
        out.append({"claim": claim, "source": "§5.4, Table 6", "verdict": verdict, "numbers": numbers, "sdd": sdd})
    return out
