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
``{group}.mu`` (d, float64) and ``{group}.count`` (int64 scalar) for the four groups, plus a JSON metadata
string (``caldera_hessians``: format, layer, groups, n_tokens, seed, model, dtype, calibration fingerprint, and
``tensors_sha256``, the content hash of every tensor, checked whenever the file is read: :func:`tensors_sha256`).
A file's metadata is checked against its tensors and its name whenever it is read (the layer it says it is, the
dtype of H, a positive token count every group saw), and a job that reads a folder checks every file it needs
before any work (:func:`check_hessian_files`): the model, calibration hash, token count and dtype against what
the job knows and the folder's ``hessians.json``, and each H's shape against the model's layer.
Unlike the authors' files, H is stored uncentered (no ``μμᵀ`` to add back) and not trace-normalized:
regularization is the decomposition's job (``caldera.ldl.regularize_hessian``).

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
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open
from torch import Tensor, nn

from caldera.atomic import save_safetensors_atomic, timing_path, write_atomic
from caldera.pipeline.layer_runner import advance_layer, decoder_layers, initial_states, layer_in_turn
from caldera.pipeline.linears import GROUPS

FORMAT = "caldera-hessians/1"
META_KEY = "caldera_hessians"
#: torch dtypes of the safetensors header's dtype names
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "U16": torch.uint16, "U32": torch.uint32, "BOOL": torch.bool}



def layer_file(out_dir: str | os.PathLike, layer: int) -> Path:
    return Path(out_dir) / f"layer_{layer:03d}.safetensors"


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
        tensors, meta = _read(path)
        missing = {"H", "mu", "count"} - set(tensors)
        if missing:
            raise _corrupt(path, f"missing tensors {sorted(missing)}")
        count = int(tensors["count"])
        acc = cls(tensors["H"].shape[0])
        acc.S = tensors["H"].double() * count
        acc.sum = tensors["mu"].double() * count
        acc.count = count
        return acc, meta


# ----------------------------------------------------------------------------------------- file helpers


