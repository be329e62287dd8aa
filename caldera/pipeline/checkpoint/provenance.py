"""Where a checkpoint came from: the ``provenance`` key of its ``caldera_config.json``, which ``caldera info`` prints
and the model card (:mod:`.card`) states.

``{"base_model": {"name", "weights_sha256"}, "calibration": {"source", "n_tokens", "n_sequences", "seq_len",
"seed", "calibration_sha256", "hessians_sha256"}, "caldera_version", "git_commit"}``; the method and its config
are the checkpoint's own keys (``method``, ``method_config``). Nothing in it depends on when or where it was
written (no time, no absolute path), so a rerun from the same inputs writes the same bytes. What cannot be known
is ``"unknown"`` (a git commit outside a checkout, a hub model that is not in the local cache).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from caldera.atomic import sha256_file
from caldera.version import __version__

UNKNOWN = "unknown"
#: the calibration fields copied from a Hessians folder's ``hessians.json`` (:func:`calibration_record`)
CALIBRATION_FIELDS = ("source", "n_tokens", "n_sequences", "seq_len", "seed", "calibration_sha256")
#: file name endings of a model's weight files (:func:`weights_digest`)
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def source_commit(root: str | os.PathLike = ".") -> str:
    """The git commit checked out at ``root`` (with ``+changes`` when the work tree differs from it in ``caldera``,
    ``workflow``, ``Snakefile`` or ``config``), or ``unknown`` outside a git checkout (or without git)."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return UNKNOWN
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "caldera", "workflow", "Snakefile",
                    "config")
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def caldera_commit(package_dir: str | os.PathLike | None = None) -> str:
    """The commit of the checkout this caldera runs from (:func:`source_commit` of the folder above the package
    folder ``package_dir``, default this package's), or ``unknown`` where that folder is not the top of a git
    checkout (an installed wheel inside some other repository's virtual environment is not its checkout)."""
    pkg = Path(package_dir) if package_dir is not None else Path(__file__).resolve().parents[2]
    root = pkg.resolve().parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
        return UNKNOWN
    return source_commit(root)


def weights_digest(folder: str | os.PathLike) -> str:
    """sha256 of the list of a model folder's weight files (:data:`WEIGHT_SUFFIXES`) with each file's sha256
    (canonical JSON ``{name: sha256}``): the same for the same weights wherever the folder is; ``unknown`` when the
    folder holds none."""
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        return UNKNOWN
    listing = {p.name: sha256_file(p) for p in files}
    import hashlib

    return hashlib.sha256(json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def model_folder(source: str | os.PathLike) -> Path | None:
    """The local folder of a model loaded from ``source``: the folder itself, or a hub id's snapshot in the local
    hub cache (nothing is downloaded); None when there is none."""
    p = Path(source).expanduser()
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(source), local_files_only=True))
    except Exception:  # noqa: BLE001 - not a hub id, not cached: the weights are unknown
        return None


def base_generation_config(source: str | os.PathLike) -> bytes | None:
    """The bytes of the ``generation_config.json`` beside the base model's weights (:func:`model_folder`), or None
    when it has none."""
    folder = model_folder(source)
    path = folder / "generation_config.json" if folder is not None else None
    return path.read_bytes() if path is not None and path.is_file() else None


def hessians_digest(hessian_dir: str | os.PathLike) -> str:
    """sha256 of ``{file name: tensors_sha256}`` over the per-layer Hessian files of ``hessian_dir`` (each file's
    own digest of its tensors, read from its metadata: no tensor is read); ``unknown`` when there is none."""
    from safetensors import safe_open

    from caldera.pipeline.hessian_files import META_KEY

    listing = {}
    for path in sorted(Path(hessian_dir).glob("layer_*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get(META_KEY, "{}"))
        listing[path.name] = meta.get("tensors_sha256", UNKNOWN)
    if not listing:
        return UNKNOWN
    import hashlib

    return hashlib.sha256(json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def calibration_record(hessian_dir: str | os.PathLike) -> dict[str, Any]:
    """The calibration of the Hessians in ``hessian_dir``: :data:`CALIBRATION_FIELDS` from its ``hessians.json``
    (``unknown`` where it lacks one) and ``hessians_sha256`` (:func:`hessians_digest`)."""
    summary_file = Path(hessian_dir) / "hessians.json"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        summary = {}
    if not isinstance(summary, dict):
        summary = {}
    out: dict[str, Any] = {k: summary.get(k, UNKNOWN) for k in CALIBRATION_FIELDS}
    out["hessians_sha256"] = hessians_digest(hessian_dir)
    return out


def checkpoint_provenance(model_name: str, model_source: str | os.PathLike,
                          hessian_dir: str | os.PathLike) -> dict[str, Any]:
    """The ``provenance`` of a checkpoint compressed from the model ``model_name`` (as the user named it: an asset
    name, a hub id, a folder) whose weights were read from ``model_source`` (a folder or a hub id), calibrated with
    the Hessians of ``hessian_dir`` (module docstring)."""
    folder = model_folder(model_source)
    return {
        "base_model": {"name": str(model_name),
                       "weights_sha256": weights_digest(folder) if folder is not None else UNKNOWN},
        "calibration": calibration_record(hessian_dir),
        "caldera_version": __version__,
        "git_commit": caldera_commit(),
    }
