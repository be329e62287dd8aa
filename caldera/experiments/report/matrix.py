"""Matrix-level report: the App. G.1 ablations and QuIP# on seeded LLM-like matrices.

``caldera matrix-report [--quick] [--out DIR]`` decomposes a seeded set of matrices with decaying spectra
and Hessians of condition number 1e2–1e4 (sizes up to 1024) with every method below and prints the
relative data-aware error ‖(Ŵ − W)Xᵀ‖_F / ‖WXᵀ‖_F (float64, the same regularized H for every method),
then checks the App. G.1 claims on the measured numbers. Results go to ``DIR/matrix_report.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caldera.algorithm.ldl import regularize_hessian
from caldera.arguments import IntOptionParser, int_option, out_of_range
from caldera.atomic import write_atomic
from caldera.experiments.report.claim_registry import FIGURE3, FINAL_ERROR, ClaimEntry, entries
from caldera.experiments.report.claim_rules import RELATIONS
from caldera.methods import get_method
from caldera.metrics import relative_data_aware_error
from caldera.synthetic import llm_like


@dataclass(frozen=True)
class Case:
    n: int
    d: int
    cond: float
    decay: float
    seed: int
    outliers: int = 0

    @property
    def name(self) -> str:
        return f"{self.n}x{self.d}-cond{self.cond:.0e}-decay{self.decay}-s{self.seed}"


CASES = [
    Case(256, 256, 1e2, 0.5, 0),
    Case(512, 256, 1e3, 0.7, 1, outliers=4),
    Case(576, 576, 1e3, 0.5, 2, outliers=8),
    Case(1536, 576, 1e4, 0.6, 3, outliers=8),
    Case(1024, 1024, 1e4, 0.5, 4, outliers=8),
]
QUICK_CASES = [Case(256, 256, 1e2, 0.5, 0), Case(512, 256, 1e3, 0.7, 1, outliers=4)]


def methods(rank: int, outer: int) -> dict[str, tuple[str, dict[str, Any]]]:
    it = {"rank": rank, "outer_iters": outer}
    return {
        "QuIP# 2-bit": ("quip#", {}),
        f"QuIP# + rank-{rank} fp16 LR": ("quip#-lr", {"lr_rank": rank}),
        "CALDERA 16-bit factors": ("caldera", {"preset": "16bit-factors", **it}),
        "CALDERA 4-bit factors": ("caldera", {"preset": "4bit-factors", **it}),
        "CALDERA 4-bit, no RHT": ("caldera", {"preset": "4bit-no-rht", **it}),
        "CALDERA 4-bit, no LDLQ": ("caldera", {"preset": "4bit-no-ldlq", **it}),
        "CALDERA 16-bit + Hessian update": ("caldera", {"preset": "16bit-hessian-update", **it}),
        "CALDERA paper preset (4-bit, Q first)": ("caldera", {"preset": "paper", **it}),
        "RTN 2-bit (per row)": ("rtn", {"bits": 2}),
        "GPTQ 2-bit (per row, sym)": ("gptq", {"bits": 2}),
        f"LoftQ NF2 + rank-{rank} fp16 LR": ("loftq", {"bits": 2, "rank": rank}),
    }


def run_case(case: Case, rank: int, outer: int) -> dict[str, Any]:
    W, H = llm_like(case.n, case.d, seed=case.seed, decay=case.decay, cond=case.cond, outliers=case.outliers)
    H_eval = regularize_hessian(H)
    out: dict[str, Any] = {"case": case.name, "errors": {}, "seconds": {}, "traces": {}}
    for label, (name, params) in methods(rank, outer).items():
        spec = get_method(name)
        t0 = time.perf_counter()
        dec = spec.fn(W, H, spec.make_config(params))
        out["seconds"][label] = time.perf_counter() - t0
        out["errors"][label] = relative_data_aware_error(dec.reconstruction(), W, H_eval)
        out["traces"][label] = [e["error"] for e in dec.error_trace]
    return out


#: the matrix report's comparison beside the registry's Figure 3 claims: 16-bit CALDERA against QuIP# without the
#: low-rank factors
VS_PLAIN_QUIP = ClaimEntry("16-bit CALDERA below QuIP# (no LR) in data-aware error", "App. G.1", FIGURE3,
                           FINAL_ERROR, "all", ("16bit-factors", "quip#"), "a < b")
#: the claims the report checks: :data:`VS_PLAIN_QUIP` and the Figure 3 claims of
#: :mod:`caldera.experiments.report.claim_registry`
MATRIX_CLAIMS = (VS_PLAIN_QUIP, *entries(FIGURE3))


def check_claims(rows: list[dict[str, Any]], rank: int) -> list[dict[str, Any]]:
    """The App. G.1 claims :data:`MATRIX_CLAIMS` as predicates on each case's measured errors: per claim, whether
    its relation holds between the errors of its two runs (a CALDERA preset or a QuIP# method, the label
    :func:`methods` gives it) in each case."""
    label = {params.get("preset", name): lab for lab, (name, params) in methods(rank, 1).items()}
    claims = []
    for e in MATRIX_CLAIMS:
        a, b = (label[run] for run in e.compares)
        per_case = {r["case"]: bool(RELATIONS[e.relation](r["errors"][a], r["errors"][b])) for r in rows}
        claims.append({"claim": e.claim, "holds_in": sum(per_case.values()), "of": len(per_case),
                       "per_case": per_case})
    return claims


def to_markdown(rows: list[dict[str, Any]], claims: list[dict[str, Any]], rank: int, outer: int) -> str:
    labels = list(rows[0]["errors"])
    lines = [f"# Matrix-level report (rank {rank}, T_out = {outer}, B_Q = 2)", "",
             "Relative data-aware error ‖(Ŵ − W)Xᵀ‖_F / ‖WXᵀ‖_F (lower is better); seconds in brackets.", "",
             "| method | " + " | ".join(r["case"] for r in rows) + " |",
             "|---|" + "---|" * len(rows)]
    for lab in labels:
        cells = [f"{r['errors'][lab]:.4f} ({r['seconds'][lab]:.1f}s)" for r in rows]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    lines += ["", "## Claims of Appendix G.1", "", "| claim | holds in |", "|---|---|"]
    for c in claims:
        lines.append(f"| {c['claim']} | {c['holds_in']}/{c['of']} cases |")
    return "\n".join(lines) + "\n"


#: the most outer iterations (T_out) the report runs: the paper's ablations run 15; a larger value is a typo
#: (e.g. 1500) that would take hours before anything is written
MAX_OUTER_ITERS = 100


def build_parser() -> IntOptionParser:
    """The report's options: ``--rank`` >= 1 (below the smallest matrix dimension of the cases run: checked by
    :func:`parse_args`) and ``--outer-iters`` in ``[1, MAX_OUTER_ITERS]``, typed and bounded before any work."""
    ap = IntOptionParser(prog="caldera matrix-report", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small matrices, T_out = 3 (a smoke run)")
    ap.add_argument("--rank", type=int_option(1, meaning="rank of the low-rank factors"), default=64,
                    help="rank of the low-rank factors (default 64; below the smallest matrix dimension)")
    ap.add_argument("--outer-iters", type=int_option(1, MAX_OUTER_ITERS, "T_out, the outer iterations"),
                    default=None, help=f"T_out (default 15, quick: 3; at most {MAX_OUTER_ITERS})")
    ap.add_argument("--out", type=Path, default=Path("results/matrix_report"))
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed options (:func:`build_parser`), ``--rank`` also checked against the cases it would run
    (``--quick``: :data:`QUICK_CASES`, else :data:`CASES`): a rank above a matrix's smaller dimension has no
    factors of that rank, refused by the parser (exit 2) naming the bounds and the case."""
    ap = build_parser()
    args = ap.parse_args(argv)
    cases = QUICK_CASES if args.quick else CASES
    smallest = min(cases, key=lambda c: min(c.n, c.d))
    top = min(smallest.n, smallest.d) - 1  # caldera.validation.check_rank: 1 <= rank < min(n, d)
    if args.rank > top:
        meaning = f"rank of the low-rank factors, below the smallest matrix dimension: {smallest.name}"
        ap.error("argument --rank: " + out_of_range(args.rank, 1, top, meaning))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = QUICK_CASES if args.quick else CASES
    outer = args.outer_iters or (3 if args.quick else 15)
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        rows.append(run_case(case, args.rank, outer))
        print(f"{case.name}: done in {time.perf_counter() - t0:.1f}s", flush=True)
    claims = check_claims(rows, args.rank)
    md = to_markdown(rows, claims, args.rank, outer)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "matrix_report.md", md)
    write_atomic(args.out / "matrix_report.json", json.dumps({"rows": rows, "claims": claims}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
