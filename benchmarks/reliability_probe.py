"""Reliability probe: the classes of bad input an earlier adversarial probe found, re-run on the current code.

    python benchmarks/reliability_probe.py [--out benchmarks/results/reliability_probe] [--keep DIR]

Builds a tiny LLaMA (``tests.helpers.tiny_model_dir``), its Hessians (``tests.helpers.tiny_hessians``), a QuIP#
checkpoint of it with ``caldera compress`` and a tied one (``tests.pipeline.checkpoint_helpers``), then runs one
case per row, in this process: the ``caldera`` command through :func:`caldera.cli.main` (stderr captured), the
loaders as :func:`caldera.load_compressed` and transformers' ``AutoModelForCausalLM.from_pretrained``. The six
classes:

1. ``caldera compress --out X`` onto a file, an unrelated folder, the ``--hessians`` folder, an earlier checkpoint;
2. checkpoint edits on the tie of ``lm_head`` (resealed: content manifest, ``config.json`` and checksums
   recomputed, so only the deeper checks can catch them);
3. out-of-range numeric options of ``caldera eval`` and ``caldera matrix-report``;
4. CALDERA factors of 2 or 3 bits for L with 4 for R (a round trip, or a refusal at config time);
5. truncated or garbage files of a checkpoint, resealed and not;
6. stored dtypes off the checkpoint's scheme with the optional ``bits`` summary deleted (resealed).

Verdicts (:func:`classify`), computed from what happened:

* **refused clearly** -- every refusal (non-zero exit, or an exception) names the offending option, file or key
  (the case's ``names``); a case that asks for it: both loaders give the same message; whatever was at the target
  is unchanged; a loader that does not read the damaged file may load it, with the intact checkpoint's logits;
* **correct** -- accepted, and the case's own check of the result holds (e.g. both loaders give the same logits);
* **PROBLEM** -- anything else: a refusal that names nothing the user can act on (a raw ``SafetensorError``,
  ``JSONDecodeError``, ``RuntimeError`` ...), data changed or deleted, an accepted bad value, a wrong result.

Writes ``OUT.md`` (the table) and ``OUT.json`` (the rows with each outcome's full message).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the tests' helpers build the tiny model and checkpoints

#: verdicts, in the order the summary counts them
REFUSED, CORRECT, PROBLEM = "refused clearly", "correct", "PROBLEM"
#: length of the first line kept per outcome in the table
LINE_CHARS = 160
#: the token ids the loaders' logits are compared on
IDS = [[1, 5, 9, 33, 7, 100, 2, 64], [1, 3, 3, 3, 90, 91, 92, 93]]
LOADERS = ("load_compressed", "from_pretrained")


@dataclass
class Outcome:
    """What one run did: ``who`` ran (``caldera`` or a loader), whether it ``refused`` (non-zero exit or an
    exception), the exit ``code`` (CLI), the escaped exception's type name, the full ``message`` (stderr or the
    exception's text) and, for a loader that loaded, the ``logits`` on :data:`IDS`."""

    who: str
    refused: bool
    code: int | None = None
    exc_type: str | None = None
    message: str = ""
    logits: Any = None


@dataclass
class Result:
    """A case's outcomes and its own checks: ``intact`` (whatever was at the target is unchanged; None where the
    case does not protect one), ``accepted_right`` (the result of what was accepted is right; None where nothing
    was accepted), ``may_accept`` (runs that need not refuse), ``note`` (what the checks found)."""

    outcomes: list[Outcome]
    intact: bool | None = None
    accepted_right: bool | None = None
    may_accept: tuple[str, ...] = ()
    note: str = ""


@dataclass
class Case:
    """One row: its class, the exact case, what a clear refusal must name (any of ``names``), whether the
    refusals of several runs must agree word for word (``same_message``), and ``run(env) -> Result``."""

    cls: str
    case: str
    names: tuple[str, ...]
    run: Callable[["Env"], Result]
    same_message: bool = False


@dataclass
class Env:
    """The probe's inputs under ``root``: the tiny model folder, its Hessians, the ``caldera compress`` checkpoint
    ``base`` and the tied checkpoint ``tied``, and each one's logits as ``load_compressed`` gives them."""

    root: Path
    model: Path | None = None
    hessians: Path | None = None
    base: Path | None = None
    tied: Path | None = None
    reference: dict[str, Any] = field(default_factory=dict)

    def scratch(self, name: str) -> Path:
        p = self.root / "cases" / name
        shutil.rmtree(p, ignore_errors=True)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


