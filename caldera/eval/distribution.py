"""Paired distribution metrics against the dense model, as llama.cpp's perplexity tool reports a quantized model.

On the same perplexity windows (:mod:`caldera.eval.perplexity`), per scored position t (next-token prediction
after the first t tokens of a window), with p the dense model's and q the compressed model's next-token
distribution over the vocabulary and y_t the actual next token:

* **KL divergence** ``KL(p ‖ q) = Σ_v p(v) (ln p(v) − ln q(v))`` (nats), from the dense model's distribution;
* **Δ ln p** ``ln q(y_t) − ln p(y_t)``: the per-token log ratio of the actual token (its mean is minus the log of
  the perplexity ratio, up to the token weighting);
* **top-1 agreement**: ``argmax q = argmax p``.

The dense side is computed once per model and kept on disk (:class:`DenseReference`): its log-probabilities in
float16 (``(n_windows, seq_len − 1, vocab)``, one ``.npy`` memory map), plus, exactly, the log-probability of the
actual token (float32) and the argmax (int64) at every position. A compressed model's evaluation reads it window
by window in its own forward pass (:func:`caldera.eval.perplexity.perplexity` with ``reference=``). The dense
log-probabilities are renormalised after the float16 round trip, so p is a distribution: the reference keeps, per
position, the log-sum-exp c of the float16 values and ``Σ_v p(v) ln p(v)`` of the renormalised p, so that an
evaluation computes ``KL = Σ p ln p − Σ_v p(v) z(v) + logsumexp(z)`` from the compressed logits z in one
exponential and one dot product per position. float16 keeps ln p to 2⁻¹¹ relative, which moves the KL by far less
than its window interval.

Results per window (sums over its positions, so windows can be bootstrapped): ``window_kl``, ``window_dlogp``,
``window_top1``; :func:`summary` gives the token-weighted means.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

#: the per-window sums a compressed evaluation adds to its perplexity result
WINDOW_KEYS = ("window_kl", "window_dlogp", "window_top1")


@dataclass
class DenseReference:
    """The dense model's next-token distributions on a set of windows (module docstring). ``folder`` holds
    ``logprobs.npy`` (float16, (W, T − 1, V)), ``target.npy`` (float32, (W, T − 1): ln p of the actual token),
    ``argmax.npy`` (int64, (W, T − 1)), ``lse.npy`` (float32, (W, T − 1): log-sum-exp of the float16 log-probabilities),
    ``negentropy.npy`` (float32, (W, T − 1): Σ p ln p of the renormalised p) and ``meta.json`` (shape, the windows'
    token ids' checksum)."""

    folder: Path
    logprobs: np.ndarray
    target: np.ndarray
    argmax: np.ndarray
    lse: np.ndarray
    negentropy: np.ndarray
    meta: dict

    #: the arrays besides ``logprobs.npy``, each (W, T − 1)
    POSITION_ARRAYS = ("target", "argmax", "lse", "negentropy")

    @staticmethod
    def windows_checksum(windows: torch.Tensor) -> str:
        import hashlib

        return hashlib.sha256(np.ascontiguousarray(windows.cpu().numpy().astype(np.int64)).tobytes()).hexdigest()

    @classmethod
    def open(cls, folder: str | os.PathLike, windows: torch.Tensor | None = None) -> DenseReference:
        """The reference in ``folder`` (memory-mapped); ``windows``: the windows about to be scored, which must be
        the ones it was made on (``ValueError`` naming the folder otherwise)."""
        folder = Path(folder)
        meta_path = folder / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{folder}: no dense reference here (meta.json missing); the dense model's "
                                    "reference job writes it (caldera.eval.distribution.write_reference)")
        meta = json.loads(meta_path.read_text())
        missing = [f"{k}.npy" for k in cls.POSITION_ARRAYS if not (folder / f"{k}.npy").exists()]
        if missing:
            raise ValueError(f"{folder}: {', '.join(missing)} missing (a reference of an older format, or a partial "
                             "copy); rebuild the reference")
        ref = cls(folder, np.load(folder / "logprobs.npy", mmap_mode="r"),
                  *(np.load(folder / f"{k}.npy") for k in cls.POSITION_ARRAYS), meta)
        w, t, v = meta["shape"]
        if ref.logprobs.shape != (w, t, v) or any(getattr(ref, k).shape != (w, t) for k in cls.POSITION_ARRAYS):
            raise ValueError(f"{folder}: arrays do not match meta.json's shape {meta['shape']}; rebuild the reference")
        if windows is not None and cls.windows_checksum(windows) != meta["windows_sha256"]:
            raise ValueError(f"{folder}: made on other windows than these (token checksum differs); rebuild the "
                             "reference with the same eval.ppl settings and tokenizer")
        return ref

    def chunk(self, start: int, stop: int) -> tuple[torch.Tensor, ...]:
        """``(ln p̃ (B, T − 1, V) float16 as stored, c (B, T − 1), Σ p ln p (B, T − 1), ln p(y) (B, T − 1),
        argmax (B, T − 1))`` of windows ``start:stop``, with p = exp(ln p̃ − c) the renormalised distribution
        (:func:`renormalised`). The float16 array is the memory map's, read as :func:`paired_window_sums` uses it."""
        with warnings.catch_warnings():  # the map is read-only, and so is every use of the tensor over it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            lp16 = torch.from_numpy(np.asarray(self.logprobs[start:stop]))
        return (lp16,
                *(torch.from_numpy(getattr(self, k)[start:stop]) for k in ("lse", "negentropy", "target", "argmax")))


