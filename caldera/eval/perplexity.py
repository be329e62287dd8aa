"""Perplexity as in the authors' ``eval_ppl.py`` (QuIP#/GPTQ protocol).

* WikiText-2 protocol: a ``(1, N)`` token stream (see :func:`caldera.pipeline.text.perplexity_stream`) is
  cut into ``N // seq_len`` non-overlapping windows (stride ``seq_len``; the remainder is dropped).
* C4 protocol: an ``(n, seq_len)`` tensor of windows (:func:`caldera.pipeline.text.random_windows`) is used
  as is.

Each window is evaluated independently (no context carried over): its loss is the mean cross-entropy of
the ``seq_len - 1`` next-token predictions, and ``ppl = exp(mean of the per-window losses)``.

The per-window results are kept (``window_nll``: summed NLL of each window in nats, ``window_tokens``: its
scored predictions), so that :mod:`caldera.stats` can give the perplexity a bootstrap-over-windows interval
(``ppl_lo``, ``ppl_hi``) and compare two variants evaluated on the same windows with a paired interval.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm


def make_windows(stream_or_windows: torch.Tensor, seq_len: int) -> torch.Tensor:
    """``(n_windows, seq_len)`` view of a ``(1, N)`` stream (non-overlapping) or of ready-made windows."""
    x = torch.as_tensor(stream_or_windows)
    if x.dim() == 1:
        x = x.unsqueeze(0)
    if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"stream_or_windows must be a (1, N) stream or (n, seq_len) windows of integer ids, "
            f"got shape {tuple(x.shape)} dtype {x.dtype}"
        )
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    if x.shape[0] == 1:
        n = x.shape[1] // seq_len
        if n == 0:
            raise ValueError(f"stream has {x.shape[1]} tokens, fewer than seq_len={seq_len}")
        return x[0, : n * seq_len].reshape(n, seq_len).long()
    if x.shape[1] != seq_len:
        raise ValueError(f"windows have length {x.shape[1]} but seq_len={seq_len}")
    return x.long()


def batch_losses(logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of each window of a batch, ``(B,)`` float64 on the CPU, from its logits
    ``(B, T, vocab)`` (any float dtype; the loss is taken in float32) and token ids ``batch`` ``(B, T)``."""
    b, t, v = logits.shape
    logits = logits[:, :-1].reshape(b * (t - 1), v).float()
    target = batch[:, 1:].reshape(-1).to(logits.device)
    ce = F.cross_entropy(logits, target, reduction="none").view(b, t - 1)
    return ce.mean(dim=1).double().cpu()


@torch.inference_mode()
def window_losses(
    model, windows: torch.Tensor, batch_size: int = 1, progress: bool = True, desc: str = "perplexity",
    on_logits=None,
) -> torch.Tensor:
    """Mean next-token cross-entropy of every window, ``(n_windows,)`` float64 on the CPU. ``on_logits(start,
    logits, batch)``, when given, sees every batch's logits ``(B, T, V)`` (windows ``start:start + B``) in the
    same forward pass; when it returns the batch's mean losses ``(B,)`` (computed in its own pass over the
    logits, as :func:`batch_losses` would) they are used instead of a second pass."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        with tqdm(total=windows.shape[0], desc=desc, unit="win", disable=not progress) as bar:
            for start in range(0, windows.shape[0], batch_size):
                batch = windows[start : start + batch_size].to(device)
                logits = model(input_ids=batch, use_cache=False).logits
                loss = on_logits(start, logits, batch) if on_logits is not None else None
                out.append(batch_losses(logits, batch) if loss is None else loss)
                bar.update(batch.shape[0])
    finally:
        model.train(was_training)
    return torch.cat(out)


def perplexity(
    model,
    stream_or_windows: torch.Tensor,
    seq_len: int,
    batch_size: int = 1,
    max_windows: int | None = None,
    progress: bool = True,
    reference=None,
) -> dict:
    """Perplexity of ``model`` on a stream or on windows (see module docstring).

    ``max_windows`` keeps only the first windows (a quick estimate). Returns ``ppl``, ``nll`` (mean
    per-window loss, nats/token), ``n_tokens`` (predictions scored: ``n_windows * (seq_len - 1)``),
    ``n_windows``, the per-window ``window_nll`` (summed loss, nats) and ``window_tokens``, and the 95 %
    bootstrap interval ``ppl_lo``, ``ppl_hi`` (:func:`caldera.stats.perplexity_interval`, seeded).
    ``reference``: the folder of a :class:`caldera.eval.distribution.DenseReference` made on these windows; the
    same forward passes then add the paired distribution metrics against it (``window_kl``, ``window_dlogp``,
    ``window_top1`` and their means ``kl``, ``dlogp``, ``top1`` with intervals).
    """
    windows = make_windows(stream_or_windows, seq_len)
    if max_windows is not None:
        windows = windows[:max_windows]
    if reference is None:
        return summarize(window_losses(model, windows, batch_size=batch_size, progress=progress), seq_len)
    from caldera.eval.distribution import WINDOW_KEYS, DenseReference, paired_window_sums, summary

    ref = DenseReference.open(reference, windows)
    sums: dict[str, list[torch.Tensor]] = {k: [] for k in WINDOW_KEYS}

    def paired(start: int, logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        res = paired_window_sums(logits, batch, ref.chunk(start, start + batch.shape[0]))
        for k in WINDOW_KEYS:
            sums[k].append(res[k])
        return res["loss"]

    res = summarize(window_losses(model, windows, batch_size=batch_size, progress=progress, on_logits=paired),
                    seq_len)
    res.update({k: [float(x) for x in torch.cat(v)] for k, v in sums.items()})
    res.update(summary(res))
    return res


def summarize(losses: torch.Tensor, seq_len: int) -> dict:
    """The result dict of :func:`perplexity` from the per-window mean losses ``(n_windows,)`` (float64)."""
    from caldera.stats import perplexity_interval

    nll = float(losses.mean())
    tokens = [seq_len - 1] * int(losses.shape[0])
    sums = [float(x) * (seq_len - 1) for x in losses]
    ci = perplexity_interval(sums, tokens)
    return {
        "ppl": math.exp(nll),
        "nll": nll,
        "n_tokens": int(losses.shape[0] * (seq_len - 1)),
        "n_windows": int(losses.shape[0]),
        "window_nll": sums,
        "window_tokens": tokens,
        "ppl_lo": ci["lo"],
        "ppl_hi": ci["hi"],
    }
