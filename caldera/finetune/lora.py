"""Low-rank adaptation of CALDERA's factors (paper §5.3, Alg. 1 lines 465–466, App. E.4–E.5).

**Re-split** (:func:`resplit_top_r`). A compressed layer stores ``W ≈ Q + L R`` (RHT basis) with rank-``k``
factors at ``B_LR`` bits. §5.3 writes ``W ≈ Q + L₁R₁ + L₂R₂`` and fine-tunes the *top-r singular components*
in BF16; App. E.5 charges ``(k − r)·B_LR + 16·r`` bits per row/column, i.e. the rank-``r`` part is the 16-bit
one (the text's "L₂, R₂ are fine-tuned" is read as the rank-``r`` part, as the formula implies). The product
``L R`` (n × d, rank ≤ k) is split through its SVD ``L R = U Σ Vᵀ`` (float64, via QR of L and Rᵀ and a k × k
SVD)::

    L_ft = U_{:, :r} Σ_{:r}^{1/2}   (n, r)      R_ft = Σ_{:r}^{1/2} V_{:, :r}ᵀ   (r, d)     [ft dtype, trainable]
    L_2  = U_{:, r:} Σ_{r:}^{1/2}   (n, k − r)  R_2  = Σ_{r:}^{1/2} V_{:, r:}ᵀ   (k − r, d) [re-quantized]

``L_2ᵀ`` and ``R_2`` are re-quantized with the layer's own factor quantizer (one scalar scale each,
:func:`caldera.quantizers.base.quantize_scaled`, as the decomposition did); 16-bit factors are re-cast to their
dtype. So ``Q + L_2 R_2 + L_ft R_ft`` equals ``Q + L R`` up to the re-quantization error of the k − r tail (and
the ft dtype's rounding). (The authors' code fine-tunes the first ``ft_rank`` columns/rows as they come out of
LPLR, which are only approximately singular-ordered: authors-code.md §7.15.)

**Training** (:func:`train`). Only ``L_ft``/``R_ft`` of every compressed layer and, for classification, a
linear head train (everything else frozen: the backbone codes, the re-quantized tail, RHT signs, embeddings,
norms). Language modelling: next-token cross-entropy on blocks of training text. Sequence classification
(RTE, Winogrande): the decoder's last hidden state at the last non-padding token → ``nn.Linear(hidden, 2,
bias=False)`` (as ``LlamaForSequenceClassification``'s ``score``), cross-entropy. AdamW with decoupled weight
decay and transformers' ``get_linear_schedule_with_warmup`` (App. E.4: linear schedule, warm-up), gradient
accumulation. ``n_checkpoints`` evaluation points spread over the run (the paper keeps ten checkpoints); at
each the held-out split is scored and the training state is saved atomically (resume after a kill from the
last point, bit-identical: the data order is a function of (seed, epoch)); the best point on the *held-out*
split (never the evaluation set) and the final state are both returned.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from caldera.nn.compressed_linear import CompressedLinear
from caldera.nn.format import narrow_codes, q_extra_names, resolve_quantizer

# ----------------------------------------------------------------------------------------------- re-split


def top_r_split(L: Tensor, R: Tensor, r: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """SVD split of ``L R`` (L (n, k), R (k, d)) into its top ``r`` and remaining ``k − r`` components.

    Returns ``(L_top (n, r), R_top (r, d), L_rest (n, k − r), R_rest (k − r, d), S (k,))`` in float64 with
    balanced factors ``U Σ^{1/2}``, ``Σ^{1/2} Vᵀ`` and ``S`` the singular values of ``L R`` (descending).
    """
    n, k = L.shape
    if R.shape[0] != k:
        raise ValueError(f"L is {tuple(L.shape)} and R is {tuple(R.shape)}: inner dimensions differ")
    if not 0 <= r <= k:
        raise ValueError(f"ft_rank={r} must be in [0, rank={k}]")
    Ld, Rd = L.double(), R.double()
    qL, rL = torch.linalg.qr(Ld)  # (n, k), (k, k)
    qR, rR = torch.linalg.qr(Rd.T)  # (d, k), (k, k)
    Um, S, Vmh = torch.linalg.svd(rL @ rR.T)
    U, V = qL @ Um, qR @ Vmh.T
    s = S.sqrt()
    Lf, Rf = U * s, (V * s).T
    return Lf[:, :r], Rf[:r], Lf[:, r:], Rf[r:], S


def resplit_top_r(module: CompressedLinear, ft_rank: int, ft_dtype: torch.dtype = torch.bfloat16) -> CompressedLinear:
    """A new :class:`CompressedLinear` whose trainable ``L_ft``/``R_ft`` (``ft_dtype``) hold the top ``ft_rank``
    singular components of the layer's ``L R`` and whose other ``k − ft_rank`` components are re-quantized with
    the layer's factor quantizer (module docstring). ``module`` must have ``ft_rank == 0``; Q, the RHT signs and
    the bias are shared unchanged."""
    if module.ft_rank != 0:
        raise ValueError(f"the layer already has ft_rank={module.ft_rank}; re-split a layer without one")
    k = module.rank
    f = module.quantized_factors()
    if f is None:
        raise ValueError("the layer has no low-rank factors (rank 0): nothing to fine-tune")
    Lt, Rt, L2, R2, _ = top_r_split(f[0], f[1], ft_rank)
    meta = module.metadata()
    meta["ft_rank"] = int(ft_rank)
    meta["ft_dtype"] = str(ft_dtype).removeprefix("torch.") if ft_rank else None
    keep = ("Q_codes", "Q_scale", "Q_dense", "S_U", "S_V", "bias", *q_extra_names(module.metadata()))
    tensors = {name: t.detach().clone() for name, t in module.state_dict().items() if name in keep}
    if ft_rank:
        tensors["L_ft"] = Lt.to(ft_dtype).contiguous()
        tensors["R_ft"] = Rt.to(ft_dtype).contiguous()
    if k > ft_rank:
        if meta["lr_format"] == "quantized":
            from caldera.quantizers.base import quantize_scaled

            lq, rq = resolve_quantizer(meta["l_quantizer"]), resolve_quantizer(meta["r_quantizer"])
            sl, sr = quantize_scaled(lq, L2.T.float().contiguous()), quantize_scaled(rq, R2.float().contiguous())
            if sl.codes.dtype != sr.codes.dtype:
                raise ValueError(f"L and R codes have dtypes {sl.codes.dtype} / {sr.codes.dtype}: one expected")
            lc, rc = narrow_codes(sl.codes), narrow_codes(sr.codes)  # restored to lr_codes_dtype when decoded
            meta["lr_codes_dtype"] = str(sl.codes.dtype).removeprefix("torch.")
            tensors.update(L_codes=lc, L_scale=sl.scale.float().reshape(()), R_codes=rc,
                           R_scale=sr.scale.float().reshape(()))
        else:
            dt = module.L_16.dtype
            tensors.update(L_16=L2.to(dt).contiguous(), R_16=R2.to(dt).contiguous())
    return CompressedLinear(meta, tensors, cache_dequantized=module.cache_dequantized, kernel="reference")


def compressed_modules(model: nn.Module) -> dict[str, CompressedLinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, CompressedLinear)}


def prepare_lora(model: nn.Module, ft_rank: Callable[[CompressedLinear], int],
                 ft_dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """Re-split every :class:`CompressedLinear` of ``model`` in place (:func:`resplit_top_r`, rank
    ``ft_rank(module)``) and freeze every parameter except the new ``L_ft``/``R_ft``. Returns ``model``."""
    from caldera.pipeline.checkpoint import replace_module

    mods = compressed_modules(model)
    if not mods:
        raise ValueError("the model has no CompressedLinear layers: load a compressed checkpoint first")
    for p in model.parameters():
        p.requires_grad_(False)
    for path, mod in mods.items():
        replace_module(model, path, resplit_top_r(mod, ft_rank(mod), ft_dtype))
    return model


def lora_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The trainable ``L_ft``/``R_ft`` of every compressed layer, by state-dict name."""
    return {n: p for n, p in model.named_parameters() if n.endswith((".L_ft", ".R_ft"))}


