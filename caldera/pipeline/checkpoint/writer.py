"""Writing a checkpoint folder: every tensor in ``model.safetensors``, the configs, the model card, the content
manifest and the checksums, under a temporary name renamed into place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import Tensor, nn

from caldera.atomic import OutputExists, atomic_dir, sha256_file
from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint.card import model_card
from caldera.pipeline.checkpoint.format import (
    CARD_FILE,
    CHECKSUM_FILE,
    CONFIG_FILE,
    FORMAT_VERSION,
    GENERATION_CONFIG_FILE,
    HF_CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILES,
    _json_default,
    _module_tensors,
    _plain_json,
    base_config_dict,
    checkpoint_bits,
    hf_config_dict,
    json_digest,
    tensor_digest,
    tied_keys,
    weight_fingerprint,
)


def write_checkpoint(
    out_dir: str | os.PathLike,
    tensors: dict[str, Tensor],
    config: dict[str, Any],
    tokenizer: Any | None = None,
    *,
    generation_config: bytes | None = None,
) -> Path:
    """Write ``tensors`` + ``config`` (+ tokenizer) + the model card + checksums to ``out_dir`` atomically
    (:func:`atomic_dir`).
    An existing ``out_dir`` is replaced only when it is an empty folder or a checkpoint (it holds
    ``caldera_config.json``), and only once the new one is complete; anything else is refused
    (:class:`~caldera.atomic.OutputExists`) before any work.

    ``tokenizer``: a tokenizer (saved with ``save_pretrained``) or the folder it was loaded from (its
    :data:`TOKENIZER_FILES` copied byte for byte: a 262k-entry tokenizer takes seconds to load).
    ``generation_config``: the bytes of the base model's ``generation_config.json``, written as they are.
    ``README.md`` is the model card of ``config`` (:func:`~caldera.pipeline.checkpoint.card.model_card`: its
    ``provenance``, method, bits, how to load it).

    ``config["modules"]`` maps module paths to :meth:`CompressedLinear.metadata`; the reconstruction
    fingerprint of every module (:func:`weight_fingerprint`) is added as ``config["fingerprints"]`` and the
    content manifest as ``config["manifest"]``: the sha256 of every tensor (:func:`tensor_digest`), of the base
    config (:func:`json_digest`) and of every other file (``config.json``, tokenizer files, generation config,
    model card).
    """
    out = Path(out_dir)
    if (out.exists() or out.is_symlink()) and not (out.is_dir() and not any(out.iterdir())) and not (
            out.is_dir() and (out / CONFIG_FILE).is_file()):
        raise OutputExists(f"{out} exists and is not a checkpoint folder (no {CONFIG_FILE}); a checkpoint replaces "
                           "its folder as a whole: choose a new folder (or remove it yourself)")
    flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    fingerprints = {
        path: weight_fingerprint(CompressedLinear.from_tensors(meta, _module_tensors(flat, path)))
        for path, meta in config.get("modules", {}).items()
    }
    config = _plain_json(config)
    with atomic_dir(out_dir) as tmp:
        # one metadata key: safetensors orders several keys randomly (see caldera.atomic)
        save_file(flat, str(tmp / MODEL_FILE), metadata={"format": "pt"})
        (tmp / HF_CONFIG_FILE).write_text(
            json.dumps(hf_config_dict(config["base_config"], config["method"], config), indent=1, sort_keys=True)
            + "\n"
        )
        if isinstance(tokenizer, (str, os.PathLike)):
            copied = [f for f in TOKENIZER_FILES if (Path(tokenizer) / f).is_file()]
            if not copied:
                raise ValueError(f"{tokenizer} holds no tokenizer file ({', '.join(TOKENIZER_FILES)})")
            for name in copied:
                (tmp / name).write_bytes((Path(tokenizer) / name).read_bytes())
        elif tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        if generation_config is not None:
            (tmp / GENERATION_CONFIG_FILE).write_bytes(generation_config)
        (tmp / CARD_FILE).write_text(model_card(config), encoding="utf-8")
        files = {
            p.relative_to(tmp).as_posix(): sha256_file(p)
            for p in sorted(tmp.rglob("*"))
            if p.is_file() and p.name != MODEL_FILE
        }
        manifest = {
            "tensors": {k: tensor_digest(v) for k, v in sorted(flat.items())},
            "base_config": json_digest(config["base_config"]),
            "files": files,
        }
        cfg = {"format_version": FORMAT_VERSION, **config, "fingerprints": fingerprints, "manifest": manifest}
        (tmp / CONFIG_FILE).write_text(json.dumps(cfg, indent=1, sort_keys=True, default=_json_default) + "\n")
        sums = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / CHECKSUM_FILE).write_text(json.dumps({"sha256": sums}, indent=1, sort_keys=True) + "\n")
    return Path(out_dir)


def save_compressed(
    model: nn.Module,
    out_dir: str | os.PathLike,
    *,
    method: str,
    method_config: dict[str, Any],
    tokenizer: Any | None = None,
    extra: dict[str, Any] | None = None,
    generation_config: bytes | None = None,
) -> Path:
    """Save a model whose linear layers were (partly) replaced by :class:`CompressedLinear` modules.

    ``extra``: further keys of ``caldera_config.json``; a ``bits`` summary among them is recomputed from the
    modules (:func:`checkpoint_bits`: what the tensors store, e.g. after signs were made trainable), as loaders
    check it against them (:func:`check_summary`). ``generation_config``: as :func:`write_checkpoint`."""
    tied = tied_keys(model)
    tensors = {k: v for k, v in model.state_dict().items() if k not in tied}
    modules = {name: m.metadata() for name, m in model.named_modules() if isinstance(m, CompressedLinear)}
    if not modules:
        raise ValueError("the model has no CompressedLinear modules; compress it first")
    config = {
        "base_config": base_config_dict(model),
        "method": method,
        "method_config": method_config,
        "modules": modules,
        "tied": tied,
        **(extra or {}),
    }
    if "bits" in config:
        config["bits"] = checkpoint_bits(model)
    return write_checkpoint(out_dir, tensors, config, tokenizer, generation_config=generation_config)
