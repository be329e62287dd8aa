"""Paper tables with this run's measurements beside the paper's numbers (Markdown, LaTeX, CSV).

Reads only small JSON results (``results/<run>/eval/<variant>/{ppl_wiki,ppl_c4,zeroshot}.json`` and
``results/<run>/compressed/<variant>/summary.json``), so restyling never recomputes. Average bits are
computed with the App. E.5 formula from the stand-in's shapes and the mapped rank — never copied.

Every measured perplexity is printed with its 95 % bootstrap-over-windows interval and every accuracy with its
95 % Wilson interval (:mod:`caldera.stats`). The table JSON also carries, per variant, the per-window
perplexity results and the per-document zero-shot results (``samples``), so that
:mod:`caldera.experiments.report.table_claims`
compares variants with paired intervals without reading the evaluation folders.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from caldera import stats
from caldera.atomic import write_atomic
from caldera.bits import CONFIG_SHAPES, average_bits
from caldera.experiments.planning.plan import (
    RHTFT_SUFFIX,
    RHTFT_TABLES,
    all_variants,
    claim_tasks,
    is_random,
    method_family,
    replicate_variants,
    table_rows,
)
from caldera.experiments.planning.regime_rows import base_table, is_regime_table
from caldera.experiments.planning.settings import CalibrationSettings, EvalSettings, RhtFtSettings, RunContext
from caldera.experiments.report.table_render import ARROW, HASH, PERCENT, PLUS_MINUS, UNDERSCORE, render_table_texts

TASK_COLUMNS = {  # paper column -> (our task, metric for tables 1–2: acc; Mistral table: as its header says)
    "wino_acc": ("caldera_winogrande", "acc"),
    "rte_acc": ("caldera_rte", "acc"),
    "piqa_acc": ("caldera_piqa", "acc"),
    "arce_acc": ("caldera_arc_easy", "acc"),
    "arcc_acc": ("caldera_arc_challenge", "acc"),
}
ACC_NORM_TABLES = {"table7_mistral": {"piqa_acc", "arce_acc", "arcc_acc"}}
#: per-window sums of the paired metrics against the dense model (caldera.eval.distribution) → table column
DISTRIBUTION_COLUMNS = {"window_kl": "wiki2_kl", "window_dlogp": "wiki2_dlogp", "window_top1": "wiki2_top1"}
DISTRIBUTION_KEYS = tuple(DISTRIBUTION_COLUMNS)


@dataclasses.dataclass(frozen=True)
class TablePlan:
    """What one zero-shot table's job needs, built when the plan is made (:meth:`from_config`; rule make_table's
    ``plan`` param): the table's ``rows`` (:func:`caldera.experiments.planning.plan.table_rows`: paper row, variant,
    and an
    RHT-FT row's base), each row variant's seed ``replicates``
    (:func:`~caldera.experiments.planning.plan.replicate_variants`,
    the variant first), the run's name and model entries (labels, shapes), the ``eval`` settings, the ``rht_ft``
    settings (None without the block) and the calibration settings (the RHT-FT tables' captions)."""

    table: str
    rows: list[dict[str, Any]]
    replicates: Mapping[str, list[Any]]
    run: RunContext
    eval: EvalSettings
    rht_ft: RhtFtSettings | None
    calibration: CalibrationSettings
    #: the zero-shot tasks each model's claims pool (``zeroshot_claims.tasks``; a model absent: every task)
    claim_tasks: Mapping[str, list[str]] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], table: str) -> TablePlan:
        """The plan of ``table`` under ``config`` (validated: defaults filled by the schema)."""
        reps = replicate_variants(config, all_variants(config))
        rows = table_rows(config, table)
        used = {v.id for r in rows for v in (r.get("variant"), r.get("base")) if v is not None}
        return cls(table=table, rows=rows, replicates={k: v for k, v in reps.items() if k in used},
                   run=RunContext.from_config(config), eval=EvalSettings.from_block(config["eval"]),
                   rht_ft=RhtFtSettings.from_block(config["rht_ft"]) if config.get("rht_ft") else None,
                   calibration=CalibrationSettings.from_block(config["calibration"]),
                   claim_tasks=claim_tasks(config))


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def bits_label(b: Any) -> int | float | str:
    """B_LR as the paper prints it: 4 / 16 (the paper-table data hold floats), "—" where it has none."""
    if b in (None, "", "—"):
        return "—"
    f = float(b)
    return int(f) if f.is_integer() else f


def _ppl_interval(r: dict[str, Any]) -> list[float] | None:
    if "ppl_lo" in r:
        return [r["ppl_lo"], r["ppl_hi"]]
    if "window_nll" in r:
        ci = stats.perplexity_interval(r["window_nll"], r["window_tokens"])
        return [ci["lo"], ci["hi"]]
    return None


