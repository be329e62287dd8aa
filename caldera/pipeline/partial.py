"""Load only some decoder layers' linear weights of a model, in the checkpoint's own dtype, on one device.

A compression job (rule ``compress_layers``) needs the seven linear layers of its own decoder layers and the
model's shapes; nothing else. :func:`load_layer_weights` builds the architecture on the ``meta`` device (no
memory, no random initialisation) from the model's ``config.json`` and reads, with safetensors' lazy
``safe_open``, only the tensors ``<layers prefix>.<l>.<linear>.weight`` (and ``.bias``) of the requested layers,
from only the files that hold them:

* a sharded checkpoint (hub layout: ``model.safetensors.index.json`` + ``model-0000k-of-0000n.safetensors``):
  the index's ``weight_map`` names each tensor's shard; only those shards are opened (and, for a hub name,
  downloaded);
* a single ``model.safetensors``: that file, reading only the wanted tensors.

The tensors keep their stored dtype (fp16/bf16 for LLaMa-2/3 and Mistral, fp32 for the suite's local assets);
the decomposition converts each matrix to float32 itself (:func:`caldera.pipeline.compress.compress_model`),
an exact conversion, so the compressed layers are bitwise those of a whole-model fp32 load. Memory of a
job: its layers' weights (7B, one layer: 0.4 GB in fp16) instead of the whole model in fp32 (27 GB for 7B,
276 GB for 70B). Every other parameter stays on ``meta`` (shapes only: enough for
:func:`caldera.pipeline.compress.bits_summary`).

``stats`` (returned) records which files were opened and which keys were read, so tests (and a curious user)
can check that a job touched nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def _local_folder(source: str | os.PathLike) -> Path | None:
    """``source`` as a verified local folder (the same checks as :func:`caldera.pipeline.assets.load_model`),
    or None for a hub name."""
    from caldera.pipeline.assets import BAD_MARKER, MARKER, in_cache, verify_built

    p = Path(source).expanduser()
    if not p.is_dir():
        return None
    if (p / MARKER).exists() or (p / BAD_MARKER).exists() or in_cache(p):
        verify_built(p)
    return p


def _fetch(source: str, filename: str, folder: Path | None) -> Path:
    if folder is not None:
        return folder / filename
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(str(source), filename))


def weight_map(source: str | os.PathLike) -> tuple[dict[str, str], Path | None]:
    """``({tensor name: file name}, local folder or None)`` of a checkpoint's safetensors weights (only the
    index is read for a sharded checkpoint; the header for a single file)."""
    from safetensors import safe_open

    folder = _local_folder(source)
    if folder is not None:
        if (folder / INDEX_FILE).is_file():
            return dict(json.loads((folder / INDEX_FILE).read_text())["weight_map"]), folder
        if (folder / SINGLE_FILE).is_file():
            with safe_open(str(folder / SINGLE_FILE), "pt") as f:
                return {k: SINGLE_FILE for k in f.keys()}, folder
        raise FileNotFoundError(f"{folder} has neither {INDEX_FILE} nor {SINGLE_FILE}")
    try:
        index = _fetch(str(source), INDEX_FILE, None)
        return dict(json.loads(index.read_text())["weight_map"]), None
    except Exception:  # noqa: BLE001  (no index: a single-file hub checkpoint)
        path = _fetch(str(source), SINGLE_FILE, None)
        with safe_open(str(path), "pt") as f:
            return {k: SINGLE_FILE for k in f.keys()}, None


def meta_model(source: str | os.PathLike) -> nn.Module:
    """The architecture of ``source`` (its ``config.json``) with every tensor on the ``meta`` device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = _local_folder(source)
    cfg = AutoConfig.from_pretrained(str(folder or source), **({"local_files_only": True} if folder else {}))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return model.eval()


def load_layer_weights(
    source: str | os.PathLike,
    layers: Sequence[int] | None,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    linears: Sequence[str] | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """``(model, stats)``: the model of ``source`` on ``meta`` except the linear layers ``linears`` (default:
    the seven of :data:`caldera.pipeline.compress.LINEARS`) of decoder layers ``layers`` (None: all), whose weights (and
    biases) are read from the checkpoint's safetensors file(s) into ``device`` in their stored dtype (or
    ``dtype`` when given). ``stats``: ``{"files": [file names opened], "keys": [tensor names read]}``."""
    from safetensors import safe_open

    from caldera.pipeline.compress import LINEARS, layers_prefix
    from caldera.pipeline.hessians import decoder_layers

    model = meta_model(source)
    prefix = layers_prefix(model)
    n_layers = len(decoder_layers(model))
    layers = range(n_layers) if layers is None else layers
    bad = [x for x in layers if not 0 <= int(x) < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range; the model has {n_layers} decoder layers (0..{n_layers - 1})")
    wmap, folder = weight_map(source)
    wanted: dict[str, list[tuple[str, nn.Module, str]]] = {}  # file -> [(key, module, attribute)]
    for li in sorted({int(x) for x in layers}):
        for name in linears or LINEARS:
            path = f"{prefix}.{li}.{name}"
            mod = model.get_submodule(path)
            for attr in ("weight", "bias"):
                if getattr(mod, attr, None) is None:
                    continue
                key = f"{path}.{attr}"
                if key not in wmap:
                    raise KeyError(f"{source}: tensor {key!r} is not in the checkpoint's weight map")
                wanted.setdefault(wmap[key], []).append((key, mod, attr))
    stats: dict[str, Any] = {"files": [], "keys": []}
    for fname in sorted(wanted):
        path = _fetch(str(source), fname, folder)
        stats["files"].append(fname)
        with safe_open(str(path), "pt", device="cpu") as f:
            for key, mod, attr in wanted[fname]:
                t = f.get_tensor(key)
                stats["keys"].append(key)
                want_shape = tuple(getattr(mod, attr).shape)
                if tuple(t.shape) != want_shape:
                    raise ValueError(f"{source}: {key} has shape {tuple(t.shape)}, the config implies {want_shape}")
                t = t.to(device=device, dtype=dtype or t.dtype)
                setattr(mod, attr, nn.Parameter(t, requires_grad=False))
    return model, stats
