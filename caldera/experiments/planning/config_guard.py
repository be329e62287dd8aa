"""Plan-time checks of the workflow config that the JSON schema cannot express, the schema's own violations as
one line each, and a YAML loader that refuses duplicate keys.

:func:`schema_errors` states each JSON-schema violation in one line that starts with the offending key's full path
(``calibration.n_sample: unknown key; did you mean 'n_samples'?``), instead of jsonschema's dump of the schema and
the instance; :func:`unknown_param_errors` does the same for the method parameters the schema leaves open.

:func:`plan_time_errors` is called by :func:`caldera.experiments.planning.plan.check_config` (so ``snakemake -n``
refuses
these configs before any job runs); every message names the key's path and the fix. :func:`load_yaml_strict`
(:mod:`caldera.strict_yaml`) re-reads each ``--configfile`` (Snakemake's own loader lets the last of two equal keys
win silently).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from caldera.strict_yaml import load_yaml_strict

#: ``max_position_embeddings`` of each model's public Hugging Face config (keys of ``caldera.bits.MODEL_SHAPES``):
#: a sequence longer than this is beyond what the model was trained on (and its rotary cache).
MAX_POSITIONS = {
    "smollm2-135m": 8192,
    "gemma3-270m": 32768,
    "llama-2-7b": 4096,
    "llama-2-13b": 4096,
    "llama-2-70b": 4096,
    "llama-3-8b": 8192,
    "mistral-7b": 32768,
}

#: UTF-8 bytes of each offline text source's documents joined with ``"\n\n"`` (the sha256-pinned OLMo evaluation
#: asset, :data:`caldera.pipeline.text.TEXT_SOURCES`; measured with ``caldera.pipeline.text.load_documents``). A
#: token covers at least one byte apart from a BOS or separator token, so a source holds at most about this many
#: tokens: a request beyond it could only re-read the same text.
SOURCE_BYTES = {
    "lambada-books": 1_690_557,
    "wiki-squad": 636_652,
    "coqa-stories": 749_575,
}

#: ``throughput.prompt`` when the config names none (:class:`caldera.experiments.planning.settings.ThroughputSettings`)
DEFAULT_PROMPT = "The capital of France is"


def check_config_files(paths: list[str | Path]) -> None:
    """Re-read each config file strictly (duplicate keys); raises ``ValueError`` naming the file and key."""
    for p in paths:
        load_yaml_strict(p)


def did_you_mean(word: Any, allowed: Any) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``allowed`` to ``word`` (difflib), else ``""``."""
    close = difflib.get_close_matches(str(word), sorted(str(a) for a in allowed), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def key_path(parts: Any) -> str:
    """``methods.caldera.params`` / ``extra_methods[0].params`` from a sequence of keys and list indices."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _schema(schema_file: str | Path | dict[str, Any]) -> dict[str, Any]:
    return schema_file if isinstance(schema_file, dict) else load_yaml_strict(schema_file)


def _yaml_reads_as_number(text: str) -> bool:
    """Whether YAML 1.1 (PyYAML, which Snakemake and :mod:`caldera.strict_yaml` use) reads ``text``, unquoted, as
    an integer or a float."""
    import yaml

    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    return tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _yaml_float(text: str) -> str:
    """``text`` (a number in exponent form) written so that YAML 1.1 reads it as a float: a dot in the mantissa
    and a signed exponent (``1e9`` -> ``1.0e+9``, ``1e-4`` -> ``1.0e-4``)."""
    m = re.fullmatch(r"\s*([-+]?)(\d*)(?:\.(\d*))?[eE]([-+]?)(\d+)\s*", text)
    if m:
        sign, whole, frac, esign, exp = m.groups()
        out = f"{sign}{whole or '0'}.{frac or '0'}e{esign or '+'}{exp}"
        if _yaml_reads_as_number(out):
            return out
    return repr(float(text))


def _number_text_error(where: str, key: str, text: str) -> str | None:
    """The message for the string ``text`` that Python reads as a number, at ``where``; None for a non-finite one
    (the schema's message stands)."""
    from decimal import Decimal

    if not _yaml_reads_as_number(text):  # quoted or not, YAML reads it as a string: say how to write a number
        d = Decimal(text.strip().replace("_", ""))
        if not d.is_finite():
            return None
        as_float = _yaml_float(text)
        how = (f"{key}: {int(d)} (or {key}: {as_float} where a float is meant)" if d == d.to_integral_value()
               else f"{key}: {as_float}")
        return (f"{where}: {text!r} is read as text (YAML reads a number in exponent form only with a dot and a "
                f"signed exponent, so {text} is a string, as a quoted number is); write {how}")
    return f"{where}: {text!r} is a quoted number; write it without quotes ({key}: {text})"


def quoted_number_errors(config: dict[str, Any], schema_file: str | Path | dict[str, Any]) -> list[str]:
    """Schema violations whose value is a string that reads as a number, each naming the key's path and how to write
    the number: ``bits: "2"`` (quoted) ``... write it without quotes``; ``n_windows: 1e9`` (YAML 1.1 reads an
    exponent without a dot and a sign as a string, quoted or not) ``... write n_windows: 1000000000``. The schema's
    own message ("'2' is not valid under any of the given schemas") says neither."""
    import jsonschema

    schema = _schema(schema_file)
    out = []
    for err in jsonschema.Draft202012Validator(schema).iter_errors(config):
        bad = [e for e in [err, *err.context] if isinstance(e.instance, str) and "propertyNames" not in e.schema_path]
        for e in bad[:1]:
            try:
                float(e.instance)
            except ValueError:
                continue
            where = key_path(e.absolute_path)
            key = str(e.absolute_path[-1]) if e.absolute_path else where
            msg = _number_text_error(where, key, e.instance)
            if msg:
                out.append(msg)
    return sorted(set(out))


_JSON_TYPES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}


def _short(x: Any, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[: n - 4] + " ..."


def _got(x: Any) -> str:
    kind = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(x), type(x).__name__)
    return kind if isinstance(x, (dict, list)) else f"{kind} {_short(x)}"


def _expected(e: Any) -> str:
    """What the failed keyword of ``e`` accepts, in words (the jsonschema message otherwise)."""
    v = e.validator_value
    if e.validator == "type":
        return " or ".join(_JSON_TYPES.get(t, t) for t in ([v] if isinstance(v, str) else v))
    if e.validator == "enum":
        return f"one of {v}"
    if e.validator == "const":
        return repr(v)
    return e.message


def _describe(e: Any) -> tuple[list[str], list[tuple[tuple, str]]]:
    """One line per problem of jsonschema error ``e``, each starting with the offending key's full path; and the
    ``(path, key)`` pairs that an unknown key's suggestion names (their "missing" error then says nothing new)."""
    path = tuple(e.absolute_path)
    where = key_path(path) or "(top level)"
    if e.validator == "additionalProperties" and e.validator_value is False and isinstance(e.instance, dict):
        props = e.schema.get("properties", {})
        pats = e.schema.get("patternProperties", {})
        lines, suggested = [], []
        for k in e.instance:
            if k in props or any(re.search(p, str(k)) for p in pats):
                continue
            hint = did_you_mean(k, props)
            if hint:
                suggested.append((path, hint.split("'")[1]))
            lines.append(f"{key_path((*path, k))}: unknown key{hint} (allowed here: {', '.join(sorted(props))})")
        return lines, suggested
    if e.validator == "required":
        missing = [k for k in e.validator_value if k not in e.instance]
        return [f"{key_path((*path, k))}: required key missing" for k in missing], []
    if "propertyNames" in e.schema_path:
        return [f"{key_path((*path, e.instance))}: key not allowed here; expected {_expected(e)}"
                + did_you_mean(e.instance, e.validator_value if e.validator == "enum" else [])], []
    if e.validator in ("type", "enum", "const"):
        near = e.validator == "enum" and isinstance(e.instance, str)
        hint = did_you_mean(e.instance, e.validator_value) if near else ""
        return [f"{where}: expected {_expected(e)}, got {_got(e.instance)}{hint}"], []
    if e.validator in ("oneOf", "anyOf") and e.context:
        deeper = [c for c in e.context if len(c.absolute_path) > len(path)]
        if deeper:  # the value has the shape of one alternative: what is wrong inside it
            import jsonschema

            return _describe(jsonschema.exceptions.best_match(deeper))
        alts = list(dict.fromkeys(_expected(c) for c in e.context))
        return [f"{where}: expected {' or '.join(alts)}, got {_got(e.instance)}"], []
    msg = e.message if len(e.message) <= 160 else e.message[:156] + " ..."
    return [f"{where}: {msg}"], []


def whole_float_errors(config: dict[str, Any], schema_file: str | Path | dict[str, Any]) -> list[str]:
    """Integers written as floats (``layers_per_job: 30.0``) where the schema wants an integer, each as ``path:
    30.0 is a float; write the integer 30``: JSON Schema counts 30.0 as an integer, and the value would silently
    become one."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool))
    strict = jsonschema.validators.extend(base, type_checker=checker)
    out = []
    for err in strict(_schema(schema_file)).iter_errors(config):
        for e in [err, *err.context]:
            want = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
            if (e.validator == "type" and "integer" in want and isinstance(e.instance, float)
                    and e.instance.is_integer()):
                out.append(f"{key_path(e.absolute_path)}: {e.instance!r} is a float; write the integer "
                           f"{int(e.instance)}")
    return sorted(set(out))


def schema_errors(config: dict[str, Any], schema_file: str | Path | dict[str, Any]) -> list[str]:
    """Every violation of the workflow's JSON schema, one line each, starting with the key's full path:

    * an unknown key: ``methods.caldera.parms: unknown key; did you mean 'params'? (allowed here: ...)``
      (difflib's closest allowed key; the missing key it suggests is then not reported again);
    * a wrong value: ``calibration.seed: expected an integer, got a string 'x'`` / ``expected one of [...]``;
    * a quoted number: :func:`quoted_number_errors`; a whole number written as a float where an integer is meant:
      :func:`whole_float_errors`; anything else: the path and jsonschema's one-line message.

    Unknown keys come first (a typo is the usual cause of the rest). Empty when ``config`` is valid. The schema's
    defaults are not filled in here (``snakemake.utils.validate`` does that)."""
    import jsonschema

    schema = _schema(schema_file)
    quoted = quoted_number_errors(config, schema) + whole_float_errors(config, schema)
    if quoted:
        return quoted
    unknown: list[str] = []
    other: list[tuple[tuple, str, list[str]]] = []
    suggested: set[tuple[tuple, str]] = set()
    for e in jsonschema.Draft202012Validator(schema).iter_errors(config):
        lines, sug = _describe(e)
        suggested.update(sug)
        if e.validator == "additionalProperties":
            unknown += lines
        elif e.validator == "required":
            missing = [k for k in e.validator_value if k not in e.instance]
            other += [(tuple(e.absolute_path), k, [ln]) for k, ln in zip(missing, lines)]
        else:
            other.append(((), "", lines))
    rest = [ln for p, k, lines in other if (p, k) not in suggested for ln in lines]
    return list(dict.fromkeys(unknown + rest))


def unknown_param_errors(config: dict[str, Any]) -> list[str]:
    """Parameters that the method they are given to does not have, one line each starting with the key's path
    (``methods.caldera.params.outer_iter: unknown parameter of method 'caldera'; did you mean 'outer_iters'?``):
    ``methods.*.params`` / ``params_by_b_lr``, ``extra_methods[i].params``, ``selection.base`` / ``candidates``.
    The schema leaves these mappings open (each method has its own fields, :mod:`caldera.methods`)."""
    import dataclasses

    from caldera.methods import get_method

    def check(method: str, params: Any, where: str) -> list[str]:
        try:
            cls = get_method(method).config_cls
        except ValueError:
            return []  # an unknown method: named by check_config
        known = {f.name for f in dataclasses.fields(cls)} | ({"preset"} if hasattr(cls, "preset") else set())
        return [f"{where}.{k}: unknown parameter of method {method!r}{did_you_mean(k, known)} "
                f"(accepted: {', '.join(sorted(known))})" for k in (params or {}) if k not in known]

    out: list[str] = []
    for m, spec in config.get("methods", {}).items():
        out += check(m, spec.get("params"), f"methods.{m}.params")
        for b, p in (spec.get("params_by_b_lr") or {}).items():
            out += check(m, p, f"methods.{m}.params_by_b_lr.{b}")
    for i, e in enumerate(config.get("extra_methods") or []):
        out += check(e["method"], e.get("params"), f"extra_methods[{i}].params")
    sel = config.get("selection") or {}
    out += check("caldera", sel.get("base"), "selection.base")
    for name, cand in (sel.get("candidates") or {}).items():
        out += check("caldera", cand, f"selection.candidates.{name}")
    return out


def _non_finite(node: Any, path: str, out: list[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _non_finite(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _non_finite(v, f"{path}[{i}]", out)
    elif isinstance(node, float) and not math.isfinite(node):
        out.append(non_finite_error(path, node))


def non_finite_error(path: str, value: float) -> str:
    """The message for a number that is not finite (``.inf``, ``.nan``) at key ``path``."""
    return f"{path}: {value} is not a finite number; write a finite value (e.g. 1.0e-4)"


#: the largest seed a config may give (every RNG the suite seeds takes 31 bits: torch, numpy, Python's random)
MAX_SEED = 2**31 - 1


def _seed_errors(node: Any, path: str, out: list[str], offset: int) -> None:
    """Seeds (keys ``seed`` / ``seeds`` / ``seed_offset`` anywhere) beyond :data:`MAX_SEED`; the compression seeds
    (``methods``, ``extra_methods``, ``replicates``) once the config's ``seed_offset`` is added to them."""
    if isinstance(node, dict):
        for k, v in node.items():
            p = f"{path}.{k}" if path else str(k)
            vals = v if k == "seeds" and isinstance(v, list) else [v] if k in ("seed", "seed_offset") else None
            if vals is not None:
                for x in vals:
                    compression = p.startswith(("replicates", "methods", "extra_methods"))
                    added = offset if compression and k != "seed_offset" else 0
                    if isinstance(x, int) and not isinstance(x, bool) and x + added > MAX_SEED:
                        out.append(f"{p}: {x} is beyond the largest seed (2**31 − 1 = {MAX_SEED}"
                                   + (f", with seed_offset {offset} added" if added else "")
                                   + "); pick a smaller seed")
            else:
                _seed_errors(v, p, out, offset)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _seed_errors(v, f"{path}[{i}]", out, offset)


def _write_probe_error(folder: Path) -> OSError | None:
    """Why a file cannot be created in ``folder`` (a temporary file is created there and removed), else None. A
    real write, not ``os.access``: root passes ``os.access`` for folders it still cannot write (``/proc``, ``/sys``,
    a read-only bind mount)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".caldera-write-probe-", dir=folder)
    except OSError as e:
        return e
    os.close(fd)
    os.unlink(name)
    return None


def _writable_errors(config: dict[str, Any]) -> list[str]:
    """Output folders (``tables_dir``) that cannot be written: a file cannot be created in the folder, or in its
    nearest existing parent."""
    out = []
    for key in ("tables_dir",):
        if not config.get(key):
            continue
        p = Path(config[key]).expanduser().absolute()
        q = p
        while not q.exists() and q != q.parent:
            q = q.parent
        if not q.is_dir():
            out.append(f"{key}: {config[key]!r} cannot be a folder ({q} is a file); choose another folder")
        elif (e := _write_probe_error(q)) is not None:
            out.append(f"{key}: {config[key]!r} is not writable here (a file cannot be created in {q}: "
                       f"{e.strerror or e}); choose a folder you can write")
    return out


def _used_models(config: dict[str, Any]) -> list[str]:
    return sorted(set(config["stand_ins"].values()) & set(config["models"]))


def _selection_errors(config: dict[str, Any]) -> list[str]:
    from caldera.experiments.planning.variants import method_config

    sel, models, errors = config["selection"], config["models"], []
    used = set(_used_models(config))
    run_layers = config.get("layers")
    for m, layers in sel["layers"].items():
        if m not in models:
            errors.append(f"selection.layers.{m}: not a key of models ({sorted(models)}); name a stand-in")
            continue
        n = int(models[m]["num_layers"])
        bad = [x for x in layers if not 0 <= int(x) < n]
        if bad:
            errors.append(f"selection.layers.{m}: {bad} out of range ({n} decoder layers: 0..{n - 1})")
        elif run_layers is not None and (missing := [x for x in layers if x not in run_layers]):
            errors.append(f"selection.layers.{m}: {missing} have no Hessians (not in layers {run_layers}); "
                          "pick layers among them")  # fmt: skip
    if not any(m in used for m in sel["layers"]):
        errors.append(f"selection.layers: none of {sorted(sel['layers'])} is a stand-in of this run "
                      f"({sorted(used)}); the sweep would measure nothing")  # fmt: skip
    base = sel.get("base") or {}
    iters = {"outer_iters": int(sel["iters"][0]), "inner_iters": int(sel["iters"][1])}
    try:
        method_config("caldera", {"rank": 8, **base, **iters}, "selection.base")
    except ValueError as e:
        errors.append(str(e))
        return errors
    for name, cand in sel["candidates"].items():
        try:
            method_config("caldera", {"rank": 8, **base, **cand, **iters}, f"selection.candidates.{name}")
        except ValueError as e:
            errors.append(str(e))
    return errors


def _figure_rank_errors(config: dict[str, Any]) -> list[str]:
    """Each ``figures.paper_ranks`` entry must map to a rank of the figures' model (``mapped_rank`` for every
    factor precision the figures use)."""
    from caldera.algorithm.config import PRESETS, CalderaConfig
    from caldera.experiments.planning.variants import mapped_rank

    fc, errors = config["figures"], []
    if fc["model"] not in config["models"] or config["stand_ins"].get(fc["paper_model"]) != fc["model"]:
        return []  # check_config names these
    bits = sorted({CalderaConfig.preset(a).l_bits for a in fc["ablations"] if a in PRESETS} | {16})
    for p in fc["paper_ranks"]:
        for b in bits:
            try:
                mapped_rank(config, fc["paper_model"], int(p), b)
            except ValueError as e:
                errors.append(f"figures.paper_ranks: {p} cannot be mapped to models.{fc['model']} ({b}-bit "
                              f"factors): {e}; use paper ranks a {fc['paper_model']} matrix can have")  # fmt: skip
                break
    return errors


def device_errors(config: dict[str, Any], *, local: bool, cuda_devices: Callable[[], int]) -> list[str]:
    """``device: cuda`` when the jobs run on this machine (``local``: no cluster executor) and it has no CUDA
    device (``cuda_devices()``: how many it has; called only when the config asks for one). A cluster run is not
    checked: its jobs run on other machines than the one that plans them."""
    dev = str(config.get("device", "auto"))
    if not local or not dev.startswith("cuda") or cuda_devices() > 0:
        return []
    return [f"device: {dev!r}, but this machine has no CUDA device (torch.cuda.is_available() is false) and the "
            "jobs run here; use device: auto (the GPU when there is one, else the CPU) or cpu, or run through a "
            "cluster profile (--profile workflow/profiles/slurm)"]


def plan_time_errors(config: dict[str, Any]) -> list[str]:
    """Every problem of ``config`` (after the JSON schema) that this module checks, each naming its key path."""
    from caldera.experiments.planning.variants import RHTFT_TABLES, ZERO_SHOT_TABLES
    from caldera.paper_reference import load_reference_table
    from caldera.pipeline.assets import MODEL_ASSETS
    from caldera.pipeline.sources import looks_like_path

    errors: list[str] = []
    _non_finite(config, "", errors)
    offset = config.get("seed_offset") or 0
    _seed_errors(config, "", errors, offset if isinstance(offset, int) else 0)
    errors += _writable_errors(config)
    models = config["models"]
    for m, spec in models.items():
        src = str(spec["source"])
        if src.startswith("asset:") and src.split(":", 1)[1] not in MODEL_ASSETS:
            errors.append(f"models.{m}.source: {src!r} is not an offline asset; accepted: "
                          f"{sorted('asset:' + k for k in MODEL_ASSETS)} (or a hub id / local folder)")  # fmt: skip
        elif not src.startswith("asset:") and not Path(src).expanduser().is_dir() and looks_like_path(src):
            errors.append(f"models.{m}.source: {src!r} is no folder here ({Path(src).expanduser().absolute()}) and "
                          "cannot be a hub id (org/name); check the path")
    local = config.get("local_data")
    if local is not None and not (Path(local) / "text").is_dir():
        # paper_local --out DIR writes DIR/data (this key's folder) beside DIR/models
        errors.append(f"local_data: {local!r} is not a folder of local datasets; write it with "
                      f"`python -m caldera.experiments.jobs.paper_local --out {Path(local).parent}` (it writes "
                      f"{Path(local).parent / 'data'} and {Path(local).parent / 'models'}; or local_data: null: the "
                      "hub)")
    tasks = config["eval"]["zeroshot"]["tasks"]
    norm = [t if t.startswith("caldera_") else f"caldera_{t}" for t in tasks]
    dup = sorted({t for t, n in zip(tasks, norm, strict=True) if norm.count(n) > 1})
    if dup:
        errors.append(f"eval.zeroshot.tasks: {dup} name the same task more than once; list each task once")
    keep = config.get("paper_ranks")
    if keep is not None:
        tables = {RHTFT_TABLES.get(t, t) for t in config["tables"]} & set(ZERO_SHOT_TABLES)
        have = sorted({int(r["rank"]) for t in tables for r in load_reference_table(t)
                       if r.get("rank") not in (None, "") and int(r["rank"]) > 0})  # fmt: skip
        bad = [p for p in keep if p not in have]
        if bad:
            errors.append(f"paper_ranks: {bad} are not ranks of the rows of tables {sorted(tables)} (those rows "
                          f"would all be dropped); accepted: {have}, or null for every row")  # fmt: skip
    limits = {m: MAX_POSITIONS[models[m]["shapes"]] for m in _used_models(config)
              if models[m]["shapes"] in MAX_POSITIONS}  # fmt: skip
    lim_model = min(limits, key=limits.get) if limits else None  # the model with the fewest positions
    if lim_model is not None:
        lim = limits[lim_model]
        lengths = {"calibration.seq_len": config["calibration"]["seq_len"]}
        lengths.update({f"eval.ppl.{c}.seq_len": s["seq_len"] for c, s in config["eval"]["ppl"].items()})
        if config.get("rht_ft"):
            lengths["rht_ft.seq_len"] = config["rht_ft"]["seq_len"]
        for t, s in ((config.get("lora_ft") or {}).get("tasks") or {}).items():
            lengths[f"lora_ft.tasks.{t}.block_size"] = s["block_size"]
        for key, n in lengths.items():
            if isinstance(n, int) and n > lim:
                errors.append(f"{key}: {n} tokens is longer than models.{lim_model} takes ({lim} positions); "
                              f"use at most {lim}")  # fmt: skip
    errors += _size_errors(config, lim_model, limits.get(lim_model))
    if config.get("selection"):
        errors += _selection_errors(config)
    errors += _figure_rank_errors(config)
    return errors


def _size_errors(config: dict[str, Any], lim_model: str | None, lim: int | None) -> list[str]:
    """Token counts beyond what the data holds (:data:`SOURCE_BYTES`: calibration rows, RHT-FT sequences,
    perplexity windows) or what the models take (``lim`` positions of ``lim_model``, the run's model with the fewest
    :data:`MAX_POSITIONS`; None: unknown): the throughput prompt plus its generated tokens."""
    errors: list[str] = []

    def request(key: str, count: Any, seq_len: Any, source: Any, what: str) -> None:
        held = SOURCE_BYTES.get(source) if isinstance(source, str) else None
        if held is None or not isinstance(count, int) or not isinstance(seq_len, int) or seq_len < 2:
            return
        if count * (seq_len - 1) > held:
            most = max(1, held // (seq_len - 1))
            errors.append(f"{key}: {count} {what} of {seq_len} tokens is more text than source {source!r} holds "
                          f"({held:,} bytes, at most ~{held:,} tokens); use at most {most} (the job counts the "
                          "exact tokens)")

    cal = config["calibration"]
    request("calibration.n_samples", cal.get("n_samples"), cal.get("seq_len"), cal.get("source"), "sequences")
    ft = config.get("rht_ft")
    if ft:
        request("rht_ft.n_samples", ft.get("n_samples"), ft.get("seq_len"), cal.get("source"), "sequences")
    for c, spec in config["eval"]["ppl"].items():
        request(f"eval.ppl.{c}.n_windows", spec.get("n_windows"), spec.get("seq_len"), spec.get("source"),
                "windows")
    tp = config.get("throughput")
    if tp and lim is not None:
        new = tp.get("new_tokens")
        prompt_tokens = 1 + len(str(tp.get("prompt", DEFAULT_PROMPT)).encode())  # at least the prompt's token ids
        if isinstance(new, int) and prompt_tokens + new > lim:
            errors.append(f"throughput.new_tokens: {new} generated tokens after the prompt (up to {prompt_tokens} "
                          f"tokens) exceed the {lim} positions models.{lim_model} takes; use at most "
                          f"{lim - prompt_tokens}")
    return errors
