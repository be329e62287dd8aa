"""RHT fine-tuning: train the randomized-Hadamard sign vectors of every compressed layer by distillation.

Paper §5.2 ("Fine-tuning of Randomized Hadamard Transform (RHT) Parameters", Tables 3–4) and App. E.4: the
diagonal Rademacher matrices ``S_U`` (d,) and ``S_V`` (n,) of every layer's RHT, ``Ŵ = (S_V ⊙ U_nᵀ)(Q + L R)
(U_d ⊙ S_U)`` (:mod:`caldera.algorithm.hadamard`), become real-valued trainable parameters initialised at their ±1
values (QuIP#'s RHT fine-tuning, quip-sharp.md §6); everything else (codes, scales, factors, embeddings,
norms, LM head) is frozen. The objective is the KL divergence between the original (teacher) and the
compressed (student) model's next-token distributions on calibration sequences, end to end (no layer-wise
stage, footnote of §5.2):

    loss = (1 / #positions) Σ_{b, t < T−1} Σ_v p_T(v | x_{≤t}) · (log p_T(v | x_{≤t}) − log p_S(v | x_{≤t}))

over the first T − 1 positions of each (B, T) batch (the authors' ``logits[:, :-1]``, authors-code.md §6). Its
gradient equals that of the authors' soft-label cross-entropy ``−Σ p_T log p_S`` (they differ by the teacher's
entropy, a constant); the KL is reported because it is 0 for a perfect student.

**Teacher distributions are recomputed per batch**, never stored: the teacher runs forward (no grad) on the
same batch just before the student, so memory holds one batch's (B, T, V) logits at a time — the authors store
softmaxed teacher logits for all 256 × 512 tokens on the CPU (~16.8 GB at a 32k vocabulary, ~4× that for
LLaMa-3's 128k). The price is one extra teacher forward per batch and epoch (≈ 1/4 of a training step).

Optimiser and schedule as in App. E.4 / the authors' ``finetune_RHT.py``: AdamW (weight decay 0.01, torch's
default betas), constant learning rate, ``epochs`` passes over the training sequences in a seeded random order
(``torch.Generator().manual_seed(seed · 1_000_003 + epoch)``), the held-out KL evaluated before training
(epoch 0) and after every epoch, and the signs of the epoch with the lowest held-out KL kept (epoch 0, the
untouched model, included: fine-tuning never returns a model worse on the held-out part than it started).

**Resume.** With ``state_path``, after every epoch the current and best signs, the AdamW moments and the
history are written to one safetensors file atomically (:func:`caldera.atomic.save_safetensors_atomic`); a
killed run called again with the same inputs continues after the last finished epoch and gives bit-identical
signs (the epoch order depends only on the seed and the epoch). A state written for other inputs (config,
data, initial signs, parameter shapes: a sha256 fingerprint) is ignored and training starts over.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from caldera.nn.compressed_linear import CompressedLinear

STATE_FORMAT = "caldera-rhtft-state/1"


@dataclass(frozen=True)
class RHTFTConfig:
    """Hyper-parameters of RHT fine-tuning (paper App. E.4: 5 epochs, lr 1e-3; batch 2 and weight decay 0.01
    from the authors' script, authors-code.md §6)."""

    epochs: int = 5
    lr: float = 1e-3
    batch_size: int = 2
    weight_decay: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"rht_ft.epochs={self.epochs!r}: need an integer >= 1")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"rht_ft.batch_size={self.batch_size!r}: need an integer >= 1")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"rht_ft.lr={self.lr!r}: need a finite number > 0")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"rht_ft.weight_decay={self.weight_decay!r}: need a number >= 0")