def mapped_ft_rank(rank: int, paper_rank: int, paper_ft_rank: int, multiple: int) -> int:
    """The stand-in's fine-tuned rank: the paper's fraction ``r / k`` of the stand-in rank, rounded to a
    multiple of ``multiple`` (at least ``multiple``, at most ``rank``)."""
    if not 0 < paper_ft_rank <= paper_rank:
        raise ValueError(f"paper ft_rank {paper_ft_rank} must be in (0, rank {paper_rank}]")
    r = round(rank * paper_ft_rank / paper_rank / multiple) * multiple
    return int(min(rank, max(multiple, r)))


# ----------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class TaskHyper:
    """One row of App. E.4's table (scaled down in ``mini``): block size (tokens), per-device batch size,
    gradient-accumulation steps, epochs, peak lr, weight decay, warm-up steps (linear schedule)."""

    block_size: int
    batch_size: int
    grad_acc: int
    epochs: int
    lr: float
    weight_decay: float
    warmup_steps: int

    def __post_init__(self) -> None:
        for k in ("block_size", "batch_size", "grad_acc", "epochs"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"lora_ft task hyper-parameter {k} must be >= 1, got {getattr(self, k)}")
        if not self.lr > 0 or self.weight_decay < 0 or self.warmup_steps < 0:
            raise ValueError(f"lora_ft: lr > 0, weight_decay >= 0, warmup_steps >= 0 required; got {self}")


