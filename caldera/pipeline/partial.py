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


def local_folder(source: str | os.PathLike) -> Path | None:
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

    folder = local_folder(source)
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

    folder = local_folder(source)
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
    from caldera.pipeline.layer_runner import decoder_layers

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


class LazyLayers:
    """A model whose decoder layers are read from the checkpoint one at a time (Hessian collection of a model
    larger than host memory: :func:`caldera.pipeline.hessians.collect_hessians`'s ``loader``).

    :meth:`open` builds the architecture on ``meta`` and reads every tensor outside the decoder layers
    (embeddings, final norm, lm_head) onto ``device``, and rebuilds the rotary embeddings (non-persistent
    buffers); :meth:`load` reads one decoder layer's tensors (``dtype``: a cast, or None for the stored one),
    :meth:`release` returns it to ``meta``. ``stats["loaded"]`` lists the layers in the order they were read.
    """

    def __init__(self, model: nn.Module, source, wmap: dict[str, str], folder: Path | None, device, dtype):
        self.model, self.source, self.wmap, self.folder = model, source, wmap, folder
        self.device, self.dtype = torch.device(device), dtype
        self.stats: dict[str, Any] = {"loaded": []}

    @classmethod
    def open(cls, source: str | os.PathLike, *, device: torch.device | str = "cpu",
             dtype: torch.dtype | None = None) -> "LazyLayers":
        from caldera.pipeline.compress import layers_prefix

        model = meta_model(source)
        wmap, folder = weight_map(source)
        self = cls(model, source, wmap, folder, device, dtype)
        self.prefix = layers_prefix(model) + "."
        self._read([k for k in wmap if not k.startswith(self.prefix)], strict=False)
        for path, mod in list(model.named_modules()):
            if "RotaryEmbedding" in type(mod).__name__:
                from caldera.pipeline.checkpoint import replace_module

                replace_module(model, path, type(mod)(config=model.config).to(self.device))
        bufs = [n for n, b in model.named_buffers() if b.device.type == "meta" and not n.startswith(self.prefix)]
        if bufs:  # other non-persistent buffers (Gemma-3's embed_scale): from a one-layer model built on the CPU
            self._rebuild_buffers(bufs)
        tie = getattr(model, "tie_weights", None)
        if tie is not None and getattr(model.config, "tie_word_embeddings", False):
            tie()
        left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
                if t.device.type == "meta" and not n.startswith(self.prefix)]
        if left:
            raise ValueError(f"{source}: tensors {left[:5]} outside the decoder layers could not be restored")
        return self

    def _rebuild_buffers(self, names: list[str]) -> None:
        import copy

        from caldera.pipeline.checkpoint import reference_buffers

        cfg = copy.deepcopy(self.model.config)
        cfg.num_hidden_layers = 1
        if isinstance(getattr(cfg, "layer_types", None), list):
            cfg.layer_types = cfg.layer_types[:1]
        wanted = dict(self.model.named_buffers())
        with torch.device("cpu"):
            ref = reference_buffers(cfg, {n: wanted[n] for n in names})
        for name in names:
            owner, _, attr = name.rpartition(".")
            self.model.get_submodule(owner).register_buffer(attr, ref[name].to(self.device), persistent=False)

    def _read(self, keys: list[str], strict: bool = True) -> None:
        from safetensors import safe_open

        by_file: dict[str, list[str]] = {}
        for k in keys:
            by_file.setdefault(self.wmap[k], []).append(k)
        for fname, ks in sorted(by_file.items()):
            with safe_open(str(_fetch(str(self.source), fname, self.folder)), "pt", device="cpu") as f:
                for key in ks:
                    owner, _, attr = key.rpartition(".")
                    try:
                        mod = self.model.get_submodule(owner)
                    except AttributeError:
                        if strict:
                            raise
                        continue  # a checkpoint tensor the architecture does not have (e.g. a tied copy)
                    t = f.get_tensor(key)
                    cast = self.dtype if (self.dtype is not None and t.is_floating_point()) else t.dtype
                    t = t.to(device=self.device, dtype=cast)
                    if attr in mod._parameters:
                        setattr(mod, attr, nn.Parameter(t, requires_grad=False))
                    else:
                        mod.register_buffer(attr, t)

    def load(self, layer: int, *, skip: Sequence[str] = ()) -> None:
        """Read decoder layer ``layer``'s tensors, except those of the submodules ``skip`` (e.g. the linears a
        checkpoint replaces anyway), which stay on ``meta``."""
        p = f"{self.prefix}{layer}."
        drop = tuple(f"{p}{name}." for name in skip)
        self._read([k for k in self.wmap if k.startswith(p) and not k.startswith(drop)])
        self.stats["loaded"].append(layer)

    def release(self, layer: int) -> None:
        from caldera.pipeline.layer_runner import decoder_layers

        decoder_layers(self.model)[layer].to("meta")
