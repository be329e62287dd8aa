"""Edits of Hessian files the way their writer seals one (tests/pipeline/test_hessians.py and the readers' tests
in tests/experiments/jobs/test_hessian_readers.py)."""

from __future__ import annotations

import json

import torch

from caldera.pipeline.hessians import layer_file


def rewrite(path, meta_edit=None, tensors_edit=None, dst=None):
    """Rewrite a layer file the way the writer writes one (content hash recomputed, metadata sorted JSON), after
    ``meta_edit(meta)`` / ``tensors_edit(tensors)``; to ``dst`` if given."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from caldera.atomic import save_safetensors_atomic
    from caldera.pipeline.hessians import META_KEY, tensors_sha256

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()[META_KEY])
    tensors = load_file(str(path))
    if meta_edit:
        meta_edit(meta)
    if tensors_edit:
        tensors_edit(tensors)
    meta["tensors_sha256"] = tensors_sha256(tensors)
    save_safetensors_atomic(tensors, dst or path, {META_KEY: json.dumps(meta, sort_keys=True)})


def swap_layers(d):
    a, b, tmp = layer_file(d, 0), layer_file(d, 1), d / "swap"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def wrong_shape(t):
    t["qkv.H"], t["qkv.mu"] = torch.eye(96), torch.zeros(96, dtype=torch.float64)
