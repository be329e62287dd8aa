"""Local copies standing in for the hub's datasets (config ``local_data``; ``config/paper-local.yaml``).

``local_data: <folder>`` (a folder written by :mod:`caldera.experiments.jobs.paper_local`) makes the paper-scale loaders
read that folder instead of the hub, through the same code: ``datasets.load_dataset("json", data_files=...)`` in
:func:`caldera.pipeline.text.load_hf_text` for the :data:`~caldera.pipeline.text.HF_TEXT` names, the zero-shot task
files of :func:`caldera.eval.zeroshot.prepare_task_data` (lm-eval's loaders in ``caldera/eval/tasks/utils.py``) and
the RTE / WinoGrande train splits of Table 5. Layout::

    <folder>/text/<HF_TEXT name>.jsonl          {"text": ...} rows
    <folder>/tasks/<task>.jsonl                 the zero-shot documents (built with a .complete marker)
    <folder>/tasks/<task>-<split>.jsonl         Table 5's train splits (rte, winogrande)

The folder reaches every job process through :data:`ENV` (set by :func:`use` from the job's config, so lm-eval's
by-path import of the task loaders sees it too). Torch-free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: the environment variable that carries the folder to the loaders of one process
ENV = "CALDERA_LOCAL_DATA"


def use(config: dict[str, Any]) -> Path | None:
    """Point this process's loaders at ``config["local_data"]`` (absolute), or at the hub when it is unset."""
    folder = config.get("local_data")
    if folder is None:
        os.environ.pop(ENV, None)
        return None
    os.environ[ENV] = str(Path(folder).resolve())
    return Path(os.environ[ENV])


def root() -> Path | None:
    """The folder in use (:func:`use`), or None (the hub)."""
    v = os.environ.get(ENV)
    return Path(v) if v else None


def text_file(name: str) -> Path:
    return root() / "text" / f"{name}.jsonl"


def tasks_dir() -> Path:
    return root() / "tasks"


def split_file(task: str, split: str) -> Path:
    return tasks_dir() / f"{task}-{split}.jsonl"
