"""The zero-shot design of a regime, from measured per-document spreads at 80 % power
(``caldera.experiments.planning.zeroshot_design``).

Reads per-document zero-shot records (``caldera eval zeroshot --model M --limit N --out F``; the documents are the
same for every model: the first N of each task) of the dense model and of the variants a claim compares, and a
table JSON of the run whose rows give the paper's accuracies of those variants' rows; writes, per task, whether
each model scores above chance, and per comparison the documents its paired accuracy difference needs to resolve
the paper's own effect with 80 % power (per task and all tasks pooled, as the claims pool them)::

    python benchmarks/zeroshot_design.py --table results/mini/tables/table1_llama2_zeroshot_regime.json \\
        --docs smollm2-dense=zs/dense.json smollm2-caldera-r32-lr4-q3=zs/c32.json ... \\
        --pair smollm2-caldera-r32-lr4-q3 smollm2-quipsharp-lr-r8-lr16-q3 --limit 100 \\
        --out benchmarks/results/zeroshot_design_regime.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from caldera.atomic import write_atomic, write_json
from caldera.experiments.planning.zeroshot_design import POWER, chance_of, chance_reading, columns, pair_design
from caldera.experiments.report.table_claims import paper_accuracy_effect


def _records(path: str) -> dict[str, list[dict[str, Any]]]:
    """``{task: per-document rows}`` of a ``caldera eval zeroshot --out`` file."""
    data = json.loads(Path(path).read_text())
    tasks = data.get("tasks") or data.get("results", {}).get("tasks") or {}
    out = {t: r["docs"] for t, r in tasks.items() if r.get("docs")}
    if not out:
        raise SystemExit(f"{path}: no per-document rows (write it with caldera eval zeroshot --out)")
    return out


def _paper_rows(table: dict[str, Any], a: str, b: str) -> tuple[dict | None, dict | None, str | None]:
    """The rows of ``a`` and ``b`` in the first paper-model block of ``table`` that has both."""
    for pm in dict.fromkeys(r["paper_model"] for r in table["rows"]):
        block = {r["variant"]: r for r in table["rows"] if r["paper_model"] == pm and r.get("variant")}
        if a in block and b in block:
            return block[a], block[b], pm
    return None, None, None


def above_chance(readings: dict[str, dict[str, Any]]) -> list[str]:
    """The tasks of one model's chance readings that it scores above chance."""
    return sorted(t for t, r in readings.items() if r["reading"] == "above chance")


def design(table: dict[str, Any], docs: dict[str, dict[str, list]], pairs: list[tuple[str, str]],
           sizes: dict[str, int], dense: str | None = None) -> dict[str, Any]:
    """Chance readings of every model, and per pair the documents for 80 % power over every task and, with
    ``dense`` (the docs entry of the pairs' dense model), over the tasks it scores above chance (``above_chance``:
    the claims' pool under ``zeroshot_claims``, the paper's effect read from those tasks' columns)."""
    readings = {m: {t: chance_reading([r["acc"] for r in rows], chance_of(rows)) for t, rows in sorted(d.items())}
                for m, d in docs.items()}
    out = {"power": POWER, "chance": readings, "pairs": []}
    for a, b in pairs:
        ra, rb, pm = _paper_rows(table, a, b)
        effect = paper_accuracy_effect(ra, rb)
        da, db = ({t: columns(r) for t, r in docs[v].items()} for v in (a, b))
        entry = {"a": a, "b": b, "paper_model": pm, "paper_effect": effect, **pair_design(da, db, effect, sizes)}
        if dense is not None:
            tasks = above_chance(readings[dense])
            eff = paper_accuracy_effect(ra, rb, tasks=tasks)
            keep = pair_design({t: da[t] for t in tasks if t in da}, {t: db[t] for t in tasks if t in db}, eff, sizes)
            entry["above_chance"] = {"dense": dense, "tasks": tasks, "paper_effect": eff, **keep.get("pooled", {})}
        out["pairs"].append(entry)
    return out


def _need(n: int | None) -> str:
    return "beyond the task's documents" if n is None else str(n)


