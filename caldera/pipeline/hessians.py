"""Hessian collection: the uncentered second moment ``H = E[x xᵀ]`` of the input of every linear layer.

As in QuIP#'s ``hessian_offline_llama.py`` (used by the CALDERA authors; authors-code.md §4), the
calibration activations are propagated **layer by layer through the original model**:

1. the hidden states entering decoder layer 0 and the keyword arguments every layer receives (rotary
   ``position_embeddings``, the causal or sliding-window ``attention_mask``, ``position_ids``, ...) are
   captured by one forward per batch with the layers swapped for recorders
   (:func:`caldera.pipeline.layer_runner.capture_layer_inputs`);
2. for each layer ``l``: forward pre-hooks on ``self_attn.q_proj`` (group ``"qkv"``, shared by q/k/v),
   ``self_attn.o_proj`` (``"o"``), ``mlp.up_proj`` (``"up"``, shared by gate/up) and ``mlp.down_proj``
   (``"down"``) accumulate ``Σ x xᵀ``, ``Σ x`` and the token count in float64 while the layer runs on every
   calibration batch; the layer's outputs become the next layer's inputs.

One artifact per layer, ``layer_{l:03d}.safetensors``, holds ``{group}.H`` (d×d, ``store_dtype``),
``{group}.mu`` (d, float64) and ``{group}.count`` (int64 scalar) for the four groups, with its metadata and the
content hash of its tensors; the format and the checks every reader makes are
:mod:`caldera.pipeline.hessian_files`.
Unlike the authors' files, H is stored uncentered (no ``μμᵀ`` to add back) and not trace-normalized:
regularization is the decomposition's job (``caldera.algorithm.ldl.regularize_hessian``).

Files are written atomically (:mod:`caldera.atomic`: temporary name, fsync, ``os.replace``), so a crash never
leaves a file that looks complete; a rerun skips layers whose artifact exists and loads cleanly (resumable).

Memory: the hidden states of all calibration sequences are held once (N × T × hidden in the model's dtype;
9.4 MB for SmolLM2-135M in fp32 at 16 × 256, 8.6 GB for LLaMa-2 7B in fp16 at 256 × 4096): one buffer per
batch, overwritten in place by each layer's output (:func:`caldera.pipeline.layer_runner.advance_layer`), so a
layer's inputs and outputs are never both held in full. ``offload=True`` keeps these buffers in CPU memory and
moves one batch at a time to the layers' device; ``device`` runs each decoder layer there (moved in for its pass,
moved back after) while the model stays where it is, so only one layer's weights and one batch occupy the
accelerator; ``loader`` (:class:`caldera.pipeline.partial.LazyLayers`) reads each decoder layer from the
checkpoint when its turn comes and drops it after, so not even the host holds the whole model (the workflow's
``hessians`` rule).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from caldera.atomic import save_safetensors_atomic, timing_path, write_atomic
from caldera.pipeline.hessian_files import (
    FORMAT,
    META_KEY,
    corrupt_file_error,
    layer_artifact_ok,
    layer_file,
    read_hessian_file,
    tensors_sha256,
)
from caldera.pipeline.layer_runner import advance_layer, decoder_layers, initial_states, layer_in_turn
from caldera.pipeline.linears import GROUPS


class HessianAccumulator:
    """Streaming accumulation of ``S = Σ x xᵀ``, ``s = Σ x`` (float64) and the number of rows.

    ``update(x)`` takes ``(..., d)`` of any float dtype (all leading dims are rows; each call's ``xᵀx`` is
    formed in float32 unless ``x`` is float64, and added to the float64 sum). ``H = S / count`` is
    the uncentered second moment ``E[x xᵀ]`` (d, d) float64; ``mean = s / count`` (d,) float64.
    """

    def __init__(self, d: int, device: torch.device | str | None = None):
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:
            raise ValueError(f"d must be a positive integer, got {d!r}")
        self.d = d
        self.S = torch.zeros(d, d, dtype=torch.float64, device=device)
        self.sum = torch.zeros(d, dtype=torch.float64, device=device)
        self.count = 0

    def update(self, x: Tensor) -> None:
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise ValueError(f"x must be a floating-point tensor, got {type(x).__name__} {getattr(x, 'dtype', '')}")
        if x.shape[-1] != self.d:
            raise ValueError(f"x has last dimension {x.shape[-1]}; this accumulator expects d={self.d}")
        X = x.detach().reshape(-1, self.d).to(device=self.S.device)
        if X.dtype == torch.float64:
            self.S.addmm_(X.T, X)
        else:
            # one batch's product in float32 (2x faster than float64 on CPUs; relative error ~1e-7·√rows,
            # far below the sampling noise of a calibration set), accumulated across batches in float64
            X = X.float()
            self.S.add_((X.T @ X).double())
        self.sum.add_(X.sum(0, dtype=torch.float64))
        self.count += X.shape[0]

    def _check_nonempty(self) -> None:
        if self.count == 0:
            raise ValueError("HessianAccumulator has seen no data (count == 0); call update() first")

    @property
    def H(self) -> Tensor:
        self._check_nonempty()
        return self.S / self.count

    @property
    def mean(self) -> Tensor:
        self._check_nonempty()
        return self.sum / self.count

    def tensors(self, prefix: str = "", dtype: torch.dtype = torch.float64) -> dict[str, Tensor]:
        """``{prefix}H`` (dtype), ``{prefix}mu`` (float64), ``{prefix}count`` (int64 scalar), on the CPU."""
        H = self.H
        H = (H + H.T) / 2  # exact symmetry (addmm is symmetric up to rounding already)
        return {
            f"{prefix}H": H.to(dtype).cpu().contiguous(),
            f"{prefix}mu": self.mean.cpu().contiguous(),
            f"{prefix}count": torch.tensor(self.count, dtype=torch.int64),
        }

    def save(self, path: str | os.PathLike, *, dtype: torch.dtype = torch.float64, **metadata: Any) -> Path:
        """Write ``H``, ``mu``, ``count`` to a safetensors file (atomically) with a JSON metadata string
        (``layer``, ``group``, ``n_tokens``, ``seed``, ``model``, ``dtype`` and any extra keys)."""
        meta = {
            "format": FORMAT,
            "n_tokens": self.count,
            "dtype": str(dtype).removeprefix("torch."),
            **metadata,
        }
        tensors = self.tensors("", dtype)
        meta["tensors_sha256"] = tensors_sha256(tensors)
        return save_safetensors_atomic(tensors, path, {META_KEY: json.dumps(meta, sort_keys=True)})

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple["HessianAccumulator", dict[str, Any]]:
        """Inverse of :meth:`save` (``S`` is rebuilt as ``H · count``); returns ``(acc, metadata)``."""
        tensors, meta = read_hessian_file(path)
        missing = {"H", "mu", "count"} - set(tensors)
        if missing:
            raise corrupt_file_error(path, f"missing tensors {sorted(missing)}")
        count = int(tensors["count"])
        acc = cls(tensors["H"].shape[0])
        acc.S = tensors["H"].double() * count
        acc.sum = tensors["mu"].double() * count
        acc.count = count
        return acc, meta


# ----------------------------------------------------------------------------------------- collection


def calibration_fingerprint(ids: Tensor) -> str:
    return hashlib.sha256(ids.to(torch.int64).cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


@torch.no_grad()
def collect_hessians(
    model: nn.Module,
    calibration_ids: Tensor,
    out_dir: str | os.PathLike,
    *,
    layers: Sequence[int] | None = None,
    batch_size: int = 8,
    progress: bool = True,
    store_dtype: torch.dtype = torch.float32,
    seed: int | None = None,
    model_name: str | None = None,
    device: torch.device | str | None = None,
    offload: bool = False,
    loader: Any | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """Collect the four Hessians of every decoder layer of ``model`` from ``calibration_ids`` (N, T) int64.

    ``device``: where the decoder layers run (default: where the model is); each layer is moved there for its
    pass and back after, so a model kept on the CPU needs one layer of accelerator memory. ``offload``: keep
    the calibration hidden states in CPU memory between layers (module docstring, Memory). ``loader``: an
    object whose ``load(l)`` makes decoder layer ``l``'s tensors real and ``release(l)`` drops them again
    (:class:`caldera.pipeline.partial.LazyLayers`: one layer of the model in memory at a time).

    Writes ``out_dir/layer_{l:03d}.safetensors`` for each requested layer (default all),
    ``out_dir/hessians.json`` (a summary, the same bytes however many runs it took) and
    ``out_dir/hessians.timing.json`` (what this run did: the layers it computed and skipped, the decoder layers
    it ran, ``collect_s``, the wall seconds of the collection from the first batch's embedding to the last layer
    file). Resumable: layers whose artifact exists and loads cleanly are skipped; if every requested layer is
    done nothing runs. ``seed`` (of the calibration sampler), ``model_name`` and ``source`` (the calibration text's
    name, in ``hessians.json`` when given: what a checkpoint's provenance reports) only go into the metadata.
    Returns the summary with the timing file's keys, ``{"computed": [...], "skipped": [...], ...}``.
    """
    import time

    from tqdm.auto import tqdm

    if not isinstance(calibration_ids, Tensor) or calibration_ids.ndim != 2 or calibration_ids.is_floating_point():
        raise ValueError("calibration_ids must be an (N, T) integer tensor of token ids")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    all_layers = decoder_layers(model)
    n_layers = len(all_layers)
    wanted = sorted(set(range(n_layers) if layers is None else (int(x) for x in layers)))
    bad = [x for x in wanted if not 0 <= x < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range; the model has {n_layers} decoder layers (0..{n_layers - 1})")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fp = calibration_fingerprint(calibration_ids)
    done = [x for x in wanted if layer_artifact_ok(layer_file(out_dir, x), fp)]
    todo = [x for x in wanted if x not in done]
    name = model_name or getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    N, T = calibration_ids.shape
    summary: dict[str, Any] = {
        "format": FORMAT,
        "model": str(name),
        "n_layers": n_layers,
        "n_sequences": int(N),
        "seq_len": int(T),
        "n_tokens": int(N * T),
        "seed": seed,
        "calibration_sha256": fp,
        "dtype": str(store_dtype).removeprefix("torch."),
        **({"source": str(source)} if source is not None else {}),
    }
    t0 = time.perf_counter()
    if todo:
        was_training = model.training
        model.eval()
        try:
            # one buffer per batch, the only copy of the hidden states
            states, layer_kwargs = initial_states(model, calibration_ids.split(batch_size), device=device,
                                                  offload=offload)
            last = max(todo)
            bar = tqdm(total=len(todo), desc="hessians", unit="layer", disable=not progress)
            for li in range(last + 1):
                accs: dict[str, HessianAccumulator] = {}
                with layer_in_turn(model, li, device=device, loader=loader) as (layer, run_on):
                    handles = []
                    if li in todo:
                        for g, (path, _) in GROUPS.items():
                            mod = layer.get_submodule(path)
                            acc = accs[g] = HessianAccumulator(mod.in_features, device=mod.weight.device)
                            handles.append(
                                mod.register_forward_pre_hook(lambda _m, args, _acc=acc: _acc.update(args[0])))
                    try:
                        advance_layer(layer, states, [kws[li] for kws in layer_kwargs], run_on)
                    finally:
                        for h in handles:
                            h.remove()
                if li in todo:
                    tensors: dict[str, Tensor] = {}
                    for g, acc in accs.items():
                        tensors.update(acc.tensors(f"{g}.", store_dtype))
                    meta = {
                        "format": FORMAT,
                        "layer": li,
                        "groups": list(GROUPS),
                        "group_modules": {g: list(v[1]) for g, v in GROUPS.items()},
                        "n_tokens": accs["qkv"].count,
                        "seed": seed,
                        "model": str(name),
                        "dtype": str(store_dtype).removeprefix("torch."),
                        "calibration_sha256": fp,
                        "tensors_sha256": tensors_sha256(tensors),
                    }
                    meta_json = {META_KEY: json.dumps(meta, sort_keys=True)}
                    save_safetensors_atomic(tensors, layer_file(out_dir, li), meta_json)
                    bar.update(1)
            bar.close()
        finally:
            model.train(was_training)
    timing = {"computed": todo, "skipped": done, "layers_run": max(todo) + 1 if todo else 0,
              "collect_s": time.perf_counter() - t0}
    write_atomic(timing_path(out_dir / "hessians.json"), json.dumps(timing, indent=1, sort_keys=True) + "\n")
    write_atomic(out_dir / "hessians.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return {**summary, **timing}