# ---- classification --------------------------------------------------------------------------------------------


def first_line(text: str, root: Path | str | None = None, chars: int = LINE_CHARS) -> str:
    """The line of ``text`` that says what went wrong, at most ``chars`` long: the last ``error:`` line (argparse
    and the CLI print usage first), else the first non-empty line; ``root`` written ``<tmp>``."""
    if root is not None:
        text = text.replace(str(root), "<tmp>")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    line = errors[-1] if errors else (lines[0] if lines else "")
    return line if len(line) <= chars else line[: chars - 1] + "…"


def names_it(outcome: Outcome, names: tuple[str, ...]) -> bool:
    """Whether the refusal's message names one of ``names`` (the offending option, file or key)."""
    return any(n in outcome.message for n in names)


def classify(result: Result, names: tuple[str, ...], same_message: bool = False) -> str:
    """The verdict of a case (module docstring) from its outcomes and checks, nothing else."""
    if result.intact is False:
        return PROBLEM
    refusals = [o for o in result.outcomes if o.refused]
    accepted = [o for o in result.outcomes if not o.refused]
    if not refusals:
        return CORRECT if result.accepted_right else PROBLEM
    if not all(names_it(o, names) for o in refusals):
        return PROBLEM
    if same_message and len({o.message for o in refusals}) > 1:
        return PROBLEM
    if accepted and not (all(o.who in result.may_accept for o in accepted) and result.accepted_right):
        return PROBLEM
    return REFUSED


def happened(result: Result, root: Path | str | None = None) -> str:
    """The table's "what happened": per run its exit code or exception type and first line, or that it loaded;
    then the case's note."""
    parts = []
    for o in result.outcomes:
        if o.refused:
            how = f"exit {o.code}" if o.code is not None and o.exc_type is None else o.exc_type
            parts.append(f"{o.who}: {how}: {first_line(o.message, root)}")
        else:
            parts.append(f"{o.who}: {'exit 0' if o.code is not None else 'loaded'}")
    if result.note:
        parts.append(result.note)
    return "; ".join(parts)


# ---- running the command and the loaders -------------------------------------------------------------------------


def run_cli(argv: list[Any]) -> Outcome:
    """``caldera ARGV`` in this process: its exit code and stderr, or the exception that escaped it."""
    from caldera import cli

    err, out = io.StringIO(), io.StringIO()
    code, exc = None, None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            code = int(cli.main([str(a) for a in argv]) or 0)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # noqa: BLE001 - an escaped exception is what the probe records
            exc = e
    if exc is not None:
        return Outcome("caldera", True, None, type(exc).__name__, f"{exc}\n{err.getvalue()}")
    return Outcome("caldera", code != 0, code, None, err.getvalue())


def logits_of(model) -> Any:
    import torch

    with torch.no_grad():
        return model(torch.tensor(IDS)).logits


