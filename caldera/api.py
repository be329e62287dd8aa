"""Whole-model compression from Python: :func:`hessians`, then :func:`compress`.

The two functions do what ``caldera hessians`` and ``caldera compress`` do, through the same pipeline functions
(:func:`caldera.pipeline.hessians.collect_hessians`, :func:`caldera.pipeline.compress.compress_model`,
:func:`caldera.pipeline.compress.assemble_checkpoint`): the same model, calibration text, seed and method
parameters give the same files, byte for byte, as the commands. A model is a name the command takes (the offline
assets ``smollm2`` and ``gemma3``, a local folder, a hub id) or a transformers model already in memory;
calibration data is a calibration source's name, a list of texts or a tensor of token ids.

Example (a tiny random LLaMA and random token ids, so that it runs in seconds):

>>> import shutil, tempfile
>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> import caldera
>>> _ = torch.manual_seed(0)
>>> model = LlamaForCausalLM(LlamaConfig(
...     hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
...     num_key_value_heads=2, vocab_size=128)).eval()
>>> ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(0))
>>> work = tempfile.mkdtemp()
>>> H = caldera.hessians(model, ids, out=f"{work}/H")
>>> sorted(p.name for p in H.glob("layer_*"))
['layer_000.safetensors', 'layer_001.safetensors']
>>> params = {"rank": 4, "outer_iters": 1, "inner_iters": 1}
>>> small = caldera.compress(model, H, method="caldera", params=params)
>>> type(small.model.layers[0].mlp.down_proj).__name__
'CompressedLinear'
>>> ckpt = caldera.compress(model, H, method="caldera", params=params, out=f"{work}/ckpt")
>>> reloaded, _ = caldera.load_compressed(ckpt)
>>> torch.equal(small(ids).logits, reloaded(ids).logits)
True
>>> shutil.rmtree(work)

At the scale of the paper the same two calls take a model's name and a calibration source, e.g.
``caldera.hessians("smollm2", "lambada-books", n_samples=16, seq_len=256, out="H")`` and
``caldera.compress("smollm2", "H", preset="paper", params={"rank": 64}, out="CKPT")``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _weights_source(model: Any, loaded: Any, name: str | None) -> str:
    """Where the base model's weights were read from, for the checkpoint's provenance: the folder (or hub id) a
    name resolves to, as ``caldera compress --model`` records it; for a model given loaded, the folder or hub id
    its config names (``_name_or_path``), else ``unknown``."""
    if name is not None:
        from caldera.pipeline.models import resolve_model

        return str(resolve_model(name))
    return str(getattr(getattr(loaded, "config", None), "_name_or_path", "") or "unknown")


def _load(model: Any, tokenizer: Any) -> tuple[Any, Any, str | None]:
    """``(model, tokenizer, name)``: a name or path loaded as ``caldera hessians --model`` loads it (float32 on the
    CPU; ``name``: the string given, recorded in the Hessians), or a loaded model as given (``name`` None)."""
    from torch import nn

    if isinstance(model, (str, os.PathLike)):
        from caldera.pipeline.assets import MODEL_ASSETS
        from caldera.pipeline.models import AssetNotBuilt, is_checkpoint, load_dense, resolve_model

        name = str(model)
        try:
            path = resolve_model(name)
        except AssetNotBuilt as e:
            raise ValueError(f"model={name!r}: the offline asset is not built at {e.filename}; run `caldera assets "
                             f"--only {name}` first") from None
        except NotADirectoryError:
            raise ValueError(f"model={name!r}: not a folder") from None
        except FileNotFoundError as e:
            raise ValueError(f"model={name!r}: no such folder ({e.filename}); give a folder, a hub id (org/name) or "
                             f"one of the offline assets {sorted(MODEL_ASSETS)}") from None
        if is_checkpoint(path):
            raise ValueError(f"model={name!r} is a compressed checkpoint; Hessians and compression start from the "
                             "original (dense) model")
        loaded, tok = load_dense(path)
        return loaded, tokenizer if tokenizer is not None else tok, name
    if isinstance(model, nn.Module):
        from caldera.pipeline.layer_runner import decoder_layers

        try:
            decoder_layers(model)
        except ValueError as e:
            raise ValueError(f"model: {e}") from None
        return model, tokenizer, None
    raise TypeError(f"model must be a model name, a folder or a loaded transformers model, not "
                    f"{type(model).__name__}")


def _calibration_ids(data: Any, model: Any, tokenizer: Any, n_samples: int, seq_len: int, seed: int) -> Any:
    """``(N, T)`` int64 token ids of ``data`` (:func:`hessians`)."""
    import torch

    from caldera.pipeline import text

    if isinstance(data, torch.Tensor):
        if data.ndim != 2 or data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
            raise ValueError(f"data: a tensor of token ids must be (N, T) integers, got {tuple(data.shape)} "
                             f"{str(data.dtype).removeprefix('torch.')}")
        if data.numel() == 0:
            raise ValueError(f"data: the tensor of token ids is empty ({tuple(data.shape)})")
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)
        lo, hi = int(data.min()), int(data.max())
        if lo < 0 or (isinstance(vocab, int) and hi >= vocab):
            raise ValueError(f"data: token ids range over [{lo}, {hi}]; the model's vocabulary is "
                             f"[0, {vocab - 1 if isinstance(vocab, int) else '?'}]")
        return data.to(torch.long).cpu()
    if isinstance(data, str):
        try:
            return text.calibration_sequences(tokenizer, n_samples, seq_len, seed, source=data)
        except FileNotFoundError as e:
            raise ValueError(f"data={data!r}: {e} (calibration text missing: run `caldera assets` first)") from None
    return text.sample_sequences(tokenizer, list(data), n_samples, seq_len, seed)


def _check_data(data: Any) -> None:
    """``data`` is a calibration source's name, a non-empty list of texts or a tensor (before the model loads)."""
    import torch

    from caldera.pipeline.text import EVALUATION_SOURCES, HF_TEXT, TEXT_SOURCES

    if isinstance(data, torch.Tensor):
        return
    if isinstance(data, str):
        known = sorted(s for s in (*TEXT_SOURCES, *HF_TEXT) if s not in EVALUATION_SOURCES)
        if data in EVALUATION_SOURCES:
            raise ValueError(f"data={data!r} is evaluation text; calibrate on one of {known}")
        if data not in known:
            raise ValueError(f"data={data!r} is no calibration source; give one of {known}, a list of texts or an "
                             "(N, T) tensor of token ids")
        return
    if isinstance(data, Sequence) and not isinstance(data, (bytes, bytearray)):
        if not data:
            raise ValueError("data is an empty list; give at least one text")
        bad = [i for i, t in enumerate(data) if not isinstance(t, str)]
        if bad:
            raise TypeError(f"data: items {bad[:5]} are not strings; data as a list holds texts")
        return
    raise TypeError(f"data must be a calibration source's name, a list of texts or an (N, T) tensor of token ids, "
                    f"not {type(data).__name__}")


