"""Running a decoder-only model one decoder layer at a time over every calibration batch (the layer-major pass of
the Hessian collection, :mod:`caldera.pipeline.hessians`, and of layer-streamed evaluation,
:mod:`caldera.eval.streamed`).

1. The hidden states entering decoder layer 0 and the keyword arguments every layer receives (rotary
   ``position_embeddings``, the causal or sliding-window ``attention_mask``, ``position_ids``, ...) are captured
   by one forward per batch with the layers swapped for recorders (:func:`capture_layer_inputs`,
   :func:`initial_states`).
2. Each layer in turn is brought to the device it runs on (read from the checkpoint first when a loader streams
   it, :func:`layer_in_turn`) and run on every batch, its outputs overwriting its inputs in place
   (:func:`advance_layer`): one buffer per batch holds the only copy of the hidden states.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn


class _StopForward(Exception):
    """Raised by the capture hook on decoder layer 0 once its inputs are stored."""


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a LLaMA-style model (``model.model.layers`` or ``model.layers``)."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"{type(model).__name__} has no decoder layers at .model.layers or .layers; "
            "supported: decoder-only models with q/k/v/o and gate/up/down projections (LLaMA, Mistral, Gemma-3)"
        )
    return layers


class _Recorder(nn.Module):
    """Stands in for decoder layer ``index`` during capture: records its inputs, passes the hidden states on."""

    def __init__(self, index: int, last: bool, sink: list):
        super().__init__()
        self.index, self.last, self.sink = index, last, sink

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if args:
            raise RuntimeError("decoder layers called with extra positional arguments; cannot capture their inputs")
        if self.index == 0:
            self.sink.append(hidden_states.detach())
        self.sink.append(dict(kwargs))
        if self.last:
            raise _StopForward
        return hidden_states


@torch.no_grad()
def capture_layer_inputs(
    model: nn.Module, batches: Iterable[Tensor]
) -> list[tuple[Tensor, list[dict[str, Any]]]]:
    """``[(hidden_states into layer 0, [keyword arguments of layer l for every l])]``, one entry per batch.

    The keyword arguments (rotary ``position_embeddings``, attention masks, ``position_ids``) depend only on
    the token positions, not on the hidden states, but they may differ between layers: Gemma-3 gives its
    sliding-window layers a local RoPE and a windowed mask and its global layers others. The decoder layers
    are swapped for recorders for one cheap forward per batch (embeddings only; no layer runs), so each
    layer later receives exactly what the model's own forward would pass it.
    """
    inner = getattr(model, "model", model)
    layers = decoder_layers(model)
    originals = list(layers)
    store: list[tuple[Tensor, list[dict[str, Any]]]] = []
    device = next(model.parameters()).device
    try:
        for ids in batches:
            sink: list = []
            for i in range(len(originals)):
                layers[i] = _Recorder(i, i == len(originals) - 1, sink)
            try:
                inner(input_ids=ids.to(device), use_cache=False)
            except _StopForward:
                pass
            else:
                raise RuntimeError("the last decoder layer was never called: cannot capture the layer inputs")
            if len(sink) != len(originals) + 1:
                raise RuntimeError(f"captured inputs of {len(sink) - 1} of {len(originals)} decoder layers")
            store.append((sink[0], sink[1:]))
    finally:
        for i, layer in enumerate(originals):
            layers[i] = layer
    return store


def _run_layer(layer: nn.Module, hs: Tensor, kwargs: dict[str, Any]) -> Tensor:
    out = layer(hs, **kwargs)
    return out[0] if isinstance(out, (tuple, list)) else out


def _to(obj: Any, device: torch.device) -> Any:
    """``obj`` (tensors inside tuples, lists, dicts) on ``device`` (the same objects where they are there)."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def initial_states(model: nn.Module, batches: Iterable[Tensor], *, device: torch.device | str | None = None,
                   offload: bool = False) -> tuple[list[Tensor], list[list[dict[str, Any]]]]:
    """``(states, layer_kwargs)`` of a layer-major pass over ``batches`` (each (B, T) int64 token ids):
    ``states[b]`` the hidden states entering decoder layer 0 for batch ``b`` ((B, T, hidden), the model's
    dtype; the only copy, on the CPU with ``offload``, else on ``device`` or where the embeddings ran) and
    ``layer_kwargs[b][l]`` the keyword arguments decoder layer ``l`` receives for that batch
    (:func:`capture_layer_inputs`)."""
    captured = capture_layer_inputs(model, batches)
    states = [hs.cpu() if offload else hs if device is None else hs.to(device) for hs, _ in captured]
    layer_kwargs = [kws for _, kws in captured]
    return states, layer_kwargs


@contextmanager
def layer_in_turn(model: nn.Module, li: int, *, device: torch.device | str | None = None,
                  loader: Any | None = None) -> Iterator[tuple[nn.Module, torch.device]]:
    """``(decoder layer li, the device it runs on)`` for the duration of the block: read from the checkpoint
    first when a ``loader`` (:class:`caldera.pipeline.partial.LazyLayers`) is given and moved to ``device``
    (default: where it is); moved back and released (``loader.release``) after, also on an error."""
    layer = decoder_layers(model)[li]
    if loader is not None:
        loader.load(li)
    try:
        home = next(layer.parameters()).device
        run_on = home if device is None else torch.device(device)
        if run_on != home:
            layer.to(run_on)
        try:
            yield layer, run_on
        finally:
            if run_on != home:
                layer.to(home)
    finally:
        if loader is not None:
            loader.release(li)


def advance_layer(layer: nn.Module, states: list[Tensor], kwargs: list[dict[str, Any]], device: torch.device) -> None:
    """Run ``layer`` on every batch buffer of ``states`` and overwrite each buffer with its output, in place
    (the layer's inputs and outputs are never both held in full; buffers may live off ``device``)."""
    for hs, kws in zip(states, kwargs):
        out = _run_layer(layer, hs.to(device), _to(kws, device))
        hs.copy_(out)
        del out
