"""Table 5 of the paper (LoRA fine-tuning of CALDERA's factors): this run's measured rows beside the paper's, from
the small result files of the ``lora_finetune`` jobs (:mod:`caldera.experiments.jobs.loraft`) and the evaluations
of their starting models."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from caldera import stats
from caldera.experiments.planning.loraft_rows import (
    CLS_TASKS,
    LM_TASK,
    TABLE,
    TASKS,
    LoraRow,
    dense_variant_id,
    lora_rows,
    lora_settings,
    ref_rows,
    row_for,
)
from caldera.experiments.planning.settings import EvalSettings, LoraFtSettings, RunContext
from caldera.experiments.planning.variants import RHTFT_SUFFIX
from caldera.experiments.report.table_render import ARROW, HASH, PERCENT, UNDERSCORE, render_table_texts

COLUMNS = {"wiki": "wiki2_ppl", "rte": "rte_acc", "winogrande": "wino_acc"}


def _baseline(results_dir: Path, variant: str, task: str) -> dict[str, Any] | None:
    """The un-fine-tuned model's result on the same eval set (Tables 1–2's evaluation files)."""
    if task == LM_TASK:
        p = results_dir / "eval" / variant / "ppl_wiki.json"
        if not p.exists():
            return None
        r = json.loads(p.read_text())
        return {"value": r["ppl"], "ci": [r["ppl_lo"], r["ppl_hi"]], "window_nll": r["window_nll"],
                "window_tokens": r["window_tokens"]}
    p = results_dir / "eval" / variant / "zeroshot.json"
    if not p.exists():
        return None
    t = json.loads(p.read_text())["results"]["tasks"].get(CLS_TASKS[task])
    if not t or not t.get("docs"):
        return None
    docs = t["docs"]
    ci = stats.accuracy_interval([d["acc"] for d in docs])
    return {"value": 100 * ci["estimate"], "ci": [100 * ci["lo"], 100 * ci["hi"]],
            "doc_id": [d["doc_id"] for d in docs], "correct": [int(d["acc"]) for d in docs]}


@dataclasses.dataclass(frozen=True)
class Table5Plan:
    """What Table 5's job needs, built when the plan is made (:meth:`from_config`; rule lora_table's ``plan``
    param): each paper row with the row this run maps it to (:func:`row_for`; None: reference only), the ids of
    the rows this run measures (:func:`lora_rows`), the run (name, model labels, ``local_data``), the ``lora_ft``
    and ``eval`` settings."""

    paper_rows: list[tuple[dict[str, Any], LoraRow | None]]
    measured: frozenset[str]
    run: RunContext
    settings: LoraFtSettings
    eval: EvalSettings

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Table5Plan:
        return cls(paper_rows=[(ref, row_for(config, ref)) for ref in ref_rows()],
                   measured=frozenset(r.id for r in lora_rows(config)), run=RunContext.from_config(config),
                   settings=lora_settings(config), eval=EvalSettings.from_block(config["eval"]))


def build_table5(results_dir: str | Path, plan: Table5Plan) -> dict[str, Any]:
    """Every paper row of Table 5 with this run's measurement where there is one (best-on-held-out and final
    checkpoint, with 95 % intervals), the un-fine-tuned compressed and dense results on the same evaluation
    sets (for the claim), the average bits from the App. E.5 formula, and each row's status."""
    results_dir = Path(results_dir)
    rows = []
    for ref, r in plan.paper_rows:
        entry: dict[str, Any] = {"paper": {k: ref.get(k) for k in ("model", "method", "rank", "b_q", "b_lr",
                                                                    "ft_rank", "rht_ft", "avg_bits", "wiki2_ppl",
                                                                    "rte_acc", "wino_acc", "note")}}
        if r is None:
            entry["status"] = ("needs RHT-FT (config rht_ft block)" if ref["method"] == "CALDERA"
                               else "reference (paper's number, not run here)")
            rows.append(entry)
            continue
        entry.update(row=r.id, variant=r.variant.id, stand_in=plan.run.models[r.variant.model].label,
                     rank=r.variant.rank, ft_rank=r.ft_rank, avg_bits=r.avg_bits)
        if r.id not in plan.measured:
            entry["status"] = f"pending in {plan.run.name} (lora_ft.rows; runs in mini-full)"
            rows.append(entry)
            continue
        entry["status"] = ("measured" if ref["method"] == "CALDERA" else
                           "measured with this project's loftq method; the paper's number is LoftQ's (reference)")
        dense = dense_variant_id(r.variant.model)
        for task in TASKS:
            p = results_dir / "lora" / r.id / f"{task}.json"
            res = json.loads(p.read_text()) if p.exists() else None
            entry[task] = None if res is None else {
                "best": res["best"], "final": res["final"], "best_step": res["best_step"],
                "final_step": res["final_step"], "data": res["data"]}
            entry[f"{task}_no_ft"] = _baseline(results_dir, r.variant.id, task)
            entry[f"{task}_dense"] = _baseline(results_dir, dense, task)
        rows.append(entry)
    return {"table": TABLE, "rows": rows, "config": plan.settings.as_block(),
            "stats": {"level": stats.LEVEL, "resamples": stats.RESAMPLES, "seed": stats.SEED}}


