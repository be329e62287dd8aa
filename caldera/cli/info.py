"""``caldera info``: provenance, bits, shapes, ranks and errors of a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from caldera.cli.common import CLIError, _emit, _example, guard_output, is_records_file, require_path

#: what a missing checkpoint argument is told
CHECKPOINT_FIX = "a checkpoint is the folder `caldera compress` writes (its --out)"


def cmd_info(args: argparse.Namespace) -> int:
    from caldera.pipeline.checkpoint import check_config, load_compressed, read_config
    from caldera.pipeline.models import is_checkpoint

    require_path(args.checkpoint, "checkpoint", "folder", CHECKPOINT_FIX)
    folder = Path(args.checkpoint)
    if not is_checkpoint(folder):
        raise CLIError(f"{folder} is not a compressed checkpoint (no caldera_config.json); run `caldera compress`")
    if args.out:
        guard_output(args.out, option="--out", kind="records file of caldera info",
                     same_kind=is_records_file("checkpoint", "method", "n_compressed_modules"),
                     inputs={"checkpoint": folder}, resumable=True)
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
    """``caldera info``'s lines: provenance (base model, calibration, caldera version, git commit), method, bits
    (formula and storage), modules and the error per matrix type."""
    b = info.get("bits") or {}
    skip = {"seed", "rht", "sigma_reg"}
    params = ", ".join(f"{k}={v}" for k, v in sorted(info["method_config"].items()) if k not in skip)
    bits = (f"{b['average_bits']:.3f} (paper formula), {b['storage_bits_per_weight']:.3f} as stored (codes, "
            f"scales, signs), {b['tensor_bits_per_weight']:.3f} in the tensor files"
            if "storage_bits_per_weight" in b else "not recorded")
    dense = info["dense_layers"]
    import textwrap

    from caldera.pipeline.checkpoint.card import card_facts

    # provenance: what info's keys (method, method_config, bits, dense_layers, provenance) say of the origin
    short = {"base model": "base model", "calibration": "calibration", "caldera version": "caldera",
             "git commit": "commit"}
    # one line each, not wrapped: paths and sha256 digests stay whole (copied, grepped)
    origin = [f"{short[label]:11s} {value}" for label, value in card_facts(info) if label in short]
    if not isinstance(info.get("provenance"), dict):
        origin = ["provenance  not recorded (a checkpoint written before caldera recorded it)"]
    lines = [f"checkpoint  {info['checkpoint']}",
             *origin,
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
        "quantizers": sorted({q for m in mods.values()
                              for q in (m["q_quantizer"], m.get("l_quantizer"), m.get("r_quantizer")) if q}),
        "dense_layers": cfg.get("dense_layers", []),
        "provenance": cfg.get("provenance"),  # None: written before provenance was recorded
        "error_by_linear": {
            k: {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)}
            for k, v in sorted(by_linear.items())
        },
    }
    if matrices:
        info["errors"] = errors
    return info



def add_parser(sub: Any, raw: Any) -> None:
    """This command's parser (``caldera COMMAND --help``)."""
    p = sub.add_parser(
        "info",
        help="provenance, bits, shapes, ranks and per-matrix errors of a checkpoint",
        description="Summarize a compressed checkpoint (verifies checksums first). Prints a short summary; "
        "--json prints the records, --out FILE writes them.",
        formatter_class=raw, epilog=_example("caldera info CKPT", "caldera info CKPT --matrices --json"),
    )
    p.add_argument("checkpoint", help="the checkpoint folder (what caldera compress --out writes)")
    p.add_argument("--matrices", action="store_true", help="list every matrix's errors")
    p.add_argument("--json", action="store_true", help="print the JSON records instead of the summary")
    p.add_argument("--out", help="write the JSON records here (default: none written)")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the verification (checksums, content manifest, fingerprints): summarize as stored")
    p.set_defaults(func=cmd_info)