def _positive(name: str, value: Any, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name}={value!r}: expected an integer >= {lo}")
    return value


def _local(model: Any) -> str | None:
    """``model`` when it names an existing local path (an input no output may replace), else None."""
    if isinstance(model, (str, os.PathLike)) and Path(model).expanduser().exists():
        return str(model)
    return None


def hessians(
    model: Any,
    data: Any = "lambada-books",
    *,
    out: str | os.PathLike | None = None,
    tokenizer: Any = None,
    n_samples: int = 16,
    seq_len: int = 256,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = False,
) -> Path:
    """Collect the calibration Hessians of every decoder layer of ``model``, as ``caldera hessians`` does.

    Args:
        model: a name ``caldera hessians --model`` takes (``smollm2``, ``gemma3``, a local model folder, a hub
            id), loaded float32 on the CPU, or a transformers causal LM already loaded (LLaMA-style decoder
            layers), used where it is.
        data: calibration data: the name of a calibration source (``lambada-books``, the default, or at paper
            scale ``redpajama``), sampled into ``n_samples`` sequences of ``seq_len`` tokens with ``seed``; a
            list of texts, sampled the same way; or an (N, T) integer tensor of token ids, used as given
            (``n_samples``, ``seq_len`` and ``seed`` do not apply; the Hessians record no seed).
        out: the Hessians folder (``layer_NNN.safetensors`` and ``hessians.json``); resumable: layers already
            there for the same calibration are kept. Default: a new temporary folder, the caller's to delete.
        tokenizer: the tokenizer of text ``data`` (default: the one loaded with a named ``model``).
        n_samples, seq_len, seed, batch_size: as the command's ``--n-samples``, ``--seq-len``, ``--seed``,
            ``--batch-size``.
        progress: show a progress bar.

    Returns the Hessians folder (a ``pathlib.Path``), the ``hessians`` argument of :func:`compress`.
    Bad input raises ``ValueError`` or ``TypeError`` naming the argument, before the model is loaded where it
    can be checked without it.
    """
    import torch

    from caldera.atomic import guard_output
    from caldera.cli.common import MAX_SEED, is_hessian_dir
    from caldera.pipeline.hessians import collect_hessians

    _check_data(data)
    for name, value in (("n_samples", n_samples), ("batch_size", batch_size)):
        _positive(name, value)
    _positive("seq_len", seq_len, 2)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed={seed!r}: expected an integer in [0, {MAX_SEED}]")
    if out is not None:
        guard_output(out, option="out", kind="Hessians folder", same_kind=is_hessian_dir,
                     inputs={"model": _local(model)}, resumable=True)
    loaded, tok, name = _load(model, tokenizer)
    given = isinstance(data, torch.Tensor)
    if not given and tok is None:
        raise ValueError("data is text but there is no tokenizer: pass tokenizer= (a loaded model comes without "
                         "one), or give data as an (N, T) tensor of token ids")
    top = getattr(getattr(loaded, "config", None), "max_position_embeddings", None)
    length = data.shape[-1] if given else seq_len
    if isinstance(top, int) and length > top:
        raise ValueError(f"{'data has sequences of' if given else 'seq_len is'} {length} tokens, above the model's "
                         f"max_position_embeddings ({top}); use at most {top}")
    ids = _calibration_ids(data, loaded, tok, n_samples, seq_len, seed)
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="caldera-hessians-"))
    collect_hessians(loaded, ids, folder, batch_size=batch_size, progress=progress,
                     seed=None if given else seed, model_name=name,
                     source=data if isinstance(data, str) else None)
    return folder