def variant_samples(results_dir: Path, variant: str) -> dict[str, Any]:
    """Per-window perplexity and per-document zero-shot results of one variant (what paired comparisons need):
    ``{"ppl": {corpus: {"window_nll", "window_tokens"}}, "zeroshot": {task: {"doc_id", "acc", ["acc_norm"],
    "margin"}}}`` (empty parts when an evaluation file predates per-sample results)."""
    out: dict[str, Any] = {"ppl": {}, "zeroshot": {}}
    for path in sorted((results_dir / "eval" / variant).glob("ppl_*.json")):
        r = _load(path)
        if r and "window_nll" in r:
            out["ppl"][path.stem.removeprefix("ppl_")] = {k: r[k] for k in ("window_nll", "window_tokens",
                                                                            *DISTRIBUTION_KEYS) if k in r}
    zs = _load(results_dir / "eval" / variant / "zeroshot.json")
    for task, t in ((zs or {}).get("results", {}).get("tasks", {})).items():
        docs = t.get("docs")
        if not docs:
            continue
        row = {"doc_id": [d["doc_id"] for d in docs], "acc": [d["acc"] for d in docs],
               "margin": [d["margin"] for d in docs]}
        if all("acc_norm" in d for d in docs):
            row["acc_norm"] = [d["acc_norm"] for d in docs]
        out["zeroshot"][task] = row
    return out


#: the method label of an ``extra_methods`` row, and the note of one whose Q is stored as floats, not codes
EXTRA_LABEL = " (ours only)"
Q_DENSE_LABEL = ", Q stored dense"


def stored_scheme(bits: dict[str, Any]) -> dict[str, Any]:
    """Rank, B_LR and whether Q is stored as floats, from a compression's ``bits`` summary (:func:`variant_bits`):
    ``rank`` the matrices' common rank ("per matrix" where they differ, "—" without a summary of them), ``b_lr`` the
    factors' stored width ("—" without factors), ``q_dense`` true when any matrix keeps Q as a float tensor."""
    if "rank" not in bits and "n_matrices_compressed" not in bits:
        return {"rank": "—", "b_lr": "—", "q_dense": False}
    rank = bits.get("rank", "per matrix")
    b_lr = bits_label(bits.get("b_lr")) if rank != 0 else "—"
    dense = bits.get("dense_q_matrices")
    return {"rank": rank, "b_lr": b_lr,
            "q_dense": bool(dense) if dense is not None else float(bits.get("b_q") or 0) >= 16}


def variant_bits(results_dir: Path, v: Any) -> dict[str, Any]:
    """The ``bits`` of a compressed variant's ``compressed/<id>/summary.json`` (:func:`caldera.pipeline.compress.
    bits_summary`: ``average_bits`` = the paper's formula, ``storage_bits_per_weight`` = codes, scales and signs as
    stored); ``{}`` when it is missing. An RHT fine-tuned variant (id + :data:`RHTFT_SUFFIX`) is its base variant's
    compression with every sign held as a float32 parameter instead of one packed bit: 31 bits more per sign
    (``n_sign_params`` of its ``rhtft.json``), as :meth:`CompressedLinear.storage_bits` counts them."""
    base = v.id.removesuffix(RHTFT_SUFFIX)
    bits = dict(((_load(results_dir / "compressed" / base / "summary.json") or {}).get("bits") or {}))
    if base != v.id and "storage_bits_per_weight" in bits:
        ft = _load(results_dir / "rhtft" / base / "rhtft.json")
        if ft is None or not bits.get("compressed_params"):
            bits.pop("storage_bits_per_weight")
        else:
            bits["storage_bits_per_weight"] += 31 * ft["n_sign_params"] / bits["compressed_params"]
    return bits


def _seed_stack(samples: list[dict[str, Any]], kind: str, key: str) -> dict[str, Any] | None:
    """Per-seed results of one corpus (``kind="ppl"``) or task (``"zeroshot"``) stacked over the seeds that have
    it: ``{"seeds": [index into samples], …}`` with ``window_nll`` (S, W) + ``window_tokens`` (W) for a corpus,
    ``doc_id`` (D) + ``acc`` / ``acc_norm`` / ``margin`` (S, D) on the documents every such seed scored, for a
    task. None when no seed has it."""
    have = [(i, s[kind][key]) for i, s in enumerate(samples) if key in s.get(kind, {})]
    if not have:
        return None
    if kind == "ppl":
        return {"seeds": [i for i, _ in have], "window_nll": [r["window_nll"] for _, r in have],
                "window_tokens": have[0][1]["window_tokens"]}
    docs = [d for d in have[0][1]["doc_id"] if all(d in r["doc_id"] for _, r in have)]
    out: dict[str, Any] = {"seeds": [i for i, _ in have], "doc_id": docs}
    for m in ("acc", "acc_norm", "margin"):
        if all(m in r for _, r in have):
            out[m] = [[dict(zip(r["doc_id"], r[m]))[d] for d in docs] for _, r in have]
    return out


