"""The models of a workflow config as its jobs load them: where a model entry's weights are (``asset:`` names, local
folders, hub ids), the run's device and dtype, and the dense model, its tokenizer or a few decoder layers' weights.
The loading itself is :mod:`caldera.pipeline.assets` and :mod:`caldera.pipeline.partial`."""

from __future__ import annotations

from typing import Any

import torch


def model_source(config: dict[str, Any], model: str) -> str:
    """Resolve a model entry: ``asset:smollm2`` / ``asset:gemma3`` (offline PyPI assets), a local folder, or a
    hub name."""
    src = config["models"][model]["source"]
    if src.startswith("asset:"):
        from caldera.pipeline.assets import MODEL_ASSETS

        key = src.removeprefix("asset:")
        if key not in MODEL_ASSETS:
            raise ValueError(f"models.{model}.source {src!r}: unknown asset; known: {sorted(MODEL_ASSETS)}")
        return str(MODEL_ASSETS[key]())
    return src


def run_device(config: dict[str, Any]) -> torch.device:
    """``config["device"]``: where Hessian collection, compression and evaluation run (``auto``: CUDA when
    available). The decomposition runs on the device of its inputs (:func:`step_compress_layers`)."""
    want = config.get("device", "auto")
    if want == "cuda" and not torch.cuda.is_available():
        raise ValueError("config device: cuda, but torch sees no CUDA device; set device: auto or cpu")
    return torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")


def model_dtype(config: dict[str, Any], device: torch.device | str) -> torch.dtype | str:
    """``config["dtype"]``: the dtype of the dense model for Hessian collection and evaluation on ``device``.
    ``auto`` (default): float32 on the CPU (the default run, unchanged), and on an accelerator the checkpoint's
    own dtype (``"auto"``, its ``config.json``: float16 for LLaMa-2, bfloat16 for LLaMa-3 and Mistral), so no
    float32 copy of a paper-scale model is made there."""
    want = config.get("dtype", "auto")
    if want != "auto":
        return getattr(torch, want)
    return torch.float32 if torch.device(device).type == "cpu" else "auto"


def load_dense(config: dict[str, Any], model: str, device: torch.device | str = "cpu", dtype=torch.float32):
    """The dense model (and tokenizer) of ``config["models"][model]`` on ``device``, in ``dtype`` (``"auto"``:
    the checkpoint's own dtype). Loaded on the CPU, then moved."""
    from caldera.pipeline.assets import load_model

    torch.manual_seed(0)
    mdl, tok = load_model(model_source(config, model), dtype=dtype)
    return mdl.to(device), tok


def load_tokenizer(config: dict[str, Any], model: str):
    """The tokenizer of ``config["models"][model]`` (as :func:`load_dense` loads it, without the weights)."""
    from transformers import AutoTokenizer

    from caldera.pipeline.partial import local_folder

    src = model_source(config, model)
    folder = local_folder(src)
    return AutoTokenizer.from_pretrained(str(folder or src), **({"local_files_only": True} if folder else {}))


def load_layers(config: dict[str, Any], model: str, layers, device: torch.device | str = "cpu"):
    """The model of ``config["models"][model]`` with only the linear weights of decoder ``layers`` read (stored
    dtype, on ``device``; everything else on ``meta``: :func:`caldera.pipeline.partial.load_layer_weights`).
    The global RNG is seeded as :func:`load_dense` seeds it (loading consumes none)."""
    from caldera.pipeline.partial import load_layer_weights

    torch.manual_seed(0)
    mdl, _ = load_layer_weights(model_source(config, model), layers, device=device)
    return mdl