def compress(
    model: Any,
    hessians: str | os.PathLike,
    method: str = "caldera",
    *,
    params: dict[str, Any] | None = None,
    preset: str | None = None,
    out: str | os.PathLike | None = None,
    overwrite: bool = False,
    work_dir: str | os.PathLike | None = None,
    tokenizer: Any = None,
    ft_rank: int = 0,
    progress: bool = False,
) -> Any:
    """Compress every decoder layer of ``model`` with a registered method, as ``caldera compress`` does.

    Args:
        model: the model the Hessians were collected on: a name or folder (as :func:`hessians` takes it) or the
            loaded model itself (it is not modified).
        hessians: the folder :func:`hessians` (or ``caldera hessians``) wrote.
        method: a registered method (``caldera``, ``quip#``, ``rtn``, ...; ``caldera compress --help`` lists
            them with their parameters).
        params: the method's parameters, e.g. ``{"rank": 64, "l_bits": 4}`` (the command's ``--param``).
        preset: a preset of the method (``caldera``: ``paper``, ``authors-2025``, ...), which ``params``
            override.
        out: the checkpoint folder to write; then the function returns its path, and the per-layer files stay
            in ``work_dir`` (default ``OUT.layers`` beside it) so that a rerun resumes. Without ``out`` the
            checkpoint is built in a temporary folder, loaded and deleted, and the model is returned.
        overwrite: replace a checkpoint already at ``out`` (anything else there is never replaced).
        work_dir: the per-layer folder (the command's ``--work-dir``).
        tokenizer: saved into the checkpoint (default: the one loaded with a named ``model``).
        ft_rank: leading rank of L R kept trainable in float32 (the command's ``--ft-rank``).
        progress: show progress bars.

    Returns the compressed model (a transformers model whose compressed layers are
    :class:`caldera.nn.compressed_linear.CompressedLinear`), or the checkpoint folder when ``out`` is given
    (:func:`caldera.load_compressed` loads it). Bad input raises ``ValueError`` or ``TypeError`` naming the
    argument, before any work.
    """
    from caldera.atomic import guard_output
    from caldera.cli.common import is_checkpoint_dir, is_layer_dir
    from caldera.methods import get_method
    from caldera.pipeline.allocate import model_allocation
    from caldera.pipeline.checkpoint import base_generation_config, checkpoint_provenance, load_compressed
    from caldera.pipeline.compress import assemble_checkpoint, compress_model

    if params is not None and not isinstance(params, dict):
        raise TypeError(f"params must be a dict of the method's parameters, not {type(params).__name__}")
    if not isinstance(method, str):
        raise TypeError(f"method must be a registered method's name, not {type(method).__name__}")
    params = {**(params or {}), **({"preset": preset} if preset is not None else {})}
    config = get_method(method).make_config(params)  # unknown method, parameter or preset: ValueError naming it
    _positive("ft_rank", ft_rank, 0)
    rank = getattr(config, "rank", None)
    if isinstance(rank, int) and ft_rank > rank:
        raise ValueError(f"ft_rank={ft_rank} is above the method's rank {rank}: the trainable components are the "
                         f"leading ones of L R; use ft_rank <= {rank}")
    if not isinstance(hessians, (str, os.PathLike)) or not Path(hessians).is_dir():
        raise ValueError(f"hessians={hessians!r}: no such folder; collect them with caldera.hessians(model, data, "
                         "out=...) first")
    inputs = {"hessians folder": str(hessians), "model": _local(model)}
    if out is not None:
        out = Path(out)
        work = Path(work_dir) if work_dir is not None else out.with_name(out.name + ".layers")
        if is_checkpoint_dir(out) and not overwrite:
            raise ValueError(f"out={str(out)!r} already holds a caldera checkpoint; pass overwrite=True to replace "
                             "it (the old one is kept until the new one is complete), or choose another out")
        guard_output(out, option="out", kind="caldera checkpoint", same_kind=is_checkpoint_dir,
                     inputs={**inputs, "work_dir": work}, overwrite=True)
    elif work_dir is not None:
        work = Path(work_dir)
    else:
        work = None
    if work is not None:
        guard_output(work, option="work_dir", kind="per-layer folder of caldera compress", same_kind=is_layer_dir,
                     inputs={**inputs, "out": out}, resumable=True)
    loaded, tok, name = _load(model, tokenizer)
    with tempfile.TemporaryDirectory(prefix="caldera-compress-") as tmp:
        work = work if work is not None else Path(tmp) / "layers"
        expect = {"model": name} if name is not None else None
        overrides = model_allocation(loaded, hessians, method, params, work, progress=progress,
                                     hessian_expect=expect)
        compress_model(loaded, hessians, method, params, work, progress=progress, ft_rank=ft_rank,
                       overrides=overrides, hessian_expect=expect)
        source = _weights_source(model, loaded, name)
        ckpt, _ = assemble_checkpoint(loaded, work, out if out is not None else Path(tmp) / "checkpoint", method,
                                      params, tokenizer=tok,
                                      extra={"provenance": checkpoint_provenance(name or source, source, hessians)},
                                      generation_config=base_generation_config(source))
        if out is not None:
            return ckpt
        compressed, _ = load_compressed(ckpt, load_tokenizer=False)
        return compressed