def sign_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Freeze every parameter of ``model``, make the RHT signs of every :class:`CompressedLinear` trainable
    float32 parameters (:meth:`CompressedLinear.make_signs_trainable`), and return them by name
    (``"<module path>.S_U"`` / ``".S_V"``, in module order). ``ValueError`` if no layer has an RHT."""
    for p in model.parameters():
        p.requires_grad_(False)
    out: dict[str, nn.Parameter] = {}
    for path, mod in model.named_modules():
        if isinstance(mod, CompressedLinear) and mod.meta["rht"]:
            mod.make_signs_trainable()
            for name in ("S_U", "S_V"):
                p = getattr(mod, name)
                p.requires_grad_(True)
                out[f"{path}.{name}"] = p
    if not out:
        raise ValueError("the model has no CompressedLinear with an RHT: there are no signs to fine-tune "
                         "(compress with rht enabled, or skip RHT fine-tuning for this variant)")
    return out


def kl_sum(student_logits: Tensor, teacher_logits: Tensor) -> Tensor:
    """``Σ_{b, t < T−1} KL(p_T ‖ p_S)`` (nats, float32 scalar) from (B, T, V) logits (module docstring)."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} != teacher {tuple(teacher_logits.shape)}")
    log_s = torch.log_softmax(student_logits[:, :-1].float(), dim=-1)
    log_t = torch.log_softmax(teacher_logits[:, :-1].float(), dim=-1)
    return torch.nn.functional.kl_div(log_s, log_t, log_target=True, reduction="sum")


def _logits(model: nn.Module, ids: Tensor) -> Tensor:
    return model(input_ids=ids, use_cache=False).logits


def heldout_kl(student: nn.Module, teacher: nn.Module, ids: Tensor, batch_size: int) -> float:
    """Mean KL per position (nats) of ``student`` against ``teacher`` on ``ids`` (N, T), teacher recomputed per
    batch; accumulated in float64."""
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, ids.shape[0], batch_size):
            b = ids[i : i + batch_size]
            total += float(kl_sum(_logits(student, b), _logits(teacher, b)).double())
            count += b.shape[0] * (b.shape[1] - 1)
    return total / count