def _cell(x: dict[str, Any] | None, nd: int) -> str:
    if not x:
        return "—"
    return f"{x['value']:.{nd}f} [{x['ci'][0]:.{nd}f}, {x['ci'][1]:.{nd}f}]"


def _paper(v: Any) -> str:
    return "—" if v in (None, "") else str(v)


def _data_note(plan: Table5Plan) -> str:
    """Where each task's training / held-out / evaluation data come from (the caption's Data sentence)."""
    tasks, limit = plan.settings.as_block()["tasks"], plan.eval.zeroshot.limit
    ev = "all the validation documents" if limit is None else f"the first {limit} validation documents"
    cls = [t for t in CLS_TASKS if tasks[t].get("train_split") is None]
    hub = [t for t in CLS_TASKS if t not in cls]
    parts = []
    if cls:
        parts.append(f"{' / '.join(cls)}: the wheel has no train split nor request files, so the validation "
                     f"documents are split disjointly (eval = {ev}, the zero-shot documents; held-out and train "
                     "drawn from the rest)")
    if hub:
        parts.append(f"{' / '.join(hub)}: eval = {ev} (the zero-shot documents); held-out and train drawn "
                     f"disjointly from {'the local copy (local_data) of ' if plan.run.local_data else ''}"
                     f"the hub's {', '.join(repr(tasks[t]['train_split']) for t in hub)} split")
    wiki = tasks[LM_TASK]
    from caldera.experiments.report.corpora import corpus_name

    src = (plan.eval.as_block()["ppl"].get("wiki") or {}).get("source")
    what = f"Wiki ({corpus_name(src)})" if src else "Wiki"
    if wiki.get("train_source") is None:
        parts.append(f"{what}: eval windows = Tables 1–2's, held-out and train blocks follow them in the same stream")
    else:
        held = wiki.get("heldout_source") or f"the first blocks of {wiki['train_source']}"
        parts.append(f"{what}: eval windows = Tables 1–2's; train = {wiki['train_source']}, held-out = {held}")
    return "; ".join(parts)