def renormalised(lp16: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c, Σ p ln p)`` per position of float16 log-probabilities ``(..., V)``: c their log-sum-exp and p =
    exp(lp16 − c) the distribution they round to (both float32)."""
    lp = lp16.float()
    c = torch.logsumexp(lp, dim=-1, keepdim=True)
    lp.sub_(c)
    return c.squeeze(-1), (lp.exp() * lp).sum(dim=-1)


def next_token_logprobs(logits: torch.Tensor, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log q (B, T − 1, V) float32, ln q(y) (B, T − 1))`` of a batch's logits ``(B, T, V)`` and ids ``(B, T)``:
    the prediction at each position but the last, and the log-probability of the actual next token."""
    lq = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    y = batch[:, 1:].to(lq.device).unsqueeze(-1)
    return lq, lq.gather(-1, y).squeeze(-1)


#: float32 elements of one block of positions in :func:`paired_window_sums` on a CPU (8 MB: the block's
#: conversions, exponentials and reductions stay in the caches, and its buffer is reused across blocks)
CPU_BLOCK_ELEMENTS = 1 << 21


def paired_window_sums(logits: torch.Tensor, batch: torch.Tensor, ref: tuple[torch.Tensor, ...]
                       ) -> dict[str, torch.Tensor]:
    """Per-window sums ``{window_kl, window_dlogp, window_top1}`` and the mean next-token loss ``loss`` (each
    ``(B,)`` float64 on the CPU) of a compressed model's logits ``(B, T, V)`` on ids ``batch`` against the dense
    reference chunk ``ref`` (:meth:`DenseReference.chunk` of the same windows).

    Per position, with z the logits and p = exp(ln p̃ − c) the reference: ``KL = Σ p ln p − Σ p z +
    logsumexp(z)`` (module docstring), ``Δ ln p = (z_y − logsumexp(z)) − ln p(y)``, top-1 ``argmax z =
    argmax p`` and the loss ``logsumexp(z) − z_y``, the cross-entropy :func:`caldera.eval.perplexity.batch_losses`
    computes. The positions are taken in blocks (on a CPU of :data:`CPU_BLOCK_ELEMENTS`, on other devices a
    window at a time): each block's p is made in one reused buffer and every reduction reads the block while it
    is in the caches."""
    lp16, c, negent_p, target_p, argmax_p = ref
    B, T, V = logits.shape
    if tuple(lp16.shape) != (B, T - 1, V):
        raise ValueError(f"the reference holds {tuple(lp16.shape)} log-probabilities, the model gives "
                         f"{(B, T - 1, V)} (another vocabulary or window length); rebuild the reference")
    dev = logits.device
    rows = max(1, CPU_BLOCK_ELEMENTS // V) if dev.type == "cpu" else T - 1
    buf = torch.empty(min(rows, T - 1), V, dtype=torch.float32, device=dev)
    pz = torch.empty(B, T - 1, dtype=torch.float32, device=dev)
    lse = torch.empty_like(pz)
    top = torch.empty(B, T - 1, dtype=torch.long, device=dev)
    for b in range(B):
        for s in range(0, T - 1, rows):
            e = min(s + rows, T - 1)
            p = buf[: e - s]
            p.copy_(lp16[b, s:e])
            p.sub_(c[b, s:e].to(dev).unsqueeze(-1)).exp_()
            z = logits[b, s:e].float()
            pz[b, s:e] = torch.linalg.vecdot(p, z)
            lse[b, s:e] = torch.logsumexp(z, dim=-1)
            top[b, s:e] = z.argmax(dim=-1)
    z_y = logits[:, :-1].gather(-1, batch[:, 1:].to(dev).unsqueeze(-1)).squeeze(-1).float()
    target_q = z_y - lse
    kl = negent_p.to(dev) - pz + lse
    return {"window_kl": kl.sum(dim=1).double().cpu(),
            "window_dlogp": (target_q - target_p.to(dev)).sum(dim=1).double().cpu(),
            "window_top1": (top == argmax_p.to(dev)).sum(dim=1).double().cpu(),
            "loss": (-target_q).mean(dim=1).double().cpu()}


@torch.inference_mode()
def write_reference(model, windows: torch.Tensor, folder: str | os.PathLike, batch_size: int = 1,
                    progress: bool = True) -> Path:
    """The dense ``model``'s :class:`DenseReference` on ``windows`` ``(W, T)`` in ``folder`` (written into a
    temporary sibling folder and renamed when complete, so a killed job leaves no reference a rerun would trust)."""
    import shutil

    from numpy.lib.format import open_memmap
    from tqdm.auto import tqdm

    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    w, t = windows.shape
    lp_out = target = argmax = lse = negent = None
    try:
        with tqdm(total=w, desc="dense reference", unit="win", disable=not progress) as bar:
            for start in range(0, w, batch_size):
                batch = windows[start:start + batch_size].to(device)
                lp, tp = next_token_logprobs(model(input_ids=batch, use_cache=False).logits, batch)
                if lp_out is None:
                    v = lp.shape[-1]
                    lp_out = open_memmap(tmp / "logprobs.npy", mode="w+", dtype=np.float16, shape=(w, t - 1, v))
                    target = np.zeros((w, t - 1), dtype=np.float32)
                    argmax = np.zeros((w, t - 1), dtype=np.int64)
                    lse = np.zeros((w, t - 1), dtype=np.float32)
                    negent = np.zeros((w, t - 1), dtype=np.float32)
                stop = start + batch.shape[0]
                lp16 = lp.half()
                lp_out[start:stop] = lp16.cpu().numpy()
                c, h = renormalised(lp16)
                lse[start:stop] = c.cpu().numpy()
                negent[start:stop] = h.cpu().numpy()
                target[start:stop] = tp.cpu().numpy()
                argmax[start:stop] = lp.argmax(dim=-1).cpu().numpy()
                bar.update(batch.shape[0])
    finally:
        model.train(was_training)
    lp_out.flush()
    del lp_out
    np.save(tmp / "target.npy", target)
    np.save(tmp / "argmax.npy", argmax)
    np.save(tmp / "lse.npy", lse)
    np.save(tmp / "negentropy.npy", negent)
    meta = {"shape": [w, t - 1, int(v)], "windows_sha256": DenseReference.windows_checksum(windows),
            "dtype": "float16"}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def summary(result: dict) -> dict:
    """Token-weighted means of a perplexity result's per-window sums, each with its 95 % bootstrap-over-windows
    interval (:func:`caldera.stats.weighted_mean_interval`): ``{"kl", "dlogp", "top1"}`` → ``{"estimate", "lo",
    "hi"}``; empty without the per-window sums."""
    from caldera.stats import weighted_mean_interval

    if not all(k in result for k in WINDOW_KEYS):
        return {}
    return {k.removeprefix("window_"): weighted_mean_interval(result[k], result["window_tokens"])
            for k in WINDOW_KEYS}
