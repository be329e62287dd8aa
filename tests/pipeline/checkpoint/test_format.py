"""caldera.pipeline.checkpoint.format: the content digests (tensor_digest, json_digest), the quantization scheme
config.json states, and weight_fingerprint, which leaves no dequantized cache behind."""

from __future__ import annotations

import torch

from caldera.nn.compressed_linear import CompressedLinear
from caldera.pipeline.checkpoint.format import json_digest, quantization_scheme, tensor_digest
from caldera.pipeline.checkpoint.loader import load_compressed
from tests.pipeline.checkpoint_helpers import IDS


def test_tensor_digest_covers_dtype_shape_and_bytes():
    """The same bytes read as another dtype or shape, or one element changed, give another digest; a strided
    view gives the digest of its contiguous copy."""
    t = torch.arange(12, dtype=torch.int16)
    d = tensor_digest(t)
    assert len(d) == 64 and d == tensor_digest(t.clone())
    assert tensor_digest(t.view(torch.uint16)) != d
    assert tensor_digest(t.view(3, 4)) != d
    changed = t.clone()
    changed[5] = 0
    assert tensor_digest(changed) != d
    x = torch.arange(12, dtype=torch.float32).view(3, 4).t()
    assert tensor_digest(x) == tensor_digest(x.contiguous()) != tensor_digest(x.t().contiguous())


def test_json_digest_is_of_the_canonical_json():
    """Key order does not change the digest; a value, a nested value or a type (1 vs 1.0) does."""
    a = {"hidden_size": 64, "rope": {"theta": 1e4, "type": "default"}, "act": "silu"}
    b = {"act": "silu", "rope": {"type": "default", "theta": 1e4}, "hidden_size": 64}
    assert json_digest(a) == json_digest(b)
    assert json_digest({**a, "act": "relu"}) != json_digest(a)
    assert json_digest({**a, "rope": {"theta": 1e5, "type": "default"}}) != json_digest(a)
    assert json_digest({"x": 1}) != json_digest({"x": 1.0})


def test_quantization_scheme_states_the_distinct_settings_of_the_modules():
    """The bits summary under config.json's names, every setting's distinct values sorted (a None quantizer and
    a malformed module entry left out), the dense layers as recorded; no bits keys without a summary."""
    mods = {
        "a": {"rank": 4, "q_quantizer": "e8p", "l_quantizer": "e8p-rvq4", "r_quantizer": "e8p-rvq4", "rht": True},
        "b": {"rank": 0, "q_quantizer": "e8p", "l_quantizer": None, "r_quantizer": None, "rht": True},
        "c": {"rank": 4, "q_quantizer": "e8p-rvq3", "l_quantizer": "e8p", "r_quantizer": "e8p", "rht": False},
        "d": "not a module",
    }
    cfg = {"modules": mods, "bits": {"b_q": 2, "b_lr": 4, "average_bits": 2.25, "rank": 4}, "dense_layers": [3]}
    assert quantization_scheme(cfg) == {
        "q_bits": 2, "lr_bits": 4, "bits_per_weight": 2.25, "ranks": [0, 4], "q_quantizers": ["e8p", "e8p-rvq3"],
        "l_quantizers": ["e8p", "e8p-rvq4"], "r_quantizers": ["e8p", "e8p-rvq4"], "rht": [False, True],
        "dense_layers": [3]}
    assert quantization_scheme({"modules": mods}) == {
        "ranks": [0, 4], "q_quantizers": ["e8p", "e8p-rvq3"], "l_quantizers": ["e8p", "e8p-rvq4"],
        "r_quantizers": ["e8p", "e8p-rvq4"], "rht": [False, True], "dense_layers": []}


def test_verified_load_leaves_no_dequantized_cache(saved):
    """Verification decodes every module (its fingerprint) but keeps no float32 copy of it: a 7B model would
    hold 26 GB of caches before the first forward. The reference forward still builds its cache."""
    _, path = saved
    model, _ = load_compressed(path, kernel="reference")
    mods = [m for m in model.modules() if isinstance(m, CompressedLinear)]
    assert mods and all(m._Q_cache is None and m._L_cache is None and m._R_cache is None for m in mods)
    with torch.no_grad():
        model(torch.tensor(IDS))
    assert all(m._Q_cache is not None for m in mods)  # cache_dequantized (default): unchanged