def to_markdown(res: dict[str, Any], command: str, limit: int, sizes: dict[str, int]) -> str:
    models = list(res["chance"])
    tasks = sorted({t for m in models for t in res["chance"][m]})
    lines = ["# Zero-shot design in the stand-in's regime, at 80 % power", "",
             f"Command: `{command}`. {limit} documents per task (the first of each task, the same for every model); "
             "chance: one over each document's choices; 95 % Wilson intervals. Documents for 80 % power: the paired "
             "per-document accuracy difference's spread measured here against the paper's own accuracy difference "
             "of the two rows (per task, all tasks pooled, and the tasks the dense model scores above chance pooled: "
             "the claims' pool under `zeroshot_claims`), documents only: a lower bound, the seeds add to it "
             "(`caldera.experiments.planning.zeroshot_design`).", "",
             "## Accuracy against chance", "",
             "| task | chance | documents | " + " | ".join(models) + " |",
             "|---|---|---|" + "---|" * len(models)]
    for t in tasks:
        first = next(res["chance"][m][t] for m in models if t in res["chance"][m])
        cells = []
        for m in models:
            r = res["chance"][m].get(t)
            cells.append("—" if r is None else
                         f"{100 * r['acc']:.1f} [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}] {r['reading']}")
        lines.append(f"| {t} | {100 * first['chance']:.1f} | {first['n']} of {sizes.get(t, '?')} | "
                     + " | ".join(cells) + " |")
    for p in res["pairs"]:
        eff = "—" if p["paper_effect"] is None else f"{100 * p['paper_effect']:+.2f} points"
        lines += ["", f"## {p['a']} − {p['b']} ({p['paper_model']}; the paper's accuracy difference {eff})", "",
                  "| tasks | paired documents here | mean difference here (points) | per-document sd | "
                  "documents for 80 % power |", "|---|---|---|---|---|"]
        for t, r in p["tasks"].items():
            lines.append(f"| {t} | {r['n']} | {100 * r['mean_acc']:+.1f} | {r['sd_acc']:.3f} | "
                         f"{_need(r['need_acc'])} (of {sizes.get(t, '?')}) |")
        if "pooled" in p:
            r = p["pooled"]
            lines.append(f"| all pooled | {r['n']} | {100 * r['mean_acc']:+.1f} | {r['sd_acc']:.3f} | "
                         f"{_need(r['need_acc'])} (of {sum(sizes.get(t, 0) for t in p['tasks'])}) |")
        r = p.get("above_chance")
        if r and "n" in r:
            eff = "—" if r["paper_effect"] is None else f"{100 * r['paper_effect']:+.2f}"
            lines.append(f"| {', '.join(r['tasks'])} pooled (above chance for {r['dense']}; the paper's difference "
                         f"there {eff} points) | {r['n']} | {100 * r['mean_acc']:+.1f} | {r['sd_acc']:.3f} | "
                         f"{_need(r['need_acc'])} (of {sum(sizes.get(t, 0) for t in r['tasks'])}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True, help="a table JSON of the run (its rows' paper accuracies)")
    ap.add_argument("--docs", nargs="+", required=True, metavar="VARIANT=FILE",
                    help="per-document records of each model (caldera eval zeroshot --out)")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="a compared pair of variants (repeat)")
    ap.add_argument("--dense", default=None, metavar="NAME",
                    help="the --docs entry of the pairs' dense model: each pair also pooled over the tasks it scores "
                         "above chance (the claims' pool under zeroshot_claims)")
    ap.add_argument("--limit", type=int, required=True, help="the documents per task the records were made with")
    ap.add_argument("--out", required=True, help="the record, .md (a .json beside it)")
    args = ap.parse_args(argv)
    from caldera.eval.zeroshot import task_size

    docs = {}
    for item in args.docs:
        name, _, path = item.partition("=")
        if not path:
            ap.error(f"--docs {item!r}: write VARIANT=FILE")
        docs[name] = _records(path)
    missing = sorted({v for p in args.pair for v in p} - set(docs) | ({args.dense} - set(docs) - {None}))
    if missing:
        ap.error(f"--pair / --dense name {missing} without --docs records")
    sizes = {t: task_size(t) for t in sorted({t for d in docs.values() for t in d})}
    res = design(json.loads(Path(args.table).read_text()), docs, [tuple(p) for p in args.pair], sizes, args.dense)
    command = "python benchmarks/zeroshot_design.py " + " ".join(sys.argv[1:] if argv is None else argv)
    write_atomic(args.out, to_markdown(res, command, args.limit, sizes))
    write_json(str(Path(args.out).with_suffix(".json")), res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