def distribution_cells(samples: list[dict[str, Any]], random: bool) -> dict[str, Any]:
    """The paired-metric columns of one variant (:data:`DISTRIBUTION_COLUMNS`) from its realizations' Wiki2
    samples: the token-weighted mean over seeds with the interval of :func:`caldera.stats.seeded_weighted_mean`
    (top-1 agreement in %); empty when no realization has them."""
    wikis = [s["ppl"].get("wiki") or {} for s in samples]
    wikis = [w for w in wikis if all(k in w for k in DISTRIBUTION_KEYS)]
    if not wikis:
        return {}
    out: dict[str, Any] = {}
    for key, col in DISTRIBUTION_COLUMNS.items():
        ci = stats.seeded_weighted_mean([w[key] for w in wikis], wikis[0]["window_tokens"],
                                        random=random and len(wikis) > 1)
        scale = 100.0 if key == "window_top1" else 1.0
        out[col], out[f"{col}_ci"] = scale * ci["estimate"], [scale * ci["lo"], scale * ci["hi"]]
    return out


def measured_row(results_dir: Path, run: RunContext, table: str, row: dict[str, Any],
                 replicates: list[Any] | None = None) -> dict[str, Any]:
    """This run's numbers for one table row: ``{column: value}`` with ``column + "_ci"`` → ``[lo, hi]`` (95 %)
    beside every perplexity and accuracy (accuracies and their intervals in %), and ``"seeds"``: how many
    compression realizations each kind of number averages (``{"ppl": S, "zeroshot": S}``).

    ``replicates``: the row variant's realizations (:func:`caldera.experiments.planning.plan.replicate_variants`, the
    variant first). With several, a perplexity is the geometric mean across seeds and an accuracy the mean, each
    with the interval that combines windows / documents and seeds (:func:`caldera.stats.seeded_perplexity`,
    :func:`caldera.stats.seeded_accuracy`); with one, the window / Wilson interval of that realization."""
    v = row["variant"]
    out: dict[str, Any] = {}
    if v is None:
        return out
    stand = run.models[v.model]
    out["avg_bits"], out["storage_bits"] = None, None
    if v.method != "dense":
        bits = variant_bits(results_dir, v)
        out["storage_bits"] = bits.get("storage_bits_per_weight")
        if v.method in ("caldera", "quip#-lr", "quip#"):
            out["avg_bits"] = average_bits(CONFIG_SHAPES[stand.shapes], int(getattr(v.config, "q_bits", 2)),
                                           v.b_lr or 16, v.rank)
        else:  # any other method: the formula over the model's shapes as its compression wrote it
            out["avg_bits"] = bits.get("average_bits")
    reps = replicates or [v]
    samples = [variant_samples(results_dir, r.id) for r in reps]
    random = is_random(v)
    seeds = {"ppl": 1, "c4": 1, "zeroshot": 1}  # realizations behind each value ("ppl": Wiki2's)
    for corpus in ("wiki", "c4"):
        r = _load(results_dir / "eval" / v.id / f"ppl_{corpus}.json")
        stack = _seed_stack(samples, "ppl", corpus) if len(reps) > 1 else None
        if stack is not None and len(stack["seeds"]) > 1:
            ci = stats.seeded_perplexity(stack["window_nll"], stack["window_tokens"], random=random)
            out[f"{corpus}_ppl"], out[f"{corpus}_ppl_ci"] = ci["estimate"], [ci["lo"], ci["hi"]]
            seeds["ppl" if corpus == "wiki" else corpus] = len(stack["seeds"])
            continue
        out[f"{corpus}_ppl"] = None if r is None else r["ppl"]
        out[f"{corpus}_ppl_ci"] = None if r is None else _ppl_interval(r)
    out.update(distribution_cells(samples, random))
    zs = _load(results_dir / "eval" / v.id / "zeroshot.json")
    for col, (task, metric) in TASK_COLUMNS.items():
        if col in ACC_NORM_TABLES.get(base_table(table), ()):
            metric = "acc_norm"
        stack = _seed_stack(samples, "zeroshot", task) if len(reps) > 1 else None
        if stack is not None and len(stack["seeds"]) > 1 and metric in stack and stack["doc_id"]:
            ci = stats.seeded_accuracy(stack[metric], random=random)
            out[col], out[f"{col}_ci"] = 100 * ci["estimate"], [100 * ci["lo"], 100 * ci["hi"]]
            seeds["zeroshot"] = len(stack["seeds"])
            continue
        t = None if zs is None else zs["results"]["tasks"].get(task)
        if t is None or metric not in t:
            out[col] = out[f"{col}_ci"] = None
            continue
        out[col] = 100 * t[metric]
        docs = t.get("docs")
        if docs:
            ci = stats.accuracy_interval([d[metric] for d in docs])
            out[f"{col}_ci"] = [100 * ci["lo"], 100 * ci["hi"]]
        elif t.get("n"):  # evaluation written before per-document results: Wilson from the count
            lo, hi = stats.wilson_interval(round(t[metric] * t["n"]), t["n"])
            out[f"{col}_ci"] = [100 * lo, 100 * hi]
        else:
            out[f"{col}_ci"] = None
    out["seeds"] = seeds
    return out


