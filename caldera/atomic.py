"""Atomic outputs and file hashes: the one mechanism every writer of this package uses.

A rerun must never trust a half-written file, and a file on disk must be what its writer meant:

* :func:`atomic_path` / :func:`write_atomic` / :func:`save_safetensors_atomic` write one file through a
  temporary sibling ``<name>.tmp-<pid>-<host>-<random>``, fsync it, rename it onto the target and fsync the
  folder; the temporary file is deleted on any exception. :func:`atomic_dir` does the same for a folder
  (checkpoints, cached assets).
* Outputs get the permissions of an ordinary file (``0o666 & ~umask``, e.g. ``-rw-r--r--`` under umask 022):
  the temporary file is created with ``os.open(..., 0o666)`` (the kernel applies the umask) and that mode is
  restored after the writer ran, so owner-only ``0o600`` files (``mkstemp``, safetensors) never leak into
  results.
* A crash (``kill -9``) can still leave a temporary sibling behind. :func:`remove_orphans` deletes the ones
  whose writing process is gone (same host, dead pid) or that are older than a day; every atomic write calls
  it for its own target name, and writers that own a folder call it once for the folder at start.
* :func:`save_safetensors_atomic` writes reproducible bytes: the safetensors header serializes its metadata
  dict in a per-process random order, so metadata is restricted to one key (a JSON string with sorted keys).
* :func:`sha256_file` is the package's only file hash.
* :func:`write_json` / :func:`read_json` are the JSON results' writer and reader; :func:`write_result` puts a
  step's wall-clock seconds in a :func:`timing_path` file beside its result, so the result's bytes never hold a
  clock reading.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

TMP_INFIX = ".tmp-"
#: A temporary sibling older than this is an orphan whatever its pid says (pids are reused; other hosts).
ORPHAN_AGE_S = 24 * 3600.0
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
# <pid>-<host>-<random> (this module), <pid> (older writers); anything else only by age
_TMP_RE = re.compile(r"\.tmp-(?P<pid>\d+)(?:-(?P<host>[0-9a-f]{8})-[0-9a-f]+)?$")


class OutputExists(ValueError):
    """A writer of a new folder found it already there (its message names the folder and the fix)."""


def new_folder(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`Path` after checking that nothing is there yet (:class:`OutputExists` otherwise)."""
    path = Path(path)
    if path.exists():
        raise OutputExists(f"{path} already exists; remove it or choose a new folder")
    return path


def _overlap(a: Path, b: Path) -> bool:
    """True if ``a`` and ``b`` are the same path or one lies inside the other (links resolved)."""
    ra, rb = a.resolve(), b.resolve()
    return ra == rb or ra.is_relative_to(rb) or rb.is_relative_to(ra)


def guard_output(
    path: str | os.PathLike,
    *,
    option: str,
    kind: str,
    same_kind: Callable[[Path], bool] | None,
    inputs: Mapping[str, str | os.PathLike | None] = (),
    overwrite: bool = False,
    resumable: bool = False,
) -> Path:
    """Check, before any work, that writing the output ``path`` (given as ``option``, a ``kind`` of output) loses
    nothing it did not write; ``OutputExists`` (naming the option, the path and the fix) otherwise.

    * ``path`` must not be, contain or lie inside any of ``inputs`` (``{option: path}`` of the command's inputs):
      replacing the output would delete the input, writing into it would change it;
    * an existing ``path`` that is not an empty folder must be an output of the same kind (``same_kind``; None:
      only a new path will do): anything else (a file, an unrelated folder) is never replaced;
    * an existing output of the same kind is resumed when the writer is ``resumable``, replaced only with
      ``overwrite`` (its writer keeps the old one until the new one is complete: :func:`atomic_dir`,
      :func:`atomic_path`), refused otherwise."""
    path = Path(path)
    for name, src in dict(inputs).items():
        if src is not None and str(src) != "" and Path(src).exists() and _overlap(path, Path(src)):
            rel = "is" if path.resolve() == Path(src).resolve() else "overlaps"
            raise OutputExists(f"{option} {path} {rel} the {name} {src}, an input of this command; writing there "
                               f"would replace or change it: choose another {option}")
    if not (path.exists() or path.is_symlink()):
        return path
    if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
        return path
    if same_kind is None:
        raise OutputExists(f"{option} {path} already exists; nothing was written and nothing is replaced: choose a "
                           f"new {option} (or remove it yourself)")
    if not same_kind(path):
        what = "a folder" if path.is_dir() else "a file"
        raise OutputExists(f"{option} {path} already exists and is {what} that is not a {kind}; nothing was written "
                           f"and nothing is replaced: choose a new {option} (or remove it yourself)")
    if resumable:
        return path
    if not overwrite:
        raise OutputExists(f"{option} {path} already holds a {kind}; pass --overwrite to replace it (the old one is "
                           f"kept until the new one is complete) or choose a new {option}")
    return path


