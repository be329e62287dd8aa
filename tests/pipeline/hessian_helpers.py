"""Edits of Hessian files, the way their writer seals one or as a changed bit (tests/pipeline/test_hessians.py,
tests/pipeline/test_hessian_files.py and the readers' tests in tests/experiments/jobs/test_hessian_readers.py)."""

from __future__ import annotations

import json

import torch

from caldera.pipeline.hessian_files import layer_file


def rewrite(path, meta_edit=None, tensors_edit=None, dst=None):
    """Rewrite a layer file the way the writer writes one (content hash recomputed, metadata sorted JSON), after
    ``meta_edit(meta)`` / ``tensors_edit(tensors)``; to ``dst`` if given."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from caldera.atomic import save_safetensors_atomic
    from caldera.pipeline.hessian_files import META_KEY, tensors_sha256

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


def flip_bit(path, tensor, byte, bit):
    """Flip one bit of entry 0 of ``tensor`` in a safetensors file, in place (byte 0 = lowest mantissa bits of a
    little-endian float32, byte 3 bit 6 = an exponent bit)."""
    raw = bytearray(path.read_bytes())
    n = int.from_bytes(raw[:8], "little")
    start = 8 + n + json.loads(raw[8 : 8 + n])[tensor]["data_offsets"][0]
    raw[start + byte] ^= 1 << bit
    path.write_bytes(bytes(raw))
