"""``caldera compress``: a model compressed with a registered method, then assembled."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from caldera.cli.common import (
    CLIError,
    _example,
    _report,
    guard_output,
    int_option,
    is_checkpoint_dir,
    is_layer_dir,
    load_dense_model,
    local_input,
    model_config,
    output_lock,
    param_types,
    parse_layers,
    parse_params,
    require_path,
    resolve_model_path,
)


def cmd_compress(args: argparse.Namespace) -> int:
    from caldera.methods import get_method

    try:  # this package's methods and the entry points of group caldera.methods; parameters before the model loads
        spec = get_method(args.method)
        params = parse_params(args.param, args.preset, param_types(spec.config_cls))
        config = spec.make_config(params)
    except (ValueError, TypeError) as e:
        raise CLIError(f"--method {args.method}: {e}") from None
    rank = getattr(config, "rank", None)
    if isinstance(rank, int) and args.ft_rank > rank:
        raise CLIError(f"--ft-rank {args.ft_rank} is above the method's rank {rank}: the trainable components are "
                       f"the leading ones of L R; use --ft-rank <= {rank}")
    layers = parse_layers(args.layers)
    args.model = hessians_model(args.model, args.hessians)
    check_model_shapes(args, config, layers)
    out, work = Path(args.out), _work_dir(args)
    inputs = {"--hessians folder": args.hessians, "--model": local_input(args.model)}
    if args.allocation:
        require_path(args.allocation, "--allocation", "file", "pass the allocation.json an earlier run wrote, or "
                     "leave --allocation out to make one")
    guard_output(out, option="--out", kind="caldera checkpoint", same_kind=is_checkpoint_dir,
                 inputs={**inputs, "--allocation file": args.allocation, "per-layer folder (--work-dir)": work},
                 overwrite=args.overwrite or args.no_assemble)  # --no-assemble writes no checkpoint
    guard_output(work, option="--work-dir" if args.work_dir else f"the per-layer folder {work.name} (--work-dir)",
                 kind="per-layer folder of caldera compress", same_kind=is_layer_dir,
                 inputs={**inputs, "--out": out}, resumable=True)
    with output_lock(out, "compress"):
        aside = _set_aside_other_layers(args, params, work)
        try:
            code = _compress(args, params, layers)
        except BaseException:
            if aside is not None:  # the replacement failed: the earlier run's layers come back as they were
                if work.exists():
                    shutil.rmtree(work)  # this run's own partial layers
                aside.rename(work)
            raise
        if aside is not None:
            shutil.rmtree(aside)  # the new checkpoint is complete: the earlier run's layers are replaced
        return code


def _set_aside_other_layers(args: argparse.Namespace, params: dict[str, Any], work: Path) -> Path | None:
    """With ``--overwrite`` and the default per-layer folder (``OUT.layers``, which the earlier run wrote beside its
    checkpoint): when its layer files were computed with another method, config or ``--ft-rank``, it is renamed
    to ``OUT.layers.replaced`` (returned) so that this run computes afresh; the caller removes it once the new
    checkpoint is complete. None otherwise (no ``--overwrite``, an explicit ``--work-dir``, which is never
    replaced, or layer files this run resumes from)."""
    import json

    from caldera.pipeline.compress import FORMAT, recorded_method_config

    if not args.overwrite or args.work_dir or not work.is_dir() or not is_layer_dir(work):
        return None
    want = recorded_method_config(args.method, params)
    for js in sorted(work.glob("layer_[0-9][0-9][0-9].json")):
        try:
            info = json.loads(js.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            continue
        if (info.get("method"), info.get("method_config"), info.get("ft_rank", 0)) != (args.method, want,
                                                                                       args.ft_rank):
            aside = work.with_name(work.name + ".replaced")
            if aside.exists():
                raise CLIError(f"--overwrite: {aside} is left from an earlier replacement that did not finish; "
                               "remove it, then run again")
            work.rename(aside)
            return aside
    return None


def hessians_model(model: str | None, hessians: str) -> str:
    """The model to compress: the one the ``--hessians`` folder records (:func:`caldera.pipeline.hessians.
    recorded_model`) when ``--model`` is not given; ``--model`` when it is the same model or the folder records
    none. A missing folder, a folder that records no model without ``--model``, and a ``--model`` other than the
    recorded one are each one :class:`CLIError` line naming both and the fix."""
    from caldera.pipeline.hessian_files import recorded_model, same_model

    folder = require_path(hessians, "--hessians", "folder", f"run `caldera hessians --out {hessians}` first")
    rec = recorded_model(folder)
    if model is None:
        if rec is None:
            raise CLIError(f"--hessians {hessians} records no model (no hessians.json, and no layer file names one); "
                           "pass --model, the model these Hessians were collected for")
        return rec[0]
    if rec is not None and not same_model(model, rec[0]):
        raise CLIError(f"--model {model}, but the Hessians in {hessians} were collected for {rec[0]} ({rec[1]}); "
                       f"leave --model out to compress {rec[0]}, or collect {model}'s Hessians first "
                       f"(`caldera hessians --model {model} --out NEW`)")
    return model


def check_model_shapes(args: argparse.Namespace, config: Any, layers: list[int] | None) -> None:
    """``--layers`` among the model's decoder layers and the method's ranks within every matrix it would compress
    (:meth:`~caldera.methods.registry.MethodSpec.check_shapes`), on the architecture ``config.json`` describes
    (built on the meta device: no weight is read), before any output is written or the model loads. Nothing is
    checked here for a hub model or a model that cannot be resolved or built (its load checks or says why)."""
    import torch
    from transformers import AutoModelForCausalLM

    from caldera.methods import get_method
    from caldera.pipeline.compress import matrix_shapes
    from caldera.pipeline.layer_runner import decoder_layers
    from caldera.pipeline.models import is_checkpoint

    try:
        path = resolve_model_path(args.model)
    except CLIError:
        return
    model_cfg = model_config(path) if not is_checkpoint(path) else None
    if model_cfg is None:
        return
    try:
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(model_cfg)
        n_layers = len(decoder_layers(meta))
    except Exception:  # noqa: BLE001 - an architecture this check cannot build: the load reports it
        return
    bad = [x for x in layers or [] if not 0 <= x < n_layers]
    if bad:
        raise CLIError(f"--layers {args.layers}: layers {bad} are not among the model's {n_layers} decoder layers "
                       f"(0-{n_layers - 1})")
    try:
        get_method(args.method).check_shapes(config, matrix_shapes(meta, layers))
    except ValueError as e:
        raise CLIError(f"--method {args.method}: {e}") from None


def _work_dir(args: argparse.Namespace) -> Path:
    """The per-layer folder: ``--work-dir``, else ``OUT.layers`` beside the checkpoint."""
    out = Path(args.out)
    return Path(args.work_dir) if args.work_dir else out.with_name(out.name + ".layers")


def _allocation(args: argparse.Namespace, model: Any, params: dict[str, Any], work: Path) -> dict[str, Any] | None:
    """Per-matrix settings of a method with a model-level step (None for the others): ``--allocation FILE``,
    else ``<work>/allocation.json`` when it was made for this method and config, else profiled over every
    decoder layer (whatever ``--layers`` says: the choice is the whole model's) and written there
    (:func:`caldera.pipeline.allocate.model_allocation`)."""
    from caldera.pipeline.allocate import model_allocation

    return model_allocation(model, args.hessians, args.method, params, work, allocation=args.allocation,
                            progress=not args.quiet, hessian_expect={"model": args.model}, option="--allocation")


def _compress(args: argparse.Namespace, params: dict[str, Any], layers: list[int] | None) -> int:
    """``cmd_compress`` under the output lock: compress the layers, then assemble the checkpoint."""
    from caldera.pipeline.checkpoint import base_generation_config, checkpoint_provenance
    from caldera.pipeline.compress import assemble_checkpoint, compress_model

    source = resolve_model_path(args.model)
    model, tok = load_dense_model(args.model, source)
    out, work = Path(args.out), _work_dir(args)
    try:
        summary = compress_model(
            model,
            args.hessians,
            args.method,
            params,
            work,
            layers=layers,
            progress=not args.quiet,
            ft_rank=args.ft_rank,
            overrides=_allocation(args, model, params, work),
            hessian_expect={"model": args.model},
        )
    except FileNotFoundError as e:
        raise CLIError(str(e)) from None
    result: dict[str, Any] = {
        "layer_dir": str(work),
        "computed": summary["computed"],
        "skipped": summary["skipped"],
        "bits": summary["bits"],
        "wall_s": summary["wall_s"],
    }
    if not args.no_assemble:
        try:
            ck, info = assemble_checkpoint(
                model, work, out, args.method, params, tokenizer=tok, allow_partial=args.allow_partial,
                extra={"provenance": checkpoint_provenance(args.model, source, args.hessians)},
                generation_config=base_generation_config(source),
            )
        except ValueError as e:
            if "not compressed" not in str(e):
                raise
            _report(args, {**result, "checkpoint": None}, [])
            raise CLIError(
                f"no checkpoint written: {e}. The layers computed now are kept in {work} (resumable). Compress the "
                "others into the same --out, pass --allow-partial to build the checkpoint with them dense, or "
                "--no-assemble to only write per-layer files (parallel jobs)"
            ) from None
        result["checkpoint"] = str(ck)
        result["dense_layers"] = info["dense_layers"]
        result["bits"] = info["bits"]
    bits = result["bits"] if isinstance(result["bits"], dict) else {}
    avg = bits.get("average_bits")
    lines = [f"{len(result['computed'])} layers compressed, {len(result['skipped'])} already there ({work})"]
    if result.get("checkpoint"):
        lines.append(f"checkpoint {result['checkpoint']}" + (f": {avg:.3f} bits per weight" if avg else "")
                     + (f", decoder layers kept dense: {result['dense_layers']}" if result["dense_layers"] else ""))
    return _report(args, result, lines + ["details: `caldera info CKPT` (or --json)"])


def methods_help(example: str) -> str:
    """``example`` plus each registered method's parameters with their defaults (and its presets)."""
    import dataclasses
    import textwrap

    from caldera.methods import get_method, registered_methods

    lines = [example, "", "methods and their parameters (--param KEY=VALUE; default shown):"]
    for name in registered_methods(strict=False):
        spec = get_method(name)
        fields = " ".join(f"{f.name}={f.default}" for f in dataclasses.fields(spec.config_cls)
                          if f.default is not dataclasses.MISSING)
        presets = ""
        if name == "caldera":
            from caldera.algorithm.config import PRESETS

            presets = f"\n      presets (--preset): {', '.join(sorted(PRESETS))}"
        lines.append(f"  {name}\n" + textwrap.fill(fields, 100, initial_indent=" " * 6, subsequent_indent=" " * 6)
                     + presets)
    return "\n".join(lines)



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "compress",
        help="compress a model with a registered method",
        description="Decompose every linear layer (per-layer files, resumable, --layers for "
        "parallel jobs), then assemble the compressed checkpoint folder. Every method, preset, parameter and "
        "rank is checked against every matrix shape before any work.",
        formatter_class=raw,
    )
    p.lazy_epilog = lambda: methods_help(_example(
        "caldera compress --hessians H --method caldera --preset paper --param rank=64 --out CKPT",
        "caldera compress --hessians H --method quip# --layers 0-3 --allow-partial --out CKPT  # others dense"))
    p.add_argument("--model", help="the model the Hessians were collected for: smollm2, gemma3, a local folder or "
                   "a hub id org/name (default: the model --hessians records in its hessians.json; another one is "
                   "refused)")
    p.add_argument("--hessians", required=True, help="folder written by caldera hessians")
    p.add_argument("--method", default="caldera", help="registered method (listed below with its parameters)")
    p.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="method parameter (repeatable), e.g. --param rank=64 --param l_bits=4",
    )
    p.add_argument("--preset", help="method preset (caldera: paper, authors-2025, 16bit-factors, ...; default: "
                   "none, the method's defaults listed below)")
    p.add_argument("--layers", help="only these decoder layers, e.g. 0,1,2 (default all)")
    p.add_argument("--ft-rank", type=int_option(0, meaning="leading rank kept trainable, at most the rank"),
                   default=0, help="trainable leading rank kept in fp32 (LoRA FT later)")
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the checkpoint an earlier run wrote at --out, and its per-layer folder OUT.layers "
                   "where that holds another method's or config's layers (both kept until the new checkpoint is "
                   "complete); a path that holds anything else, or an input of this command, is always refused")
    p.add_argument("--work-dir", help="per-layer results folder (default OUT.layers)")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="assemble even if some layers are missing (they stay dense); without it, --layers that leave "
        "layers uncompressed exit non-zero (the computed layers are kept)",
    )
    p.add_argument("--no-assemble", action="store_true", help="only write the per-layer files (no checkpoint)")
    p.add_argument("--allocation", help="per-matrix settings of a method that chooses them from the whole model "
                   "(caldera-rank-per-layer): the allocation.json of an earlier run "
                   "(default: WORK_DIR/allocation.json, "
                   "made there from every decoder layer's Hessians when missing)")
    p.add_argument("--json", action="store_true", help="print the result (layers, bits, checkpoint) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors only)")
    p.set_defaults(func=cmd_compress)