# ----------------------------------------------------------------------------------------------- data


def lm_blocks(stream: Tensor, start: int, block_size: int, n_blocks: int) -> Tensor:
    """``(n_blocks, block_size)`` consecutive blocks of a ``(1, N)`` token stream from token ``start``;
    ``ValueError`` if the stream is too short."""
    end = start + n_blocks * block_size
    if end > stream.shape[1]:
        raise ValueError(f"the stream has {stream.shape[1]} tokens; {n_blocks} blocks of {block_size} from token "
                         f"{start} need {end}: lower lora_ft n_train/n_heldout or the block size")
    return stream[0, start:end].reshape(n_blocks, block_size).long()


def split_documents(n_docs: int, n_eval: int, n_heldout: int, n_train: int, seed: int) -> dict[str, list[int]]:
    """Disjoint document indices: ``eval`` = the first ``n_eval`` (the documents the zero-shot evaluation
    scores, so that comparisons are paired); ``heldout`` and ``train`` drawn from the rest by a seeded
    permutation."""
    if n_eval + n_heldout + n_train > n_docs:
        raise ValueError(f"{n_eval} eval + {n_heldout} held-out + {n_train} train documents > {n_docs} available")
    g = torch.Generator().manual_seed(int(seed))
    rest = (torch.randperm(n_docs - n_eval, generator=g) + n_eval).tolist()
    return {"eval": list(range(n_eval)), "heldout": rest[:n_heldout], "train": rest[n_heldout:n_heldout + n_train]}


def classification_example(task: str, doc: dict[str, Any]) -> tuple[str, str, int]:
    """``(text_a, text_b, label)`` of one RTE / Winogrande document (the authors' input pairs: RTE premise and
    hypothesis, label 0 = entailment; Winogrande the sentence with each option filled in, label answer − 1)."""
    if task == "rte":
        return doc["sentence1"], doc["sentence2"], int(doc["label"])
    if task == "winogrande":
        s = doc["sentence"]
        return s.replace("_", doc["option1"]), s.replace("_", doc["option2"]), int(doc["answer"]) - 1
    raise ValueError(f"classification task {task!r}; accepted: rte, winogrande")


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]], max_len: int) -> tuple[Tensor, Tensor]:
    """Right-padded ``(input_ids, attention_mask)`` (b, ≤ max_len) of ``text_a + "\\n" + text_b`` (truncated
    from the left, so the end the head reads is kept)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    seqs = []
    for a, b in pairs:
        ids = tokenizer(a + "\n" + b, add_special_tokens=True)["input_ids"]
        seqs.append(ids[-max_len:])
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


# ----------------------------------------------------------------------------------------------- models


class SequenceClassifier(nn.Module):
    """A causal LM's decoder body plus a linear head on the last non-padding token's hidden state."""

    def __init__(self, lm: nn.Module, n_labels: int = 2, seed: int = 0):
        super().__init__()
        self.lm = lm
        hidden = int(lm.config.hidden_size)
        g = torch.Generator().manual_seed(int(seed))
        self.head = nn.Linear(hidden, n_labels, bias=False)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(n_labels, hidden, generator=g) * lm.config.initializer_range)
        self.head.to(next(lm.parameters()).device)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        body = self.lm.get_decoder() if hasattr(self.lm, "get_decoder") else self.lm.model
        dev = self.head.weight.device  # inputs are built on the CPU; the model may sit on an accelerator
        input_ids, attention_mask = input_ids.to(dev), attention_mask.to(dev)
        h = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        last = attention_mask.sum(dim=1) - 1
        return self.head(h[torch.arange(h.shape[0]), last].float())


def trainable_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


# ----------------------------------------------------------------------------------------------- losses


def lm_loss(model: nn.Module, blocks: Tensor) -> Tensor:
    """Mean next-token cross-entropy of ``blocks`` (b, t; moved to the model's device)."""
    blocks = blocks.to(next(model.parameters()).device)
    logits = model(input_ids=blocks, use_cache=False).logits[:, :-1].float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), blocks[:, 1:].reshape(-1))