def tensors_sha256(tensors: dict[str, Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (in name order): recorded in a Hessian file's
    metadata when it is written, checked by every read, so a flipped bit is an error naming the file."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        t = tensors[k].detach().cpu().contiguous()
        h.update(f"{k}\0{str(t.dtype).removeprefix('torch.')}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _corrupt(path: str | os.PathLike, why: str) -> ValueError:
    return ValueError(
        f"Hessian file {path} is corrupt or truncated ({why}); delete it and rerun `caldera hessians` "
        "(collection resumes and recomputes only the missing layers)"
    )


def _mislabelled(path: str | os.PathLike, why: str) -> ValueError:
    return ValueError(
        f"Hessian file {path} is not what its name and metadata say ({why}); delete it and rerun `caldera "
        "hessians` (collection resumes and recomputes only the missing layers)"
    )


def _read(path: str | os.PathLike) -> tuple[dict[str, Tensor], dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Hessian file {path} does not exist; run `caldera hessians` first")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(META_KEY)
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise _corrupt(path, f"{type(e).__name__}: {e}") from None
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _corrupt(path, f"missing or unknown '{META_KEY}' metadata (expected format {FORMAT})")
    want = meta.get("tensors_sha256")
    if want is None:
        raise _corrupt(path, "no content hash 'tensors_sha256' in its metadata (written by an older version, or "
                             "edited)")  # fmt: skip
    if tensors_sha256(tensors) != want:
        raise _corrupt(path, "its tensors do not match the content hash recorded when it was written (a changed bit)")
    for k, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise _corrupt(path, f"tensor {k!r} has NaN/Inf entries")
    return tensors, meta


_LAYER_NAME = re.compile(r"layer_(\d+)\.safetensors")
#: Metadata of a layer file that must agree with the job reading it (:func:`check_hessian_files`).
JOB_FIELDS = ("model", "calibration_sha256", "n_tokens", "dtype")


def _layer_problem(path: Path, meta: dict[str, Any], shapes: dict[str, tuple[tuple[int, ...], torch.dtype]],
                   counts: dict[str, int]) -> str | None:
    """What is wrong with a per-layer file's metadata against its own tensors (shapes and dtypes, the group
    counts) and its name (``layer_{l:03d}``): the layer it says it is, its groups, the dtype its header names,
    a positive token count that every group saw. None: consistent."""
    m = _LAYER_NAME.fullmatch(path.name)
    if m is not None and meta.get("layer") != int(m.group(1)):
        return (f"its metadata says it holds layer {meta.get('layer')!r}, its name says layer {int(m.group(1))} "
                "(a file renamed or copied into another layer's place)")
    if sorted(meta.get("groups") or []) != sorted(GROUPS):
        return f"groups {meta.get('groups')!r}; expected {sorted(GROUPS)}"
    n = meta.get("n_tokens")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return f"n_tokens {n!r} in its metadata; a Hessian is an average over at least one token"
    for g in GROUPS:
        parts = {k: shapes.get(f"{g}.{k}") for k in ("H", "mu", "count")}
        if any(v is None for v in parts.values()):
            return f"group {g!r} lacks one of H, mu, count"
        (h_shape, h_dtype), (mu_shape, mu_dtype), (c_shape, c_dtype) = parts["H"], parts["mu"], parts["count"]
        if len(h_shape) != 2 or h_shape[0] != h_shape[1] or mu_shape != (h_shape[0],):
            return f"group {g!r} has inconsistent shapes H {h_shape}, mu {mu_shape}"
        if str(h_dtype).removeprefix("torch.") != meta.get("dtype"):
            return (f"group {g!r} stores H as {str(h_dtype).removeprefix('torch.')} under a header that says "
                    f"dtype {meta.get('dtype')!r}")
        if mu_dtype != torch.float64 or c_dtype != torch.int64 or c_shape != ():
            return f"group {g!r} stores mu as {mu_dtype} and count as {c_dtype} {c_shape}; expected float64, int64 ()"
        if counts.get(g) != n:
            return f"group {g!r} counted {counts.get(g)} tokens, its metadata says n_tokens {n}"
    return None


def read_layer_hessians(path: str | os.PathLike) -> tuple[dict[str, dict[str, Tensor]], dict[str, Any]]:
    """``({group: {"H", "mu", "count"}}, metadata)`` of one per-layer artifact, validated: its content hash, its
    metadata against its tensors and its name (:func:`_layer_problem`)."""
    path = Path(path)
    tensors, meta = _read(path)
    shapes = {k: (tuple(t.shape), t.dtype) for k, t in tensors.items()}
    counts = {g: int(tensors[f"{g}.count"]) for g in GROUPS if tensors.get(f"{g}.count") is not None
              and tensors[f"{g}.count"].numel() == 1}
    problem = _layer_problem(path, meta, shapes, counts)
    if problem:
        raise _mislabelled(path, problem)
    groups = {g: {k: tensors[f"{g}.{k}"] for k in ("H", "mu", "count")} for g in GROUPS}
    return groups, meta


def load_layer_hessians(path: str | os.PathLike) -> dict[str, Tensor]:
    """``{group: H}`` for the groups ``qkv``, ``o``, ``up``, ``down`` of one layer artifact (H (d, d) as
    stored, float32 by default). Raises ``ValueError`` naming the file for a corrupt or truncated one."""
    groups, _ = read_layer_hessians(path)
    return {g: parts["H"] for g, parts in groups.items()}


def same_model(a: Any, b: Any) -> bool:
    """The same model name, or two spellings of one local folder."""
    if a == b:
        return True
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.is_dir() and pb.is_dir() and pa.resolve() == pb.resolve()


def recorded_model(hessian_dir: str | os.PathLike) -> tuple[str, str] | None:
    """``(model, where)``: the model a Hessians folder was collected for, as ``caldera hessians`` recorded it
    (its ``--model``: an asset name, a folder or a hub id) and the file that says so: the folder's
    ``hessians.json``, else the metadata of its first ``layer_NNN.safetensors``. None when neither names one (or
    cannot be read)."""
    folder = Path(hessian_dir)
    try:
        rec = json.loads((folder / "hessians.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        rec = None
    if isinstance(rec, dict) and isinstance(rec.get("model"), str) and rec["model"]:
        return rec["model"], str(folder / "hessians.json")
    first = next(iter(sorted(p for p in folder.glob("layer_*.safetensors") if _LAYER_NAME.fullmatch(p.name))), None)
    if first is None:
        return None
    try:
        with safe_open(str(first), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get(META_KEY) or "null")
    except (SafetensorError, OSError, RuntimeError, ValueError):
        return None
    if isinstance(meta, dict) and isinstance(meta.get("model"), str) and meta["model"]:
        return meta["model"], str(first)
    return None


def check_hessian_files(hessian_dir: str | os.PathLike, layers: Sequence[int], model: nn.Module,
                        expect: dict[str, Any] | None = None) -> None:
    """Before any work: the per-layer files of ``layers`` in ``hessian_dir`` exist (else ``FileNotFoundError``)
    and are the Hessians this job needs. Each file's metadata against its own tensors and its name
    (:func:`_layer_problem`: a file renamed into another layer's place, a float16 H under a float32 header, a
    count of 0), its H shapes against the inputs of ``model``'s linear layers, and the job fields
    (:data:`JOB_FIELDS`: model, calibration hash, token count, dtype) against ``expect`` (what the caller knows),
    else against the folder's ``hessians.json`` (the collection's summary), else against the first file. Reads
    headers and the token counts only (the content hash is checked when each file is loaded). ``ValueError``
    naming the file, the field and the fix."""
    hessian_dir = Path(hessian_dir)
    missing = [li for li in layers if not layer_file(hessian_dir, li).is_file()]
    if missing:
        raise FileNotFoundError(
            f"no Hessians for layers {missing} in {hessian_dir}; run `caldera hessians` (with these layers) first"
        )
    ref: dict[str, Any] = {}
    source = ""
    summary = hessian_dir / "hessians.json"
    if summary.is_file():
        try:
            rec = json.loads(summary.read_text())
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            raise ValueError(f"{summary} is not a JSON object; delete it and rerun `caldera hessians`")
        ref, source = {k: rec.get(k) for k in JOB_FIELDS if k in rec}, str(summary)
    if expect:
        ref, source = {**ref, **{k: v for k, v in expect.items() if v is not None}}, "this job"
    all_layers = decoder_layers(model)
    for li in layers:
        path = layer_file(hessian_dir, li)
        try:
            with safe_open(str(path), framework="pt") as f:
                raw = (f.metadata() or {}).get(META_KEY)
                shapes = {k: (tuple(f.get_slice(k).get_shape()), SAFETENSORS_DTYPES.get(f.get_slice(k).get_dtype()))
                          for k in f.keys()}
                counts = {g: int(f.get_tensor(f"{g}.count")) for g in GROUPS
                          if shapes.get(f"{g}.count", (None,))[0] == ()}
            meta = json.loads(raw) if raw is not None else None
        except (SafetensorError, OSError, RuntimeError, ValueError) as e:
            raise _corrupt(path, f"{type(e).__name__}: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise _corrupt(path, f"missing or unknown '{META_KEY}' metadata (expected format {FORMAT})")
        problem = _layer_problem(path, meta, shapes, counts)
        if problem:
            raise _mislabelled(path, problem)
        if not source:
            ref, source = {k: meta.get(k) for k in JOB_FIELDS}, str(path)
        for k, want in ref.items():
            got = meta.get(k)
            if not (same_model(got, want) if k == "model" else got == want):
                raise ValueError(
                    f"Hessian file {path} has {k} {got!r} but {source} says {want!r}: it was collected for another "
                    f"model or calibration set (or mislabelled); use the Hessians of this model and calibration "
                    f"(`caldera hessians --out NEW`), or delete the stray file and rerun `caldera hessians --out "
                    f"{hessian_dir}`"
                )
        for g, (hooked, _) in GROUPS.items():
            d = all_layers[li].get_submodule(hooked).in_features
            if shapes[f"{g}.H"][0] != (d, d):
                raise ValueError(
                    f"Hessian file {path}: group {g!r} H has shape {shapes[f'{g}.H'][0]}; layer {li}'s {hooked} "
                    f"takes {d} inputs, so the expected shape is ({d}, {d}): these Hessians belong to another "
                    "model; collect them for this one with `caldera hessians`"
                )


def layer_artifact_ok(path: str | os.PathLike, fingerprint: str | None = None) -> bool:
    """True iff ``path`` exists, loads cleanly and (when given) was computed from ``fingerprint``."""
    try:
        _, meta = read_layer_hessians(path)
    except (ValueError, FileNotFoundError):
        return False
    if fingerprint is not None and meta.get("calibration_sha256") not in (None, fingerprint):
        raise ValueError(
            f"{path} was computed from different calibration data "
            f"(fingerprint {meta.get('calibration_sha256')}"
            f", now {fingerprint}); use another output folder or delete the old Hessians"
        )
    return True


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