def timing_path(path: str | os.PathLike) -> Path:
    """``<name>.timing.json`` beside the result file ``<name>.json``: where the wall-clock seconds of the step that
    wrote it go, so that the result itself holds no clock reading."""
    p = Path(path)
    return p.with_name(f"{p.name.removesuffix('.json')}.timing.json")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def folder_files(folder: str | os.PathLike) -> list[str]:
    """Relative paths of the files in ``folder`` that a loader could read: everything except hidden paths (a
    component starting with ``.``: Snakemake's ``.snakemake_timestamp``, huggingface_hub's ``.cache/``), which no
    transformers, tokenizer or datasets loader opens. What a verified folder (a checkpoint, a cached asset) must
    list."""
    folder = Path(folder)
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out.append(rel.as_posix())
    return out


def tmp_sibling(path: str | os.PathLike) -> Path:
    """A fresh temporary name next to ``path``: ``<name>.tmp-<pid>-<host>-<random>``."""
    path = Path(path)
    return path.with_name(f"{path.name}{TMP_INFIX}{os.getpid()}-{_HOST}-{secrets.token_hex(4)}")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def is_orphan(path: str | os.PathLike, *, max_age_s: float = ORPHAN_AGE_S) -> bool:
    """True if ``path`` is a temporary sibling (``*.tmp-*``) whose writer is gone: its pid (on this host) is
    dead, or it is older than ``max_age_s``. A name without a pid is judged by age only."""
    path = Path(path)
    if TMP_INFIX not in path.name:
        return False
    try:
        age = time.time() - path.lstat().st_mtime
    except FileNotFoundError:
        return False
    if age > max_age_s:
        return True
    m = _TMP_RE.search(path.name)
    if m is None or (m["host"] is not None and m["host"] != _HOST):
        return False
    return not _pid_alive(int(m["pid"]))


def remove_orphans(folder: str | os.PathLike, name: str = "*", *, max_age_s: float = ORPHAN_AGE_S) -> list[Path]:
    """Delete the orphaned temporary siblings ``<name>.tmp-*`` (files or folders) in ``folder``
    (:func:`is_orphan`); ``name`` is a file name (taken literally) or ``"*"`` for all. Returns them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    pattern = ("*" if name == "*" else glob.escape(name)) + TMP_INFIX + "*"
    removed = []
    for p in folder.glob(pattern):
        if is_orphan(p, max_age_s=max_age_s):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` for any writer (``save_file``, ``savefig``, ``open(..., "wb")``).

    The temporary file already exists (empty, mode ``0o666 & ~umask``). On normal exit it gets that mode back
    (a writer may have replaced it with an owner-only file), is fsynced and renamed onto ``path``; on an
    exception it is deleted. Creates the parent folder and first removes orphaned temporaries of the same name
    (:func:`remove_orphans`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path.parent, path.name)
    tmp = tmp_sibling(path)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    mode = tmp.stat().st_mode & 0o777  # 0o666 & ~umask, read without changing the process umask
    try:
        yield tmp
        os.chmod(tmp, mode)  # writers that replace the file (safetensors makes it 0o600) lose the mode
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically (:func:`atomic_path`)."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def save_safetensors_atomic(tensors: dict[str, Any], path: str | os.PathLike, metadata: dict[str, str]) -> Path:
    """``safetensors.torch.save_file`` through :func:`atomic_path`, with reproducible bytes.

    ``metadata`` must have at most one key: safetensors writes its metadata map in a random order per process,
    so two keys would make a rerun's bytes differ. Put structured metadata in one JSON string (sorted keys).
    """
    from safetensors.torch import save_file

    if len(metadata) > 1:
        raise ValueError(
            f"metadata has keys {sorted(metadata)}; safetensors orders several keys randomly (non-reproducible "
            "files): pass one key holding json.dumps({...}, sort_keys=True)"
        )
    path = Path(path)
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata or None)
    return path


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary folder next to ``path``; on normal exit it replaces ``path`` (an existing
    ``path`` is moved aside first and deleted after the rename), on an exception it is deleted.

    Every file inside gets ``0o666 & ~umask`` (some writers create owner-only files) and is fsynced before the
    rename; the folder gets ``0o777 & ~umask``. Orphaned temporaries of ``path`` are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path.parent, path.name)
    tmp = tmp_sibling(path)
    os.mkdir(tmp, 0o777)  # the kernel applies the umask
    umask = 0o777 & ~tmp.stat().st_mode
    try:
        yield tmp
        for f in sorted(tmp.rglob("*")):
            if f.is_file() and not f.is_symlink():
                os.chmod(f, 0o666 & ~umask)
                _fsync_file(f)
            elif f.is_dir() and not f.is_symlink():
                os.chmod(f, 0o777 & ~umask)
        old = None
        if path.exists() or path.is_symlink():
            old = tmp_sibling(path)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(path.parent)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """``obj`` as indented, key-sorted JSON to ``path``, atomically (:func:`write_atomic`)."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True, default=str))


def write_result(path: str | os.PathLike, obj: Any, seconds: dict[str, float]) -> None:
    """``obj`` to ``path`` and the step's wall-clock ``seconds`` to :func:`timing_path` beside it. A result file
    holds no clock reading, so a rerun writes it (and everything the later rules build from it) byte for byte;
    nothing reads the timing file to decide anything (the run's job times are Snakemake's benchmark files)."""
    write_json(timing_path(path), seconds)
    write_json(path, obj)


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in ``path``."""
    return json.loads(Path(path).read_text())
