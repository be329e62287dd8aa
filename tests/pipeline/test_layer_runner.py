"""Running a model one decoder layer at a time (caldera.pipeline.layer_runner): the captured layer inputs, each
layer in its turn, and the hidden states advanced in place, against the model's own forward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from caldera.pipeline import layer_runner as R
from tests.helpers import tiny_gemma3, tiny_llama


def _ids(n=2, t=10, seed=0):
    return torch.randint(0, 128, (n, t), generator=torch.Generator().manual_seed(seed))


def test_the_decoder_layers_of_a_model_and_of_one_without():
    model = tiny_llama()
    assert R.decoder_layers(model) is model.model.layers
    assert R.decoder_layers(model.model) is model.model.layers
    with pytest.raises(ValueError, match="Linear has no decoder layers"):
        R.decoder_layers(nn.Linear(2, 2))


def test_the_captured_inputs_are_each_layers_own_and_the_layers_are_put_back():
    """Gemma-3's sliding-window layers and its global layer receive different masks and rotary tables: each
    layer's keyword arguments are its own, the hidden states are layer 0's, and the model keeps its layers."""
    model = tiny_gemma3()
    layers = list(R.decoder_layers(model))
    seen = []
    hooks = [layer.register_forward_pre_hook(lambda m, a, k, _i=i: seen.append((_i, a[0].clone() if a else
                                                                                  k["hidden_states"].clone(), k)),
                                             with_kwargs=True) for i, layer in enumerate(layers)]
    with torch.no_grad():
        model(input_ids=_ids(), use_cache=False)
    for h in hooks:
        h.remove()
    [(hs, kws)] = R.capture_layer_inputs(model, [_ids()])
    assert list(R.decoder_layers(model)) == layers
    assert len(kws) == len(layers) == 3
    torch.testing.assert_close(hs, seen[0][1], rtol=0, atol=0)
    local, glob = kws[0]["position_embeddings"], kws[2]["position_embeddings"]
    assert not torch.equal(local[0], glob[0])  # local and global RoPE
    for i, (_, _, want) in enumerate(seen):
        for key in ("position_embeddings", "attention_mask"):
            a, b = kws[i].get(key), want.get(key)
            if isinstance(a, tuple):
                assert all(torch.equal(x, y) for x, y in zip(a, b))
            elif isinstance(a, torch.Tensor):
                assert torch.equal(a, b)
            else:
                assert a == b


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3], ids=["llama", "gemma3"])
@pytest.mark.parametrize("offload", [False, True])
def test_advancing_every_layer_in_turn_is_the_models_forward(make, offload):
    """The layer-major pass ends with the hidden states the model's own forward gives its final norm; each
    batch's buffer is overwritten in place (the same storage from the first layer to the last)."""
    model = make()
    batches = [_ids(seed=1), _ids(seed=2)]
    with torch.no_grad():
        states, kwargs = R.initial_states(model, batches, offload=offload)
        ptrs = [s.data_ptr() for s in states]
        for li in range(len(R.decoder_layers(model))):
            with R.layer_in_turn(model, li) as (layer, run_on):
                R.advance_layer(layer, states, [k[li] for k in kwargs], run_on)
        into_norm = []
        hook = model.model.norm.register_forward_pre_hook(lambda m, a: into_norm.append(a[0].clone()))
        for ids in batches:
            model(input_ids=ids, use_cache=False)
        hook.remove()
    for hs, want in zip(states, into_norm, strict=True):
        torch.testing.assert_close(hs, want, rtol=1e-5, atol=1e-6)
    assert [s.data_ptr() for s in states] == ptrs


class _Loader:
    def __init__(self):
        self.calls = []

    def load(self, li):
        self.calls.append(("load", li))

    def release(self, li):
        self.calls.append(("release", li))


def test_a_layer_in_turn_is_loaded_before_and_released_after_also_on_an_error():
    model, loader = tiny_llama(), _Loader()
    with R.layer_in_turn(model, 1, loader=loader) as (layer, run_on):
        assert layer is R.decoder_layers(model)[1] and run_on == torch.device("cpu")
        assert loader.calls == [("load", 1)]
    assert loader.calls == [("load", 1), ("release", 1)]
    with pytest.raises(RuntimeError, match="boom"):
        with R.layer_in_turn(model, 0, loader=loader):
            raise RuntimeError("boom")
    assert loader.calls[-2:] == [("load", 0), ("release", 0)]
