"""Layer-streamed evaluation: a model larger than the device, evaluated exactly, one decoder layer at a time.

The forward runs **layer-major**: every window (perplexity) or every lm-eval request batch (zero-shot) goes
through decoder layer 0, then all of them through layer 1, and so on, with the same code path as Hessian
collection (:func:`caldera.pipeline.layer_runner.initial_states`, :func:`~caldera.pipeline.layer_runner.layer_in_turn`,
:func:`~caldera.pipeline.layer_runner.advance_layer`): the hidden states entering layer 0 and each layer's keyword
arguments (rotary tables, masks) are captured from the model's own forward, and each layer is read from the
checkpoint when its turn comes (``loader``: :class:`caldera.pipeline.partial.LazyLayers`) and dropped after.
Then the final norm and the LM head (:func:`head_logits`) run per batch.

The batches are those of the in-memory path (perplexity: ``batch_size`` windows; zero-shot: lm-eval's own
batches, replayed), so each layer sees the same tensors: on a float32 CPU model the results are bitwise those
of :func:`caldera.eval.perplexity.perplexity` and :func:`caldera.eval.zeroshot.zeroshot` (the tests check it).

Memory: one decoder layer, the embeddings, final norm and LM head, and the hidden states of every batch
(``n_windows × seq_len × hidden`` in the model's dtype; with ``offload`` they are kept on the CPU and one
batch at a time is moved to the layer's device).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

#: ``eval.stream_layers: auto`` streams when the dense weights exceed this share of the device's free memory
FIT_FRACTION = 0.8


def head_logits(model: nn.Module, hidden: Tensor) -> Tensor:
    """The logits the causal LM ``model`` gives for the last decoder layer's output ``hidden`` (…, hidden):
    its final norm, LM head and, where the config has one (Gemma-3), the final-logit soft-capping, as its own
    forward applies them; (…, vocab) in the head's dtype."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "logit_scale", None):
        raise ValueError(f"{type(model).__name__}: logits scaled by config.logit_scale are not supported by the "
                         "streamed evaluation; set eval.stream_layers: never")
    inner = getattr(model, "model", model)
    norm, head = getattr(inner, "norm", None), model.get_output_embeddings()
    if norm is None or head is None:
        raise ValueError(f"{type(model).__name__} has no final norm at .model.norm or no output embeddings; the "
                         "streamed evaluation supports LLaMA-style causal LMs (set eval.stream_layers: never)")
    logits = head(norm(hidden))
    cap = getattr(cfg, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


@torch.inference_mode()
def final_states(model: nn.Module, batches: list[Tensor], *, loader: Any | None = None,
                 device: torch.device | str | None = None, offload: bool = False,
                 progress: bool = False, desc: str = "layers") -> list[Tensor]:
    """The last decoder layer's outputs (before the final norm) for each batch of token ids in ``batches``
    (each (B_i, T_i) int64, right-padded as the caller's in-memory path pads them): ``[(B_i, T_i, hidden)]`` in
    the model's dtype, on the CPU with ``offload``, else where the embeddings run (or ``device``).

    Layer-major: all batches through layer 0, then layer 1, …; ``loader`` (:class:`~caldera.pipeline.partial.
    LazyLayers`) reads each layer just before its turn and releases it after (one layer real at a time);
    ``device``: where each layer runs (default where it is)."""
    from tqdm.auto import tqdm

    from caldera.pipeline.layer_runner import advance_layer, decoder_layers, initial_states, layer_in_turn

    was_training = model.training
    model.eval()
    try:
        states, layer_kwargs = initial_states(model, batches, device=device, offload=offload)
        for li in tqdm(range(len(decoder_layers(model))), desc=desc, unit="layer", disable=not progress):
            with layer_in_turn(model, li, device=device, loader=loader) as (layer, run_on):
                advance_layer(layer, states, [kws[li] for kws in layer_kwargs], run_on)
    finally:
        model.train(was_training)
    return states


def _head_device(model: nn.Module) -> torch.device:
    return next(model.get_output_embeddings().parameters()).device


@torch.inference_mode()
def perplexity(model: nn.Module, stream_or_windows: Tensor, seq_len: int, *, loader: Any | None = None,
               batch_size: int = 1, max_windows: int | None = None, offload: bool = False,
               progress: bool = True) -> dict:
    """:func:`caldera.eval.perplexity.perplexity` computed layer-major (module docstring): the same windows,
    batches and result keys (``ppl``, ``nll``, ``n_tokens``, ``n_windows``, ``window_nll``, ``window_tokens``,
    ``ppl_lo``, ``ppl_hi``). ``model``: e.g. ``LazyLayers.open(...).model`` with ``loader`` that object (its
    decoder layers on ``meta`` until their turn), or any in-memory causal LM with ``loader=None``. ``offload``:
    hold the hidden states of all windows ((n_windows, seq_len, hidden), the model's dtype) on the CPU."""
    from caldera.eval.perplexity import batch_losses, make_windows, summarize

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    windows = make_windows(stream_or_windows, seq_len)
    if max_windows is not None:
        windows = windows[:max_windows]
    batches = list(windows.split(batch_size))
    states = final_states(model, batches, loader=loader, offload=offload, progress=progress, desc="perplexity")
    dev = _head_device(model)
    losses = [batch_losses(head_logits(model, hs.to(dev)), ids) for hs, ids in zip(states, batches)]
    return summarize(torch.cat(losses), seq_len)


def streamed_lm_class():
    """lm-eval's LM for a layer-streamed model (built lazily; lm-eval is an optional extra): the class of
    :func:`caldera.eval.zeroshot.continuation_lm_class` whose ``_loglikelihood_tokens`` runs every request
    layer-major.

    lm-eval scores all requests of all tasks in one ``loglikelihood`` call. This class replays lm-eval's own
    batching twice: a first pass records each padded batch (``_model_call`` returns zeros there; nothing of
    it is kept, and lm-eval's cache hook is disabled for it), then :func:`final_states` runs all recorded
    batches through each decoder layer in turn and keeps, per batch, only the final hidden states at the
    positions lm-eval reads (``scored_spans``; every position of a row it cannot match); the second pass
    is lm-eval's ordinary one, whose ``_model_call`` applies :func:`head_logits` at those positions (zeros
    elsewhere, never read), exactly as the in-memory class does. Construct it with ``loader=`` (the
    :class:`~caldera.pipeline.partial.LazyLayers`, or None for a model in memory) and ``offload=``.
    """
    from lm_eval.api.model import CacheHook

    from caldera.eval.zeroshot import continuation_lm_class

    base = continuation_lm_class()

    class StreamedLM(base):
        def __init__(self, *args, loader: Any | None = None, offload: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self._stream_loader, self._stream_offload = loader, offload
            self._stream_mode: str | None = None
            self._stream_batches: list[Tensor] = []
            self._stream_spans: list[Any] = []
            self._stream_scored: list[tuple[Tensor, Tensor, Tensor, int]] = []
            self._stream_next = 0

        def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None):
            hook = self.cache_hook
            self._stream_batches, self._stream_spans, self._stream_scored = [], [], []
            try:
                self._stream_mode, self.cache_hook = "record", CacheHook(None)
                super()._loglikelihood_tokens(requests, disable_tqdm=True, override_bs=override_bs)
                self.cache_hook = hook
                self._stream_mode = "compute"
                self._compute()
                self._stream_mode, self._stream_next = "replay", 0
                return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
            finally:
                self.cache_hook, self._stream_mode = hook, None
                self._stream_batches, self._stream_spans, self._stream_scored = [], [], []

        def _compute(self) -> None:
            """Every recorded batch through the decoder layer-major; keep the scored positions' states."""
            states = final_states(self.model, self._stream_batches, loader=self._stream_loader,
                                  offload=self._stream_offload, desc="zero-shot")
            for k, (inps, sp) in enumerate(zip(self._stream_batches, self._stream_spans)):
                T = inps.shape[1]
                sp = sp if sp is not None else [[(0, T)]] * inps.shape[0]
                need = sorted({(i, p) for i, row in enumerate(sp) for a, b in row for p in range(a, b)})
                rows = torch.tensor([i for i, _ in need], dtype=torch.long)
                pos = torch.tensor([p for _, p in need], dtype=torch.long)
                start = min(a for row in sp for a, _ in row)
                hs = states[k]
                self._stream_scored.append((rows, pos, hs[rows.to(hs.device), pos.to(hs.device)].clone(), start))
                states[k] = None  # each batch's full states go as soon as its scored rows are kept

        def _model_call(self, inps, attn_mask=None, labels=None):
            if self._stream_mode is None:
                return super()._model_call(inps, attn_mask=attn_mask, labels=labels)
            if attn_mask is not None or labels is not None:
                raise ValueError("the streamed zero-shot evaluation supports causal LMs only "
                                 "(set eval.stream_layers: never)")
            if self._stream_mode == "record":
                self._stream_batches.append(inps.detach().cpu())
                self._stream_spans.append(self.scored_spans(inps))
                vocab = self.model.get_output_embeddings().weight.shape[0]
                return torch.zeros(inps.shape[0], inps.shape[1], vocab, device=inps.device)
            k = self._stream_next
            self._stream_next += 1
            recorded = self._stream_batches[k] if k < len(self._stream_batches) else None
            if recorded is None or not torch.equal(recorded, inps.detach().cpu()):
                raise RuntimeError("lm-eval's second pass built a batch different from its first one; the "
                                   "streamed zero-shot evaluation cannot match them (set eval.stream_layers: never)")
            rows, pos, hs, start = self._stream_scored[k]
            dev = _head_device(self.model)
            with torch.no_grad():
                scored = head_logits(self.model, hs.to(dev))
            out = scored.new_zeros(inps.shape[0], inps.shape[1] - start, scored.shape[-1])
            out[rows.to(dev), pos.to(dev) - start] = scored
            return out

    return StreamedLM


def should_stream(mode: str, weight_bytes: int, budget_bytes: int) -> bool:
    """``eval.stream_layers``: ``always``, ``never``, or ``auto``: stream when the dense weights take more than
    :data:`FIT_FRACTION` (80 %) of ``budget_bytes``."""
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"eval.stream_layers: expected one of ['auto', 'always', 'never'], got {mode!r}")
    return mode == "always" or (mode == "auto" and weight_bytes > FIT_FRACTION * budget_bytes)
