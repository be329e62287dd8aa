"""The Hessian files (:mod:`caldera.pipeline.hessians`) and the checks every reader makes.

One file per decoder layer, ``layer_{l:03d}.safetensors`` (:func:`layer_file`), holds ``{group}.H`` (d×d),
``{group}.mu`` (d, float64) and ``{group}.count`` (int64 scalar) for the four groups ``qkv``, ``o``, ``up``,
``down``, plus a JSON metadata string (``caldera_hessians``: format, layer, groups, n_tokens, seed, model, dtype,
calibration fingerprint, and ``tensors_sha256``, the content hash of every tensor: :func:`tensors_sha256`).

Every read checks the content hash (:func:`read_hessian_file`) and the metadata against the file's tensors and its
name: the layer it says it is, the dtype of H, a positive token count every group saw
(:func:`read_layer_hessians`). A job that reads a folder checks every file it needs before any work
(:func:`check_hessian_files`): the model, calibration hash, token count and dtype against what the job knows and
the folder's ``hessians.json``, and each H's shape against the model's layer.
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

from caldera.pipeline.layer_runner import decoder_layers
from caldera.pipeline.linears import GROUPS

FORMAT = "caldera-hessians/1"
META_KEY = "caldera_hessians"
#: torch dtypes of the safetensors header's dtype names
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "U16": torch.uint16, "U32": torch.uint32, "BOOL": torch.bool}


def layer_file(out_dir: str | os.PathLike, layer: int) -> Path:
    return Path(out_dir) / f"layer_{layer:03d}.safetensors"


def tensors_sha256(tensors: dict[str, Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (in name order): recorded in a Hessian file's
    metadata when it is written, checked by every read, so a flipped bit is an error naming the file."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        t = tensors[k].detach().cpu().contiguous()
        h.update(f"{k}\0{str(t.dtype).removeprefix('torch.')}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def corrupt_file_error(path: str | os.PathLike, why: str) -> ValueError:
    """The error for a Hessian file that cannot be read as written (``why``), naming it and the way out."""
    return ValueError(
        f"Hessian file {path} is corrupt or truncated ({why}); delete it and rerun `caldera hessians` "
        "(collection resumes and recomputes only the missing layers)"
    )


def _mislabelled(path: str | os.PathLike, why: str) -> ValueError:
    return ValueError(
        f"Hessian file {path} is not what its name and metadata say ({why}); delete it and rerun `caldera "
        "hessians` (collection resumes and recomputes only the missing layers)"
    )


def read_hessian_file(path: str | os.PathLike) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """``(tensors, metadata)`` of a Hessian file, checked: it exists, it reads, its metadata has this format, its
    tensors match the content hash recorded when it was written (:func:`tensors_sha256`) and are finite.
    ``FileNotFoundError``, or ``ValueError`` naming the file (:func:`corrupt_file_error`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Hessian file {path} does not exist; run `caldera hessians` first")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(META_KEY)
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise corrupt_file_error(path, f"{type(e).__name__}: {e}") from None
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise corrupt_file_error(path, f"missing or unknown '{META_KEY}' metadata (expected format {FORMAT})")
    want = meta.get("tensors_sha256")
    if want is None:
        raise corrupt_file_error(path, "no content hash 'tensors_sha256' in its metadata (written by an older "
                                       "version, or edited)")
    if tensors_sha256(tensors) != want:
        raise corrupt_file_error(path, "its tensors do not match the content hash recorded when it was written "
                                       "(a changed bit)")
    for k, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise corrupt_file_error(path, f"tensor {k!r} has NaN/Inf entries")
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
    tensors, meta = read_hessian_file(path)
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
            raise corrupt_file_error(path, f"{type(e).__name__}: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise corrupt_file_error(path, f"missing or unknown '{META_KEY}' metadata (expected format {FORMAT})")
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