def _fmt(x: Any, nd: int = 2, ci: list[float] | None = None) -> str:
    if x is None or x == "":
        return "—"
    if isinstance(x, float):
        text = f"{x:.{nd}f}"
        return text if ci is None else f"{text} [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]"
    return str(x)


def _paper_before_ft(table: str, ref: dict[str, Any]) -> float | None:
    """The paper's Wiki2 perplexity of the same row without RHT-FT (the zero-shot table it fine-tunes)."""
    from caldera.paper_reference import load_reference_table

    def key(r: dict[str, Any]) -> tuple:
        return r["model"], r["method"], r["rank"], r["b_lr"]

    hit = [r for r in load_reference_table(RHTFT_TABLES[table]) if key(r) == key(ref)]
    return hit[0]["wiki2_ppl"] if hit else None


def build_table(results_dir: str | os.PathLike, plan: TablePlan) -> dict[str, Any]:
    """Rows of ``table`` with the paper's and this run's numbers. An RHT fine-tuning table (Tables 3–4) adds
    the column ``wiki2_ppl_no_ft`` (the same row before fine-tuning: the paper's Tables 1–2 value and this run's
    base variant) and, per row, ``base_variant`` and the fine-tuning summary ``rht_ft``; both variants' samples
    are kept for the paired before/after claim."""
    results_dir, table, run = Path(results_dir), plan.table, plan.run
    ft_table = table in RHTFT_TABLES
    reps = plan.replicates
    cols = ["avg_bits", "storage_bits", "wiki2_ppl", "c4_ppl", *TASK_COLUMNS] + (
        ["wiki2_ppl_no_ft"] if ft_table else [])
    rows = []
    for row in plan.rows:
        ref, v = row["ref"], row["variant"]
        meas = measured_row(results_dir, run, table, row, reps.get(v.id) if v else None)
        meas["wiki2_ppl"] = meas.pop("wiki_ppl", None)
        meas["wiki2_ppl_ci"] = meas.pop("wiki_ppl_ci", None)
        extra: dict[str, Any] = {}
        if ft_table:
            ref = {**ref, "wiki2_ppl_no_ft": _paper_before_ft(table, ref)}
            base = row.get("base")
            if base is not None:
                before = measured_row(results_dir, run, table, {"variant": base})
                meas["wiki2_ppl_no_ft"], meas["wiki2_ppl_no_ft_ci"] = before["wiki_ppl"], before["wiki_ppl_ci"]
                extra = {"base_variant": base.id,
                         "rht_ft": _load(results_dir / "rhtft" / base.id / "rhtft.json")}
        rank, b_lr = (v.rank if v else "—"), bits_label((ref or {}).get("b_lr") if ref or not row.get("beside")
                                                      else v.b_lr)
        label = ref["method_printed"] if ref else row["label"]
        if row.get("beside"):  # an extra method's row beside the uniform-rank CALDERA row it is compared with
            extra["beside"] = row["beside"]
        elif not ref and v is not None:  # an extra method's row: its rank and bits are what its compression stored
            own = stored_scheme(variant_bits(results_dir, v))
            rank, b_lr = own["rank"], own["b_lr"]
            if own["q_dense"]:
                extra["q_dense"] = True
                label += Q_DENSE_LABEL
        if not ref:
            label += EXTRA_LABEL
        rows.append({
            **extra,
            "method": label,
            "paper_model": ref["model"] if ref else "—",
            "stand_in": run.models[v.model].label if v else row.get("pending", "not run here"),
            "paper_rank": ref["rank"] if ref else "—",
            "rank": rank,
            "b_lr": b_lr,
            "variant": v.id if v else None,
            "paper": {c: (ref or {}).get(c) for c in cols + list(DISTRIBUTION_COLUMNS.values())},
            "ours": {c: meas.get(c) for c in cols + list(DISTRIBUTION_COLUMNS.values())},
            "ours_ci": {c: meas.get(f"{c}_ci") for c in cols + list(DISTRIBUTION_COLUMNS.values())
                        if f"{c}_ci" in meas},
            "seeds": meas.get("seeds", {"ppl": 0, "zeroshot": 0}),
        })
    variants = sorted({r[k] for r in rows for k in ("variant", "base_variant") if r.get(k)})
    by_id = {v.id: v for row in plan.rows for v in (row.get("variant"), row.get("base")) if v}
    realizations = {}
    for vid in variants:
        rs = reps.get(vid) or [by_id[vid]]
        realizations[vid] = {"random": is_random(rs[0]), "seeds": [getattr(r.config, "seed", None) for r in rs],
                             "ids": [r.id for r in rs], "family": method_family(rs[0])}
    dist = [c for c in DISTRIBUTION_COLUMNS.values() if any(r["ours"].get(c) is not None for r in rows)]
    if dist:  # after the perplexity columns: the paired view against the dense model, beside, never instead
        at = cols.index("c4_ppl")
        cols[at:at] = dist
    for r in rows:
        for c in set(DISTRIBUTION_COLUMNS.values()) - set(dist):
            for part in ("paper", "ours", "ours_ci"):
                r[part].pop(c, None)
    tab = {"table": table, "columns": cols, "rows": rows,
           "stats": {"level": stats.LEVEL, "resamples": stats.RESAMPLES, "seed": stats.SEED,
                      "perplexity": "Student's t over windows, combined with Student's t over seeds",
                      "accuracy": "Wilson score interval, combined with Student's t over seeds"},
            "samples": {v: variant_samples(results_dir, v) for v in variants},
            # every realization (seed) of each variant, in realizations[v]["ids"] order (the first is samples[v])
            "realizations": realizations,
           "seed_samples": {v: [variant_samples(results_dir, i) for i in realizations[v]["ids"]]
                            for v in variants if len(realizations[v]["ids"]) > 1}}
    claim_tasks = {vid: plan.claim_tasks[by_id[vid].model] for vid in variants
                   if vid in by_id and by_id[vid].model in plan.claim_tasks}
    if claim_tasks:  # the tasks each variant's zero-shot claims pool (table_claims.zeroshot_pair)
        tab["claim_tasks"] = claim_tasks
    if not ft_table:
        add_times_dense(tab)
    return tab


