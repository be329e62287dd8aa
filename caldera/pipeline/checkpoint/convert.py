"""Rewriting a format-1 checkpoint in the current format (``caldera convert``)."""

from __future__ import annotations

import os
from pathlib import Path

from caldera.atomic import new_folder
from caldera.pipeline.checkpoint.format import load_tokenizer_files
from caldera.pipeline.checkpoint.loader import _DERIVED_KEYS, _assemble
from caldera.pipeline.checkpoint.verify import read_checkpoint
from caldera.pipeline.checkpoint.writer import save_compressed


def convert_checkpoint(old: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Rewrite a format-1 checkpoint (verified as far as format 1 allows: checksums, structure, reconstruction
    fingerprints) in the current format (``config.json`` + content manifest) to the new folder ``out``."""
    old, out = Path(old), new_folder(out)
    cfg, tensors = read_checkpoint(old, legacy=True)
    model = _assemble(cfg, tensors, old, verify=True, cache_dequantized=False, kernel="reference")
    tok = None
    if any((old / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        tok = load_tokenizer_files(old)
    extra = {k: v for k, v in cfg.items() if k not in _DERIVED_KEYS}
    return save_compressed(model, out, method=cfg["method"], method_config=cfg["method_config"], tokenizer=tok,
                           extra=extra, generation_config=model.caldera_generation_config)
