"""What every command shares: errors for the user, model resolution and loading, argument parsers, the
output lock, progress and logging, and how a result is printed."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from caldera.arguments import MAX_SEED, IntOptionParser, int_option  # noqa: F401 - the commands' bounded options
from caldera.atomic import write_atomic

DEFAULT_MODEL = "smollm2"


class CLIError(Exception):
    """An error whose message tells the user what to do; printed without a traceback."""


def require_path(value: str, option: str, kind: str = "folder", fix: str = "") -> Path:
    """``value`` of ``option`` (an option, or a positional argument's name) as a path that exists, of ``kind``:
    ``folder``, ``file`` or ``path`` (either). Nothing there is one :class:`CLIError` line, "OPTION: no such
    KIND: VALUE", with ``fix`` (what makes it) after it; a file where a folder is wanted (or the reverse) says
    so."""
    p = Path(value).expanduser()
    if not p.exists():
        what = "file or folder" if kind == "path" else kind
        raise CLIError(f"{option}: no such {what}: {value}" + (f"; {fix}" if fix else ""))
    if kind == "folder" and not p.is_dir():
        raise CLIError(f"{option}: not a folder: {value}" + (f"; {fix}" if fix else ""))
    if kind == "file" and not p.is_file():
        raise CLIError(f"{option}: not a file: {value}" + (f"; {fix}" if fix else ""))
    return p


def unknown_model_name(name: str, option: str = "--model") -> CLIError | None:
    """The error for ``--model NAME`` (``option``) when ``name`` is a bare name (no ``/``, and not a path:
    :func:`caldera.pipeline.sources.looks_like_path`) that is neither an offline asset nor an existing folder: such
    a name never goes to the hub (a hub model is ``org/name``); the message offers the close known names
    (``difflib``, compared without case) and lists them all. None for any other name."""
    import difflib

    from caldera.pipeline.assets import MODEL_ASSETS
    from caldera.pipeline.sources import looks_like_path

    if "/" in name or name in MODEL_ASSETS or looks_like_path(name) or Path(name).expanduser().exists():
        return None
    known = sorted(MODEL_ASSETS)
    close = difflib.get_close_matches(name.lower(), known, n=len(known), cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return CLIError(f"{option} {name}: not a known model name nor a local folder; {hint}known names: "
                    f"{', '.join(known)}; a hub model is named org/name (e.g. HuggingFaceTB/SmolLM2-135M)")


def resolve_model_path(name: str, option: str = "--model") -> str:
    """``--model`` as a folder or hub id (:func:`caldera.pipeline.models.resolve_model`); an asset that is not
    built, a file, a mistyped path or an unknown bare name (:func:`unknown_model_name`) is one
    :class:`CLIError` line naming ``option``, before any hub request."""
    from caldera.pipeline.assets import MODEL_ASSETS
    from caldera.pipeline.models import AssetNotBuilt, resolve_model

    unknown = unknown_model_name(name, option)
    if unknown is not None:
        raise unknown
    try:
        return resolve_model(name)
    except AssetNotBuilt as e:
        raise CLIError(f"the {name} model is not cached at {e.filename}; run `caldera assets --only {name}` first"
                       ) from None
    except NotADirectoryError:
        raise CLIError(f"{option} {name}: not a folder") from None
    except FileNotFoundError as e:
        raise CLIError(f"{option} {name}: no such folder ({e.filename}); check the path (a hub id looks like "
                       f"org/name; the offline assets are {' and '.join(MODEL_ASSETS)})") from None


def _unloadable(name: str, path: str, e: OSError, option: str = "--model") -> CLIError:
    """The one line for a dense model that transformers could not load (not a model folder / hub id unreachable
    or unknown): the first line of its error."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    where = "the folder" if Path(path).is_dir() else "no local folder of that name, and as a hub id it"
    return CLIError(f"{option} {name}: {where} could not be loaded ({first})")


def load_dense_model(name: str, path: str):
    """``(model, tokenizer)`` of a dense model (:func:`caldera.pipeline.models.load_dense`, float32 on the CPU); a
    folder that is not a model, or a hub id that cannot be fetched (no such repository, no network), is one
    :class:`CLIError` line, not a traceback."""
    from caldera.pipeline.models import load_dense

    try:
        return load_dense(path)
    except OSError as e:
        raise _unloadable(name, path, e) from None


def load_any_model(name: str, option: str = "--model"):
    """``(model, tokenizer, kind)`` of ``--model``: a compressed checkpoint or a dense model (fp32)
    (:func:`caldera.pipeline.models.load_any`); a dense model that cannot be loaded is one :class:`CLIError` line,
    as in :func:`load_dense_model`, naming ``option``."""
    from caldera.pipeline.models import is_checkpoint, load_any

    path = resolve_model_path(name, option)
    try:
        return load_any(path)
    except OSError as e:
        if is_checkpoint(path):
            raise
        raise _unloadable(name, path, e, option) from None


def _parse_value(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        low = s.lower()
        if low in ("true", "false"):
            return low == "true"
        return s


def param_types(config_cls: type) -> dict[str, Any]:
    """Each field of a method's config dataclass and its type (``int``, ``float``, ``bool``, ``str``, ...)."""
    import dataclasses
    import typing

    try:
        hints = typing.get_type_hints(config_cls)
    except (NameError, TypeError):  # an annotation that does not resolve: its values are read untyped
        hints = {}
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(config_cls)}


#: how a parameter type is written in messages
_TYPE_WORDS = {bool: "true or false (bool)", int: "an integer (int)", float: "a number (float)", str: "text (str)"}


def _typed_value(key: str, raw: str, typ: Any) -> Any:
    """``raw`` (the text after ``KEY=``) as the value of a parameter of type ``typ``: ``bool`` from true/false,
    ``int`` from an integer literal, ``float`` from any JSON number, ``str`` as written; any other type from
    JSON (else the text). A value of the wrong type is a :class:`CLIError` naming the parameter, the expected
    type and the value."""
    if typ is str:
        return raw
    if typ not in (bool, int, float):
        return _parse_value(raw)
    low = raw.lower()
    if typ is bool and low in ("true", "false"):
        return low == "true"
    try:
        v = json.loads(raw)
    except ValueError:
        v = None
    if typ is int and isinstance(v, int) and not isinstance(v, bool):
        return v
    if typ is float and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    raise CLIError(f"--param {key}={raw}: {key} takes {_TYPE_WORDS[typ]}, got {raw!r}")


def parse_params(items: list[str] | None, preset: str | None, types: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """``--param KEY=VALUE`` items (and ``--preset``) as a parameter dict. ``types``: each parameter's type
    (:func:`param_types` of the method's config), each value checked against it (:func:`_typed_value`);
    parameters it does not name (and every one without ``types``) are read as JSON, true/false, else text."""
    params: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise CLIError(f"--param {item!r}: expected key=value (e.g. --param rank=64)")
        k, v = item.split("=", 1)
        k, v = k.strip(), v.strip()
        params[k] = _typed_value(k, v, types[k]) if types and k in types else _parse_value(v)
    if preset:
        params["preset"] = preset
    return params


def parse_layers(s: str | None) -> list[int] | None:
    if s is None or s == "all":
        return None
    out: list[int] = []
    try:
        for part in s.split(","):
            part = part.strip()
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if a > b:
                    raise CLIError(f"--layers {s!r}: the range {part} is reversed (it selects no layer); write {b}-{a}")
                out.extend(range(a, b + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise CLIError(f"--layers {s!r}: expected a list like 0,1,2 or a range 0-5") from None
    if not out:
        raise CLIError(f"--layers {s!r}: selects no layer; expected a list like 0,1,2 or a range 0-5")
    return out


def model_config(path: str) -> Any | None:
    """The transformers config of the model in the local folder ``path`` (a dense model or a checkpoint, resolved by
    :func:`resolve_model_path`), from its ``config.json`` alone (no weight is read; a composite config's text
    model's): what a command checks its options against before it loads the model. None for a hub id (its config
    comes with the model), an offline asset that failed verification (its load refuses it, naming the repair) or
    a config that cannot be read (loading the model then says why)."""
    from caldera.pipeline.assets import BAD_MARKER

    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file() or (folder / BAD_MARKER).exists():
        return None
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except Exception:  # noqa: BLE001 - an unreadable config is reported by the model's load
        return None
    text = getattr(config, "get_text_config", None)
    return text() if callable(text) else config


def check_positions(config: Any, length: int, option: str) -> None:
    """``length`` tokens (``option``'s value, or the sum it names) fit the model's positions
    (``max_position_embeddings`` of its transformers ``config``, when it has one): :class:`CLIError` naming the
    option otherwise."""
    top = getattr(config, "max_position_embeddings", None)
    if isinstance(top, int) and length > top:
        raise CLIError(f"{option} is {length}, above the model's max_position_embeddings ({top}): positions "
                       f"beyond it were never trained; use {option} <= {top}")


def available_memory() -> int:
    """Bytes this process may still allocate: ``MemAvailable`` of ``/proc/meminfo`` (else the physical memory),
    capped by the cgroup's ``memory.max`` less its ``memory.current`` where there is one."""
    avail = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    if avail is None:
        avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with contextlib.suppress(OSError, ValueError):
        top = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if top != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            avail = min(avail, int(top) - used)
    return avail


def forward_memory(cfg: Any, batch: int, seq_len: int) -> int:
    """Bytes a forward of ``batch`` sequences of ``seq_len`` tokens holds at its peak, beyond the model's own
    weights, roughly: the float32 logits three times (logits, their log-softmax, the loss's working copy), the
    causal mask and one layer's attention scores and MLP activations. ``cfg``: the model's transformers config."""
    vocab = getattr(cfg, "vocab_size", 0) or 0
    hidden = getattr(cfg, "hidden_size", 0) or 0
    inter = getattr(cfg, "intermediate_size", 0) or 4 * hidden
    heads = getattr(cfg, "num_attention_heads", 1) or 1
    return 4 * batch * seq_len * (3 * vocab + 2 * inter + 8 * hidden + (heads + 1) * seq_len)


def check_memory(need: int, what: str, fix: str) -> None:
    """:class:`CLIError` when ``need`` bytes exceed what this machine has available (:func:`available_memory`),
    naming ``what`` needs them and the options to change (``fix``)."""
    avail = available_memory()
    if need > avail:
        raise CLIError(f"{what} needs about {need / 2**30:.1f} GiB of memory, more than the {avail / 2**30:.1f} GiB "
                       f"this machine has available; {fix}")


def parse_limit(s: str) -> int | float:
    """``--limit``: a number of documents (an integer >= 1) or a fraction of each task in (0, 1)."""
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0) or (v >= 1 and v != int(v)):
        raise argparse.ArgumentTypeError(f"{s!r}: expected a number of documents per task (an integer >= 1, e.g. "
                                         "100) or a fraction of each task in (0, 1), e.g. 0.1")
    return int(v) if v >= 1 else v


@contextlib.contextmanager
def output_lock(out: Path, what: str) -> Iterator[None]:
    """Hold ``<out>.lock`` (``flock``) while a command writes into ``out``: a second concurrent run refuses
    clearly instead of recomputing the same files. The kernel releases the lock when its holder dies, so a
    lock file left by a killed run (its pid recorded inside) is simply taken over. The holder deletes the file
    when it is done (before it unlocks it); a run that opened the file just before that finds its lock on a
    deleted file and opens the path again."""
    import fcntl

    lock = out.with_name(out.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    if lock.exists() or lock.is_symlink():  # a lock left by a killed run holds its pid (or nothing yet)
        try:
            held: str | None = lock.read_text().strip() if lock.is_file() else None
        except (OSError, UnicodeDecodeError):
            held = None
        if held is None or not (held == "" or held.isdigit()):
            raise CLIError(f"{what}: {lock} exists and is not a lock this command wrote (it holds no pid); the "
                           "lock file beside --out is never overwritten: move it, or choose another --out")
    while True:
        fh = open(lock, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise CLIError(f"{what}: another run (pid {holder}) is writing into {out} (lock {lock}); wait for it "
                           "to finish, or choose another --out") from None
        try:
            current = os.stat(lock)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(fh.fileno())):
            break
        fh.close()  # the previous holder deleted this file after we opened it: lock the new one
    with fh:
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
            fcntl.flock(fh, fcntl.LOCK_UN)


def is_checkpoint_dir(p: Path) -> bool:
    """A compressed checkpoint folder (it holds ``caldera_config.json``)."""
    from caldera.pipeline.checkpoint import CONFIG_FILE

    return p.is_dir() and (p / CONFIG_FILE).is_file()


def _names(p: Path, pattern: str) -> bool:
    return p.is_dir() and next(iter(p.glob(pattern)), None) is not None


def is_hessian_dir(p: Path) -> bool:
    """A folder ``caldera hessians`` wrote (``hessians.json`` or its ``layer_NNN.safetensors`` files), not a
    compression's per-layer folder (``layer_NNN.json``) nor a checkpoint."""
    return (_names(p, "hessians.json") or _names(p, "layer_[0-9][0-9][0-9].safetensors")) and not (
        _names(p, "layer_[0-9][0-9][0-9].json") or is_checkpoint_dir(p))


def is_layer_dir(p: Path) -> bool:
    """A per-layer folder ``caldera compress`` wrote (``layer_NNN.json`` or ``allocation.json``), not a Hessians
    folder nor a checkpoint."""
    return (_names(p, "layer_[0-9][0-9][0-9].json") or _names(p, "allocation.json")) and not (
        _names(p, "hessians.json") or is_checkpoint_dir(p))


def is_records_file(*keys: str, **values: Any):
    """A predicate: ``p`` is a JSON object file with ``keys`` and the given ``values`` (what an earlier run of the
    same command wrote with ``--out``)."""

    def check(p: Path) -> bool:
        if not p.is_file():
            return False
        try:
            obj = json.loads(p.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return False
        return isinstance(obj, dict) and all(k in obj for k in keys) and all(obj.get(k) == v
                                                                              for k, v in values.items())

    return check


def local_input(name: str | None) -> str | None:
    """``name`` when it is an existing local path (an input whose place an output must not take), else None."""
    return name if name and Path(name).expanduser().exists() else None


def guard_output(path: str | os.PathLike, **kw: Any) -> Path:
    """:func:`caldera.atomic.guard_output` with its refusal as a :class:`CLIError`."""
    from caldera.atomic import OutputExists
    from caldera.atomic import guard_output as guard

    try:
        return guard(path, **kw)
    except OutputExists as e:
        raise CLIError(str(e)) from None


class TqdmLogHandler(logging.StreamHandler):
    """Log lines through ``tqdm.write``: printed above a running progress bar instead of through it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # logging must never raise (as logging.StreamHandler.emit)
            self.handleError(record)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=1, sort_keys=True, default=str))


def _report(args: argparse.Namespace, result: dict[str, Any], summary: list[str]) -> int:
    """A command's result on stdout: the JSON with ``--json``, else the ``summary`` lines (nothing with
    ``--quiet``)."""
    if getattr(args, "json", False):
        _print_json(result)
    elif not getattr(args, "quiet", False):
        print("\n".join(summary))
    return 0


def _emit(args: argparse.Namespace, res: dict[str, Any], summary: list[str], stdout_json: Any = None) -> int:
    """A command's result: the full records to ``--out`` (JSON); on stdout the JSON with ``--json``
    (``stdout_json`` when the full records are too long for a terminal, e.g. per-document rows), else the
    human ``summary`` (nothing with ``--quiet``)."""
    if args.out:
        write_atomic(args.out, json.dumps(res, indent=1, sort_keys=True, default=str) + "\n")
    return _report(args, res if stdout_json is None else stdout_json,
                   summary + ([f"full records: {args.out}"] if args.out else []))


def quiet_progress() -> None:
    """No progress bar from any library of this process (tqdm's ``TQDM_DISABLE``, read by every bar created
    after this; transformers' and huggingface_hub's own switches)."""
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every command's help: descriptions and epilogs as written, and each option's default after its help
    ("(default: X)") unless the help already names its default, or it has none (``None``, a flag's ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if (not action.option_strings or d is None or d is False or d is argparse.SUPPRESS
                or "default" in text.lower()):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(IntOptionParser):
    """An argument parser whose integer options are checked (:class:`~caldera.arguments.IntOptionParser`) and whose
    epilog may be computed when help is printed (``lazy_epilog``): ``compress --help`` lists every registered
    method's parameters without importing the methods for every other command."""

    lazy_epilog: Any = None

    def format_help(self) -> str:
        if self.lazy_epilog is not None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


def _example(*lines: str) -> str:
    return "example:\n" + "\n".join(f"  {ln}" for ln in lines)