def add_times_dense(tab: dict[str, Any]) -> None:
    """A ``wiki2_x_dense`` column after ``wiki2_ppl``: each compressed row's Wiki2 perplexity over the same paper
    model's unquantized row, the paper's and ours (with the interval of :func:`ppl_ratio`: windows and seeds),
    so the tables show how much more the stand-ins lose than the paper's models (in place)."""
    cols = tab["columns"]
    cols.insert(cols.index("wiki2_ppl") + 1, "wiki2_x_dense")
    dense = {r["paper_model"]: r for r in tab["rows"] if str(r["method"]).startswith(("Unquantized", "Uncompressed"))}
    for r in tab["rows"]:
        d = dense.get(r["paper_model"])
        r["paper"]["wiki2_x_dense"] = r["ours"]["wiki2_x_dense"] = None
        if d is None or d is r:
            continue
        pp, pd = r["paper"].get("wiki2_ppl"), d["paper"].get("wiki2_ppl")
        if pp is not None and pd:
            r["paper"]["wiki2_x_dense"] = pp / pd
        if r["variant"] and d["variant"]:
            iv = ppl_ratio(tab, r["variant"], d["variant"])
            if iv is not None:  # one seed: the windows' interval, as the perplexity column (Seeds column: 1)
                one = iv["seed_half"] is None
                r["ours"]["wiki2_x_dense"] = iv["estimate"]
                r["ours_ci"]["wiki2_x_dense"] = [iv["window_lo"] if one else iv["lo"],
                                                 iv["window_hi"] if one else iv["hi"]]



def seed_parts(table: dict[str, Any], variant: str, kind: str, key: str | None = None
               ) -> tuple[list[Any], list[Any], bool]:
    """``(parts, seeds, random)`` of ``variant`` in a table JSON: for each realization (seed) that has it, its
    ``samples[kind]`` (``kind`` "ppl" or "zeroshot"; with ``key``, that corpus's entry), from ``seed_samples``
    (all seeds) or ``samples`` (the variant alone); ``random``: the variant is a realization of a random
    procedure (every compressed model; tables written before seeds were recorded: all but dense)."""
    info = table.get("realizations", {}).get(variant)
    per_seed = table.get("seed_samples", {}).get(variant) or [table.get("samples", {}).get(variant, {})]
    seeds = list(info["seeds"]) if info else [None]
    rows = [(sd, s.get(kind) or {}) for sd, s in zip(seeds, per_seed)]
    rows = [(sd, p if key is None else p.get(key)) for sd, p in rows]
    rows = [(sd, p) for sd, p in rows if p]
    return [p for _, p in rows], [sd for sd, _ in rows], info["random"] if info else not variant.endswith("dense")


def realizations(table: dict[str, Any], variant: str, corpus: str = "wiki") -> dict[str, Any] | None:
    """Every realization (seed) of ``variant``'s per-window results on ``corpus``: ``{"nll": (S, W) list,
    "tokens": (W,), "seeds": [seed per row], "random": bool, "pool": dict | None, "stand_in": str | None}``
    (:func:`seed_parts`; ``pool``: the pooled Wiki2 spread that
    :func:`caldera.experiments.report.realization_pool.attach_pools` put in the table for a variant with one seed;
    ``stand_in``: its row's stand-in); None without per-window results."""
    parts, seeds, random = seed_parts(table, variant, "ppl", corpus)
    if not parts:
        return None
    pool = table.get("pooled_spread", {}).get(variant) if corpus == "wiki" else None
    stand = next((r.get("stand_in") for r in table.get("rows", [])
                  if variant in (r.get("variant"), r.get("base_variant"))), None)
    return {"nll": [r["window_nll"] for r in parts], "tokens": parts[0]["window_tokens"], "seeds": seeds,
            "random": random, "pool": pool, "stand_in": stand}