def _fingerprint(cfg: RHTFTConfig, params: dict[str, nn.Parameter], train_ids: Tensor, heldout_ids: Tensor) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(dataclasses.asdict(cfg), sort_keys=True).encode())
    for name, p in params.items():
        h.update(f"{name}:{tuple(p.shape)}".encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    for t in (train_ids, heldout_ids):
        h.update(str(tuple(t.shape)).encode())
        h.update(t.to(torch.int64).cpu().numpy().tobytes())
    return h.hexdigest()


def _snapshot(params: dict[str, nn.Parameter]) -> dict[str, Tensor]:
    return {k: p.detach().clone() for k, p in params.items()}


def _save_state(path: Path, meta: dict[str, Any], params, best, opt: torch.optim.Optimizer) -> None:
    from caldera.atomic import save_safetensors_atomic

    tensors = {f"cur.{k}": p.detach().cpu().contiguous() for k, p in params.items()}
    tensors.update({f"best.{k}": v.cpu().contiguous() for k, v in best.items()})
    for i, st in opt.state_dict()["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            tensors[f"opt.{i}.{key}"] = torch.as_tensor(st[key]).detach().cpu().contiguous().clone()
    save_safetensors_atomic(tensors, path, {"state": json.dumps({"format": STATE_FORMAT, **meta}, sort_keys=True)})


def _load_state(path: Path, fingerprint: str) -> tuple[dict[str, Any], dict[str, Tensor]] | None:
    """The saved meta + tensors if ``path`` holds a state for these inputs, else None (absent, stale, unreadable)."""
    from safetensors import safe_open

    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            meta = json.loads((f.metadata() or {}).get("state", "{}"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001  (a torn or foreign file: start over, never crash on it)
        print(f"RHT-FT: ignoring unreadable state {path} ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    if meta.get("format") != STATE_FORMAT or meta.get("fingerprint") != fingerprint:
        print(f"RHT-FT: state {path} was written for other inputs; starting over", file=sys.stderr)
        return None
    return meta, tensors


def rht_finetune(
    student: nn.Module,
    teacher: nn.Module,
    train_ids: Tensor,
    heldout_ids: Tensor,
    cfg: RHTFTConfig,
    *,
    state_path: str | Path | None = None,
    progress: bool = True,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune the RHT signs of ``student`` in place (module docstring) and leave the best epoch's signs in it.

    ``student``: a model whose compressed layers are :class:`CompressedLinear` (signs made trainable here,
    everything else frozen); ``teacher``: the original model (frozen, eval mode). ``train_ids`` (N, T) and
    ``heldout_ids`` (M, T) int64 token ids, disjoint from any evaluation text. ``on_epoch(record)`` is called
    after each epoch's state is saved (progress reporting; tests use it to interrupt a run).

    Returns ``{"history": [{"epoch", "heldout_kl", "train_kl", "wall_s"}, ...] (epoch 0 = before training),
    "best_epoch", "heldout_kl_before", "heldout_kl_best", "n_params", "resumed_from"}``.
    """
    from tqdm.auto import tqdm

    if train_ids.ndim != 2 or heldout_ids.ndim != 2 or train_ids.shape[0] < 1 or heldout_ids.shape[0] < 1:
        raise ValueError(f"train_ids {tuple(train_ids.shape)} and heldout_ids {tuple(heldout_ids.shape)} must be "
                         "(N, T) with N >= 1 (rht_ft.n_samples must exceed rht_ft.held_out)")
    student.eval()  # no dropout: the objective is deterministic given the signs
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    params = sign_parameters(student)
    names = list(params)
    opt = torch.optim.AdamW([params[k] for k in names], lr=cfg.lr, weight_decay=cfg.weight_decay)
    fp = _fingerprint(cfg, params, train_ids, heldout_ids)
    path = Path(state_path) if state_path is not None else None
    saved = _load_state(path, fp) if path is not None else None
    if saved is not None:
        meta, tensors = saved
        with torch.no_grad():
            for k in names:
                params[k].copy_(tensors[f"cur.{k}"])
        best = {k: tensors[f"best.{k}"].clone() for k in names}
        if meta["epoch"] > 0:
            sd = opt.state_dict()
            sd["state"] = {i: {key: tensors[f"opt.{i}.{key}"].clone() for key in ("step", "exp_avg", "exp_avg_sq")}
                           for i in range(len(names))}
            opt.load_state_dict(sd)
        history, best_epoch, start, resumed = meta["history"], meta["best_epoch"], meta["epoch"] + 1, meta["epoch"]
    else:
        t0 = time.perf_counter()
        h0 = heldout_kl(student, teacher, heldout_ids, cfg.batch_size)
        history = [{"epoch": 0, "heldout_kl": h0, "train_kl": None, "wall_s": time.perf_counter() - t0}]
        best, best_epoch, start, resumed = _snapshot(params), 0, 1, None
        if path is not None:
            _save_state(path, {"fingerprint": fp, "epoch": 0, "history": history, "best_epoch": 0}, params, best, opt)
    n = train_ids.shape[0]
    for epoch in range(start, cfg.epochs + 1):
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch))
        batches = [order[i : i + cfg.batch_size] for i in range(0, n, cfg.batch_size)]
        total, count = 0.0, 0
        bar = tqdm(batches, desc=f"RHT-FT epoch {epoch}/{cfg.epochs}", disable=not progress, file=sys.stderr)
        for idx in bar:
            b = train_ids[idx]
            with torch.no_grad():
                t_logits = _logits(teacher, b)
            s = kl_sum(_logits(student, b), t_logits)
            positions = b.shape[0] * (b.shape[1] - 1)
            opt.zero_grad(set_to_none=True)
            (s / positions).backward()
            opt.step()
            total += float(s.detach().double())
            count += positions
            bar.set_postfix(kl=f"{total / count:.4f}")
        h = heldout_kl(student, teacher, heldout_ids, cfg.batch_size)
        rec = {"epoch": epoch, "heldout_kl": h, "train_kl": total / count, "wall_s": time.perf_counter() - t0}
        history.append(rec)
        if h < history[best_epoch]["heldout_kl"]:
            best, best_epoch = _snapshot(params), epoch
        if path is not None:
            _save_state(path, {"fingerprint": fp, "epoch": epoch, "history": history, "best_epoch": best_epoch},
                        params, best, opt)
        if progress:
            print(f"RHT-FT epoch {epoch}: train KL {rec['train_kl']:.5f}, held-out KL {h:.5f} "
                  f"(best epoch {best_epoch})", file=sys.stderr)
        if on_epoch is not None:
            on_epoch(rec)
    with torch.no_grad():
        for k in names:
            params[k].copy_(best[k])
    return {"history": history, "best_epoch": best_epoch, "heldout_kl_before": history[0]["heldout_kl"],
            "heldout_kl_best": history[best_epoch]["heldout_kl"], "n_params": sum(p.numel() for p in params.values()),
            "resumed_from": resumed}