def render_table5(tab: dict[str, Any], plan: Table5Plan) -> tuple[str, str, str, str]:
    """Markdown, LaTeX, CSV and the caption."""
    cfg = plan.settings.as_block()
    tasks = cfg["tasks"]
    rht_measured = any(e.get("row", "").find(RHTFT_SUFFIX) >= 0 and e["status"] == "measured" for e in tab["rows"])
    rht_note = ("RHT FT Yes: the row's compressed model with its RHT signs fine-tuned first (rule rht_finetune, "
                "config rht_ft, as Tables 3–4), then LoRA; its 'no FT' is the RHT-fine-tuned model without LoRA"
                + ("." if rht_measured else f"; these rows are pending in {plan.run.name} (CPU time, see config "
                                             "lora_ft) and run in mini-full."))
    ft_dtype = plan.settings.ft_dtype
    caption = (
        f"{TABLE}: CALDERA with the top-r singular components of L R fine-tuned in 16-bit ({ft_dtype}) "
        "and the other k − r re-quantized at B_LR (the paper's text names the fine-tuned factors L₂, R₂; App. "
        "E.5's formula (k − r)·B_LR + 16·r charges 16 bits to the rank-r part, which is how it is read here). "
        "Avg bits: that formula on the stand-in's shapes. Ours: best of the "
        f"{cfg['n_checkpoints']} checkpoints chosen on a held-out split (never the evaluation set) / the final "
        "checkpoint, each value [95 % interval: perplexity Student's t over the evaluation windows, accuracy Wilson "
        "over the documents]; 'no FT': the row's model before LoRA (compressed, RHT-fine-tuned or LoftQ), "
        "'dense': the stand-in uncompressed, both evaluated by the workflow's evaluate rule on "
        "the same windows / documents (zero-shot log-likelihood accuracy for RTE/Winogrande). Data: "
        + _data_note(plan) + ". Hyper-parameters (App. E.4, config lora_ft.tasks): "
        + "; ".join(f"{t}: " + ", ".join(f"{k} {v}" for k, v in s.items()) for t, s in tasks.items())
        + ". LoftQ (ours): this project's loftq method (NF backbone, 16-bit factors) fine-tuned the same way. "
        + rht_note)
    head = ["Method", "Paper model → stand-in", "Rank (paper → ours)", "r (ft)", "B_Q", "B_LR", "RHT FT",
            "Avg bits (paper / ours)", "Wiki2 ppl (paper / ours best / final / no FT / dense)",
            "RTE acc", "Wino acc", "status"]
    csv_head = (["method", "paper_model", "stand_in", "paper_rank", "rank", "ft_rank", "b_q", "b_lr", "rht_ft",
                 "avg_bits_paper", "avg_bits_ours"]
                + [f"{c}_{s}" for c in COLUMNS.values() for s in ("paper", "best", "best_lo", "best_hi", "final",
                                                                   "final_lo", "final_hi", "no_ft", "dense")]
                + ["status"])
    rows, csv_rows = [], []
    for e in tab["rows"]:
        p = e["paper"]
        meth = p["method"] + (" (ours)" if e.get("variant", "").find("loftq") >= 0 else "")
        cells = [meth, f"{p['model']} → {e.get('stand_in', '—')}", f"{p['rank']} → {e.get('rank', '—')}",
                 f"{_paper(p['ft_rank'])} → {e.get('ft_rank', '—')}", _paper(p["b_q"]), _paper(p["b_lr"]),
                 "Yes" if p["rht_ft"] else ("No" if p["rht_ft"] is False else "—"),
                 f"{_paper(p['avg_bits'])} / " + (f"{e['avg_bits']:.2f}" if "avg_bits" in e else "—")]
        csvrow = [p["method"], p["model"], e.get("stand_in"), p["rank"], e.get("rank"), e.get("ft_rank"), p["b_q"],
                  p["b_lr"], p["rht_ft"], p["avg_bits"], e.get("avg_bits")]
        for task, col in COLUMNS.items():
            nd = 2 if task == LM_TASK else 1
            m = e.get(task)
            if m:
                cells.append(f"{_paper(p[col])} / {_cell(m['best'], nd)} / {_cell(m['final'], nd)} / "
                             f"{_cell(e.get(task + '_no_ft'), nd)} / {_cell(e.get(task + '_dense'), nd)}")
                csvrow += [p[col], m["best"]["value"], *m["best"]["ci"], m["final"]["value"], *m["final"]["ci"],
                           (e.get(task + "_no_ft") or {}).get("value"), (e.get(task + "_dense") or {}).get("value")]
            else:
                cells.append(f"{_paper(p[col])} / —")
                csvrow += [p[col]] + [None] * 8
        cells.append(e["status"])
        csvrow.append(e["status"])
        rows.append(cells)
        csv_rows.append(csvrow)
    md, tex, csv_text = render_table_texts(caption, head, rows, csv_head, csv_rows, (UNDERSCORE, ARROW),
                                           (HASH, ARROW, UNDERSCORE, PERCENT))
    return md, tex, csv_text, caption


def write_table5(results_dir: str, plan: Table5Plan, out_md: str, out_tex: str, out_csv: str,
                 out_json: str) -> dict[str, Any]:
    """Table 5 (:func:`build_table5`) with its caption, as md / tex / csv / json."""
    from caldera.experiments.report.tables import write_table_files

    tab = build_table5(results_dir, plan)
    *rendered, caption = render_table5(tab, plan)
    write_table_files(tab, caption, tuple(rendered), out_md, out_tex, out_csv, out_json)
    return tab


def lora_inputs(config: dict[str, Any], res: str) -> list[str]:
    """Files the Table 5 rule reads: every measured (row, task) result and the baselines' evaluations (every
    row's un-fine-tuned model; the dense model where this run's tables evaluate it)."""
    from caldera.experiments.planning.plan import all_variants

    run_variants = all_variants(config)
    files = []
    for r in lora_rows(config):
        files += [f"{res}/lora/{r.id}/{t}.json" for t in TASKS]
        files += [f"{res}/eval/{r.variant.id}/ppl_wiki.json", f"{res}/eval/{r.variant.id}/zeroshot.json"]
        d = dense_variant_id(r.variant.model)
        if d in run_variants:  # the dense baseline, where this run's tables evaluate it
            files += [f"{res}/eval/{d}/ppl_wiki.json", f"{res}/eval/{d}/zeroshot.json"]
    return sorted(set(files))