def common_seeds(ra: dict[str, Any], rb: dict[str, Any]) -> list[Any]:
    """The seeds that both random realization sets hold (in ``ra``'s order): realization s of each used the same
    RHT signs and sketches, so a comparison pairs on them. Empty when either side is deterministic or a side's
    seeds are unrecorded."""
    if not (ra["random"] and rb["random"]) or None in ra["seeds"] or None in rb["seeds"]:
        return []
    return [s for s in ra["seeds"] if s in rb["seeds"]]


def _pairing(ra: dict[str, Any], rb: dict[str, Any], block: dict[str, Any] | None) -> list[Any]:
    """The seeds a comparison of ``ra`` and ``rb`` pairs on: their common seeds where there are two or more, or
    one with a seed block's variance (:func:`caldera.experiments.report.realization_pool.attach_blocks`) to
    stand for the unknown spread of a single per-seed difference; else none (unpaired)."""
    common = common_seeds(ra, rb)
    return common if len(common) >= 2 or (common and block is not None) else []


def _rows_of(r: dict[str, Any], seeds: list[Any]) -> list[Any]:
    return [r["nll"][r["seeds"].index(s)] for s in seeds]


def ppl_ratio(table: dict[str, Any], a: str, b: str, corpus: str = "wiki") -> dict[str, Any] | None:
    """Interval of ``ppl_a / ppl_b`` on the Wiki2 stand-in windows (:func:`caldera.stats.seeded_ppl_ratio`:
    windows and seeds combined). Where both variants hold realizations on common seeds (:func:`_pairing`), the
    comparison is paired on those seeds, its seed part from the per-seed log ratios and the stand-in's seed block
    (``table["seed_block"]``, the larger of the two variances); otherwise each side counts its own spread (a side
    with one seed takes its family's pooled spread where the table carries one). Adds ``"pair": [a, b]``,
    ``"paired_seeds"`` (the seeds paired on, empty when unpaired), ``"block"`` (the block used) and
    ``"pooled_from"``: ``{variant: pool}`` for each side that took a pool; None without per-window results."""
    ra, rb = realizations(table, a, corpus), realizations(table, b, corpus)
    if ra is None or rb is None:
        return None
    if list(ra["tokens"]) != list(rb["tokens"]):
        raise ValueError(f"{a} and {b} were scored on different windows; evaluate both with the same eval.ppl")
    block = (table.get("seed_block") or {}).get(ra["stand_in"]) if corpus == "wiki" else None
    seeds = _pairing(ra, rb, block)
    if seeds:
        iv = stats.seeded_ppl_ratio(_rows_of(ra, seeds), _rows_of(rb, seeds), ra["tokens"], paired_seeds=True,
                                    block=block)
        return {**iv, "pair": [a, b], "paired_seeds": seeds, "block": block, "pooled_from": {}}
    iv = stats.seeded_ppl_ratio(ra["nll"], rb["nll"], ra["tokens"], ra["random"], rb["random"],
                                a_pool=ra["pool"], b_pool=rb["pool"])
    pooled = dict(zip([v for v, r in ((a, ra), (b, rb)) if r["random"]], iv["pooled"]))
    return {**iv, "pair": [a, b], "paired_seeds": [], "block": None,
            "pooled_from": {v: (ra if v == a else rb)["pool"] for v, took in pooled.items() if took}}


def derived_ratio(table: dict[str, Any], derived: str, base: str, corpus: str = "wiki") -> dict[str, Any] | None:
    """``ppl_derived / ppl_base`` for a model derived from one realization of its base (RHT or LoRA fine-tuning
    starts from the base's compressed model of one seed): paired on that realization — the same seed and the same
    windows — so the comparison is the fine-tuning's own effect on the model it changed, with no realization spread
    between the two sides (``seed_half`` 0, ``construction`` "same realization"). The derived model's seed is the
    first seed both hold; None without per-window results or a shared seed."""
    rd, rb = realizations(table, derived, corpus), realizations(table, base, corpus)
    if rd is None or rb is None:
        return None
    shared = [s for s in rd["seeds"] if s in rb["seeds"]]
    if not shared:
        return None
    s = shared[0]
    w = stats.paired_ppl_ratio(_rows_of(rd, [s])[0], rd["tokens"], _rows_of(rb, [s])[0], rb["tokens"])
    lw, hw = math.log(w["lo"]) if w["lo"] > 0 else -math.inf, math.log(w["hi"])
    c = stats.combine(math.log(w["estimate"]), lw, hw, {"half": 0.0, "sd": 0.0, "df": None, "seeds": [1],
                                                        "pooled": []})
    return {**stats.exp_log_scale(c), "n": w["n"], "pair": [derived, base], "paired_seeds": [s], "block": None,
            "pooled_from": {}, "construction": "same realization"}