def load_with(who: str, ck: Path, load_tokenizer: bool = False) -> Outcome:
    """``load_compressed(ck)`` (with its tokenizer when ``load_tokenizer``) or ``from_pretrained(ck)``: the logits
    on :data:`IDS`, or the exception's type and text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if who == "load_compressed":
                from caldera import load_compressed

                model = load_compressed(ck, load_tokenizer=load_tokenizer)[0]
            else:
                from transformers import AutoModelForCausalLM

                model = AutoModelForCausalLM.from_pretrained(str(ck))
            return Outcome(who, False, logits=logits_of(model))
    except Exception as e:  # noqa: BLE001 - which exception escapes is what the probe records
        return Outcome(who, True, exc_type=type(e).__name__, message=str(e))


def same_logits(outcomes: list[Outcome], reference=None) -> tuple[bool, str]:
    """Whether every loaded outcome's logits are bit for bit those of the others (and ``reference`` when given),
    and a note saying so."""
    import torch

    got = [o for o in outcomes if not o.refused]
    if not got:
        return False, ""
    first = got[0].logits
    agree = all(torch.equal(o.logits, first) for o in got[1:]) and bool(torch.isfinite(first).all())
    note = "logits " + ("bit-identical" if agree else "DIFFER") + (" across loaders" if len(got) > 1 else "")
    if reference is not None:
        ref_ok = all(torch.equal(o.logits, reference) for o in got)
        note += ", " + ("equal to" if ref_ok else "NOT equal to") + " the intact checkpoint's"
        agree = agree and ref_ok
    return agree, note


def both_loaders(ck: Path, reference=None, load_tokenizer: bool = False, may_accept: tuple[str, ...] = ()) -> Result:
    """Both loaders on ``ck``; accepted results are right when their logits agree (and equal ``reference``)."""
    outcomes = [load_with(who, ck, load_tokenizer and who == "load_compressed") for who in LOADERS]
    right, note = same_logits(outcomes, reference)
    return Result(outcomes, accepted_right=right if any(not o.refused for o in outcomes) else None,
                  may_accept=may_accept, note=note)


# ---- checkpoint edits ------------------------------------------------------------------------------------------


def snapshot(path: Path) -> Any:
    """What is at ``path``: a file's bytes, a folder's ``{relative path: bytes}``, or None."""
    if path.is_file():
        return path.read_bytes()
    if path.is_dir():
        return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    return None


def truncate(name: str, keep: float = 0.5) -> Callable[[Path], None]:
    def go(ck: Path) -> None:
        data = (ck / name).read_bytes()
        (ck / name).write_bytes(data[: int(len(data) * keep)])

    return go


def write_text(name: str, text: str) -> Callable[[Path], None]:
    return lambda ck: (ck / name).write_text(text)


def edit_caldera_config(f: Callable[[dict], None]) -> Callable[[Path], None]:
    """An edit of ``caldera_config.json`` (the checkpoint tests' :func:`edit_config`)."""
    from tests.pipeline.checkpoint_helpers import edit_config

    return edit_config(f)


def edit_tensors(f: Callable[[dict], None]) -> Callable[[Path], None]:
    """An edit ``f`` of the stored tensors, saved as the writer saves them (one metadata key, ``format: pt``)."""
    def go(ck: Path) -> None:
        from safetensors.torch import load_file, save_file

        from caldera.pipeline.checkpoint import MODEL_FILE

        t = load_file(str(ck / MODEL_FILE))
        f(t)
        save_file(t, str(ck / MODEL_FILE), metadata={"format": "pt"})

    return go


def seal(ck: Path, how: str) -> None:
    """``"none"``: as edited; ``"checksums"``: checksums.json recomputed; ``"writer"``: what the writer would have
    sealed (fingerprints where the modules still decode, manifest, config.json and checksums recomputed);
    ``"manifest"``: the manifest, config.json and checksums recomputed."""
    from tests.pipeline.checkpoint.test_verify import reseal_as_writer
    from tests.pipeline.checkpoint_helpers import rechecksum, reseal

    {"none": lambda c: None, "checksums": rechecksum, "writer": reseal_as_writer, "manifest": reseal}[how](ck)


def edited_checkpoint(env: Env, name: str, source: str, edits: list[Callable[[Path], None]], how: str) -> Path:
    ck = env.scratch(name)
    shutil.copytree(getattr(env, source), ck)
    for e in edits:
        e(ck)
    seal(ck, how)
    return ck


def checkpoint_case(cls: str, case: str, names: tuple[str, ...], slug: str, source: str, edits: list, how: str,
                    *, same_message: bool = True, must_match_reference: bool = True, load_tokenizer: bool = False,
                    may_accept: tuple[str, ...] = ()) -> Case:
    """A case that edits a copy of checkpoint ``source`` (``"base"`` or ``"tied"``), seals it ``how``
    (:func:`seal`) and runs both loaders on it."""
    def run(env: Env) -> Result:
        ck = edited_checkpoint(env, slug, source, edits, how)
        ref = env.reference[source] if must_match_reference else None
        return both_loaders(ck, ref, load_tokenizer=load_tokenizer, may_accept=may_accept)

    return Case(cls, case, names, run, same_message)


# ---- class 1: compress --out --------------------------------------------------------------------------------------


def compress_argv(env: Env, out: Path, *extra: str, method: str = "quip#", hessians: Path | None = None) -> list:
    return ["compress", "--model", env.model, "--hessians", hessians or env.hessians, "--method", method,
            "--out", out, "--quiet", *extra]


def out_case(case: str, slug: str, prepare: Callable[[Env, Path], Path], extra: tuple[str, ...] = (),
             as_hessians: bool = False) -> Case:
    """``caldera compress --out X`` with X made by ``prepare(env, scratch folder)`` (and passed as ``--hessians``
    too when ``as_hessians``): right only when refused with X unchanged."""
    def run(env: Env) -> Result:
        target = prepare(env, env.scratch(slug))
        before = snapshot(target)
        out = run_cli(compress_argv(env, target, *extra, hessians=target if as_hessians else None))
        intact = snapshot(target) == before
        note = f"{target.name} " + ("unchanged" if intact else "CHANGED or deleted")
        return Result([out], intact=intact, accepted_right=False if not out.refused else None, note=note)

    return Case("1 compress --out", case, ("--out",), run)


def _a_file(env: Env, d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "notes.txt").write_text("keep me\n")
    return d / "notes.txt"


def _a_folder(env: Env, d: Path) -> Path:
    (d / "sub").mkdir(parents=True)
    (d / "notes.txt").write_text("keep me\n")
    (d / "sub" / "data.bin").write_bytes(bytes(range(256)))
    return d


def _the_hessians(env: Env, d: Path) -> Path:
    """A copy of the tiny model's Hessians folder (the other cases keep the original)."""
    shutil.copytree(env.hessians, d)
    return d


def _an_earlier_checkpoint(env: Env, d: Path, method: str = "quip#", *params: str) -> Path:
    """A checkpoint of the tiny model written by ``caldera compress --method METHOD --param ...`` (its per-layer
    folder beside it, as the command leaves it)."""
    out = run_cli(compress_argv(env, d, *[a for p in params for a in ("--param", p)], method=method))
    if out.refused:
        raise RuntimeError(f"the earlier checkpoint could not be written: {out.message}")
    return d


def overwrite_case(case: str, slug: str, method: str, *params: str) -> Case:
    """``caldera compress --method quip# --out X --overwrite`` onto the checkpoint an earlier ``caldera compress
    --method METHOD --param ...`` wrote at X: right only when accepted, X replaced by a new folder (another inode:
    the old one is kept until the new one is complete) holding a QuIP# checkpoint that loads. A refusal names no
    offending input (``--overwrite`` asks for exactly this), so it is a problem however it is worded."""
    def run(env: Env) -> Result:
        target = _an_earlier_checkpoint(env, env.scratch(slug), method, *params)
        before = (target.stat().st_ino, json.loads((target / "caldera_config.json").read_text())["method"])
        kept = snapshot(target)
        out = run_cli(compress_argv(env, target, "--overwrite"))
        if out.refused:
            intact = snapshot(target) == kept
            return Result([out], intact=intact, note="refused although --overwrite was given; the earlier checkpoint "
                          + ("is unchanged" if intact else "CHANGED or deleted"))
        after = (target.stat().st_ino, json.loads((target / "caldera_config.json").read_text())["method"])
        loaded = load_with("load_compressed", target)
        right = after[1] == "quip#" and after[0] != before[0] and not loaded.refused
        note = (f"method {before[1]} -> {after[1]}, " + ("a new folder" if after[0] != before[0] else "the SAME "
                "folder (written in place)") + "; " + ("the new checkpoint loads" if not loaded.refused else
                f"the new checkpoint does not load: {loaded.exc_type}: {first_line(loaded.message, env.root)}"))
        return Result([out], accepted_right=right, note=note)

    return Case("1 compress --out", case, (), run)


# ---- class 3 and 4: options ----------------------------------------------------------------------------------------


def option_case(cls: str, case: str, names: tuple[str, ...], argv: Callable[[Env], list]) -> Case:
    """A command line with an out-of-range option: right only when refused naming it."""
    def run(env: Env) -> Result:
        out = run_cli(argv(env))
        return Result([out], accepted_right=False if not out.refused else None,
                      note="" if out.refused else "an out-of-range value was accepted")

    return Case(cls, case, names, run)


def max_positions(env: Env) -> int:
    return int(json.loads((env.base / "config.json").read_text())["max_position_embeddings"])


def ppl(*extra: str) -> Callable[[Env], list]:
    return lambda env: ["eval", "ppl", "--model", env.base, "--quiet", *extra]


def report_argv(*extra: str) -> Callable[[Env], list]:
    return lambda env: ["matrix-report", "--quick", "--out", env.scratch("matrix_report"), *extra]


def low_bits_case(l_bits: int) -> Case:
    """``caldera compress --method caldera --param l_bits=L --param r_bits=4`` on the tiny model: refused naming
    ``l_bits``, or a checkpoint that records L and both loaders load with the same logits."""
    def run(env: Env) -> Result:
        ck = env.scratch(f"l_bits_{l_bits}")
        out = run_cli(compress_argv(env, ck, "--param", f"l_bits={l_bits}", "--param", "r_bits=4", "--param",
                                    "rank=4", "--param", "outer_iters=1", method="caldera"))
        if out.refused:
            return Result([out])
        recorded = json.loads((ck / "caldera_config.json").read_text()).get("method_config", {}).get("l_bits")
        loaded = both_loaders(ck)
        right = bool(loaded.accepted_right) and all(not o.refused for o in loaded.outcomes) and recorded == l_bits
        note = f"records l_bits={recorded}; {loaded.note}" if loaded.note else f"records l_bits={recorded}"
        return Result([out, *loaded.outcomes], accepted_right=right, note=note)

    return Case("4 factor bits", f"compress --method caldera --param l_bits={l_bits} --param r_bits=4 "
                f"(rank 4, 1 outer iteration)", ("l_bits",), run)


# ---- the cases --------------------------------------------------------------------------------------------------


def _tie_cases() -> list[Case]:
    import torch

    def distinct_lm_head(t: dict) -> None:
        emb = t["model.embed_tokens.weight"]
        t["lm_head.weight"] = emb + 0.5 * torch.randn(emb.shape, generator=torch.Generator().manual_seed(0))

    names = ("tie_word_embeddings", "tied", "lm_head")
    return [
        checkpoint_case("2 tie edits", "config.json tie_word_embeddings false while the tied map maps lm_head "
                        "(resealed)", names, "untie_config", "tied",
                        [edit_caldera_config(lambda c: c["base_config"].update(tie_word_embeddings=False))],
                        "manifest"),
        checkpoint_case("2 tie edits", "tied map: lm_head.weight -> model.norm.weight (a (64,) tensor; resealed)",
                        names, "tie_to_norm", "tied",
                        [edit_caldera_config(lambda c: c["tied"].update({"lm_head.weight": "model.norm.weight"}))],
                        "manifest"),
        checkpoint_case("2 tie edits", "lm_head.weight stored (embeddings + noise) while tied (resealed)", names,
                        "stored_lm_head", "tied", [edit_tensors(distinct_lm_head)], "manifest",
                        must_match_reference=False),
    ]


def _file_cases() -> list[Case]:
    cases = []
    for name, edit, what in (("model.safetensors", truncate("model.safetensors"), "truncated to half"),
                             ("tokenizer.json", truncate("tokenizer.json"), "truncated to half"),
                             ("config.json", write_text("config.json", "{garbage"), "replaced by '{garbage'"),
                             ("caldera_config.json", truncate("caldera_config.json"), "truncated to half")):
        # resealed: the manifest cannot be recomputed from a truncated tensor file or caldera config; the
        # checksums can
        how = "manifest" if name == "tokenizer.json" else "checksums"
        for sealed in ("none", how):
            # the model loader reads no tokenizer file: it may load a resealed checkpoint, with the intact logits
            may = ("from_pretrained",) if name == "tokenizer.json" else ()
            cases.append(checkpoint_case(
                "5 damaged files", f"{name} {what}, " + ("not resealed" if sealed == "none" else f"resealed ({how})"),
                (name,), f"{name}_{sealed}", "base", [edit], sealed, same_message=False, load_tokenizer=True,
                may_accept=may))
    cases.append(checkpoint_case("5 damaged files", "checksums.json truncated to half", ("checksums.json",),
                                 "checksums_cut", "base", [truncate("checksums.json")], "none", same_message=False,
                                 load_tokenizer=True))
    return cases


def _dtype_cases() -> list[Case]:
    import torch

    def cast(suffixes: tuple[str, ...], dtype) -> Callable[[dict], None]:
        def go(t: dict) -> None:
            for k in list(t):
                if k.endswith(suffixes):
                    t[k] = t[k].to(dtype)

        return go

    drop_bits = edit_caldera_config(lambda c: c.pop("bits", None))
    return [
        checkpoint_case("6 off-scheme dtypes", "every Q_codes stored as int64, `bits` deleted (resealed as the writer)",
                        ("Q_codes", "int64", "dtype"), "codes_int64", "base",
                        [drop_bits, edit_tensors(cast((".Q_codes",), torch.int64))], "writer"),
        checkpoint_case("6 off-scheme dtypes", "every S_U/S_V sign stored as float32, `bits` deleted (resealed as the "
                        "writer)", ("S_U", "S_V", "float32", "dtype", "signs"), "signs_float32", "base",
                        [drop_bits, edit_tensors(cast((".S_U", ".S_V"), torch.float32))], "writer"),
    ]


def cases() -> list[Case]:
    """Every case, in the table's order."""
    c1 = [
        out_case("X = an existing file", "file", _a_file),
        out_case("X = an existing file, with --overwrite", "file_ow", _a_file, ("--overwrite",)),
        out_case("X = an unrelated non-empty folder", "folder", _a_folder),
        out_case("X = an unrelated non-empty folder, with --overwrite", "folder_ow", _a_folder, ("--overwrite",)),
        out_case("X = the --hessians folder itself", "hess", _the_hessians, as_hessians=True),
        out_case("X = the --hessians folder itself, with --overwrite", "hess_ow", _the_hessians, ("--overwrite",),
                 as_hessians=True),
        out_case("X = an earlier checkpoint, without --overwrite", "earlier", _an_earlier_checkpoint),
        overwrite_case("X = an earlier QuIP# checkpoint (same method and parameters), with --overwrite (should "
                       "replace it)", "overwrite_same", "quip#"),
        overwrite_case("X = an earlier RTN 2-bit checkpoint (another method), with --overwrite (should replace it)",
                       "overwrite_other", "rtn", "bits=2"),
    ]
    c3 = [
        option_case("3 numeric options", "eval ppl --max-windows -1", ("--max-windows",), ppl("--max-windows", "-1")),
        option_case("3 numeric options", "eval ppl --max-windows 0", ("--max-windows",), ppl("--max-windows", "0")),
        option_case("3 numeric options", "eval ppl --seq-len 100000", ("--seq-len",), ppl("--seq-len", "100000")),
        option_case("3 numeric options", "eval ppl --seq-len max_position_embeddings + 1", ("--seq-len",),
                    lambda env: ppl("--seq-len", str(max_positions(env) + 1))(env)),
        option_case("3 numeric options", "eval ppl --threads -1", ("--threads",), ppl("--threads", "-1")),
        option_case("3 numeric options", "eval ppl --threads 0", ("--threads",), ppl("--threads", "0")),
        option_case("3 numeric options", "eval throughput --threads 0", ("--threads",),
                    lambda env: ["eval", "throughput", "--model", env.base, "--quiet", "--threads", "0"]),
        option_case("3 numeric options", "eval zeroshot --threads -1", ("--threads",),
                    lambda env: ["eval", "zeroshot", "--model", env.base, "--quiet", "--threads", "-1"]),
        option_case("3 numeric options", "matrix-report --quick --rank 0", ("--rank",), report_argv("--rank", "0")),
        option_case("3 numeric options", "matrix-report --quick --rank 10**9", ("--rank",),
                    report_argv("--rank", str(10**9))),
        option_case("3 numeric options", "matrix-report --quick --outer-iters 0", ("--outer-iters",),
                    report_argv("--outer-iters", "0")),
    ]
    return [*c1, *_tie_cases(), *c3, low_bits_case(2), low_bits_case(3), *_file_cases(), *_dtype_cases()]


# ---- the inputs and the record -------------------------------------------------------------------------------------


def build_env(root: Path) -> Env:
    """The tiny model, its Hessians (seeded random calibration tokens), its ``caldera compress`` QuIP# checkpoint
    and the tied checkpoint of the checkpoint tests (``dtype`` in its base config, resealed), with their logits."""
    import pytest

    from caldera import load_compressed
    from tests.helpers import tiny_hessians
    from tests.pipeline.checkpoint_helpers import reseal, save_tiny_checkpoint

    env = Env(root)
    with pytest.MonkeyPatch.context() as mp:
        env.model, env.hessians = tiny_hessians(root, mp, n_samples=2, seq_len=8)
    env.base = root / "base"
    out = run_cli(compress_argv(env, env.base))
    if out.refused:
        raise RuntimeError(f"caldera compress of the tiny model failed: {out.exc_type or out.code}: {out.message}")
    env.tied = save_tiny_checkpoint(root / "tied")[1]
    edit_caldera_config(lambda c: c["base_config"].update(dtype="float32"))(env.tied)
    reseal(env.tied)
    for name in ("base", "tied"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env.reference[name] = logits_of(load_compressed(getattr(env, name), load_tokenizer=False)[0])
    return env


def run_case(case: Case, env: Env) -> dict[str, Any]:
    """The case's row: class, case, what happened, verdict, and each outcome in full."""
    t0 = time.perf_counter()
    try:
        res = case.run(env)
    except Exception as e:  # noqa: BLE001 - a case that cannot even be set up is recorded, not hidden
        res = Result([Outcome("probe", True, exc_type=type(e).__name__, message=str(e))], note="the case's set-up "
                     "failed")
    return {"class": case.cls, "case": case.case, "happened": happened(res, env.root),
            "verdict": classify(res, case.names, case.same_message), "names": list(case.names),
            "seconds": round(time.perf_counter() - t0, 2),
            "outcomes": [{"who": o.who, "refused": o.refused, "code": o.code, "exc_type": o.exc_type,
                          "message": o.message.replace(str(env.root), "<tmp>")} for o in res.outcomes]}


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {v: sum(r["verdict"] == v for r in rows) for v in (REFUSED, CORRECT, PROBLEM)}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(record: dict[str, Any]) -> str:
    c = record["counts"]
    lines = ["# Reliability probe", "",
             f"Generated by `python benchmarks/reliability_probe.py` at commit {record['commit']} "
             f"({record['date']}, {record['seconds']:.0f} s; torch {record['torch']}, transformers "
             f"{record['transformers']}). Do not edit: re-run the script.", "",
             "Each row re-runs one class of problem an earlier probe found, on a tiny LLaMA, its Hessians and its "
             "`caldera compress` checkpoint (classes 1, 3-6) or the tied checkpoint of the checkpoint tests "
             "(class 2). Loaders: `caldera.load_compressed` and transformers' `AutoModelForCausalLM.from_pretrained`;"
             " logits compared bit for bit on two fixed sequences. Verdicts: **refused clearly** (every refusal "
             "names the offending option, file or key; the target unchanged; where asked, both loaders say the "
             "same), **correct** (accepted and the result checked right), **PROBLEM** (anything else).", "",
             f"{len(record['rows'])} cases: {c[REFUSED]} refused clearly, {c[CORRECT]} correct, "
             f"{c[PROBLEM]} PROBLEM.", "",
             "| class | case | what happened | verdict |", "|---|---|---|---|"]
    for r in record["rows"]:
        verdict = f"**{r['verdict']}**" if r["verdict"] == PROBLEM else r["verdict"]
        lines.append(f"| {r['class']} | {_cell(r['case'])} | {_cell(r['happened'])} | {verdict} |")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reliability_probe",
                    help="record path without suffix (writes OUT.md and OUT.json)")
    ap.add_argument("--keep", type=Path, help="build the inputs and cases in this new folder and keep it")
    args = ap.parse_args(argv)
    import torch
    import transformers

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.keep:
            args.keep.mkdir(parents=True)
            root = args.keep.resolve()
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="reliability_probe_")))
        env = build_env(root)
        rows = []
        for case in cases():
            rows.append(run_case(case, env))
            print(f"{rows[-1]['verdict']:16s} {case.cls}: {case.case} ({rows[-1]['seconds']} s)", flush=True)
    record = {"commit": _commit(), "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
              "torch": torch.__version__, "transformers": transformers.__version__,
              "seconds": round(time.perf_counter() - t0, 1), "counts": counts(rows), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(to_markdown(record))
    print(f"{record['counts']}; wrote {args.out}.md and .json ({record['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