def classification_outputs(clf: SequenceClassifier, tokenizer, examples: Sequence[tuple[str, str, int]],
                           max_len: int, batch_size: int) -> dict[str, list]:
    """Per example: ``correct`` (0/1), ``loss`` (cross-entropy) and ``margin`` (gold logit − other)."""
    out: dict[str, list] = {"correct": [], "loss": [], "margin": []}
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            ids, mask = encode_pairs(tokenizer, [(a, b) for a, b, _ in chunk], max_len)
            logits = clf(ids, mask).float().cpu()
            y = torch.tensor([lab for _, _, lab in chunk])
            out["correct"] += (logits.argmax(-1) == y).int().tolist()
            out["loss"] += F.cross_entropy(logits, y, reduction="none").tolist()
            out["margin"] += (logits.gather(1, y[:, None])[:, 0] - logits.gather(1, 1 - y[:, None])[:, 0]).tolist()
    return out


# ----------------------------------------------------------------------------------------------- training


def checkpoint_steps(total: int, n_checkpoints: int, steps_per_epoch: int) -> list[int]:
    """Optimizer steps after which the held-out split is scored and the state saved: ``n_checkpoints`` points
    spread evenly over ``total`` steps, plus every epoch end, always including the last step."""
    pts = {max(1, round(total * j / n_checkpoints)) for j in range(1, n_checkpoints + 1)}
    pts |= {e * steps_per_epoch for e in range(1, total // steps_per_epoch + 1)}
    return sorted(p for p in pts if p <= total) or [total]


def _state_tensors(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Tensor]:
    names = list(trainable_parameters(model))
    out = {f"param.{n}": p.detach().cpu().clone() for n, p in trainable_parameters(model).items()}
    params = [p for group in opt.param_groups for p in group["params"]]
    for i, p in enumerate(params):
        for k, v in opt.state.get(p, {}).items():
            out[f"opt.{names[i]}.{k}"] = v.detach().cpu().clone().reshape(v.shape)
    return out


def save_state(path: Path, model: nn.Module, opt, info: dict[str, Any], best: dict[str, Tensor] | None) -> None:
    """Atomic training state: trainable tensors, AdamW moments, the best point's tensors, and ``info`` (JSON)."""
    from caldera.atomic import save_safetensors_atomic

    tensors = _state_tensors(model, opt)
    for n, t in (best or {}).items():
        tensors[f"best.{n}"] = t.cpu()
    save_safetensors_atomic({k: v.contiguous() for k, v in tensors.items()}, path,
                            {"info": json.dumps(info, sort_keys=True)})


def load_state(path: Path, model: nn.Module, opt) -> tuple[dict[str, Any], dict[str, Tensor]]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        info = json.loads(f.metadata()["info"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    params = trainable_parameters(model)
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[f"param.{n}"])
    names = list(params)
    for i, p in enumerate(p for group in opt.param_groups for p in group["params"]):
        st = {k.rsplit(".", 1)[1]: v if k.endswith(".step") else v.to(p.device)  # AdamW keeps `step` on the CPU
              for k, v in tensors.items() if k.startswith(f"opt.{names[i]}.")}
        if st:
            opt.state[p] = st
    best = {k.removeprefix("best."): v for k, v in tensors.items() if k.startswith("best.")}
    return info, best


def train(model: nn.Module, batches: Callable[[int], list[Any]], loss_fn: Callable[[nn.Module, Any], Tensor],
          heldout_score: Callable[[nn.Module], dict[str, float]], hyper: TaskHyper, *, n_checkpoints: int,
          state_path: str | os.PathLike, spec: dict[str, Any], higher_is_better: bool = False,
          progress: bool = True) -> dict[str, Any]:
    """Fine-tune the trainable parameters of ``model`` (module docstring).

    ``batches(epoch)``: that epoch's list of micro-batches (a deterministic function of the epoch);
    ``loss_fn(model, batch)``: scalar loss; ``heldout_score(model)``: ``{"score", ...}`` on the held-out split
    (selection key ``score``: lower is better unless ``higher_is_better``). State is saved atomically to
    ``state_path`` at every checkpoint step and resumed from there when ``spec`` matches (a different spec
    restarts). Returns ``{"history", "best_step", "final_step", "best"}`` with the model left at the final
    state; ``best`` holds the trainable tensors of the best held-out point.
    """
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    params = trainable_parameters(model)
    if not params:
        raise ValueError("the model has no trainable parameters: call prepare_lora first")
    decay = [p for n, p in params.items() if not n.endswith("bias")]
    opt = torch.optim.AdamW(decay, lr=hyper.lr, weight_decay=hyper.weight_decay)
    steps_per_epoch = math.ceil(len(batches(0)) / hyper.grad_acc)
    total = steps_per_epoch * hyper.epochs
    points = checkpoint_steps(total, n_checkpoints, steps_per_epoch)
    state_path = Path(state_path)
    info: dict[str, Any] = {"spec": spec, "step": 0, "history": [], "best_step": None}
    best: dict[str, Tensor] = {}
    if state_path.exists():
        from safetensors import safe_open

        with safe_open(str(state_path), "pt") as f:
            saved_spec = json.loads(f.metadata()["info"]).get("spec")
        if saved_spec == spec:
            info, best = load_state(state_path, model, opt)
        else:  # written for another configuration (the workflow reruns the job after a config edit): start again
            print(f"{state_path}: written for another configuration; training from the start", flush=True)
    for g in opt.param_groups:
        g.setdefault("initial_lr", hyper.lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = get_linear_schedule_with_warmup(opt, hyper.warmup_steps, total, last_epoch=info["step"] - 1)
    if info["step"] == 0:
        for g in opt.param_groups:
            g["lr"] = hyper.lr * sched.lr_lambdas[0](0)
    model.train()
    step = info["step"]
    bar = tqdm(total=total, initial=step, desc="lora fine-tuning", unit="step", disable=not progress)
    try:
        while step < total:
            epoch, within = divmod(step, steps_per_epoch)
            micro = batches(epoch)[within * hyper.grad_acc:(within + 1) * hyper.grad_acc]
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for b in micro:
                loss = loss_fn(model, b) / len(micro)
                loss.backward()
                loss_sum += float(loss.detach())
            opt.step()
            sched.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum:.4f}")
            if step in points:
                model.eval()
                sc = heldout_score(model)
                model.train()
                info["history"].append({"step": step, "epoch": step / steps_per_epoch, "train_loss": loss_sum, **sc})
                prev = next((h for h in info["history"] if h["step"] == info["best_step"]), None)
                better = prev is None or (
                    sc["score"] > prev["score"] if higher_is_better else sc["score"] < prev["score"])
                if better:
                    info["best_step"] = step
                    best = {n: p.detach().clone() for n, p in params.items()}
                info["step"] = step
                save_state(state_path, model, opt, info, best)
    finally:
        bar.close()
    model.eval()
    return {"history": info["history"], "best_step": info["best_step"], "final_step": total, "best": best}


def load_trainable(model: nn.Module, tensors: dict[str, Tensor]) -> None:
    params = trainable_parameters(model)
    missing = sorted(set(params) - set(tensors))
    if missing:
        raise ValueError(f"no saved values for trainable parameters {missing[:3]}")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[n])


__all__ = [
    "SequenceClassifier", "TaskHyper", "asdict", "checkpoint_steps", "classification_example",
    "classification_outputs", "compressed_modules", "encode_pairs", "lm_blocks", "lm_loss",
    "load_state", "load_trainable", "lora_parameters", "mapped_ft_rank", "prepare_lora", "resplit_top_r",
    "save_state", "split_documents", "top_r_split", "train", "trainable_parameters",
]