def identical_variants(table: dict[str, Any], a: str, b: str) -> bool:
    """Are ``a`` and ``b`` the same model? True when both hold realizations on the same seeds and every one of
    them scored exactly the same on every window of every corpus and every zero-shot document (the same
    allocation and the same tensors evaluate identically; two different models do not agree to the last bit on
    thousands of tokens). Deterministic variants compare their single result."""
    if a == b:
        return True
    pa, sa, _ = seed_parts(table, a, "ppl")
    pb, sb, _ = seed_parts(table, b, "ppl")
    if not pa or sa != sb:
        return False
    za, _, _ = seed_parts(table, a, "zeroshot")
    zb, _, _ = seed_parts(table, b, "zeroshot")
    return pa == pb and za == zb


def _digits(column: str) -> int:
    """Decimals of a column's values: accuracies and agreement (%) 1, KL and Δ ln p (nats) 3, the rest 2."""
    return 1 if column.endswith(("_acc", "_top1")) else 3 if column.endswith(("_kl", "_dlogp")) else 2


def kl_difference(table: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    """Mean KL divergence from the dense model (nats per token, Wiki2 windows) of ``a`` minus that of ``b``, paired
    on the same windows and across every seed of both (:func:`caldera.stats.seeded_mean_difference` of the
    per-window means; a side with one seed leaves the seed part undetermined, no pooled spread is taken: a
    second view, never the verdict), with each side's mean (``a_kl``, ``b_kl``); None unless both have it."""
    sides = []
    for v in (a, b):
        parts, _, random = seed_parts(table, v, "ppl", "wiki")
        parts = [p for p in parts if "window_kl" in p]
        if not parts:
            return None
        sides.append(([[k / t for k, t in zip(p["window_kl"], p["window_tokens"])] for p in parts], random))
    (A, ra), (B, rb) = sides
    if len(A[0]) != len(B[0]):
        raise ValueError(f"{a} and {b} were compared with the dense model on different windows")
    iv = stats.seeded_mean_difference(A, B, ra, rb)
    return {**iv, "pair": [a, b], "a_kl": sum(map(sum, A)) / (len(A) * len(A[0])),
            "b_kl": sum(map(sum, B)) / (len(B) * len(B[0]))}


def render(tab: dict[str, Any], caption: str) -> tuple[str, str, str]:
    cols = tab["columns"]
    stands = {r["stand_in"] for r in tab["rows"] if r["variant"]}
    one = len(stands) == 1  # one stand-in for the whole table: named once (the caption), not in every row
    head = (["Method", "Paper model" if one else "Paper model → stand-in", "Rank (paper → ours)", "B_LR",
             "Seeds (ppl / 0-shot)"] + [f"{c} (paper / ours)" for c in cols])
    csv_head = (["method", "paper_model", "stand_in", "paper_rank", "rank", "b_lr", "seeds_ppl", "seeds_zeroshot"]
                + [f"{c}_{s}" for c in cols for s in ("paper", "ours", "ours_lo", "ours_hi")])
    rows, csv_rows = [], []
    for r in tab["rows"]:
        n = r.get("seeds") or {}
        # C4 named apart when it has fewer realizations (replicates.corpora: replicates scored on Wiki2 only)
        ppl_seeds = str(n.get("ppl")) if n.get("c4", n.get("ppl")) == n.get("ppl") else f"{n['ppl']} (C4 {n['c4']})"
        seeds = f"{ppl_seeds} / {n['zeroshot']}" if r["variant"] and n.get("ppl") else "—"
        model = (r["paper_model"] if r["variant"] else f"{r['paper_model']} ({r['stand_in']})") if one else \
            f"{r['paper_model']} → {r['stand_in']}"
        cells = [r["method"], model, f"{r['paper_rank']} → {r['rank']}", str(r["b_lr"]), seeds]
        ci = r.get("ours_ci", {})
        cells += [f"{_fmt(r['paper'].get(c))} / {_fmt(r['ours'].get(c), _digits(c), ci.get(c))}" for c in cols]
        rows.append(cells)
        csv_rows.append([r["method"], r["paper_model"], r["stand_in"], r["paper_rank"], r["rank"], r["b_lr"],
                         n.get("ppl") if r["variant"] else None, n.get("zeroshot") if r["variant"] else None]
                        + [x for c in cols
                           for x in (r["paper"].get(c), r["ours"].get(c), *(ci.get(c) or (None, None)))])
    return render_table_texts(caption, head, rows, csv_head, csv_rows, (UNDERSCORE, ARROW),
                              (HASH, PLUS_MINUS, ARROW, UNDERSCORE))


def write_table_files(tab: dict[str, Any] | None, caption: str, rendered: tuple[str, str, str], out_md: str,
                      out_tex: str, out_csv: str, out_json: str | None) -> None:
    """A table's four files, each written atomically: the rendered (md, tex, csv) texts and the JSON of ``tab``
    with its caption (what the claims and the report read; ``out_json`` None: no JSON, as a pending table)."""
    from caldera.atomic import write_json

    for path, text in zip((out_md, out_tex, out_csv), rendered):
        write_atomic(path, text)
    if out_json is not None:
        write_json(out_json, {**(tab or {}), "caption": caption})


def write_table(results_dir: str, plan: TablePlan, out_md: str, out_tex: str, out_csv: str,
                out_json: str) -> dict[str, Any]:
    """Table ``plan.table`` (:func:`build_table`) with its caption, as md / tex / csv / json."""
    from caldera.experiments.report.corpora import corpus_name

    tab = build_table(results_dir, plan)
    table = plan.table
    stand = sorted({r["stand_in"] for r in tab["rows"] if r["variant"]})
    caption = (f"{table}: paper numbers beside this run ({plan.run.name} config). Stand-in model"
               f"{'s' if len(stand) > 1 else ' for every row'}: {', '.join(stand)}; each paper rank is mapped to the "
               f"stand-in rank with the closest average bits "
               f"(App. E.5); storage_bits: bits per weight as stored (codes, scales, signs). Ours: value"
               f" [95 % interval] over the compression seeds of the Seeds column (ppl: "
               f"geometric mean; accuracy: mean) — perplexity: Student's t over the evaluation windows, accuracy "
               f"in %: Wilson score interval over the documents, each widened by Student's t over the seeds where "
               f"a row has several (caldera.stats; "
               f"one seed: the evaluation's noise only, not the compression's). Zero-shot limit per task: "
               f"{plan.eval.zeroshot.limit}; "
               "perplexity corpora (windows × tokens; the wiki2_ and c4_ columns): "
               + ", ".join(f"{k}: {corpus_name(v['source'])} ({v.get('n_windows') or 'all'} × {v['seq_len']})"
                           for k, v in plan.eval.as_block()["ppl"].items()) + ".")
    if is_regime_table(table):
        q = sorted({r.params.get("q_bits") for row in plan.rows for r in [row["variant"]]
                    if r is not None and r.method != "dense"})
        caption += (f" The stand-in's regime: every compressed row with Q at {', '.join(map(str, q))} bits "
                    f"(regime.models.<stand-in>.q_bits, chosen on held-out calibration text as the bits at which "
                    f"QuIP# loses what the paper's QuIP# loses at 2 bits; regime.run), the paper's own 2-bit rows "
                    f"beside them; rows not compressed again at those bits are marked.")
        docs = {t: len(z["doc_id"]) for row in tab["rows"]
                if row["variant"] and not str(row["method"]).startswith(("Unquantized", "Uncompressed"))
                for t, z in tab["samples"].get(row["variant"], {}).get("zeroshot", {}).items()}
        if docs and any(n != plan.eval.zeroshot.limit for n in docs.values()):
            caption += (" Zero-shot documents per task of these rows (regime.run.zeroshot): "
                        + ", ".join(f"{t} {n}" for t, n in sorted(docs.items())) + ".")
    if table in RHTFT_TABLES:
        ft = plan.rht_ft.as_block()
        ran = [f"{r['method']} k={r['paper_rank']} B_LR={r['b_lr']}" for r in tab["rows"] if r["variant"]]
        caption += (f" RHT fine-tuning (§5.2, App. E.4) of the signs only, KL to the dense model on "
                    f"{ft['n_samples']} × {ft['seq_len']} tokens of {plan.calibration.source} "
                    f"({ft['n_samples'] - ft['held_out']} train / {ft['held_out']} held out; paper: 256 × 512 "
                    f"RedPajama, 192 / 64), {ft['epochs']} epochs, "
                    f"AdamW lr {ft['lr']}, batch {ft['batch_size']}, the epoch with the lowest held-out KL kept. "
                    f"wiki2_ppl_no_ft: the same row without fine-tuning (paper: {RHTFT_TABLES[table]}; ours: the "
                    f"base checkpoint). Rows run: {', '.join(ran) or 'none'}; the others are pending in this config "
                    "(rht_ft.rows) and run in mini-full.")
    write_table_files(tab, caption, render(tab, caption), out_md, out_tex, out_csv, out_json)
    return tab


def write_pending_table(table: str, reason: str, out_md: str, out_tex: str, out_csv: str) -> list[dict[str, Any]]:
    """A paper table whose measurements this run does not make: the paper's rows with an empty "ours" column.

    Written so that every table of the paper has its generated file; ``reason`` names what will fill it.
    """
    from caldera.paper_reference import load_reference_table

    raw = load_reference_table(table, raw=True)
    cols = [c for c in raw[0] if c not in ("note", "method_printed")]
    caption = f"{table}: the paper's numbers; this run's values are pending ({reason})."
    head = ["method"] + [c for c in cols if c != "method"] + ["ours"]
    rows = [[r["method_printed"] or r["method"]] + [r[c] or "—" for c in cols if c != "method"] + ["pending"]
            for r in raw]
    rendered = render_table_texts(caption, head, rows, head, rows, (UNDERSCORE,), (HASH, UNDERSCORE, PERCENT))
    write_table_files(None, caption, rendered, out_md, out_tex, out_csv, None)
    return raw
