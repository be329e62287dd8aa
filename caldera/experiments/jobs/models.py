"""The models of a run as its jobs load them: a model entry's ``source``, the run's ``device`` and ``dtype``, read
from the run's typed settings (:class:`~caldera.experiments.planning.settings.RunContext`) and passed to
:mod:`caldera.pipeline.models`, which loads them; and a paper rank mapped to its stand-in (:func:`stand_in_rank`)."""

from __future__ import annotations

import torch

from caldera.experiments.planning.plan import rank_at_equal_bits
from caldera.experiments.planning.settings import RunContext
from caldera.pipeline import models


def model_source(run: RunContext, model: str) -> str:
    """``run.models[model].source`` as a folder or a hub id (:func:`caldera.pipeline.models.resolve_source`:
    ``asset:smollm2`` / ``asset:gemma3`` are the offline PyPI assets)."""
    return models.resolve_source(run.models[model].source, f"models.{model}.source")


def run_device(run: RunContext) -> torch.device:
    """``run.device``: where Hessian collection, compression and evaluation run (``auto``: CUDA when available).
    The decomposition runs on the device of its inputs
    (:func:`caldera.experiments.jobs.compress.step_compress_layers`)."""
    return models.resolve_device(run.device)


def model_dtype(run: RunContext, device: torch.device | str) -> torch.dtype | str:
    """``run.dtype``: the dtype of the dense model for Hessian collection and evaluation on ``device``.
    ``auto`` (default): float32 on the CPU, and on an accelerator the checkpoint's own dtype (float16 for
    LLaMa-2, bfloat16 for LLaMa-3 and Mistral) (:func:`caldera.pipeline.models.dense_dtype`)."""
    return models.dense_dtype(run.dtype, device)


def load_dense(run: RunContext, model: str, device: torch.device | str = "cpu", dtype=torch.float32):
    """The dense model (and tokenizer) of ``run.models[model]`` on ``device``, in ``dtype`` (``"auto"``: the
    checkpoint's own dtype)."""
    return models.load_dense(model_source(run, model), device, dtype)


def load_tokenizer(run: RunContext, model: str):
    """The tokenizer of ``run.models[model]`` (as :func:`load_dense` loads it, without the weights)."""
    return models.load_tokenizer(model_source(run, model))


def load_layers(run: RunContext, model: str, layers, device: torch.device | str = "cpu"):
    """The model of ``run.models[model]`` with only the linear weights of decoder ``layers`` read
    (:func:`caldera.pipeline.models.load_layers`)."""
    return models.load_layers(model_source(run, model), layers, device)


def stand_in_rank(run: RunContext, paper_model: str, rank: int, b_lr: int) -> int:
    """The rank on ``paper_model``'s stand-in (``run.stand_ins``) at the average bits of the paper's ``rank`` with
    ``b_lr``-bit factors, a multiple of ``run.rank_multiple``
    (:func:`caldera.experiments.planning.plan.rank_at_equal_bits` of the stand-in's ``shapes``)."""
    stand_in = run.models[run.stand_ins[paper_model]]
    return rank_at_equal_bits(stand_in.shapes, paper_model, rank, b_lr, run.rank_multiple)
