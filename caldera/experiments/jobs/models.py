"""The models of a workflow config as its jobs load them: a model entry's ``source``, the run's ``device`` and
``dtype``, read from the config and passed to :mod:`caldera.pipeline.models`, which loads them."""

from __future__ import annotations

from typing import Any

import torch

from caldera.pipeline import models


def model_source(config: dict[str, Any], model: str) -> str:
    """``config["models"][model]["source"]`` as a folder or a hub id (:func:`caldera.pipeline.models.resolve_source`:
    ``asset:smollm2`` / ``asset:gemma3`` are the offline PyPI assets)."""
    return models.resolve_source(config["models"][model]["source"], f"models.{model}.source")


def run_device(config: dict[str, Any]) -> torch.device:
    """``config["device"]``: where Hessian collection, compression and evaluation run (``auto``: CUDA when
    available). The decomposition runs on the device of its inputs
    (:func:`caldera.experiments.jobs.compress.step_compress_layers`)."""
    return models.resolve_device(config.get("device", "auto"))


def model_dtype(config: dict[str, Any], device: torch.device | str) -> torch.dtype | str:
    """``config["dtype"]``: the dtype of the dense model for Hessian collection and evaluation on ``device``.
    ``auto`` (default): float32 on the CPU, and on an accelerator the checkpoint's own dtype (float16 for
    LLaMa-2, bfloat16 for LLaMa-3 and Mistral) (:func:`caldera.pipeline.models.dense_dtype`)."""
    return models.dense_dtype(config.get("dtype", "auto"), device)


def load_dense(config: dict[str, Any], model: str, device: torch.device | str = "cpu", dtype=torch.float32):
    """The dense model (and tokenizer) of ``config["models"][model]`` on ``device``, in ``dtype`` (``"auto"``:
    the checkpoint's own dtype)."""
    return models.load_dense(model_source(config, model), device, dtype)


def load_tokenizer(config: dict[str, Any], model: str):
    """The tokenizer of ``config["models"][model]`` (as :func:`load_dense` loads it, without the weights)."""
    return models.load_tokenizer(model_source(config, model))


def load_layers(config: dict[str, Any], model: str, layers, device: torch.device | str = "cpu"):
    """The model of ``config["models"][model]`` with only the linear weights of decoder ``layers`` read
    (:func:`caldera.pipeline.models.load_layers`)."""
    return models.load_layers(model_source(config, model), layers, device)
